// A scalar computation (a sort comparator, typically) compiled to straight-line steps over
// unboxed registers, so that a sort of n elements runs its comparator n·log n times without the
// interpreter's per-call allocations. Internal to src/eval.
//
// Compile() accepts computations whose parameters and instructions are all scalars of float
// (f16, bf16, f32, f64, f8) or integer/pred types, built from: parameter, constant, convert,
// bitcast-convert (same width), compare (any direction, IEEE or TOTALORDER), select, not,
// negate, abs, and add/subtract/multiply/maximum/minimum/and/or/xor. Everything else returns
// nullopt and the caller interprets the computation as before. Each step computes exactly what
// the array kernels of ops_elementwise.cc compute for one element (the same rounding and
// wrapping helpers of numerics.h); the sort additionally replays its first comparisons through
// the interpreter and keeps the interpreter if any result differs.
//
// JAX's top-k comparators (a total-order key made of bitcast-convert, compare and select, then
// an index tie-break) take about 30 steps; a [2, 209664] sort then runs in seconds instead of
// minutes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval {

class ScalarProgram {
 public:
  // nullopt when `c` uses anything outside the set above.
  static std::optional<ScalarProgram> Compile(const HloComputation& c);

  // Comparator form: parameters 2j and 2j+1 are the two elements of operand j being compared.
  // Steps that read only the even parameters (the left element) or only the odd ones (the
  // right) are computed once per element by CacheLine(); Compare() then runs only the steps
  // that mix the two. For JAX's total-order key comparators this is most of the work.
  // `vals[j]` is operand j; `at[e]` the flat index of element e of the line being sorted.
  void CacheLine(const Value* const* vals, const std::vector<int64_t>& at) const;
  // The root for (left = element x, right = element y) of the cached line: 0/1 for a pred
  // root (an integer root as is, a float root cast to int64).
  int64_t Compare(int64_t x, int64_t y) const;

 private:
  enum class Kind : uint8_t { kParam, kConst, kConvert, kBitcast, kCompare, kSelect, kUnary, kBinary };
  struct Step {
    Kind kind;
    HloOpcode op = HloOpcode::kAdd;
    PrimitiveType type = PrimitiveType::F32;       // result type
    PrimitiveType from = PrimitiveType::F32;       // operand 0's type
    ComparisonDirection dir = ComparisonDirection::kEq;
    bool total_order = false;
    int32_t a = -1, b = -1, c = -1;  // operand registers (kParam: parameter number)
    double cd = 0;                   // kConst (float)
    int64_t ci = 0;                  // kConst (int)
  };
  struct Reg {
    double d = 0;
    int64_t i = 0;
  };
  // Instruction `in` as a step: `s` with its type and operand 0's type set, `operand_reg` the
  // steps of its operands; nullopt when `in` is outside the compiled set.
  static std::optional<Step> CompileStep(const HloInstruction* in,
                                         const std::vector<int32_t>& operand_reg, Step s);
  // Files every step under const_steps_, left_steps_, right_steps_ or mixed_steps_.
  void SortStepsBySide();
  void Exec(size_t k, const Value* const* vals, const int64_t* idx) const;

  std::vector<Step> steps_;
  // Steps by the side of a comparison they read: constants only, left only, right only, both.
  std::vector<int32_t> const_steps_, left_steps_, right_steps_, mixed_steps_;
  mutable std::vector<Reg> regs_;  // one per step; not reentrant (one program per sort)
  mutable std::vector<Reg> left_cache_, right_cache_;  // CacheLine: element-major
};

}  // namespace weave::eval
