// Internals of the reference evaluator (eval/evaluator.h), shared by its pieces:
//   evaluator.cc                 evaluation plans, interpreting a computation, memory bounds, the
//                                run (one thread per device)
//   evaluator_rendezvous.{h,cc}  the devices' rendezvous at collectives, deadlock detection
//   evaluator_instruction.cc     one instruction: opcode dispatch, data movement, control flow,
//                                custom calls, async wrappers
//   evaluator_reduce_sort.cc     reduce, reduce-window, sort (a computation applied per element)
//   evaluator_gather_scatter.cc  gather, scatter
//   evaluator_collectives.cc     replica groups and each collective's per-device result
//   evaluator_ragged_dot.cc      ragged-dot (its three modes)
//   evaluator_linalg.cc          triangular-solve, cholesky
//   evaluator_random.cc          rng (deterministic, a different stream on every device) and
//                                infeed (the same queue of generated values on every device)
//   evaluator_inputs.cc          generated and given inputs (sharded parameters tiled from one
//                                global array)
// Only these files include it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator.h"
#include "eval/evaluator_rendezvous.h"
#include "eval/value.h"
#include "hlo/ir.h"
#include "hlo/window.h"

namespace weave::eval::internal {

inline std::string OpName(HloOpcode op) { return std::string(HloOpcodeString(op)); }

// "opcode 'name' in computation 'c'", the prefix of the evaluator's errors.
inline std::string Describe(const HloInstruction* instr) {
  std::string s = absl::StrCat(OpName(instr->opcode()), " '", instr->name(), "'");
  if (instr->parent() != nullptr) absl::StrAppend(&s, " in computation '", instr->parent()->name(), "'");
  return s;
}

// Program: per-computation evaluation plans, built once per run and shared by all devices.

struct CompPlan {
  std::vector<const HloInstruction*> order;     // reachable from the root, operands first
  std::vector<std::vector<int32_t>> operands;   // slot of each operand
  std::vector<std::vector<int32_t>> release;    // slots whose last use is this step
  int32_t root = -1;
};

struct Program {
  const HloModule* module = nullptr;
  absl::flat_hash_map<const HloComputation*, CompPlan> plans;
  absl::flat_hash_map<const HloComputation*, std::optional<HloOpcode>> simple_binary;
  bool exact_sums = false;  // EvalOptions::exact_sums
  int64_t max_while_trips = int64_t{1} << 20;  // EvalOptions::max_while_trips
  uint64_t seed = 0;  // EvalOptions::seed: also the seed of `rng` (evaluator_random.cc)
};

// One move of an in-place collective-permute: source and target device (r * n + p), and the
// pair's occurrence (0-based) among the source's pairs and among the target's.
struct PermuteMove {
  int64_t source, target, source_use, target_use;
};

// The per-device interpreter.

class DeviceEvaluator {
 public:
  DeviceEvaluator(const Program& program, Coordinator* coord, int64_t device, int64_t n,
                  int64_t r)
      : program_(program), coord_(coord), device_(device), n_(n), r_(r) {}

  absl::StatusOr<ValuePtr> EvalComputation(const HloComputation* c,
                                           const std::vector<ValuePtr>& args);
  // What this device sent by outfeed so far, in order.
  std::vector<EvalResult::Outfeed> TakeOutfeeds() { return std::move(outfeeds_); }

