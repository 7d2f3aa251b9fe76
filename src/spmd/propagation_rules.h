// Per-op sharding inference of sharding-propagation (../shared/specs/spmd-partitioner.md §2
// table; XLA's ShardingPropagation::InferShardingFromOperands / GetShardingFromUser).
//
// `a` is the aggressiveness level (0..3): a=0 only pass-through ops (elementwise, reshape,
// transpose, get-tuple-element, tuple, while, concatenate with its dim untiled, dynamic-slice,
// dynamic-update-slice, opt-barrier); a>=1 every op with a rule; a>=2 backward into broadcast;
// a=3 forward out of broadcast. nullopt: no candidate.
#pragma once

#include <functional>
#include <optional>

#include "hlo/ir.h"
#include "spmd/sharding.h"

namespace weave::spmd {

// The current sharding of an instruction (Unset when none).
using ShardingOf = std::function<const Sharding&(const HloInstruction*)>;

// Candidate sharding of `h`'s result from its operands.
std::optional<Sharding> InferFromOperands(const HloInstruction& h, const ShardingOf& get, int a);

// Candidate sharding of operand `i` of `user` from `user`'s sharding (`get` gives the other
// operands' current shardings). For tuple-shaped operands the candidate may have Unset leaves
// (no information for them).
std::optional<Sharding> InferOperandFromUser(const HloInstruction& user, int64_t i,
                                             const ShardingOf& get, int a);

// Window sizes of a reduce-window's `window={size=1x3 ...}` (empty if absent).
std::vector<int64_t> WindowSizes(const HloInstruction& h);

}  // namespace weave::spmd
