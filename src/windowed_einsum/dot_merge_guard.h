// The dot-merger's windowed einsum guard: the dots XLA's merger (passes/dot_merger.h) would merge
// but the compile pipeline must not, so that windowed einsum steps keep their overlap of compute
// with the collective-permutes and FP8 dots stay for fp8-gemm-rewriter. Weave's, not XLA's: XLA's
// FP8 tests switch its merger off instead, because a merged dot reads a concatenation, which the
// FP8 GEMM rewriter cannot see through. The pipeline's "dot-merger" (registered in the .cc) is
// DotMerger with this guard and the GPU backend's operation queues.
//
// A dot is refused, with the first reason that applies in this order:
//  - its backend_config carries a stream assignment (a non-zero "operation_queue_id", as
//    windowed-einsum-handler gives the dots of a loop body, or "force_earliest_schedule": true):
//    other instructions' "wait_on_operation_queues" name those queues, so the dot must stay;
//  - it is in a while body (or a computation the body calls) that holds a collective-permute
//    (WindowedStepScan::HoldsPermute): a step of a windowed einsum ring, annotated or not;
//  - an operand derives from FP8 (dequantized, unscaled convert or direct FP8;
//    passes/fp8_operand.h ReachesFp8);
//  - an operand reads a windowed loop's cache: through dequantization and movable ops, a
//    get-tuple-element of a while whose body holds a windowed einsum step
//    (WindowedStepScan::IsWindowedEinsumLoop);
//  - it is a step of a hand-written collective matmul outside any loop (XLA issues 10640,
//    19555): dots sharing an operand whose other operands come from one value through 0, 1, 2, ...
//    collective-permutes (views, converts and dequantizations looked through), or whose results
//    are sent on by collective-permutes (through add/convert/views: a reduce-scatter ring).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hlo/ir.h"
#include "passes/dot_merger.h"
#include "windowed_einsum/windowed_step_scan.h"

namespace weave {

class WindowedEinsumDotMergeGuard : public DotMergeGuard {
 public:
  // Finds the ring bodies of `module` (linear in the module).
  void Prepare(const HloModule& module) override;
  // The refusals above for `dots` (sharing operand `side`), each with its remark text.
  std::map<const HloInstruction*, std::string> Refusals(const std::vector<HloInstruction*>& dots,
                                                        int64_t side) override;

 private:
  // Every computation of a while body that (with what it calls) holds a collective-permute,
  // mapped to that body.
  std::map<const HloComputation*, const HloComputation*> ring_bodies_;
  WindowedStepScan scan_;
};

}  // namespace weave
