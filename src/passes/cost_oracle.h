// The cost gate's interface: how a rewriting pass asks "is this rewrite worth it?" without
// knowing the performance model (passes/, spmd/ and gpu/ may not include sim/; the model lives
// in sim/ and `weave compile` wires it in). XLA decides windowed einsum by a byte threshold
// (`xla_gpu_threshold_for_windowed_einsum_mib`); Weave decides each candidate by estimating the
// candidate's time once per way of handling it (../shared/specs/performance-model.md).
//
// Contract for a pass (the windowed einsum decomposer, the all-to-all windowed einsum pass, the
// handler's in-ring / cache choice, ...):
//  1. For each candidate it would rewrite, once every structural check has passed (so that the
//     only open question is cost), and only when `cost_oracle()` is non-null, build a CostQuery:
//       - pass: the pass's registry name (the oracle re-runs that pass by name);
//       - location: the remark's location (usually the dot or collective name);
//       - seeds: the instructions the rewrite replaces (the collective and every dot it feeds or
//         that feeds it, and the glue between them, e.g. an all-reduce's dynamic-slice), all in
//         one computation. The oracle takes the seeds, everything on paths between them (within
//         64 steps: a candidate's glue is short) and the cheap producers of their operands
//         (dequantize chains, offset tables, partition-id),
//         and turns every other operand into a parameter: the *region*;
//       - variants: variants[0] is the baseline, normally {label "without", rewrite=false}; each
//         other variant is one way to rewrite, {label "with the loop", rewrite=true, options}.
//         `options` are pass options (`--key=value` keys) added for that variant: a chunk count,
//         a layout, "consumers in the ring" or not. A variant with rewrite=false means: the
//         asking pass leaves the region alone. A pass may also compare rewrites only (e.g. the
//         handler: cache vs in-ring), listing its current behaviour as variants[0].
//     The oracle estimates each variant as: the region, rewritten by the asking pass run with
//     the compile's options plus the variant's (no oracle, so it applies every match), then the
//     passes that follow it in the compile pipeline, simulated on the target system.
//  2. Call `Decide(query)`. The answer's `chosen` is the fastest variant, but a variant other
//     than variants[0] replaces the baseline only when it saves at least the decision margin:
//     max(DecisionMargin::relative x the baseline's time, DecisionMargin::absolute_us), by default
//     0.5% and 0.5 us (kDefaultDecisionMargin). Why a margin: estimates of the same candidate in
//     another context (compiling the compiled output again, a neighbouring loop already built)
//     differ by rounding (a few ppm) or by a few ns, which must not flip a decision
//     (idempotence: compiling the output again changes nothing; without a margin 16 of 200
//     gated fuzz programs flipped); and a gain below half a percent, or below a quarter of one
//     GEMM's launch overhead (2 us), is beneath what the model resolves (its calibration is
//     within 10-15% of the published measurements). Among the rewrite variants the fastest wins
//     (the earlier on ties). Obey the answer.
//  3. Give a remark with `estimate.Note()`, e.g.
//        [missed] not decomposed: predicted 41.2 us with the loop vs 33.0 us without on h100x8
//        [applied] ... -> AG loop 'windowed_loop'; predicted 950.1 us with the loop vs 1420.3 us
//                  without on h800x8
//  4. When the oracle cannot estimate (estimate.error non-empty: the region did not extract, a
//     pass failed on it, the model refused it), `chosen` is query.fallback (by default the last
//     variant: the rewrite, i.e. the behaviour without a gate); say so in the remark with
//     Note(), which then reads "no estimate (REASON); applied as without the cost gate".
//  5. With no oracle set (weave opt, unit tests, `--cost-gate=off`, an explicit
//     `--windowed-einsum-threshold-mib`), behave exactly as before: apply every match (subject to
//     the pass's own options such as XLA's byte threshold).
// A pass must not call the oracle from inside a half-done rewrite: the oracle only reads the
// module (it copies the region), but the seeds must form a valid module.
//
// Every Decide() is recorded (decisions()): `weave compile` lists them in its report with both
// estimates. Decide is not thread-safe; one oracle serves one compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// One way of handling a candidate (see the contract above).
struct CostVariant {
  std::string label;   // in remarks and the report: "without", "with the loop", "4 chunks"
  bool rewrite = false;  // false: the asking pass leaves the region alone
  std::map<std::string, std::string> options;  // pass options added for this variant
};

