// windowed-einsum-handler, step 1: the FP8 shift (../shared/specs/windowed-einsum-handler.md §2).
// `tuple(dequant(qa, sa), dequant(qb, sb), ...) -> while` becomes `tuple(qa, qb, ..., sa, sb) ->
// while`; the ring carries FP8 and every other reader inside the body reads a fresh dequantization.
#include "gpu/windowed_einsum_handler_internal.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/replication.h"

namespace weave::handler_internal {

namespace {

bool AllowedFp8Pair(PrimitiveType a, PrimitiveType b) {
  auto ok = [](PrimitiveType t) {
    return t == PrimitiveType::F8E4M3FN || t == PrimitiveType::F8E5M2;
  };
  return ok(a) && ok(b) && !(a == PrimitiveType::F8E5M2 && b == PrimitiveType::F8E5M2);
}

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

}  // namespace

absl::Status Handler::RetypeBranch(HloInstruction* cond, PrimitiveType t) {
  auto& called = *cond->mutable_called_computations();
  for (auto& comp : called) {
    if (callers_[comp] > 1) {
      --callers_[comp];
      maybe_orphaned_.insert(comp);
      comp = module_->CloneComputation(comp, comp->name());
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

absl::StatusOr<bool> Handler::ShiftFp8(const WindowedLoop& L, std::string* msg) {
  HloInstruction* w = L.while_instr;
  HloInstruction* init = L.init;
  if (L.fp8_operands) {
    *msg = "FP8 operands already inside the loop (scales at tuple indices " +
           (L.scale_index[0] ? std::to_string(*L.scale_index[0]) : std::string("?")) + ", " +
           (L.scale_index[1] ? std::to_string(*L.scale_index[1]) : std::string("?")) + ")";
    return false;
  }
  std::optional<DequantMatch> m[2] = {MatchDequantize(init->operand(0)),
                                      MatchDequantize(init->operand(1))};
  if (!m[0] && !m[1]) {
    *msg = absl::StrCat("FP8 shift: operands are not dequantized FP8 values (wide loop): ",
                        WhyNotDequantize(init->operand(0)), "; ",
                        WhyNotDequantize(init->operand(1)));
    return false;
  }
  for (int j = 0; j < 2; ++j) {
    if (!m[j]) {
      *msg = absl::StrCat("FP8 shift not applied: operand ", j, " ('", init->operand(j)->name(),
                          "') is not a dequantization of an FP8 value: ",
                          WhyNotDequantize(init->operand(j)));
      return false;
    }
  }
  if (init->user_count() != 1) {
    *msg = absl::StrCat("FP8 shift not applied: the init tuple '", init->name(), "' has ",
                        init->user_count(), " users, not only the while");
    return false;
  }
  if (!AllowedFp8Pair(m[0]->fp8_type, m[1]->fp8_type)) {
    *msg = absl::StrCat("FP8 shift not applied: ", std::string(PrimitiveTypeName(m[0]->fp8_type)),
                        " x ", std::string(PrimitiveTypeName(m[1]->fp8_type)),
                        " is not a supported FP8 GEMM pair (E4M3FNxE4M3FN, E4M3FNxE5M2, "
                        "E5M2xE4M3FN)");
    return false;
  }
  for (int j = 0; j < 2; ++j) {
    if (!IsDequantWideType(m[j]->wide_type)) {
      *msg = absl::StrCat("FP8 shift not applied: operand ", j, " dequantizes to ",
                          std::string(PrimitiveTypeName(m[j]->wide_type)),
                          ", not bf16, f16 or f32");
      return false;
    }
    if (!IsScalarScale(*m[j])) {
      *msg = absl::StrCat("FP8 shift not applied: the scale of operand ", j, " ('",
                          m[j]->scale->name(), "', ", m[j]->scale->shape().ToString(false),
                          ") is not a scalar");
      return false;
    }
  }
  for (int j = 0; j < 2; ++j) {
    std::string why;
    if (!IsSameOnAllPartitions(m[j]->scale, &why)) {
      *msg = absl::StrCat("FP8 shift not applied: the scale of operand ", j, " ('",
                          m[j]->scale->name(),
                          "') is not proven the same on every partition of the ring (", why,
                          "); a partition would dequantize a neighbour's shard with its own scale");
      return false;
    }
  }
  for (HloInstruction* u : w->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) {
      *msg = absl::StrCat("FP8 shift not applied: the while is read by '", u->name(),
                          "', not only by get-tuple-element");
      return false;
    }
  }

  // The FP8 values that travel inside the body ("carriers"), with the operand they come from.
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  std::vector<HloInstruction*> carriers;
  absl::flat_hash_map<HloInstruction*, int> origin;
  for (HloInstruction* g : P->users()) {
    if (g->tuple_index == 0 || g->tuple_index == 1) {
      origin[g] = static_cast<int>(g->tuple_index);
      carriers.push_back(g);
    }
  }
  for (size_t i = 0; i < carriers.size(); ++i) {
    HloInstruction* c = carriers[i];
    for (HloInstruction* u : c->users()) {
      if (origin.count(u)) continue;
      bool carrier = (u->opcode() == HloOpcode::kCollectivePermute && u->operand_count() == 1) ||
                     IsGuardedPermute(u, c);
      if (carrier) {
        origin[u] = origin[c];
        carriers.push_back(u);
      }
    }
  }
  for (int j = 0; j < 2; ++j) {
    auto it = origin.find(R->operand(j));
    if (it == origin.end() || it->second != j) {
      *msg = absl::StrCat("FP8 shift not applied: loop-carried operand ", j,
                          " is neither passed through nor only permuted ('",
                          R->operand(j)->name(), "')");
      return false;
    }
  }

  // Rewrite. New loop state: (qa, qb, out, extra, k, ..., sa, sb).
  HloComputation* comp = w->parent();
  const Shape old_state = w->shape();
  const int64_t n = static_cast<int64_t>(old_state.tuple_shapes.size());
  std::vector<Shape> elems = old_state.tuple_shapes;
  PrimitiveType fp8[2] = {m[0]->fp8_type, m[1]->fp8_type};
  for (int j = 0; j < 2; ++j) elems[j] = elems[j].WithElementType(fp8[j]);
  elems.push_back(m[0]->scale->shape());
  elems.push_back(m[1]->scale->shape());
  Shape state = Shape::Tuple(elems);

  std::vector<HloInstruction*> ops = init->operands();
  ops[0] = m[0]->q;
  ops[1] = m[1]->q;
  ops.push_back(m[0]->scale);
  ops.push_back(m[1]->scale);
  if (auto s = ReplaceInit(w, state, ops, &rename_); !s.ok()) return s;
  P->set_shape(state);
  L.condition->parameter(0)->set_shape(state);

  HloInstruction* scale_gte[2] = {AddGte(body, P, n, absl::StrCat(m[0]->scale->name(), ".gte")),
                                  AddGte(body, P, n + 1,
                                         absl::StrCat(m[1]->scale->name(), ".gte"))};
  // Retype the carriers, then dequantize them for every other reader.
  std::vector<Shape> wide_shape;
  for (HloInstruction* c : carriers) wide_shape.push_back(c->shape());
  for (HloInstruction* c : carriers) {
    const PrimitiveType t = fp8[origin[c]];
    c->set_shape(c->shape().WithElementType(t));
    if (c->opcode() == HloOpcode::kConditional) {
      if (auto s = RetypeBranch(c, t); !s.ok()) return s;
    }
  }
  for (size_t i = 0; i < carriers.size(); ++i) {
    HloInstruction* c = carriers[i];
    const int j = origin[c];
    std::vector<HloInstruction*> readers;
    for (HloInstruction* u : c->users()) {
      if (origin.count(u)) continue;
      bool reads = false;
      for (int64_t k = 0; k < u->operand_count(); ++k) {
        reads = reads || (u->operand(k) == c && !(u == R && k == j));
      }
      if (reads) readers.push_back(u);
    }
    // One dequantization per reader, so that each dot / dynamic-slice owns its own (the FP8 GEMM
    // rewriter folds a single-user dequantization into the GEMM).
    for (HloInstruction* u : readers) {
      HloInstruction* dq = BuildDequantize(body, c, scale_gte[j], m[j]->is_divide,
                                           m[j]->wide_type, wide_shape[i]);
      for (int64_t k = 0; k < u->operand_count(); ++k) {
        if (u->operand(k) != c) continue;
        if (u == R && k == j) continue;  // the loop-carried element stays FP8
        if (auto s = u->ReplaceOperandWith(k, dq); !s.ok()) return s;
      }
    }
  }
  R->AppendOperand(scale_gte[0]);
  R->AppendOperand(scale_gte[1]);
  R->set_shape(state);

  // Users of the while's elements 0/1 now read FP8: dequantize after the loop.
  std::vector<HloInstruction*> wusers = w->users();
  for (HloInstruction* g : wusers) {
    if (g->tuple_index != 0 && g->tuple_index != 1) continue;
    const int j = static_cast<int>(g->tuple_index);
    const Shape wide = g->shape();
    std::vector<HloInstruction*> readers = g->users();
    g->set_shape(state.tuple_shapes[j]);
    HloInstruction* dq =
        BuildDequantize(comp, g, m[j]->scale, m[j]->is_divide, m[j]->wide_type, wide);
    if (auto s = ReplaceUses(g, readers, dq); !s.ok()) return s;
  }
  int64_t permutes = 0;
  for (HloInstruction* c : carriers) {
    if (c->opcode() != HloOpcode::kGetTupleElement) ++permutes;
  }
  *msg = absl::StrFormat(
      "FP8 dequantization shifted into the loop: operands %s x %s (dequantized to %s x %s), "
      "scales appended at tuple indices %d and %d, ",
      PrimitiveTypeName(fp8[0]), PrimitiveTypeName(fp8[1]), PrimitiveTypeName(m[0]->wide_type),
      PrimitiveTypeName(m[1]->wide_type), n, n + 1);
  if (L.kind == WindowedLoopKind::kAllGather) {
    absl::StrAppend(msg, permutes, " ring transfer", permutes == 1 ? "" : "s", " now in FP8");
  } else {
    absl::StrAppend(msg, "operands stay in place, the accumulators stay wide");
  }
  return true;
}

}  // namespace weave::handler_internal
