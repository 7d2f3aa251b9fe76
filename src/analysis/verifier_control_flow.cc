// Shape checks of control flow and calls: while, conditional, call, tuple, get-tuple-element,
// custom-call (analysis/verifier_checker.h), after XLA's ShapeInference.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/async_chain.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {

absl::Status Checker::OneParamComputation(const HloComputation* c, const char* role) const {
  if (c == nullptr) return Err(absl::StrCat("missing ", role, " computation"));
  if (c->num_parameters() != 1) {
    return Err(absl::StrCat(role, " computation '", c->name(), "' has ", c->num_parameters(),
                            " parameters, expected 1"));
  }
  if (c->root() == nullptr) return Err(absl::StrCat(role, " computation '", c->name(), "' has no root"));
  return absl::OkStatus();
}

namespace {

// XLA's HloSharding equality: the same kind, tiles, devices and subgroups (the written form,
// iota or list, does not matter).
bool SameSharding(const HloSharding& a, const HloSharding& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case HloSharding::Kind::kTiled:
      return a.tile_dims == b.tile_dims && a.devices == b.devices &&
             a.last_tile_dim_replicate == b.last_tile_dim_replicate && a.last_tile_dims == b.last_tile_dims;
    case HloSharding::Kind::kMaximal:
      return a.maximal_device == b.maximal_device;
    case HloSharding::Kind::kTuple:
      if (a.tuple.size() != b.tuple.size()) return false;
      for (size_t i = 0; i < a.tuple.size(); ++i) {
        if (!SameSharding(a.tuple[i], b.tuple[i])) return false;
      }
      return true;
    case HloSharding::Kind::kOther:
      return a.text == b.text;
    default:
      return true;
  }
}

}  // namespace

