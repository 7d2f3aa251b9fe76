#include "gpu/windowed_einsum_handler.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "gpu/windowed_loop.h"
#include "nlohmann/json.hpp"

namespace weave {
namespace {

using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Small IR helpers.

HloInstruction* AddGte(HloComputation* c, HloInstruction* tuple, int64_t index,
                       std::string_view name) {
  HloInstruction* g = c->AddInstruction(HloOpcode::kGetTupleElement,
                                        tuple->shape().tuple_shapes.at(index), {tuple}, name);
  g->tuple_index = index;
  return g;
}

HloInstruction* AddIntConstant(HloComputation* c, PrimitiveType t, int64_t v,
                               std::string_view name) {
  HloInstruction* k = c->AddInstruction(HloOpcode::kConstant, Shape::Scalar(t), {}, name);
  k->literal = t == PrimitiveType::PRED || IsInteger(t) ? Literal::ScalarInt(t, v)
                                                        : Literal::Scalar(t, static_cast<double>(v));
  return k;
}

HloInstruction* AddZeroBroadcast(HloComputation* c, const Shape& shape, std::string_view name) {
  HloInstruction* z = AddIntConstant(c, shape.element_type, 0, absl::StrCat(std::string(name), ".zero"));
  HloInstruction* b = c->AddInstruction(HloOpcode::kBroadcast, shape, {z}, name);
  b->dimensions.clear();
  b->has_dimensions_attr = true;
  return b;
}

// Removes `i` if nothing reads it, then its operands that became dead (targeted, not a full DCE,
// so that the pass stays linear in the module size). Instructions with control predecessors are
// kept, like everything IsRemovableWhenUnused refuses.
absl::Status RemoveIfDead(HloComputation* c, HloInstruction* i) {
  return c->RemoveUnusedChains({i}, [](const HloInstruction* x) {
    return x->IsRemovableWhenUnused() && x->control_predecessors.empty();
  });
}

// Gives the while `w` a new init tuple of `ops` and the loop state shape `state`; the old init is
// removed when nothing else reads it (the new one then takes over its name).
// The old init, once unused, is left for the dead-code removal at the end of the computation
// (removing one instruction at a time from a large computation is linear each time); the new
// init takes over its name then (*rename).
absl::Status ReplaceInit(HloInstruction* w, const Shape& state, std::vector<HloInstruction*> ops,
                         std::vector<std::pair<HloInstruction*, std::string>>* rename) {
  HloComputation* comp = w->parent();
  HloInstruction* init = w->operand(0);
  const std::string name = init->name();
  HloInstruction* new_init = comp->AddInstruction(HloOpcode::kTuple, state, std::move(ops), name);
  if (auto s = w->ReplaceOperandWith(0, new_init); !s.ok()) return s;
  w->set_shape(state);
  if (init->user_count() == 0 && !init->IsRoot()) {
    // The old init may itself be a replacement waiting for its name: pass the name on.
    for (auto& entry : *rename) {
      if (entry.first == init) {
        entry.first = new_init;
        return absl::OkStatus();
      }
    }
    rename->push_back({new_init, name});
  }
  return absl::OkStatus();
}

// Replaces every use of `old` by `v` among the given users (snapshot), and the root.
absl::Status ReplaceUses(HloInstruction* old, const std::vector<HloInstruction*>& users,
                         HloInstruction* v) {
  if (!users.empty()) {
    auto st = old->ReplaceUsesWith(users, v);
    if (!st.ok()) return st;
  }
  if (old->IsRoot()) old->parent()->set_root(v);
  return absl::OkStatus();
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

// A GPU backend config with XLA's leading fields in XLA's order.
Json FreshGpuConfig() {
  Json j = Json::object();
  j["operation_queue_id"] = "0";
  j["wait_on_operation_queues"] = Json::array();
  j["force_earliest_schedule"] = false;
  return j;
}

int64_t QueueIdOf(const Json& j) {
  auto it = j.find("operation_queue_id");
  if (it == j.end()) return 0;
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Per-run state.

struct CacheUse {
  HloInstruction* all_gather = nullptr;
  int64_t dim = 0;
  // FP8 cache: the all-gather read this dequantization of the loop's FP8 operand.
  std::optional<DequantMatch> dequant;
};

class Handler {
 public:
  Handler(HloModule* m, bool unroll, std::function<void(std::string, bool, std::string)> remark,
          std::function<void(std::string, std::string)> analysis)
      : module_(m), unroll_(unroll), remark_(std::move(remark)), analysis_(std::move(analysis)) {}

  absl::StatusOr<bool> Run();

 private:
  absl::Status Prepare();
  absl::StatusOr<bool> RunOnComputation(HloComputation* comp);
  absl::StatusOr<bool> RunOnLoops(HloComputation* comp, const std::vector<HloInstruction*>& whiles,
                                  const std::vector<HloInstruction*>& gathers,
                                  const std::vector<HloInstruction*>& order);
  void EnsureUnshared(HloInstruction* w);
  absl::StatusOr<bool> ShiftFp8(const WindowedLoop& L, std::string* msg);
  std::string MatchAllGather(HloInstruction* ag, const WindowedLoop& L, CacheUse* use);
  absl::StatusOr<bool> AddCache(const WindowedLoop& L, std::vector<CacheUse>& uses,
                                std::string* msg);
  absl::StatusOr<bool> Unroll(const WindowedLoop& L, std::string* msg);
  absl::StatusOr<bool> AnnotateStreams(const WindowedLoop& L, std::string* msg);
  HloInstruction* BlockOffset(const WindowedDot& d, int64_t w, int64_t dim);
  std::vector<int64_t> CounterSequence(const WindowedLoop& L);
  bool IsAncestorOfWhile(HloInstruction* u, HloInstruction* w);
  absl::Status RetypeBranch(HloInstruction* cond, PrimitiveType t);

  HloModule* module_;
  bool unroll_;
  std::function<void(std::string, bool, std::string)> remark_;
  std::function<void(std::string, std::string)> analysis_;  // informational remarks
  int64_t next_queue_id_ = 1;
  int64_t next_channel_id_ = 1;
  absl::flat_hash_map<const HloComputation*, int64_t> callers_;
  std::set<HloComputation*> maybe_orphaned_;
  absl::flat_hash_map<const HloInstruction*, int64_t> position_;  // current computation
  // Outer computation: dead instructions are removed in one sweep at the end (linear), then
  // these instructions get their predecessors' names.
  std::vector<std::pair<HloInstruction*, std::string>> rename_;
};

absl::Status Handler::Prepare() {
  int64_t max_queue = 0;
  for (HloComputation* c : module_->computations()) {
    for (HloInstruction* i : c->instructions()) {
      for (HloComputation* callee : i->called_computations()) ++callers_[callee];
      if (!i->backend_config.empty() &&
          i->backend_config.find("operation_queue_id") != std::string::npos) {
        bool ok;
        Json j = ParseConfig(i->backend_config, &ok);
        if (ok) max_queue = std::max(max_queue, QueueIdOf(j));
      }
    }
  }
  next_queue_id_ = max_queue + 1;
  next_channel_id_ = module_->NextChannelId();
  return absl::OkStatus();
}

absl::StatusOr<bool> Handler::Run() {
  auto st = Prepare();
  if (!st.ok()) return st;
  bool changed = false;
  std::vector<HloComputation*> comps = module_->MakeComputationPostOrder();
  for (HloComputation* c : comps) {
    auto r = RunOnComputation(c);
    if (!r.ok()) return r.status();
    changed |= *r;
  }
  // Drop the conditional branches this pass replaced by retyped copies, if nothing calls them.
  if (!maybe_orphaned_.empty()) {
    absl::flat_hash_set<const HloComputation*> called;
    for (HloComputation* c : module_->computations()) {
      for (HloInstruction* i : c->instructions()) {
        for (HloComputation* callee : i->called_computations()) called.insert(callee);
      }
    }
    for (HloComputation* c : maybe_orphaned_) {
      if (!called.count(c) && c != module_->entry()) {
        auto rs = module_->RemoveComputation(c);
        if (!rs.ok()) return rs;
      }
    }
  }
  return changed;
}

void Handler::EnsureUnshared(HloInstruction* w) {
  auto& called = *w->mutable_called_computations();
  for (size_t i = 0; i < called.size() && i < 2; ++i) {
    if (callers_[called[i]] > 1) {
      --callers_[called[i]];
      HloComputation* copy = module_->CloneComputation(called[i], called[i]->name());
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

// ---------------------------------------------------------------------------------------------
// 1. FP8 shift.

bool AllowedFp8Pair(PrimitiveType a, PrimitiveType b) {
  auto ok = [](PrimitiveType t) {
    return t == PrimitiveType::F8E4M3FN || t == PrimitiveType::F8E5M2;
  };
  return ok(a) && ok(b) && !(a == PrimitiveType::F8E5M2 && b == PrimitiveType::F8E5M2);
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

// ---------------------------------------------------------------------------------------------
// 2. Activation cache.

// The scalar offset the loop uses for the block of windowed-operand dim `dim` read by `d`: from
// the dynamic-update-slice that merges the dot (batch / non-contracting dims), or from the
// dynamic-slice of the stationary operand (contracting dim). nullptr if not found.
HloInstruction* Handler::BlockOffset(const WindowedDot& d, int64_t w, int64_t dim) {
  const DotDims& dd = d.dot->dot_dims;
  const auto& wb = w == 0 ? dd.lhs_batch : dd.rhs_batch;
  const auto& wc = w == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const auto& oc = w == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  for (size_t i = 0; i < wc.size(); ++i) {
    if (wc[i] != dim) continue;
    HloInstruction* other = d.dot->operand(1 - w);
    if (other->opcode() != HloOpcode::kDynamicSlice) return nullptr;
    if (1 + oc[i] >= other->operand_count()) return nullptr;
    return other->operand(1 + oc[i]);
  }
  int64_t od = -1;
  for (size_t i = 0; i < wb.size(); ++i) {
    if (wb[i] == dim) od = static_cast<int64_t>(i);
  }
  if (od < 0) {
    auto is_in = [](const std::vector<int64_t>& v, int64_t x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    int64_t r = 0;
    for (int64_t x = 0; x < dim; ++x) {
      if (!is_in(wb, x) && !is_in(wc, x)) ++r;
    }
    const int64_t nb = static_cast<int64_t>(dd.lhs_batch.size());
    if (w == 0) {
      od = nb + r;
    } else {
      const int64_t lhs_rank = d.dot->operand(0)->shape().rank();
      od = nb + (lhs_rank - nb - static_cast<int64_t>(dd.lhs_contracting.size())) + r;
    }
  }
  HloInstruction* dus = d.merge;
  if (dus == nullptr || dus->opcode() != HloOpcode::kDynamicUpdateSlice) return nullptr;
  if (2 + od >= dus->operand_count()) return nullptr;
  return dus->operand(2 + od);
}

// Checks that `ag` gathers, on every partition, exactly the shards the loop visits, at the block
// offsets the loop uses. Returns "" when it does, else the reason.
std::string Handler::MatchAllGather(HloInstruction* ag, const WindowedLoop& L, CacheUse* use) {
  const int64_t w = L.windowed_operand;
  const Shape& shard = L.while_instr->shape().tuple_shapes[w];
  if (ag->operand_count() != 1 || ag->dimensions.size() != 1) {
    return "not a single-operand all-gather with one dimension";
  }
  const int64_t dim = ag->dimensions[0];
  const Shape& out = ag->shape();
  if (!out.IsArray() || out.rank() != shard.rank() || dim < 0 || dim >= shard.rank()) {
    return "gathered shape does not match the loop's windowed operand";
  }
  if (!ag->channel_id && !ag->use_global_device_ids) {
    return "cross-replica all-gather (no channel_id): it does not gather across partitions";
  }
  const int64_t np = std::max<int64_t>(module_->num_partitions, 1);
  std::vector<std::vector<int64_t>> groups;
  if (ag->replica_groups && !ag->replica_groups->groups.empty()) {
    groups = ag->replica_groups->groups;
  } else {
    groups.push_back({});
    for (int64_t p = 0; p < np; ++p) groups.back().push_back(p);
  }
  std::vector<int64_t> group_of(np, -1), pos_of(np, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      int64_t p = groups[g][i];
      if (p < 0 || p >= np || group_of[p] >= 0) return "replica groups are not a partition of the devices";
      group_of[p] = static_cast<int64_t>(g);
      pos_of[p] = static_cast<int64_t>(i);
    }
  }
  for (int64_t p = 0; p < np; ++p) {
    if (group_of[p] < 0) return absl::StrCat("partition ", p, " is in no replica group");
  }
  const int64_t gsize = static_cast<int64_t>(groups[0].size());
  for (const auto& g : groups) {
    if (static_cast<int64_t>(g.size()) != gsize) return "replica groups of different sizes";
  }
  for (int64_t i = 0; i < shard.rank(); ++i) {
    const int64_t want = i == dim ? shard.dims[i] * gsize : shard.dims[i];
    if (out.dims[i] != want) {
      return absl::StrFormat("gathered shape %s is not the windowed shard %s gathered %d-way on "
                             "dim %d",
                             out.ToString(false), shard.ToString(false), gsize, dim);
    }
  }
  if (L.ring_size != gsize) {
    return absl::StrFormat("the all-gather groups %d partitions, the loop's ring visits %d blocks",
                           gsize, L.ring_size);
  }
  const int64_t len = shard.dims[dim];
  std::vector<HloInstruction*> offsets;
  for (const WindowedDot& d : L.dots) {
    HloInstruction* off = BlockOffset(d, w, dim);
    if (off == nullptr) {
      return absl::StrFormat("dot '%s' does not place its block of dim %d at a block offset (no "
                             "dynamic-update-slice / dynamic-slice on that dim)",
                             d.dot->name(), dim);
    }
    offsets.push_back(off);
  }
  // Simulate the ring on every partition.
  std::vector<int64_t> ks = CounterSequence(L);
  std::vector<int64_t> holder(np);
  for (int64_t p = 0; p < np; ++p) holder[p] = p;
  std::vector<std::set<int64_t>> seen(np);
  HloInstruction* P = L.body->parameter(0);
  for (int64_t t = 0; t < L.trip_count; ++t) {
    ScalarEnv env{P, L.counter_index, ks[t], 0};
    for (size_t di = 0; di < L.dots.size(); ++di) {
      auto src = ApplyRingSteps(L.dots[di].ring, holder, env);
      if (!src) return "a guarded permute's predicate cannot be evaluated";
      for (int64_t p = 0; p < np; ++p) {
        const int64_t s = (*src)[p];
        if (s < 0) {
          return absl::StrFormat("partition %d receives no shard for dot '%s'", p,
                                 L.dots[di].dot->name());
        }
        if (group_of[s] != group_of[p]) {
          return absl::StrFormat("the ring brings partition %d's shard to partition %d, outside "
                                 "its all-gather replica group",
                                 s, p);
        }
        env.partition = p;
        auto off = EvaluateScalar(offsets[di], env);
        if (!off) {
          return absl::StrFormat("block offset '%s' of dot '%s' cannot be evaluated",
                                 offsets[di]->name(), L.dots[di].dot->name());
        }
        if (*off != pos_of[s] * len) {
          return absl::StrFormat(
              "ring order does not match the all-gather: at trip %d dot '%s' on partition %d puts "
              "partition %d's shard at offset %d, the all-gather at %d",
              t, L.dots[di].dot->name(), p, s, *off, pos_of[s] * len);
        }
        seen[p].insert(s);
      }
    }
    auto next = ApplyRingSteps(L.root_ring, holder, env);
    if (!next) return "a guarded permute's predicate cannot be evaluated";
    holder = *next;
  }
  for (int64_t p = 0; p < np; ++p) {
    if (static_cast<int64_t>(seen[p].size()) != gsize) {
      return absl::StrFormat("partition %d sees %d of the %d shards in the loop", p,
                             seen[p].size(), gsize);
    }
  }
  use->all_gather = ag;
  use->dim = dim;
  return "";
}

bool Handler::IsAncestorOfWhile(HloInstruction* u, HloInstruction* w) {
  auto pu = position_.find(u), pw = position_.find(w);
  if (pu != position_.end() && pw != position_.end() && pu->second > pw->second) return false;
  absl::flat_hash_set<HloInstruction*> seen;
  std::vector<HloInstruction*> work(w->operands().begin(), w->operands().end());
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (x == u) return true;
    if (!seen.insert(x).second) continue;
    for (HloInstruction* o : x->operands()) work.push_back(o);
  }
  return false;
}

absl::StatusOr<bool> Handler::AddCache(const WindowedLoop& L, std::vector<CacheUse>& uses,
                                       std::string* msg) {
  HloInstruction* w = L.while_instr;
  HloComputation* comp = w->parent();
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  const int64_t wi = L.windowed_operand;
  const int64_t dim = uses[0].dim;
  const PrimitiveType et = w->shape().tuple_shapes[wi].element_type;
  const Shape cache_shape = uses[0].all_gather->shape().WithElementType(et);
  for (const CacheUse& u : uses) {
    if (u.dim != dim || !u.all_gather->shape().WithElementType(et).Compatible(cache_shape)) {
      return absl::InternalError("cache uses disagree");
    }
  }
  // Offsets first (before any change).
  std::vector<HloInstruction*> offsets;
  for (const WindowedDot& d : L.dots) offsets.push_back(BlockOffset(d, wi, dim));

  // Loop state: append the cache.
  const Shape old_state = w->shape();
  const int64_t n = static_cast<int64_t>(old_state.tuple_shapes.size());
  std::vector<Shape> elems = old_state.tuple_shapes;
  elems.push_back(cache_shape);
  Shape state = Shape::Tuple(elems);
  HloInstruction* init = L.init;
  HloInstruction* zeros = AddZeroBroadcast(comp, cache_shape, "cache_init");
  std::vector<HloInstruction*> ops = init->operands();
  ops.push_back(zeros);
  if (auto s = ReplaceInit(w, state, ops, &rename_); !s.ok()) return s;
  P->set_shape(state);
  L.condition->parameter(0)->set_shape(state);

  // Body: one dynamic-update-slice per dot, at the dot's block offset.
  HloInstruction* cur = AddGte(body, P, n, "cache");
  HloInstruction* zero = nullptr;
  for (size_t i = 0; i < L.dots.size(); ++i) {
    HloInstruction* off = offsets[i];
    std::vector<HloInstruction*> dus_ops = {cur, L.dots[i].window};
    for (int64_t d = 0; d < cache_shape.rank(); ++d) {
      if (d == dim) {
        dus_ops.push_back(off);
      } else {
        if (zero == nullptr) zero = AddIntConstant(body, off->shape().element_type, 0, "cache_zero");
        dus_ops.push_back(zero);
      }
    }
    cur = body->AddInstruction(HloOpcode::kDynamicUpdateSlice, cache_shape, dus_ops,
                               "cache_update");
  }
  R->AppendOperand(cur);
  R->set_shape(state);

  // After the loop: the cache (dequantized in the FP8 case) replaces the all-gathers.
  HloInstruction* cache = AddGte(comp, w, n, "cache_out");
  std::vector<std::pair<const DequantMatch*, HloInstruction*>> dequants;
  int64_t rewired = 0;
  std::vector<std::string> kept;
  for (CacheUse& u : uses) {
    HloInstruction* value = cache;
    if (u.dequant) {
      HloInstruction* found = nullptr;
      for (auto& [dm, v] : dequants) {
        if (dm->scale == u.dequant->scale && dm->is_divide == u.dequant->is_divide &&
            dm->wide_type == u.dequant->wide_type) {
          found = v;
        }
      }
      if (found == nullptr) {
        found = BuildDequantize(comp, cache, u.dequant->scale, u.dequant->is_divide,
                                u.dequant->wide_type, u.all_gather->shape(),
                                u.dequant->broadcast->dimensions);
        dequants.push_back({&*u.dequant, found});
      }
      value = found;
    }
    std::vector<HloInstruction*> readers;
    for (HloInstruction* r : u.all_gather->users()) {
      if (IsAncestorOfWhile(r, w)) {
        kept.push_back(r->name());
      } else {
        readers.push_back(r);
      }
    }
    rewired += static_cast<int64_t>(readers.size());
    const bool was_root = u.all_gather->IsRoot();
    if (!readers.empty()) {
      if (auto s = u.all_gather->ReplaceUsesWith(readers, value); !s.ok()) return s;
    }
    if (was_root) comp->set_root(value);
    const std::string& ag_name = u.all_gather->name();
    remark_(ag_name, true,
            absl::StrFormat("all-gather replaced by the activation cache (tuple index %d, %s%s) "
                            "of loop '%s'",
                            n, PrimitiveTypeName(et),
                            u.dequant ? ", dequantized after the loop" : "", w->name()));
  }
  *msg = absl::StrFormat(
      "activation cache added at tuple index %d (%s), filled by %d dynamic-update-slice%s, "
      "shared by %d all-gather%s and %d consumer%s",
      n, cache_shape.ToString(false), L.dots.size(), L.dots.size() == 1 ? "" : "s", uses.size(),
      uses.size() == 1 ? "" : "s", rewired, rewired == 1 ? "" : "s");
  if (!kept.empty()) {
    absl::StrAppend(msg, "; not rewired (the loop depends on them): ", absl::StrJoin(kept, ", "));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// 3. Full unrolling.

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

absl::StatusOr<bool> Handler::Unroll(const WindowedLoop& L, std::string* msg) {
  HloInstruction* w = L.while_instr;
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  const int64_t T = L.trip_count;
  const int64_t ci = L.counter_index;
  const PrimitiveType ct = w->shape().tuple_shapes[ci].element_type;
  std::vector<int64_t> ks = CounterSequence(L);

  // Live instructions that depend on the loop state (the rest is loop-invariant and shared).
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
  std::vector<HloInstruction*> prev = R->operands();
  for (int64_t t = 1; t < T; ++t) {
    absl::flat_hash_map<HloInstruction*, HloInstruction*> map;
    HloInstruction* kt = nullptr;
    for (HloInstruction* i : cloned_order) {
      if (i->opcode() == HloOpcode::kGetTupleElement && i->operand(0) == P) {
        if (i->tuple_index == ci) {
          if (kt == nullptr) kt = AddIntConstant(body, ct, ks[t], "unrolled_counter");
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
  HloInstruction* root = body->AddInstruction(HloOpcode::kTuple, R->shape(), prev, R->name());
  body->set_root(root);
  if (auto s = RemoveIfDead(body, R); !s.ok()) return s;
  // Copy 0 reads the counter as a constant too (the copies already do).
  std::vector<HloInstruction*> gtes = P->users();
  for (HloInstruction* g : gtes) {
    if (g->tuple_index != ci) continue;
    HloInstruction* k = AddIntConstant(body, ct, ks[0], "unrolled_counter");
    std::vector<HloInstruction*> readers = g->users();
    if (auto s = ReplaceUses(g, readers, k); !s.ok()) return s;
  }

  // Fold the counter arithmetic and resolve the guarded permutes.
  for (HloInstruction* i : body->MakeInstructionPostOrder()) {
    if (i->parent() != body) continue;
    if (IsFoldableScalarOp(i)) {
      auto v = EvaluateScalar(i, ScalarEnv{});
      if (!v) continue;
      HloInstruction* k = AddIntConstant(body, i->shape().element_type, *v, i->name());
      std::vector<HloInstruction*> readers = i->users();
      if (auto s = ReplaceUses(i, readers, k); !s.ok()) return s;
      continue;
    }
    if (i->opcode() == HloOpcode::kConditional && i->conditional_is_pred &&
        i->operand(0)->opcode() == HloOpcode::kConstant && i->called_computations().size() == 2) {
      auto v = EvaluateScalar(i->operand(0), ScalarEnv{});
      if (!v) continue;
      HloComputation* branch = i->called_computations()[*v != 0 ? 0 : 1];
      HloInstruction* arg = i->operand(*v != 0 ? 1 : 2);
      if (branch->num_parameters() != 1) continue;
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
      if (auto s = ReplaceUses(i, readers, result); !s.ok()) return s;
      for (HloComputation* c : i->called_computations()) {
        --callers_[c];
        maybe_orphaned_.insert(c);
      }
      if (auto s = RemoveIfDead(body, i); !s.ok()) return s;
      // RemoveIfDead keeps conditionals: remove it explicitly.
      if (i->user_count() == 0 && !i->IsRoot()) {
        if (auto s = body->RemoveInstruction(i); !s.ok()) return s;
      }
    }
  }

  // The loop now runs once: a loop-carried value that nobody reads after the loop need not be
  // computed; pass the element through instead (drops the last, wasted transfer).
  bool only_gtes = true;
  std::vector<bool> read(w->shape().tuple_shapes.size(), false);
  for (HloInstruction* u : w->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) only_gtes = false;
    else read[u->tuple_index] = true;
  }
  if (w->IsRoot()) only_gtes = false;
  std::vector<HloInstruction*> gte_of(read.size(), nullptr);
  for (HloInstruction* g : P->users()) {
    if (g->opcode() == HloOpcode::kGetTupleElement && gte_of[g->tuple_index] == nullptr) {
      gte_of[g->tuple_index] = g;
    }
  }
  if (only_gtes) {
    for (size_t j = 0; j < read.size(); ++j) {
      if (read[j] || static_cast<int64_t>(j) == ci) continue;
      HloInstruction* cur = root->operand(j);
      if (cur->opcode() == HloOpcode::kGetTupleElement && cur->operand(0) == P &&
          cur->tuple_index == static_cast<int64_t>(j)) {
        continue;
      }
      if (gte_of[j] == nullptr) gte_of[j] = AddGte(body, P, j, "passthrough");
      if (auto s = root->ReplaceOperandWith(j, gte_of[j]); !s.ok()) return s;
      if (auto s = RemoveIfDead(body, cur); !s.ok()) return s;
    }
  }
  body->RemoveDeadCode();

  w->SetFrontendAttribute(kTripCountOneAttr, "true");
  bool ok;
  Json cfg = ParseConfig(w->backend_config, &ok);
  if (ok) {
    cfg["known_trip_count"] = Json::object({{"n", "1"}});
    w->backend_config = cfg.dump();
  }
  int64_t dots = 0, permutes = 0;
  for (HloInstruction* i : body->instructions()) {
    dots += i->opcode() == HloOpcode::kDot;
    permutes += i->opcode() == HloOpcode::kCollectivePermute;
  }
  const int64_t permutes_before = static_cast<int64_t>(L.permutes.size());
  *msg = absl::StrFormat(
      "%s, body holds %d dot%s and %d collective-permute%s%s",
      T == 1 ? std::string("fully unrolled (1 trip already; now marked trip-count-one)")
             : absl::StrFormat("fully unrolled: %d trips -> 1", T),
      dots, dots == 1 ? "" : "s", permutes, permutes == 1 ? "" : "s",
      T == 1 && permutes < permutes_before
          ? absl::StrFormat(" (%d before: the last step's transfer was unused)", permutes_before)
          : std::string());
  return true;
}

// ---------------------------------------------------------------------------------------------
// 4. Streams.

absl::StatusOr<bool> Handler::AnnotateStreams(const WindowedLoop& L, std::string* msg) {
  bool changed = false;
  int64_t fresh = 0, waits = 0, early = 0;
  std::vector<std::string> skipped;
  for (const WindowedDot& d : L.dots) {
    bool ok;
    Json cfg = ParseConfig(d.dot->backend_config, &ok);
    if (!ok) {
      skipped.push_back(d.dot->name());
      continue;
    }
    if (d.dot->backend_config.empty()) cfg = FreshGpuConfig();
    int64_t id = QueueIdOf(cfg);
    if (id <= 0) {
      id = next_queue_id_++;
      cfg["operation_queue_id"] = std::to_string(id);
      if (!cfg.contains("wait_on_operation_queues")) cfg["wait_on_operation_queues"] = Json::array();
      std::string text = cfg.dump();
      if (text != d.dot->backend_config) {
        d.dot->backend_config = text;
        changed = true;
      }
      ++fresh;
    }
    if (d.merge != nullptr) {
      Json mc = ParseConfig(d.merge->backend_config, &ok);
      if (!ok) {
        skipped.push_back(d.merge->name());
        continue;
      }
      if (d.merge->backend_config.empty()) mc = FreshGpuConfig();
      if (!mc.contains("wait_on_operation_queues") || !mc["wait_on_operation_queues"].is_array()) {
        mc["wait_on_operation_queues"] = Json::array();
      }
      const std::string ids = std::to_string(id);
      bool present = false;
      for (const auto& e : mc["wait_on_operation_queues"]) {
        if ((e.is_string() && e.get<std::string>() == ids) ||
            (e.is_number_integer() && e.get<int64_t>() == id)) {
          present = true;
        }
      }
      if (!present) {
        mc["wait_on_operation_queues"].push_back(ids);
        d.merge->backend_config = mc.dump();
        changed = true;
        ++waits;
      }
    }
  }
  // Permutes fed straight from the loop state start their iteration: issue them first.
  for (HloInstruction* cp : L.permutes) {
    const HloComputation* c = cp->parent();
    if (c->num_parameters() != 1 || (cp->operand(0) != c->parameter(0) &&
                                     TraceRing(cp->operand(0), c->parameter(0), nullptr) == nullptr)) {
      continue;
    }
    bool ok;
    Json cfg = ParseConfig(cp->backend_config, &ok);
    if (!ok) {
      skipped.push_back(cp->name());
      continue;
    }
    if (cp->backend_config.empty()) cfg = FreshGpuConfig();
    if (cfg.contains("force_earliest_schedule") && cfg["force_earliest_schedule"].is_boolean() &&
        cfg["force_earliest_schedule"].get<bool>()) {
      continue;
    }
    cfg["force_earliest_schedule"] = true;
    cp->backend_config = cfg.dump();
    changed = true;
    ++early;
  }
  *msg = changed ? absl::StrFormat("streams: %d dot%s given an operation_queue_id, %d merging "
                                   "user%s wait on them, %d collective-permute%s forced earliest",
                                   fresh, fresh == 1 ? "" : "s", waits, waits == 1 ? "" : "s",
                                   early, early == 1 ? "" : "s")
                 : "streams already annotated";
  if (!skipped.empty()) {
    absl::StrAppend(msg, "; backend_config not JSON, left alone: ", absl::StrJoin(skipped, ", "));
  }
  return changed;
}

// ---------------------------------------------------------------------------------------------

absl::StatusOr<bool> Handler::RunOnComputation(HloComputation* comp) {
  std::vector<HloInstruction*> whiles, gathers;
  std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
  for (HloInstruction* i : order) {
    if (i->opcode() == HloOpcode::kWhile) whiles.push_back(i);
    if (i->opcode() == HloOpcode::kAllGather) gathers.push_back(i);
  }
  if (whiles.empty() && gathers.empty()) return false;
  rename_.clear();
  auto changed_or = RunOnLoops(comp, whiles, gathers, order);
  if (!changed_or.ok()) return changed_or.status();
  if (*changed_or) {
    // One linear sweep removes what the rewrites left unused in this computation (old init
    // tuples and dequantizations, replaced all-gathers).
    comp->RemoveDeadCode();
    for (auto& [instr, name] : rename_) instr->set_name(name);
  }
  return *changed_or;
}

absl::StatusOr<bool> Handler::RunOnLoops(HloComputation* comp,
                                         const std::vector<HloInstruction*>& whiles,
                                         const std::vector<HloInstruction*>& gathers,
                                         const std::vector<HloInstruction*>& order) {
  position_.clear();
  for (size_t i = 0; i < order.size(); ++i) position_[order[i]] = static_cast<int64_t>(i);

  bool changed = false;
  std::vector<HloInstruction*> loops;  // recognised
  for (HloInstruction* w : whiles) {
    std::string why;
    auto L = MatchWindowedLoop(w, &why);
    if (!L) {
      remark_(w->name(), false, "not a windowed einsum loop: " + why);
      continue;
    }
    EnsureUnshared(w);
    L = MatchWindowedLoop(w, &why);
    if (!L) return absl::InternalError("loop changed while unsharing its computations");
    analysis_(w->name(), "recognised: " + L->ToString());
    std::string msg;
    auto r = ShiftFp8(*L, &msg);
    if (!r.ok()) return r.status();
    remark_(w->name(), *r, msg);
    changed |= *r;
    loops.push_back(w);
  }

  // All-gathers: which loop, if any, already circulates the gathered value.
  absl::flat_hash_map<HloInstruction*, HloInstruction*> by_value;  // loop operand -> while
  std::unordered_map<HloInstruction*, WindowedLoop> matched;
  for (HloInstruction* w : loops) {
    auto L = MatchWindowedLoop(w);
    if (!L) return absl::InternalError("loop no longer recognised after the FP8 shift");
    if (L->kind == WindowedLoopKind::kAllGather) {
      by_value.emplace(L->init->operand(L->windowed_operand), w);
    }
    matched.emplace(w, std::move(*L));
  }
  std::map<int64_t, std::pair<HloInstruction*, std::vector<CacheUse>>> caches;  // by position
  for (HloInstruction* ag : gathers) {
    if (ag->operand_count() != 1) {
      remark_(ag->name(), false, "not cached: not a single-operand all-gather");
      continue;
    }
    HloInstruction* x = ag->operand(0);
    CacheUse use;
    HloInstruction* w = nullptr;
    if (auto it = by_value.find(x); it != by_value.end()) {
      w = it->second;
    } else if (auto m = MatchDequantize(x)) {
      auto it2 = by_value.find(m->q);
      if (it2 != by_value.end()) {
        const WindowedLoop& L = matched.at(it2->second);
        if (!IsFp8(L.while_instr->shape().tuple_shapes[L.windowed_operand].element_type)) {
          remark_(ag->name(), false, "not cached: gathers a dequantization of the loop's FP8 "
                                     "operand, but the loop circulates it wide");
          continue;
        }
        std::string why;
        if (!IsScalarScale(*m) || !IsDequantWideType(m->wide_type)) {
          remark_(ag->name(), false, "not cached: its dequantization has no scalar scale or no "
                                     "bf16/f16/f32 wide type");
          continue;
        }
        if (!IsSameOnAllPartitions(m->scale, &why)) {
          remark_(ag->name(), false,
                  absl::StrCat("not cached: the scale '", m->scale->name(),
                               "' of the gathered dequantization is not proven the same on every "
                               "partition (", why, ")"));
          continue;
        }
        use.dequant = *m;
        w = it2->second;
      }
    }
    if (w == nullptr) {
      remark_(ag->name(), false,
              absl::StrCat("not cached: no windowed einsum loop in '", comp->name(),
                           "' circulates the gathered value '", x->name(), "'"));
      continue;
    }
    const WindowedLoop& L = matched.at(w);
    if (L.cache_index) {
      remark_(ag->name(), false,
              absl::StrCat("not cached: loop '", w->name(), "' already has a cache (tuple index ",
                           *L.cache_index, ")"));
      continue;
    }
    std::string why = MatchAllGather(ag, L, &use);
    if (!why.empty()) {
      remark_(ag->name(), false, absl::StrCat("not cached in loop '", w->name(), "': ", why));
      continue;
    }
    auto& entry = caches[position_.at(w)];
    entry.first = w;
    if (!entry.second.empty() && entry.second[0].dim != use.dim) {
      remark_(ag->name(), false, "not cached: another all-gather of this loop gathers on another "
                                 "dim");
      continue;
    }
    entry.second.push_back(use);
  }
  for (auto& [pos, entry] : caches) {
    HloInstruction* w = entry.first;
    std::string msg;
    auto r = AddCache(matched.at(w), entry.second, &msg);
    if (!r.ok()) return r.status();
    remark_(w->name(), *r, msg);
    changed |= *r;
  }

  for (HloInstruction* w : loops) {
    auto L = MatchWindowedLoop(w);
    if (!L) return absl::InternalError("loop no longer recognised after caching");
    if (unroll_ && L->layout != WindowedLoopLayout::kFullyUnrolled) {
      std::string msg;
      auto r = Unroll(*L, &msg);
      if (!r.ok()) return r.status();
      remark_(w->name(), *r, msg);
      changed |= *r;
      std::string why;
      L = MatchWindowedLoop(w, &why);
      if (!L) return absl::InternalError("loop no longer recognised after unrolling: " + why);
    }
    std::string msg;
    auto r = AnnotateStreams(*L, &msg);
    if (!r.ok()) return r.status();
    remark_(w->name(), *r, msg);
    changed |= *r;
  }
  return changed;
}

}  // namespace

absl::StatusOr<bool> WindowedEinsumHandler::Run(HloModule* module) {
  Handler h(
      module, unroll_,
      [this](std::string loc, bool applied, std::string msg) {
        AddRemark(std::move(loc), applied, std::move(msg));
      },
      [this](std::string loc, std::string msg) {
        AddAnalysisRemark(std::move(loc), std::move(msg));
      });
  return h.Run();
}

WEAVE_REGISTER_PASS("windowed-einsum-handler",
                    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      auto unroll = options.GetBool(WindowedEinsumHandler::kUnrollOption, true);
                      if (!unroll.ok()) return unroll.status();
                      return std::make_unique<WindowedEinsumHandler>(*unroll);
                    });

}  // namespace weave
