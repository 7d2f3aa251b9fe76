// Test-case reduction for the differential driver: shrinks a failing program while it keeps
// failing the same way (same verdict and same failed check, CheckResult::Signature), so that
// every bug lands as a minimal regression test. Each candidate is checked in a child process
// (campaign.h), so crashing and hanging candidates are fine.
//
// Two stages:
//  1. Trace (programs from the generator): delta debugging over the generator's decisions
//     (choice_source.h): delete chunks of the trace (halves down to single draws), zero them,
//     then lower single values. Fewer motifs, fewer dots, smaller dims and simpler forms follow,
//     and every candidate is a valid program by construction.
//  2. Instructions (any module, including the result of stage 1): on the entry computation's
//     printed text, delta debugging over the root tuple's elements (a single survivor becomes
//     the root), then, one instruction at a time, cutting an instruction off its operands
//     (it becomes a new parameter of its shape) and bypassing an instruction by an operand of
//     the same shape, each followed by dead-code removal and renumbering of the parameters.
//     Repeats until nothing more can be removed or the budget is spent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "differential.h"
#include "program_gen.h"

namespace weave::fuzz {

struct ReduceOptions {
  double timeout_s = 30;       // per candidate
  int64_t max_candidates = 600;
  std::function<void(const std::string&)> log;  // progress messages (may be empty)
};

struct ReduceResult {
  std::string text;        // the reduced module
  std::string signature;   // how it fails (CheckResult::Signature)
  int64_t instructions = 0;  // entry instructions of the reduced module
  int64_t candidates = 0;    // candidates checked
};

// Reduces the program of generator seed `seed`. FailedPrecondition if it passes.
absl::StatusOr<ReduceResult> ReduceSeed(uint64_t seed, const CheckOptions& check,
                                        const ReduceOptions& options,
                                        const GenOptions& gen = {});
// Reduces a failing module (stage 2 only). FailedPrecondition if it passes.
absl::StatusOr<ReduceResult> ReduceText(const std::string& text, const CheckOptions& check,
                                        const ReduceOptions& options);

// Stage 2's text surgery, exposed for tests. The entry computation of `text` (printed by Weave)
// with instruction `name` replaced by a new parameter of its shape / by its operand `operand`
// (same shape) / without root tuple element `index`; dead instructions removed and parameters
// renumbered. Empty when the edit does not apply.
std::string CutInstruction(const std::string& text, const std::string& name);
std::string BypassInstruction(const std::string& text, const std::string& name, int operand);
std::string DropRootElement(const std::string& text, int index);
// Dead-code removal and parameter renumbering alone (also drops the entry signature and
// entry_computation_layout, which the parser does not need).
std::string CleanUp(const std::string& text);
int64_t CountEntryInstructions(const std::string& text);

}  // namespace weave::fuzz
