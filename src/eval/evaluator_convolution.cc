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
// lhs, padding and dilation holes contribute zero), k' = size - 1 - k on reversed dims. Sums are
// accumulated in double and rounded once to the result type (a GEMM's wide accumulator).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"
#include "eval/ops.h"

namespace weave::eval::internal {
namespace {

using absl::InvalidArgumentError;

// The dims of one operand in `dim_labels`: batch/feature (or input/output feature) and the
// spatial dims by number.
struct Labels {
  int64_t a = -1, b = -1;      // lhs/out: batch, feature; rhs: input feature, output feature
  std::vector<int64_t> spatial;  // spatial[j]: the dim labelled j
};

absl::StatusOr<Labels> ParseLabels(std::string_view part, char a, char b, int64_t rank) {
  const std::string text(part);
  Labels l;
  l.spatial.assign(static_cast<size_t>(rank), -1);
  int64_t spatial = 0;
  if (static_cast<int64_t>(text.size()) != rank) {
    return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' does not have ", rank, " dims"));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const char c = text[static_cast<size_t>(d)];
    if (c == a) {
      l.a = d;
    } else if (c == b) {
      l.b = d;
    } else if (c >= '0' && c <= '9' && c - '0' < rank) {
      l.spatial[static_cast<size_t>(c - '0')] = d;
      ++spatial;
    } else {
      return InvalidArgumentError(absl::StrCat("bad dim_labels part '", text, "'"));
    }
  }
  if (l.a < 0 || l.b < 0) return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' lacks a label"));
  l.spatial.resize(static_cast<size_t>(spatial));
  for (int64_t s : l.spatial) {
    if (s < 0) return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' skips a spatial dim"));
  }
  return l;
}

int64_t IntAttr(const HloInstruction& h, std::string_view key, int64_t fallback) {
  const std::string* v = h.GetRawAttribute(key);
  if (v == nullptr) return fallback;
  try {
    return std::stoll(*v);
  } catch (...) {
    return -1;
  }
}

std::vector<double> AsDoubles(const Value& v) {
  std::vector<double> out(static_cast<size_t>(v.size()));
  for (int64_t k = 0; k < v.size(); ++k) out[static_cast<size_t>(k)] = v.GetDouble(k);
  return out;
}

}  // namespace

absl::StatusOr<Value> Convolution(const HloInstruction& instr, const Value& lhs, const Value& rhs) {
  const Shape& out_shape = instr.shape();
  const int64_t rank = lhs.shape.rank();
  if (rhs.shape.rank() != rank || out_shape.rank() != rank || rank < 2) {
    return InvalidArgumentError("convolution operands and result must have one rank (>= 2)");
  }
  const std::string* labels = instr.GetRawAttribute("dim_labels");
  if (labels == nullptr) return InvalidArgumentError("convolution needs dim_labels=");
  const size_t us = labels->find('_'), arrow = labels->find("->");
  if (us == std::string::npos || arrow == std::string::npos || arrow < us) {
    return InvalidArgumentError(absl::StrCat("bad dim_labels '", *labels, "'"));
  }
  absl::StatusOr<Labels> L = ParseLabels(std::string_view(*labels).substr(0, us), 'b', 'f', rank);
  absl::StatusOr<Labels> K = ParseLabels(std::string_view(*labels).substr(us + 1, arrow - us - 1), 'i', 'o', rank);
  absl::StatusOr<Labels> O = ParseLabels(std::string_view(*labels).substr(arrow + 2), 'b', 'f', rank);
  if (!L.ok()) return L.status();
  if (!K.ok()) return K.status();
  if (!O.ok()) return O.status();
  const size_t ns = L->spatial.size();
  if (K->spatial.size() != ns || O->spatial.size() != ns) {
    return InvalidArgumentError("dim_labels give the operands different spatial dims");
  }
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(instr, ns);
  if (!w.ok()) return w.status();
  const int64_t groups = IntAttr(instr, "feature_group_count", 1);
  const int64_t bgroups = IntAttr(instr, "batch_group_count", 1);
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
  for (size_t j = 0; j < ns; ++j) {
    const WindowDim& wd = (*w)[j];
    if (wd.size != kd[static_cast<size_t>(K->spatial[j])] || wd.stride < 1 || wd.lhs_dilate < 1 ||
        wd.rhs_dilate < 1) {
      return InvalidArgumentError(absl::StrCat("convolution '", instr.name(),
                                               "': its window does not match its kernel"));
    }
  }
  const std::vector<int64_t> ls = ops::Strides(ld), ks = ops::Strides(kd), os = ops::Strides(od);
  const std::vector<double> a = AsDoubles(lhs), k = AsDoubles(rhs);
  Value out = Value::Zeros(out_shape);
  const int64_t per_group_out = out_features / groups, per_bgroup_out = out_features / bgroups;
  const int64_t out_batch = batch / bgroups;
  // Output spatial positions, enumerated row-major.
  std::vector<int64_t> ospatial(ns), kpos(ns);
  int64_t spatial_count = 1, kernel_count = 1;
  for (size_t j = 0; j < ns; ++j) {
    spatial_count *= od[static_cast<size_t>(O->spatial[j])];
    kernel_count *= kd[static_cast<size_t>(K->spatial[j])];
  }
  const int64_t lstride_f = ls[static_cast<size_t>(L->b)], kstride_i = ks[static_cast<size_t>(K->a)];
  for (int64_t n = 0; n < out_batch; ++n) {
    for (int64_t o = 0; o < out_features; ++o) {
      const int64_t g = o / per_group_out, bg = o / per_bgroup_out;
      const int64_t lhs_batch = bg * out_batch + n;
      for (int64_t sp = 0; sp < spatial_count; ++sp) {
        int64_t rem = sp;
        for (size_t j = ns; j-- > 0;) {
          const int64_t size = od[static_cast<size_t>(O->spatial[j])];
          ospatial[j] = rem % size;
          rem /= size;
        }
        double acc = 0;
        for (int64_t kp = 0; kp < kernel_count; ++kp) {
          int64_t krem = kp;
          for (size_t j = ns; j-- > 0;) {
            const int64_t size = kd[static_cast<size_t>(K->spatial[j])];
            kpos[j] = krem % size;
            krem /= size;
          }
          int64_t lbase = lhs_batch * ls[static_cast<size_t>(L->a)] + g * kernel_in * lstride_f;
          int64_t kbase = o * ks[static_cast<size_t>(K->b)];
          bool inside = true;
          for (size_t j = 0; j < ns && inside; ++j) {
            const WindowDim& wd = (*w)[j];
            const int64_t x = ospatial[j] * wd.stride - wd.lo + kpos[j] * wd.rhs_dilate;
            const int64_t lsize = ld[static_cast<size_t>(L->spatial[j])];
            if (x < 0 || x % wd.lhs_dilate != 0 || x / wd.lhs_dilate >= lsize) {
              inside = false;
              break;
            }
            lbase += (x / wd.lhs_dilate) * ls[static_cast<size_t>(L->spatial[j])];
            const int64_t kk = wd.reversal ? wd.size - 1 - kpos[j] : kpos[j];
            kbase += kk * ks[static_cast<size_t>(K->spatial[j])];
          }
          if (!inside) continue;
          for (int64_t c = 0; c < kernel_in; ++c) {
            acc += a[static_cast<size_t>(lbase + c * lstride_f)] * k[static_cast<size_t>(kbase + c * kstride_i)];
          }
        }
        int64_t oi = n * os[static_cast<size_t>(O->a)] + o * os[static_cast<size_t>(O->b)];
        for (size_t j = 0; j < ns; ++j) oi += ospatial[j] * os[static_cast<size_t>(O->spatial[j])];
        out.SetDouble(oi, acc);
      }
    }
  }
  return out;
}

}  // namespace weave::eval::internal
