// The output side of an FP8 GEMM (see fp8_gemm_internal.h): the epilogues XLA's GemmRewriter
// folds into the cuBLASLt call (alpha, output scale, vector and matrix bias, ReLU, approximate
// GELU, FP8 output with its d scale, amax), and the reasons for those the program writes but that
// cannot be folded.
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

// reduce(abs(value), init) with a scalar result, a maximum body and a constant init <= 0; after a
// ReLU epilogue (`nonnegative`) also reduce(value) itself, as abs(relu(x)) = relu(x).
HloInstruction* MatchAmax(HloInstruction* user, HloInstruction* value, bool nonnegative) {
  HloInstruction* r = nullptr;
  if (user->opcode() == HloOpcode::kAbs && user->operand(0) == value && user->user_count() == 1) {
    r = user->users()[0];
    if (r->operand_count() != 2 || r->operand(0) != user) return nullptr;
  } else if (nonnegative && user->opcode() == HloOpcode::kReduce && user->operand_count() == 2 &&
             user->operand(0) == value) {
    r = user;
  } else {
    return nullptr;
  }
  if (r->opcode() != HloOpcode::kReduce || !r->shape().IsArray() || r->shape().rank() != 0 ||
      r->called_computations().size() != 1 || !IsMaximumComputation(r->to_apply())) {
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

namespace {

std::string Quote(const HloInstruction* i) { return absl::StrCat("'", i->name(), "'"); }

// The operand of binary `u` that is not `value` (null when both are, or neither).
HloInstruction* OtherOperand(HloInstruction* u, HloInstruction* value) {
  if (u->operand_count() != 2) return nullptr;
  if (u->operand(0) == value && u->operand(1) != value) return u->operand(1);
  if (u->operand(1) == value && u->operand(0) != value) return u->operand(0);
  return nullptr;
}

// The scalar under broadcast `b` (a broadcast op of a rank-0 value); null otherwise.
HloInstruction* BroadcastScalar(HloInstruction* b) {
  if (b == nullptr || b->opcode() != HloOpcode::kBroadcast) return nullptr;
  return ScalarUnderBroadcast(b);
}

// Is `i` a broadcast of a scalar constant within `tol` (relative) of `v`?
bool IsBroadcastConstantNear(HloInstruction* i, double v, double tol) {
  std::optional<double> c = ScalarConstantValue(BroadcastScalar(i));
  return c.has_value() && std::fabs(*c - v) <= tol * std::fabs(v);
}

// The operand of commutative binary `i` (opcode `op`) that is not `a` when the other one is `a`.
HloInstruction* PartnerOf(HloInstruction* i, HloOpcode op, HloInstruction* a) {
  if (i == nullptr || i->opcode() != op || i->operand_count() != 2) return nullptr;
  if (i->operand(0) == a) return i->operand(1);
  if (i->operand(1) == a) return i->operand(0);
  return nullptr;
}

// Approximate GELU of x (arXiv:1606.08415, the tanh form cuBLASLt's GELU epilogue computes):
//   out = x * cdf,  cdf = 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * (x * (x * x)))))
// with any operand order, every op but `out` read once. Returns `out`, or null.
HloInstruction* MatchApproxGelu(HloInstruction* x) {
  for (HloInstruction* out : x->users()) {
    HloInstruction* cdf = PartnerOf(out, HloOpcode::kMultiply, x);
    if (cdf == nullptr || cdf->opcode() != HloOpcode::kMultiply || cdf->user_count() != 1) continue;
    HloInstruction* one_plus = nullptr;
    for (int64_t k = 0; k < 2 && one_plus == nullptr; ++k) {
      if (IsBroadcastConstantNear(cdf->operand(k), 0.5, 0)) one_plus = cdf->operand(1 - k);
    }
    if (one_plus == nullptr || one_plus->opcode() != HloOpcode::kAdd || one_plus->user_count() != 1) {
      continue;
    }
    HloInstruction* tanh = nullptr;
    for (int64_t k = 0; k < 2 && tanh == nullptr; ++k) {
      if (IsBroadcastConstantNear(one_plus->operand(k), 1.0, 0)) tanh = one_plus->operand(1 - k);
    }
    if (tanh == nullptr || tanh->opcode() != HloOpcode::kTanh || tanh->user_count() != 1) continue;
    HloInstruction* inner = tanh->operand(0);
    if (inner->opcode() != HloOpcode::kMultiply || inner->user_count() != 1) continue;
    HloInstruction* sum = nullptr;
    for (int64_t k = 0; k < 2 && sum == nullptr; ++k) {
      if (IsBroadcastConstantNear(inner->operand(k), std::sqrt(M_2_PI), 1e-4)) {
        sum = inner->operand(1 - k);
      }
    }
    HloInstruction* cubic_term = PartnerOf(sum, HloOpcode::kAdd, x);
    if (cubic_term == nullptr || sum->user_count() != 1 ||
        cubic_term->opcode() != HloOpcode::kMultiply || cubic_term->user_count() != 1) {
      continue;
    }
    HloInstruction* cube = nullptr;
    for (int64_t k = 0; k < 2 && cube == nullptr; ++k) {
      if (IsBroadcastConstantNear(cubic_term->operand(k), 0.044715, 1e-4)) {
        cube = cubic_term->operand(1 - k);
      }
    }
    HloInstruction* square = PartnerOf(cube, HloOpcode::kMultiply, x);
    if (square == nullptr || cube->user_count() != 1 || square->opcode() != HloOpcode::kMultiply ||
        square->user_count() != 1 || square->operand(0) != x || square->operand(1) != x) {
      continue;
    }
    return out;
  }
  return nullptr;
}

// Walks the single-user chain after the GEMM (see PlanOutput) and records what it folds.
class ChainPlanner {
 public:
  ChainPlanner(HloInstruction* dot, const OutputContext& ctx) : ctx_(ctx), cur_(dot) {
    plan_.last = dot;
  }

  OutputPlan Run() {
    while (Step()) {
    }
    PlanFp8Output();
    return std::move(plan_);
  }

 private:
  bool Epilogue(std::string_view e) const { return plan_.epilogue == e; }
  void Fold(HloInstruction* i, std::string what) {
    plan_.folds.push_back(std::move(what));
    cur_ = i;
    plan_.last = i;
  }
  // Records why `u`, the GEMM value's only user, stays outside the call.
  bool Stop(HloInstruction* u, const std::string& why) {
    plan_.skipped.push_back(absl::StrCat(Quote(u), " (", std::string(HloOpcodeString(u->opcode())),
                                         ") stays outside the call: ", why));
    return false;
  }
  // XLA's F8ScaleD: a scalar scaling of a wide D becomes a_scale when a is unscaled.
  bool OutputScaleAllowed() const {
    return ctx_.a_scale_is_one && plan_.output_scale == nullptr && plan_.matrix_bias == nullptr &&
           (Epilogue("DEFAULT") || Epilogue("RELU"));
  }

  // One fold on the chain; false when the chain ends here.
  bool Step() {
    if (cur_->IsRoot() || cur_->user_count() == 0) return false;
    if (HloInstruction* gelu = MatchApproxGelu(cur_)) {
      if (!(Epilogue("DEFAULT") || Epilogue("BIAS"))) {
        return Stop(gelu, absl::StrCat("GELU after the ", plan_.epilogue, " epilogue"));
      }
      // The GELU's input also read elsewhere: XLA's GELU_AUX writes that pre-activation value
      // as the call's second output (FuseGeluActivation's has_aux), for those readers.
      const bool aux = cur_->user_count() > 4;
      plan_.epilogue = Epilogue("BIAS") ? (aux ? "BIAS_GELU_AUX" : "BIAS_GELU")
                                        : (aux ? "GELU_AUX" : "GELU");
      if (aux) plan_.aux_readers_of = cur_;
      Fold(gelu, aux ? "gelu-aux" : "gelu");
      return true;
    }
    if (cur_->user_count() != 1) {
      // Several elementwise readers of the GEMM value (an exact GELU x * 0.5 * (1 + erf(x /
      // sqrt(2))), a SiLU, ...): cuBLASLt's epilogue reads D once; only the tanh GELU, which
      // reads it four times, is folded above.
      std::vector<std::string> readers;
      bool elementwise = false;
      for (const HloInstruction* u : cur_->users()) {
        readers.push_back(Quote(u));
        elementwise |= u->shape().IsArray() && u->shape().dims == cur_->shape().dims &&
                       (u->opcode() == HloOpcode::kMultiply || u->opcode() == HloOpcode::kAdd ||
                        u->opcode() == HloOpcode::kDivide || u->opcode() == HloOpcode::kErf ||
                        u->opcode() == HloOpcode::kLogistic || u->opcode() == HloOpcode::kTanh);
      }
      if (elementwise && !FeedsFp8OutputOrAmax()) {
        plan_.skipped.push_back(absl::StrCat(
            "the GEMM result is read by ", cur_->user_count(), " ops (",
            absl::StrJoin(readers, ", "), "), which stay outside the call: cuBLASLt's epilogues "
            "read it once (XLA folds no other multi-reader pattern than the tanh GELU; an exact "
            "erf GELU has no cuBLASLt epilogue)"));
      }
      return false;
    }
    HloInstruction* u = cur_->users()[0];
    if (IsView(u)) {
      // A bitcast or reshape between the GEMM and its epilogue (XLA: OptionalBitcast, e.g. a
      // rank-3 result viewed from the [M, N] GEMM): followed only when a fold comes after it.
      HloInstruction* before = cur_;
      HloInstruction* last = plan_.last;
      const bool through = through_view_;
      cur_ = u;
      through_view_ = true;
      const size_t folds = plan_.folds.size();
      if (Step() && plan_.folds.size() > folds) return true;
      cur_ = before;
      plan_.last = last;
      through_view_ = through;
      return false;
    }
    if (!u->shape().IsArray() || u->shape().element_type != cur_->shape().element_type) {
      return false;  // a convert (the FP8 output below), a tuple, a reduce ...
    }
    switch (u->opcode()) {
      case HloOpcode::kMultiply: return Scale(u, /*divide=*/false);
      case HloOpcode::kDivide: return Scale(u, /*divide=*/true);
      case HloOpcode::kAdd: return Bias(u);
      case HloOpcode::kMaximum: return Relu(u);
      case HloOpcode::kSubtract:
      case HloOpcode::kMinimum:
      case HloOpcode::kTanh:
      case HloOpcode::kExp:
      case HloOpcode::kNegate:
      case HloOpcode::kErf:
      case HloOpcode::kLogistic:
        return Stop(u, "cuBLASLt has no such epilogue");
      default:
        return false;
    }
  }

  bool Scale(HloInstruction* u, bool divide) {
    HloInstruction* other = OtherOperand(u, cur_);
    if (other == nullptr || (divide && u->operand(0) != cur_)) {
      // A clamp-free chain into an FP8 convert is diagnosed by DiagnoseEpilogue.
      return divide ? Stop(u, "the GEMM result is the divisor") : false;
    }
    HloInstruction* s = BroadcastScalar(other);
    if (s == nullptr || other->user_count() != 1) {
      if (s == nullptr && !FeedsFp8Convert(u)) {
        return Stop(u, absl::StrCat("it scales by ", Quote(other),
                                    ", not a broadcast scalar (cuBLASLt scales by scalars)"));
      }
      return false;
    }
    std::optional<double> c = divide ? std::nullopt : ScalarConstantValue(s);
    if (c.has_value() && std::isfinite(*c) && Epilogue("DEFAULT") && plan_.matrix_bias == nullptr) {
      plan_.alpha *= *c;
      Fold(u, "alpha");
      return true;
    }
    if (OutputScaleAllowed()) {
      plan_.output_scale = s;
      plan_.output_scale_is_divide = divide;
      Fold(u, "output-scale");
      return true;
    }
    if (FeedsFp8Convert(u)) return false;  // the d scale of an FP8 output, planned below
    if (!ctx_.a_scale_is_one) {
      return Stop(u, "a is scaled, and cuBLASLt takes the output scale of a wide (non-FP8) "
                     "result only as a_scale (XLA's F8ScaleD needs a_scale = 1)");
    }
    if (plan_.output_scale != nullptr) return Stop(u, "an output scale is already folded");
    if (plan_.matrix_bias != nullptr) {
      return Stop(u, "it would scale the matrix bias as well (XLA folds no output scale after "
                     "beta = 1)");
    }
    return Stop(u, absl::StrCat("an output scale after the ", plan_.epilogue, " epilogue"));
  }

  // Are cur_'s two readers an FP8 output chain and an amax (planned by PlanFp8Output)?
  bool FeedsFp8OutputOrAmax() const {
    if (cur_->user_count() != 2) return false;
    for (const HloInstruction* u : cur_->users()) {
      const bool amax = u->opcode() == HloOpcode::kAbs || u->opcode() == HloOpcode::kReduce;
      const bool fp8 = u->opcode() == HloOpcode::kClamp ||
                       ((u->opcode() == HloOpcode::kMultiply || u->opcode() == HloOpcode::kDivide) &&
                        u->user_count() == 1 && u->users()[0]->opcode() == HloOpcode::kClamp);
      if (!amax && !fp8) return false;
    }
    return true;
  }

  // Is `u` (a multiply or divide by a broadcast scalar) followed by clamp -> convert to FP8?
  static bool FeedsFp8Convert(HloInstruction* u) {
    if (u->user_count() != 1) return false;
    HloInstruction* v = u->users()[0];
    if (v->opcode() == HloOpcode::kClamp && v->user_count() == 1) v = v->users()[0];
    return v->opcode() == HloOpcode::kConvert && IsFp8(v->shape().element_type);
  }

  bool Bias(HloInstruction* u) {
    HloInstruction* other = OtherOperand(u, cur_);
    if (other == nullptr) return Stop(u, "it adds the GEMM result to itself");
    const int64_t rank = cur_->shape().rank();
    if (other->opcode() == HloOpcode::kBroadcast && other->operand_count() == 1) {
      HloInstruction* v = other->operand(0);
      const bool along_n = v->shape().IsArray() && v->shape().rank() == 1 &&
                           other->dimensions.size() == 1 && other->dimensions[0] == rank - 1 &&
                           ctx_.rhs_free_dims == 1 && v->shape().dims[0] == ctx_.n;
      if (along_n) {
        if (!Epilogue("DEFAULT")) {
          return Stop(u, absl::StrCat("a vector bias after the ", plan_.epilogue, " epilogue"));
        }
        if (plan_.matrix_bias != nullptr) {
          return Stop(u, "a matrix bias is already folded, and XLA folds only the matrix bias "
                         "when both are written");
        }
        HloInstruction* bias = v;
        if (v->shape().element_type == PrimitiveType::F32) {
          const bool from_bf16 = v->opcode() == HloOpcode::kConvert &&
                                 v->operand(0)->shape().element_type == PrimitiveType::BF16;
          if (!from_bf16) {
            return Stop(u, absl::StrCat(
                               "the vector bias ", Quote(v), " is f32, which cuBLASLt's FP8 GEMM "
                               "does not take (XLA folds it only as a convert of a bf16 vector)"));
          }
          bias = v->operand(0);
        }
        plan_.vector_bias = bias;
        plan_.epilogue = "BIAS";
        Fold(u, "vector-bias");
        return true;
      }
      if (!ctx_.reshaped_output && !through_view_) {
        return Stop(u, absl::StrCat("the bias ", Quote(other),
                                    " is broadcast but not a vector along N, the output's minor "
                                    "dim (XLA does not materialize a broadcast as matrix bias)"));
      }
      // XLA folds add(bitcast(gemm), broadcast(bias)) as a matrix bias of the broadcast.
    }
    if (IsFp8(other->shape().element_type)) {
      return Stop(u, "an FP8 matrix bias, which cuBLASLt does not take");
    }
    if (plan_.matrix_bias != nullptr) return Stop(u, "a matrix bias is already folded (beta = 1)");
    if (!(Epilogue("DEFAULT") || Epilogue("BIAS"))) {
      return Stop(u, absl::StrCat("a matrix bias after the ", plan_.epilogue, " epilogue"));
    }
    if (plan_.output_scale != nullptr) {
      return Stop(u, "an output scale is folded as a_scale, which would scale the bias too");
    }
    plan_.matrix_bias = other;
    plan_.matrix_bias_aliasable = CanOverwrite(other);
    Fold(u, "matrix-bias");
    return true;
  }

  // XLA's can_overwrite_bias: C read only by this add and not a parameter. (XLA also allows an
  // entry parameter the module aliases to an output; Weave does not read input_output_alias
  // here, so such a C is not aliased: the call then writes a fresh buffer, which is correct.)
  static bool CanOverwrite(HloInstruction* c) {
    if (c->user_count() > 1) return false;
    if (c->opcode() != HloOpcode::kParameter) return true;
    return false;
  }

  bool Relu(HloInstruction* u) {
    HloInstruction* other = OtherOperand(u, cur_);
    std::optional<double> z = ScalarConstantValue(BroadcastScalar(other));
    if (!z.has_value() || *z != 0) {
      return Stop(u, "a maximum with something other than a broadcast 0 is not a ReLU");
    }
    if (!(Epilogue("DEFAULT") || Epilogue("BIAS"))) {
      return Stop(u, absl::StrCat("ReLU after the ", plan_.epilogue, " epilogue"));
    }
    plan_.epilogue = Epilogue("BIAS") ? "BIAS_RELU" : "RELU";
    Fold(u, "relu");
    return true;
  }

  // FP8 output (+ optional amax): every user of the chain's last value belongs to one of the
  // two chains (XLA's F8ConvertD, CUDA only).
  void PlanFp8Output() {
    HloInstruction* cur = cur_;
    if (plan_.aux_readers_of != nullptr) {
      bool fp8_next = false;
      for (const HloInstruction* u : cur->users()) {
        fp8_next |= u->opcode() == HloOpcode::kClamp || (u->opcode() == HloOpcode::kConvert &&
                                                         IsFp8(u->shape().element_type));
      }
      if (fp8_next) {
        plan_.skipped.push_back("FP8 output not folded: the call already writes GELU_AUX's "
                                "auxiliary output (XLA folds no FP8 output after it)");
      }
      return;
    }
    const bool nonnegative = Epilogue("RELU") || Epilogue("BIAS_RELU");
    auto diagnose = [&](const OutputPlan& p) {
      std::vector<std::string> d =
          DiagnoseEpilogue(cur, p.fp8_convert != nullptr, p.amax_reduce != nullptr);
      plan_.skipped.insert(plan_.skipped.end(), d.begin(), d.end());
    };
    if (cur->IsRoot() || cur->user_count() < 1 || cur->user_count() > 2) return diagnose(plan_);
    OutputPlan trial = plan_;
    HloInstruction* amax = nullptr;
    bool fp8 = false;
    for (HloInstruction* u : cur->users()) {
      if (!fp8 && MatchFp8Output(u, cur, &trial)) {
        fp8 = true;
      } else if (amax == nullptr && (amax = MatchAmax(u, cur, nonnegative)) != nullptr) {
      } else {
        return diagnose(plan_);
      }
    }
    if (!fp8) return diagnose(plan_);
    if (!ctx_.cuda) {
      plan_.skipped.push_back(
          "FP8 output not folded: XLA folds the FP8 output conversion (F8ConvertD) on CUDA only; "
          "the clamp and convert stay after the GEMM");
      return;
    }
    if (!IsOcpFp8(trial.fp8_type)) {
      plan_.skipped.push_back(absl::StrCat(
          "FP8 output not folded: cuBLASLt writes no ",
          std::string(PrimitiveTypeName(trial.fp8_type)),
          " D (f8e4m3fn and f8e5m2 only); the convert stays after the GEMM"));
      return;
    }
    if (plan_.matrix_bias != nullptr) {
      const PrimitiveType ct = plan_.matrix_bias->shape().element_type;
      if (ct != PrimitiveType::BF16 && ct != PrimitiveType::F16) {
        plan_.skipped.push_back(absl::StrCat(
            "FP8 output not folded: the matrix bias ", Quote(plan_.matrix_bias), " is ",
            std::string(PrimitiveTypeName(ct)), "; with an FP8 D cuBLASLt takes a bf16/f16 C"));
        return;
      }
      trial.matrix_bias_aliasable = false;  // D and C differ in size
    }
    trial.amax_reduce = amax;
    trial.folds.push_back("fp8-output");
    if (amax != nullptr) trial.folds.push_back("amax");
    trial.last = trial.fp8_convert;
    plan_ = std::move(trial);
    diagnose(plan_);
  }

  // A reshape, or a bitcast that keeps the default layout (a reshape in memory), of cur_ alone.
  bool IsView(const HloInstruction* u) const {
    if (u->opcode() != HloOpcode::kReshape && u->opcode() != HloOpcode::kBitcast) return false;
    if (!u->shape().IsArray() || u->shape().element_type != cur_->shape().element_type ||
        u->shape().ElementCount() != cur_->shape().ElementCount()) {
      return false;
    }
    return u->opcode() == HloOpcode::kReshape ||
           (u->shape().HasDefaultLayout() && cur_->shape().HasDefaultLayout());
  }

  const OutputContext& ctx_;
  HloInstruction* cur_;
  bool through_view_ = false;  // the chain passed a reshape/bitcast of the GEMM's result
  OutputPlan plan_;
};

}  // namespace

OutputPlan PlanOutput(HloInstruction* dot, const OutputContext& ctx) {
  return ChainPlanner(dot, ctx).Run();
}

}  // namespace fp8_gemm_internal
}  // namespace weave
