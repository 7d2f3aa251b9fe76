// Finding the all-to-all windowed einsum (windowed_einsum/all_to_all_windowed_einsum.h) again in a module:
// the structure that pass leaves, or XLA's WindowedEinsumHandler with
// xla_gpu_experimental_enable_alltoall_windowed_einsum leaves. Used by the compile report.
#pragma once

#include <cstdint>
#include <vector>

#include "hlo/ir.h"

namespace weave {

// The structure the rewrite leaves, found again in any module (ours or XLA's handler output):
// an add chain `add(X_{C-1}, ... add(X_0, broadcast(0)))` of C >= 2 chunks (an add may be folded
// into its GEMM as C, beta = 1) where every X_i is an
// all-to-all of a GEMM (B) or a GEMM (dot or cuBLAS custom call, through get-tuple-element /
// slice / reshape / bitcast / copy) reading an all-to-all through layout and dequantization ops
// (A). Used by the compile report ("windowed_loops", kind all-to-all).
struct AllToAllWindow {
  bool exchange_first = true;  // A: all-to-all -> dot; B: dot -> all-to-all
  const HloInstruction* result = nullptr;           // the last add
  std::vector<const HloInstruction*> all_to_alls;   // one per chunk, in chain order
  std::vector<const HloInstruction*> gemms;         // one per chunk
  int64_t group_size = 0;
};
std::vector<AllToAllWindow> FindAllToAllWindows(const HloComputation& computation);

// Does GEMM custom call `call` add its C operand (beta != 0 in its gemm_backend_config)? The
// fp8-gemm-rewriter folds an accumulate add(gemm, partial) into the call as C with beta = 1, as
// XLA's GemmRewriter does (FuseMatrixBiasAdd); the window finders follow the sum through it.
bool AccumulatesThroughC(const HloInstruction& call);

}  // namespace weave
