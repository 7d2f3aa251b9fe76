// "Is this value the same on every partition (of a group)?" — a small, conservative version of
// XLA's HloReplicationAnalysis across partitions, used to prove that an FP8 scale agrees wherever
// a value travels (../shared/specs/windowed-einsum-handler.md §2: a partition must never
// dequantize a neighbour's shard with its own scale).
//
// The analysis computes, for each value, which partitions are guaranteed to hold equal values
// (an equivalence of partition ids 0..N-1, N = the module's num_partitions):
//  - a constant, an iota or replica-id: equal everywhere;
//  - an entry parameter (or one of its tuple leaves, tuple shardings followed per element):
//    `{replicated}` or no sharding at all is equal everywhere (in an SPMD module XLA's
//    SpmdPartitioner gives every unannotated instruction a replicated sharding; such parameters
//    are listed in ReplicationProof::unannotated_parameters so that callers can say so); a tiled
//    sharding is equal on the partitions that hold the same tile (its replicated dims, e.g.
//    last_tile_dim_replicate, group them), also across manual subgroups; `{manual}` and
//    `{maximal}` are equal nowhere;
//  - an all-reduce or all-gather across partitions (channel_id or use_global_device_ids): equal
//    within each of its replica groups (all partitions when the groups are empty); across
//    replicas only: as its operand;
//  - partition-id, rng, custom-call, collective-permute, all-to-all, reduce-scatter, infeed,
//    recv and other ops whose value may differ per partition: equal nowhere;
//  - any other side-effect-free op (elementwise, broadcast, reshape, dot, reduce, fusion, ...):
//    equal where all its operands are, if its called computations hold no partition-dependent op;
//  - a parameter of a called computation: equal where every caller's argument is; loop-carried
//    while state by induction (the init's equivalence, refined by the body root and the
//    condition until it holds); the result of a while/call/conditional from its roots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave {

struct ReplicationProof {
  bool proven = false;
  // When not proven: one line naming the first instruction that makes two partitions of a group
  // differ, e.g. "'pid' is partition-id (may differ between partitions)".
  std::string why;
  // Entry parameters without any sharding that the proof took as replicated (XLA's SPMD
  // semantics), in the order met.
  std::vector<const HloInstruction*> unannotated_parameters;
};

// Proves that `instr`'s value (every leaf of it, for tuples) is the same on all partitions of
// each group in `groups` (partition ids; values may differ between groups). An empty `groups`
// means one group of every partition. Conservative: not proven means "may differ". Linear in the
// size of the computations involved (loops: times the refinements of their state, at most N).
ReplicationProof ProveSameWithinGroups(const HloInstruction* instr,
                                       const std::vector<std::vector<int64_t>>& groups);

// ProveSameWithinGroups(instr, {}): the same on every partition. When false and `why` is
// non-null, *why receives the reason.
bool IsSameOnAllPartitions(const HloInstruction* instr, std::string* why = nullptr);

class ReplicationAnalyzerImpl;

// One analysis for many questions about one module: the values met (and the settled state of
// every loop) are memoized across questions, so asking about several values (the scalar
// parameters of a cost region) costs one walk of their common upstream instead of one walk each.
// Answers equal
// ProveSameWithinGroups(instr, groups).proven. Valid only while the module is unchanged: make a
// new one after a rewrite. Not thread-safe.
class ReplicationAnalysis {
 public:
  explicit ReplicationAnalysis(const HloModule& module,
                               std::vector<std::vector<int64_t>> groups = {});
  ~ReplicationAnalysis();
  ReplicationAnalysis(const ReplicationAnalysis&) = delete;
  ReplicationAnalysis& operator=(const ReplicationAnalysis&) = delete;
  // Whether `instr` (of the module) is proven the same on all partitions of each group; when
  // not and `why` is non-null, *why receives the reason.
  bool IsSame(const HloInstruction* instr, std::string* why = nullptr);

 private:
  std::unique_ptr<ReplicationAnalyzerImpl> impl_;
};

}  // namespace weave
