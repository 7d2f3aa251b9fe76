// Partition rings for windowed einsum loops: which partitions a partitioned collective
// (all-gather, reduce-scatter, all-reduce) spans, as the rings of collective-permutes that XLA's
// SPMD partitioner builds for its windowed einsum loops (../shared/specs/spmd-windowed-einsum.md
// §2, §6 "2D meshes"), plus a small evaluator for scalar offsets computed from partition-id
// (XLA's `MakePartitionOffsets` / `TableLookup` pattern).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// The groups of a partitioned collective, all of one size `size()`, each listing partition ids in
// the collective's group order (the order in which all-gather concatenates and reduce-scatter
// hands out blocks).
struct PartitionRing {
  int64_t num_partitions = 1;
  std::vector<std::vector<int64_t>> groups;
  // index_in_group[p]: position of partition p in its group (every partition is in one group).
  std::vector<int64_t> index_in_group;

  int64_t size() const { return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size()); }
  // True when there is one group {0, 1, ..., num_partitions-1}: then partition-id is the in-group
  // index and no lookup table is needed.
  bool IsIdentity() const;
  // source_target_pairs (global partition ids) for a rotation where the member at position i of
  // every group sends to position (i + shift) mod size(). XLA's windowed AG ring is shift = -1
  // (s -> s-1); the unrolled RS loop uses -2 in the body and +1 after the loop.
  std::vector<std::pair<int64_t, int64_t>> ShiftPairs(int64_t shift) const;
  // Text such as "{{0,1,2,3}}" or "[2,4]<=[8]" for remarks: the groups as the collective wrote
  // them (set by AnalyzePartitionRing).
  std::string groups_text;
};

// Works out the partition groups of `collective` (all-gather, reduce-scatter or all-reduce) in a
// module with `num_partitions` partitions and `replica_count` replicas, following XLA's
// CollectiveOpGroupMode: groups name partitions when num_partitions > 1, replica_count == 1 and
// either use_global_device_ids=true (global ids == partition ids with one replica) or a channel_id
// is set (cross-partition mode). Empty replica_groups mean one group holding every partition.
// Errors (FailedPrecondition, the message is a one-line reason fit for a remark): module not
// partitioned, several replicas, cross-replica collective (no channel_id), mesh-form groups,
// ids out of range or repeated, partitions missing from the groups, groups of different sizes.
absl::StatusOr<PartitionRing> AnalyzePartitionRing(const HloInstruction& collective,
                                                   int64_t num_partitions, int64_t replica_count);

// Evaluates a scalar integer value computed from partition-id, constants and simple arithmetic
// (partition-id, replica-id (0 with one replica), scalar or one-element constants, convert,
// reshape/bitcast/copy of one element, dynamic-slice of a rank-1 integer constant with sizes={1}
// (index clamped as HLO does), add, subtract, multiply, divide, remainder, minimum, maximum) for
// partition `pid`. nullopt when the value depends on anything else (parameters, loops, ...).
std::optional<int64_t> EvaluateForPartition(const HloInstruction* value, int64_t pid);

}  // namespace weave
