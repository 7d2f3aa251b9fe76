// One instruction's line of HLO text, as a copy of it outside any computation prints.
#pragma once

#include <string>

#include "hlo/ir.h"

namespace weave {

// Appends to `out` the line HloInstruction::ToString() gives for a copy of `instr` that is in no
// computation (HloInstruction::CloneWithNewOperands with the same shape and operands): the same
// text without the "ROOT " marker and without `control-predecessors={...}`, and without making
// the copy. For the cost gate's region texts (sim/cost_gate.cc), which list a computation's
// instructions under a new entry and root of their own. Defined in printer.cc.
void AppendDetachedInstructionText(std::string* out, const HloInstruction& instr);

}  // namespace weave
