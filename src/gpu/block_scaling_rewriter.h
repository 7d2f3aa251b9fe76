// block-scaling-rewriter: XLA's BlockScalingRewriter (xla/backends/gpu/transforms/
// block_scaling_rewriter.{h,cc}; nvptx_compiler.cc runs it before the GEMM rewriter). It lowers
// JAX's block-scaling custom calls (hlo/block_scaled_call.h) for a GPU:
//
//   __op$quantize(x: T[..., K]) -> (Q[..., K], S[..., K/B])
//     reshape x to [..., K/B, B] -> reduce max|.| over B (init 0) -> / emax(Q) -> convert<S>
//     = scale; x / reshape(broadcast(convert<T>(scale))) -> convert<Q> = data; tuple(data, scale)
//   __op$dequantize(q, s) -> T
//     convert<T>(q) * reshape(broadcast(convert<T>(s)))          (blocks of B along the last dim)
//   __op$block_scaled_dot(lhs, rhs, lhs_scale[, rhs_scale[, global_scale]]) -> T[B?, M, N]
//     cuDNN form, when the target has it (below) and both operands are MXFP8 (f8e4m3fn or f8e5m2
//     data, f8e8m0fnu scales, B = 32; not f8e5m2 x f8e5m2) or both NVFP4 (f4e2m1fn data,
//     f8e4m3fn scales, B = 16) with the contracting dim a multiple of B and default layouts:
//       data padded to rows % 128 == 0, scales padded to [rows % 128, cols % 4] (pad value 0;
//       2^-127, E8M0's smallest code, for f8e8m0fnu, which has no zero) and swizzled
//       (reshape [B, R/128, 4, 32, C/4, 4], transpose {0,1,4,3,2,5}, reshape back) ->
//       custom-call "__cudnn$blockScaledDot" -> (T[B?, M', N'], u8[0]) -> get-tuple-element 0
//       [-> * global_scale when cuDNN < 9.13] [-> slice to [B?, M, N]]
//     otherwise the expansion: each scaled operand dequantized (its scale sliced to the data's
//     rows and ceil(K/B) blocks when padded) -> dot(contracting dim last, batch dim 0 at rank 3,
//     result T) [-> * broadcast(global_scale)].
//   The cuDNN form needs compute capability >= 10.0 (Blackwell) and cuDNN >= 9.10; the global
//   scale goes into the call from cuDNN 9.13.
//
// XLA wraps each expansion in a `call`; Weave emits it inline. Values are exactly those of the
// evaluator's meaning of the calls (eval/block_scaled_custom_calls.cc). Every lowered call gets a
// remark: which form, and for a dot expanded where a cuDNN GEMM was possible in principle, why
// not (the compute capability, the cuDNN version, the types, the block size, no rhs scale).
// A call whose shapes do not fit XLA's checks is left as it is with a missed remark.
//
// Options (PassOptions): `gpu-compute-capability` (default 9.0, as fp8-gemm-rewriter),
// `cudnn-version` (major.minor, default 9.13). Errors: InvalidArgument for a malformed option.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "passes/pass.h"

namespace weave {

class BlockScalingRewriter : public HloPass {
 public:
  // compute_capability: CUDA major.minor (10.0 = Blackwell); cudnn: major.minor as a number
  // (9.13 is written 9.13, compared as (9, 13)).
  BlockScalingRewriter(double compute_capability, int cudnn_major, int cudnn_minor)
      : cc_(compute_capability), cudnn_major_(cudnn_major), cudnn_minor_(cudnn_minor) {}
  std::string_view name() const override { return "block-scaling-rewriter"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  bool CudnnAtLeast(int major, int minor) const {
    return cudnn_major_ > major || (cudnn_major_ == major && cudnn_minor_ >= minor);
  }
  double cc_;
  int cudnn_major_, cudnn_minor_;
  friend class BlockScalingLowering;
};

}  // namespace weave
