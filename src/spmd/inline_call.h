// Call inlining and call-graph flattening for the SPMD passes (XLA's CallInliner and
// FlattenCallGraph, in the forms spmd-prepare and sharding-import need).
#pragma once

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave::spmd {

// Replaces `call` (a `call` instruction) by a copy of its callee's instructions in the caller:
// callee parameters become the call's operands, the callee root replaces the call. Computations
// the callee calls are shared (see FlattenCallGraph). Returns the instruction that replaced the
// call (the copied root).
absl::StatusOr<HloInstruction*> InlineCall(HloInstruction* call);

// Gives every while body/condition and conditional branch a computation of its own (cloning
// computations reached from more than one such site), so that partitioning one loop cannot
// change another. Returns whether anything was cloned.
bool FlattenCallGraph(HloModule* module);

}  // namespace weave::spmd
