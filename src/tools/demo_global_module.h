// The built-in global module of `weave demo`: the FP8 transformer block of demo_module.h as JAX
// emits it before XLA's SPMD partitioning (global shapes, sharded parameters, sharding
// constraints on the projections), for `weave compile` to partition, window and quantize.
#pragma once

#include <string>

#include "tools/demo_module.h"

namespace weave::tools {

// XLA HLO text of one pre-RMSNorm transformer block (4-head causal attention + SwiGLU MLP) in
// global form for 4 partitions, at size `z` (T tokens, width D, MLP width F; heads of D/4).
// Parameters: the bf16 residual stream [T,D] sharded over tokens ({devices=[4,1]<=[4]}: sequence
// parallelism), f8e4m3fn weights with f32 per-tensor scales: Q/K/V and gate/up [D,*] sharded
// over their output columns ({devices=[1,4]<=[4]}: one head, a quarter of the MLP per
// partition), the output and down projections [*,D] over their input rows ({devices=[4,1]<=[4]}),
// scales and RMSNorm weights replicated. The activations entering the matmuls are quantized to
// FP8 and dequantized (convert, multiply by the broadcast scale); the Q, K and V projections
// read one activation, gate and up another; the down projection's output is bf16 (its partial
// sums are reduced in bf16, as in the partitioned block). Output: the bf16 residual [T,D],
// token-sharded.
// No collectives: the partitioner emits them (two all-gathers of the dequantized activations,
// each read by several dots, and two reductions of the projections' partial sums).
std::string DemoGlobalModuleText(const DemoSize& z = DemoSize::Small());

}  // namespace weave::tools
