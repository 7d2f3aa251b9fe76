// windowed-einsum-handler, step 3: full unrolling (../shared/specs/windowed-einsum-handler.md §5).
// The body is repeated trip-count times, the counter folded to constants, guarded permutes
// resolved; the while runs once and is marked skip-simplify-while-loops_trip-count-one="true".
#include "windowed_einsum/windowed_einsum_handler_internal.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hlo/status_macros.h"

namespace weave::handler_internal {

namespace {

bool IsFoldableScalarOp(const HloInstruction* i) {
  if (!i->shape().IsArray() || i->shape().rank() != 0) return false;
  const PrimitiveType t = i->shape().element_type;
  if (t != PrimitiveType::PRED && !IsInteger(t)) return false;
  switch (i->opcode()) {
    case HloOpcode::kAdd: case HloOpcode::kSubtract: case HloOpcode::kMultiply:
    case HloOpcode::kCompare: case HloOpcode::kAnd: case HloOpcode::kOr: case HloOpcode::kNot:
    case HloOpcode::kMaximum: case HloOpcode::kMinimum: case HloOpcode::kSelect:
    case HloOpcode::kDivide: case HloOpcode::kRemainder:
      break;
    default:
      return false;
  }
  for (const HloInstruction* o : i->operands()) {
    if (o->opcode() != HloOpcode::kConstant) return false;
  }
  return true;
}

// The instructions of `body` that each trip repeats: those the root reaches that depend on the
// loop state (the parameter), in post order; the rest is loop-invariant and shared by the trips.
std::vector<HloInstruction*> StateDependentInstructions(HloComputation* body) {
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  std::vector<HloInstruction*> order = body->MakeInstructionPostOrder();
  absl::flat_hash_set<HloInstruction*> live;
  {
    std::vector<HloInstruction*> work = {R};
    while (!work.empty()) {
      HloInstruction* x = work.back();
      work.pop_back();
      if (!live.insert(x).second) continue;
      for (HloInstruction* o : x->operands()) work.push_back(o);
    }
  }
  absl::flat_hash_set<HloInstruction*> dep = {P};
  std::vector<HloInstruction*> cloned_order;
  for (HloInstruction* i : order) {
    if (i == P || i == R || !live.count(i)) continue;
    bool d = false;
    for (HloInstruction* o : i->operands()) d = d || dep.count(o);
    if (d) {
      dep.insert(i);
      cloned_order.push_back(i);
    }
  }
  return cloned_order;
}

// A short remark on the unrolled loop: its trips, and the dots and collective-permutes of its
// body.
std::string UnrolledRemark(const HloComputation* body, int64_t T) {
  int64_t dots = 0, permutes = 0;
  for (HloInstruction* i : body->instructions()) {
    dots += i->opcode() == HloOpcode::kDot;
    permutes += i->opcode() == HloOpcode::kCollectivePermute;
  }
  return absl::StrFormat(
      "%s, body holds %d dot%s and %d collective-permute%s ('%s')",
      T == 1 ? std::string("fully unrolled (1 trip already; now marked trip-count-one)")
             : absl::StrFormat("fully unrolled: %d trips -> 1", T),
      dots, dots == 1 ? "" : "s", permutes, permutes == 1 ? "" : "s", body->name());
}

}  // namespace

std::vector<HloInstruction*> Handler::CloneTrips(const WindowedLoop& L,
                                                 const std::vector<HloInstruction*>& cloned_order,
                                                 const std::vector<int64_t>& ks,
                                                 PrimitiveType ct) {
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  const int64_t ci = L.counter_index;
  std::vector<HloInstruction*> prev = R->operands();
  for (int64_t t = 1; t < L.trip_count; ++t) {
    absl::flat_hash_map<HloInstruction*, HloInstruction*> map;
    HloInstruction* kt = nullptr;
    for (HloInstruction* i : cloned_order) {
      if (i->opcode() == HloOpcode::kGetTupleElement && i->operand(0) == P) {
        if (i->tuple_index == ci) {
          if (kt == nullptr) kt = AddScalarConstant(body, ct, ks[t], "unrolled_counter");
          map[i] = kt;
        } else {
          map[i] = prev.at(i->tuple_index);
        }
        continue;
      }
      std::vector<HloInstruction*> ops;
      for (HloInstruction* o : i->operands()) {
        auto it = map.find(o);
        ops.push_back(it == map.end() ? o : it->second);
      }
      std::unique_ptr<HloInstruction> c = i->CloneWithNewOperands(i->shape(), ops);
      c->set_name(i->name());
      if (c->channel_id) c->channel_id = next_channel_id_++;
      HloInstruction* added = body->AddInstruction(std::move(c));
      for (HloComputation* callee : added->called_computations()) ++callers_[callee];
      map[i] = added;
    }
    std::vector<HloInstruction*> next;
    for (HloInstruction* o : R->operands()) {
      auto it = map.find(o);
      next.push_back(it == map.end() ? o : it->second);
    }
    prev = std::move(next);
  }
  return prev;
}

absl::Status Handler::InlineTakenBranch(HloComputation* body, HloInstruction* i) {
  auto v = EvaluateScalar(i->operand(0), ScalarEnv{});
  if (!v) return absl::OkStatus();
  HloComputation* branch = i->called_computations()[*v != 0 ? 0 : 1];
  HloInstruction* arg = i->operand(*v != 0 ? 1 : 2);
  if (branch->num_parameters() != 1) return absl::OkStatus();
  absl::flat_hash_map<HloInstruction*, HloInstruction*> map;
  map[branch->parameter(0)] = arg;
  for (HloInstruction* b : branch->MakeInstructionPostOrder()) {
    if (b->opcode() == HloOpcode::kParameter) continue;
    std::vector<HloInstruction*> ops;
    for (HloInstruction* o : b->operands()) ops.push_back(map.at(o));
    std::unique_ptr<HloInstruction> c = b->CloneWithNewOperands(b->shape(), ops);
    c->set_name(b->name());
    if (c->channel_id) c->channel_id = next_channel_id_++;
    map[b] = body->AddInstruction(std::move(c));
  }
  HloInstruction* result = map.at(branch->root());
  std::vector<HloInstruction*> readers = i->users();
  RETURN_IF_ERROR(ReplaceUses(i, readers, result));
  for (HloComputation* c : i->called_computations()) {
    --callers_[c];
    maybe_orphaned_.insert(c);
  }
  RETURN_IF_ERROR(RemoveIfDead(body, i));
  // RemoveIfDead keeps conditionals: remove it explicitly.
  if (i->user_count() == 0 && !i->IsRoot()) {
    RETURN_IF_ERROR(body->RemoveInstruction(i));
  }
  return absl::OkStatus();
}

absl::Status Handler::FoldCounterArithmetic(HloComputation* body) {
  for (HloInstruction* i : body->MakeInstructionPostOrder()) {
    if (i->parent() != body) continue;
    if (IsFoldableScalarOp(i)) {
      auto v = EvaluateScalar(i, ScalarEnv{});
      if (!v) continue;
      HloInstruction* k = AddScalarConstant(body, i->shape().element_type, *v, i->name());
      std::vector<HloInstruction*> readers = i->users();
      RETURN_IF_ERROR(ReplaceUses(i, readers, k));
      continue;
    }
    if (i->opcode() == HloOpcode::kConditional && i->conditional_is_pred &&
        i->operand(0)->opcode() == HloOpcode::kConstant && i->called_computations().size() == 2) {
      RETURN_IF_ERROR(InlineTakenBranch(body, i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Handler::Unroll(HloInstruction* w, const WindowedLoop& L,
                                     std::string* msg) {
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  const int64_t T = L.trip_count;
  const int64_t ci = L.counter_index;
  const PrimitiveType ct = w->shape().tuple_shapes[ci].element_type;
  std::vector<int64_t> ks = CounterSequence(L);

  // Trips 1..T-1 repeat the instructions that depend on the loop state; the root takes the last
  // trip's values.
  std::vector<HloInstruction*> prev = CloneTrips(L, StateDependentInstructions(body), ks, ct);
  HloInstruction* root = body->AddInstruction(HloOpcode::kTuple, R->shape(), prev, R->name());
  body->set_root(root);
  RETURN_IF_ERROR(RemoveIfDead(body, R));
  // Copy 0 reads the counter as a constant too (the copies already do).
  std::vector<HloInstruction*> gtes = P->users();
  for (HloInstruction* g : gtes) {
    if (g->tuple_index != ci) continue;
    HloInstruction* k = AddScalarConstant(body, ct, ks[0], "unrolled_counter");
    std::vector<HloInstruction*> readers = g->users();
    RETURN_IF_ERROR(ReplaceUses(g, readers, k));
  }

  // Fold the counter arithmetic and resolve the guarded permutes.
  RETURN_IF_ERROR(FoldCounterArithmetic(body));

  // Every loop-carried value stays computed, also those nobody reads after the loop (the last,
  // wasted transfer of the ring among them): removing dead elements, and the values of a
  // one-trip loop nobody reads, is while-loop-dead-tuple-elements' job, so that the loop always
  // keeps its dots here.
  body->RemoveDeadCode();

  // XLA names the unrolled computations after the originals.
  for (HloComputation* c : {body, L.condition}) {
    if (!absl::StartsWith(c->name(), kUnrolledPrefix)) {
      RenameComputation(c, absl::StrCat(kUnrolledPrefix, c->name()));
    }
  }
  w->SetFrontendAttribute(kTripCountOneAttr, "true");
  bool ok;
  Json cfg = ParseConfig(w->backend_config, &ok);
  if (ok) {
    cfg["known_trip_count"] = Json::object({{"n", "1"}});
    w->backend_config = cfg.dump();
  }
  *msg = UnrolledRemark(body, T);
  return true;
}

}  // namespace weave::handler_internal
