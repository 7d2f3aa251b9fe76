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

// Candidate sharding of `h`'s result from its operands. Reads (through `get`) the shardings of
// h's operands only, except when it sets *read_users (when given) to true: a dot whose operands
// imply two different tilings asks its lookahead (XLA's LookaheadUserSharding), which reads down
// its chain of single users.
std::optional<Sharding> InferFromOperands(const HloInstruction& h, const ShardingOf& get, int a,
                                          bool* read_users = nullptr);

// Candidate sharding of operand `i` of `user` from `user`'s sharding (`get` gives the other
// operands' current shardings). For tuple-shaped operands the candidate may have Unset leaves
// (no information for them). Reads the shardings of `user` and of its operands only.
std::optional<Sharding> InferOperandFromUser(const HloInstruction& user, int64_t i,
                                             const ShardingOf& get, int a);

// The levels at which an op's rule can differ, as a class of `a`: two levels with the same class
// give the same candidate from the same shardings, and the same ImproveLeaf decision (which
// reads a >= 1). Forward: a = 0 | 1-2 | 3 for broadcast (forward out of broadcast at 3), else
// 0 | 1-3. Backward: a = 0 | 1 | 2-3 for broadcast (backward into broadcast from 2), else
// 0 | 1-3. A rule that reads `a` in a new way must change these too.
int ForwardLevelClass(HloOpcode op, int a);
int BackwardLevelClass(HloOpcode op, int a);

// Window sizes of a reduce-window's `window={size=1x3 ...}` (empty if absent).
std::vector<int64_t> WindowSizes(const HloInstruction& h);

}  // namespace weave::spmd
