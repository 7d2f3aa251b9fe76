// XLA's block-scaling custom calls: the microscaling (MXFP8, NVFP4) quantize, dequantize and dot
// that JAX emits, and the cuDNN call XLA lowers the dot to. One place for their operand roles and
// block size, which the verifier, the evaluator, the partitioner and the GPU rewriter share.
//
// Source of the semantics: XLA's BlockScalingRewriter
// (xla/backends/gpu/transforms/block_scaling_rewriter.{h,cc}):
//   "__op$quantize"(x: T[..., K]) -> (Q[..., K], S[..., K/B])
//   "__op$dequantize"(q: Q[..., K], s: S[..., K/B]) -> T[..., K]
//   "__op$block_scaled_dot"(lhs: Q[B?, M, K], rhs: Q[B?, N, K], lhs_scale: S[B?, M', K'],
//                            [rhs_scale: S[B?, N', K']], [global_scale: T[]]) -> T[B?, M, N]
//     contracting dim last on both sides, batch dim 0 when rank 3; a scale may be padded
//     (M' >= M, K' >= K/B) when the block size B is given in the backend config
//     (`{"block_scaled_dot_backend_config":{"block_size":"32"}}`); otherwise B = K / K'.
//   "__cudnn$blockScaledDot"(lhs, rhs, lhs_scale, rhs_scale, [global_scale]) ->
//     (T[B?, M, N], u8[0]): the cuDNN form (cuDNN >= 9.10; global scale >= 9.13) with M, N padded
//     to multiples of 128, the scales padded to [128k, 4j] and swizzled; B from the types (32 for
//     f8e4m3fn/f8e5m2 data with f8e8m0fnu scales, 16 for f4e2m1fn data with f8e4m3fn scales).
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

inline constexpr std::string_view kQuantizeTarget = "__op$quantize";
inline constexpr std::string_view kDequantizeTarget = "__op$dequantize";
inline constexpr std::string_view kBlockScaledDotTarget = "__op$block_scaled_dot";
inline constexpr std::string_view kCudnnBlockScaledDotTarget = "__cudnn$blockScaledDot";
// XLA's BlockScalingRewriter::kBlockSizeMXFP8 / kBlockSizeNVFP4.
inline constexpr int64_t kBlockSizeMxfp8 = 32;
inline constexpr int64_t kBlockSizeNvfp4 = 16;

enum class BlockScaledKind { kNone, kQuantize, kDequantize, kDot, kCudnnDot };

// Which block-scaling call `instr` is (kNone for any other instruction).
BlockScaledKind BlockScaledKindOf(const HloInstruction& instr);

// The block size written in the backend config (`block_scaled_dot_backend_config.block_size`,
// a JSON number or string, or proto text `{block_size:32}`), nullopt when absent. An unparsable value is nullopt too; callers that
// need it then fall back to BlockSizeFromShapes, as XLA does.
std::optional<int64_t> ConfiguredBlockSize(const HloInstruction& instr);

// XLA's GetBlockSize: data and scale of equal rank >= 1, data's last dim a multiple of the
// scale's. InvalidArgument otherwise (naming neither: callers add the instruction).
absl::StatusOr<int64_t> BlockSizeFromShapes(const Shape& data, const Shape& scale);

// The block size cuDNN's kernel implies for a (data, scale) type pair: 32 for MXFP8 (f8e4m3fn or
// f8e5m2 data, f8e8m0fnu scale), 16 for NVFP4 (f4e2m1fn data, f8e4m3fn scale); nullopt otherwise.
std::optional<int64_t> CudnnBlockSize(PrimitiveType data, PrimitiveType scale);

// The block size of a block-scaled dot: the configured one, else from lhs and lhs_scale's shapes.
absl::StatusOr<int64_t> BlockScaledDotBlockSize(const HloInstruction& dot);

// The emax XLA's quantize divides each block's amax by: 2^(E - 1), E the quantized type's
// overflow exponent (256 for f8e4m3fn, 32768 for f8e5m2, 4 for f4e2m1fn, 16 for f6e3m2fn).
double QuantizeEmax(PrimitiveType quant_type);

// The dot dimensions of a block-scaled dot of operand rank `rank` (2 or 3): contracting dim last
// on both sides, batch dim 0 when rank 3.
DotDims BlockScaledDotDims(int64_t rank);

}  // namespace weave
