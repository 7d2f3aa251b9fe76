#include "passes/while_loop_dead_tuple_elements.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/builders.h"
#include "nlohmann/json.hpp"
#include "passes/dce.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

bool HasTupleSharding(const HloInstruction* h) {
  return h->sharding.has_value() && h->sharding->kind == HloSharding::Kind::kTuple;
}

// Number of instructions in the module that call `c`.
int64_t CallerCount(const HloModule* module, const HloComputation* c) {
  int64_t n = 0;
  for (const HloComputation* comp : module->computations()) {
    for (const HloInstruction* h : comp->instructions()) {
      for (const HloComputation* callee : h->called_computations()) n += (callee == c);
    }
  }
  return n;
}

// CallerCount for every computation, from one scan of the module. The rewrites of this pass add
// no call and only remove instructions, so a count can only fall after the scan: a count of 1
// (the loop asking) stays exact, and a larger one is counted again from the module.
class CallerCounts {
 public:
  explicit CallerCounts(const HloModule* module) : module_(module) {
    for (const HloComputation* comp : module->computations()) {
      for (const HloInstruction* h : comp->instructions()) {
        for (const HloComputation* callee : h->called_computations()) ++counts_[callee];
      }
    }
  }
  int64_t Of(const HloComputation* c) const {
    auto it = counts_.find(c);
    const int64_t n = it == counts_.end() ? 0 : it->second;
    return n <= 1 ? n : CallerCount(module_, c);
  }

 private:
  const HloModule* module_;
  absl::flat_hash_map<const HloComputation*, int64_t> counts_;
};

bool AllUsersAreGte(const HloInstruction* h) {
  for (const HloInstruction* u : h->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) return false;
  }
  return true;
}

struct Analysis {
  std::vector<int64_t> dead;  // ascending
  // Loops known to run once: elements nobody reads after the loop (nor the condition) whose
  // body value is computed for nothing; their root operand becomes a pass-through. Ascending.
  std::vector<int64_t> passthrough;
  std::string why_not;        // set when the loop cannot be rewritten
};

