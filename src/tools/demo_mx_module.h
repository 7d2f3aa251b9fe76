// The third built-in example of `weave demo` (`weave demo --mx`): an MXFP8 MLP block.
#pragma once

#include <cstdint>
#include <string>

namespace weave::tools {

// XLA HLO text, global form as JAX emits it for 4 partitions, of a tensor-parallel MLP block in
// MXFP8 (block-scaled FP8: f8e4m3fn data, one f8e8m0fnu scale per 32 elements): bf16 tokens
// [T,D] sharded on tokens are quantized ("__op$quantize"), multiplied by the column-parallel
// up projection f8e4m3fn[H,D] (rows sharded, with its scales [H,D/32]) in a
// "__op$block_scaled_dot" to bf16[T,H] sharded on columns; a ReLU; quantized again; then
// the row-parallel down projection f8e4m3fn[D,H] (contracting dim sharded, scales [D,H/32])
// back to bf16[T,D] sharded on tokens. T = `tokens`, D = `model`, H = `hidden`: D and H
// multiples of 128 (whole blocks of 32 on 4 devices), T of 4. Partitioned, the first dot all-gathers
// the FP8 tokens with their scales and the second reduce-scatters its partial sums: the two
// loops block-scaled-windowed-einsum builds.
std::string MxDemoModuleText(int64_t tokens, int64_t model, int64_t hidden);

}  // namespace weave::tools
