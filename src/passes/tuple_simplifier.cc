#include "passes/tuple_simplifier.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// tuple(gte(x,0), ..., gte(x,n-1)) -> x, or nullptr.
HloInstruction* TupleOfAllElements(const HloInstruction* t) {
  if (t->operand_count() == 0) return nullptr;
  HloInstruction* source = nullptr;
  for (int64_t i = 0; i < t->operand_count(); ++i) {
    const HloInstruction* g = t->operand(i);
    if (g->opcode() != HloOpcode::kGetTupleElement || g->tuple_index != i) return nullptr;
    if (source == nullptr) source = g->operand(0);
    if (g->operand(0) != source) return nullptr;
  }
  if (!source->shape().IsTuple() ||
      static_cast<int64_t>(source->shape().tuple_shapes.size()) != t->operand_count() ||
      !source->shape().Compatible(t->shape())) {
    return nullptr;
  }
  return source;
}

// Removes `h` and then operands that became unused (not roots, not parameters).
void RemoveIfDead(HloComputation* comp, HloInstruction* h) {
  std::vector<HloInstruction*> work = {h};
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (x->user_count() != 0 || x->IsRoot() || x->opcode() == HloOpcode::kParameter ||
        x->parent() != comp) {
      continue;
    }
    std::vector<HloInstruction*> ops = x->operands();
    if (!comp->RemoveInstruction(x).ok()) continue;
    for (HloInstruction* o : ops) {
      if (o->opcode() == HloOpcode::kGetTupleElement || o->opcode() == HloOpcode::kTuple) {
        work.push_back(o);
      }
    }
  }
}

}  // namespace

absl::StatusOr<bool> TupleSimplifier::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    int64_t rewrites = 0;
    for (HloInstruction* h : comp->MakeInstructionPostOrder()) {
      if (h->parent() != comp) continue;  // removed meanwhile (should not happen)
      HloInstruction* replacement = nullptr;
      if (h->opcode() == HloOpcode::kGetTupleElement && h->operand_count() == 1 &&
          h->operand(0)->opcode() == HloOpcode::kTuple) {
        const HloInstruction* t = h->operand(0);
        if (h->tuple_index >= 0 && h->tuple_index < t->operand_count() &&
            t->operand(h->tuple_index)->shape().Compatible(h->shape())) {
          replacement = t->operand(h->tuple_index);
        }
      } else if (h->opcode() == HloOpcode::kTuple) {
        replacement = TupleOfAllElements(h);
      }
      if (replacement == nullptr || replacement == h) continue;
      if (h->user_count() == 0 && !h->IsRoot()) continue;  // dead: leave it to dce
      RETURN_IF_ERROR(h->ReplaceAllUsesWith(replacement));
      RemoveIfDead(comp, h);
      ++rewrites;
    }
    if (rewrites > 0) {
      changed = true;
      AddRemark(comp->name(), true,
                absl::StrCat("simplified ", rewrites, " tuple/get-tuple-element pair",
                             rewrites == 1 ? "" : "s"));
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("tuple-simplifier",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::make_unique<TupleSimplifier>();
                    });

}  // namespace weave
