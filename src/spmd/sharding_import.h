// "sharding-import": brings every sharding form of a global module into GSPMD `sharding=`
// attributes (../shared/specs/spmd-partitioner.md §1; XLA's sdy_round_trip import and
// HloSharding::V3ToV2Sharding).
//
//  - Shardy round-trip attributes: with `xla.sdy.meshes` in the module's frontend attributes,
//    every `xla.sdy.sharding` (`#sdy.sharding<...>` on values, `#sdy.sharding_per_value<[...]>`
//    on ops, one per result) becomes the instruction's `sharding=`. Shardy wins over a `sharding=`
//    JAX wrote too; a contradicting one gets a remark ("sdy wins"). Open dims (`?`) are recorded
//    as `_weave_unspecified_dims="[d,...]"` (refinable by propagation), priorities as
//    `_weave_sharding_priority`.
//  - `xla.sdy.FuncResultSharding` calls: an identity giving its root leaf's sharding. Directly
//    under the entry root tuple (or as the root) it is folded into the root's tuple sharding;
//    elsewhere it becomes a `Sharding` call.
//  - `xla.sdy.ShardingGroup` (shard_as): removed, its group id kept on the operand as
//    `_weave_shard_as`. `xla.sdy.PropagationBarrier`: kept for spmd-prepare.
//  - Manual computations (`xla.sdy.GlobalToLocalShape` -> call of
//    `xla.sdy.manual_computation_body*` -> `xla.sdy.LocalToGlobalShape`, with `in_shardings`,
//    `out_shardings`, `manual_axes`) become `Sharding` -> `SPMDFullToShardShape` {manual, or a
//    manual subgroup when only some axes are manual} ... `Sharding`{manual} ->
//    `SPMDShardToFullShape`; the body is inlined.
//  - XLA's named shardings `{mesh[...], [...]}` are already converted by the parser; their
//    text is rewritten in GSPMD form here.
// Afterwards no `xla.sdy.*` attribute or call is left. Errors (InvalidArgument naming the
// instruction) for unparsable Shardy text or meshes that do not match the value's rank.
#pragma once

#include "passes/pass.h"
#include "spmd/sdy_text.h"

namespace weave::spmd {

class ShardingImport : public HloPass {
 public:
  std::string_view name() const override { return "sharding-import"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  absl::StatusOr<bool> ImportManualComputations(HloModule* module, const SdyMeshes& meshes);
};

// Frontend attribute names Weave uses between the SPMD passes.
inline constexpr char kUnspecifiedDimsAttr[] = "_weave_unspecified_dims";
inline constexpr char kShardingPriorityAttr[] = "_weave_sharding_priority";
inline constexpr char kShardAsAttr[] = "_weave_shard_as";

}  // namespace weave::spmd
