// The cost gate's performance-model side: a CostOracle (passes/cost_oracle.h) that estimates
// each variant of a candidate rewrite on a GPU system with the simulator (simulator.h).
//
// For a query it extracts the candidate's *region* (ExtractCostRegion) as a standalone module,
// then for every variant: copies the region, runs the asking pass on it when the variant
// rewrites (created by name from the PassRegistry with the compile's options plus the variant's,
// and no oracle, so that it applies every match), runs the passes that follow the asking pass in
// the pipeline, as one pipeline made by MakeCompilePipeline (gpu/compile_pipeline.h) (so FP8 GEMMs, the handler's streams and caches are in the estimate, exactly as
// `weave compile` would emit them), and simulates the result: the variant's time is the region's
// makespan on one partition. The region is the candidate alone: other work of the module that a
// plain collective could overlap with is not in the estimate.
//
// Results are cached per (pass, variant options, region with canonical names, ids ranked and
// metadata dropped: CanonicalRegionText): the repeated layers of a model cost one estimate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "passes/cost_oracle.h"
#include "passes/pass.h"
#include "sim/simulator.h"

namespace weave::sim {

// The region of a candidate: the seeds, every instruction on a path between two seeds (paths
// that reach their second seed within 64 steps: more than any candidate of the shared dumps
// needs, attention between a decomposer's dots included), and the cheap producers of their
// operands up to 4 levels back (constants, iota, partition-id, broadcast, convert,
// reshape/bitcast/copy/transpose, slices, scalar and dequantize arithmetic), and the
// get-tuple-elements through which the rest of the computation reads a region's tuple (a loop's
// state), in one entry computation whose parameters stand for every other operand (same names
// and shapes; a single-element one proven the same on every partition is marked
// `sharding={replicated}`), whose root is a tuple of the region's values that the rest of the
// computation reads or that nobody in the region reads (so that the passes run on the region
// keep exactly what they keep in the module), and which keeps the computations the region calls.
// num_partitions and replica_count are the module's. Costs what the candidate touches, not the
// computation: a compile asks once per candidate.
// InvalidArgument when the seeds are empty or not all in one computation, or the region does
// not parse (the message says why).
absl::StatusOr<std::unique_ptr<HloModule>> ExtractCostRegion(
    const std::vector<const HloInstruction*>& seeds);
// ExtractCostRegion in two steps: the region's HLO text (errors as above, but for the parse),
// and its parse (InvalidArgument "the candidate's region does not stand alone: ..." when the
// text does not parse).
// With `topological_index` (CostQuery::topological_index), the same text, found with a walk that
// stops below the lowest seed's index.
absl::StatusOr<std::string> CostRegionText(
    const std::vector<const HloInstruction*>& seeds,
    const std::function<int64_t(const HloInstruction*)>& topological_index = nullptr);
absl::StatusOr<std::unique_ptr<HloModule>> ParseCostRegion(const std::string& text);

// Text of `module` with every instruction and computation renamed in order (i0, i1, ...; c0,
// ...), channel ids and operation_queue_ids replaced by their ranks and metadata dropped: equal
// for two regions that differ only in names, ids and source locations (the same candidate in
// every layer of a model), none of which an estimate reads.
std::string CanonicalRegionText(const HloModule& module);

// The key SimCostOracle finds a candidate's region by, made without parsing it: the text
// CostRegionText would give, printed in the printer's canonical-names mode
// (hlo/instruction_text.h: every %name by its rank of first appearance, computation signatures
// and metadata left out, channel ids by rank among the region's), with queue ids by rank (as
// CanonicalRegionText ranks them). Equal keys mean regions equal up to names, channel and queue
// ids and source locations, hence equal CanonicalRegionText (attribute values the printer keeps
// verbatim, such as frontend attributes, are verbatim in both); the same candidate in every
// layer of a model has one key, so a repeated layer costs one print of its region, not a parse.
// Regions equal only up to the order of their text get two keys (and the same estimate).
// Errors as CostRegionText's.
absl::StatusOr<std::string> CostRegionKey(
    const std::vector<const HloInstruction*>& seeds,
    const std::function<int64_t(const HloInstruction*)>& topological_index = nullptr);

struct CostGateConfig {
  SystemSpec system;                   // after overrides and SimOptions
  SimOptions sim_options;
  // The compile pipeline's pass names, in order: HloPassPipeline::pass_names of the pipeline the
  // compile runs (gpu/compile_pipeline.h).
  std::vector<std::string> pipeline;
  PassOptions pass_options;            // the compile's pass options
  // When set, every estimated variant is written there as HLO text after the passes
  // (<n>.<location>.<variant>.hlo, n counting estimates), for `weave simulate` to explain it.
  std::string dump_dir;
};

class SimCostOracle : public CostOracle {
 public:
  explicit SimCostOracle(CostGateConfig config) : c_(std::move(config)) {}
  std::string SystemName() const override { return c_.system.name; }
  // Estimates one variant of a region (exposed for tests and `weave simulate`): the region
  // rewritten as described above and simulated. Errors from a pass or the simulator.
  absl::StatusOr<double> EstimateVariant(const HloModule& region, const std::string& pass,
                                         const CostVariant& variant);
  // The same, simulated twice when `one_stream_bound`: as above, and with the GEMMs of less than
  // one wave on one stream (SimOptions::serial_sub_wave_gemms); {the slower, the first}.
  absl::StatusOr<std::pair<double, double>> EstimateVariantBound(const HloModule& region,
                                                                const std::string& pass,
                                                                const CostVariant& variant,
                                                                bool one_stream_bound);

 protected:
  absl::StatusOr<std::vector<double>> Estimate(const CostQuery& query) override;

 private:
  CostGateConfig c_;
  // Estimates by variant (rewrite or leave, options, one-stream bound) and region: the region as
  // the number of its pass and CanonicalRegionText in canonical_ids_, so that a query hashes and
  // copies its region's text once, not once per variant.
  absl::flat_hash_map<std::string, std::pair<double, double>> cache_;
  // The pass and CanonicalRegionText of each region estimated -> its number (from 0).
  absl::flat_hash_map<std::string, int64_t> canonical_ids_;
  // Region key (pass and CostRegionKey) -> the number of its canonical text: finer than the
  // canonical text, so the estimates are those it gives.
  absl::flat_hash_map<std::string, int64_t> canonical_id_of_key_;
  int64_t dumped_ = 0;
  std::string dump_name_;  // file name stem of the variant being estimated
};

}  // namespace weave::sim
