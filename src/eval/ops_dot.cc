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
#include "hlo/status_macros.h"

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

// A dot as a stack of [m, k] x [k, n] products: the sizes, the free dims (neither batch nor
// contracting) of each side in order, and the orders its operands are gathered in.
struct DotPlan {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  std::vector<int64_t> a_free, b_free;
  // lhs as [batch, m, k] (or [batch, k, m] transposed), rhs as [batch, k, n] (or [batch, n, k]).
  std::vector<int64_t> a_mk, a_km, b_kn, b_nk;
  bool trans_a = false, trans_b = false;  // a GEMM reads the side transposed, without a gather
};

// The sizes and free dims of the dot of a and b into `out`; InvalidArgument when the batch or
// contracting dims differ in count between the sides, lie outside an operand or differ in size,
// or `out` does not hold batch * m * n elements.
absl::StatusOr<DotPlan> PlanDotSizes(const Value& a, const Value& b, const Shape& out,
                                     const DotDims& dd) {
  const size_t ar = a.shape.dims.size(), br = b.shape.dims.size();
  if (dd.lhs_batch.size() != dd.rhs_batch.size() ||
      dd.lhs_contracting.size() != dd.rhs_contracting.size()) {
    return InvalidArgumentError("dot: batch/contracting dimension counts differ between sides");
  }
  std::vector<bool> a_used(ar, false), b_used(br, false);
  DotPlan p;
  for (size_t j = 0; j < dd.lhs_batch.size(); ++j) {
    const int64_t ad = dd.lhs_batch[j], bd = dd.rhs_batch[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid batch dimensions");
    }
    p.batch *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < dd.lhs_contracting.size(); ++j) {
    const int64_t ad = dd.lhs_contracting[j], bd = dd.rhs_contracting[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid contracting dimensions");
    }
    p.k *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < ar; ++j) {
    if (!a_used[j]) {
      p.a_free.push_back(static_cast<int64_t>(j));
      p.m *= a.shape.dims[j];
    }
  }
  for (size_t j = 0; j < br; ++j) {
    if (!b_used[j]) {
      p.b_free.push_back(static_cast<int64_t>(j));
      p.n *= b.shape.dims[j];
    }
  }
  if (out.ElementCount() != p.batch * p.m * p.n) {
    return InvalidArgumentError(absl::StrCat("dot: result shape ", out.ToString(false),
                                             " does not match the operands"));
  }
  return p;
}

// x, then y, then z.
std::vector<int64_t> Concat(std::vector<int64_t> x, const std::vector<int64_t>& y,
                            const std::vector<int64_t>& z) {
  x.insert(x.end(), y.begin(), y.end());
  x.insert(x.end(), z.begin(), z.end());
  return x;
}

// Whether the dim order `o` is 0, 1, 2, ...
bool IsIdentity(const std::vector<int64_t>& o) {
  for (size_t j = 0; j < o.size(); ++j) {
    if (o[j] != static_cast<int64_t>(j)) return false;
  }
  return true;
}

// Fills p's gather orders and transposes: a side is read transposed when only its transposed
// order is the operand's own.
void PlanDotLayout(const DotDims& dd, DotPlan* p) {
  p->a_mk = Concat(dd.lhs_batch, p->a_free, dd.lhs_contracting);
  p->a_km = Concat(dd.lhs_batch, dd.lhs_contracting, p->a_free);
  p->b_kn = Concat(dd.rhs_batch, dd.rhs_contracting, p->b_free);
  p->b_nk = Concat(dd.rhs_batch, p->b_free, dd.rhs_contracting);
  p->trans_a = !IsIdentity(p->a_mk) && IsIdentity(p->a_km);
  p->trans_b = !IsIdentity(p->b_kn) && IsIdentity(p->b_nk);
}

