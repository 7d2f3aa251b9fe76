// Helpers shared by the evaluator's array kernels (eval/ops.h): ops.cc, ops_elementwise.cc,
// ops_data_movement.cc, ops_dot.cc. Only these files include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval::ops::internal {

// Calls fn(src_vec, dst_vec) on the storage vectors both values use (same storage kind).
template <typename Fn>
void ForStorage(const Value& src, Value* dst, Fn&& fn) {
  switch (src.storage()) {
    case Storage::kFloat: fn(src.f, dst->f); break;
    case Storage::kDouble: fn(src.d, dst->d); break;
    case Storage::kInt: fn(src.i, dst->i); break;
    case Storage::kComplex: fn(src.c, dst->c); break;
    default: break;
  }
}

// A value of shape `out` with storage allocated (contents unspecified: zeros in practice).
Value Empty(const Shape& out);

// Copies a box of `dims` from src (offset sbase, strides sstr) to dst (dbase, dstr).
template <typename T>
void StridedCopy(const T* src, int64_t sbase, const std::vector<int64_t>& sstr, T* dst,
                 int64_t dbase, const std::vector<int64_t>& dstr,
                 const std::vector<int64_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  for (int64_t d : dims) {
    if (d <= 0) return;
  }
  if (rank == 0) {
    dst[dbase] = src[sbase];
    return;
  }
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  const int64_t n_inner = dims[rank - 1];
  const int64_t s_inner = sstr[rank - 1], d_inner = dstr[rank - 1];
  int64_t so = sbase, dof = dbase;
  while (true) {
    if (s_inner == 1 && d_inner == 1) {
      std::copy(src + so, src + so + n_inner, dst + dof);
    } else {
      for (int64_t k = 0; k < n_inner; ++k) dst[dof + k * d_inner] = src[so + k * s_inner];
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      so += sstr[d];
      dof += dstr[d];
      if (idx[d] < dims[d]) break;
      so -= sstr[d] * dims[d];
      dof -= dstr[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

// Gathers from `a` into a new contiguous value of shape `out`: element at output index idx comes
// from a's flat offset base + sum(idx[j] * strides[j]).
Value Gather(const Value& a, const Shape& out, const std::vector<int64_t>& strides, int64_t base);

// The element type's name, for error messages.
std::string TypeName(const Shape& s);

// Complex-typed elementwise kernels (ops_complex.cc; operands already broadcast to `out`'s
// shape). ComplexUnary also takes real/imag of a real operand; ComplexBinary takes complex(re, im)
// of two real operands. InvalidArgument for an op or types XLA does not define on complex values.
absl::StatusOr<Value> ComplexUnary(HloOpcode op, const Value& a, const Shape& out);
absl::StatusOr<Value> ComplexBinary(HloOpcode op, const Value& a, const Value& b, const Shape& out);
absl::StatusOr<Value> ComplexCompare(ComparisonDirection dir, const Value& a, const Value& b, const Shape& out);
absl::StatusOr<Value> ComplexConvert(const Value& a, const Shape& out);
// `v` with every c64 element's parts rounded to f32 (c128 unchanged).
Value RoundedComplex(Value v);

}  // namespace weave::eval::ops::internal
