// The output side of an FP8 GEMM (see fp8_gemm_internal.h): the epilogues XLA's GemmRewriter
// folds into the cuBLASLt call (alpha, FP8 output with its d scale, amax), and the reasons for
// those the program writes but that cannot be folded.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/fp8_gemm_internal.h"

namespace weave {
namespace fp8_gemm_internal {
namespace {

// Is `comp` the computation maximum(p0, p1)?
bool IsMaximumComputation(const HloComputation* comp) {
  const HloInstruction* r = comp->root();
  return r != nullptr && r->opcode() == HloOpcode::kMaximum && comp->num_parameters() == 2 &&
         r->operand_count() == 2 &&
         ((r->operand(0) == comp->parameter(0) && r->operand(1) == comp->parameter(1)) ||
          (r->operand(0) == comp->parameter(1) && r->operand(1) == comp->parameter(0)));
}

// reduce(abs(value), init) with a scalar result, a maximum body and a constant init <= 0.
HloInstruction* MatchAmax(HloInstruction* user, HloInstruction* value) {
  if (user->opcode() != HloOpcode::kAbs || user->operand(0) != value || user->user_count() != 1) {
    return nullptr;
  }
  HloInstruction* r = user->users()[0];
  if (r->opcode() != HloOpcode::kReduce || r->operand_count() != 2 || r->operand(0) != user ||
      !r->shape().IsArray() || r->shape().rank() != 0 || r->called_computations().size() != 1 ||
      !IsMaximumComputation(r->to_apply())) {
    return nullptr;
  }
  std::optional<double> init = ScalarConstantValue(r->operand(1));
  if (!init.has_value() || !(*init <= 0)) return nullptr;
  return r;
}

// Matches the FP8-output pattern starting at user `u` of `value`. Fills plan fields on success.
bool MatchFp8Output(HloInstruction* u, HloInstruction* value, OutputPlan* plan) {
  HloInstruction* x = value;
  HloInstruction* d = nullptr;
  bool divide = false;
  if (u->opcode() == HloOpcode::kDivide || u->opcode() == HloOpcode::kMultiply) {
    int64_t other = -1;
    if (u->operand(0) == value) other = 1;
    else if (u->opcode() == HloOpcode::kMultiply && u->operand(1) == value) other = 0;
    if (other < 0 || u->user_count() != 1) return false;
    d = ScalarUnderBroadcast(u->operand(other));
    if (d == nullptr || d->shape().element_type != value->shape().element_type) return false;
    divide = u->opcode() == HloOpcode::kDivide;
    x = u;
    u = u->users()[0];
  }
  if (u->opcode() != HloOpcode::kClamp || u->operand_count() != 3 || u->operand(1) != x ||
      u->user_count() != 1) {
    return false;
  }
  HloInstruction* cvt = u->users()[0];
  if (cvt->opcode() != HloOpcode::kConvert) return false;
  const PrimitiveType t = cvt->shape().element_type;
  const double max = Fp8MaxFinite(t);
  if (max == 0) return false;
  std::optional<double> lo = ScalarConstantValue(ScalarUnderBroadcast(u->operand(0)));
  std::optional<double> hi = ScalarConstantValue(ScalarUnderBroadcast(u->operand(2)));
  if (!lo || !hi || *lo != -max || *hi != max) return false;
  plan->fp8_convert = cvt;
  plan->fp8_type = t;
  plan->d_scale = d;
  plan->d_scale_is_divide = divide;
  return true;
}

// Why the epilogue the program writes after `value` (a GEMM result) was not folded: an FP8 output
// (scaling, clamp to the FP8 range, convert to FP8) or an amax (reduce-max of abs). Empty when
// nothing there looks like one. `fp8_folded` / `amax_folded` say what PlanOutput did fold.
std::vector<std::string> DiagnoseEpilogue(HloInstruction* value, bool fp8_folded,
                                          bool amax_folded) {
  std::vector<std::string> out;
  auto name = [](const HloInstruction* i) { return absl::StrCat("'", i->name(), "'"); };
  bool attempt_fp8 = false, attempt_amax = false;
  std::string fp8_why, amax_why;
  std::vector<std::string> others;
  for (HloInstruction* u : value->users()) {
    HloInstruction* x = value;
    HloInstruction* v = u;
    if ((v->opcode() == HloOpcode::kMultiply || v->opcode() == HloOpcode::kDivide) &&
        v->user_count() == 1 &&
        (v->users()[0]->opcode() == HloOpcode::kClamp ||
         (v->users()[0]->opcode() == HloOpcode::kConvert &&
          IsFp8(v->users()[0]->shape().element_type)))) {
      HloInstruction* other = v->operand(0) == value ? v->operand(1) : v->operand(0);
      attempt_fp8 = true;
      if (ScalarUnderBroadcast(other) == nullptr && fp8_why.empty()) {
        fp8_why = absl::StrCat(name(v), " scales the result by ", name(other),
                               ", not a broadcast scalar (cuBLASLt takes one scalar d scale)");
      }
      x = v;
      v = v->users()[0];
    }
    if (v->opcode() == HloOpcode::kClamp && v->operand_count() == 3 && v->operand(1) == x) {
      attempt_fp8 = true;
      HloInstruction* cvt = v->user_count() == 1 ? v->users()[0] : nullptr;
      if (cvt == nullptr || cvt->opcode() != HloOpcode::kConvert ||
          !IsFp8(cvt->shape().element_type)) {
        if (fp8_why.empty()) {
          fp8_why = absl::StrCat("clamp ", name(v), " is not read by one convert to an FP8 type");
        }
        continue;
      }
      const double max = Fp8MaxFinite(cvt->shape().element_type);
      std::optional<double> lo = ScalarConstantValue(ScalarUnderBroadcast(v->operand(0)));
      std::optional<double> hi = ScalarConstantValue(ScalarUnderBroadcast(v->operand(2)));
      if (fp8_why.empty() && (!lo || !hi)) {
        fp8_why = absl::StrCat("the bounds of clamp ", name(v), " are not constants");
      } else if (fp8_why.empty() && (*lo != -max || *hi != max)) {
        fp8_why = absl::StrCat("clamp ", name(v), " bounds [", *lo, ", ", *hi, "] are not [", -max,
                               ", ", max, "], the ",
                               std::string(PrimitiveTypeName(cvt->shape().element_type)),
                               " range cuBLASLt saturates to");
      } else if (fp8_why.empty() && max == 0) {
        fp8_why = absl::StrCat("convert ", name(cvt), " is to ",
                               std::string(PrimitiveTypeName(cvt->shape().element_type)),
                               ", which cuBLASLt does not write");
      }
      continue;
    }
    if (v->opcode() == HloOpcode::kConvert && IsFp8(v->shape().element_type)) {
      attempt_fp8 = true;
      if (fp8_why.empty()) {
        fp8_why = absl::StrCat("convert ", name(v), " to ",
                               std::string(PrimitiveTypeName(v->shape().element_type)),
                               " is not preceded by a clamp to the FP8 range (XLA's GemmRewriter "
                               "folds clamp + convert only)");
      }
      continue;
    }
    if (v->opcode() == HloOpcode::kAbs && v->operand(0) == value) {
      HloInstruction* r = v->user_count() == 1 ? v->users()[0] : nullptr;
      if (r != nullptr && r->opcode() == HloOpcode::kReduce) {
        attempt_amax = true;
        std::optional<double> init =
            r->operand_count() == 2 ? ScalarConstantValue(r->operand(1)) : std::nullopt;
        if (r->called_computations().size() != 1 || !IsMaximumComputation(r->to_apply())) {
          amax_why = absl::StrCat("reduce ", name(r), " of abs ", name(v), " is not a maximum");
        } else if (!r->shape().IsArray() || r->shape().rank() != 0) {
          amax_why = absl::StrCat("reduce ", name(r), " keeps dims (", r->shape().ToString(false),
                                  "): cuBLASLt writes one scalar amax");
        } else if (!init || !(*init <= 0)) {
          amax_why = absl::StrCat("reduce ", name(r), " starts from a value that is not a "
                                  "constant <= 0");
        }
        continue;
      }
    }
    others.push_back(name(u));
  }
  if (attempt_fp8 && !fp8_folded) {
    if (fp8_why.empty() && !others.empty()) {
      fp8_why = absl::StrCat("the GEMM result is also read by ", absl::StrJoin(others, ", "),
                             " (only the FP8 output chain and an amax may read it)");
    }
    if (fp8_why.empty() && !amax_why.empty()) {
      fp8_why = "the GEMM result is also read by an amax that cannot be folded (see the amax "
                "remark)";
    }
    if (fp8_why.empty() && value->IsRoot()) fp8_why = "the GEMM result is the computation's root";
    if (fp8_why.empty()) fp8_why = "the pattern did not match";
    out.push_back(absl::StrCat("FP8 output not folded: ", fp8_why));
  }
  if (attempt_amax && !amax_folded) {
    if (amax_why.empty() && !fp8_folded) {
      amax_why = "cuBLASLt writes amax only together with an FP8 output, which is not folded";
    }
    if (amax_why.empty()) amax_why = "the pattern did not match";
    out.push_back(absl::StrCat("amax not folded: ", amax_why));
  }
  return out;
}

}  // namespace

// The scalar under a broadcast of a rank-0 value (or a rank-0 value itself); null otherwise.
HloInstruction* ScalarUnderBroadcast(HloInstruction* i) {
  if (i->shape().IsArray() && i->shape().rank() == 0) return i;
  if (i->opcode() == HloOpcode::kBroadcast && i->operand_count() == 1 &&
      i->operand(0)->shape().IsArray() && i->operand(0)->shape().rank() == 0) {
    return i->operand(0);
  }
  return nullptr;
}

// The value of a scalar constant (not elided); nullopt otherwise.
std::optional<double> ScalarConstantValue(const HloInstruction* i) {
  if (i == nullptr || i->opcode() != HloOpcode::kConstant || !i->literal.has_value() ||
      i->literal->elided || !i->literal->IsScalar()) {
    return std::nullopt;
  }
  return i->literal->GetAsDouble(0);
}

OutputPlan PlanOutput(HloInstruction* dot) {
  OutputPlan plan;
  HloInstruction* cur = dot;
  // alpha: multiply(dot, broadcast(constant scalar)), the dot's only user.
  if (cur->user_count() == 1 && !cur->IsRoot()) {
    HloInstruction* m = cur->users()[0];
    if (m->opcode() == HloOpcode::kMultiply && m->shape().element_type == dot->shape().element_type) {
      HloInstruction* other = m->operand(0) == cur ? m->operand(1) : m->operand(0);
      std::optional<double> c = ScalarConstantValue(ScalarUnderBroadcast(other));
      if (other != cur && c.has_value() && std::isfinite(*c)) {
        plan.alpha = *c;
        plan.alpha_multiply = m;
        plan.folds.push_back("alpha");
        cur = m;
      }
    }
  }
  // FP8 output (+ optional amax): every user of `cur` belongs to one of the two chains.
  auto done = [&](OutputPlan p) {
    p.skipped = DiagnoseEpilogue(cur, p.fp8_convert != nullptr, p.amax_reduce != nullptr);
    return p;
  };
  if (cur->IsRoot() || cur->user_count() < 1 || cur->user_count() > 2) return done(plan);
  OutputPlan trial = plan;
  HloInstruction* amax = nullptr;
  bool fp8 = false;
  for (HloInstruction* u : cur->users()) {
    if (!fp8 && MatchFp8Output(u, cur, &trial)) {
      fp8 = true;
    } else if (amax == nullptr && (amax = MatchAmax(u, cur)) != nullptr) {
    } else {
      return done(plan);
    }
  }
  if (!fp8) return done(plan);
  trial.amax_reduce = amax;
  trial.folds.push_back("fp8-output");
  if (amax != nullptr) trial.folds.push_back("amax");
  return done(trial);
}

}  // namespace fp8_gemm_internal
}  // namespace weave