 private:
  absl::StatusOr<ValuePtr> EvalInstruction(const HloInstruction* instr,
                                           const std::vector<ValuePtr>& ops,
                                           const std::vector<ValuePtr>& args);
  // EvalInstruction's op families (evaluator_instruction.cc): each evaluates the opcodes of its
  // family and returns nullopt for any other.
  using MaybeValue = std::optional<absl::StatusOr<ValuePtr>>;
  MaybeValue EvalStructural(const HloInstruction* instr, const std::vector<ValuePtr>& ops,
                            const std::vector<ValuePtr>& args);
  MaybeValue EvalArrayOp(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  MaybeValue EvalLinalgOrIndexing(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  MaybeValue EvalReductionOrIo(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  MaybeValue EvalControlFlow(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  MaybeValue EvalAsync(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalReduce(const HloInstruction* instr,
                                      const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalReduceWindow(const HloInstruction* instr,
                                            const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalSort(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalScan(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  // An async-update binding more of its computation's operands (XLA's late binding): the new
  // async value, with the computation's result once the last operand is bound.
  absl::StatusOr<ValuePtr> BindLate(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  // evaluator_random.cc
  absl::StatusOr<ValuePtr> EvalRng(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalInfeed(const HloInstruction* instr);
  // evaluator_select_and_scatter.cc
  absl::StatusOr<ValuePtr> EvalSelectAndScatter(const HloInstruction* instr,
                                                const std::vector<ValuePtr>& ops);
  absl::StatusOr<Value> Scatter(const HloInstruction& instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalCollective(const HloInstruction* instr, HloOpcode kind,
                                          const Shape& result_shape,
                                          const std::vector<ValuePtr>& ops);
  // The per-device results of an in-place collective-permute (evaluator_collectives.cc).
  absl::StatusOr<std::vector<ValuePtr>> InPlacePermute(const HloInstruction& in,
                                                       const std::vector<std::vector<ValuePtr>>& contrib,
                                                       const std::vector<PermuteMove>& moves,
                                                       const Shape& result_shape);
  // Applies a binary computation elementwise to two arrays of the same shape.
  absl::StatusOr<Value> ApplyBinaryComputation(const HloComputation* c, const Value& a,
                                               const Value& b);
  absl::StatusOr<ValuePtr> CallScalar(const HloComputation* c, const std::vector<ValuePtr>& args) {
    return EvalComputation(c, args);
  }

  const Program& program_;
  Coordinator* coord_;
  const int64_t device_, n_, r_;
  absl::flat_hash_map<const HloInstruction*, int64_t> exec_count_;
  int64_t infeeds_ = 0;  // infeeds this device has read (the position in its infeed queue)
  std::vector<EvalResult::Outfeed> outfeeds_;
};

// Windows of reduce-window, select-and-scatter and convolution: hlo/window.h.
using ::weave::ParseWindow;
using ::weave::WindowDim;

// The flat operand index (row-major `strides` over `dims`) that window element q (row-major over
// the window's sizes; decoded into *widx) of window position `oidx` reads, or -1 where it falls in
// padding or a dilation hole: the window walk of reduce-window and select-and-scatter.
int64_t WindowSource(const std::vector<WindowDim>& w, const std::vector<int64_t>& oidx, int64_t q,
                     const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     std::vector<int64_t>* widx);

// XLA's convolution (evaluator_convolution.cc).
absl::StatusOr<Value> Convolution(const HloInstruction& instr, const Value& lhs, const Value& rhs);

// XLA's fft: FFT, IFFT, RFFT, IRFFT (evaluator_fft.cc).
absl::StatusOr<Value> Fft(const HloInstruction& instr, const Value& x);

// XLA's triangular-solve and cholesky (evaluator_linalg.cc).
absl::StatusOr<Value> TriangularSolve(const HloInstruction& instr, const Value& a, const Value& b);
absl::StatusOr<Value> Cholesky(const HloInstruction& instr, const Value& a);

// XLA's ragged-dot of lhs, rhs and group sizes (evaluator_ragged_dot.cc).
absl::StatusOr<Value> RaggedDot(const HloInstruction& instr, const Value& lhs, const Value& rhs,
                                const Value& group_sizes);

// Scalar element `k` of array `v` as a new rank-0 value.
ValuePtr ScalarAt(const Value& v, int64_t k);
// Stores the rank-0 value `s` as element `k` of `dst` (same storage).
void StoreScalar(const Value& s, Value* dst, int64_t k);

// XLA gather of `operand` at `indices` (evaluator_gather_scatter.cc).
absl::StatusOr<Value> Gather(const HloInstruction& instr, const Value& operand,
                             const Value& indices);

// ResourceExhausted naming the first instruction whose result (or one tuple element of it) is
// larger than the evaluator's 64 GiB per-value limit or whose size overflows int64; OK otherwise.
absl::Status CheckValueSizes(const HloModule& module);

}  // namespace weave::eval::internal
