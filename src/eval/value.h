// Runtime values of Weave's reference evaluator: arrays (a Shape plus element storage) and tuples.
//
// Storage convention (chosen so that every element type is held exactly):
//  - f16, bf16, f32 and every 8-bit float type (f8e4m3fn, f8e5m2, ...): `f` (float). The values
//    are always already rounded to the element type, so a bf16 array holds only bf16 values.
//  - f64: `d` (double).
//  - pred (0 or 1) and every integer type s*/u*: `i` (int64_t). Signed values are kept
//    sign-extended, unsigned values zero-extended in the type's range (u64 is bit-cast).
//  - c64 and c128: `c` (std::complex<double>); a c64 value's parts are always f32 values.
//  - tuples: `elements` (shared, immutable once built).
// Arrays are stored flat in row-major (logical, descending dimension) order regardless of the
// shape's layout: layouts have no effect on values in XLA's semantics.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/types.h"

namespace weave::eval {

struct Value;
// Values are shared between instructions (get-tuple-element, while state, tuple) without copies.
using ValuePtr = std::shared_ptr<const Value>;

// Which storage vector an element type uses.
enum class Storage : uint8_t { kFloat, kDouble, kInt, kComplex, kTuple, kNone };
// kFloat for f16/bf16/f32/fp8 (any float type of 32 bits or fewer), kDouble for f64, kInt for
// pred and integers, kComplex for c64/c128, kTuple for tuples, kNone for token/opaque.
Storage StorageFor(PrimitiveType t);

struct Value {
  Shape shape;  // array or tuple shape (layout ignored)
  std::vector<float> f;
  std::vector<double> d;
  std::vector<int64_t> i;
  std::vector<std::complex<double>> c;
  std::vector<ValuePtr> elements;  // tuple elements

  Storage storage() const { return StorageFor(shape.element_type); }
  int64_t size() const;  // element count of an array; number of elements of a tuple
  // Element `k` (flat row-major) as double / int64 regardless of storage (floats convert exactly,
  // NaN/inf kept; for int storage the value is returned as is; a complex value's real part).
  double GetDouble(int64_t k) const;
  int64_t GetInt(int64_t k) const;
  // Sets element `k`, rounding/wrapping to the element type (RoundToType / WrapToType; a complex
  // element gets the value as its real part and 0 as its imaginary part).
  void SetDouble(int64_t k, double v);
  void SetInt(int64_t k, int64_t v);

  // A zero-filled array of `shape` (tuples: zero-filled elements, recursively).
  static Value Zeros(const Shape& shape);
  // Short description: shape plus the first `max_values` elements, e.g.
  // `bf16[2,3] {0.5, -1, 0.25, ...}`.
  std::string ToString(int max_values = 8) const;
};

// Builds a shared value (convenience for std::make_shared<const Value>(std::move(v))).
ValuePtr Share(Value v);

// Flattens a (possibly nested) tuple into its array leaves, in order. An array yields itself.
void FlattenLeaves(const ValuePtr& v, std::vector<ValuePtr>* out);

// `v` is an array holding exactly `shape`'s element count in the storage of `shape`'s element
// type (shapes of token/opaque type: any array). True for a shape with a dynamic or unknown dim,
// whose size only the run knows; false for a tuple value or a shape whose count overflows int64.
// The evaluator checks every instruction's value with it, so that a wrong-sized result is an
// error naming the instruction, not an out-of-bounds read in its users.
bool HoldsShape(const Value& v, const Shape& shape);

// Exact equality of two values (same shape ignoring layout; same element bits, with NaN == NaN).
bool BitwiseEqual(const Value& a, const Value& b);

}  // namespace weave::eval
