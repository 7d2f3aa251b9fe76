// Array kernels of the reference evaluator (eval/ops.h): the helpers the kernels share, strides,
// and constants. The kernels are in ops_elementwise.cc (elementwise ops, compare, convert,
// select, clamp), ops_data_movement.cc (broadcast, transpose, reshape, bitcast, slices, pad,
// concatenate, reverse, iota) and ops_dot.cc (dot).
#include "eval/ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/numerics.h"
#include "eval/ops_internal.h"

namespace weave::eval::ops {
namespace internal {

Value Empty(const Shape& out) {
  Value v;
  v.shape = out;
  const size_t n = static_cast<size_t>(out.ElementCount());
  switch (v.storage()) {
    case Storage::kFloat: v.f.resize(n); break;
    case Storage::kDouble: v.d.resize(n); break;
    case Storage::kInt: v.i.resize(n); break;
    case Storage::kComplex: v.c.resize(n); break;
    default: break;
  }
  return v;
}

// Gathers from `a` into a new contiguous value of shape `out`: element at output index idx comes
// from a's flat offset base + sum(idx[j] * strides[j]).
Value Gather(const Value& a, const Shape& out, const std::vector<int64_t>& strides, int64_t base) {
  Value r = Empty(out);
  const std::vector<int64_t> dstr = Strides(out.dims);
  ForStorage(a, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), base, strides, d.data(), 0, dstr, out.dims);
  });
  return r;
}

std::string TypeName(const Shape& s) { return std::string(PrimitiveTypeName(s.element_type)); }

}  // namespace internal

using absl::InvalidArgumentError;
using internal::Empty;
using internal::TypeName;

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t k = static_cast<int64_t>(dims.size()) - 2; k >= 0; --k) {
    s[static_cast<size_t>(k)] = s[static_cast<size_t>(k + 1)] * dims[static_cast<size_t>(k + 1)];
  }
  return s;
}

absl::StatusOr<Value> FromLiteral(const Literal& lit, const Shape& shape) {
  Value r = Empty(shape);
  if (lit.elided) return Value::Zeros(shape);  // values unknown: zeros, as XLA's parser does
  if (r.storage() == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat("constants of type ", TypeName(shape),
                                             " are not supported"));
  }
  const int64_t n = shape.ElementCount();
  if (r.storage() == Storage::kComplex) {
    // (re, im) pairs in lit.f; one pair (or one real value) fills every element.
    const int64_t pairs = static_cast<int64_t>(lit.f.size() / 2);
    if (lit.f.size() % 2 != 0 && lit.f.size() != 1) {
      return InvalidArgumentError("a complex constant needs (re, im) pairs");
    }
    if (pairs != n && pairs > 1) {
      return InvalidArgumentError(absl::StrCat("constant literal has ", pairs, " values but its shape ",
                                               shape.ToString(false), " has ", n));
    }
    for (int64_t q = 0; q < n; ++q) {
      const size_t src = pairs == n ? static_cast<size_t>(2 * q) : 0;
      const double im = lit.f.size() == 1 ? 0.0 : lit.f[src + 1];
      r.c[static_cast<size_t>(q)] = RoundComplex({lit.f[src], im}, shape.element_type);
    }
    return r;
  }
  const int64_t have = static_cast<int64_t>(lit.f.empty() ? lit.i.size() : lit.f.size());
  if (have != n && have != 1) {
    return InvalidArgumentError(absl::StrCat("constant literal has ", have,
                                             " values but its shape ", shape.ToString(false),
                                             " has ", n));
  }
  for (int64_t q = 0; q < n; ++q) {
    const int64_t src = have == 1 ? 0 : q;
    if (r.storage() == Storage::kInt) {
      r.i[static_cast<size_t>(q)] = WrapToType(lit.GetAsInt(src), shape.element_type);
    } else {
      r.SetDouble(q, lit.GetAsDouble(src));
    }
  }
  return r;
}

}  // namespace weave::eval::ops
