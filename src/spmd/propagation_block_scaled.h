// sharding-propagation rules for XLA's block-scaling calls ("__op$quantize", "__op$dequantize",
// "__op$block_scaled_dot"; hlo/block_scaled_call.h). Internal to propagation_rules.cc.
//
// Forward: a quantize's (data, scale) take the operand's sharding; a dequantize takes its data's
// (else its scale's); a block-scaled dot takes what a dot with the call's dimension numbers would
// (`dot_forward`, the dot rule). Backward: the operand of a quantize takes the data result's
// sharding; a dequantize's data and scale take the result's; a block-scaled dot's lhs/rhs take
// what the dot rule gives, each scale its data's, the global scale replicated. Every sharding
// that reaches a scale keeps its blocks whole (FitScaleBlocks: the last dim untiled where a tile
// would split a block). nullopt: no candidate.
#pragma once

#include <functional>
#include <optional>

#include "hlo/ir.h"
#include "spmd/propagation_rules.h"
#include "spmd/sharding.h"

namespace weave::spmd {

// The dot rule, applied to a stand-in dot (which has no users).
using DotForwardFn = std::function<std::optional<Sharding>(const HloInstruction& dot)>;

// True for the calls these rules cover (not the cuDNN form, which only the GPU rewriter makes).
bool IsBlockScaledPropagated(const HloInstruction& h);
std::optional<Sharding> BlockScaledForward(const HloInstruction& h, const ShardingOf& get,
                                           const DotForwardFn& dot_forward);
std::optional<Sharding> BlockScaledOperandFromUser(const HloInstruction& user, int64_t i,
                                                   const Sharding& us, const ShardingOf& get);

}  // namespace weave::spmd
