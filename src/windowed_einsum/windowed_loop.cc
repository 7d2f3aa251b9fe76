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

// What fp8-gemm-rewriter puts between a loop value and a GEMM custom call's operand
// (canonicalising reshape/bitcast/transpose/copy, zero pad, convert) and a dequantization.
HloInstruction* StripGemmOperand(HloInstruction* v) { return StripDequantizeAndViews(v, true); }

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

namespace {

// Index of the loop-state element that the condition's root compares with a constant
// (`compare(get-tuple-element(param, i), constant)` in either operand order), or -1.
int64_t FindCounterIndex(const HloComputation* condition) {
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

// The steps of MatchWindowedLoop, in order. Each fills its part of `loop` from the body's
// parameter and root tuple, and returns the first condition that failed (empty when it held).
class LoopMatcher {
 public:
  LoopMatcher(const HloInstruction& while_instr, const WindowedLoopMatchOptions& options)
      : while_instr_(while_instr), options_(options) {}

  std::optional<WindowedLoop> Match(std::string* why_not) {
    std::string why = MatchFrame();
    if (why.empty()) why = CountTrips();
    if (why.empty()) why = CollectBodyOps();
    if (why.empty()) why = MatchDots();
    if (!why.empty()) {
      if (why_not) *why_not = std::move(why);
      return std::nullopt;
    }
    ClassifyLayout();
    FindHandlerElements();
    return std::move(loop_);
  }

 private:
  // The loop state, its counter, the body's parameter and root tuple, the body name hint.
  std::string MatchFrame();
  // Simulates the counter from its initial constant through the condition.
  std::string CountTrips();
  // The body's dots (and GEMM calls), collective-permutes and conditionals; the permutes must
  // send around a ring.
  std::string CollectBodyOps();
  // All-gather first (one operand circulates), then reduce-scatter (both passed through).
  std::string MatchDots();
  // The AG form with windowed operand `operand`: true with `loop_` filled when it matches;
  // otherwise *why says why, left empty when `operand` does not circulate at all.
  bool MatchAllGather(int64_t operand, std::string* why);
  std::string MatchReduceScatter(const std::string& ag_why);
  void ClassifyLayout();
  // The handler's layout: FP8 operands with their scale elements, the activation cache element.
  void FindHandlerElements();
  void FindFp8Scales();
  void FindCache();

  const HloInstruction& while_instr_;
  const WindowedLoopMatchOptions& options_;
  WindowedLoop loop_;
  HloInstruction* param_ = nullptr;  // the body's parameter
  HloInstruction* root_ = nullptr;   // the body's root tuple
  int64_t counter_ = 4;              // tuple index of the loop counter
  int64_t state_size_ = 0;           // elements of the loop state
  std::vector<HloInstruction*> gemms_;  // dots (and GEMM calls) of the body, in post order
};

std::string LoopMatcher::MatchFrame() {
  const HloInstruction& w = while_instr_;
  if (w.opcode() != HloOpcode::kWhile) return "not a while";
  if (w.called_computations().size() < 2 || w.operand_count() != 1) {
    return "while without condition and body";
  }
  loop_.while_instr = &w;
  loop_.init = w.operand(0);
  loop_.condition = w.while_condition();
  loop_.body = w.while_body();
  const Shape& state = w.shape();
  if (!state.IsTuple() || state.tuple_shapes.size() < 4) {
    return "loop state is not a tuple of at least 4 elements (lhs, rhs, out, [extra,] counter)";
  }
  state_size_ = static_cast<int64_t>(state.tuple_shapes.size());
  if (loop_.condition->num_parameters() != 1) {
    return "body or condition does not take exactly one parameter";
  }
  // The counter is the tuple element the condition compares (index 4 in XLA's layout, 3 once a
  // cleanup pass removed the unused `extra` buffer).
  loop_.counter_index = FindCounterIndex(loop_.condition);
  if (loop_.counter_index < 0 || loop_.counter_index >= state_size_) loop_.counter_index = 4;
  if (loop_.counter_index >= state_size_) {
    return "the loop condition does not compare a tuple element (the loop counter)";
  }
  counter_ = loop_.counter_index;
  const Shape& counter_shape = state.tuple_shapes[static_cast<size_t>(counter_)];
  if (!counter_shape.IsArray() || counter_shape.rank() != 0 ||
      !IsInteger(counter_shape.element_type)) {
    return absl::StrCat("tuple element ", counter_, " is not a scalar integer loop counter");
  }
  if (loop_.body->num_parameters() != 1) {
    return "body or condition does not take exactly one parameter";
  }
  param_ = loop_.body->parameter(0);
  root_ = loop_.body->root();
  if (root_ == nullptr || root_->opcode() != HloOpcode::kTuple ||
      root_->operand_count() != state_size_) {
    return "body root is not a tuple of the loop state";
  }
  for (HloInstruction* u : param_->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) {
      return absl::StrCat("body parameter is read by '", u->name(),
                          "', not only by get-tuple-element");
    }
  }
  // The handler renames unrolled bodies `unrolled_<name>`, as XLA does.
  absl::string_view body_name = loop_.body->name();
  absl::ConsumePrefix(&body_name, "unrolled_");
  if (absl::StartsWith(body_name, "windowed_dot_general_body_ag")) {
    loop_.name_hint = "windowed_dot_general_body_ag";
  } else if (absl::StartsWith(body_name, "windowed_dot_general_body_rs")) {
    loop_.name_hint = "windowed_dot_general_body_rs";
  }
  return "";
}

std::string LoopMatcher::CountTrips() {
  if (loop_.init->opcode() != HloOpcode::kTuple || loop_.init->operand_count() != state_size_) {
    return "loop init is not a tuple";
  }
  std::optional<int64_t> first = EvaluateScalar(loop_.init->operand(counter_), ScalarEnv{});
  if (!first) return "initial loop counter is not a constant";
  loop_.init_counter = *first;
  const HloInstruction* condition_param = loop_.condition->parameter(0);
  int64_t counter = *first, trips = 0;
  for (;; ++trips) {
    if (trips > kMaxTrips) return "trip count unknown or above 4096";
    std::optional<int64_t> more =
        EvaluateScalar(loop_.condition->root(), ScalarEnv{condition_param, counter_, counter, 0});
    if (!more) return "loop condition is not a comparison of the counter with constants";
    if (*more == 0) break;
    std::optional<int64_t> next =
        EvaluateScalar(root_->operand(counter_), ScalarEnv{param_, counter_, counter, 0});
    if (!next) return "loop counter is not incremented by a constant";
    counter = *next;
  }
  loop_.trip_count = trips;
  if (loop_.trip_count == 0) return "loop runs zero times";
  return "";
}

std::string LoopMatcher::CollectBodyOps() {
  for (HloInstruction* i : loop_.body->MakeInstructionPostOrder()) {
    switch (i->opcode()) {
      case HloOpcode::kDot: gemms_.push_back(i); break;
      case HloOpcode::kCustomCall:
        if (options_.gemm_custom_calls && IsCublasGemmCall(*i) && i->operand_count() >= 2) {
          gemms_.push_back(i);
        }
        break;
      case HloOpcode::kCollectivePermute: loop_.permutes.push_back(i); break;
      case HloOpcode::kConditional:
        loop_.conditionals.push_back(i);
        for (HloComputation* c : i->called_computations()) {
          for (HloInstruction* j : c->instructions()) {
            if (j->opcode() == HloOpcode::kCollectivePermute) loop_.permutes.push_back(j);
          }
        }
        break;
      default: break;
    }
  }
  if (gemms_.empty()) return "body has no dot";
  if (loop_.permutes.empty()) return "body has no collective-permute ring";
  // XLA's unrolled reduce-scatter layout on a ring of 2 shifts its accumulators by -2 = 0: every
  // permute of the body is the identity. Accepted for reduce-scatter loops of 2 blocks only.
  loop_.identity_permutes =
      std::all_of(loop_.permutes.begin(), loop_.permutes.end(), [](HloInstruction* permute) {
        return IsIdentityPairs(permute->source_target_pairs());
      });
  for (HloInstruction* permute : loop_.permutes) {
    if (!loop_.identity_permutes && !IsRingPairs(permute->source_target_pairs())) {
      return absl::StrCat("collective-permute '", permute->name(),
                          "' does not send around a ring (source_target_pairs)");
    }
  }
  loop_.source_target_pairs = loop_.permutes[0]->source_target_pairs();
  return "";
}

std::string LoopMatcher::MatchDots() {
  std::string ag_why;
  if (!loop_.identity_permutes) {
    for (int64_t operand = 0; operand < 2; ++operand) {
      std::string why;
      if (MatchAllGather(operand, &why)) return "";
      // The reason reported is that of the last operand tried that circulates at all.
      if (!why.empty()) ag_why = std::move(why);
    }
  }
  return MatchReduceScatter(ag_why);
}

bool LoopMatcher::MatchAllGather(int64_t operand, std::string* why) {
  // Elements 0/1: `operand` circulates through the ring, the other one is passed through.
  std::vector<RingStep> root_ring;
  HloInstruction* start = TraceRing(root_->operand(operand), param_, &root_ring);
  if (start == nullptr || start->tuple_index != operand) return false;
  if (!IsGteOf(root_->operand(1 - operand), param_, 1 - operand)) return false;
  std::vector<WindowedDot> dots;
  bool any_ring = !root_ring.empty();
  for (HloInstruction* gemm : gemms_) {
    WindowedDot wd;
    wd.dot = gemm;
    HloInstruction* window =
        OperandCore(gemm->operand(operand), gemm->opcode() == HloOpcode::kCustomCall);
    HloInstruction* window_start = TraceRing(window, param_, &wd.ring);
    if (window_start == nullptr || window_start->tuple_index != operand) {
      *why = absl::StrCat("dot '", gemm->name(), "' does not read the windowed operand ", operand,
                          " through the collective-permute ring");
      return false;
    }
    wd.window = window;
    any_ring = any_ring || !wd.ring.empty();
    wd.merge = MergeUser(gemm);
    dots.push_back(std::move(wd));
  }
  if (!any_ring) {
    *why = "no dot reads a permuted shard";
    return false;
  }
  loop_.kind = WindowedLoopKind::kAllGather;
  loop_.windowed_operand = operand;
  loop_.root_ring = std::move(root_ring);
  loop_.dots = std::move(dots);
  return true;
}

std::string LoopMatcher::MatchReduceScatter(const std::string& ag_why) {
  // Operands passed through, dots on dynamic-slice(operand j) x operand (1-j).
  if (!IsGteOf(root_->operand(0), param_, 0) || !IsGteOf(root_->operand(1), param_, 1)) {
    return ag_why.empty()
               ? "neither operand circulates through a collective-permute ring (all-gather) "
                 "nor are both passed through (reduce-scatter)"
               : ag_why;
  }
  int64_t sliced = -1;
  bool both_sliced = false;
  for (HloInstruction* gemm : gemms_) {
    const bool call = gemm->opcode() == HloOpcode::kCustomCall;
    int64_t found = -1;
    HloInstruction* other_slice = nullptr;
    for (int64_t j = 0; j < 2; ++j) {
      HloInstruction* slice = SlicedOperand(gemm->operand(j), call);
      if (slice->opcode() != HloOpcode::kDynamicSlice) continue;
      HloInstruction* base = StripRebuild(slice->operand(0));
      HloInstruction* other = OperandCore(gemm->operand(1 - j), call);
      if (IsGteOf(base, param_, j) && IsGteOf(other, param_, 1 - j)) {
        found = j;
        break;
      }
      // Batch dim: both operands are sliced (on their batch dims).
      if (j == 0 && IsGteOf(base, param_, 0) && other->opcode() == HloOpcode::kDynamicSlice &&
          IsGteOf(StripRebuild(other->operand(0)), param_, 1)) {
        found = 0;
        other_slice = StripRebuild(other->operand(0));
        break;
      }
    }
    if (found >= 0 && !loop_.dots.empty() && (other_slice != nullptr) != both_sliced) {
      return "dots slice different operands";
    }
    both_sliced = other_slice != nullptr;
    if (found < 0) {
      return absl::StrCat("dot '", gemm->name(),
                          "' does not read a dynamic-slice of one loop operand and the "
                          "other operand (reduce-scatter pattern)");
    }
    if (sliced >= 0 && sliced != found) return "dots slice different operands";
    sliced = found;
    WindowedDot wd;
    wd.dot = gemm;
    wd.window = StripRebuild(SlicedOperand(gemm->operand(found), call)->operand(0));
    wd.other_slice = other_slice;
    wd.merge = MergeUser(gemm);
    if (wd.merge == nullptr || (wd.merge->opcode() != HloOpcode::kAdd && wd.merge != gemm)) {
      return absl::StrCat("dot '", gemm->name(), "' is not accumulated with add");
    }
    loop_.dots.push_back(std::move(wd));
  }
  loop_.kind = WindowedLoopKind::kReduceScatter;
  loop_.windowed_operand = sliced;
  loop_.rs_both_sliced = both_sliced;
  if (loop_.identity_permutes && loop_.trip_count * static_cast<int64_t>(loop_.dots.size()) != 2) {
    return "the body's collective-permutes send every partition's value to itself "
           "(identity source_target_pairs) on a ring of more than 2 blocks";
  }
  return "";
}

void LoopMatcher::ClassifyLayout() {
  std::optional<std::string> attr = while_instr_.GetFrontendAttribute(kTripCountOneAttr);
  const int64_t per_trip = static_cast<int64_t>(loop_.dots.size());
  if (attr && *attr == "true" && loop_.trip_count == 1) {
    loop_.layout = WindowedLoopLayout::kFullyUnrolled;
  } else if (!loop_.conditionals.empty() && per_trip == 1) {
    loop_.layout = WindowedLoopLayout::kRolled;
  } else if (loop_.conditionals.empty() && per_trip == 2) {
    loop_.layout = WindowedLoopLayout::kUnrolledByTwo;
  } else {
    loop_.layout = WindowedLoopLayout::kOther;
  }
  // Blocks visited per trip: one per dot, except when several dots read the same window (every
  // consumer of an all-gather computed in the ring: windowed-einsum-consumers-in-ring).
  int64_t steps = per_trip;
  if (loop_.kind == WindowedLoopKind::kAllGather) {
    std::vector<const HloInstruction*> windows;
    for (const WindowedDot& wd : loop_.dots) {
      if (std::find(windows.begin(), windows.end(), wd.window) == windows.end()) {
        windows.push_back(wd.window);
      }
    }
    steps = static_cast<int64_t>(windows.size());
  }
  loop_.ring_size = loop_.trip_count * steps;
}

void LoopMatcher::FindHandlerElements() {
  const Shape& state = while_instr_.shape();
  loop_.fp8_operands =
      IsFp8(state.tuple_shapes[0].element_type) && IsFp8(state.tuple_shapes[1].element_type);
  if (loop_.fp8_operands) FindFp8Scales();
  if (loop_.kind == WindowedLoopKind::kAllGather) FindCache();
}

void LoopMatcher::FindFp8Scales() {
  for (const WindowedDot& wd : loop_.dots) {
    for (int64_t j = 0; j < 2; ++j) {
      HloInstruction* operand = wd.dot->operand(j);
      if (operand->opcode() == HloOpcode::kDynamicSlice) operand = operand->operand(0);
      if (auto m = MatchDequantize(operand)) {
        if (m->scale->opcode() == HloOpcode::kGetTupleElement && m->scale->operand(0) == param_ &&
            m->scale->tuple_index > counter_) {
          loop_.scale_index[j] = m->scale->tuple_index;
        }
      }
    }
  }
}

// The update a cache's dynamic-update-slice writes, before the views in between.
const HloInstruction* StripUpdateViews(const HloInstruction* update) {
  for (int guard = 0; guard < 8; ++guard) {
    switch (update->opcode()) {
      case HloOpcode::kGetTupleElement:
      case HloOpcode::kBitcast:
      case HloOpcode::kReshape:
      case HloOpcode::kSlice:
      case HloOpcode::kConvert:
        update = update->operand(0);
        continue;
      default:
        return update;
    }
  }
  return update;
}

void LoopMatcher::FindCache() {
  for (int64_t i = counter_ + 1; i < state_size_; ++i) {
    if (i == loop_.scale_index[0] || i == loop_.scale_index[1]) continue;
    HloInstruction* v = root_->operand(i);
    if (v->opcode() != HloOpcode::kDynamicUpdateSlice) continue;
    // A cache stores shards; an element whose updates are GEMM results is an output (e.g. a
    // consumer computed in the ring by windowed-einsum-consumers-in-ring).
    bool gemm_results = false;
    while (v->opcode() == HloOpcode::kDynamicUpdateSlice) {
      const HloInstruction* update = StripUpdateViews(v->operand(1));
      gemm_results |= update->opcode() == HloOpcode::kDot ||
                      (IsCublasGemmCall(*update) && update->operand_count() >= 2);
      v = v->operand(0);
    }
    if (gemm_results) continue;
    if (IsGteOf(v, param_, i)) {
      loop_.cache_index = i;
      return;
    }
  }
}

}  // namespace

std::optional<WindowedLoop> MatchWindowedLoop(const HloInstruction* while_instr,
                                              std::string* why_not,
                                              const WindowedLoopMatchOptions& options) {
  if (while_instr == nullptr) {
    if (why_not) *why_not = "not a while";
    return std::nullopt;
  }
  return LoopMatcher(*while_instr, options).Match(why_not);
}

}  // namespace weave
