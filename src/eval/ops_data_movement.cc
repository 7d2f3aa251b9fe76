// The evaluator's data-movement kernels (eval/ops.h): broadcast, transpose, reshape, bitcast,
// slice, dynamic-slice, dynamic-update-slice, pad, concatenate, reverse, iota, and the reduced-dims
// gather of reductions.
#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "eval/ops_internal.h"

namespace weave::eval::ops {

using absl::InvalidArgumentError;
using internal::Empty;
using internal::ForStorage;
using internal::Gather;
using internal::StridedCopy;

Value Broadcast(const Value& a, const Shape& out, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(out.dims.size(), 0);
  const std::vector<int64_t> as = Strides(a.shape.dims);
  for (size_t i = 0; i < dims.size() && i < as.size(); ++i) {
    strides[static_cast<size_t>(dims[i])] = a.shape.dims[i] == 1 ? 0 : as[i];
  }
  return Gather(a, out, strides, 0);
}

Value Transpose(const Value& a, const Shape& out, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  std::vector<int64_t> strides(out.dims.size());
  for (size_t j = 0; j < perm.size(); ++j) strides[j] = as[static_cast<size_t>(perm[j])];
  return Gather(a, out, strides, 0);
}

Value Reshape(const Value& a, const Shape& out) {
  Value r = a;
  r.shape = out;
  return r;
}

Value Bitcast(const Value& a, const Shape& from, const Shape& out) {
  // Logical -> physical order of a (major-to-minor), reinterpret, physical -> logical of out.
  auto major_to_minor = [](const Shape& s) {
    std::vector<int64_t> m2m = s.MinorToMajor();
    std::reverse(m2m.begin(), m2m.end());
    return m2m;
  };
  const std::vector<int64_t> am = major_to_minor(from), om = major_to_minor(out);
  bool a_identity = true, o_identity = true;
  for (size_t k = 0; k < am.size(); ++k) a_identity &= am[k] == static_cast<int64_t>(k);
  for (size_t k = 0; k < om.size(); ++k) o_identity &= om[k] == static_cast<int64_t>(k);
  if (a_identity && o_identity) return Reshape(a, out);
  // Physical array of a: dims a.dims[am[k]].
  Shape phys = a.shape;
  phys.layout.reset();
  phys.dims.clear();
  for (int64_t d : am) phys.dims.push_back(a.shape.dims[static_cast<size_t>(d)]);
  Value p = a_identity ? a : Transpose(a, phys, am);
  // Out physical dims: out.dims[om[k]]; logical out[idx] = phys_out[idx permuted].
  Shape ophys = out;
  ophys.layout.reset();
  ophys.dims.clear();
  for (int64_t d : om) ophys.dims.push_back(out.dims[static_cast<size_t>(d)]);
  p.shape = ophys;
  if (o_identity) {
    p.shape = out;
    return p;
  }
  // inverse permutation: logical dim om[k] is physical dim k.
  std::vector<int64_t> inv(om.size());
  for (size_t k = 0; k < om.size(); ++k) inv[static_cast<size_t>(om[k])] = static_cast<int64_t>(k);
  return Transpose(p, out, inv);
}

Value Slice(const Value& a, const Shape& out, const std::vector<SliceDim>& slice) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  std::vector<int64_t> strides(as.size());
  int64_t base = 0;
  for (size_t j = 0; j < as.size(); ++j) {
    base += slice[j].start * as[j];
    strides[j] = as[j] * slice[j].stride;
  }
  return Gather(a, out, strides, base);
}

Value DynamicSlice(const Value& a, const Shape& out, std::vector<int64_t> starts) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  int64_t base = 0;
  for (size_t j = 0; j < as.size(); ++j) {
    starts[j] = std::clamp<int64_t>(starts[j], 0, a.shape.dims[j] - out.dims[j]);
    base += starts[j] * as[j];
  }
  return Gather(a, out, as, base);
}

Value DynamicUpdateSlice(const Value& a, const Value& update, std::vector<int64_t> starts) {
  Value r = a;
  const std::vector<int64_t> rs = Strides(a.shape.dims), us = Strides(update.shape.dims);
  int64_t base = 0;
  for (size_t j = 0; j < rs.size(); ++j) {
    starts[j] = std::clamp<int64_t>(starts[j], 0, a.shape.dims[j] - update.shape.dims[j]);
    base += starts[j] * rs[j];
  }
  ForStorage(update, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), 0, us, d.data(), base, rs, update.shape.dims);
  });
  return r;
}

