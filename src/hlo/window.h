// The `window={size=2x2 stride=1x1 pad=0_0x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}`
// attribute of reduce-window, select-and-scatter and convolution (XLA's Window proto), parsed
// from and printed to its text form. The instruction keeps the text as a raw attribute; the
// evaluator and the SPMD partitioner (its window dims, its halo rule) read it through here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// One dim of a window: its size, stride, low/high padding (may be negative), base (lhs) and
// window (rhs) dilation, and reversal.
struct WindowDim {
  int64_t size = 1, stride = 1, lo = 0, hi = 0, lhs_dilate = 1, rhs_dilate = 1;
  bool reversal = false;
};

// The window of `instr` over `rank` dims (all defaults without the attribute). InvalidArgument
// for a malformed one (a field with another number of dims, a bad number, an unknown field).
absl::StatusOr<std::vector<WindowDim>> ParseWindow(const HloInstruction& instr, size_t rank);

// The attribute text XLA prints, `{size=3x1 stride=2x1 pad=1_1x0_0}`: size always, the other
// fields only where some dim is not the default.
std::string WindowText(const std::vector<WindowDim>& w);

// Replaces (or adds) `instr`'s window attribute with `w`.
void SetWindow(HloInstruction* instr, const std::vector<WindowDim>& w);

}  // namespace weave
