// The run fuzzer's check (fuzz/run_fuzzer.cc, issue 50: the evaluator never crashes on a module
// the verifier accepts): parse, verify and, for a small module, run on the evaluator. Small
// means each input runs in well under a second under ASan, so that a slow input is a finding,
// not the norm.
#pragma once

#include <cstdint>
#include <string_view>

#include "eval/evaluator.h"
#include "hlo/ir.h"

namespace weave::fuzz {

// Loops stop after this many trips (EvalOptions::max_while_trips: ResourceExhausted, not a hang).
inline constexpr int64_t kMaxWhileTrips = 16;
// The evaluator's memory estimate limit, bytes (EvalOptions::max_memory_bytes).
inline constexpr int64_t kMaxEvalBytes = int64_t{64} << 20;
// The most simulated devices (partitions x replicas) a run may take.
inline constexpr int64_t kMaxDevices = 8;
// The most element operations (RunCost) a run may take.
inline constexpr int64_t kMaxRunCost = int64_t{1} << 24;
// What one instruction of a called computation costs on top of its elements, in element
// operations: the evaluator interprets a comparator, reducer or body instruction by instruction,
// each with a value to allocate, so a per-element call is far dearer than its scalar elements.
// (Found by the run fuzzer: a sort of 3 x 4000 keys through an interpreted 25-instruction
// comparator costs 1.6 s in the release build and 87 s under ASan: a timeout, not a hang.)
inline constexpr int64_t kInterpretedInstructionCost = 8;

// An upper estimate of the element operations of running `module` once per device: each
// instruction's result and operand elements; a dot's result times its contracted size; a
// convolution's result times its kernel's elements per output feature; reduce-window and
// select-and-scatter times their window; sort n log n comparisons; an op applying a computation
// per element (reduce, map, scatter, sort, all-reduce...) its elements times that computation's
// cost; a while loop kMaxWhileTrips times its body and condition; a call or conditional its
// callee (the costliest branch). A computation costs its instructions' costs plus
// kInterpretedInstructionCost per instruction. Saturates at INT64_MAX.
int64_t RunCost(const HloModule& module);

// True when the module is small enough to run (devices, the memory estimate, RunCost).
bool WithinRunBudget(const HloModule& module, const eval::EvalOptions& options);

// How far CheckParseVerifyRun got.
enum class RunStage { kParseError, kVerifyError, kOverBudget, kRan };

// Parses `text` (ParseHloModule), verifies it (VerifyModule) and, within the budget above, runs
// it on the evaluator with generated inputs (RunModule; loops capped at kMaxWhileTrips). Any
// error status of the run is an answer, not a finding; the caller's process crashing is. With
// `print` the module that reaches the evaluator goes to stderr first.
RunStage CheckParseVerifyRun(std::string_view text, bool print = false);

}  // namespace weave::fuzz
