// Array kernels of the reference evaluator (internal to src/eval). Each takes operand values and
// the result shape and returns the result; numerics per numerics.h. Errors (InvalidArgument) for
// unsupported element types or inconsistent shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval::ops {

// Row-major strides of `dims` (elements).
std::vector<int64_t> Strides(const std::vector<int64_t>& dims);

// Elementwise ops. Binary/ternary operands must have the result's dims (clamp/select also accept
// scalar bounds/predicate).
absl::StatusOr<Value> Unary(HloOpcode op, const Value& a, const Shape& out);
absl::StatusOr<Value> Binary(HloOpcode op, const Value& a, const Value& b, const Shape& out);
absl::StatusOr<Value> Compare(ComparisonDirection dir, bool total_order, const Value& a,
                              const Value& b, const Shape& out);
absl::StatusOr<Value> Convert(const Value& a, const Shape& out);
absl::StatusOr<Value> BitcastConvert(const Value& a, const Shape& out);
absl::StatusOr<Value> Select(const Value& p, const Value& t, const Value& f, const Shape& out);
absl::StatusOr<Value> Clamp(const Value& lo, const Value& x, const Value& hi, const Shape& out);
// Scalar combine of two elements of type t (the reduction fast path): add, multiply, maximum,
// minimum, and, or, xor; the result is rounded/wrapped to t.
double CombineFloat(HloOpcode op, double a, double b, PrimitiveType t);
int64_t CombineInt(HloOpcode op, int64_t a, int64_t b, PrimitiveType t);

// Data movement.
Value Broadcast(const Value& a, const Shape& out, const std::vector<int64_t>& dims);
Value Transpose(const Value& a, const Shape& out, const std::vector<int64_t>& perm);
Value Reshape(const Value& a, const Shape& out);  // row-major reinterpretation
// Physical (layout-aware) reinterpretation; `from` gives a's layout (the operand instruction's
// shape, since input values carry no layout).
Value Bitcast(const Value& a, const Shape& from, const Shape& out);
Value Slice(const Value& a, const Shape& out, const std::vector<SliceDim>& slice);
// Start indices are clamped to [0, dim - size] as XLA does.
Value DynamicSlice(const Value& a, const Shape& out, std::vector<int64_t> starts);
Value DynamicUpdateSlice(const Value& a, const Value& update, std::vector<int64_t> starts);
Value Pad(const Value& a, const Value& pad_value, const Shape& out,
          const std::vector<PadDim>& padding);
Value Concatenate(const std::vector<const Value*>& parts, const Shape& out, int64_t dim);
Value Reverse(const Value& a, const std::vector<int64_t>& dims);
Value Iota(const Shape& out, int64_t dim);
// Gathers `a` into the order [kept dims..., reduced dims...] (a contiguous [O, R] matrix).
Value MoveReducedDimsLast(const Value& a, const std::vector<int64_t>& reduced, int64_t* outer,
                          int64_t* inner);
// dot with XLA DotDimensionNumbers: result dims = batch, lhs free, rhs free. Floats go through
// cblas_sgemm (f32 accumulation) or cblas_dgemm (f64), integers through int64 loops (wrapping).
absl::StatusOr<Value> Dot(const Value& a, const Value& b, const Shape& out, const DotDims& dims);
// One element of `compare` (XLA's Compare): integers as stored (u64 compared unsigned; the other
// unsigned types are zero-extended, so signed order is theirs), floats in IEEE order or, with
// total_order (type=TOTALORDER), in TotalOrderKey order. The array kernel Compare and the
// scalar fast paths (sort, TopK, select-and-scatter, scalar_program.h) share these.
bool CompareInts(ComparisonDirection dir, int64_t x, int64_t y, bool u64);
bool CompareFloats(ComparisonDirection dir, double x, double y, bool total_order);
// XLA's total order of floats as an integer key: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN
// (the sign-magnitude bit pattern of the double read as two's complement).
int64_t TotalOrderKey(double v);

// A computation whose root is compare(parameter 0, parameter 1): its direction and whether it
// is TOTALORDER; nullopt for anything else. The sort, TopK and select-and-scatter fast paths.
struct ParamCompare {
  ComparisonDirection dir;
  bool total_order;
};
std::optional<ParamCompare> MatchParamCompare(const HloComputation& c);

// A constant's literal as a value. An elided `{...}` literal (values not dumped) gives zeros,
// as XLA's text parser does; RunModule reports a warning for it.
absl::StatusOr<Value> FromLiteral(const Literal& lit, const Shape& shape);

}  // namespace weave::eval::ops
