// The global-view reference of a global module with manual regions
// (../shared/specs/spmd-partitioner.md §6 (2); the meaning of XLA's manual sharding, shard_map).
//
// A manual region (SPMDFullToShardShape -> per-device program -> SPMDShardToFullShape, as JAX's
// shard_map and Shardy's manual computations lower) cannot run on one device: its body is a
// per-device program that may call collectives. Its reference runs on P devices, each running
// the whole program on the full (replicated) inputs:
//   SPMDFullToShardShape(x)  -> the device's tile of x under x's sharding (the `Sharding` call
//                               feeding it), zero-padded to the shard shape (as the
//                               partitioner's FullToShard does): replicated -> tiled reshard;
//   SPMDShardToFullShape(y)  -> the tiles gathered under the call's own sharding, padding sliced
//                               off (tiled -> replicated reshard: one all-gather per tiled dim);
// everything else unchanged (`Sharding` calls stay identities). Every device then holds the
// same global outputs; device 0's are the reference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave::eval {

// Whether `module` has SPMDFullToShardShape/SPMDShardToFullShape calls, Shardy manual
// computations (xla.sdy.GlobalToLocalShape / LocalToGlobalShape), or values that are manual
// throughout (`sharding={manual}`: a per-device program from its parameters on, which every
// device of the view runs on the same inputs).
bool HasManualRegions(const HloModule& module);

// The global-view module for `num_partitions` devices (see above): a clone of `global`, its
// Shardy manual computations imported first (sharding-import), the conversion calls replaced by
// reshards, num_partitions set, parameter shardings removed (every device takes the full
// inputs). A call at the edge of a partially manual region (a manual subgroup on either side:
// JAX's shard_map over some mesh axes) works on the value of each manual group: FullToShard gives
// every device of group g block g of its operand (row-major over operand / shard shape);
// ShardToFull gathers, within each outer manual group, the blocks its devices hold (a device's
// block from its tile offset under the call's own sharding). Errors: InvalidArgument naming the
// call when a FullToShard operand has no tiled sharding, the shapes disagree, or the manual
// groups do not match the blocks.
// Why the reference of `module` is its global view: "it has manual values" (HasManualRegions),
// "it calls cross-partition collectives" (a collective with a channel_id in the global program:
// XLA's partitioner keeps such a user collective, so the reference runs it among P devices that
// all hold the whole program, as the partitioned one runs it among the devices), or "" when the
// global program runs on one device.
std::string GlobalViewReason(const HloModule& module);

absl::StatusOr<std::unique_ptr<HloModule>> BuildGlobalViewModule(const HloModule& global,
                                                                 int64_t num_partitions);

}  // namespace weave::eval
