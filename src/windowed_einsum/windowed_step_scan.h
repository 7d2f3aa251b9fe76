// The one cheap test for "this while loop is a windowed einsum loop", shared by the dot-merger's
// guards (windowed_einsum/dot_merge_guard.h), the compile report (tools/report_loops.cc) and the
// performance model's kernel graph (sim/kernel_graph.cc). It looks at what a loop body holds, not
// at its layout: MatchWindowedLoop (windowed_loop.h) is the structural matcher that says which
// kind of loop it is, and callers that need the kind run it after this test.
//
// A windowed einsum step (XLA's windowed einsum loops, ../shared/specs/spmd-windowed-einsum.md §2,
// and the ones Weave's passes build) is a GEMM and the collective-permute that moves the next block
// around the ring. A GEMM here is a `dot`, a cuBLAS GEMM call (hlo/gemm_call.h: what
// fp8-gemm-rewriter makes of a dot) or a block-scaled dot call (hlo/block_scaled_call.h:
// `__op$block_scaled_dot`, `__cudnn$blockScaledDot`). A collective-permute is the synchronous op
// or its `collective-permute-start`.
#pragma once

#include <unordered_map>

#include "hlo/ir.h"

namespace weave {

// Remembers what each computation holds, so that asking about every while of a module reads each
// computation once: linear in the module's instructions and called-computation edges.
class WindowedStepScan {
 public:
  // True when `body`, with every computation it calls at any depth (fusions, calls, conditional
  // branches, async wrappers, nested loops, reducers), holds both a GEMM and a collective-permute.
  // False for null.
  bool HoldsWindowedStep(const HloComputation* body);

  // True when `comp`, with every computation it calls, holds a collective-permute (or its start):
  // a loop body that circulates values around a ring. False for null.
  bool HoldsPermute(const HloComputation* comp);

  // True when `w` is a while (with its condition and body) whose body holds a windowed einsum
  // step (HoldsWindowedStep).
  bool IsWindowedEinsumLoop(const HloInstruction& w);

 private:
  struct Contents {
    bool gemm = false;
    bool permute = false;
  };
  const Contents& Of(const HloComputation* comp);

  std::unordered_map<const HloComputation*, Contents> memo_;
};

}  // namespace weave