absl::Status Checker::ConsistentSharding(const std::vector<const HloInstruction*>& group) const {
  // XLA's VerifyConsistentSharding: those with a sharding agree.
  const HloInstruction* first = nullptr;
  for (const HloInstruction* i : group) {
    if (i == nullptr || !i->sharding) continue;
    if (first == nullptr) {
      first = i;
    } else if (!SameSharding(*first->sharding, *i->sharding)) {
      return Err(absl::StrCat("inconsistent shardings: '", first->name(), "' has ", first->sharding->ToString(),
                              ", '", i->name(), "' has ", i->sharding->ToString()));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::While() {
  RETURN_IF_ERROR(OperandCount(1));
  if (h_.called_computations().size() != 2) return Err("needs condition= and body=");
  const HloComputation* cond = h_.while_condition();
  const HloComputation* body = h_.while_body();
  RETURN_IF_ERROR(OneParamComputation(cond, "condition"));
  RETURN_IF_ERROR(OneParamComputation(body, "body"));
  const Shape& init = Op(0);
  if (!ShapesMatch(cond->root()->shape(), Shape::Scalar(PrimitiveType::PRED))) {
    return Err(absl::StrCat("condition '", cond->name(), "' returns ",
                            ShapeText(cond->root()->shape()), ", expected pred[]"));
  }
  if (!ShapesMatch(cond->parameter(0)->shape(), init)) {
    return Err(absl::StrCat("condition '", cond->name(), "' parameter ",
                            ShapeText(cond->parameter(0)->shape()), " differs from init ",
                            ShapeText(init)));
  }
  if (!ShapesMatch(body->parameter(0)->shape(), init)) {
    return Err(absl::StrCat("body '", body->name(), "' parameter ",
                            ShapeText(body->parameter(0)->shape()), " differs from init ",
                            ShapeText(init)));
  }
  if (!ShapesMatch(body->root()->shape(), init)) {
    return Err(absl::StrCat("body '", body->name(), "' root ", ShapeText(body->root()->shape()),
                            " differs from init ", ShapeText(init)));
  }
  RETURN_IF_ERROR(ResultIs(init, "init shape"));
  // The loop, its body's parameter and root and its condition's parameter share one sharding.
  return ConsistentSharding({&h_, body->root(), body->parameter(0), cond->parameter(0)});
}

absl::Status Checker::Conditional() {
  const auto& branches = h_.called_computations();
  if (branches.empty()) return Err("has no branch computations");
  if (h_.operand_count() != static_cast<int64_t>(branches.size()) + 1) {
    return Err(absl::StrCat("has ", branches.size(), " branches but ", h_.operand_count(),
                            " operands (expected the selector plus one per branch)"));
  }
  const Shape& sel = Op(0);
  const bool pred_ok = ShapesMatch(sel, Shape::Scalar(PrimitiveType::PRED)) && branches.size() == 2;
  const bool index_ok = ShapesMatch(sel, Shape::Scalar(PrimitiveType::S32));
  if (!pred_ok && !index_ok) {
    return Err(absl::StrCat("selector ", ShapeText(sel),
                            " must be pred[] (two branches) or s32[]"));
  }
  for (size_t b = 0; b < branches.size(); ++b) {
    const HloComputation* c = branches[b];
    RETURN_IF_ERROR(OneParamComputation(c, "branch"));
    const Shape& arg = Op(static_cast<int64_t>(b) + 1);
    if (!ShapesMatch(c->parameter(0)->shape(), arg)) {
      return Err(absl::StrCat("branch ", b, " '", c->name(), "' parameter ",
                              ShapeText(c->parameter(0)->shape()), " differs from operand ",
                              b + 1, " ", ShapeText(arg)));
    }
    if (!ShapesMatch(c->root()->shape(), h_.shape())) {
      return Err(absl::StrCat("branch ", b, " '", c->name(), "' returns ",
                              ShapeText(c->root()->shape()), " but the result is ",
                              ShapeText(h_.shape())));
    }
  }
  // The conditional and its branches' roots share one sharding.
  std::vector<const HloInstruction*> group = {&h_};
  for (const HloComputation* c : branches) group.push_back(c->root());
  return ConsistentSharding(group);
}

absl::Status Checker::Call() {
  if (h_.called_computations().size() != 1 || h_.called_computations()[0] == nullptr) {
    return Err("needs one to_apply computation");
  }
  // A composite call names its composite in frontend attributes (XLA's HandleCall):
  // composite.name, and composite.version, where given, a non-negative integer
  // (composite.attributes is optional).
  if (const std::string* composite = h_.GetRawAttribute("is_composite"); composite != nullptr && *composite == "true") {
    if (!h_.frontend_attributes.contains("composite.name")) {
      return Err("a composite call needs the frontend attribute composite.name");
    }
    if (auto it = h_.frontend_attributes.find("composite.version"); it != h_.frontend_attributes.end()) {
      std::string version = it->second;
      version.erase(std::remove(version.begin(), version.end(), '"'), version.end());
      int64_t v = -1;
      if (!absl::SimpleAtoi(version, &v) || v < 0) {
        return Err(absl::StrCat("composite.version=", it->second, " is not a non-negative integer"));
      }
    }
  }
  const HloComputation* c = h_.called_computations()[0];
  if (c->num_parameters() != h_.operand_count()) {
    return Err(absl::StrCat("computation '", c->name(), "' has ", c->num_parameters(),
                            " parameters but the call has ", h_.operand_count(), " operands"));
  }
  for (int64_t i = 0; i < h_.operand_count(); ++i) {
    if (!ShapesMatch(c->parameter(i)->shape(), Op(i))) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(Op(i)), " differs from parameter ",
                              i, " of '", c->name(), "' ",
                              ShapeText(c->parameter(i)->shape())));
    }
  }
  if (c->root() == nullptr) return Err(absl::StrCat("computation '", c->name(), "' has no root"));
  return ResultIs(c->root()->shape(), absl::StrCat("root shape of '", c->name(), "'"));
}

absl::Status Checker::Tuple() {
  std::vector<Shape> elems;
  for (const HloInstruction* o : h_.operands()) elems.push_back(o->shape());
  return ResultIs(Shape::Tuple(elems), "tuple of the operand shapes");
}

