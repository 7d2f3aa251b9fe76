// "while-loop-dead-tuple-elements": removes while-loop tuple elements that nobody reads, in the
// spirit of XLA's WhileLoopSimplifier dead-parameter removal.
//
// Element i of `while(init)` is dead when (1) no get-tuple-element of the while's result reads it
// (every user of the while is a get-tuple-element and the while is not a root), (2) the condition
// does not read it, and (3) in the body, every value computed from element i flows only into root
// tuple elements that are themselves dead (for example `root[i] = gte(param, i)` passing it along,
// or a counter that only increments itself), never into a side-effecting op. The dead set is the
// largest set with these properties, so mutually dependent dead elements go together.
//
// A loop whose backend_config says it runs once (`known_trip_count` n=1, as windowed-einsum-handler
// writes on fully unrolled loops) first gets its body root operand of each element that neither
// the condition nor anything after the loop reads replaced by the element itself (pass-through):
// that value would only feed a next iteration, so computing it is wasted (for an unrolled ring,
// the last transfer). Elements whose value the body still needs stay in the tuple.
//
// Rewrite: a new init tuple, while shape, body/condition parameter shapes and body root tuple
// without the dead elements; get-tuple-element indices in the body, condition and after the loop
// are renumbered. Skipped (with a "missed" remark) when the body or condition is called from
// elsewhere, when a body/condition parameter has non-get-tuple-element users, when the body root
// is not a tuple, or when a tuple sharding would have to be rewritten.
#pragma once

#include "passes/pass.h"

namespace weave {

class WhileLoopDeadTupleElements : public HloPass {
 public:
  std::string_view name() const override { return "while-loop-dead-tuple-elements"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave
