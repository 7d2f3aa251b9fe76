// The check of a partitioned module against the global program it came from
// (../shared/specs/spmd-partitioner.md §6):
//  1. global inputs from the seed (every parameter as its global shape);
//  2. reference: the global module on one device (`Sharding`, FuncResultSharding, placement
//     and barrier calls are identities); with manual regions, its global view on P devices
//     (global_view.h: every device runs the whole program, FullToShard takes the device's tile,
//     ShardToFull gathers), device 0's outputs;
//  3. the partitioned module on P·R devices, each fed its tiles of the same inputs per the
//     partitioned module's parameter shardings, padding poisoned (NaN for floats, 0x5A.. for
//     integers, true for pred) so that any read of padding shows; a maximal parameter reaches
//     only its device (the others get poison);
//  4. each root leaf reassembled from the partitioned module's root sharding: each tile from its
//     first holder in the device array, every other copy of it (its replication group, or every
//     device for a replicated output) bit-identical on the valid region before any tolerance
//     (this catches replica-group and tile-offset bugs), padding stripped; maximal: device d;
//  5. compared with `weave compare`'s tolerances, the norm-wise floor max(4, 2·G) ulps with G the
//     largest all-reduce/reduce-scatter group (bf16 partial sums round before the all-reduce, the
//     reference rounds once).
//  6. a manual root leaf (the global module has manual values, so its reference is the global
//     view): each device's output against the view's on the same partition; an output that
//     depends on an rng: on shape, range and the agreement of its copies (random_outputs.h);
//  7. an output that passed only thanks to the reassociated-sum allowance (the tolerance of 5.)
//     checked again with exact sums on both sides.
// Partially manual root leaves and regions are declined (Unimplemented).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/evaluator.h"
#include "hlo/ir.h"

namespace weave::eval {

struct GlobalCompareReport {
  CompareReport compare;  // one OutputComparison per root leaf (device = -1: reassembled)
  // Copies that should be identical but are not: "output 0 tile (1,0): device 3 differs from
  // device 1 at element 17 (0.25 vs nan)".
  std::vector<std::string> copy_mismatches;
  int64_t num_partitions = 1;
  bool pass = true;
  std::string ToString() const;
  std::string ToJson() const;
};

// Whether `partitioned` looks like `global` partitioned: same parameter count, and each of its
// parameter shapes is the local shape of the global one under its sharding, with at least one
// shape (parameter or root leaf) differing. On false, *why (optional) says what differs.
bool IsGlobalPartitionedPair(const HloModule& global, const HloModule& partitioned,
                             std::string* why = nullptr);

// The entry parameters of `partitioned` (by number) whose devices all receive the global input
// itself in CompareGlobalWithPartitioned (a replicated array parameter: its tile is the whole
// value), so its storage is shared, not held once per device. For EstimateMemoryBytes.
std::vector<bool> SharedInputParameters(const HloModule& partitioned);

// Runs the check. options.eval.num_partitions / replica_count: the partitioned module's counts
// (default: its header). Errors: InvalidArgument for modules that are not such a pair,
// evaluator errors prefixed "global module:" / "partitioned module:".
// Each output is judged path-aware (options.path_aware, eval/output_precision.h): at the
// narrowest float type its path rounds to in either module, e.g. an f32 output of an f16 dot
// whose partial sums the partitioned module all-reduces in f16 is judged at f16.
// `exact_copies` false: the copies of a tile (step 4) must agree within the output's tolerance
// rather than bit for bit; for compiled modules, whose windowed loops accumulate each device's
// partial products in its own ring order (`weave compile --verify-numerics`).
absl::StatusOr<GlobalCompareReport> CompareGlobalWithPartitioned(const HloModule& global,
                                                                 const HloModule& partitioned,
                                                                 const CompareOptions& options,
                                                                 bool exact_copies = true);

}  // namespace weave::eval
