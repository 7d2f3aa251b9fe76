// The built-in example of `weave demo`.
#pragma once

#include <cstdint>
#include <string>

namespace weave::tools {

// Global sizes of the demo block (tensor parallel over 4 partitions: one attention head per
// partition, a quarter of the MLP, a quarter of the tokens of the residual stream).
struct DemoSize {
  int64_t sequences = 2, sequence_length = 16;
  int64_t width = 64;       // model width (4 heads of width / 4)
  int64_t mlp_width = 128;  // SwiGLU width
  int64_t tokens() const { return sequences * sequence_length; }
  std::string ToString() const;
  // The size the evaluator verifies in well under a second: 32 tokens, width 64, MLP 128.
  static DemoSize Small();
  // The size the demo compiles with the cost gate, from global form (and from partitioned form
  // with --from-partitioned): 8192 tokens (4 sequences of 2048), width 4096, MLP width 4096,
  // where the performance model predicts that the all-gather loops pay on h100x8. The global
  // module's Q/K/V and gate/up outputs are constrained column-sharded, so XLA's dot handler (and
  // Weave's, in its order) gathers the activation (base case: the weight matches the output on
  // its non-contracting dim) although it is larger than each weight here.
  static DemoSize Full();
};

// XLA HLO text of a tensor-parallel FP8 transformer block (attention with causal softmax and a
// SwiGLU MLP, pre-RMSNorm) after SPMD partitioning on 4 partitions with sequence parallelism, at
// size `z` (T tokens, width D, MLP width F; per partition T/4 tokens, 1 head of D/4, F/4 MLP
// columns). Parameters: the bf16 residual shard [T/4,D], f8e4m3fn weights with f32 per-tensor
// scales (all `{replicated}`), RMSNorm weights bf16[D]. Output: the bf16 residual shard [T/4,D].
// Collectives: two all-gathers f32[T/4,D] -> f32[T,D] of the dequantized FP8 activation (the
// first read by Q, K and V, the second by gate and up) and two reduce-scatters f32[T,D] ->
// f32[T/4,D] (output and down projections), all over {{0,1,2,3}}.
std::string DemoModuleText(const DemoSize& z = DemoSize::Small());

}  // namespace weave::tools
