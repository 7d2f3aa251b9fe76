// Frontend attributes by which a user steers XLA's passes, read as XLA reads them
// (xla/side_effect_util.h).
#pragma once

#include "hlo/ir.h"

namespace weave {

// Whether `dot` carries `_xla_collective_matmul="none"` (XLA's kXlaCollectiveMatmulAttr with
// kXlaCollectiveMatmulNone): the user keeps it out of collective matmul, and XLA's SPMD dot
// handler builds no windowed einsum loop for it. The other values ("lhs_ag", "rhs_ag", "rs")
// leave the choice to the pass, as in XLA.
bool UserDisablesCollectiveMatmul(const HloInstruction& dot);

}  // namespace weave
