// Element types and shapes of XLA's HLO, as the text format writes them.
//
// Source: XLA's `xla_data.proto` PrimitiveType and `shape.h`/`layout.h`; the text syntax follows
// ../shared/specs/hlo-text-format.md §3.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weave {

// Every element type the text format can name. Only a subset has semantics in Weave (see
// IsSupportedByEvaluator in eval/); the others are parsed and kept so that later stages can reject
// them with a clear message.
enum class PrimitiveType : uint8_t {
  kInvalid,
  PRED,
  S1, S2, S4, S8, S16, S32, S64,
  U1, U2, U4, U8, U16, U32, U64,
  F16, BF16, F32, F64,
  F8E5M2, F8E4M3, F8E4M3FN, F8E4M3B11FNUZ, F8E3M4, F8E5M2FNUZ, F8E4M3FNUZ, F8E8M0FNU,
  F4E2M1FN, F6E3M2FN, F6E2M3FN,
  C64, C128,
  TOKEN, OPAQUE,
  TUPLE,  // not a text keyword: the type of a tuple shape
};

// Lower-case text name (`bf16`, `f8e4m3fn`, ...); "tuple" for TUPLE.
std::string_view PrimitiveTypeName(PrimitiveType t);
// Parses a text name; nullopt if unknown.
std::optional<PrimitiveType> ParsePrimitiveType(std::string_view name);
// Storage width in bits of one element (1 for PRED is reported as 8, as XLA stores pred in a byte).
// 0 for TOKEN/OPAQUE/TUPLE.
int BitWidth(PrimitiveType t);
bool IsFloatingPoint(PrimitiveType t);   // f16, bf16, f32, f64 and every f8/f6/f4 type
bool IsFp8(PrimitiveType t);             // any 8-bit float type
bool IsInteger(PrimitiveType t);         // s*, u*
bool IsSignedInteger(PrimitiveType t);   // s*
bool IsUnsignedInteger(PrimitiveType t); // u*
bool IsComplex(PrimitiveType t);
// Float types with +-inf: f16, bf16, f32, f64, f8e5m2, f8e4m3, f8e3m4 (not the FN / FNUZ / E8M0
// FP8 types, nor FP6 / FP4).
bool HasInfinity(PrimitiveType t);
bool IsArrayType(PrimitiveType t);       // not TOKEN, OPAQUE, TUPLE

// A layout: minor_to_major plus the optional extensions after ':' (tiles, memory space, ...),
// which Weave keeps verbatim as `suffix` (the text after ':' without the closing brace).
struct Layout {
  std::vector<int64_t> minor_to_major;
  std::string suffix;
  bool operator==(const Layout& o) const {
    return minor_to_major == o.minor_to_major && suffix == o.suffix;
  }
};

// An array, tuple or token shape.
//  - Arrays: element_type, dims (elements per dimension; -1 for an unbounded dynamic `?` dim),
//    dynamic[i] true for `<=N` bounded dynamic dims (dims[i] is then the bound), optional layout.
//  - Tuples: element_type == TUPLE, tuple_shapes holds the elements.
struct Shape {
  PrimitiveType element_type = PrimitiveType::kInvalid;
  std::vector<int64_t> dims;
  std::vector<bool> dynamic;  // empty or same size as dims
  std::optional<Layout> layout;
  std::vector<Shape> tuple_shapes;
  // XLA's buffer shape `b(f32[32])`: an array that custom-calls write in place (Pin, Unpin,
  // CreateBuffer; hlo_verifier.cc VerifyBuffers). Printed back as written; comparisons ignore it.
  bool buffer = false;

  Shape() = default;
  // Array shape with the default (descending) layout.
  Shape(PrimitiveType t, std::vector<int64_t> d);
  static Shape Tuple(std::vector<Shape> elements);
  static Shape Scalar(PrimitiveType t) { return Shape(t, {}); }

  bool IsTuple() const { return element_type == PrimitiveType::TUPLE; }
  bool IsArray() const { return IsArrayType(element_type); }
  bool IsToken() const { return element_type == PrimitiveType::TOKEN; }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  // Product of dims (1 for a scalar); 0 for tuples/tokens. Saturates at INT64_MAX when the
  // product overflows int64 (the parser rejects such shapes; see CheckedElementCount).
  int64_t ElementCount() const;
  // Bytes of the array data (ElementCount * bit width / 8, rounded up); tuples: sum of elements.
  // Saturates at INT64_MAX on int64 overflow (see CheckedByteSize).
  int64_t ByteSize() const;
  // Overflow-checked forms: nullopt when the element count (product of dims) or the byte size
  // (element count * bit width / 8, summed over tuple elements) does not fit in int64. XLA's
  // ShapeUtil rejects such shapes the same way (ShapeUtil::ValidateShape).
  std::optional<int64_t> CheckedElementCount() const;
  std::optional<int64_t> CheckedByteSize() const;
  // minor_to_major, or the default descending order when no layout is present.
  std::vector<int64_t> MinorToMajor() const;
  bool HasDefaultLayout() const;
  // Sets the default descending layout (recursively for tuples).
  void SetDefaultLayout();
  // Same element type and dims (recursively for tuples), ignoring layouts.
  bool Compatible(const Shape& o) const;
  // Compatible and same layouts (a missing layout equals the default layout).
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  // Same dims, other element type (layout kept). Tuples: applied to every leaf.
  Shape WithElementType(PrimitiveType t) const;
  // Leaves (arrays, tokens, opaques) of the shape: 1 for a non-tuple; a tuple sums its elements'
  // (an empty tuple has none).
  int64_t LeafCount() const;

  // XLA text: `bf16[2,16,64]{2,1,0}`, `(f32[], s32[4]{0})`. With print_layout false the layout
  // is omitted (signatures and program shapes).
  std::string ToString(bool print_layout = true) const;
  // The same text appended to `*out` (no string of its own: the printer's per-instruction path).
  void AppendTo(std::string* out, bool print_layout = true) const;
};

}  // namespace weave
