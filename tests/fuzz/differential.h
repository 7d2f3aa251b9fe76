// Differential checks of Weave's pipeline on one module, against the reference evaluator
// (issue 14): the checks `weave compile --verify-numerics`, `weave opt --passes=P --verify-each`
// + `weave compare`, a second compile and a print/parse round trip would make, run in-process
// so that one program costs milliseconds and a libFuzzer target can call them.
//
// For a module M (HLO text):
//  1. M parses and verifies, and the evaluator runs it: otherwise INVALID (the generator or the
//     reproducer is at fault, not the compiler).
//  1b. A global module (spmd/input_form.h; GSPMD or Shardy shardings) is partitioned first by
//     the SPMD pipeline (spmd/partition_pipeline.h, verifying after every pass: an error is a
//     CRASH "error:partition") and compared with the global program on one device
//     (eval/global_compare.h: "numerics:global:partitioned"); the checks below then run on the
//     partitioned module, and the compiled output is compared with the global program too
//     ("numerics:global:compiled").
//  2. The compile pipeline (gpu/compile_pipeline.h) on a clone of M, verifying after every
//     pass: a pass that returns an error or leaves a module that does not verify is a CRASH
//     (a pass never fails on a valid module). Every intermediate module that changed is
//     compared with M on the evaluator ("numerics:after:<pass>"): the first pass that breaks
//     the numerics is named. A difference beyond tolerance, or an output the evaluator cannot
//     run, is a MISMATCH.
//  3. Each pass alone on M ("numerics:alone:<pass>", verified, compared when it changed M).
//  4. Idempotence: compiling the output again must give the same text ("idempotence").
//  5. Round trip: the output printed, parsed and printed again gives the same text, and the
//     parsed module verifies ("round-trip"); the same for M.
// Crashes by signal and timeouts cannot be seen from inside: the driver (driver_main.cc) runs
// each check in a child process and classifies those as CRASH and TIMEOUT.
//
// It also collects *findings*: missed rewrites that are not wrong values, the known bugs 1-4 of
// issue 14 and their kind (see Finding names below); with `findings_fatal` they count as a
// MISMATCH of check "finding:<name>".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weave::fuzz {

enum class Verdict { kPass, kMismatch, kCrash, kTimeout, kInvalid };
std::string_view VerdictName(Verdict v);  // "PASS", "MISMATCH", ...
std::optional<Verdict> ParseVerdict(std::string_view name);

struct CheckOptions {
  // Passes of the pipeline; empty = `weave compile`'s.
  std::vector<std::string> pipeline;
  // Extra pass options (`--key=value` of weave compile), e.g. {"windowed-einsum-unroll","false"}.
  std::vector<std::pair<std::string, std::string>> pass_options;
  bool each_pass_alone = true;
  bool after_each_pass = true;   // compare every changed intermediate module
  bool idempotence = true;
  bool round_trip = true;
  uint64_t numerics_seed = 0;
  bool findings_fatal = false;
  // The cost gate of `weave compile` (sim/cost_gate.h) on this system for the pipeline and the
  // idempotence run ("" = no gate: every pass applies every match, the most rewrites).
  std::string cost_gate_system;
  // Called with a short label before each step ("pass windowed-einsum-handler", ...), so that a
  // parent process can say where a child crashed.
  std::function<void(const std::string&)> progress;
};

struct CheckResult {
  Verdict verdict = Verdict::kPass;
  std::string check;   // the failed check, e.g. "numerics:after:windowed-einsum-handler"
  std::string detail;  // message (first lines of the comparison table, the error, a diff line)
  // Rewrites that fired (weave compile's report names, plus "fp8-shift": the handler moved a
  // dequantization into a loop).
  std::map<std::string, bool> fired;
  // Missed-rewrite findings, e.g. {"deferred-uncached", "dot 'y1' ..."}.
  std::vector<std::pair<std::string, std::string>> findings;
  int64_t windowed_loops = 0;
  double max_rel_error = 0;  // worst over the numerics checks that ran
  // "verdict check" — what the reducer keeps constant while shrinking.
  std::string Signature() const;
};

// Finding names:
//  deferred-uncached        the decomposer left a dot for the handler's cache and its
//                           all-gather is still in the output (issue 14 known bug 1)
//  loop-not-recognised      the handler says a loop the decomposer made is not a windowed
//                           einsum loop; ":rs-ring-2" (known bug 2: two-partition reduce-scatter
//                           loops) and ":rs-batch" (known bug 3: reduce-scatter loops over a batch
//                           dim) are named apart
//  loop-not-unrolled        a recognised windowed loop of the output still runs several trips
//  layout-unrecognised      the report's loop layout is "unrecognised" (known bug 4)
CheckResult CheckModuleText(const std::string& text, const CheckOptions& options);

}  // namespace weave::fuzz
