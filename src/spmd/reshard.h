// Resharding: moving a partitioned value from one sharding to another with collectives
// (../shared/specs/spmd-partitioner.md §3 "Reshard"; XLA's PartitionedHlo::Reshard), tried in
// XLA's order:
//   none     equal shardings;
//   slice    the target refines the source on every device (replicated -> tiled, partial ->
//            finer): a local dynamic-slice by partition-id offsets (padding first if needed);
//   permute  same tile counts, other device order: one collective-permute;
//   a2a      tiles moved from one dim to another ([4,1] -> [1,4]): pad and split the target
//            dim, all-to-all, transpose, merge, slice off padding;
//   halo     one dim's tile count changes and the tiles do not line up (6 rows from 2 to 4
//            tiles): collective-permutes of the halo, then for a coarser target an all-gather
//            (or all-reduce) of sub-tiles in groups (reshard_halo.h), where cheaper than the
//            alternatives below;
//   gather   the target drops tiling of some dims: one all-gather per such dim (last dim first,
//            over the devices that agree on every other dim of the device array), padding
//            sliced off, then a local slice if the target is finer;
//   steps    where cheaper than gather, or where gather would replicate: the cheapest chain of
//            slices, all-to-alls moving a factor of one dim's tiling to another, all-gathers of
//            a factor, and a final collective-permute (reshard_steps.h), e.g. [2,2] -> [4,1] as
//            one all-to-all, [4,1] -> [2,1] x 2 replicas as one all-gather of groups of 2,
//            [2,4,8,1] -> [4,2,1,8] as two all-to-alls;
//   full     anything else: replicate (all-gather every dim) and slice, reported as an
//            involuntary full rematerialization.
// A maximal source is first broadcast from its device (select(pid == d, x, 0) + all-reduce); a
// maximal target is computed replicated (every device holds the value; device d's copy is the
// one read). Partial values (XLA's unreduced: an unreduced subgroup, or `{unreduced}`) are summed
// first, one all-reduce per addend group, and a partial target is made by keeping the value on
// the first partition of each addend group and zeros on the others. A token is never moved.
// Manual shardings cannot be resharded (Unimplemented, naming both).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "spmd/reshard_halo.h"
#include "spmd/reshard_steps.h"
#include "spmd/spmd_builder.h"

namespace weave::spmd {

// A value being partitioned: its local (per-device) instruction, its sharding, its global shape.
struct PValue {
  HloInstruction* hlo = nullptr;
  Sharding sharding;
  Shape global;
};

enum class ReshardKind { kNone, kSlice, kPermute, kAllToAll, kHalo, kGather, kSteps, kFull };
std::string_view ReshardKindName(ReshardKind k);

struct ReshardPlan {
  ReshardKind kind = ReshardKind::kNone;
  std::vector<int64_t> gather_dims;  // kGather: dims all-gathered (then a slice if needed)
  int64_t from_dim = -1, to_dim = -1;  // kAllToAll
  ReshardSteps steps;                  // kSteps
  HaloReshard halo;                    // kHalo
  // Whether the plan all-gathers (kGather, kFull, kSteps with an all-gather step, or kHalo
  // joining sub-tiles).
  bool Gathers() const;
};

// The plan for an array value of `global` shape (Unset counts as replicated, Maximal targets as
// replicated). P = num_partitions.
ReshardPlan PlanReshard(const Sharding& from, const Sharding& to, const Shape& global,
                        int64_t num_partitions);
// Estimated bytes one device receives for the plan (0 for none/slice).
double ReshardCostBytes(const Sharding& from, const Sharding& to, const Shape& global,
                        int64_t num_partitions);
// Whether every device's tile of `to` lies within (the valid part of) its tile of `from`.
bool RefinesOnEveryDevice(const Sharding& from, const Sharding& to, const Shape& global,
                          int64_t num_partitions);

// What a reshard did, for its remark: the kinds it used (ReshardKindName, plus "all-reduce
// (partial sums)" and "maximal broadcast"; joined with "+" over a tuple's elements and the
// steps of a partial value) and the estimated bytes one device receives (ReshardCostBytes'
// estimate of each array reshard, summed).
struct ReshardSummary {
  std::string kinds;
  double bytes = 0;
  void Add(std::string_view kind, double b);
};

// Emits the reshard of `v` to `to` with builder `b`. Tuple values are resharded per element.
// `remat` (optional) receives a note when the full fallback was used; `summary` (optional) what
// was done.
absl::StatusOr<HloInstruction*> Reshard(SpmdBuilder& b, const PValue& v, const Sharding& to,
                                        std::string* remat = nullptr,
                                        ReshardSummary* summary = nullptr);

}  // namespace weave::spmd
