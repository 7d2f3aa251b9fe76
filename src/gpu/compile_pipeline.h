// Weave's compile pipeline, defined once: the windowed einsum and FP8 passes `weave compile`
// and `weave demo` run on a partitioned module, in order, and the pipeline made of them as one
// pass (MakeCompilePipeline). Every tool that runs the pipeline takes it from here: the compile
// driver (tools/compile_driver.h), the cost gate's continuation after a candidate rewrite
// (sim/cost_gate.h, given the names of the driver's pipeline), the simulator's calibration
// (sim/calibration.h) and the differential fuzz driver (tests/fuzz/differential.h, which runs
// the passes one by one to compare after each).
//
// The order follows XLA's GPU compiler where XLA has the pass (gpu_compiler.cc: the windowed
// einsum handler after SPMD partitioning, the dot merger before the GEMM rewriters, the
// cuBLASLt FP8 rewrite, then simplification):
//   collective-quantizer, windowed-einsum-decomposer, block-scaled-windowed-einsum,
//   all-to-all-windowed-einsum, windowed-einsum-handler, windowed-einsum-consumers-in-ring,
//   windowed-einsum-epilogue, collective-quantizer, dot-merger, block-scaling-rewriter,
//   fp8-gemm-rewriter, cse, dce, tuple-simplifier, while-loop-dead-tuple-elements.
// collective-quantizer runs twice: first so that the decomposer and the handler see every
// data-movement collective of a dequantized value already carrying FP8 (a collective between the
// dequantization and a windowed dot, such as the second all-gather of a value resharded in two
// steps, would otherwise leave a wide loop that only a second compile puts in FP8), and again
// after the windowed passes for the collectives they leave or create.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "passes/pass.h"

namespace weave {

// One pass of the pipeline and the group that switches it off (`weave compile --no-<group>`:
// quantize, decompose, handler, dot-merger, fp8-gemm, cleanup; all-to-all has no switch).
struct CompileStage {
  std::string_view pass;
  std::string_view group;
};

// The stages, in order.
const std::vector<CompileStage>& CompilePipelineStages();

// The pass names of every stage, in order.
std::vector<std::string> CompilePipelinePassNames();

// The pass names of the stages left on when the groups `off_groups` and the passes
// `off_passes` are switched off, in order. InvalidArgument naming the pipeline's passes when a
// name in `off_passes` is not one of them.
absl::StatusOr<std::vector<std::string>> CompilePipelinePassNames(
    const std::set<std::string>& off_groups, const std::set<std::string>& off_passes);

// The pipeline as one pass (an HloPassPipeline named "compile-pipeline"): the passes `names`
// (CompilePipelinePassNames, with or without switches) created from the PassRegistry with
// `options`, in the order given. A factory's error is returned with its code as
// "<pass>: <message>". A name the registry does not know (a pass missing from this build) is
// NotFound, unless `unavailable` is given: then the pass is left out and its name appended there.
absl::StatusOr<std::unique_ptr<HloPassPipeline>> MakeCompilePipeline(
    const std::vector<std::string>& names, const PassOptions& options,
    std::vector<std::string>* unavailable = nullptr);

// The pipeline in words for help texts: "verify, collective-quantizer, ..., fp8-gemm-rewriter,
// cleanup, verify" (the cleanup passes as one word).
std::string CompilePipelineSummary();

}  // namespace weave
