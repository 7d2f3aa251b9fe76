// windowed-einsum-handler, step 1: the FP8 shift (../shared/specs/windowed-einsum-handler.md §2).
// `tuple(dequant(qa, sa), dequant(qb, sb), ...) -> while` becomes `tuple(qa, qb, ..., sa, sb) ->
// while`; the ring carries FP8 and every other reader inside the body reads a fresh dequantization.
#include "windowed_einsum/windowed_einsum_handler_internal.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/replication.h"
#include "hlo/status_macros.h"

namespace weave::handler_internal {

namespace {

// XLA's AreValidF8InputTypes (windowed_einsum_handler.cc): the pairs its GEMM rewriter turns into
// an FP8 GEMM, at most one E5M2 operand, OCP and FNUZ (ROCm) types not mixed.
constexpr char kAllowedFp8Pairs[] =
    "E4M3FNxE4M3FN, E4M3FNxE5M2, E5M2xE4M3FN, E4M3FNUZxE4M3FNUZ, E4M3FNUZxE5M2FNUZ, E5M2FNUZxE4M3FNUZ";
// Why `v` (a loop operand) is not dequant(fp8, scale), in a few words for a remark.
std::string WhyNotDequantize(HloInstruction* v) {
  if (v->opcode() == HloOpcode::kConvert && v->operand_count() == 1) {
    HloInstruction* inner = v->operand(0);
    if (MatchDequantize(inner)) {
      return absl::StrCat("'", v->name(), "' converts the dequantization '", inner->name(), "' (",
                          std::string(PrimitiveTypeName(inner->shape().element_type)), ") to ",
                          std::string(PrimitiveTypeName(v->shape().element_type)),
                          " after scaling; only convert(FP8) scaled in the operand's own type is "
                          "moved (XLA's FP8 GEMM rewriter refuses a convert there too)");
    }
    if (IsDequantizableFp8(inner->shape().element_type)) {
      return absl::StrCat("'", v->name(), "' converts FP8 '", inner->name(),
                          "' without a scale (no multiply/divide by a broadcast scale)");
    }
  }
  return absl::StrCat("'", v->name(), "' is a ", std::string(HloOpcodeString(v->opcode())),
                      " of type ", std::string(PrimitiveTypeName(v->shape().element_type)),
                      ", not convert(FP8) scaled by a broadcast scale");
}

// The data-movement ops the shift looks through between a dequantization and the loop: XLA's
// handler takes bitcast, broadcast, copy, reshape and transpose (XLA PR 16893); Weave also takes
// slice. They move elements without arithmetic, so they commute with a scalar scaling:
// view(dequant(q, s)) == dequant(view(q), s).
bool IsLookThroughView(const HloInstruction* v) {
  switch (v->opcode()) {
    case HloOpcode::kBitcast:
    case HloOpcode::kBroadcast:
    case HloOpcode::kCopy:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
      return v->operand_count() == 1 && v->shape().IsArray() && v->operand(0)->shape().IsArray() &&
             v->shape().element_type == v->operand(0)->shape().element_type;
    default:
      return false;
  }
}

// dequant(q, s) seen through views: `views` lists them from the dequantization outwards.
struct ViewedDequant {
  DequantMatch dq;
  std::vector<HloInstruction*> views;
};

std::optional<ViewedDequant> MatchViewedDequant(HloInstruction* v, HloInstruction** stop) {
  ViewedDequant r;
  while (IsLookThroughView(v)) {
    r.views.push_back(v);
    v = v->operand(0);
  }
  *stop = v;
  auto m = MatchDequantize(v);
  if (!m) return std::nullopt;
  r.dq = *m;
  std::reverse(r.views.begin(), r.views.end());
  return r;
}

std::string ViewNames(const std::vector<HloInstruction*>& views) {
  std::vector<std::string> names;
  for (const HloInstruction* v : views) {
    names.push_back(absl::StrCat(std::string(HloOpcodeString(v->opcode())), " '", v->name(), "'"));
  }
  return absl::StrJoin(names, ", ");
}

// The partitions each ring of `pairs` connects (its cycles); a partition no pair names is a
// group of its own.
std::vector<std::vector<int64_t>> RingGroups(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                             int64_t num_partitions) {
  std::vector<int64_t> parent(static_cast<size_t>(std::max<int64_t>(num_partitions, 1)));
  for (size_t i = 0; i < parent.size(); ++i) parent[i] = static_cast<int64_t>(i);
  std::function<int64_t(int64_t)> find = [&](int64_t x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= static_cast<int64_t>(parent.size()) ||
        b >= static_cast<int64_t>(parent.size())) {
      continue;
    }
    parent[static_cast<size_t>(find(a))] = find(b);
  }
  std::map<int64_t, std::vector<int64_t>> by_root;
  for (int64_t p = 0; p < static_cast<int64_t>(parent.size()); ++p) by_root[find(p)].push_back(p);
  std::vector<std::vector<int64_t>> groups;
  for (auto& [root, g] : by_root) groups.push_back(std::move(g));
  return groups;
}

}  // namespace

