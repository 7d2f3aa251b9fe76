// The evaluator's convolution (eval/evaluator_internal.h), XLA's ConvGeneralDilated
// (https://openxla.org/xla/operation_semantics#convgeneraldilated; the reference semantics of
// xla/hlo/evaluator/hlo_evaluator_typed_visitor.h HandleConvolution):
//  - `dim_labels=b01f_01io->b01f`: which dim of the lhs is the batch (b) and the feature (f),
//    of the rhs the input (i) and output (o) feature, of the result the batch and feature, and
//    the spatial dims by number (0, 1, ...), in each operand's own dim order;
//  - `window={size= stride= pad=lo_hi lhs_dilate= rhs_dilate= rhs_reversal=}` per spatial dim;
//  - feature_group_count G: the lhs features are cut into G groups of C/G, the kernel's input
//    feature dim holds C/G, and output feature o uses group o / (O/G);
//  - batch_group_count B: the lhs batch is cut into B groups of N/B (the result's batch), and
//    output feature o reads batch group o / (O/B).
// Output element (n, o, y): the sum over the group's input features c and the kernel positions
// k of lhs(n', c, x) * rhs(k', c, o), x_d = y_d * stride_d - lo_d + k_d * rhs_dilate_d in the
// lhs's dilated coordinates (read where x_d is a multiple of lhs_dilate_d inside the dilated
// lhs, padding and dilation holes contribute zero), k' = size - 1 - k on reversed dims. Computed
// as an im2col GEMM over row chunks (linear in the output times the window): f32 and narrower
// float operands through cblas_sgemm (an f32 accumulator, as the evaluator's dot and XLA's f32
// convolutions), f64 and integers through cblas_dgemm; the sums are rounded once to the result
// type.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/blas_threads.h"
#include "eval/evaluator_internal.h"
#include "eval/ops.h"
#include "hlo/conv_dims.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {
namespace {

using absl::InvalidArgumentError;

// Element i of a convolution operand as a double (no double copy of the operands: a kernel can
// be hundreds of MiB).
inline double ElementAt(const Value& v, int64_t i) {
  return v.storage() == Storage::kFloat ? static_cast<double>(v.f[static_cast<size_t>(i)])
                                         : v.GetDouble(i);
}

// OK when the group counts fit the lhs, rhs and result dims and each spatial window dim has the
// kernel's size and strides and dilations >= 1; InvalidArgument naming the convolution otherwise.
absl::Status CheckConvShapes(const HloInstruction& instr, const ConvDims& dims,
                             const std::vector<WindowDim>& w, const Value& lhs, const Value& rhs) {
  const Shape& out_shape = instr.shape();
  const ConvLabels* L = &dims.lhs;
  const ConvLabels* K = &dims.kernel;
  const ConvLabels* O = &dims.out;
  const int64_t groups = dims.feature_group_count;
  const int64_t bgroups = dims.batch_group_count;
  const std::vector<int64_t>& ld = lhs.shape.dims;
  const std::vector<int64_t>& kd = rhs.shape.dims;
  const std::vector<int64_t>& od = out_shape.dims;
  const int64_t batch = ld[static_cast<size_t>(L->a)], in_features = ld[static_cast<size_t>(L->b)];
  const int64_t kernel_in = kd[static_cast<size_t>(K->a)], out_features = kd[static_cast<size_t>(K->b)];
  if (groups < 1 || bgroups < 1 || in_features % groups != 0 || kernel_in * groups != in_features ||
      out_features % groups != 0 || out_features % bgroups != 0 || batch % bgroups != 0 ||
      od[static_cast<size_t>(O->b)] != out_features || od[static_cast<size_t>(O->a)] != batch / bgroups) {
    return InvalidArgumentError(absl::StrCat(
        "convolution '", instr.name(), "': feature_group_count=", groups, " batch_group_count=",
        bgroups, " do not fit lhs ", lhs.shape.ToString(false), ", rhs ", rhs.shape.ToString(false),
        " and result ", out_shape.ToString(false)));
  }
  for (size_t j = 0; j < L->spatial.size(); ++j) {
    const WindowDim& wd = w[j];
    if (wd.size != kd[static_cast<size_t>(K->spatial[j])] || wd.stride < 1 || wd.lhs_dilate < 1 ||
        wd.rhs_dilate < 1) {
      return InvalidArgumentError(absl::StrCat("convolution '", instr.name(),
                                               "': its window does not match its kernel"));
    }
  }
  return absl::OkStatus();
}

// A checked convolution as im2col GEMMs: for each block of output features with one feature
// group g and one batch group bg, the rows are (n, output position) pairs, the columns (kernel
// position, input feature c); P holds the lhs values each row reads (zero outside the lhs and in
// dilation holes), Km the kernel, and R += P x Km accumulates the block's outputs over chunks of
// the columns (kernel positions), so that a window of millions of elements (a weight gradient
// over whole images) still runs as large GEMMs. Each P chunk (about 8 MiB) is built once and
// serves every output-feature block of its group; each Km chunk stays near 32 MiB, R near 16 MiB.
struct ConvGemm {
  // The sizes and chunking of a convolution that CheckConvShapes accepted.
  ConvGemm(const ConvDims& dims, const std::vector<WindowDim>& window, const Value& lhs,
           const Value& rhs, const Shape& out_shape);
  // Decodes each kernel position once: its index per spatial dim and its (reversed) rhs offset.
  void DecodeKernelPositions();
  // Accumulates the convolution in T (float: cblas_sgemm, double: cblas_dgemm) into `out`.
  template <typename T>
  void Run(const Value& lhs, const Value& rhs, Value* out) const;
  // P (rows x kps * kernel_in) for rows r0.. of batch group bg and feature group g, kernel
  // positions kp0..kp0+kps-1: the lhs values each reads, zero in padding and dilation holes.
  template <typename T>
  void BuildPatches(const Value& lhs, int64_t g, int64_t bg, int64_t r0, int64_t rows, int64_t kp0,
                    int64_t kps, std::vector<int64_t>* ospatial, std::vector<T>* P) const;
  // R += P x Km for the output features og..og+group_blk-1, Km gathered from the kernel in
  // blocks of at most max_cols features.
  template <typename T>
  void MultiplyKernel(const Value& rhs, int64_t og, int64_t rows, int64_t kp0, int64_t kps,
                      const std::vector<T>& P, std::vector<T>* Km, std::vector<T>* R) const;
  // Writes R (rows r0.. x output features og..og+group_blk-1) into `out`, rounded to its type.
  template <typename T>
  void StoreRows(int64_t og, int64_t r0, int64_t rows, const std::vector<T>& R, Value* out) const;