absl::Status Checker::GetTupleElement() {
  RETURN_IF_ERROR(OperandCount(1));
  const Shape& t = Op(0);
  if (!t.IsTuple()) {
    return Err(absl::StrCat("operand '", h_.operand(0)->name(), "' has non-tuple shape ",
                            ShapeText(t)));
  }
  const int64_t n = static_cast<int64_t>(t.tuple_shapes.size());
  if (h_.tuple_index < 0 || h_.tuple_index >= n) {
    return Err(absl::StrCat("index=", h_.tuple_index, " is out of range for operand '",
                            h_.operand(0)->name(), "' with ", n, " elements ", ShapeText(t)));
  }
  return ResultIs(t.tuple_shapes[static_cast<size_t>(h_.tuple_index)], "tuple element shape");
}

namespace {

// The -done of a native -start opcode (XLA's VerifyAsynchronousInstructionPairs pairs them).
std::optional<HloOpcode> DoneOf(HloOpcode start) {
  switch (start) {
    case HloOpcode::kCopyStart: return HloOpcode::kCopyDone;
    case HloOpcode::kAllReduceStart: return HloOpcode::kAllReduceDone;
    case HloOpcode::kAllGatherStart: return HloOpcode::kAllGatherDone;
    case HloOpcode::kCollectivePermuteStart: return HloOpcode::kCollectivePermuteDone;
    default: return std::nullopt;
  }
}

std::optional<HloOpcode> StartOf(HloOpcode done) {
  switch (done) {
    case HloOpcode::kCopyDone: return HloOpcode::kCopyStart;
    case HloOpcode::kAllReduceDone: return HloOpcode::kAllReduceStart;
    case HloOpcode::kAllGatherDone: return HloOpcode::kAllGatherStart;
    case HloOpcode::kCollectivePermuteDone: return HloOpcode::kCollectivePermuteStart;
    default: return std::nullopt;
  }
}

}  // namespace

