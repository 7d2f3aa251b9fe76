#include "windowed_einsum/loop_state.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hlo/builders.h"
#include "hlo/status_macros.h"

namespace weave {

std::vector<HloInstruction*> CollectWhiles(HloModule* module) {
  std::vector<HloInstruction*> whiles;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    for (HloInstruction* i : comp->MakeInstructionPostOrder()) {
      if (i->opcode() == HloOpcode::kWhile) whiles.push_back(i);
    }
  }
  return whiles;
}

absl::StatusOr<int64_t> AppendLoopState(HloInstruction* w, const std::vector<HloInstruction*>& values,
                                        std::string_view suffix) {
  if (w->opcode() != HloOpcode::kWhile || !w->shape().IsTuple() || w->while_body() == nullptr ||
      w->while_condition() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", w->name(), "' is not a while loop with a tuple state"));
  }
  HloComputation* comp = w->parent();
  const Shape old_state = w->shape();
  Shape state = old_state;
  const int64_t first = static_cast<int64_t>(state.tuple_shapes.size());
  for (const HloInstruction* v : values) state.tuple_shapes.push_back(v->shape());
  HloInstruction* old_init = w->operand(0);
  std::vector<HloInstruction*> init_ops;
  if (old_init->opcode() == HloOpcode::kTuple) {
    init_ops = old_init->operands();
  } else {
    for (size_t i = 0; i < old_state.tuple_shapes.size(); ++i) {
      init_ops.push_back(AddGetTupleElement(comp, old_init, static_cast<int64_t>(i),
                                            absl::StrCat(old_init->name(), ".", i)));
    }
  }
  init_ops.insert(init_ops.end(), values.begin(), values.end());
  HloInstruction* new_init = comp->AddInstruction(HloOpcode::kTuple, state, init_ops,
                                                  absl::StrCat(old_init->name(), std::string(suffix)));
  RETURN_IF_ERROR(w->ReplaceOperandWith(0, new_init));
  w->set_shape(state);
  w->sharding.reset();
  if (old_init->user_count() == 0 && !old_init->IsRoot()) {
    if (absl::Status s = comp->RemoveUnusedChains(
            {old_init}, [](const HloInstruction* x) { return x->IsRemovableWhenUnused(); });
        !s.ok()) {
      return s;
    }
  }
  for (HloComputation* c : {w->while_body(), w->while_condition()}) {
    c->parameter(0)->set_shape(state);
    c->parameter(0)->sharding.reset();
  }
  return first;
}

}  // namespace weave