Value Pad(const Value& a, const Value& pad_value, const Shape& out,
          const std::vector<PadDim>& padding) {
  Value r = Broadcast(pad_value, out, {});
  const size_t rank = a.shape.dims.size();
  const std::vector<int64_t> as = Strides(a.shape.dims), rs = Strides(out.dims);
  std::vector<int64_t> counts(rank), sstr(rank), dstr(rank);
  int64_t sbase = 0, dbase = 0;
  for (size_t j = 0; j < rank; ++j) {
    const int64_t step = padding[j].interior + 1;
    // Source indices i with 0 <= lo + i*step < out.dims[j].
    int64_t i0 = 0;
    if (padding[j].lo < 0) i0 = (-padding[j].lo + step - 1) / step;
    int64_t i1 = a.shape.dims[j];  // exclusive
    // largest i with lo + i*step <= out-1
    const int64_t max_pos = out.dims[j] - 1 - padding[j].lo;
    if (max_pos < 0) {
      i1 = 0;
    } else {
      i1 = std::min(i1, max_pos / step + 1);
    }
    counts[j] = std::max<int64_t>(0, i1 - i0);
    sbase += i0 * as[j];
    dbase += (padding[j].lo + i0 * step) * rs[j];
    sstr[j] = as[j];
    dstr[j] = rs[j] * step;
  }
  ForStorage(a, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), sbase, sstr, d.data(), dbase, dstr, counts);
  });
  return r;
}

Value Concatenate(const std::vector<const Value*>& parts, const Shape& out, int64_t dim) {
  Value r = Empty(out);
  const std::vector<int64_t> rs = Strides(out.dims);
  int64_t offset = 0;
  for (const Value* p : parts) {
    const std::vector<int64_t> ps = Strides(p->shape.dims);
    ForStorage(*p, &r, [&](const auto& s, auto& d) {
      StridedCopy(s.data(), 0, ps, d.data(), offset * rs[static_cast<size_t>(dim)], rs,
                  p->shape.dims);
    });
    offset += p->shape.dims[static_cast<size_t>(dim)];
  }
  return r;
}

Value Reverse(const Value& a, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides = Strides(a.shape.dims);
  int64_t base = 0;
  for (int64_t d : dims) {
    const size_t j = static_cast<size_t>(d);
    base += (a.shape.dims[j] - 1) * strides[j];
    strides[j] = -strides[j];
  }
  return Gather(a, a.shape, strides, base);
}

Value Iota(const Shape& out, int64_t dim) {
  Value r = Empty(out);
  const std::vector<int64_t> rs = Strides(out.dims);
  const int64_t n = out.ElementCount();
  const int64_t stride = rs[static_cast<size_t>(dim)], extent = out.dims[static_cast<size_t>(dim)];
  for (int64_t k = 0; k < n; ++k) r.SetInt(k, (k / stride) % extent);
  return r;
}

Value MoveReducedDimsLast(const Value& a, const std::vector<int64_t>& reduced, int64_t* outer,
                          int64_t* inner) {
  const size_t rank = a.shape.dims.size();
  std::vector<bool> is_red(rank, false);
  for (int64_t d : reduced) is_red[static_cast<size_t>(d)] = true;
  std::vector<int64_t> perm;
  *outer = 1;
  *inner = 1;
  for (size_t j = 0; j < rank; ++j) {
    if (!is_red[j]) {
      perm.push_back(static_cast<int64_t>(j));
      *outer *= a.shape.dims[j];
    }
  }
  for (size_t j = 0; j < rank; ++j) {
    if (is_red[j]) {
      perm.push_back(static_cast<int64_t>(j));
      *inner *= a.shape.dims[j];
    }
  }
  bool identity = true;
  for (size_t j = 0; j < rank; ++j) identity &= perm[j] == static_cast<int64_t>(j);
  if (identity) return a;
  Shape s = a.shape;
  s.layout.reset();
  for (size_t j = 0; j < rank; ++j) s.dims[j] = a.shape.dims[static_cast<size_t>(perm[j])];
  return Transpose(a, s, perm);
}

}  // namespace weave::eval::ops
