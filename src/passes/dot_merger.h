// dot-merger: XLA's DotMerger (xla/hlo/transforms/simplifiers/dot_merger.cc), guarded so that
// it cannot block FP8 GEMMs or undo a windowed einsum.
//
// XLA's meaning: dots that read one value X (directly or through transposes) are grouped by what
// a merged dot needs to agree on: X's batch and contracting dims, the element types of X, of the
// other operand and of the result, operand precisions and algorithm, and the operation queue.
// Within a group, sorted by the other operands' free size, the first window that qualifies is
// merged: each member's free size within a factor 20 of the first's, no member reachable from
// another (operands or control edges), the concat operand and result of the members so far at
// most `dot-merger-threshold-mb` MiB before the next one joins (default 32, XLA's
// xla_gpu_dot_merger_threshold_mb; so one member may take it past the limit), and a saving of
// X's reads above 1e-5 of XLA's modeled runtime. The merged dot is
//
//   merged = dot(X, concatenate(Y_1', ..., Y_n'))   (X on the side most members read it on)
//   Y_i'   = Y_i transposed and reshaped to [batch..., free, contracting...] when Y_1's
//            minor-most dim is a contracting dim, else to [batch..., contracting..., free] (XLA)
//   dot_i' = slice(merged) reshaped to its free dims and transposed to dot_i's own order
//
// with any number of batch, contracting and free dims, batch dims anywhere. Merging repeats in
// rounds, so that dots reading a merged dot's result can merge in turn; a merged dot is not
// merged again. Every dot that shares a value with another and is not merged gets a remark with
// the reason (different key, size, ratio, dependency, the caller's guard).
//
// What the caller decides (XLA's DotMerger takes a queue_id callback the same way):
//  - `queue_id`: the operation queue a dot runs on, part of the key (dots on different queues are
//    not merged); default 0 for every dot, as in XLA. The GPU pipeline passes the queue its
//    backend_config names (passes/gpu_backend_config.h OperationQueueId).
//  - `guard` (Weave, not in XLA): dots that must not be merged beyond XLA's conditions, each with
//    the reason for its remark; none by default. The compile pipeline's dot-merger takes the
//    windowed einsum guard (windowed_einsum/dot_merge_guard.h): windowed einsum steps, hand-written
//    collective matmuls, stream-annotated and FP8-derived dots.
// A dot with control predecessors or successors is not merged (the merge would drop the edge),
// nor one with an operand upcast from a sub-byte type such as s4 (XLA's HasSubByteUpcast).
// Each refusal and each merge gets a remark. Not followed as XLA does: a shared value reached
// through reshapes or bitcasts (XLA maps dim categories through them), and size-1 dims (XLA
// ignores them in the key).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "passes/pass.h"

namespace weave {

// Refusals a caller adds to the merger's own conditions.
class DotMergeGuard {
 public:
  virtual ~DotMergeGuard() = default;
  // Called once at the start of each DotMerger::Run, before any dot is considered.
  virtual void Prepare(const HloModule& module) = 0;
  // For `dots`, which all read one value as operand `side` (0 lhs, 1 rhs) in one computation:
  // the reason each dot that must not be merged must not be ("'d3' carries a stream annotation
  // ..."). Dots absent from the result may be merged.
  virtual std::map<const HloInstruction*, std::string> Refusals(
      const std::vector<HloInstruction*>& dots, int64_t side) = 0;
};

class DotMerger : public HloPass {
 public:
  using QueueIdFn = std::function<int64_t(const HloInstruction& dot)>;

  // `threshold_bytes`: XLA's max_size_to_merge (bytes). `queue_id` null: every dot on queue 0.
  // `guard` null: XLA's conditions only.
  explicit DotMerger(int64_t threshold_bytes = int64_t{32} << 20, QueueIdFn queue_id = nullptr,
                     std::shared_ptr<DotMergeGuard> guard = nullptr)
      : threshold_bytes_(threshold_bytes), queue_id_(std::move(queue_id)), guard_(std::move(guard)) {}
  std::string_view name() const override { return "dot-merger"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

  // Reads --dot-merger-threshold-mb (MiB, default 32, XLA's xla_gpu_dot_merger_threshold_mb) from
  // `options` as bytes; InvalidArgument for a negative or unreadable value.
  static absl::StatusOr<int64_t> ThresholdBytes(const PassOptions& options);

 private:
  int64_t threshold_bytes_;
  QueueIdFn queue_id_;
  std::shared_ptr<DotMergeGuard> guard_;
};

}  // namespace weave