// The integer dot into r (int64 storage): sums in uint64 (wrapping), each wrapped to type ot.
void IntegerDot(const Value& a, const Value& b, const DotPlan& p, PrimitiveType ot, Value* r) {
  const int64_t batch = p.batch, m = p.m, k = p.k, n = p.n;
  std::vector<int64_t> abuf, bbuf;
  const int64_t* pa = PrepareOperand<int64_t>(a, p.a_mk, &abuf);
  const int64_t* pb = PrepareOperand<int64_t>(b, p.b_kn, &bbuf);
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        uint64_t acc = 0;
        for (int64_t q = 0; q < k; ++q) {
          acc += static_cast<uint64_t>(pa[(bi * m + i) * k + q]) *
                 static_cast<uint64_t>(pb[(bi * k + q) * n + j]);
        }
        r->i[static_cast<size_t>((bi * m + i) * n + j)] =
            WrapToType(static_cast<int64_t>(acc), ot);
      }
    }
  }
}

// The dot through cblas_dgemm into r (f64 storage, or float storage rounded from the f64 sums
// to type ot). Needs batch, m and n > 0.
void DoubleGemmDot(const Value& a, const Value& b, const DotPlan& p, PrimitiveType ot, Value* r) {
  const int64_t batch = p.batch, m = p.m, k = p.k, n = p.n;
  const bool trans_a = p.trans_a, trans_b = p.trans_b;
  std::vector<double> abuf, bbuf, cbuf;
  const double* pa = PrepareOperand<double>(a, trans_a ? p.a_km : p.a_mk, &abuf);
  const double* pb = PrepareOperand<double>(b, trans_b ? p.b_nk : p.b_kn, &bbuf);
  double* pc;
  if (r->storage() == Storage::kDouble) {
    pc = r->d.data();
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
  if (r->storage() == Storage::kFloat) {
    for (size_t q = 0; q < cbuf.size(); ++q) r->f[q] = static_cast<float>(RoundToType(cbuf[q], ot));
  }
}

// The dot through cblas_sgemm into r (float storage), the f32 sums rounded to type ot. Needs
// batch, m and n > 0.
void FloatGemmDot(const Value& a, const Value& b, const DotPlan& p, PrimitiveType ot, Value* r) {
  const int64_t batch = p.batch, m = p.m, k = p.k, n = p.n;
  const bool trans_a = p.trans_a, trans_b = p.trans_b;
  std::vector<float> abuf, bbuf;
  const float* pa = PrepareOperand<float>(a, trans_a ? p.a_km : p.a_mk, &abuf);
  const float* pb = PrepareOperand<float>(b, trans_b ? p.b_nk : p.b_kn, &bbuf);
  float* pc = r->f.data();
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
    const size_t total = r->f.size();
    if (ot == PrimitiveType::BF16) {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundToBf16(pc[q]);
    } else {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundFloatToType(pc[q], ot);
    }
  }
}

}  // namespace

absl::StatusOr<Value> Dot(const Value& a, const Value& b, const Shape& out, const DotDims& dd) {
  ASSIGN_OR_RETURN(DotPlan p, PlanDotSizes(a, b, out, dd));
  PlanDotLayout(dd, &p);
  Value r = Empty(out);
  const PrimitiveType ot = out.element_type;
  const bool use_double = r.storage() == Storage::kDouble || a.storage() == Storage::kDouble ||
                          b.storage() == Storage::kDouble;
  if (r.storage() == Storage::kInt) {
    IntegerDot(a, b, p, ot, &r);
    return r;
  }
  if (r.storage() != Storage::kFloat && r.storage() != Storage::kDouble) {
    return InvalidArgumentError(absl::StrCat("dot with result type ", TypeName(out),
                                             " is not supported"));
  }
  if (p.m == 0 || p.n == 0 || p.batch == 0) return r;
  if (use_double) {
    DoubleGemmDot(a, b, p, ot, &r);
    return r;
  }
  FloatGemmDot(a, b, p, ot, &r);
  return r;
}

}  // namespace weave::eval::ops