std::string UnannotatedNote(const ReplicationProof& proof) {
  std::vector<std::string> names;
  for (const HloInstruction* p : proof.unannotated_parameters) names.push_back("'" + p->name() + "'");
  if (names.empty()) return "";
  return absl::StrCat("entry parameter", names.size() == 1 ? " " : "s ", absl::StrJoin(names, ", "),
                      names.size() == 1 ? " has" : " have",
                      " no sharding and count", names.size() == 1 ? "s" : "",
                      " as replicated (XLA's SPMD partitioner gives every unannotated instruction "
                      "a replicated sharding)");
}

std::vector<std::vector<int64_t>> Handler::LoopRingGroups(const WindowedLoop& L) const {
  return RingGroups(L.source_target_pairs, module_->num_partitions);
}

absl::Status Handler::RetypeBranch(HloInstruction* cond, PrimitiveType t) {
  auto& called = *cond->mutable_called_computations();
  for (auto& comp : called) {
    if (callers_[comp] > 1) {
      --callers_[comp];
      maybe_orphaned_.insert(comp);
      comp = module_->CloneComputation(comp, comp->name());
      NoteComputation(comp);
      callers_[comp] = 1;
    }
    for (HloInstruction* i : comp->instructions()) {
      if (i->opcode() == HloOpcode::kParameter || i->opcode() == HloOpcode::kCollectivePermute) {
        i->set_shape(i->shape().WithElementType(t));
      }
    }
  }
  return absl::OkStatus();
}

// What the FP8 shift found on one loop: each operand's dequantization, seen through views, and
// the FP8 values that travel in the body ("carriers": the operands' get-tuple-elements and the
// permutes of them) with the operand (0 or 1) each comes from, in discovery order.
struct Handler::Fp8ShiftPlan {
  ViewedDequant operand[2];
  std::vector<HloInstruction*> carriers;
  absl::flat_hash_map<HloInstruction*, int> origin;
  const DequantMatch& dq(int j) const { return operand[j].dq; }
};

