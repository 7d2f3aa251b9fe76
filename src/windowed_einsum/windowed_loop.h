// Structural recognition of windowed einsum (collective matmul) loops, the `while` loops XLA's SPMD
// partitioner emits for tensor-parallel dots (../shared/specs/spmd-windowed-einsum.md §2-3) and the
// forms Weave's windowed-einsum-handler rewrites them into
// (../shared/specs/windowed-einsum-handler.md). Shared by the handler, the compile report and the
// performance model, which list the loops of a module.
//
// A loop is recognised by its structure, never by its name (the body name
// `windowed_dot_general_body_ag/_rs` is only a hint that is reported):
//  - the loop state is a tuple `(lhs, rhs, out, extra, counter:u32|s32, ...)`: the counter at index
//    4, possibly followed by elements the handler appends (two FP8 scales, an activation cache);
//  - the body param is read only through get-tuple-element;
//  - the trip count is known: the init counter is a constant, the body adds a constant, and the
//    condition is a comparison of the counter with constants (evaluated step by step);
//  - all-gather (AG) loop: one of elements 0/1 (the windowed operand) is passed to the next
//    iteration through a ring of collective-permutes (rolled layout: a pred `conditional` whose true
//    branch permutes and whose false branch passes the value through), the other one unchanged;
//    every dot reads the windowed operand (optionally dequantized) after 0..k ring steps;
//  - reduce-scatter (RS) loop: elements 0/1 are passed through unchanged, every dot reads a
//    dynamic-slice of one of them and the other one (optionally dequantized) and is merged into an
//    accumulator with `add`; the accumulators travel through collective-permutes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hlo/ir.h"

namespace weave {

enum class WindowedLoopKind { kAllGather, kReduceScatter };
enum class WindowedLoopLayout {
  kUnrolledByTwo,  // two dots per iteration, no conditional (XLA's unrolled layout, even N)
  kRolled,         // one dot per iteration, the next permute guarded by a conditional (odd N)
  kFullyUnrolled,  // every ring step in one body that runs once, marked with the frontend
                   // attribute skip-simplify-while-loops_trip-count-one="true" (handler output)
  kOther,          // another number of dots per iteration, no conditional
};
std::string_view WindowedLoopKindName(WindowedLoopKind k);      // "all-gather" / "reduce-scatter"
std::string_view WindowedLoopLayoutName(WindowedLoopLayout l);  // "unrolled-by-2", "rolled", ...

// The frontend attribute the handler sets on fully unrolled loops (value "true").
inline constexpr char kTripCountOneAttr[] = "skip-simplify-while-loops_trip-count-one";

// One transfer on the way of a value through the ring: a collective-permute, or a pred
// conditional whose true branch is one collective-permute of its parameter and whose false branch
// returns its parameter.
struct RingStep {
  HloInstruction* instr = nullptr;      // the collective-permute or the conditional
  HloInstruction* permute = nullptr;    // the collective-permute (inside the branch if guarded)
  HloInstruction* predicate = nullptr;  // conditional only: its pred operand
};

// One dot of the body and how it is fed.
struct WindowedDot {
  HloInstruction* dot = nullptr;
  // AG: the window value the dot reads, before any dequantization (a get-tuple-element of the
  // body param, a collective-permute or a conditional). RS: the sliced operand's get-tuple-element.
  HloInstruction* window = nullptr;
  // AG: the ring steps from get-tuple-element(param, windowed_operand) to `window`, in order.
  std::vector<RingStep> ring;
  // The user that merges the dot's result: dynamic-update-slice (AG non-contracting/batch) or add;
  // for an RS GEMM call that adds its C operand (beta != 0), the call itself.
  HloInstruction* merge = nullptr;
  // RS loops over a batch dim: the other operand's get-tuple-element, also read through a
  // dynamic-slice (the decomposer slices both operands on their batch dims); null otherwise.
  HloInstruction* other_slice = nullptr;
};

// The handles below are what the IR's (shallow-const) accessors give: the body's instructions are
// mutable, for the handler that rewrites the loop it matched; the while itself is const, the
// matcher's argument (a pass that rewrites the while holds its own mutable pointer).
struct WindowedLoop {
  const HloInstruction* while_instr = nullptr;
  HloInstruction* init = nullptr;  // the while's operand (usually a tuple)
  HloComputation* body = nullptr;
  HloComputation* condition = nullptr;
  WindowedLoopKind kind = WindowedLoopKind::kAllGather;
  WindowedLoopLayout layout = WindowedLoopLayout::kUnrolledByTwo;
  // AG: index (0 = lhs, 1 = rhs) of the operand that circulates. RS: the operand that is
  // dynamic-sliced (the other one is read whole, unless rs_both_sliced).
  int64_t windowed_operand = 0;
  // RS loops over a batch dim: every dot reads dynamic-slices of both operands (then
  // windowed_operand is 0).
  bool rs_both_sliced = false;
  // The body's collective-permutes all map every partition to itself (XLA's unrolled RS layout on
  // a ring of 2 shifts by -2 = 0); accepted for reduce-scatter loops of 2 blocks only.
  bool identity_permutes = false;
  int64_t counter_index = 4;
  int64_t init_counter = 0;
  int64_t trip_count = 0;         // iterations of the while
  int64_t ring_size = 0;          // N: blocks visited = trip_count * dots per iteration
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;  // of the first ring permute
  std::vector<WindowedDot> dots;  // in body order
  std::vector<HloInstruction*> permutes;      // every collective-permute of the body (and branches)
  std::vector<HloInstruction*> conditionals;  // every conditional of the body
  // AG: the ring steps from get-tuple-element(param, windowed_operand) to root operand
  // windowed_operand (empty once the handler made the element a pass-through).
  std::vector<RingStep> root_ring;
  std::string name_hint;  // "windowed_dot_general_body_ag" etc. when the body name says so
  // Handler layout: elements 0/1 are FP8 with their scales at these tuple indices.
  bool fp8_operands = false;
  std::optional<int64_t> scale_index[2];
  // Handler layout: the activation cache element (AG), found by its dynamic-update-slice chain.
  std::optional<int64_t> cache_index;