// Whether the while's backend_config (XLA's WhileLoopBackendConfig) says it runs exactly once:
// `"known_trip_count":{"n":"1"}`.
bool KnownToRunOnce(const HloInstruction* w) {
  if (w->backend_config.empty()) return false;
  nlohmann::json j = nlohmann::json::parse(w->backend_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto it = j.find("known_trip_count");
  if (it == j.end() || !it->is_object()) return false;
  auto n = it->find("n");
  if (n == it->end()) return false;
  return (n->is_string() && n->get<std::string>() == "1") ||
         (n->is_number_integer() && n->get<int64_t>() == 1);
}

Analysis Analyze(const CallerCounts& callers, const HloInstruction* w) {
  Analysis a;
  if (w->operand_count() != 1 || w->called_computations().size() != 2 || !w->shape().IsTuple()) {
    a.why_not = "not a while over a tuple";
    return a;
  }
  const HloComputation* cond = w->while_condition();
  const HloComputation* body = w->while_body();
  const int64_t n = static_cast<int64_t>(w->shape().tuple_shapes.size());
  if (n == 0) {
    a.why_not = "the loop tuple is empty";
    return a;
  }
  if (cond == body || callers.Of(cond) != 1 || callers.Of(body) != 1) {
    a.why_not = "the body or condition is also called from elsewhere";
    return a;
  }
  if (body->num_parameters() != 1 || cond->num_parameters() != 1 || body->root() == nullptr) {
    a.why_not = "malformed body or condition";
    return a;
  }
  if (w->IsRoot() || !AllUsersAreGte(w)) {
    a.why_not = "the loop result is used as a whole";
    return a;
  }
  const HloInstruction* bparam = body->parameter(0);
  const HloInstruction* cparam = cond->parameter(0);
  const HloInstruction* root = body->root();
  if (!AllUsersAreGte(bparam) || !AllUsersAreGte(cparam) || cparam->IsRoot()) {
    a.why_not = "the body or condition uses its parameter other than through get-tuple-element";
    return a;
  }
  const bool root_is_param = root == bparam;
  if (!root_is_param && (root->opcode() != HloOpcode::kTuple || root->operand_count() != n)) {
    a.why_not = "the body root is not a tuple";
    return a;
  }
  if (HasTupleSharding(w) || HasTupleSharding(w->operand(0)) || HasTupleSharding(bparam) ||
      HasTupleSharding(cparam) || HasTupleSharding(root)) {
    a.why_not = "the loop state carries a tuple sharding";
    return a;
  }
  std::vector<bool> live(static_cast<size_t>(n), false);
  for (const HloInstruction* u : w->users()) {
    if (u->tuple_index >= 0 && u->tuple_index < n) live[static_cast<size_t>(u->tuple_index)] = true;
  }
  for (const HloInstruction* u : cparam->users()) {
    if (u->tuple_index >= 0 && u->tuple_index < n) live[static_cast<size_t>(u->tuple_index)] = true;
  }
  if (!root_is_param && KnownToRunOnce(w)) {
    for (int64_t j = 0; j < n; ++j) {
      const HloInstruction* op = root->operand(j);
      const bool already = op->opcode() == HloOpcode::kGetTupleElement && op->operand(0) == bparam &&
                           op->tuple_index == j;
      if (!live[static_cast<size_t>(j)] && !already) a.passthrough.push_back(j);
    }
  }
  // Which root slots each element reaches, and whether it reaches an instruction kept when dead
  // (then it is live): one sweep of the body in reverse post order, users before operands, where
  // an instruction reaches the slots it fills itself and every slot its users reach. Costs the
  // body's edges times n/64 words, not a walk of the body per element.
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  const std::vector<HloInstruction*> order = body->MakeInstructionPostOrder();
  absl::flat_hash_map<const HloInstruction*, size_t> pos;
  pos.reserve(order.size());
  for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
  std::vector<uint64_t> slots(order.size() * words, 0);
  auto row = [&](size_t k) { return slots.data() + k * words; };  // instruction k's slot bits
  std::vector<bool> kept(order.size(), false);
  if (!root_is_param) {
    for (int64_t j = 0; j < root->operand_count(); ++j) {
      auto it = pos.find(root->operand(j));
      if (it != pos.end()) row(it->second)[j / 64] |= uint64_t{1} << (j % 64);
    }
  }
  for (size_t k = order.size(); k-- > 0;) {
    bool keep = DeadCodeElimination::KeptWhenDead(*order[k]);
    for (const HloInstruction* u : order[k]->users()) {
      auto it = pos.find(u);
      if (it == pos.end()) continue;
      keep = keep || kept[it->second];
      for (size_t w2 = 0; w2 < words; ++w2) row(k)[w2] |= row(it->second)[w2];
    }
    kept[k] = keep;
  }
  std::vector<std::set<int64_t>> reaches(static_cast<size_t>(n));
  for (const HloInstruction* g : bparam->users()) {
    const int64_t i = g->tuple_index;
    if (i < 0 || i >= n) continue;
    auto it = pos.find(g);
    if (it == pos.end()) continue;
    if (kept[it->second]) live[static_cast<size_t>(i)] = true;
    for (int64_t j = 0; j < n; ++j) {
      if ((row(it->second)[j / 64] >> (j % 64)) & 1) reaches[static_cast<size_t>(i)].insert(j);
    }
  }
  std::set<int64_t> dead;
  for (int64_t i = 0; i < n; ++i) {
    if (!live[static_cast<size_t>(i)]) dead.insert(i);
  }
  for (bool again = true; again;) {
    again = false;
    for (auto it = dead.begin(); it != dead.end();) {
      bool ok = true;
      for (int64_t j : reaches[static_cast<size_t>(*it)]) ok &= dead.count(j) > 0;
      if (ok) {
        ++it;
      } else {
        it = dead.erase(it);
        again = true;
      }
    }
  }
  if (static_cast<int64_t>(dead.size()) == n) {
    a.why_not = "every element is unused (the whole loop is dead code; left to dce)";
    return a;
  }
  a.dead.assign(dead.begin(), dead.end());
  return a;
}

absl::Status Rewrite(HloInstruction* w, const std::vector<int64_t>& dead) {
  HloComputation* outer = w->parent();
  HloComputation* body = w->while_body();
  HloComputation* cond = w->while_condition();
  const int64_t n = static_cast<int64_t>(w->shape().tuple_shapes.size());
  const std::set<int64_t> dead_set(dead.begin(), dead.end());
  std::vector<int64_t> new_index(static_cast<size_t>(n), -1);
  std::vector<int64_t> kept;
  std::vector<Shape> kept_shapes;
  for (int64_t i = 0; i < n; ++i) {
    if (dead_set.count(i)) continue;
    new_index[static_cast<size_t>(i)] = static_cast<int64_t>(kept.size());
    kept.push_back(i);
    kept_shapes.push_back(w->shape().tuple_shapes[static_cast<size_t>(i)]);
  }
  const Shape new_shape = Shape::Tuple(kept_shapes);

  // New init tuple.
  HloInstruction* init = w->operand(0);
  std::vector<HloInstruction*> init_ops;
  for (int64_t i : kept) {
    if (init->opcode() == HloOpcode::kTuple) {
      init_ops.push_back(init->operand(i));
    } else {
      HloInstruction* g = outer->AddInstruction(
          HloOpcode::kGetTupleElement, w->shape().tuple_shapes[static_cast<size_t>(i)], {init},
          absl::StrCat(init->name(), ".elem", i));
      g->tuple_index = i;
      init_ops.push_back(g);
    }
  }
  HloInstruction* new_init = outer->AddInstruction(HloOpcode::kTuple, new_shape, init_ops,
                                                   init->opcode() == HloOpcode::kTuple
                                                       ? init->name()
                                                       : absl::StrCat(w->name(), ".init"));
  RETURN_IF_ERROR(w->ReplaceOperandWith(0, new_init));
  if (init->opcode() == HloOpcode::kTuple && init->user_count() == 0 && !init->IsRoot()) {
    const std::string old_name = init->name();
    if (DeadCodeElimination::RemoveDeadChain(init) > 0) new_init->set_name(old_name);
  }
  w->set_shape(new_shape);
  for (HloInstruction* u : w->users()) u->tuple_index = new_index[static_cast<size_t>(u->tuple_index)];

  // Condition.
  cond->parameter(0)->set_shape(new_shape);
  for (HloInstruction* u : cond->parameter(0)->users()) {
    u->tuple_index = new_index[static_cast<size_t>(u->tuple_index)];
  }

  // Body: new root first, so the dead elements' get-tuple-elements lose their users.
  HloInstruction* bparam = body->parameter(0);
  HloInstruction* root = body->root();
  bparam->set_shape(new_shape);
  if (root != bparam) {
    std::vector<HloInstruction*> root_ops;
    for (int64_t i : kept) root_ops.push_back(root->operand(i));
    HloInstruction* new_root = body->AddInstruction(HloOpcode::kTuple, new_shape, root_ops,
                                                    root->name());
    body->set_root(new_root);
    const std::string old_name = root->name();
    if (DeadCodeElimination::RemoveDeadChain(root) > 0) new_root->set_name(old_name);
  }
  if (absl::StatusOr<int64_t> r = DeadCodeElimination::RunOnComputation(body); !r.ok()) {
    return r.status();
  }
  for (HloInstruction* u : bparam->users()) {
    const int64_t ni = new_index[static_cast<size_t>(u->tuple_index)];
    if (ni < 0) {
      return absl::InternalError(absl::StrCat("get-tuple-element '", u->name(),
                                              "' of a removed element survived"));
    }
    u->tuple_index = ni;
  }
  return absl::OkStatus();
}

// Replaces root operand j of the body by get-tuple-element(param, j) for each j in `elements`,
// then removes what the body no longer needs.
absl::Status PassThrough(HloInstruction* w, const std::vector<int64_t>& elements) {
  HloComputation* body = w->while_body();
  HloInstruction* bparam = body->parameter(0);
  HloInstruction* root = body->root();
  std::vector<HloInstruction*> gte(w->shape().tuple_shapes.size(), nullptr);
  for (HloInstruction* u : bparam->users()) {
    if (u->tuple_index >= 0 && gte[static_cast<size_t>(u->tuple_index)] == nullptr) {
      gte[static_cast<size_t>(u->tuple_index)] = u;
    }
  }
  for (int64_t j : elements) {
    HloInstruction*& g = gte[static_cast<size_t>(j)];
    if (g == nullptr) {
      g = AddGetTupleElement(body, bparam, j, absl::StrCat(bparam->name(), ".passthrough"));
    }
    RETURN_IF_ERROR(root->ReplaceOperandWith(j, g));
  }
  if (absl::StatusOr<int64_t> r = DeadCodeElimination::RunOnComputation(body); !r.ok()) {
    return r.status();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> WhileLoopDeadTupleElements::Run(HloModule* module) {
  bool changed = false;
  const CallerCounts callers(module);
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    std::vector<HloInstruction*> loops;
    for (HloInstruction* h : comp->MakeInstructionPostOrder()) {
      if (h->opcode() == HloOpcode::kWhile) loops.push_back(h);
    }
    for (HloInstruction* w : loops) {
      Analysis a = Analyze(callers, w);
      if (!a.why_not.empty()) {
        AddRemark(w->name(), false, a.why_not);
        continue;
      }
      if (!a.passthrough.empty()) {
        RETURN_IF_ERROR(PassThrough(w, a.passthrough));
        changed = true;
        AddRemark(w->name(), true,
                  absl::StrCat("the loop runs once (known_trip_count 1): the body no longer "
                               "computes tuple element",
                               a.passthrough.size() == 1 ? " " : "s ", "{",
                               absl::StrJoin(a.passthrough, ","),
                               "} for a next iteration or a reader after the loop (passed "
                               "through)"));
        a = Analyze(callers, w);
        if (!a.why_not.empty()) continue;
      }
      if (a.dead.empty()) {
        if (a.passthrough.empty()) AddRemark(w->name(), false, "every tuple element is read");
        continue;
      }
      const int64_t before = static_cast<int64_t>(w->shape().tuple_shapes.size());
      RETURN_IF_ERROR(Rewrite(w, a.dead));
      changed = true;
      AddRemark(w->name(), true,
                absl::StrCat("removed unread tuple element", a.dead.size() == 1 ? " " : "s ", "{",
                             absl::StrJoin(a.dead, ","), "} (", before, " -> ",
                             before - static_cast<int64_t>(a.dead.size()), " elements)"));
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("while-loop-dead-tuple-elements",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::make_unique<WhileLoopDeadTupleElements>();
                    });

}  // namespace weave