struct CostQuery {
  std::string pass;      // the asking pass's registry name, e.g. "windowed-einsum-decomposer"
  std::string location;  // remark location (instruction name)
  std::string what;      // short description for the report, e.g. "all-gather 'x' -> 3 dots"
  std::vector<const HloInstruction*> seeds;  // instructions of the candidate, one computation
  std::vector<CostVariant> variants;         // variants[0]: the baseline (wins ties)
  int fallback = -1;  // variant chosen when there is no estimate; -1 = the last one
  // Conservative bound: each variant is also estimated with its GEMMs of less than one wave
  // (fewer output tiles than SMs) on one stream, one after another (collectives still overlap
  // them), and the slower of the two estimates counts. The windowed einsum decomposer asks so:
  // the only published measurement of a windowed loop at small M (row C3, PyTorch's async TP)
  // ran such partial GEMMs one after another, so a gain that rests on them filling each other's
  // idle SMs from several streams is a model claim without a measurement. GEMMs of a wave or
  // more keep their streams (filling each other's last wave is what rows C1/C2 calibrate).
  bool one_stream_bound = false;
  // Optional: a topological index of the seeds' computation (an instruction's index is above
  // every indexed instruction it reads, directly or through unindexed ones), -1 for an
  // instruction it does not index. When it indexes every seed, the region's walk for paths
  // between seeds (sim/cost_gate.h) does not go on above an instruction below the lowest seed's
  // index, which no seed reaches: the region is the same, found in what lies between the seeds
  // rather than in everything kPathDepth steps upstream. The windowed einsum decomposer gives
  // its sweep's index (DecomposerContext::position).
  std::function<int64_t(const HloInstruction*)> topological_index;

  // The usual two-variant query: {"without", no rewrite} and {with_label, rewrite, options}.
  static CostQuery WithOrWithout(std::string pass, std::string location, std::string what,
                                 std::vector<const HloInstruction*> seeds,
                                 std::string with_label = "with the loop",
                                 std::map<std::string, std::string> options = {});
};

// The answer to one query.
struct CostEstimate {
  std::vector<std::string> labels;  // the variants' labels, in query order
  std::vector<double> us;           // predicted time of the region per variant, microseconds
                                    // (empty when there is no estimate)
  int chosen = 0;                   // index into the query's variants
  // Set when a rewrite variant was predicted faster than variants[0] but by less than the
  // margin (the baseline is kept): the saving that would have been needed, microseconds.
  double margin_us = 0;
  // With CostQuery::one_stream_bound: per variant, the estimate with the loop's GEMMs on their
  // own streams (`us` holds the slower of that and the bound); else empty.
  std::vector<double> concurrent_us;
  std::string system;               // the system estimated on, e.g. "h100x8"
  std::string error;                // non-empty: no estimate (chosen = the query's fallback)

  bool ok() const { return error.empty(); }
  // "predicted 41.2 us with the loop vs 33.0 us without on h100x8" (variants 1.. then 0; more
  // than two: "predicted 30.1 us with 2 chunks, 28.0 us with 4 chunks vs 41.0 us without on
  // h100x8"); with an error: "no estimate (ERROR); applied as without the cost gate" (or "left
  // as without the cost gate" when the fallback is variants[0]). When the margin kept the
  // baseline: "...; a gain under the gate's margin of 0.5 us" appended.
  std::string Note() const;
};

// How much a rewrite must save to replace the baseline (see the contract, item 2).
struct DecisionMargin {
  double relative = 0.005;   // fraction of the baseline's predicted time
  double absolute_us = 0.5;  // microseconds
  // The least saving that counts for a baseline of `baseline_us`.
  double For(double baseline_us) const;
};
inline constexpr DecisionMargin kDefaultDecisionMargin{};

// One recorded decision (the report's `cost_gate.decisions[]`).
struct CostDecision {
  std::string pass, location, what;
  CostEstimate estimate;
};

class CostOracle {
 public:
  virtual ~CostOracle() = default;
  // Estimates every variant, chooses (the fastest rewrite when it saves at least the margin
  // over variants[0], else variants[0]; the fallback on error) and records the decision. A query
  // with fewer than two variants, or no seeds, is answered with an error (chosen = fallback).
  CostEstimate Decide(const CostQuery& query);
  void set_margin(DecisionMargin m) { margin_ = m; }
  const DecisionMargin& margin() const { return margin_; }
  const std::vector<CostDecision>& decisions() const { return decisions_; }
  // The system the estimates are for ("h100x8").
  virtual std::string SystemName() const = 0;

 protected:
  // Predicted time per variant in microseconds (same order and size as query.variants), or an
  // error saying why there is no estimate. With query.one_stream_bound an oracle that models
  // streams returns the conservative times and may set concurrent_us_ (see CostEstimate).
  virtual absl::StatusOr<std::vector<double>> Estimate(const CostQuery& query) = 0;
  std::vector<double> concurrent_us_;

 private:
  std::vector<CostDecision> decisions_;
  DecisionMargin margin_ = kDefaultDecisionMargin;
};

// An oracle answering from a function: for unit tests of passes (no performance model needed),
// e.g. FunctionCostOracle([](const CostQuery& q) { return std::vector<double>{10, 5}; }).
class FunctionCostOracle : public CostOracle {
 public:
  using Fn = std::function<absl::StatusOr<std::vector<double>>(const CostQuery&)>;
  explicit FunctionCostOracle(Fn fn, std::string system = "test") :
      fn_(std::move(fn)), system_(std::move(system)) {}
  std::string SystemName() const override { return system_; }

 protected:
  absl::StatusOr<std::vector<double>> Estimate(const CostQuery& query) override {
    return fn_(query);
  }

 private:
  Fn fn_;
  std::string system_;
};

}  // namespace weave
