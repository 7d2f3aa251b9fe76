// The second built-in example of `weave demo` (`weave demo --moe`): an expert-parallel FFN block.
#pragma once

#include <string_view>

namespace weave::tools {

// XLA HLO text of one expert-parallel mixture-of-experts FFN block (GShard-style top-k dispatch and
// combine einsums) after SPMD partitioning on 4 partitions, one expert per partition. Per
// partition: 128 local tokens of width 128, 4 experts with a capacity of 32 tokens per source
// partition, a SwiGLU expert of hidden width 256 (fused gate/up weight). Parameters: the bf16
// tokens [128,128], the bf16 dispatch mask and combine weights [128,4,32] (tokens x experts x
// capacity), f8e4m3fn expert weights [128,512] and [256,128] with bf16 per-tensor scales and bf16
// activation scales (all `{replicated}`). Flow: dispatch einsum -> FP8 quantize ->
// all-to-all over the experts (dim 0, {{0,1,2,3}}) -> gate/up matmul -> SiLU x up -> FP8
// quantize -> down matmul -> all-to-all back -> combine einsum. Output: bf16[128,128].
std::string_view MoeDemoModuleText();

}  // namespace weave::tools