  const ConvLabels* L;
  const ConvLabels* K;
  const ConvLabels* O;
  const size_t ns;
  const std::vector<WindowDim>& w;
  const std::vector<int64_t>& ld;
  const std::vector<int64_t>& kd;
  const std::vector<int64_t>& od;
  std::vector<int64_t> ls, ks, os;
  int64_t kernel_in, out_features, per_group_out, per_bgroup_out, out_batch;
  int64_t spatial_count = 1, kernel_count = 1;  // output positions, kernel positions
  int64_t lstride_f, kstride_i;
  int64_t kc, rows_total, kp_chunk, kchunk_max, group_blk, chunk, max_cols;
  std::vector<std::vector<int64_t>> kpositions;
  std::vector<int64_t> koffset;
};

ConvGemm::ConvGemm(const ConvDims& dims, const std::vector<WindowDim>& window, const Value& lhs,
                   const Value& rhs, const Shape& out_shape)
    : L(&dims.lhs), K(&dims.kernel), O(&dims.out), ns(L->spatial.size()), w(window),
      ld(lhs.shape.dims), kd(rhs.shape.dims), od(out_shape.dims) {
  const int64_t groups = dims.feature_group_count;
  const int64_t bgroups = dims.batch_group_count;
  const int64_t batch = ld[static_cast<size_t>(L->a)];
  kernel_in = kd[static_cast<size_t>(K->a)];
  out_features = kd[static_cast<size_t>(K->b)];
  ls = ops::Strides(ld);
  ks = ops::Strides(kd);
  os = ops::Strides(od);
  per_group_out = out_features / groups;
  per_bgroup_out = out_features / bgroups;
  out_batch = batch / bgroups;
  for (size_t j = 0; j < ns; ++j) {
    spatial_count *= od[static_cast<size_t>(O->spatial[j])];
    kernel_count *= kd[static_cast<size_t>(K->spatial[j])];
  }
  lstride_f = ls[static_cast<size_t>(L->b)];
  kstride_i = ks[static_cast<size_t>(K->a)];
  kc = kernel_count * kernel_in;
  rows_total = out_batch * spatial_count;
  kp_chunk = std::max<int64_t>(1, std::min<int64_t>(kernel_count, 8192 / std::max<int64_t>(1, kernel_in)));
  kchunk_max = kp_chunk * kernel_in;
  group_blk = std::max<int64_t>(1, std::gcd(per_group_out, per_bgroup_out));
  // Rows per chunk: P (rows x kchunk) near 8 MiB and R (rows x group_blk) near 16 MiB.
  chunk = std::max<int64_t>(
      1, std::min({rows_total, (int64_t{1} << 21) / std::max<int64_t>(1, kchunk_max), (int64_t{1} << 22) / group_blk}));
  max_cols = std::max<int64_t>(1, (int64_t{1} << 23) / std::max<int64_t>(1, kchunk_max));
}

void ConvGemm::DecodeKernelPositions() {
  kpositions.assign(static_cast<size_t>(kernel_count), std::vector<int64_t>(ns));
  koffset.assign(static_cast<size_t>(kernel_count), 0);
  for (int64_t kp = 0; kp < kernel_count; ++kp) {
    int64_t krem = kp;
    for (size_t j = ns; j-- > 0;) {
      const int64_t size = kd[static_cast<size_t>(K->spatial[j])];
      kpositions[static_cast<size_t>(kp)][j] = krem % size;
      krem /= size;
    }
    for (size_t j = 0; j < ns; ++j) {
      const WindowDim& wd = w[j];
      const int64_t kpj = kpositions[static_cast<size_t>(kp)][j];
      koffset[static_cast<size_t>(kp)] += (wd.reversal ? wd.size - 1 - kpj : kpj) * ks[static_cast<size_t>(K->spatial[j])];
    }
  }
}

template <typename T>
void ConvGemm::Run(const Value& lhs, const Value& rhs, Value* out) const {
  std::vector<T> P, Km, R;
  // Output spatial positions, enumerated row-major.
  std::vector<int64_t> ospatial(ns);
  for (int64_t og = 0; og < out_features; og += group_blk) {
    const int64_t g = og / per_group_out, bg = og / per_bgroup_out;
    for (int64_t r0 = 0; r0 < rows_total; r0 += chunk) {
      const int64_t rows = std::min(chunk, rows_total - r0);
      R.assign(static_cast<size_t>(rows * group_blk), T(0));
      for (int64_t kp0 = 0; kp0 < kernel_count; kp0 += kp_chunk) {
        const int64_t kps = std::min(kp_chunk, kernel_count - kp0);
        BuildPatches(lhs, g, bg, r0, rows, kp0, kps, &ospatial, &P);
        MultiplyKernel(rhs, og, rows, kp0, kps, P, &Km, &R);
      }
      StoreRows(og, r0, rows, R, out);
    }
  }
}

template <typename T>
void ConvGemm::BuildPatches(const Value& lhs, int64_t g, int64_t bg, int64_t r0, int64_t rows,
                            int64_t kp0, int64_t kps, std::vector<int64_t>* ospatial,
                            std::vector<T>* P) const {
  const int64_t kcols = kps * kernel_in;
  P->assign(static_cast<size_t>(rows * kcols), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = (r0 + r) / spatial_count, sp = (r0 + r) % spatial_count;
    int64_t rem = sp;
    for (size_t j = ns; j-- > 0;) {
      const int64_t size = od[static_cast<size_t>(O->spatial[j])];
      (*ospatial)[j] = rem % size;
      rem /= size;
    }
    const int64_t lhs_batch = bg * out_batch + n;
    for (int64_t kp = kp0; kp < kp0 + kps; ++kp) {
      int64_t lbase = lhs_batch * ls[static_cast<size_t>(L->a)] + g * kernel_in * lstride_f;
      bool inside = true;
      for (size_t j = 0; j < ns; ++j) {
        const WindowDim& wd = w[j];
        const int64_t x = (*ospatial)[j] * wd.stride - wd.lo + kpositions[static_cast<size_t>(kp)][j] * wd.rhs_dilate;
        const int64_t lsize = ld[static_cast<size_t>(L->spatial[j])];
        if (x < 0 || x % wd.lhs_dilate != 0 || x / wd.lhs_dilate >= lsize) {
          inside = false;
          break;
        }
        lbase += (x / wd.lhs_dilate) * ls[static_cast<size_t>(L->spatial[j])];
      }
      if (!inside) continue;
      T* row = P->data() + r * kcols + (kp - kp0) * kernel_in;
      for (int64_t c = 0; c < kernel_in; ++c) row[c] = static_cast<T>(ElementAt(lhs, lbase + c * lstride_f));
    }
  }
}

template <typename T>
void ConvGemm::MultiplyKernel(const Value& rhs, int64_t og, int64_t rows, int64_t kp0,
                              int64_t kps, const std::vector<T>& P, std::vector<T>* Km,
                              std::vector<T>* R) const {
  const int64_t kcols = kps * kernel_in;
  for (int64_t o0 = og; o0 < og + group_blk; o0 += max_cols) {
    const int64_t blk = std::min(max_cols, og + group_blk - o0);
    Km->assign(static_cast<size_t>(kcols * blk), T(0));
    for (int64_t kp = kp0; kp < kp0 + kps; ++kp) {
      for (int64_t c = 0; c < kernel_in; ++c) {
        T* dst = Km->data() + ((kp - kp0) * kernel_in + c) * blk;
        const int64_t src = koffset[static_cast<size_t>(kp)] + c * kstride_i;
        for (int64_t q = 0; q < blk; ++q) {
          dst[q] = static_cast<T>(ElementAt(rhs, src + (o0 + q) * ks[static_cast<size_t>(K->b)]));
        }
      }
    }
    if (kcols == 0) continue;
    T* out_block = R->data() + (o0 - og);
    std::lock_guard<std::mutex> blas(BlasMutex());
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(blk),
                  static_cast<int>(kcols), 1.0f, P.data(), static_cast<int>(kcols), Km->data(),
                  static_cast<int>(blk), 1.0f, out_block, static_cast<int>(group_blk));
    } else {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(blk),
                  static_cast<int>(kcols), 1.0, P.data(), static_cast<int>(kcols), Km->data(),
                  static_cast<int>(blk), 1.0, out_block, static_cast<int>(group_blk));
    }
  }
}

