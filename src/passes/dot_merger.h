// dot-merger: XLA's DotMerger, guarded so that it cannot block FP8 GEMMs.
//
// XLA's meaning: two canonical dots (batch dims leading, then one free and one contracting dim on
// each side, in either order) that share an operand on the same side, have equal dimension
// numbers, operand precisions and element types, and do not depend on each other, become
//
//   merged = dot(shared, concatenate(other_a, other_b))   (or with the sides swapped)
//   a' = slice(merged), b' = slice(merged)
//
// concatenating along the other operands' free dim. Both dots must be small: bytes of the dot's
// result plus its operands <= `dot-merger-threshold-mb` MiB (default 32, XLA's
// xla_gpu_dot_merger_threshold_mb). Merging repeats within a group of dots sharing an operand.
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
// Each refusal and each merge gets a remark.
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
