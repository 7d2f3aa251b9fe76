// The evaluator's dot kernel (eval/ops.h): operands gathered into [batch, rows, cols] stacks,
// floats through cblas_sgemm/cblas_dgemm, integers through int64 loops; the result rounded to its
// type.
#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/blas_threads.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "eval/ops_internal.h"

namespace weave::eval::ops {

using absl::InvalidArgumentError;
using internal::Empty;
using internal::StridedCopy;
using internal::TypeName;

namespace {

// Layout of one dot operand as a [batch, rows, cols] matrix stack: `order` lists the operand dims
// in the order the gathered buffer uses.
struct DotSide {
  std::vector<int64_t> order;
  int64_t batch = 1, rows = 1, cols = 1;
};

// Gathers `v` (converted to T) into the order `order` (contiguous), or returns a pointer to v's own
// storage when it is already contiguous in that order and of type T.
template <typename T>
const T* PrepareOperand(const Value& v, const std::vector<int64_t>& order, std::vector<T>* buf) {
  bool identity = true;
  for (size_t j = 0; j < order.size(); ++j) identity &= order[j] == static_cast<int64_t>(j);
  if constexpr (std::is_same_v<T, float>) {
    if (identity && v.storage() == Storage::kFloat) return v.f.data();
  }
  if constexpr (std::is_same_v<T, double>) {
    if (identity && v.storage() == Storage::kDouble) return v.d.data();
  }
  const std::vector<int64_t> vs = Strides(v.shape.dims);
  std::vector<int64_t> dims(order.size()), strides(order.size());
  for (size_t j = 0; j < order.size(); ++j) {
    dims[j] = v.shape.dims[static_cast<size_t>(order[j])];
    strides[j] = vs[static_cast<size_t>(order[j])];
  }
  const int64_t n = v.shape.ElementCount();
  buf->resize(static_cast<size_t>(n));
  const std::vector<int64_t> ds = Strides(dims);
  if constexpr (std::is_same_v<T, float>) {
    if (v.storage() == Storage::kFloat) {
      StridedCopy(v.f.data(), 0, strides, buf->data(), 0, ds, dims);
      return buf->data();
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    if (v.storage() == Storage::kDouble) {
      StridedCopy(v.d.data(), 0, strides, buf->data(), 0, ds, dims);
      return buf->data();
    }
  }
  // Other storage: convert element by element through a gather of indices.
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), 0);
  StridedCopy(iota.data(), 0, strides, idx.data(), 0, ds, dims);
  for (int64_t k = 0; k < n; ++k) {
    if constexpr (std::is_same_v<T, int64_t>) {
      (*buf)[static_cast<size_t>(k)] = v.GetInt(idx[static_cast<size_t>(k)]);
    } else {
      (*buf)[static_cast<size_t>(k)] = static_cast<T>(v.GetDouble(idx[static_cast<size_t>(k)]));
    }
  }
  return buf->data();
}

}  // namespace

