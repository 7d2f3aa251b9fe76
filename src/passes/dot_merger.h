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
// the reason (different key, size, ratio, dependency, Weave's guards).
//
// Guard (Weave, not in XLA): a dot is never merged when either operand derives from FP8
// (dequantized, unscaled convert or direct FP8; passes/fp8_operand.h ReachesFp8), nor when it
// reads a windowed loop's cache (an operand that is, through dequantization and movable ops, a
// get-tuple-element of a while whose body has a collective-permute and a dot). XLA's FP8 tests
// had to switch the merger off because a merged dot reads a concatenation, which the FP8 GEMM
// rewriter cannot see through.
//
// Windowed einsum guard (Weave): the per-step partial dots of a windowed einsum loop are never
// merged, since merging them undoes the loop's overlap of compute with the collective-permutes:
//  - a dot whose backend_config carries a stream assignment (a non-zero "operation_queue_id", as
//    windowed-einsum-handler gives the dots of a loop body, or "force_earliest_schedule": true);
//    other instructions' "wait_on_operation_queues" name those queues, so the dot must stay;
//  - a dot in a while-loop body (or a computation it calls) whose computations also hold a
//    collective-permute(-start): a step of a windowed einsum ring, annotated or not.
//  - the steps of a hand-written collective matmul outside any loop (XLA issues 10640, 19555):
//    dots sharing an operand whose other operands come from one value through 0, 1, 2, ...
//    collective-permutes (views, converts and dequantizations looked through), or whose results
//    are sent on by collective-permutes (through add/convert/views: a reduce-scatter ring).
// A dot with control predecessors or successors is not merged (the merge would drop the edge),
// nor one with an operand upcast from a sub-byte type such as s4 (XLA's HasSubByteUpcast).
// Each refusal and each merge gets a remark. Not followed as XLA does: a shared value reached
// through reshapes or bitcasts (XLA maps dim categories through them), and size-1 dims (XLA
// ignores them in the key).
#pragma once

#include <cstdint>
#include <string_view>

#include "passes/pass.h"

namespace weave {

class DotMerger : public HloPass {
 public:
  explicit DotMerger(int64_t threshold_bytes = int64_t{32} << 20)
      : threshold_bytes_(threshold_bytes) {}
  std::string_view name() const override { return "dot-merger"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  int64_t threshold_bytes_;
};

}  // namespace weave
