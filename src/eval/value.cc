// Runtime values of the reference evaluator.
#include "eval/value.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "eval/numerics.h"

namespace weave::eval {

Storage StorageFor(PrimitiveType t) {
  if (t == PrimitiveType::TUPLE) return Storage::kTuple;
  if (t == PrimitiveType::F64) return Storage::kDouble;
  if (t == PrimitiveType::C64 || t == PrimitiveType::C128) return Storage::kComplex;
  if (t == PrimitiveType::PRED || IsInteger(t)) return Storage::kInt;
  if (IsFloatingPoint(t) && BitWidth(t) <= 32) return Storage::kFloat;
  return Storage::kNone;
}

int64_t Value::size() const {
  if (shape.IsTuple()) return static_cast<int64_t>(elements.size());
  return shape.ElementCount();
}

double Value::GetDouble(int64_t k) const {
  switch (storage()) {
    case Storage::kFloat: return f[static_cast<size_t>(k)];
    case Storage::kDouble: return d[static_cast<size_t>(k)];
    case Storage::kInt: return IntegerToDouble(i[static_cast<size_t>(k)], shape.element_type);
    case Storage::kComplex: return c[static_cast<size_t>(k)].real();
    default: return 0;
  }
}

int64_t Value::GetInt(int64_t k) const {
  switch (storage()) {
    case Storage::kFloat: return FloatToInteger(f[static_cast<size_t>(k)], PrimitiveType::S64);
    case Storage::kDouble: return FloatToInteger(d[static_cast<size_t>(k)], PrimitiveType::S64);
    case Storage::kInt: return i[static_cast<size_t>(k)];
    case Storage::kComplex: return FloatToInteger(c[static_cast<size_t>(k)].real(), PrimitiveType::S64);
    default: return 0;
  }
}

void Value::SetDouble(int64_t k, double v) {
  switch (storage()) {
    case Storage::kFloat:
      f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(v, shape.element_type));
      break;
    case Storage::kDouble: d[static_cast<size_t>(k)] = v; break;
    case Storage::kInt:
      i[static_cast<size_t>(k)] = FloatToInteger(v, shape.element_type);
      break;
    case Storage::kComplex: c[static_cast<size_t>(k)] = RoundComplex({v, 0.0}, shape.element_type); break;
    default: break;
  }
}

void Value::SetInt(int64_t k, int64_t v) {
  switch (storage()) {
    case Storage::kFloat:
      f[static_cast<size_t>(k)] =
          static_cast<float>(RoundToType(static_cast<double>(v), shape.element_type));
      break;
    case Storage::kDouble: d[static_cast<size_t>(k)] = static_cast<double>(v); break;
    case Storage::kInt: i[static_cast<size_t>(k)] = WrapToType(v, shape.element_type); break;
    case Storage::kComplex:
      c[static_cast<size_t>(k)] = RoundComplex({static_cast<double>(v), 0.0}, shape.element_type);
      break;
    default: break;
  }
}

Value Value::Zeros(const Shape& shape) {
  Value v;
  v.shape = shape;
  if (shape.IsTuple()) {
    for (const Shape& s : shape.tuple_shapes) v.elements.push_back(Share(Zeros(s)));
    return v;
  }
  const size_t n = static_cast<size_t>(shape.IsArray() ? shape.ElementCount() : 0);
  switch (v.storage()) {
    case Storage::kFloat: v.f.assign(n, 0.0f); break;
    case Storage::kDouble: v.d.assign(n, 0.0); break;
    case Storage::kInt: v.i.assign(n, 0); break;
    case Storage::kComplex: v.c.assign(n, {0.0, 0.0}); break;
    default: break;
  }
  return v;
}

std::string Value::ToString(int max_values) const {
  if (shape.IsTuple()) {
    std::string s = "(";
    for (size_t k = 0; k < elements.size(); ++k) {
      if (k) s += ", ";
      s += elements[k]->ToString(max_values);
    }
    return s + ")";
  }
  std::string s = shape.ToString(false) + " {";
  const int64_t n = size();
  for (int64_t k = 0; k < n && k < max_values; ++k) {
    if (k) s += ", ";
    if (storage() == Storage::kInt) {
      if (shape.element_type == PrimitiveType::U64) {
        absl::StrAppend(&s, static_cast<uint64_t>(i[static_cast<size_t>(k)]));
      } else {
        absl::StrAppend(&s, i[static_cast<size_t>(k)]);
      }
    } else if (storage() == Storage::kComplex) {
      const std::complex<double> z = c[static_cast<size_t>(k)];
      absl::StrAppend(&s, absl::StrFormat("(%.6g,%.6g)", z.real(), z.imag()));
    } else {
      absl::StrAppend(&s, absl::StrFormat("%.6g", GetDouble(k)));
    }
  }
  if (n > max_values) s += ", ...";
  return s + "}";
}

ValuePtr Share(Value v) { return std::make_shared<const Value>(std::move(v)); }

void FlattenLeaves(const ValuePtr& v, std::vector<ValuePtr>* out) {
  if (v->shape.IsTuple()) {
    for (const ValuePtr& e : v->elements) FlattenLeaves(e, out);
  } else {
    out->push_back(v);
  }
}

bool BitwiseEqual(const Value& a, const Value& b) {
  if (!a.shape.Compatible(b.shape)) return false;
  if (a.shape.IsTuple()) {
    if (a.elements.size() != b.elements.size()) return false;
    for (size_t k = 0; k < a.elements.size(); ++k) {
      if (!BitwiseEqual(*a.elements[k], *b.elements[k])) return false;
    }
    return true;
  }
  if (a.i != b.i) return false;
  if (a.f.size() != b.f.size() || a.d.size() != b.d.size()) return false;
  for (size_t k = 0; k < a.f.size(); ++k) {
    if (std::isnan(a.f[k]) && std::isnan(b.f[k])) continue;
    if (std::memcmp(&a.f[k], &b.f[k], 4) != 0) return false;
  }
  for (size_t k = 0; k < a.d.size(); ++k) {
    if (std::isnan(a.d[k]) && std::isnan(b.d[k])) continue;
    if (std::memcmp(&a.d[k], &b.d[k], 8) != 0) return false;
  }
  if (a.c.size() != b.c.size()) return false;
  for (size_t k = 0; k < a.c.size(); ++k) {
    for (int part = 0; part < 2; ++part) {
      const double x = part == 0 ? a.c[k].real() : a.c[k].imag();
      const double y = part == 0 ? b.c[k].real() : b.c[k].imag();
      if (std::isnan(x) && std::isnan(y)) continue;
      if (std::memcmp(&x, &y, 8) != 0) return false;
    }
  }
  return true;
}

bool HoldsShape(const Value& v, const Shape& shape) {
  if (!v.shape.IsArray()) return false;
  // A dynamic dim's size is known at run time only: such a shape is not checked.
  for (size_t i = 0; i < shape.dims.size(); ++i) {
    if (shape.dims[i] < 0 || (i < shape.dynamic.size() && shape.dynamic[i])) return true;
  }
  const std::optional<int64_t> n = shape.CheckedElementCount();
  if (!n) return false;
  const size_t want = static_cast<size_t>(*n);
  switch (StorageFor(shape.element_type)) {
    case Storage::kFloat: return v.f.size() == want;
    case Storage::kDouble: return v.d.size() == want;
    case Storage::kInt: return v.i.size() == want;
    case Storage::kComplex: return v.c.size() == want;
    default: return true;
  }
}

}  // namespace weave::eval
