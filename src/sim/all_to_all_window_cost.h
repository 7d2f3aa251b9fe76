// The cost model of the all-to-all windowed einsum (gpu/all_to_all_windowed_einsum.h): the
// predicted time of a candidate's region (the all-to-all, its dot and the layout/FP8 ops between
// them, as a module of its own) as the rest of `weave compile` would leave it.
//
// The region is first taken through the FP8 passes that run after the rewrite in the pipeline
// (collective-quantizer, then fp8-gemm-rewriter at the given compute capability), so that the
// exchange carries what it would carry (FP8 where the collective quantizer moves the
// dequantization past it) and the GEMMs run at the rate they would (FP8 GEMM custom calls), then
// simulated on one partition by SimulateModule (simulator.h): the chunked all-to-alls run one
// after the other on the communication stream while each partial dot runs on its own compute
// stream (its operation_queue_id) as soon as its chunk has arrived, so the model sees the
// overlap, the per-chunk latency (G-1 ring steps per all-to-all), the glue (slices, adds) and, for
// rewrite B, the C-fold bytes on the wire.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "gpu/all_to_all_windowed_einsum.h"
#include "hlo/ir.h"
#include "sim/simulator.h"

namespace weave::sim {

// Microseconds one partition takes for `region` on `system` (see the file comment). Errors from
// the passes or the simulator are passed on.
absl::StatusOr<double> EstimateAllToAllWindowRegionUs(const HloModule& region,
                                                      const SystemSpec& system,
                                                      double compute_capability = 9.0);

// The cost model for the pass, bound to `system` (named in remarks by its name).
AllToAllWindowCostModel MakeAllToAllWindowCostModel(const SystemSpec& system,
                                                    double compute_capability = 9.0);

// Attaches the cost model to `pass` when it is the all-to-all windowed einsum pass (no-op for any
// other pass). `system` is a built-in name or a system file; errors from LoadSystem.
absl::Status AttachAllToAllWindowCostModel(HloPass* pass, std::string_view system,
                                           double compute_capability = 9.0);

}  // namespace weave::sim
