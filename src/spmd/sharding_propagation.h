// "sharding-propagation": GSPMD's sharding propagation (../shared/specs/spmd-partitioner.md §2;
// XLA's ShardingPropagation).
//
// Provided shardings are every annotation present when the pass runs (after spmd-prepare:
// parameters, copies from `Sharding` calls, roots, any annotated instruction) except
// `{unknown}`, entry parameters whose `allow_spmd_sharding_propagation_to_parameters` bit is
// true and entry root leaves whose `..._to_output` bit is true (one bit per parameter / root leaf,
// or one for all; default false). An unannotated entry parameter or root whose bit is false is
// provided as replicated. Provided shardings are never overridden; only the dims listed in
// `_weave_unspecified_dims` may be refined.
//
// Algorithm: aggressiveness a = 0..3, each run to a fixed point; per round and computation
// (callees first): forward in post order (result from operands), then backward in reverse post
// order (operands from users), visiting only instructions whose neighbours changed, and skipping
// a step that last ran without a change at a level where its rule is the same, if nothing it
// reads was written since (it would change nothing again). Rules per
// op: propagation_rules.h. A sharding only becomes more specific (ImproveLeaf). A while, its
// body parameter and root and its condition parameter share one sharding; conditional branch
// parameters follow the operands and the result the branch roots. Finally Unset leaves become
// replicated, and allowed parameters/outputs whose new sharding does not divide their shape
// are replicated. Every instruction of the entry and of loop/branch computations then carries
// a `sharding=`.
//
// Not implemented: Shardy priorities (all annotations take part in one run) and shard_as /
// shard_like groups (`_weave_shard_as` is ignored); gather/scatter get no rule (replicated).
// Remarks: one analysis remark with the counts (instructions sharded, rounds per level).
#pragma once

#include "passes/pass.h"

namespace weave::spmd {

class ShardingPropagation : public HloPass {
 public:
  // `recompute_all` (pass option `--recompute-all`, default false): run every rule of every
  // visited instruction, instead of skipping a step whose inputs have not been written since it
  // last ran and changed nothing (which gives the same result: the reference it is tested
  // against).
  explicit ShardingPropagation(bool recompute_all = false) : recompute_all_(recompute_all) {}
  std::string_view name() const override { return "sharding-propagation"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  bool recompute_all_;
};

// Parses a header bit list `{true,false}` / `true` into per-index bits (empty = absent).
std::vector<bool> ParseAllowBits(const HloModule& module, std::string_view attribute);

}  // namespace weave::spmd
