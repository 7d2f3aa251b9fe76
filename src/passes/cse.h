// "cse": common subexpression elimination of leaf instructions within each computation, the part
// of XLA's HloCSE the windowed einsum rewrites need: identical constants (same shape including
// layout, same exact values bit for bit, not elided `{...}` constants) and partition-id /
// replica-id instructions are merged into the first one in post order, and so are identical
// layout or type changes of one value (transpose, copy, bitcast, reshape, convert, broadcast with
// the same operand, shape and dimensions: e.g. the FP8 GEMM rewriter's transpose of a weight, once
// per GEMM of an unrolled loop). Instructions with control dependencies or differing shardings
// are left alone. One remark per computation.
#pragma once

#include "passes/pass.h"

namespace weave {

class ConstantAndIdCse : public HloPass {
 public:
  std::string_view name() const override { return "cse"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave
