// IR helpers and per-run state of windowed-einsum-handler (see windowed_einsum_handler_internal.h).
#include "windowed_einsum/windowed_einsum_handler_internal.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "windowed_einsum/loop_state.h"
#include "hlo/status_macros.h"

namespace weave::handler_internal {

// Removes `i` if nothing reads it, then its operands that became dead (targeted, not a full DCE,
// so that the pass stays linear in the module size). Instructions with control predecessors are
// kept, like everything IsRemovableWhenUnused refuses.
absl::Status RemoveIfDead(HloComputation* c, HloInstruction* i) {
  return c->RemoveUnusedChains({i}, [](const HloInstruction* x) {
    return x->IsRemovableWhenUnused() && x->control_predecessors().empty();
  });
}

absl::Status ReplaceInit(HloInstruction* w, const Shape& state, std::vector<HloInstruction*> ops,
                         PendingRenames* rename) {
  HloComputation* comp = w->parent();
  HloInstruction* init = w->operand(0);
  const std::string name = init->name();
  HloInstruction* new_init = comp->AddInstruction(HloOpcode::kTuple, state, std::move(ops), name);
  RETURN_IF_ERROR(w->ReplaceOperandWith(0, new_init));
  w->set_shape(state);
  if (init->user_count() == 0 && !init->IsRoot()) {
    // The old init may itself be a replacement waiting for its name: pass the name on.
    PendingRename r{name, new_init->name()};
    if (auto it = rename->find(init); it != rename->end()) {
      r.name = std::move(it->second.name);
      rename->erase(it);
    }
    (*rename)[new_init] = std::move(r);
  }
  return absl::OkStatus();
}

void ApplyPendingRenames(HloComputation* comp, PendingRenames* rename) {
  if (rename->empty()) return;
  absl::flat_hash_set<const HloInstruction*> alive;
  for (HloInstruction* i : comp->instructions()) alive.insert(i);
  for (auto& [instr, r] : *rename) {
    if (alive.contains(instr) && instr->name() == r.temporary) instr->set_name(r.name);
  }
  rename->clear();
}

// Replaces every use of `old` by `v` among the given users (snapshot), and the root.
absl::Status ReplaceUses(HloInstruction* old, const std::vector<HloInstruction*>& users,
                         HloInstruction* v) {
  if (!users.empty()) {
    RETURN_IF_ERROR(old->ReplaceUsesWith(users, v));
  }
  if (old->IsRoot()) old->parent()->set_root(v);
  return absl::OkStatus();
}

void Handler::RenameComputation(HloComputation* c, const std::string& name) {
  // One scan of the module's names per run, then the set follows every computation the handler
  // adds or renames (a scan per rename would make the pass quadratic in the loop count).
  if (!names_built_) {
    names_built_ = true;
    for (const HloComputation* k : module_->computations()) computation_names_.insert(k->name());
  }
  std::string candidate = name;
  for (int64_t k = 1; candidate != c->name() && computation_names_.count(candidate); ++k) {
    candidate = absl::StrCat(name, ".", k);
  }
  computation_names_.erase(c->name());
  c->set_name(candidate);
  computation_names_.insert(candidate);
}

void Handler::NoteComputation(const HloComputation* c) {
  if (names_built_) computation_names_.insert(c->name());
}

Json ParseConfig(const std::string& text, bool* ok) {
  *ok = true;
  if (text.empty()) return Json::object();
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *ok = false;
    return Json::object();
  }
  return j;
}

// True for a pred conditional(c, x, x) whose true branch permutes its parameter once and whose
// false branch returns it (the rolled ring guard).
bool IsGuardedPermute(const HloInstruction* u, const HloInstruction* x) {
  if (u->opcode() != HloOpcode::kConditional || !u->conditional_is_pred ||
      u->operand_count() != 3 || u->operand(1) != x || u->operand(2) != x ||
      u->called_computations().size() != 2) {
    return false;
  }
  const HloComputation* t = u->called_computations()[0];
  const HloComputation* f = u->called_computations()[1];
  if (t->num_parameters() != 1 || f->num_parameters() != 1) return false;
  const HloInstruction* tr = t->root();
  return tr != nullptr && tr->opcode() == HloOpcode::kCollectivePermute &&
         tr->operand(0) == t->parameter(0) && t->parameter(0)->user_count() == 1 &&
         f->root() == f->parameter(0);
}

void Handler::EnsureUnshared(HloInstruction* w) {
  auto& called = *w->mutable_called_computations();
  for (size_t i = 0; i < called.size() && i < 2; ++i) {
    if (callers_[called[i]] > 1) {
      --callers_[called[i]];
      HloComputation* copy = module_->CloneComputation(called[i], called[i]->name());
      NoteComputation(copy);
      callers_[copy] = 1;
      // The callees of the copy gain a caller.
      for (HloInstruction* j : copy->instructions()) {
        for (HloComputation* callee : j->called_computations()) ++callers_[callee];
      }
      called[i] = copy;
    }
  }
}

std::vector<int64_t> Handler::CounterSequence(const WindowedLoop& L) {
  std::vector<int64_t> ks;
  HloInstruction* P = L.body->parameter(0);
  HloInstruction* R = L.body->root();
  int64_t k = L.init_counter;
  for (int64_t t = 0; t < L.trip_count; ++t) {
    ks.push_back(k);
    auto next = EvaluateScalar(R->operand(L.counter_index), ScalarEnv{P, L.counter_index, k, 0});
    k = next.value_or(k);
  }
  ks.push_back(k);
  return ks;
}

}  // namespace weave::handler_internal