template <typename T>
void ConvGemm::StoreRows(int64_t og, int64_t r0, int64_t rows, const std::vector<T>& R,
                         Value* out) const {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = (r0 + r) / spatial_count, sp = (r0 + r) % spatial_count;
    int64_t rem = sp, oi = n * os[static_cast<size_t>(O->a)];
    for (size_t j = ns; j-- > 0;) {
      const int64_t size = od[static_cast<size_t>(O->spatial[j])];
      oi += (rem % size) * os[static_cast<size_t>(O->spatial[j])];
      rem /= size;
    }
    for (int64_t q = 0; q < group_blk; ++q) {
      out->SetDouble(oi + (og + q) * os[static_cast<size_t>(O->b)], R[static_cast<size_t>(r * group_blk + q)]);
    }
  }
}

}  // namespace

absl::StatusOr<Value> Convolution(const HloInstruction& instr, const Value& lhs, const Value& rhs) {
  const Shape& out_shape = instr.shape();
  const int64_t rank = lhs.shape.rank();
  if (rhs.shape.rank() != rank || out_shape.rank() != rank || rank < 2) {
    return InvalidArgumentError("convolution operands and result must have one rank (>= 2)");
  }
  ASSIGN_OR_RETURN(ConvDims dims, ParseConvDims(instr, rank));
  ASSIGN_OR_RETURN(std::vector<WindowDim> w, ParseWindow(instr, dims.lhs.spatial.size()));
  RETURN_IF_ERROR(CheckConvShapes(instr, dims, w, lhs, rhs));
  ConvGemm gemm(dims, w, lhs, rhs, out_shape);
  Value out = Value::Zeros(out_shape);
  if (gemm.kc > std::numeric_limits<int>::max()) {
    return InvalidArgumentError(absl::StrCat("convolution '", instr.name(), "': a window of ",
                                             gemm.kc,
                                             " elements is more than the evaluator's GEMM takes"));
  }
  gemm.DecodeKernelPositions();
  // f32 and narrower floats accumulate in f32 (cblas_sgemm, as the dot kernel and XLA's f32
  // convolutions); f64 and integers in double.
  if (lhs.storage() == Storage::kFloat && rhs.storage() == Storage::kFloat &&
      out.storage() == Storage::kFloat) {
    gemm.Run<float>(lhs, rhs, &out);
  } else {
    gemm.Run<double>(lhs, rhs, &out);
  }
  return out;
}

}  // namespace weave::eval::internal
