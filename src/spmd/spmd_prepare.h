// "spmd-prepare": puts a global module in the form sharding-propagation and spmd-partitioner
// work on (../shared/specs/spmd-partitioner.md §2 "spmd-prepare"; XLA's CallInliner,
// FlattenCallGraph and ShardingPropagation's ProcessShardingInstruction):
//  1. every `call` is inlined (XLA inlines them before partitioning), except Shardy manual
//     computation bodies that sharding-import did not inline;
//  2. every while body/condition and conditional branch gets its own computation;
//  3. `Sharding` custom calls become `copy` instructions carrying the (provided) sharding; the
//     call's `unspecified_dims=[..]` backend config (and Shardy open dims, recorded by
//     sharding-import) stay refinable as `_weave_unspecified_dims`; an unannotated entry
//     parameter operand takes the sharding;
//  4. `annotate_device_placement`, `MoveToHost`, `MoveToDevice` and
//     `xla.sdy.PropagationBarrier` calls are replaced by their operand (identities for
//     partitioning; host offloading is out of Weave's scope);
//  5. an entry root that is a `while` or a `conditional` gets a `copy` root (tuple-shaped: a
//     tuple of its array leaves' copies, tokens passed through), so that the loop's (the
//     conditional's, which must agree with its branch roots) sharding can change while the
//     output's stays as provided.
// One remark per kind of change, with counts.
#pragma once

#include "passes/pass.h"

namespace weave::spmd {

class SpmdPrepare : public HloPass {
 public:
  std::string_view name() const override { return "spmd-prepare"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave::spmd