// XLA's VerifyAsynchronousInstructionPairs: a native -start has exactly one user, its -done; a
// -done's operand is its -start; an async-start reaches exactly one async-done through its chain
// of async-updates (each link read by one async-update or async-done). Loop-crossing chains (a
// start whose value a while loop carries) are left to the async shape checks.
absl::Status Checker::StartDonePairing() const {
  const HloOpcode op = h_.opcode();
  if (std::optional<HloOpcode> done = DoneOf(op)) {
    if (h_.users().size() != 1) {
      return Err(absl::StrCat("requires one consumer (its ", std::string(HloOpcodeString(*done)), "), found ",
                              h_.users().size()));
    }
    if (h_.users()[0]->opcode() != *done) {
      return Err(absl::StrCat("its consumer '", h_.users()[0]->name(), "' is ",
                              std::string(HloOpcodeString(h_.users()[0]->opcode())), ", not ",
                              std::string(HloOpcodeString(*done))));
    }
  }
  if (std::optional<HloOpcode> start = StartOf(op)) {
    if (h_.operand_count() != 1 || h_.operand(0)->opcode() != *start) {
      return Err(absl::StrCat("its operand must be a ", std::string(HloOpcodeString(*start)),
                              h_.operand_count() == 1 ? absl::StrCat(", found ", std::string(HloOpcodeString(h_.operand(0)->opcode())))
                                                      : std::string()));
    }
  }
  if (op == HloOpcode::kAsyncUpdate && h_.users().empty() &&
      (h_.parent() == nullptr || h_.parent()->root() != &h_)) {
    return Err("is an orphan: nothing reads it, so no async-done ends its chain");
  }
  if (op == HloOpcode::kAllReduceDone && !ShapesMatch(h_.shape(), Op(0))) {
    return Err(absl::StrCat("result ", ShapeText(h_.shape()), " differs from its all-reduce-start's ",
                            ShapeText(Op(0))));
  }
  if (op == HloOpcode::kAsyncStart) {
    const HloInstruction* link = &h_;
    std::string dones;
    int64_t found = 0;
    for (int64_t steps = 0; link != nullptr && steps < 1 << 20; ++steps) {
      // A link that a loop carries (a loop body's root, or read by anything but the chain):
      // its done is elsewhere, not followed here (XLA permits async ops across while loops).
      // The entry's root is the program's result: no done follows it there.
      const HloComputation* c = link->parent();
      const HloModule* m = c != nullptr ? c->parent() : nullptr;
      if (c != nullptr && c->root() == link && (m == nullptr || m->entry() != c)) return absl::OkStatus();
      const HloInstruction* next = nullptr;
      for (const HloInstruction* u : link->users()) {
        if (u->opcode() == HloOpcode::kAsyncDone) {
          ++found;
          absl::StrAppend(&dones, dones.empty() ? "" : " and ", u->name());
        } else if (u->opcode() == HloOpcode::kAsyncUpdate) {
          next = u;
        } else {
          return absl::OkStatus();
        }
      }
      link = next;
    }
    if (found == 0) return Err("has no matching async-done");
    if (found > 1) return Err(absl::StrCat("is matched by several async-done instructions: ", dones));
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncPair() {
  const HloOpcode op = h_.opcode();
  const Shape& s = h_.shape();
  RETURN_IF_ERROR(OperandCount(1));
  const Shape& x = Op(0);
  switch (op) {
    case HloOpcode::kCopyStart:
      // (destination, source, context): both buffers of the operand's shape.
      if (!s.IsTuple() || s.tuple_shapes.size() < 2 || !ShapesMatch(s.tuple_shapes[0], x) ||
          !ShapesMatch(s.tuple_shapes[1], x)) {
        return Err(absl::StrCat("result ", ShapeText(s), " is not a tuple (", ShapeText(x), ", ", ShapeText(x),
                                ", context) for its operand"));
      }
      return absl::OkStatus();
    case HloOpcode::kCopyDone:
      if (!x.IsTuple() || x.tuple_shapes.empty()) {
        return Err(absl::StrCat("operand '", h_.operand(0)->name(), "' ", ShapeText(x),
                                " is not a copy-start tuple"));
      }
      return ResultIs(x.tuple_shapes[0], "the copy-start's destination");
    default:
      return absl::OkStatus();
  }
}

absl::Status Checker::Map() {
  if (h_.called_computations().size() != 1 || h_.called_computations()[0] == nullptr) {
    return Err("needs one computation (to_apply=)");
  }
  const HloComputation* c = h_.called_computations()[0];
  // More operands than parameters is allowed (XLA); fewer is not.
  if (c->num_parameters() != h_.operand_count()) {
    return Err(absl::StrCat("computation '", c->name(), "' takes ", c->num_parameters(), " parameters for ",
                            h_.operand_count(), " operands"));
  }
  for (int64_t i = 0; i < c->num_parameters(); ++i) {
    if (!Op(i).IsArray()) return Err(absl::StrCat("operand ", i, " is not an array"));
    const Shape want = Shape::Scalar(Op(i).element_type);
    const Shape& got = c->parameters()[static_cast<size_t>(i)]->shape();
    if (!SameShape(got, want)) {
      return Err(absl::StrCat("parameter ", i, " of '", c->name(), "' is ", ShapeText(got), ", not ",
                              ShapeText(want), " (operand ", i, "'s element type)"));
    }
  }
  if (c->root() == nullptr || !h_.shape().IsArray() ||
      !ShapesMatch(c->root()->shape(), Shape::Scalar(h_.shape().element_type))) {
    return Err(absl::StrCat("computation '", c->name(), "' must return a scalar of the result's element type"));
  }
  return absl::OkStatus();
}

absl::Status Checker::Outfeed() {
  // XLA's HandleOutfeed: (data, token) -> token[].
  RETURN_IF_ERROR(OperandCount(2));
  if (!Op(1).IsToken()) return Err(absl::StrCat("operand 1 is ", ShapeText(Op(1)), ", not a token[]"));
  if (!h_.shape().IsToken()) return Err(absl::StrCat("result ", ShapeText(h_.shape()), " must be token[]"));
  return absl::OkStatus();
}

absl::Status Checker::Infeed() {
  RETURN_IF_ERROR(OperandCount(1));
  if (Op(0).element_type != PrimitiveType::TOKEN || Op(0).IsTuple()) {
    return Err(absl::StrCat("operand ", ShapeText(Op(0)), " must be a token"));
  }
  const Shape& r = h_.shape();
  if (!r.IsTuple() || r.tuple_shapes.size() != 2 || r.tuple_shapes[1].element_type != PrimitiveType::TOKEN) {
    return Err(absl::StrCat("result ", ShapeText(r), " must be a tuple (data, token[])"));
  }
  return absl::OkStatus();
}

absl::Status Checker::CustomCall() {
  const std::string& t = h_.custom_call_target();
  if (t == "GetRngSeed") {
    // XLA's verifier: no operands, a u64[] result.
    RETURN_IF_ERROR(OperandCount(0));
    if (!h_.shape().IsArray() || h_.shape().element_type != PrimitiveType::U64 || h_.shape().rank() != 0) {
      return Err(absl::StrCat("custom_call_target=\"GetRngSeed\": result ", ShapeText(h_.shape()), " must be u64[]"));
    }
    return absl::OkStatus();
  }
  if (t == "Sharding" || t == "SPMDFullToShardShape" || t == "SPMDShardToFullShape" ||
      t == "MoveToHost" || t == "MoveToDevice") {
    RETURN_IF_ERROR(OperandCount(1));
    if (t == "Sharding" || t == "MoveToHost" || t == "MoveToDevice") {
      return ResultIs(Op(0), "operand shape");
    }
    if (Op(0).element_type != h_.shape().element_type || Op(0).rank() != h_.shape().rank()) {
      return Err(absl::StrCat("custom_call_target=\"", t, "\": result ", ShapeText(h_.shape()),
                              " must keep the operand's element type and rank ",
                              ShapeText(Op(0))));
    }
    return absl::OkStatus();
  }
  if (t.rfind("__cublas$", 0) == 0 && h_.operand_count() < 2) {
    return Err(absl::StrCat("custom_call_target=\"", t, "\" needs at least 2 operands, got ",
                            h_.operand_count()));
  }
  return AliasingConfig();
}

absl::Status Checker::Fusion() {
  // XLA's HandleFusion: the fused computation takes the operands and gives the result.
  if (h_.called_computations().size() != 1 || h_.called_computations()[0] == nullptr) {
    return Err("needs one fused computation (calls=)");
  }
  const HloComputation* c = h_.called_computations()[0];
  // More operands than parameters is allowed (XLA); fewer is not.
  if (c->num_parameters() > h_.operand_count()) {
    return Err(absl::StrCat("computation '", c->name(), "' takes ", c->num_parameters(), " parameters for ",
                            h_.operand_count(), " operands"));
  }
  for (int64_t i = 0; i < c->num_parameters(); ++i) {
    const Shape& p = c->parameters()[static_cast<size_t>(i)]->shape();
    if (!ShapesMatch(p, Op(i))) {
      return Err(absl::StrCat("parameter ", i, " of '", c->name(), "' is ", ShapeText(p), ", but operand ", i,
                              " is ", ShapeText(Op(i))));
    }
  }
  if (c->root() != nullptr) {
    if (auto st = ResultIs(c->root()->shape(), absl::StrCat("computation '", c->name(), "''s result")); !st.ok()) {
      return st;
    }
  }
  return AliasingConfig();
}

absl::Status Checker::CalleesOnCallerThread() const {
  // XLA's CheckCallableInstructionThreadName (default for fusion, while and conditional).
  auto thread = [](const HloComputation* c) { return ExecutionThreadName(c->execution_thread); };
  if (h_.parent() == nullptr) return absl::OkStatus();
  const std::string mine = thread(h_.parent());
  for (const HloComputation* c : h_.called_computations()) {
    if (c != nullptr && thread(c) != mine) {
      return Err(absl::StrCat("calls '", c->name(), "' on thread \"", thread(c), "\" from a computation on \"",
                              mine, "\" (a called computation runs on its caller's thread)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace weave::verifier_internal