absl::StatusOr<Value> Dot(const Value& a, const Value& b, const Shape& out, const DotDims& dd) {
  const size_t ar = a.shape.dims.size(), br = b.shape.dims.size();
  if (dd.lhs_batch.size() != dd.rhs_batch.size() ||
      dd.lhs_contracting.size() != dd.rhs_contracting.size()) {
    return InvalidArgumentError("dot: batch/contracting dimension counts differ between sides");
  }
  std::vector<bool> a_used(ar, false), b_used(br, false);
  int64_t batch = 1, m = 1, k = 1, n = 1;
  std::vector<int64_t> a_order, b_order, a_free, b_free;
  for (size_t j = 0; j < dd.lhs_batch.size(); ++j) {
    const int64_t ad = dd.lhs_batch[j], bd = dd.rhs_batch[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid batch dimensions");
    }
    batch *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < dd.lhs_contracting.size(); ++j) {
    const int64_t ad = dd.lhs_contracting[j], bd = dd.rhs_contracting[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid contracting dimensions");
    }
    k *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < ar; ++j) {
    if (!a_used[j]) {
      a_free.push_back(static_cast<int64_t>(j));
      m *= a.shape.dims[j];
    }
  }
  for (size_t j = 0; j < br; ++j) {
    if (!b_used[j]) {
      b_free.push_back(static_cast<int64_t>(j));
      n *= b.shape.dims[j];
    }
  }
  if (out.ElementCount() != batch * m * n) {
    return InvalidArgumentError(absl::StrCat("dot: result shape ", out.ToString(false),
                                             " does not match the operands"));
  }
  // lhs as [batch, m, k] (or [batch, k, m] transposed), rhs as [batch, k, n] (or [batch, n, k]).
  auto concat = [](std::vector<int64_t> x, const std::vector<int64_t>& y,
                   const std::vector<int64_t>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  auto is_identity = [](const std::vector<int64_t>& o) {
    for (size_t j = 0; j < o.size(); ++j) {
      if (o[j] != static_cast<int64_t>(j)) return false;
    }
    return true;
  };
  const std::vector<int64_t> a_mk = concat(dd.lhs_batch, a_free, dd.lhs_contracting);
  const std::vector<int64_t> a_km = concat(dd.lhs_batch, dd.lhs_contracting, a_free);
  const std::vector<int64_t> b_kn = concat(dd.rhs_batch, dd.rhs_contracting, b_free);
  const std::vector<int64_t> b_nk = concat(dd.rhs_batch, b_free, dd.rhs_contracting);
  const bool trans_a = !is_identity(a_mk) && is_identity(a_km);
  const bool trans_b = !is_identity(b_kn) && is_identity(b_nk);
  const std::vector<int64_t>& a_ord = trans_a ? a_km : a_mk;
  const std::vector<int64_t>& b_ord = trans_b ? b_nk : b_kn;

  Value r = Empty(out);
  const PrimitiveType ot = out.element_type;
  const bool use_double = r.storage() == Storage::kDouble || a.storage() == Storage::kDouble ||
                          b.storage() == Storage::kDouble;
  if (r.storage() == Storage::kInt) {
    std::vector<int64_t> abuf, bbuf;
    const int64_t* pa = PrepareOperand<int64_t>(a, a_mk, &abuf);
    const int64_t* pb = PrepareOperand<int64_t>(b, b_kn, &bbuf);
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          uint64_t acc = 0;
          for (int64_t q = 0; q < k; ++q) {
            acc += static_cast<uint64_t>(pa[(bi * m + i) * k + q]) *
                   static_cast<uint64_t>(pb[(bi * k + q) * n + j]);
          }
          r.i[static_cast<size_t>((bi * m + i) * n + j)] =
              WrapToType(static_cast<int64_t>(acc), ot);
        }
      }
    }
    return r;
  }
  if (r.storage() != Storage::kFloat && r.storage() != Storage::kDouble) {
    return InvalidArgumentError(absl::StrCat("dot with result type ", TypeName(out),
                                             " is not supported"));
  }
  if (m == 0 || n == 0 || batch == 0) return r;
  if (use_double) {
    std::vector<double> abuf, bbuf, cbuf;
    const double* pa = PrepareOperand<double>(a, a_ord, &abuf);
    const double* pb = PrepareOperand<double>(b, b_ord, &bbuf);
    double* pc;
    if (r.storage() == Storage::kDouble) {
      pc = r.d.data();
    } else {
      cbuf.resize(static_cast<size_t>(batch * m * n));
      pc = cbuf.data();
    }
    std::unique_lock<std::mutex> blas(BlasMutex());
    for (int64_t bi = 0; bi < batch; ++bi) {
      if (k == 0) {
        std::fill(pc + bi * m * n, pc + (bi + 1) * m * n, 0.0);
        continue;
      }
      cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0, pa + bi * m * k, static_cast<int>(trans_a ? m : k),
                  pb + bi * k * n, static_cast<int>(trans_b ? k : n), 0.0, pc + bi * m * n,
                  static_cast<int>(n));
    }
    blas.unlock();
    if (r.storage() == Storage::kFloat) {
      for (size_t q = 0; q < cbuf.size(); ++q) r.f[q] = static_cast<float>(RoundToType(cbuf[q], ot));
    }
    return r;
  }
  std::vector<float> abuf, bbuf;
  const float* pa = PrepareOperand<float>(a, a_ord, &abuf);
  const float* pb = PrepareOperand<float>(b, b_ord, &bbuf);
  float* pc = r.f.data();
  std::unique_lock<std::mutex> blas(BlasMutex());
  for (int64_t bi = 0; bi < batch; ++bi) {
    if (k == 0) {
      std::fill(pc + bi * m * n, pc + (bi + 1) * m * n, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, pa + bi * m * k, static_cast<int>(trans_a ? m : k),
                pb + bi * k * n, static_cast<int>(trans_b ? k : n), 0.0f, pc + bi * m * n,
                static_cast<int>(n));
  }
  blas.unlock();
  if (ot != PrimitiveType::F32) {
    const size_t total = r.f.size();
    if (ot == PrimitiveType::BF16) {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundToBf16(pc[q]);
    } else {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundFloatToType(pc[q], ot);
    }
  }
  return r;
}

}  // namespace weave::eval::ops
