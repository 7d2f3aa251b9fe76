// "reduce-scatter-creator": all-reduce + dynamic-slice by partition-id becomes one reduce-scatter
// (XLA's ReduceScatterCreator; ../shared/specs/spmd-partitioner.md §4 step (4)).
//
//   ar = T[.., S, ..] all-reduce(x), replica_groups=G, to_apply=R
//   ds = T[.., S/|G|, ..] dynamic-slice(ar, 0, .., off(pid), .., 0)
//     with off(pid) = (position of pid in its group of G) * S/|G| on one dim d
//   ==>  ds = T[.., S/|G|, ..] reduce-scatter(x), dimensions={d}, same groups, R, channel_id
//
// Also through a high-side pad of the all-reduce on d (the partitioner pads an uneven dim to
// c·|G| before slicing): the pad moves onto the reduce-scatter's operand.
// Not rewritten (a remark says why): the all-reduce has other users; the offsets are not a
// function of partition-id and constants, or are not the partition's block; several dims are
// sliced; groups that do not name every partition once (several replicas, mesh form, no
// channel_id). Array all-reduces only. Linear in the module.
#pragma once

#include "passes/pass.h"

namespace weave::spmd {

class ReduceScatterCreator : public HloPass {
 public:
  std::string_view name() const override { return "reduce-scatter-creator"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave::spmd
