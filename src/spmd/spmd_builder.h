// Instruction builders of the SPMD partitioner: local ops, partition-id table lookups, masks and
// collectives with replica groups built as XLA's partitioner builds them
// (../shared/specs/spmd-partitioner.md §3 "Groups", "Offsets", "Masks").
//
// Collectives: all-gather, all-reduce and reduce-scatter get a fresh channel_id (a module-wide
// counter above the module's largest), use_global_device_ids=true and device ids r*P + pid
// (groups repeated per replica), written in iota form when the groups are one, else as lists;
// all-to-all gets a channel_id and partition-id groups; collective-permute partition-id pairs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "hlo/ir.h"
#include "spmd/sharding.h"

namespace weave::spmd {

struct EinsumDecision;  // einsum_planner.h

// Module-wide state shared by every computation's builder.
struct SpmdContext {
  HloModule* module = nullptr;
  int64_t num_partitions = 1;
  int64_t replica_count = 1;
  int64_t next_channel_id = 1;
  // XLA's xla_gpu_threshold_for_windowed_einsum_mib (GPU default 100000), for the remarks that
  // say what XLA's partitioner would do at each dot (partition_dot.cc).
  double xla_windowed_threshold_mib = 100000;
  // XLA's xla_enable_enzyme_comms_opt (partition_dynamic_update_slice.cc).
  bool enzyme_comms_opt = false;
  std::map<std::string, HloComputation*> reducers;  // "add.f32" -> scalar computation
  // PartitionDot's decisions (the iteration-space sharding, the operand and output shardings it
  // asks for, the steps it names) by everything they depend on (partition_dot.cc
  // DotDecisionKey): a layer stack repeats one dot form thousands of times, and the decision
  // procedure costs more than building the partitioned dot.
  absl::flat_hash_map<std::string, std::shared_ptr<const EinsumDecision>> dot_decisions;
};

class SpmdBuilder {
 public:
  SpmdBuilder(HloComputation* c, SpmdContext* ctx) : c_(c), ctx_(ctx) {}
  HloComputation* computation() const { return c_; }
  SpmdContext* context() const { return ctx_; }
  int64_t num_partitions() const { return ctx_->num_partitions; }

  HloInstruction* Add(HloOpcode op, const Shape& s, std::vector<HloInstruction*> ops,
                      const std::string& name = "");
  HloInstruction* Constant(Literal lit, const std::string& name = "constant");
  HloInstruction* ScalarConst(PrimitiveType t, double v);
  // broadcast(scalar) to `shape`.
  HloInstruction* Splat(HloInstruction* scalar, const Shape& shape);
  HloInstruction* Zeros(const Shape& shape);
  HloInstruction* PartitionId();  // u32[], one per computation
  // The s32 scalar table[pid] (a table over partitions 0..P-1): a constant 0 if all entries
  // are zero, else reshape(dynamic-slice(constant s32[P], partition-id)). Cached per table.
  HloInstruction* TableLookup(const std::vector<int64_t>& table);
  // Per data dim d: the s32 offset of this partition's tile in `s` for a value of `global`.
  std::vector<int64_t> OffsetTable(const Sharding& s, const Shape& global, int64_t dim) const;

  HloInstruction* Reshape(HloInstruction* x, const std::vector<int64_t>& dims);
  HloInstruction* Transpose(HloInstruction* x, const std::vector<int64_t>& perm);
  HloInstruction* Slice(HloInstruction* x, const std::vector<int64_t>& limits);  // [0, limit)
  // Pads x with zeros on the high side to `dims`.
  HloInstruction* PadHigh(HloInstruction* x, const std::vector<int64_t>& dims);
  HloInstruction* DynamicSlice(HloInstruction* x, const std::vector<HloInstruction*>& offsets,
                               const std::vector<int64_t>& sizes);
  HloInstruction* Select(HloInstruction* pred, HloInstruction* a, HloInstruction* b);
  // x with the elements at global index >= S_d along each uneven tiled dim of `s` in `dims`
  // replaced by `value` (a scalar of x's type): select(compare(iota_d + offset_d, S_d, LT), x,
  // value). x unchanged when no such dim.
  HloInstruction* MaskPadding(HloInstruction* x, const Sharding& s, const Shape& global,
                              const std::vector<int64_t>& dims, HloInstruction* value);

  // Collectives over partition-id groups (members in group order).
  HloInstruction* AllGather(HloInstruction* x, int64_t dim,
                            const std::vector<std::vector<int64_t>>& groups);
  HloInstruction* AllReduce(HloInstruction* x, const std::vector<std::vector<int64_t>>& groups,
                            HloComputation* reducer);
  HloInstruction* AllToAll(HloInstruction* x, int64_t dim,
                           const std::vector<std::vector<int64_t>>& groups);
  HloInstruction* CollectivePermute(HloInstruction* x,
                                    const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // The scalar `add` (or max/min/...) computation of element type t, created once per module.
  HloComputation* Reducer(HloOpcode op, PrimitiveType t);
  // The reducer that sums addends of type t: add, or `or` for pred.
  HloComputation* SumReducer(PrimitiveType t);
  // x all-gathered along `dim` over `groups`, the padding past `size` elements sliced off (the
  // gathered uneven tiles' last padding).
  HloInstruction* AllGatherTrimmed(HloInstruction* x, int64_t dim,
                                   const std::vector<std::vector<int64_t>>& groups, int64_t size);
  // x (this partition's piece) written into zeros of shape `whole` at this partition's offset
  // along `dim` (offsets[pid]; dynamic-update-slice, none when x is `whole`-shaped) and summed
  // over `groups` by all-reduce (SumReducer): each group ends with every member's piece in place.
  // The pieces must not overlap where they hold data (their zeros add nothing). XLA's
  // ReplicatePartial builds its small-dim replication the same way.
  HloInstruction* AllReduceInto(HloInstruction* x, const Shape& whole, int64_t dim,
                                const std::vector<int64_t>& offsets,
                                const std::vector<std::vector<int64_t>>& groups);

  // While `log` is set (not null), every instruction Add creates is appended to it: the
  // partitioner names the collectives each reshard emitted in its remark (spmd_partitioner.cc).
  void set_log(std::vector<HloInstruction*>* log) { log_ = log; }

 private:
  ReplicaGroups GlobalGroups(const std::vector<std::vector<int64_t>>& groups) const;
  HloComputation* c_;
  SpmdContext* ctx_;
  HloInstruction* pid_ = nullptr;
  std::vector<HloInstruction*>* log_ = nullptr;
  std::map<std::vector<int64_t>, HloInstruction*> tables_;
};

// The replica groups `groups` in XLA's text form: iota `[G,S]<=[..]T(..)` when they are one,
// else the list form.
ReplicaGroups MakeReplicaGroups(std::vector<std::vector<int64_t>> groups);

}  // namespace weave::spmd
