// "dce": dead code elimination, as XLA's HloDCE. Removes every instruction whose value cannot reach
// a computation root, except parameters, side-effecting ops (send/recv, infeed/outfeed, rng,
// after-all, custom-calls with custom_call_has_side_effect=true) and while/call/conditional/
// fusion instructions whose called computations contain such ops. Dead collectives are removed
// (every partition removes the same ones). Then removes computations the entry no longer reaches.
// Remarks: one per computation that lost instructions and one per removed computation.
#pragma once

#include "passes/pass.h"

namespace weave {

class DeadCodeElimination : public HloPass {
 public:
  std::string_view name() const override { return "dce"; }
  absl::StatusOr<bool> Run(HloModule* module) override;
  // Dead code elimination of one computation; returns the number of instructions removed.
  static absl::StatusOr<int64_t> RunOnComputation(HloComputation* comp);
  // Whether dce keeps `instr` even without users: parameters, side-effecting ops, and
  // while/call/conditional/fusion/... whose called computations contain side-effecting ops.
  static bool KeptWhenDead(const HloInstruction& instr);
  // Removes `instr` if it has no users, is not the root and not KeptWhenDead, then the operands
  // that became dead the same way, transitively; an instruction another waits for (a control
  // predecessor) stays. Returns the number removed.
  static int64_t RemoveDeadChain(HloInstruction* instr);
};

}  // namespace weave
