#include "windowed_einsum/windowed_loop.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "analysis/dequantize.h"
#include "hlo/gemm_call.h"
#include "windowed_einsum/all_to_all_window.h"

namespace weave {

std::string_view WindowedLoopKindName(WindowedLoopKind k) {
  return k == WindowedLoopKind::kAllGather ? "all-gather" : "reduce-scatter";
}

std::string_view WindowedLoopLayoutName(WindowedLoopLayout l) {
  switch (l) {
    case WindowedLoopLayout::kUnrolledByTwo: return "unrolled-by-2";
    case WindowedLoopLayout::kRolled: return "rolled";
    case WindowedLoopLayout::kFullyUnrolled: return "fully unrolled";
    case WindowedLoopLayout::kOther: return "other";
  }
  return "other";
}

std::string WindowedLoop::ToString() const {
  std::string s = absl::StrFormat(
      "%s loop '%s' (%s, N=%d, windowed operand %d, %d trip%s, %d dot%s, %d collective-permute%s",
      WindowedLoopKindName(kind), while_instr ? while_instr->name() : "?",
      WindowedLoopLayoutName(layout), ring_size, windowed_operand, trip_count,
      trip_count == 1 ? "" : "s", dots.size(), dots.size() == 1 ? "" : "s", permutes.size(),
      permutes.size() == 1 ? "" : "s");
  if (fp8_operands) absl::StrAppend(&s, ", FP8 operands");
  if (cache_index) absl::StrAppend(&s, ", cache at tuple index ", *cache_index);
  absl::StrAppend(&s, ")");
  return s;
}

namespace {

constexpr int kMaxEvalDepth = 64;
constexpr int64_t kMaxTrips = 4096;

std::optional<int64_t> Eval(const HloInstruction* v, const ScalarEnv& env, int depth) {
  if (v == nullptr || depth > kMaxEvalDepth) return std::nullopt;
  const Shape& s = v->shape();
  if (!s.IsArray() || s.ElementCount() != 1) {
    // Only the 1-D table operand of a dynamic-slice may be larger; handled there.
    return std::nullopt;
  }
  auto operand = [&](int64_t i) -> std::optional<int64_t> {
    if (i >= v->operand_count()) return std::nullopt;
    return Eval(v->operand(i), env, depth + 1);
  };
  switch (v->opcode()) {
    case HloOpcode::kConstant:
      if (!v->literal || v->literal->elided) return std::nullopt;
      if (IsFloatingPoint(s.element_type)) {
        double d = v->literal->GetAsDouble(0);
        if (d != static_cast<double>(static_cast<int64_t>(d))) return std::nullopt;
        return static_cast<int64_t>(d);
      }
      return v->literal->GetAsInt(0);
    case HloOpcode::kGetTupleElement:
      if (env.counter_param != nullptr && v->operand(0) == env.counter_param &&
          v->tuple_index == env.counter_index) {
        return env.counter;
      }
      return std::nullopt;
    case HloOpcode::kPartitionId:
      return env.partition;
    case HloOpcode::kReshape:
    case HloOpcode::kConvert:
    case HloOpcode::kBitcast:
    case HloOpcode::kCopy:
      return operand(0);
    case HloOpcode::kNot: {
      auto a = operand(0);
      if (!a) return std::nullopt;
      return s.element_type == PrimitiveType::PRED ? static_cast<int64_t>(*a == 0) : ~*a;
    }
    case HloOpcode::kNegate: {
      auto a = operand(0);
      if (!a) return std::nullopt;
      return -*a;
    }
    case HloOpcode::kSelect: {
      auto p = operand(0);
      if (!p) return std::nullopt;
      return *p != 0 ? operand(1) : operand(2);
    }
    case HloOpcode::kDynamicSlice: {
      if (v->operand_count() != 2) return std::nullopt;
      const HloInstruction* table = v->operand(0);
      if (table->opcode() != HloOpcode::kConstant || !table->literal || table->literal->elided ||
          table->shape().rank() != 1 || table->shape().dims[0] < 1) {
        return std::nullopt;
      }
      auto idx = operand(1);
      if (!idx) return std::nullopt;
      // XLA clamps dynamic-slice starts into the valid range.
      int64_t i = std::clamp<int64_t>(*idx, 0, table->shape().dims[0] - 1);
      return table->literal->GetAsInt(i);
    }
    default:
      break;
  }
  if (v->operand_count() != 2) return std::nullopt;
  auto a = operand(0);
  if (!a) return std::nullopt;
  auto b = operand(1);
  if (!b) return std::nullopt;
  switch (v->opcode()) {
    case HloOpcode::kAdd: return *a + *b;
    case HloOpcode::kSubtract: return *a - *b;
    case HloOpcode::kMultiply: return *a * *b;
    case HloOpcode::kDivide:
      if (*b == 0) return std::nullopt;
      return *a / *b;
    case HloOpcode::kRemainder:
      if (*b == 0) return std::nullopt;
      return *a % *b;
    case HloOpcode::kMaximum: return std::max(*a, *b);
    case HloOpcode::kMinimum: return std::min(*a, *b);
    case HloOpcode::kAnd: return *a & *b;
    case HloOpcode::kOr: return *a | *b;
    case HloOpcode::kCompare: {
      if (!v->comparison_direction) return std::nullopt;
      switch (*v->comparison_direction) {
        case ComparisonDirection::kEq: return static_cast<int64_t>(*a == *b);
        case ComparisonDirection::kNe: return static_cast<int64_t>(*a != *b);
        case ComparisonDirection::kLt: return static_cast<int64_t>(*a < *b);
        case ComparisonDirection::kLe: return static_cast<int64_t>(*a <= *b);
        case ComparisonDirection::kGt: return static_cast<int64_t>(*a > *b);
        case ComparisonDirection::kGe: return static_cast<int64_t>(*a >= *b);
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

bool IsGteOf(const HloInstruction* v, const HloInstruction* param, int64_t index) {
  return v->opcode() == HloOpcode::kGetTupleElement && v->operand(0) == param &&
         v->tuple_index == index;
}

// Strips what fp8-gemm-rewriter puts between a loop value and a GEMM custom call's operand
// (canonicalising reshape/bitcast/transpose/copy, zero pad, convert) and a dequantization.
HloInstruction* StripGemmOperand(HloInstruction* v) {
  for (int guard = 0; guard < 64 && v != nullptr; ++guard) {
    if (auto m = MatchDequantize(v)) {
      v = m->q;
      continue;
    }
    switch (v->opcode()) {
      case HloOpcode::kReshape:
      case HloOpcode::kBitcast:
      case HloOpcode::kTranspose:
      case HloOpcode::kCopy:
      case HloOpcode::kConvert:
      case HloOpcode::kPad:
        if (v->operand_count() >= 1) {
          v = v->operand(0);
          continue;
        }
        return v;
      default:
        return v;
    }
  }
  return v;
}

// Strips what rebuilds a dot operand from a loop value (the decomposer's FP8 layouts): a
// dequantization, a convert, a multiply/divide by a broadcast (per-row or per-channel scales).
HloInstruction* StripRebuild(HloInstruction* v) {
  for (int guard = 0; guard < 16 && v != nullptr; ++guard) {
    if (auto m = MatchDequantize(v)) {
      v = m->q;
      continue;
    }
    if (v->opcode() == HloOpcode::kConvert && v->operand_count() == 1) {
      v = v->operand(0);
      continue;
    }
    if ((v->opcode() == HloOpcode::kMultiply || v->opcode() == HloOpcode::kDivide) &&
        v->operand_count() == 2) {
      if (v->operand(1)->opcode() == HloOpcode::kBroadcast) {
        v = v->operand(0);
        continue;
      }
      if (v->opcode() == HloOpcode::kMultiply && v->operand(0)->opcode() == HloOpcode::kBroadcast) {
        v = v->operand(1);
        continue;
      }
    }
    return v;
  }
  return v;
}

// The dynamic-slice a reduce-scatter loop's dot operand reads: the operand itself (XLA's layout:
// the slice of a dequantization), or under the dequantization of the slice (the decomposer's
// per-row / per-channel FP8 layout), or under a GEMM call's canonicalising ops.
HloInstruction* SlicedOperand(HloInstruction* op, bool gemm_call) {
  if (gemm_call) return StripGemmOperand(op);
  if (op->opcode() == HloOpcode::kDynamicSlice) return op;
  return StripRebuild(op);
}

// The loop value a dot (or GEMM custom call) operand reads, before dequantization.
HloInstruction* OperandCore(HloInstruction* op, bool gemm_call) {
  return gemm_call ? StripGemmOperand(op) : StripRebuild(op);
}

// All pairs map a partition to itself.
bool IsIdentityPairs(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  if (pairs.empty()) return false;
  std::set<int64_t> src;
  for (const auto& [s, t] : pairs) {
    if (s != t || s < 0 || !src.insert(s).second) return false;
  }
  return true;
}

// A permutation without fixed points: every source and every target at most once.
bool IsRingPairs(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  if (pairs.empty()) return false;
  std::set<int64_t> src, dst;
  for (const auto& [s, t] : pairs) {
    if (s == t || s < 0 || t < 0) return false;
    if (!src.insert(s).second || !dst.insert(t).second) return false;
  }
  return true;
}

HloInstruction* MergeUser(HloInstruction* dot) {
  if (dot->opcode() == HloOpcode::kCustomCall) {
    if (AccumulatesThroughC(*dot)) return dot;
    // gte(call, 0), then the rewriter's unpad slice / reshape / convert / bitcast.
    HloInstruction* v = nullptr;
    for (HloInstruction* u : dot->users()) {
      if (u->opcode() == HloOpcode::kGetTupleElement && u->tuple_index == 0) {
        if (v != nullptr) return nullptr;
        v = u;
      }
    }
    if (v == nullptr && dot->shape().IsArray()) v = dot;
    for (int guard = 0; v != nullptr && guard < 16; ++guard) {
      if (v->user_count() != 1) return nullptr;
      HloInstruction* u = v->users()[0];
      switch (u->opcode()) {
        case HloOpcode::kSlice:
        case HloOpcode::kReshape:
        case HloOpcode::kConvert:
        case HloOpcode::kBitcast:
          v = u;
          continue;
        case HloOpcode::kDynamicUpdateSlice:
          return u->operand_count() >= 2 && u->operand(1) == v ? u : nullptr;
        case HloOpcode::kAdd:
          return u;
        default:
          return nullptr;
      }
    }
    return nullptr;
  }
  if (dot->user_count() != 1) return nullptr;
  HloInstruction* u = dot->users()[0];
  if (u->opcode() == HloOpcode::kDynamicUpdateSlice && u->operand_count() >= 2 &&
      u->operand(1) == dot) {
    return u;
  }
  if (u->opcode() == HloOpcode::kAdd) return u;
  return nullptr;
}

}  // namespace

std::optional<int64_t> EvaluateScalar(const HloInstruction* v, const ScalarEnv& env) {
  return Eval(v, env, 0);
}

HloInstruction* TraceRing(HloInstruction* v, const HloInstruction* param,
                          std::vector<RingStep>* steps) {
  std::vector<RingStep> rev;
  for (int guard = 0; guard < 100000 && v != nullptr; ++guard) {
    if (v->opcode() == HloOpcode::kGetTupleElement && v->operand(0) == param) {
      if (steps) steps->assign(rev.rbegin(), rev.rend());
      return v;
    }
    if (v->opcode() == HloOpcode::kCollectivePermute && v->operand_count() == 1) {
      rev.push_back({v, v, nullptr});
      v = v->operand(0);
      continue;
    }
    if (v->opcode() == HloOpcode::kConditional && v->conditional_is_pred &&
        v->operand_count() == 3 && v->operand(1) == v->operand(2) &&
        v->called_computations().size() == 2) {
      HloComputation* t = v->called_computations()[0];
      HloComputation* f = v->called_computations()[1];
      if (t->num_parameters() != 1 || f->num_parameters() != 1) return nullptr;
      HloInstruction* troot = t->root();
      if (troot == nullptr || troot->opcode() != HloOpcode::kCollectivePermute ||
          troot->operand(0) != t->parameter(0) || f->root() != f->parameter(0)) {
        return nullptr;
      }
      rev.push_back({v, troot, v->operand(0)});
      v = v->operand(1);
      continue;
    }
    return nullptr;
  }
  return nullptr;
}

std::optional<std::vector<int64_t>> ApplyRingSteps(const std::vector<RingStep>& steps,
                                                   std::vector<int64_t> holder, ScalarEnv env) {
  const int64_t n = static_cast<int64_t>(holder.size());
  for (const RingStep& st : steps) {
    bool apply = true;
    if (st.predicate != nullptr) {
      std::optional<int64_t> first;
      for (int64_t p = 0; p < n; ++p) {
        env.partition = p;
        auto v = EvaluateScalar(st.predicate, env);
        if (!v) return std::nullopt;
        if (first && (*v != 0) != (*first != 0)) return std::nullopt;
        first = v;
      }
      apply = first.has_value() && *first != 0;
    }
    if (!apply) continue;
    std::vector<int64_t> next(holder.size(), -1);
    for (const auto& [s, t] : st.permute->source_target_pairs()) {
      if (s >= 0 && s < n && t >= 0 && t < n) next[t] = holder[s];
    }
    holder = std::move(next);
  }
  return holder;
}

// Index of the loop-state element that the condition's root compares with a constant
// (`compare(get-tuple-element(param, i), constant)` in either operand order), or -1.
static int64_t FindCounterIndex(const HloComputation* condition) {
  const HloInstruction* root = condition->root();
  if (root == nullptr || root->opcode() != HloOpcode::kCompare || condition->num_parameters() != 1) {
    return -1;
  }
  for (const HloInstruction* op : root->operands()) {
    if (op->opcode() == HloOpcode::kGetTupleElement && op->operand(0) == condition->parameter(0)) {
      return op->tuple_index;
    }
  }
  return -1;
}

std::optional<WindowedLoop> MatchWindowedLoop(HloInstruction* w, std::string* why_not,
                                              const WindowedLoopMatchOptions& options) {
  auto fail = [&](std::string msg) -> std::optional<WindowedLoop> {
    if (why_not) *why_not = std::move(msg);
    return std::nullopt;
  };
  if (w == nullptr || w->opcode() != HloOpcode::kWhile) return fail("not a while");
  if (w->called_computations().size() < 2 || w->operand_count() != 1) {
    return fail("while without condition and body");
  }
  WindowedLoop L;
  L.while_instr = w;
  L.init = w->operand(0);
  L.condition = w->while_condition();
  L.body = w->while_body();
  const Shape& st = w->shape();
  if (!st.IsTuple() || st.tuple_shapes.size() < 4) {
    return fail("loop state is not a tuple of at least 4 elements (lhs, rhs, out, [extra,] counter)");
  }
  const int64_t n_elems = static_cast<int64_t>(st.tuple_shapes.size());
  if (L.condition->num_parameters() != 1) {
    return fail("body or condition does not take exactly one parameter");
  }
  // The counter is the tuple element the condition compares (index 4 in XLA's layout, 3 once a
  // cleanup pass removed the unused `extra` buffer).
  L.counter_index = FindCounterIndex(L.condition);
  if (L.counter_index < 0 || L.counter_index >= n_elems) L.counter_index = 4;
  if (L.counter_index >= n_elems) {
    return fail("the loop condition does not compare a tuple element (the loop counter)");
  }
  const int64_t ci = L.counter_index;
  const Shape& cs = st.tuple_shapes[static_cast<size_t>(ci)];
  if (!cs.IsArray() || cs.rank() != 0 || !IsInteger(cs.element_type)) {
    return fail(absl::StrCat("tuple element ", ci, " is not a scalar integer loop counter"));
  }
  if (L.body->num_parameters() != 1 || L.condition->num_parameters() != 1) {
    return fail("body or condition does not take exactly one parameter");
  }
  HloInstruction* P = L.body->parameter(0);
  HloInstruction* R = L.body->root();
  if (R == nullptr || R->opcode() != HloOpcode::kTuple || R->operand_count() != n_elems) {
    return fail("body root is not a tuple of the loop state");
  }
  for (HloInstruction* u : P->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) {
      return fail(absl::StrCat("body parameter is read by '", u->name(),
                               "', not only by get-tuple-element"));
    }
  }
  // The handler renames unrolled bodies `unrolled_<name>`, as XLA does.
  absl::string_view body_name = L.body->name();
  absl::ConsumePrefix(&body_name, "unrolled_");
  if (absl::StartsWith(body_name, "windowed_dot_general_body_ag")) {
    L.name_hint = "windowed_dot_general_body_ag";
  } else if (absl::StartsWith(body_name, "windowed_dot_general_body_rs")) {
    L.name_hint = "windowed_dot_general_body_rs";
  }

  // Trip count: simulate the counter.
  if (L.init->opcode() != HloOpcode::kTuple || L.init->operand_count() != n_elems) {
    return fail("loop init is not a tuple");
  }
  auto k0 = EvaluateScalar(L.init->operand(ci), ScalarEnv{});
  if (!k0) return fail("initial loop counter is not a constant");
  L.init_counter = *k0;
  {
    const HloInstruction* cp = L.condition->parameter(0);
    int64_t k = *k0, trips = 0;
    for (;; ++trips) {
      if (trips > kMaxTrips) return fail("trip count unknown or above 4096");
      auto more = EvaluateScalar(L.condition->root(), ScalarEnv{cp, ci, k, 0});
      if (!more) return fail("loop condition is not a comparison of the counter with constants");
      if (*more == 0) break;
      auto next = EvaluateScalar(R->operand(ci), ScalarEnv{P, ci, k, 0});
      if (!next) return fail("loop counter is not incremented by a constant");
      k = *next;
    }
    L.trip_count = trips;
  }
  if (L.trip_count == 0) return fail("loop runs zero times");

  // Dots, permutes, conditionals of the body.
  std::vector<HloInstruction*> dots;
  for (HloInstruction* i : L.body->MakeInstructionPostOrder()) {
    switch (i->opcode()) {
      case HloOpcode::kDot: dots.push_back(i); break;
      case HloOpcode::kCustomCall:
        if (options.gemm_custom_calls && IsCublasGemmCall(*i) && i->operand_count() >= 2) dots.push_back(i);
        break;
      case HloOpcode::kCollectivePermute: L.permutes.push_back(i); break;
      case HloOpcode::kConditional:
        L.conditionals.push_back(i);
        for (HloComputation* c : i->called_computations()) {
          for (HloInstruction* j : c->instructions()) {
            if (j->opcode() == HloOpcode::kCollectivePermute) L.permutes.push_back(j);
          }
        }
        break;
      default: break;
    }
  }
  if (dots.empty()) return fail("body has no dot");
  if (L.permutes.empty()) return fail("body has no collective-permute ring");
  // XLA's unrolled reduce-scatter layout on a ring of 2 shifts its accumulators by -2 = 0: every
  // permute of the body is the identity. Accepted below for reduce-scatter loops of 2 blocks only.
  L.identity_permutes = std::all_of(L.permutes.begin(), L.permutes.end(), [](HloInstruction* cp) {
    return IsIdentityPairs(cp->source_target_pairs());
  });
  for (HloInstruction* cp : L.permutes) {
    if (!L.identity_permutes && !IsRingPairs(cp->source_target_pairs())) {
      return fail(absl::StrCat("collective-permute '", cp->name(),
                               "' does not send around a ring (source_target_pairs)"));
    }
  }
  L.source_target_pairs = L.permutes[0]->source_target_pairs();

  // All-gather: elements 0/1, one circulates, the other is passed through.
  std::string ag_why;
  bool is_ag = false;
  for (int64_t wi = 0; wi < 2 && !is_ag && !L.identity_permutes; ++wi) {
    std::vector<RingStep> root_ring;
    HloInstruction* g = TraceRing(R->operand(wi), P, &root_ring);
    if (g == nullptr || g->tuple_index != wi) continue;
    if (!IsGteOf(R->operand(1 - wi), P, 1 - wi)) continue;
    std::vector<WindowedDot> wdots;
    bool any_ring = !root_ring.empty();
    bool ok = true;
    for (HloInstruction* d : dots) {
      WindowedDot wd;
      wd.dot = d;
      std::vector<RingStep> ring;
      HloInstruction* win = OperandCore(d->operand(wi), d->opcode() == HloOpcode::kCustomCall);
      HloInstruction* g2 = TraceRing(win, P, &ring);
      if (g2 == nullptr || g2->tuple_index != wi) {
        ag_why = absl::StrCat("dot '", d->name(), "' does not read the windowed operand ", wi,
                              " through the collective-permute ring");
        ok = false;
        break;
      }
      wd.window = win;
      wd.ring = std::move(ring);
      any_ring = any_ring || !wd.ring.empty();
      wd.merge = MergeUser(d);
      wdots.push_back(std::move(wd));
    }
    if (!ok) continue;
    if (!any_ring) {
      ag_why = "no dot reads a permuted shard";
      continue;
    }
    is_ag = true;
    L.kind = WindowedLoopKind::kAllGather;
    L.windowed_operand = wi;
    L.root_ring = std::move(root_ring);
    L.dots = std::move(wdots);
  }

  if (!is_ag) {
    // Reduce-scatter: operands passed through, dots on dynamic-slice(op j) x op (1-j).
    if (!IsGteOf(R->operand(0), P, 0) || !IsGteOf(R->operand(1), P, 1)) {
      return fail(ag_why.empty()
                      ? "neither operand circulates through a collective-permute ring (all-gather) "
                        "nor are both passed through (reduce-scatter)"
                      : ag_why);
    }
    int64_t sliced = -1;
    bool both_sliced = false;
    for (HloInstruction* d : dots) {
      const bool call = d->opcode() == HloOpcode::kCustomCall;
      int64_t found = -1;
      HloInstruction* other_slice = nullptr;
      for (int64_t j = 0; j < 2; ++j) {
        HloInstruction* a = SlicedOperand(d->operand(j), call);
        if (a->opcode() != HloOpcode::kDynamicSlice) continue;
        HloInstruction* base = StripRebuild(a->operand(0));
        HloInstruction* other = OperandCore(d->operand(1 - j), call);
        if (IsGteOf(base, P, j) && IsGteOf(other, P, 1 - j)) {
          found = j;
          break;
        }
        // Batch dim: both operands are sliced (on their batch dims).
        if (j == 0 && IsGteOf(base, P, 0) && other->opcode() == HloOpcode::kDynamicSlice &&
            IsGteOf(StripRebuild(other->operand(0)), P, 1)) {
          found = 0;
          other_slice = StripRebuild(other->operand(0));
          break;
        }
      }
      if (found >= 0 && !L.dots.empty() && (other_slice != nullptr) != both_sliced) {
        return fail("dots slice different operands");
      }
      both_sliced = other_slice != nullptr;
      if (found < 0) {
        return fail(absl::StrCat("dot '", d->name(),
                                 "' does not read a dynamic-slice of one loop operand and the "
                                 "other operand (reduce-scatter pattern)"));
      }
      if (sliced >= 0 && sliced != found) {
        return fail("dots slice different operands");
      }
      sliced = found;
      WindowedDot wd;
      wd.dot = d;
      HloInstruction* sl = SlicedOperand(d->operand(found), call);
      wd.window = StripRebuild(sl->operand(0));
      wd.other_slice = other_slice;
      wd.merge = MergeUser(d);
      if (wd.merge == nullptr ||
          (wd.merge->opcode() != HloOpcode::kAdd && wd.merge != d)) {
        return fail(absl::StrCat("dot '", d->name(), "' is not accumulated with add"));
      }
      L.dots.push_back(std::move(wd));
    }
    L.kind = WindowedLoopKind::kReduceScatter;
    L.windowed_operand = sliced;
    L.rs_both_sliced = both_sliced;
    if (L.identity_permutes && L.trip_count * static_cast<int64_t>(L.dots.size()) != 2) {
      return fail("the body's collective-permutes send every partition's value to itself "
                  "(identity source_target_pairs) on a ring of more than 2 blocks");
    }
  }

  // Layout.
  auto attr = w->GetFrontendAttribute(kTripCountOneAttr);
  const int64_t per_trip = static_cast<int64_t>(L.dots.size());
  if (attr && *attr == "true" && L.trip_count == 1) {
    L.layout = WindowedLoopLayout::kFullyUnrolled;
  } else if (!L.conditionals.empty() && per_trip == 1) {
    L.layout = WindowedLoopLayout::kRolled;
  } else if (L.conditionals.empty() && per_trip == 2) {
    L.layout = WindowedLoopLayout::kUnrolledByTwo;
  } else {
    L.layout = WindowedLoopLayout::kOther;
  }
  // Blocks visited per trip: one per dot, except when several dots read the same window (every
  // consumer of an all-gather computed in the ring: windowed-einsum-consumers-in-ring).
  int64_t steps = per_trip;
  if (L.kind == WindowedLoopKind::kAllGather) {
    std::vector<const HloInstruction*> windows;
    for (const WindowedDot& wd : L.dots) {
      if (std::find(windows.begin(), windows.end(), wd.window) == windows.end()) {
        windows.push_back(wd.window);
      }
    }
    steps = static_cast<int64_t>(windows.size());
  }
  L.ring_size = L.trip_count * steps;

  // Handler layout: FP8 operands with their scales, cache element.
  const PrimitiveType t0 = st.tuple_shapes[0].element_type, t1 = st.tuple_shapes[1].element_type;
  L.fp8_operands = IsFp8(t0) && IsFp8(t1);
  if (L.fp8_operands) {
    for (const WindowedDot& wd : L.dots) {
      for (int64_t j = 0; j < 2; ++j) {
        HloInstruction* a = wd.dot->operand(j);
        if (a->opcode() == HloOpcode::kDynamicSlice) a = a->operand(0);
        if (auto m = MatchDequantize(a)) {
          if (m->scale->opcode() == HloOpcode::kGetTupleElement && m->scale->operand(0) == P &&
              m->scale->tuple_index > ci) {
            L.scale_index[j] = m->scale->tuple_index;
          }
        }
      }
    }
  }
  if (L.kind == WindowedLoopKind::kAllGather) {
    for (int64_t i = ci + 1; i < n_elems; ++i) {
      if (i == L.scale_index[0] || i == L.scale_index[1]) continue;
      HloInstruction* v = R->operand(i);
      if (v->opcode() != HloOpcode::kDynamicUpdateSlice) continue;
      // A cache stores shards; an element whose updates are GEMM results is an output (e.g. a
      // consumer computed in the ring by windowed-einsum-consumers-in-ring).
      bool gemm_results = false;
      while (v->opcode() == HloOpcode::kDynamicUpdateSlice) {
        const HloInstruction* u = v->operand(1);
        for (int guard = 0; guard < 8; ++guard) {
          if (u->opcode() == HloOpcode::kGetTupleElement || u->opcode() == HloOpcode::kBitcast ||
              u->opcode() == HloOpcode::kReshape || u->opcode() == HloOpcode::kSlice ||
              u->opcode() == HloOpcode::kConvert) {
            u = u->operand(0);
            continue;
          }
          break;
        }
        gemm_results |= u->opcode() == HloOpcode::kDot || (IsCublasGemmCall(*u) && u->operand_count() >= 2);
        v = v->operand(0);
      }
      if (gemm_results) continue;
      if (IsGteOf(v, P, i)) {
        L.cache_index = i;
        break;
      }
    }
  }
  return L;
}

}  // namespace weave