namespace {

// Why operand j of `init` is not dequant(fp8, scale), naming the views looked through.
std::string WhyNotOperand(const HloInstruction* init, int j, HloInstruction* stop) {
  std::string s = WhyNotDequantize(stop);
  if (stop != init->operand(j)) {
    std::vector<HloInstruction*> views;
    for (HloInstruction* v = init->operand(j); v != stop; v = v->operand(0)) views.push_back(v);
    absl::StrAppend(&s, " (looked through ", ViewNames(views), ")");
  }
  return s;
}

// The operands' dequantizations (into `operand`), or why the loop's operands cannot be shifted
// to FP8: not dequantized FP8 values, an init shared with another user, an FP8 pair no GEMM
// takes, a wide type other than bf16/f16/f32, a scale that is not a scalar.
std::string MatchShiftOperands(HloInstruction* init, ViewedDequant operand[2]) {
  std::optional<ViewedDequant> vd[2];
  HloInstruction* stop[2] = {nullptr, nullptr};
  for (int j = 0; j < 2; ++j) vd[j] = MatchViewedDequant(init->operand(j), &stop[j]);
  if (!vd[0] && !vd[1]) {
    return absl::StrCat("FP8 shift: operands are not dequantized FP8 values (wide loop): ",
                        WhyNotOperand(init, 0, stop[0]), "; ", WhyNotOperand(init, 1, stop[1]));
  }
  for (int j = 0; j < 2; ++j) {
    if (!vd[j]) {
      return absl::StrCat("FP8 shift not applied: operand ", j, " ('", init->operand(j)->name(),
                          "') is not a dequantization of an FP8 value: ",
                          WhyNotOperand(init, j, stop[j]));
    }
    operand[j] = *vd[j];
  }
  const DequantMatch* m[2] = {&operand[0].dq, &operand[1].dq};
  if (init->user_count() != 1) {
    return absl::StrCat("FP8 shift not applied: the init tuple '", init->name(), "' has ",
                        init->user_count(), " users, not only the while");
  }
  if (!IsWindowedEinsumFp8Pair(m[0]->fp8_type, m[1]->fp8_type)) {
    return absl::StrCat("FP8 shift not applied: ", std::string(PrimitiveTypeName(m[0]->fp8_type)),
                        " x ", std::string(PrimitiveTypeName(m[1]->fp8_type)),
                        " is not a supported FP8 GEMM pair (", kAllowedFp8Pairs, ")");
  }
  for (int j = 0; j < 2; ++j) {
    if (!IsDequantWideType(m[j]->wide_type)) {
      return absl::StrCat("FP8 shift not applied: operand ", j, " dequantizes to ",
                          std::string(PrimitiveTypeName(m[j]->wide_type)),
                          ", not bf16, f16 or f32");
    }
    if (!IsScalarScale(*m[j])) {
      return absl::StrCat("FP8 shift not applied: the scale of operand ", j, " ('",
                          m[j]->scale->name(), "', ", m[j]->scale->shape().ToString(false),
                          ") is not a scalar");
    }
  }
  return "";
}

// The carriers of the loop body (Fp8ShiftPlan), or why elements 0/1 do not only travel: the
// root's operand j must be operand j's get-tuple-element or a permute of it.
std::string FindCarriers(const WindowedLoop& L, std::vector<HloInstruction*>* carriers,
                         absl::flat_hash_map<HloInstruction*, int>* origin) {
  HloInstruction* param = L.body->parameter(0);
  HloInstruction* root = L.body->root();
  for (HloInstruction* g : param->users()) {
    if (g->tuple_index == 0 || g->tuple_index == 1) {
      (*origin)[g] = static_cast<int>(g->tuple_index);
      carriers->push_back(g);
    }
  }
  for (size_t i = 0; i < carriers->size(); ++i) {
    HloInstruction* c = (*carriers)[i];
    for (HloInstruction* u : c->users()) {
      if (origin->count(u)) continue;
      if ((u->opcode() == HloOpcode::kCollectivePermute && u->operand_count() == 1) ||
          IsGuardedPermute(u, c)) {
        (*origin)[u] = (*origin)[c];
        carriers->push_back(u);
      }
    }
  }
  for (int j = 0; j < 2; ++j) {
    auto it = origin->find(root->operand(j));
    if (it == origin->end() || it->second != j) {
      return absl::StrCat("FP8 shift not applied: loop-carried operand ", j,
                          " is neither passed through nor only permuted ('",
                          root->operand(j)->name(), "')");
    }
  }
  return "";
}

// The remark of a shift that was applied.
std::string ShiftSummary(const WindowedLoop& L, const ViewedDequant operand[2],
                         const std::vector<HloInstruction*>& carriers, int64_t scale_index) {
  int64_t permutes = 0;
  for (HloInstruction* c : carriers) {
    if (c->opcode() != HloOpcode::kGetTupleElement) ++permutes;
  }
  std::string msg = absl::StrFormat(
      "FP8 dequantization shifted into the loop: operands %s x %s (dequantized to %s x %s), "
      "scales appended at tuple indices %d and %d, ",
      PrimitiveTypeName(operand[0].dq.fp8_type), PrimitiveTypeName(operand[1].dq.fp8_type),
      PrimitiveTypeName(operand[0].dq.wide_type), PrimitiveTypeName(operand[1].dq.wide_type),
      scale_index, scale_index + 1);
  for (int j = 0; j < 2; ++j) {
    if (!operand[j].views.empty()) {
      absl::StrAppend(&msg, "operand ", j, " seen through ", ViewNames(operand[j].views),
                      " (rebuilt on the FP8 value before the loop), ");
    }
  }
  if (L.kind == WindowedLoopKind::kAllGather) {
    absl::StrAppend(&msg, permutes, " ring transfer", permutes == 1 ? "" : "s", " now in FP8");
  } else {
    absl::StrAppend(&msg, "operands stay in place, the accumulators stay wide");
  }
  return msg;
}

}  // namespace

absl::StatusOr<bool> Handler::ShiftFp8(HloInstruction* w, const WindowedLoop& L,
                                       std::string* msg) {
  if (L.fp8_operands) {
    *msg = "FP8 operands already inside the loop (scales at tuple indices " +
           (L.scale_index[0] ? std::to_string(*L.scale_index[0]) : std::string("?")) + ", " +
           (L.scale_index[1] ? std::to_string(*L.scale_index[1]) : std::string("?")) + ")";
    return false;
  }
  Fp8ShiftPlan plan;
  *msg = MatchShiftOperands(L.init, plan.operand);
  if (msg->empty()) *msg = WhyNotShiftScales(w, L, plan);
  if (msg->empty()) *msg = FindCarriers(L, &plan.carriers, &plan.origin);
  if (!msg->empty()) return false;
  const int64_t scale_index = static_cast<int64_t>(w->shape().tuple_shapes.size());
  RETURN_IF_ERROR(RewriteFp8Shift(w, L, plan));
  *msg = ShiftSummary(L, plan.operand, plan.carriers, scale_index);
  return true;
}

std::string Handler::WhyNotShiftScales(HloInstruction* w, const WindowedLoop& L,
                                       const Fp8ShiftPlan& plan) {
  // Only a scale whose shards travel needs to agree: the windowed operand of an all-gather loop
  // goes round the ring, and each partition dequantizes its neighbours' shards with its own
  // scale, so that scale must be the same within each ring group. The stationary operand of an
  // AG loop and both operands of an RS loop never leave their partition (the RS accumulator
  // travels already dequantized).
  if (L.kind == WindowedLoopKind::kAllGather) {
    const int j = static_cast<int>(L.windowed_operand);
    const HloInstruction* scale = plan.dq(j).scale;
    ReplicationProof proof = ProveSameWithinGroups(scale, LoopRingGroups(L));
    if (!proof.proven) {
      return absl::StrCat("FP8 shift not applied: the scale of operand ", j, " ('",
                          scale->name(),
                          "') is not proven the same on every partition of the ring (", proof.why,
                          "); a partition would dequantize a neighbour's shard with its own scale "
                          "(the windowed operand's scale travels round the ring with its shards)");
    }
    if (std::string note = UnannotatedNote(proof); !note.empty()) {
      analysis_(w->name(), absl::StrCat("the scale '", scale->name(), "' of the windowed operand ",
                                        j, " agrees within each ring group: ", note));
    }
  }
  for (HloInstruction* u : w->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) {
      return absl::StrCat("FP8 shift not applied: the while is read by '", u->name(),
                          "', not only by get-tuple-element");
    }
  }
  return "";
}

