// "windowed-einsum-epilogue": the elementwise epilogue written after an all-gather windowed einsum
// (a bias, an activation, a scaling) is computed by each ring step on the block it owns, so that
// every partial dot carries it and fp8-gemm-rewriter can fold it into the step's GEMM (vector
// bias, ReLU, GELU, ...), where XLA leaves it after the loop as one more kernel over the whole
// result.
//
// Input: an all-gather windowed loop (MatchWindowedLoop, kind all-gather) whose dots write their
// blocks of the loop's output element with dynamic-update-slice (non-contracting or batch
// windowing: every element of the output is written by exactly one step), and, after the loop,
// an elementwise region E reading that element:
//  - every instruction of E is add, subtract, multiply, divide, maximum, minimum, tanh,
//    exponential, negate or abs of the output's shape and element type;
//  - each operand of an instruction of E is the loop's output element, another instruction of E,
//    a constant, or a broadcast of a value computed before the loop whose broadcast dims leave out
//    every dim the steps write in blocks (a bias along N, a scalar);
//  - exactly one instruction of E (its sink) is read outside E, and the output element is read
//    only by E.
// The pass passes each broadcast value into the loop as a loop-invariant element, applies E to
// each step's block before its dynamic-update-slice (the broadcasts rebuilt at the block's shape),
// and replaces E's sink by the loop's output. Each element gets E once, by the step that owns it.
//
// Loops whose dots accumulate (contracting-dim windowing, reduce-scatter) are left alone: a bias
// there belongs to one step only. Every loop considered gets a remark. Errors only on an
// inconsistent module.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "passes/pass.h"

namespace weave {

class WindowedEinsumEpilogue : public HloPass {
 public:
  std::string_view name() const override { return "windowed-einsum-epilogue"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave
