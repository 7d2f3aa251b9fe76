// Internals of the fp8-gemm-rewriter pass (fp8_gemm_rewriter.h), shared by its pieces:
//   fp8_gemm_target.cc          the FP8 types each GPU target's GEMMs take;
//   fp8_gemm_epilogue.cc        the output-side folds (alpha, FP8 output, amax) and why not;
//   fp8_gemm_backend_config.cc  the GpuBackendConfig of the call;
//   fp8_gemm_rewriter.cc        the operand side (FP8 operands in TN form, padding) and the pass.
// Not a public interface: only those files include it.
#ifndef WEAVE_GPU_FP8_GEMM_INTERNAL_H_
#define WEAVE_GPU_FP8_GEMM_INTERNAL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/fp8_gemm_rewriter.h"
#include "hlo/ir.h"
#include "passes/gpu_backend_config.h"

namespace weave {
namespace fp8_gemm_internal {

// The largest finite value of an FP8 type (448 for f8e4m3fn, 57344 for f8e5m2 and f8e5m2fnuz, 240
// for f8e4m3fnuz); 0 for any other type.
double Fp8MaxFinite(PrimitiveType t);
bool IsFnuzFp8(PrimitiveType t);  // f8e4m3fnuz, f8e5m2fnuz (ROCm MI300)
bool IsOcpFp8(PrimitiveType t);   // f8e4m3fn, f8e5m2 (CUDA sm_89+, ROCm gfx950+)

// The FP8 operand pair (lhs type, rhs type) XLA's GemmRewriter takes on `target`: "" when
// allowed, else the reason it is not (e.g. f8e5m2 x f8e5m2 on cuBLASLt).
std::string Fp8PairRule(const GpuTarget& target, PrimitiveType ta, PrimitiveType tb);

// The rank-0 value under a broadcast of a rank-0 value (or a rank-0 value itself); null otherwise.
HloInstruction* ScalarUnderBroadcast(HloInstruction* i);
// The value of a scalar, non-elided constant; nullopt for anything else (null included).
std::optional<double> ScalarConstantValue(const HloInstruction* i);

// What the rewrite folds into the call after the dot: XLA GemmRewriter's epilogue fusions for
// FP8 calls (HandleMultiply, HandleDivide, HandleAdd, HandleMaximum, HandleConvert), taken in the
// order its post-order visitor meets them, each on a GEMM value with a single user.
struct OutputPlan {
  double alpha = 1.0;
  // cuBLASLt epilogue: DEFAULT, BIAS, RELU, BIAS_RELU, GELU, BIAS_GELU, GELU_AUX or
  // BIAS_GELU_AUX.
  std::string epilogue = "DEFAULT";
  // Matrix bias C (beta = 1), in the dot's result shape and type; null when none.
  HloInstruction* matrix_bias = nullptr;
  bool matrix_bias_aliasable = false;  // XLA's can_overwrite_bias: the output may reuse C
  // Vector bias [N] added along the output's minor dim (bf16/f16, or the dot's type).
  HloInstruction* vector_bias = nullptr;
  // The scaling of a wide output, D * s or D / s, folded as a_scale when a is unscaled (XLA's
  // F8ScaleD); null when none.
  HloInstruction* output_scale = nullptr;
  bool output_scale_is_divide = false;
  // GELU_AUX: the value (the dot) whose readers outside the GELU read the call's auxiliary
  // output, the pre-activation (tuple element 1); null otherwise.
  HloInstruction* aux_readers_of = nullptr;
  // The last instruction of the folded chain (the dot when nothing is folded): its users read D.
  HloInstruction* last = nullptr;
  // FP8 output: convert_fp8(clamp(lo, X, hi)).
  HloInstruction* fp8_convert = nullptr;
  PrimitiveType fp8_type = PrimitiveType::kInvalid;
  HloInstruction* d_scale = nullptr;  // scalar d of X = D / d or D * d; null: no scaling
  bool d_scale_is_divide = false;
  // amax: reduce(abs(D), init<=0) with a maximum body (or reduce(D) after a ReLU epilogue).
  HloInstruction* amax_reduce = nullptr;
  std::vector<std::string> folds;
  // Epilogues the program writes but that were not folded, with the reason (for [missed] remarks).
  std::vector<std::string> skipped;
};

// What PlanOutput needs to know about the call it plans for.
struct OutputContext {
  bool a_scale_is_one = false;  // a is unscaled: the call's a_scale is the constant 1
  bool cuda = true;             // XLA folds the FP8 output (F8ConvertD) on CUDA only
  int64_t rhs_free_dims = 1;    // how many free dims b has (a vector bias needs exactly 1)
  int64_t n = 0;                // N, the size of b's free dims
  bool reshaped_output = false; // the call's D is reshaped back to the dot's shape
};

// The epilogue plan of `dot`, walking its single-user chain as XLA's GemmRewriter would fold it:
//   alpha        multiply(D, broadcast(constant))            epilogue DEFAULT, beta 0
//   output scale multiply/divide(D, broadcast(scalar))       a unscaled; DEFAULT/RELU, beta 0
//   vector bias  add(D, broadcast(bias[N]) along the minor dim)  epilogue DEFAULT -> BIAS
//   matrix bias  add(D, C), C not a broadcast                 DEFAULT/BIAS, beta 0 -> 1
//   ReLU         maximum(D, broadcast(0))                      DEFAULT -> RELU, BIAS -> BIAS_RELU
//   GELU         D * 0.5 * (1 + tanh(sqrt(2/pi) * (D + 0.044715 D^3)))   -> GELU / BIAS_GELU
// then, when every user of the last value belongs to one of the two chains, an FP8 output
// (convert_fp8(clamp(-max, [multiply|divide](D, broadcast(d)), max))) and an amax
// (reduce(abs(D), init <= 0) with a maximum body; reduce(D) after a ReLU). `skipped` names every
// op next to the GEMM that stays outside the call, with why.
OutputPlan PlanOutput(HloInstruction* dot, const OutputContext& ctx);

// The GpuBackendConfig JSON text of the call replacing `dot`, in the schema of XLA version `v`:
// the dot's own fields kept (operation_queue_id, force_earliest_schedule, ...), the dot's oneof
// backend configs dropped, and gemm_backend_config set with GemmBackendConfig's fields in proto
// field-number order (alpha, beta, epilogue and damax_output from `plan`, batch dim 0 when nb > 0, contracting dims lhs_k/rhs_k,
// strides in elements, damax_output when an amax is folded).
std::string BackendConfig(const HloInstruction* dot, const OutputPlan& plan, int64_t nb,
                          int64_t lhs_k, int64_t rhs_k, int64_t lhs_stride, int64_t rhs_stride,
                          XlaBackendConfigVersion v);

}  // namespace fp8_gemm_internal
}  // namespace weave

#endif  // WEAVE_GPU_FP8_GEMM_INTERNAL_H_
