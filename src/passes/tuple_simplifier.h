// "tuple-simplifier", as XLA's TupleSimplifier:
//   get-tuple-element(tuple(a0, ..., an), i)          -> ai
//   tuple(gte(x, 0), gte(x, 1), ..., gte(x, n-1))      -> x   (x has exactly n elements)
// Replaced instructions are removed when nothing else uses them. Shapes must match (layouts
// ignored). One remark per computation with the number of rewrites.
#pragma once

#include "passes/pass.h"

namespace weave {

class TupleSimplifier : public HloPass {
 public:
  std::string_view name() const override { return "tuple-simplifier"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave
