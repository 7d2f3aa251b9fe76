// The cuBLAS GEMM custom calls XLA's GPU backend lowers a dot to, and the one predicate the
// passes, the evaluator, the simulator and the report share for "this call is a GEMM".
//
// Source: XLA's xla/service/gpu/cublas_cudnn.h (kGemmCallTarget, kCublasLtMatmulCallTarget,
// kCublasLtMatmulF8CallTarget). XLA's IsCublasGemm also takes the hipBLASLt block-scaled
// `__cublas$lt$matmul$mx` and the grouped `__cublas$lt$groupedMatmul`; Weave models neither, so
// IsCublasGemmCall leaves them out (block-scaled GEMMs are hlo/block_scaled_call.h's).
#pragma once

#include <string_view>

#include "hlo/ir.h"

namespace weave {

inline constexpr std::string_view kCublasGemmTarget = "__cublas$gemm";
inline constexpr std::string_view kCublasLtMatmulTarget = "__cublas$lt$matmul";
// The FP8 GEMM fp8-gemm-rewriter forms (operands a, b, [c], a_scale, b_scale, ...).
inline constexpr std::string_view kCublasLtMatmulF8Target = "__cublas$lt$matmul$f8";

// True for a custom call to one of the three targets above, whatever its operands (a GEMM has
// at least 2: callers that read them check the count).
inline bool IsCublasGemmCall(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kCustomCall) return false;
  const std::string& t = instr.custom_call_target();
  return t == kCublasLtMatmulF8Target || t == kCublasLtMatmulTarget || t == kCublasGemmTarget;
}

// A GEMM before or after fp8-gemm-rewriter: a dot, or a cuBLAS GEMM call.
inline bool IsDotOrGemmCall(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kDot || IsCublasGemmCall(instr);
}

// True for a custom call to kCublasLtMatmulF8Target.
inline bool IsCublasLtMatmulF8Call(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.custom_call_target() == kCublasLtMatmulF8Target;
}

}  // namespace weave
