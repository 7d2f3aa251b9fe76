// --verify-numerics and --system of `weave compile` (see compile_numerics.h).
#include "tools/compile_numerics.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "eval/evaluator.h"
#include "eval/global_compare.h"
#include "eval/global_view.h"
#include "sim/simulator.h"
#include "tools/cli_util.h"

namespace weave::tools {
namespace {

void RecordComparison(const eval::CompareReport& cmp, NumericsRecord* n) {
  for (const eval::OutputComparison& c : cmp.outputs) {
    n->max_abs_error = std::max(n->max_abs_error, c.max_abs_error);
    n->max_rel_error = std::max(n->max_rel_error, c.max_rel_error);
    n->mismatches += c.mismatches;
    // Outputs not compared value for value against one reassembled array say how they were.
    if (c.path.rfind("random:", 0) == 0 || c.path.rfind("manual", 0) == 0 ||
        c.path.rfind("outfeed ", 0) == 0) {
      n->notes.push_back(c.path.rfind("outfeed ", 0) == 0 ? c.path
                                                           : absl::StrCat("output ", c.output, ": ", c.path));
    }
  }
}

// Bytes the evaluator holds for the entry's parameters and outputs of `m`.
int64_t EntryIoBytes(const HloModule& m) {
  int64_t total = eval::StorageBytes(m.entry()->root()->shape());
  for (const HloInstruction* p : m.entry()->parameters()) total += eval::StorageBytes(p->shape());
  return total;
}

// Draws of new inputs after a loop that did not end on the first ones.
constexpr int kEndlessLoopRetries = 3;

bool IsEndlessLoop(const absl::Status& s) {
  return absl::StrContains(s.message(), "without its condition turning false");
}

// The check's skip reason when the evaluator could not hold the compiled module (a value or a
// device's plan over the evaluator's limits, or an allocation or thread refused under the
// process's limits): the module was not judged, so it is not a failure.
std::string OutOfMemory(const std::string& msg, int64_t estimated_bytes) {
  if (absl::StrContains(msg, "refused")) {
    return absl::StrCat("the compiled module is too large to evaluate here (", msg, ")");
  }
  return absl::StrCat("the evaluator ran out of memory (", msg, "; its estimate was about ",
                      FormatBytes(estimated_bytes),
                      ", which leaves out thread stacks and library buffers)");
}

// Estimates the evaluator's memory for the check on `devices` devices into n->estimated_bytes
// (with a global input: its reference run alone, or the compiled module on every device plus
// the reference's inputs and outputs). False, with n->skipped saying why, when the estimate is
// over o.numerics_memory_bytes and not --force.
bool EstimateFitsEvaluator(const CompileOptions& o, const HloModule* global,
                           const HloModule& input, const HloModule& compiled, int64_t devices,
                           NumericsRecord* n) {
  // The reference runs first (the global program on one device, or its global view on every
  // partition when it has manual regions); its inputs and outputs stay while the compiled module
  // runs on every device.
  int64_t global_alone = -1;  // the reference run's own estimate (global input only)
  if (global != nullptr) {
    const int64_t ref_devices = eval::GlobalViewReason(*global).empty() ? 1 : n->num_partitions;
    global_alone = eval::EstimateMemoryBytes(*global, ref_devices);
    n->estimated_bytes = std::max(global_alone, eval::EstimateMemoryBytes(compiled, devices, eval::SharedInputParameters(compiled)) +
                                                    EntryIoBytes(*global));
  } else {
    n->estimated_bytes = std::max(eval::EstimateMemoryBytes(input, devices),
                                  eval::EstimateMemoryBytes(compiled, devices));
  }
  if (n->estimated_bytes > o.numerics_memory_bytes && !o.force) {
    n->skipped = absl::StrFormat(
        "the module is too large to evaluate here: about %s on %s (limit %s%s); "
        "--force runs it anyway",
        FormatBytes(n->estimated_bytes), CountOf(devices, "device", "devices"),
        FormatBytes(o.numerics_memory_bytes),
        global_alone < 0 ? std::string()
                         : absl::StrCat("; the global program alone: about ", FormatBytes(global_alone),
                                        global_alone <= o.numerics_memory_bytes ? ", which fits" : ""));
    return false;
  }
  return true;
}

// Compares the compiled module with the global program it was partitioned from (or the global
// program's global view when it has manual regions), drawing new inputs a few times after a loop
// that does not end on them; fills `n` (ran/pass/summary, or skipped when the reference cannot
// run or the compiled module does not fit the evaluator).
void CompareWithGlobal(const HloModule& global, const HloModule& compiled,
                       eval::CompareOptions* copts, NumericsRecord* n) {
  const std::string view = eval::GlobalViewReason(global);
  n->reference = !view.empty() ? absl::StrCat("the global module's global view on ",
                                              CountOf(n->num_partitions, "device", "devices"),
                                              " (", view, ")")
                               : "the global module on 1 device";
  absl::StatusOr<eval::GlobalCompareReport> cmp =
      eval::CompareGlobalWithPartitioned(global, compiled, *copts, /*exact_copies=*/false);
  // A loop whose trip count comes from the inputs may not end on the generated ones (the
  // evaluator stops it at its trip limit). Such inputs test nothing of the partitioning: the
  // check draws the next seed's inputs, a few times, and says so.
  const uint64_t first_seed = copts->eval.seed;
  for (int retry = 0; retry < kEndlessLoopRetries && !cmp.ok() && IsEndlessLoop(cmp.status()); ++retry) {
    n->notes.push_back(absl::StrCat("a while loop of the global program did not end on the inputs of seed ",
                                    copts->eval.seed, " (", cmp.status().message(), "); inputs of seed ",
                                    copts->eval.seed + 1, " used"));
    ++copts->eval.seed;
    n->seed = copts->eval.seed;
    cmp = eval::CompareGlobalWithPartitioned(global, compiled, *copts, /*exact_copies=*/false);
  }
  if (!cmp.ok()) {
    std::string msg(cmp.status().message());
    if (msg.rfind("partitioned module", 0) == 0 && absl::IsResourceExhausted(cmp.status())) {
      n->skipped = OutOfMemory(msg, n->estimated_bytes);
      return;
    }
    if (msg.rfind("partitioned module", 0) == 0) {
      n->ran = true;
      n->pass = false;
      n->summary = absl::StrCat("the compiled module could not be evaluated: ", msg);
      return;
    }
    n->skipped = absl::StrCat("the evaluator cannot run the global reference: ", msg);
    if (copts->eval.seed != first_seed) {
      absl::StrAppend(&n->skipped, " (on the inputs of seeds ", first_seed, " to ", copts->eval.seed, ")");
    }
    return;
  }
  n->ran = true;
  n->pass = cmp->pass;
  n->summary = cmp->ToString();
  RecordComparison(cmp->compare, n);
}

// Compares the compiled module with the (partitioned) input on the same partitions; fills `n`
// (ran/pass/summary, or skipped when the input cannot run or the compiled module does not fit
// the evaluator).
void CompareWithInput(const HloModule& input, const HloModule& compiled,
                      const eval::CompareOptions& copts, NumericsRecord* n) {
  n->reference = "the input";
  absl::StatusOr<eval::CompareReport> cmp = eval::CompareModules(input, compiled, copts);
  if (!cmp.ok()) {
    std::string msg(cmp.status().message());
    if (msg.rfind("module B", 0) == 0 && absl::IsResourceExhausted(cmp.status())) {
      n->skipped = OutOfMemory(msg, n->estimated_bytes);
      return;
    }
    if (msg.rfind("module B", 0) == 0) {
      // The input runs but the output does not: the rewrite produced something unrunnable.
      n->ran = true;
      n->pass = false;
      n->summary = absl::StrCat("the compiled module could not be evaluated: ", msg);
      n->skipped.clear();
      return;
    }
    n->skipped = absl::StrCat("the evaluator cannot run the input: ", msg);
    return;
  }
  n->ran = true;
  n->pass = cmp->pass;
  n->summary = cmp->ToString();
  RecordComparison(*cmp, n);
}

}  // namespace

void RunNumerics(const CompileOptions& o, const HloModule* global, const HloModule& input,
                 const HloModule& compiled, CompileReport* report) {
  NumericsRecord& n = report->numerics;
  n.requested = true;
  uint64_t seed = 0;
  try {
    seed = std::stoull(o.verify_seed);
  } catch (...) {
    seed = 0;
  }
  n.seed = seed;
  eval::CompareOptions copts;
  copts.eval.num_partitions = global != nullptr ? 0 : o.num_partitions;
  copts.eval.seed = seed;
  copts.rtol = o.rtol;
  copts.atol = o.atol;
  copts.norm_ulps = o.norm_ulps;
  n.num_partitions = eval::ResolvedNumPartitions(global != nullptr ? compiled : input, copts.eval);
  const int64_t devices =
      n.num_partitions * eval::ResolvedReplicaCount(global != nullptr ? compiled : input, copts.eval);
  if (!EstimateFitsEvaluator(o, global, input, compiled, devices, &n)) return;
  copts.eval.max_memory_bytes =
      o.force ? std::numeric_limits<int64_t>::max() : o.numerics_memory_bytes;

  if (global != nullptr) {
    CompareWithGlobal(*global, compiled, &copts, &n);
    return;
  }
  CompareWithInput(input, compiled, copts, &n);
}

void RunSimulation(const std::string& system, const HloModule& before, const HloModule& after,
                   CompileReport* report) {
  SimRecord& s = report->sim;
  s.requested = true;
  absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(system);
  if (!spec.ok()) {
    s.system = system;
    s.error = std::string(spec.status().message());
    return;
  }
  s.system = spec->name.empty() ? system : spec->name;
  sim::SimOptions options;
  absl::StatusOr<sim::SimResult> b = sim::SimulateModule(before, *spec, options);
  absl::StatusOr<sim::SimResult> a = sim::SimulateModule(after, *spec, options);
  if (!b.ok() || !a.ok()) {
    s.error = std::string((!b.ok() ? b.status() : a.status()).message());
    return;
  }
  s.ran = true;
  s.before_us = b->total_us;
  s.after_us = a->total_us;
  s.before_exposed_comm_us = b->exposed_comm_us;
  s.after_exposed_comm_us = a->exposed_comm_us;
}

}  // namespace weave::tools
