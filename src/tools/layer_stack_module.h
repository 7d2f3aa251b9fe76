// A generated stack of tensor-parallel transformer layers, for scaling benchmarks and the
// compile golden test: the shape of a partitioned Llama-style training dump (attention with
// rotary embedding and causal softmax, a SwiGLU MLP, pre-RMSNorm, sequence parallelism), with a
// proportional number of windowed einsum candidates (per layer: one all-gather read by Q, K and
// V, one read by gate and up, and the output and down projections reduce-scattered).
#pragma once

#include <cstdint>
#include <string>

namespace weave::tools {

// Global sizes of one layer (tensor parallel over `partitions`; every size a multiple of it).
struct LayerStackSize {
  int64_t partitions = 4;
  int64_t sequences = 1, sequence_length = 16;
  int64_t width = 64;       // model width D (Q, K, V and O are D wide: D / partitions each)
  int64_t mlp_width = 128;  // SwiGLU width F
  int64_t tokens() const { return sequences * sequence_length; }
  // Llama 3.1 8B's widths (D 4096, F 14336) at 8192 tokens on 4 partitions: the size where the
  // performance model decides the windowed loops, as on the real dump.
  static LayerStackSize Llama8B();
};

// Instructions of one layer in the module (all computations; the entry's shared parameters and
// constants, 26 instructions, come once on top): 83 for a bf16 layer, 147 for an FP8 one.
int64_t LayerStackInstructionsPerLayer(bool fp8);

// XLA HLO text of `layers` layers applied in sequence to a bf16 residual shard
// [tokens / partitions, width] (parameter 0), after SPMD partitioning. Every `fp8_every`-th
// layer (layers 0, k, 2k, ...; 0 = none) is FP8: its weights are f8e4m3fn with f32 per-tensor
// scales, and the activations entering its matmuls are quantized to f8e4m3fn and dequantized
// (convert, multiply by the broadcast scale), so the collective quantizer and the FP8 GEMM
// rewriter have work; the other layers are bf16. Parameters after 0: the rotary tables
// bf16[tokens, width / partitions] (cos, sin), then each layer's norm weights, weights and
// scales. Output: the residual shard. The text depends only on the arguments (deterministic).
std::string LayerStackModuleText(int64_t layers, const LayerStackSize& z = LayerStackSize(),
                                 int64_t fp8_every = 2);

// The number of layers whose module has about `instructions` instructions (at least 1).
int64_t LayerStackLayersFor(int64_t instructions, int64_t fp8_every = 2);

}  // namespace weave::tools
