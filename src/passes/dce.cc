#include "passes/dce.h"

#include <map>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weave {
namespace {

bool IsSideEffecting(const HloInstruction* h) { return h->HasSideEffect(); }

// Whether a computation (or anything it calls) has a side-effecting instruction.
bool CallsSideEffect(const HloComputation* c, std::map<const HloComputation*, bool>* memo) {
  auto it = memo->find(c);
  if (it != memo->end()) return it->second;
  (*memo)[c] = false;  // recursion guard
  bool r = false;
  for (const HloInstruction* h : c->instructions()) {
    if (h->opcode() != HloOpcode::kParameter && IsSideEffecting(h)) r = true;
    for (const HloComputation* cc : h->called_computations()) {
      if (cc != nullptr && CallsSideEffect(cc, memo)) r = true;
    }
    if (r) break;
  }
  (*memo)[c] = r;
  return r;
}

}  // namespace

bool DeadCodeElimination::KeptWhenDead(const HloInstruction& instr) {
  if (IsSideEffecting(&instr)) return true;
  std::map<const HloComputation*, bool> memo;
  for (const HloComputation* c : instr.called_computations()) {
    if (c != nullptr && CallsSideEffect(c, &memo)) return true;
  }
  return false;
}

int64_t DeadCodeElimination::RemoveDeadChain(HloInstruction* instr) {
  HloComputation* comp = instr == nullptr ? nullptr : instr->parent();
  if (comp == nullptr) return 0;
  // Instructions other instructions must wait for stay, as in RunOnComputation (their control
  // successors are on the instruction: no scan of the computation).
  // HloComputation::RemoveUnusedChains never touches an instruction it already freed: an
  // operand reached twice (tuple(c, f(c)) pushes c once per user) is skipped the second time.
  const int64_t before = comp->instruction_count();
  absl::Status st = comp->RemoveUnusedChains({instr}, [&](const HloInstruction* x) {
    return !KeptWhenDead(*x) && x->control_successors().empty();
  });
  // RemoveUnusedChains fails only on an inconsistent IR; what it removed before is counted.
  (void)st;
  return before - comp->instruction_count();
}

absl::StatusOr<int64_t> DeadCodeElimination::RunOnComputation(HloComputation* comp) {
  std::map<const HloComputation*, bool> memo;
  const std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
  // Open addressing: one allocation for the set, not one per live instruction.
  absl::flat_hash_set<const HloInstruction*> live;
  live.reserve(order.size());
  std::vector<const HloInstruction*> work;
  auto mark = [&](const HloInstruction* h) {
    if (h != nullptr && live.insert(h).second) work.push_back(h);
  };
  mark(comp->root());
  for (const HloInstruction* h : order) {
    bool keep = IsSideEffecting(h);
    for (const HloComputation* c : h->called_computations()) {
      if (c != nullptr && CallsSideEffect(c, &memo)) keep = true;
    }
    if (keep) mark(h);
  }
  while (!work.empty()) {
    const HloInstruction* h = work.back();
    work.pop_back();
    for (const HloInstruction* o : h->operands()) mark(o);
    for (const HloInstruction* o : h->control_predecessors()) mark(o);
  }
  int64_t removed = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    HloInstruction* h = *it;
    if (live.count(h)) continue;
    absl::Status st = comp->RemoveInstruction(h);
    if (!st.ok()) {
      return absl::InternalError(absl::StrCat("dce: cannot remove '", h->name(), "' from '",
                                              comp->name(), "': ", st.message()));
    }
    ++removed;
  }
  return removed;
}

absl::StatusOr<bool> DeadCodeElimination::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    absl::StatusOr<int64_t> removed = RunOnComputation(comp);
    if (!removed.ok()) return removed.status();
    if (*removed > 0) {
      changed = true;
      AddRemark(comp->name(), true, absl::StrCat("removed ", *removed, " dead instruction",
                                                 *removed == 1 ? "" : "s"));
    }
  }
  std::vector<std::string> before;
  for (const HloComputation* c : module->computations()) before.push_back(c->name());
  if (module->RemoveUnusedComputations()) {
    changed = true;
    std::unordered_set<std::string> after;
    for (const HloComputation* c : module->computations()) after.insert(c->name());
    for (const std::string& n : before) {
      if (!after.count(n)) AddRemark(n, true, "removed unused computation");
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("dce", [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
  return std::make_unique<DeadCodeElimination>();
});

}  // namespace weave