absl::Status Handler::RewriteFp8Shift(HloInstruction* w, const WindowedLoop& L,
                                      Fp8ShiftPlan& plan) {
  // New loop state: (qa, qb, out, extra, k, ..., sa, sb).
  HloInstruction* init = L.init;
  HloComputation* comp = w->parent();
  const Shape old_state = w->shape();
  const int64_t n = static_cast<int64_t>(old_state.tuple_shapes.size());
  std::vector<Shape> elems = old_state.tuple_shapes;
  const PrimitiveType fp8[2] = {plan.dq(0).fp8_type, plan.dq(1).fp8_type};
  for (int j = 0; j < 2; ++j) elems[j] = elems[j].WithElementType(fp8[j]);
  elems.push_back(plan.dq(0).scale->shape());
  elems.push_back(plan.dq(1).scale->shape());
  Shape state = Shape::Tuple(elems);

  // The FP8 values the loop receives: q, with the views rebuilt on it in FP8.
  HloInstruction* fp8_value[2];
  for (int j = 0; j < 2; ++j) {
    HloInstruction* cur = plan.dq(j).q;
    for (HloInstruction* v : plan.operand[j].views) {
      std::unique_ptr<HloInstruction> c =
          v->CloneWithNewOperands(v->shape().WithElementType(fp8[j]), {cur});
      c->set_name(absl::StrCat(v->name(), ".fp8"));
      cur = comp->AddInstruction(std::move(c));
    }
    fp8_value[j] = cur;
  }
  shifted_[w] = ShiftedOperands{init->operand(0), init->operand(1), plan.dq(0), plan.dq(1)};
  std::vector<HloInstruction*> ops = init->operands();
  ops[0] = fp8_value[0];
  ops[1] = fp8_value[1];
  ops.push_back(plan.dq(0).scale);
  ops.push_back(plan.dq(1).scale);
  RETURN_IF_ERROR(ReplaceInit(w, state, ops, &rename_));
  HloComputation* body = L.body;
  HloInstruction* param = body->parameter(0);
  param->set_shape(state);
  L.condition->parameter(0)->set_shape(state);

  HloInstruction* scale_gte[2] = {
      AddGetTupleElement(body, param, n, absl::StrCat(plan.dq(0).scale->name(), ".gte")),
      AddGetTupleElement(body, param, n + 1, absl::StrCat(plan.dq(1).scale->name(), ".gte"))};
  RETURN_IF_ERROR(RetypeCarriers(L, plan, scale_gte));
  HloInstruction* root = body->root();
  root->AppendOperand(scale_gte[0]);
  root->AppendOperand(scale_gte[1]);
  root->set_shape(state);

  // Users of the while's elements 0/1 now read FP8: dequantize after the loop.
  std::vector<HloInstruction*> wusers = w->users();
  for (HloInstruction* g : wusers) {
    if (g->tuple_index != 0 && g->tuple_index != 1) continue;
    const int j = static_cast<int>(g->tuple_index);
    const Shape wide = g->shape();
    std::vector<HloInstruction*> readers = g->users();
    g->set_shape(state.tuple_shapes[j]);
    const DequantMatch& m = plan.dq(j);
    HloInstruction* dq = BuildDequantize(comp, g, m.scale, m.is_divide, m.wide_type, wide);
    RETURN_IF_ERROR(ReplaceUses(g, readers, dq));
  }
  return absl::OkStatus();
}

absl::Status Handler::RetypeCarriers(const WindowedLoop& L, Fp8ShiftPlan& plan,
                                     HloInstruction* const scale_gte[2]) {
  // Retype the carriers, then dequantize them for every other reader.
  HloInstruction* root = L.body->root();
  std::vector<Shape> wide_shape;
  for (HloInstruction* c : plan.carriers) wide_shape.push_back(c->shape());
  for (HloInstruction* c : plan.carriers) {
    const PrimitiveType t = plan.dq(plan.origin[c]).fp8_type;
    c->set_shape(c->shape().WithElementType(t));
    if (c->opcode() == HloOpcode::kConditional) {
      RETURN_IF_ERROR(RetypeBranch(c, t));
    }
  }
  for (size_t i = 0; i < plan.carriers.size(); ++i) {
    HloInstruction* c = plan.carriers[i];
    const int j = plan.origin[c];
    std::vector<HloInstruction*> readers;
    for (HloInstruction* u : c->users()) {
      if (plan.origin.count(u)) continue;
      bool reads = false;
      for (int64_t k = 0; k < u->operand_count(); ++k) {
        reads = reads || (u->operand(k) == c && !(u == root && k == j));
      }
      if (reads) readers.push_back(u);
    }
    // One dequantization per reader, so that each dot / dynamic-slice owns its own (the FP8 GEMM
    // rewriter folds a single-user dequantization into the GEMM).
    const DequantMatch& m = plan.dq(j);
    for (HloInstruction* u : readers) {
      HloInstruction* dq =
          BuildDequantize(L.body, c, scale_gte[j], m.is_divide, m.wide_type, wide_shape[i]);
      for (int64_t k = 0; k < u->operand_count(); ++k) {
        if (u->operand(k) != c) continue;
        if (u == root && k == j) continue;  // the loop-carried element stays FP8
        RETURN_IF_ERROR(u->ReplaceOperandWith(k, dq));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace weave::handler_internal
