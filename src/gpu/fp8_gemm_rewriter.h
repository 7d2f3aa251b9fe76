// fp8-gemm-rewriter: XLA's GPU GemmRewriter, FP8 part (../shared/specs/fp8-gemm-rewrite.md).
//
// Rewrites `dot(a', b')`, where each operand is dequant(fp8), an unscaled convert(fp8), or FP8
// read directly, with movable ops in between (passes/fp8_operand.h), into the cuBLASLt FP8 GEMM
// custom call
//
//   call = (D, [f32[] amax], s8[W]) custom-call(a, b, a_scale, b_scale, [d_scale]),
//          custom_call_target="__cublas$lt$matmul$f8", backend_config={GpuBackendConfig JSON}
//   result = get-tuple-element(call), index=0  [-> slice back from padding] [-> reshape]
//
// - a, b: the FP8 values with the movable ops re-created on them in FP8; then canonicalised to
//   [batch?, M, K] and [batch?, N, K] ("TN": K is the minor-most matrix dim of both; an FP8
//   transpose is inserted and the contracting dim updated where needed; several free, contracting
//   or batch dims are collapsed by an FP8 transpose+reshape as XLA's DotDecomposer would), then
//   M, N and K padded at the high edge with FP8 zeros to multiples of 16.
// - a_scale, b_scale: f32 scalars: the dequantization's scale (a divide's scale becomes
//   divide(1, s) in s's type), converted to f32 when needed; a missing scale is f32 constant 1.
// - W: 33554432 bytes of workspace for compute capability >= 9.0, 4194304 below.
// - Output folds (fp8_gemm_internal.h PlanOutput), matched on the dot's single-reader chain
//   before anything is built, as XLA's GemmRewriter folds them into FP8 calls: alpha, the output
//   scale of a wide D as a_scale (a unscaled), vector bias (BIAS, [N] along the minor dim), matrix
//   bias (C as operand 2, beta = 1, output aliasing C when nothing else reads it), ReLU and
//   approximate GELU (RELU/GELU, BIAS_RELU/BIAS_GELU), then FP8 output (convert_fp8(clamp(-max,
//   X, max)) with X = D, D / broadcast(d) or D * broadcast(d); d_scale = 1/d, d or 1, as f32;
//   CUDA only) and amax (reduce(abs(D)) with a maximum body and an init <= 0, or reduce(D) after
//   a ReLU, becoming get-tuple-element 1 with damax_output=true; only with the FP8 output). A
//   reshape/bitcast view between the GEMM and an epilogue is followed. Unlike XLA, padding does
//   not block these folds: bias and C are padded, the slice is applied to the folded result. A
//   dot whose own result is FP8 (OCP on CUDA) becomes a call writing FP8 D without d_scale.
//   Every op next to the GEMM left outside the call gets a [missed] remark with the reason.
// - Compute capability 10.x (Blackwell): no TN transpose of an operand with one free and one
//   contracting dim (XLA's IsBlackwell() rule).
// Options (PassOptions): `gpu-compute-capability` (default 9.0; below 8.9 nothing is rewritten
// and each FP8 dot gets a remark; a ROCm arch such as gfx942 selects the ROCm rules, GpuTarget); `xla-backend-config` (2024|2025|2026, default 2026: the
// GpuBackendConfig schema of the call's backend_config).
// Constraints (each failure is a remark on the dot): operand types E4M3FN or E5M2 but not
// E5M2 x E5M2 (CUDA, ROCm gfx950/gfx12), or E4M3FNUZ or E5M2FNUZ but not E5M2FNUZ x E5M2FNUZ
// (ROCm gfx942), as XLA allows them; scalar scales; dot output bf16/f16/f32 or an FP8 type the target writes; no matrix-vector dot; batch product
// <= 65535; batch dims the same count on both sides.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "hlo/gemm_call.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {

// The GPU the FP8 GEMMs are for, as XLA's GemmRewriter distinguishes them: a CUDA compute
// capability major.minor (FP8 from 8.9 = Ada; E4M3FN and E5M2 operands), or a ROCm gfx arch
// (gfx942 = MI300: the FNUZ types f8e4m3fnuz and f8e5m2fnuz; gfx950, gfx1200, gfx1201, gfx1250:
// E4M3FN and E5M2; others: no FP8 GEMM). Source: XLA gemm_rewriter.cc and
// rocm_compute_capability.h (has_nanoo_fp8_support / has_ocp_fp8_support).
struct GpuTarget {
  bool rocm = false;
  double cuda_cc = 9.0;  // CUDA only
  std::string gfx;       // ROCm only, e.g. "gfx942"

  // "9.0" (CUDA) or "gfx942" (ROCm); InvalidArgument otherwise.
  static absl::StatusOr<GpuTarget> Parse(std::string_view text);
  std::string Name() const;  // "compute capability 9.0" / "gfx942"
  bool HasFnuzFp8() const;   // FNUZ FP8 GEMMs (MI300)
  bool HasOcpFp8() const;    // E4M3FN / E5M2 FP8 GEMMs
  // Workspace XLA gives a cuBLASLt/hipBLASLt call: 32 MiB from Hopper, 76 MiB gfx942,
  // 64 MiB gfx950, else 4 MiB (XLA GemmConfig::k*Workspace).
  int64_t WorkspaceBytes() const;
};

class Fp8GemmRewriter : public HloPass {
 public:
  // compute_capability: CUDA compute capability as major.minor (8.9 = Ada, 9.0 = Hopper).
  // backend_config: the XLA version whose GpuBackendConfig schema the call's backend_config is
  // written in (passes/gpu_backend_config.h; option `xla-backend-config`, default 2026).
  explicit Fp8GemmRewriter(double compute_capability = 9.0,
                           XlaBackendConfigVersion backend_config = kDefaultXlaBackendConfig)
      : backend_config_(backend_config) {
    target_.cuda_cc = compute_capability;
  }
  Fp8GemmRewriter(GpuTarget target, XlaBackendConfigVersion backend_config)
      : target_(std::move(target)), backend_config_(backend_config) {}
  std::string_view name() const override { return "fp8-gemm-rewriter"; }
  // Rewrites every matching dot in every computation (entry and while bodies alike). Returns
  // whether anything changed. Errors only on internal inconsistencies (e.g. a malformed module
  // whose dot operand ranks disagree with its dimension numbers).
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  GpuTarget target_;
  XlaBackendConfigVersion backend_config_;
};

// The custom-call target of an FP8 cuBLASLt GEMM: kCublasLtMatmulF8Target (hlo/gemm_call.h).

// Workspace bytes XLA reserves for a cuBLASLt GEMM on the given compute capability.
int64_t CublasWorkspaceBytes(double compute_capability);

}  // namespace weave
