#include "hlo/types.h"

#include <array>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>


namespace weave {
namespace {

struct TypeInfo {
  PrimitiveType type;
  std::string_view name;
  int bits;
};

constexpr std::array<TypeInfo, 36> kTypes = {{
    {PrimitiveType::kInvalid, "invalid", 0},
    {PrimitiveType::PRED, "pred", 8},
    {PrimitiveType::S1, "s1", 1},
    {PrimitiveType::S2, "s2", 2},
    {PrimitiveType::S4, "s4", 4},
    {PrimitiveType::S8, "s8", 8},
    {PrimitiveType::S16, "s16", 16},
    {PrimitiveType::S32, "s32", 32},
    {PrimitiveType::S64, "s64", 64},
    {PrimitiveType::U1, "u1", 1},
    {PrimitiveType::U2, "u2", 2},
    {PrimitiveType::U4, "u4", 4},
    {PrimitiveType::U8, "u8", 8},
    {PrimitiveType::U16, "u16", 16},
    {PrimitiveType::U32, "u32", 32},
    {PrimitiveType::U64, "u64", 64},
    {PrimitiveType::F16, "f16", 16},
    {PrimitiveType::BF16, "bf16", 16},
    {PrimitiveType::F32, "f32", 32},
    {PrimitiveType::F64, "f64", 64},
    {PrimitiveType::F8E5M2, "f8e5m2", 8},
    {PrimitiveType::F8E4M3, "f8e4m3", 8},
    {PrimitiveType::F8E4M3FN, "f8e4m3fn", 8},
    {PrimitiveType::F8E4M3B11FNUZ, "f8e4m3b11fnuz", 8},
    {PrimitiveType::F8E3M4, "f8e3m4", 8},
    {PrimitiveType::F8E5M2FNUZ, "f8e5m2fnuz", 8},
    {PrimitiveType::F8E4M3FNUZ, "f8e4m3fnuz", 8},
    {PrimitiveType::F8E8M0FNU, "f8e8m0fnu", 8},
    {PrimitiveType::F4E2M1FN, "f4e2m1fn", 4},
    {PrimitiveType::F6E3M2FN, "f6e3m2fn", 6},
    {PrimitiveType::F6E2M3FN, "f6e2m3fn", 6},
    {PrimitiveType::C64, "c64", 64},
    {PrimitiveType::C128, "c128", 128},
    {PrimitiveType::TOKEN, "token", 0},
    {PrimitiveType::OPAQUE, "opaque", 0},
    {PrimitiveType::TUPLE, "tuple", 0},
}};

const TypeInfo& Info(PrimitiveType t) { return kTypes[static_cast<size_t>(t)]; }

}  // namespace

std::string_view PrimitiveTypeName(PrimitiveType t) { return Info(t).name; }

std::optional<PrimitiveType> ParsePrimitiveType(std::string_view name) {
  for (const TypeInfo& ti : kTypes) {
    if (ti.type == PrimitiveType::kInvalid || ti.type == PrimitiveType::TUPLE) continue;
    if (ti.name == name) return ti.type;
  }
  return std::nullopt;
}

int BitWidth(PrimitiveType t) { return Info(t).bits; }

bool IsFloatingPoint(PrimitiveType t) {
  return t >= PrimitiveType::F16 && t <= PrimitiveType::F6E2M3FN;
}
bool IsFp8(PrimitiveType t) {
  return t >= PrimitiveType::F8E5M2 && t <= PrimitiveType::F8E8M0FNU;
}
bool IsSignedInteger(PrimitiveType t) {
  return t >= PrimitiveType::S1 && t <= PrimitiveType::S64;
}
bool IsUnsignedInteger(PrimitiveType t) {
  return t >= PrimitiveType::U1 && t <= PrimitiveType::U64;
}
bool IsInteger(PrimitiveType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }
bool IsComplex(PrimitiveType t) { return t == PrimitiveType::C64 || t == PrimitiveType::C128; }
bool HasInfinity(PrimitiveType t) {
  return t == PrimitiveType::F16 || t == PrimitiveType::BF16 || t == PrimitiveType::F32 ||
         t == PrimitiveType::F64 || t == PrimitiveType::F8E5M2 || t == PrimitiveType::F8E4M3 ||
         t == PrimitiveType::F8E3M4;
}
bool IsArrayType(PrimitiveType t) {
  return t != PrimitiveType::kInvalid && t != PrimitiveType::TOKEN &&
         t != PrimitiveType::OPAQUE && t != PrimitiveType::TUPLE;
}

Shape::Shape(PrimitiveType t, std::vector<int64_t> d) : element_type(t), dims(std::move(d)) {
  if (IsArrayType(t)) SetDefaultLayout();
}

Shape Shape::Tuple(std::vector<Shape> elements) {
  Shape s;
  s.element_type = PrimitiveType::TUPLE;
  s.tuple_shapes = std::move(elements);
  return s;
}

std::optional<int64_t> Shape::CheckedElementCount() const {
  if (!IsArray()) return 0;
  for (int64_t d : dims) {
    if (d <= 0) return 0;  // empty, or an unbounded dynamic `?` dim (-1)
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::optional<int64_t> Shape::CheckedByteSize() const {
  if (IsTuple()) {
    int64_t total = 0;
    for (const Shape& s : tuple_shapes) {
      std::optional<int64_t> b = s.CheckedByteSize();
      if (!b || __builtin_add_overflow(total, *b, &total)) return std::nullopt;
    }
    return total;
  }
  if (!IsArray()) return 0;
  std::optional<int64_t> n = CheckedElementCount();
  if (!n) return std::nullopt;
  // ceil(n * bits / 8) without forming n * bits: whole groups of 8 elements take `bits` bytes.
  const int64_t bits = BitWidth(element_type);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(*n / 8, bits, &bytes)) return std::nullopt;
  const int64_t rest = ((*n % 8) * bits + 7) / 8;
  if (__builtin_add_overflow(bytes, rest, &bytes)) return std::nullopt;
  return bytes;
}

int64_t Shape::ElementCount() const {
  return CheckedElementCount().value_or(std::numeric_limits<int64_t>::max());
}

int64_t Shape::ByteSize() const {
  return CheckedByteSize().value_or(std::numeric_limits<int64_t>::max());
}

std::vector<int64_t> Shape::MinorToMajor() const {
  if (layout && layout->minor_to_major.size() == dims.size()) return layout->minor_to_major;
  std::vector<int64_t> m2m(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) m2m[i] = static_cast<int64_t>(dims.size() - 1 - i);
  return m2m;
}

bool Shape::HasDefaultLayout() const {
  if (!layout) return true;
  if (!layout->suffix.empty()) return false;
  if (layout->minor_to_major.size() != dims.size()) return layout->minor_to_major.empty();
  for (size_t i = 0; i < dims.size(); ++i) {
    if (layout->minor_to_major[i] != static_cast<int64_t>(dims.size() - 1 - i)) return false;
  }
  return true;
}

void Shape::SetDefaultLayout() {
  if (IsTuple()) {
    for (Shape& s : tuple_shapes) s.SetDefaultLayout();
    return;
  }
  if (!IsArray()) return;
  Layout l;
  l.minor_to_major.resize(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    l.minor_to_major[i] = static_cast<int64_t>(dims.size() - 1 - i);
  }
  layout = std::move(l);
}

bool Shape::Compatible(const Shape& o) const {
  if (element_type != o.element_type) return false;
  if (IsTuple()) {
    if (tuple_shapes.size() != o.tuple_shapes.size()) return false;
    for (size_t i = 0; i < tuple_shapes.size(); ++i) {
      if (!tuple_shapes[i].Compatible(o.tuple_shapes[i])) return false;
    }
    return true;
  }
  return dims == o.dims;
}

int64_t Shape::LeafCount() const {
  if (!IsTuple()) return 1;
  int64_t n = 0;
  for (const Shape& e : tuple_shapes) n += e.LeafCount();
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (!Compatible(o)) return false;
  if (IsTuple()) {
    for (size_t i = 0; i < tuple_shapes.size(); ++i) {
      if (tuple_shapes[i] != o.tuple_shapes[i]) return false;
    }
    return true;
  }
  if (!IsArray()) return true;
  std::string sa = layout ? layout->suffix : "", sb = o.layout ? o.layout->suffix : "";
  return MinorToMajor() == o.MinorToMajor() && sa == sb;
}

Shape Shape::WithElementType(PrimitiveType t) const {
  Shape s = *this;
  if (IsTuple()) {
    for (Shape& e : s.tuple_shapes) e = e.WithElementType(t);
    return s;
  }
  s.element_type = t;
  return s;
}

namespace {

void AppendInt(std::string* out, int64_t v) {
  char digits[24];
  const char* end = std::to_chars(digits, digits + sizeof(digits), v).ptr;
  out->append(digits, static_cast<size_t>(end - digits));
}

// AppendShape's text of an array shape, written into a stack buffer and appended once: the
// common shape (a type, a few dims, a layout) costs one append, not a push_back per character.
// False (nothing written) when the text might not fit the buffer; AppendShape then writes it
// piece by piece.
bool AppendArrayShapeFast(std::string* out, const Shape& s, bool print_layout) {
  constexpr size_t kBuffer = 256;
  const std::string_view type = PrimitiveTypeName(s.element_type);
  const bool layout = print_layout && s.layout && (!s.dims.empty() || !s.layout->suffix.empty());
  // Each number takes at most 20 characters and its separator one, "<=" two more.
  const size_t bound = type.size() + 2 + 23 * s.dims.size() +
                       (layout ? 3 + 21 * s.layout->minor_to_major.size() +
                                     s.layout->suffix.size()
                               : 0);
  if (bound > kBuffer) return false;
  char buf[kBuffer];
  char* p = buf;
  std::memcpy(p, type.data(), type.size());
  p += type.size();
  *p++ = '[';
  for (size_t i = 0; i < s.dims.size(); ++i) {
    if (i > 0) *p++ = ',';
    if (s.dims[i] < 0) {
      *p++ = '?';
      continue;
    }
    if (i < s.dynamic.size() && s.dynamic[i]) {
      *p++ = '<';
      *p++ = '=';
    }
    p = std::to_chars(p, buf + kBuffer, s.dims[i]).ptr;
  }
  *p++ = ']';
  if (layout) {
    // Scalars print a layout only when it carries extensions.
    *p++ = '{';
    for (size_t i = 0; i < s.layout->minor_to_major.size(); ++i) {
      if (i > 0) *p++ = ',';
      p = std::to_chars(p, buf + kBuffer, s.layout->minor_to_major[i]).ptr;
    }
    if (!s.layout->suffix.empty()) {
      *p++ = ':';
      std::memcpy(p, s.layout->suffix.data(), s.layout->suffix.size());
      p += s.layout->suffix.size();
    }
    *p++ = '}';
  }
  out->append(buf, static_cast<size_t>(p - buf));
  return true;
}

// Shape::ToString into `out`, without a string per piece (shapes are printed for every
// instruction the printer writes and for every key CSE makes).
void AppendShape(std::string* out, const Shape& s, bool print_layout) {
  if (s.buffer) {
    Shape inner = s;
    inner.buffer = false;
    out->append("b(");
    AppendShape(out, inner, print_layout);
    out->push_back(')');
    return;
  }
  if (s.IsTuple()) {
    out->push_back('(');
    for (size_t i = 0; i < s.tuple_shapes.size(); ++i) {
      if (i > 0) out->append(", ");
      if (i > 0 && i % 5 == 0) {
        out->append("/*index=");
        AppendInt(out, static_cast<int64_t>(i));
        out->append("*/");
      }
      AppendShape(out, s.tuple_shapes[i], print_layout);
    }
    out->push_back(')');
    return;
  }
  if (s.IsArray() && AppendArrayShapeFast(out, s, print_layout)) return;
  out->append(PrimitiveTypeName(s.element_type));
  if (s.IsToken() || s.element_type == PrimitiveType::OPAQUE) {
    out->append("[]");  // XLA prints `token[]` and `opaque[]`
    return;
  }
  if (!s.IsArray()) return;
  out->push_back('[');
  for (size_t i = 0; i < s.dims.size(); ++i) {
    if (i > 0) out->push_back(',');
    const bool dyn = i < s.dynamic.size() && s.dynamic[i];
    if (s.dims[i] < 0) {
      out->push_back('?');
    } else {
      if (dyn) out->append("<=");
      AppendInt(out, s.dims[i]);
    }
  }
  out->push_back(']');
  if (print_layout && s.layout) {
    // Scalars print a layout only when it carries extensions.
    if (!s.dims.empty() || !s.layout->suffix.empty()) {
      out->push_back('{');
      for (size_t i = 0; i < s.layout->minor_to_major.size(); ++i) {
        if (i > 0) out->push_back(',');
        AppendInt(out, s.layout->minor_to_major[i]);
      }
      if (!s.layout->suffix.empty()) {
        out->push_back(':');
        out->append(s.layout->suffix);
      }
      out->push_back('}');
    }
  }
}

}  // namespace

std::string Shape::ToString(bool print_layout) const {
  std::string out;
  out.reserve(32);
  AppendTo(&out, print_layout);
  return out;
}

void Shape::AppendTo(std::string* out, bool print_layout) const {
  AppendShape(out, *this, print_layout);
}

}  // namespace weave
