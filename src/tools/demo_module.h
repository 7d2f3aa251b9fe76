// The built-in example of `weave demo`.
#pragma once

#include <string_view>

namespace weave::tools {

// XLA HLO text of a tensor-parallel FP8 transformer block (attention with causal softmax and a
// SwiGLU MLP, pre-RMSNorm) after SPMD partitioning on 4 partitions with sequence parallelism.
// Global sizes: 32 tokens (2 sequences of 16), width 64, 4 heads of 16, MLP width 128; per
// partition 8 tokens, 1 head, 32 MLP columns. Parameters: the bf16 residual shard [8,64], f8e4m3fn
// weights with f32 per-tensor scales (all `{replicated}`), RMSNorm weights bf16[64]. Output: the
// bf16 residual shard [8,64]. Collectives: two all-gathers f32[8,64] -> f32[32,64] of the
// dequantized FP8 activation (the first read by Q, K and V, the second by gate and up) and two
// reduce-scatters f32[32,64] -> f32[8,64] (output and down projections), all over {{0,1,2,3}}.
std::string_view DemoModuleText();

}  // namespace weave::tools
