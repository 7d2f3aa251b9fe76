// Call inlining and call-graph flattening (see inline_call.h).
#include "spmd/inline_call.h"

#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weave::spmd {

absl::StatusOr<HloInstruction*> InlineCall(HloInstruction* call) {
  if (call->opcode() != HloOpcode::kCall || call->called_computations().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", call->name(), "' is not a call"));
  }
  HloComputation* caller = call->parent();
  const HloComputation* callee = call->called_computations()[0];
  if (callee->num_parameters() != call->operand_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "call '", call->name(), "' has ", call->operand_count(), " operands but '",
        callee->name(), "' has ", callee->num_parameters(), " parameters"));
  }
  absl::flat_hash_map<const HloInstruction*, HloInstruction*> map;
  for (int64_t i = 0; i < callee->num_parameters(); ++i) {
    map[callee->parameter(i)] = call->operand(i);
  }
  for (HloInstruction* h : callee->MakeInstructionPostOrder()) {
    if (h->opcode() == HloOpcode::kParameter) continue;
    std::vector<HloInstruction*> ops;
    ops.reserve(h->operands().size());
    for (HloInstruction* o : h->operands()) ops.push_back(map.at(o));
    auto clone = h->CloneWithNewOperands(h->shape(), std::move(ops));  // without control edges
    map[h] = caller->AddInstruction(std::move(clone));
  }
  for (HloInstruction* h : callee->instructions()) {
    if (h->opcode() == HloOpcode::kParameter) continue;
    for (HloInstruction* p : h->control_predecessors()) {
      if (p->opcode() != HloOpcode::kParameter) map.at(p)->AddControlDependencyTo(map.at(h));
    }
  }
  HloInstruction* root = map.at(callee->root());
  // The call's own sharding describes its result: keep it on the inlined root when the root
  // has none (a parameter passed through keeps the operand's).
  if (call->sharding && !root->sharding && root->opcode() != HloOpcode::kParameter &&
      root->parent() == caller) {
    root->sharding = call->sharding;
  }
  // Control edges to the call now point at the inlined root.
  const std::vector<HloInstruction*> waiting = call->control_successors();
  for (HloInstruction* h : waiting) h->ReplaceControlPredecessor(call, root);
  call->DropAllControlDeps();
  absl::Status st = call->ReplaceAllUsesWith(root);
  if (!st.ok()) return st;
  st = caller->RemoveInstruction(call);
  if (!st.ok()) return st;
  return root;
}

bool FlattenCallGraph(HloModule* module) {
  bool changed = false;
  std::map<const HloComputation*, int64_t> uses;
  std::vector<HloComputation*> order = module->MakeComputationPostOrder();
  // Callers before callees, so that a clone's callees are themselves flattened afterwards.
  std::vector<HloComputation*> work(order.rbegin(), order.rend());
  for (size_t w = 0; w < work.size(); ++w) {
    HloComputation* c = work[w];
    for (HloInstruction* h : c->instructions()) {
      if (h->opcode() != HloOpcode::kWhile && h->opcode() != HloOpcode::kConditional) continue;
      for (HloComputation*& callee : *h->mutable_called_computations()) {
        if (uses[callee]++ == 0) continue;
        HloComputation* clone = module->CloneComputation(callee, callee->name());
        callee = clone;
        uses[clone] = 1;
        work.push_back(clone);
        changed = true;
      }
    }
  }
  return changed;
}

}  // namespace weave::spmd