  // A one-line summary: "all-gather loop 'loop' (unrolled-by-2, N=4, windowed operand 0, 2 trips,
  // 2 dots, 2 collective-permutes)".
  std::string ToString() const;
};

// What MatchWindowedLoop accepts beyond the layouts above.
struct WindowedLoopMatchOptions {
  // Count cuBLAS GEMM custom calls (`__cublas$lt$matmul$f8`, `__cublas$lt$matmul`,
  // `__cublas$gemm`, as fp8-gemm-rewriter forms them) as the loop's dots: their operands are
  // followed through the canonicalising reshape/transpose/bitcast/copy/pad/convert ops to the
  // window, and their result through get-tuple-element(0) and slice/reshape/convert/bitcast to the
  // merging dynamic-update-slice or add. For readers of compiled modules (the report); the
  // handler does not set it (it never rewrites loops whose dots are already GEMM calls).
  bool gemm_custom_calls = false;
};

// Recognises `while_instr` as a windowed einsum loop (see the file comment), in any of the
// layouts above. Returns nullopt when it is not one; then *why_not (if non-null) receives the first
// condition that failed, e.g. "body has no collective-permute ring". Never modifies the module.
// Cost: linear in the size of the body (the trip count is simulated, at most 4096 iterations).
std::optional<WindowedLoop> MatchWindowedLoop(const HloInstruction* while_instr,
                                              std::string* why_not = nullptr,
                                              const WindowedLoopMatchOptions& options = {});

// Evaluates a scalar integer/pred expression of a loop body: constants, the loop counter
// (get-tuple-element(counter_param, counter_index) reads `counter`), partition-id (reads
// `partition`), add/subtract/multiply/divide/remainder/maximum/minimum/compare/select/and/or/not,
// and reshape/convert/bitcast/copy or dynamic-slice of a 1-D integer constant table (the block
// offset lookups of spmd-windowed-einsum.md §2). nullopt for anything else. Depth-limited.
struct ScalarEnv {
  const HloInstruction* counter_param = nullptr;
  int64_t counter_index = 4;
  int64_t counter = 0;
  int64_t partition = 0;
};
std::optional<int64_t> EvaluateScalar(const HloInstruction* v, const ScalarEnv& env);

// Walks back from `v` over collective-permutes and guarded (conditional) permutes to a
// get-tuple-element of `param`; fills `steps` in order from the get-tuple-element outwards and
// returns that get-tuple-element, or nullptr if `v` is not such a chain.
HloInstruction* TraceRing(HloInstruction* v, const HloInstruction* param,
                          std::vector<RingStep>* steps);

// Applies ring steps to "which partition's shard does partition p hold": holder[p] before, for
// every partition, becomes holder'[p] after (a partition no pair targets gets -1, as
// collective-permute gives it zeros). Guarded steps evaluate their predicate with `env` (the
// partition is set per p); nullopt if a predicate cannot be evaluated or differs between
// partitions.
std::optional<std::vector<int64_t>> ApplyRingSteps(const std::vector<RingStep>& steps,
                                                   std::vector<int64_t> holder, ScalarEnv env);

}  // namespace weave
