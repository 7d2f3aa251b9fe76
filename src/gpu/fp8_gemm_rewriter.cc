#include "gpu/fp8_gemm_rewriter.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "passes/fp8_operand.h"

namespace weave {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr int64_t kPadMultiple = 16;      // cuBLASLt FP8: M, N and K multiples of 16
constexpr int64_t kMaxBatchProduct = 65535;

double Fp8MaxFinite(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F8E4M3FN: return 448.0;
    case PrimitiveType::F8E5M2: return 57344.0;
    case PrimitiveType::F8E4M3FNUZ: return 240.0;
    case PrimitiveType::F8E5M2FNUZ: return 57344.0;
    default: return 0.0;
  }
}

bool IsFnuzFp8(PrimitiveType t) {
  return t == PrimitiveType::F8E4M3FNUZ || t == PrimitiveType::F8E5M2FNUZ;
}
bool IsOcpFp8(PrimitiveType t) {
  return t == PrimitiveType::F8E4M3FN || t == PrimitiveType::F8E5M2;
}

// The operand pair XLA's GemmRewriter takes on `target`; "" when allowed, else why not.
std::string Fp8PairRule(const GpuTarget& target, PrimitiveType ta, PrimitiveType tb) {
  const std::string a(PrimitiveTypeName(ta)), b(PrimitiveTypeName(tb));
  if (target.HasFnuzFp8()) {
    if (!IsFnuzFp8(ta) || !IsFnuzFp8(tb)) {
      return absl::StrCat(a, " x ", b, ": on ", target.Name(),
                          " (MI300) FP8 GEMMs take f8e4m3fnuz and f8e5m2fnuz operands");
    }
    if (ta == PrimitiveType::F8E5M2FNUZ && tb == PrimitiveType::F8E5M2FNUZ) {
      return "f8e5m2fnuz x f8e5m2fnuz is not supported by hipBLASLt (one operand must be "
             "f8e4m3fnuz)";
    }
    return "";
  }
  if (IsFnuzFp8(ta) || IsFnuzFp8(tb)) {
    return absl::StrCat(a, " x ", b, ": the FNUZ types are ROCm MI300 (gfx942) FP8 formats; ",
                        target.Name(), " takes f8e4m3fn and f8e5m2 (--gpu-compute-capability=gfx942 "
                        "targets MI300)");
  }
  if (ta == PrimitiveType::F8E5M2 && tb == PrimitiveType::F8E5M2) {
    return target.rocm ? "f8e5m2 x f8e5m2 is not supported by hipBLASLt"
                       : "f8e5m2 x f8e5m2 is not supported by cuBLASLt";
  }
  return "";
}

}  // namespace

absl::StatusOr<GpuTarget> GpuTarget::Parse(std::string_view text) {
  GpuTarget t;
  if (text.size() > 3 && text.substr(0, 3) == "gfx") {
    for (char c : text.substr(3)) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(absl::StrCat("bad ROCm arch '", std::string(text), "'"));
      }
    }
    t.rocm = true;
    t.gfx = std::string(text);
    return t;
  }
  double cc = 0;
  if (!absl::SimpleAtod(std::string(text), &cc) || !(cc > 0 && cc < 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-compute-capability must be like 9.0 (CUDA) or gfx942 (ROCm), got '",
                     std::string(text), "'"));
  }
  t.cuda_cc = cc;
  return t;
}

std::string GpuTarget::Name() const {
  return rocm ? gfx : absl::StrFormat("compute capability %.1f", cuda_cc);
}

bool GpuTarget::HasFnuzFp8() const { return rocm && gfx == "gfx942"; }

bool GpuTarget::HasOcpFp8() const {
  if (!rocm) return cuda_cc >= 8.9;
  return gfx == "gfx950" || gfx == "gfx1200" || gfx == "gfx1201" || gfx == "gfx1250";
}

int64_t GpuTarget::WorkspaceBytes() const {
  if (!rocm) return CublasWorkspaceBytes(cuda_cc);
  if (gfx == "gfx942") return int64_t{76} << 20;
  if (gfx == "gfx950") return int64_t{64} << 20;
  return int64_t{4} << 20;
}

namespace {

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t p = 1;
  for (int64_t d : which) p *= dims[static_cast<size_t>(d)];
  return p;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Dims of an operand that are neither batch nor contracting, in increasing order.
std::vector<int64_t> FreeDims(int64_t rank, const std::vector<int64_t>& batch,
                              const std::vector<int64_t>& contracting) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Contains(batch, d) && !Contains(contracting, d)) out.push_back(d);
  }
  return out;
}

// The scalar under a broadcast of a rank-0 value (or a rank-0 value itself); null otherwise.
HloInstruction* ScalarUnderBroadcast(HloInstruction* i) {
  if (i->shape().IsArray() && i->shape().rank() == 0) return i;
  if (i->opcode() == HloOpcode::kBroadcast && i->operand_count() == 1 &&
      i->operand(0)->shape().IsArray() && i->operand(0)->shape().rank() == 0) {
    return i->operand(0);
  }
  return nullptr;
}

std::optional<double> ScalarConstantValue(const HloInstruction* i) {
  if (i == nullptr || i->opcode() != HloOpcode::kConstant || !i->literal.has_value() ||
      i->literal->elided || !i->literal->IsScalar()) {
    return std::nullopt;
  }
  return i->literal->GetAsDouble(0);
}

// Removes the instructions in `seeds` that have become dead, and then their operands that became
// dead, transitively. Never touches the root or what IsRemovableWhenUnused refuses, nor
// collectives (their partners on other partitions still expect them).
void RemoveDeadChains(HloComputation* comp, const std::vector<HloInstruction*>& seeds) {
  // Errors only on an inconsistent IR; a chain that cannot be removed is left in place.
  (void)comp->RemoveUnusedChains(seeds, [](const HloInstruction* i) {
    return i->IsRemovableWhenUnused() && !IsCollective(i->opcode());
  });
}

// ------------------------------------------------------------------------ output-side folds

struct OutputPlan {
  double alpha = 1.0;
  HloInstruction* alpha_multiply = nullptr;  // multiply(dot, broadcast(constant)) folded as alpha
  // FP8 output: convert_fp8(clamp(lo, X, hi)).
  HloInstruction* fp8_convert = nullptr;
  PrimitiveType fp8_type = PrimitiveType::kInvalid;
  HloInstruction* d_scale = nullptr;  // scalar d of X = D / d or D * d; null: no scaling
  bool d_scale_is_divide = false;
  // amax: reduce(abs(D), init<=0) with a maximum body.
  HloInstruction* amax_reduce = nullptr;
  std::vector<std::string> folds;
  // Epilogues the program writes but that were not folded, with the reason (for [missed] remarks).
  std::vector<std::string> skipped;
};

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

// ------------------------------------------------------------------------ the rewrite

class DotRewriter {
 public:
  DotRewriter(HloComputation* comp, const GpuTarget& target, XlaBackendConfigVersion schema)
      : comp_(comp), target_(target), schema_(schema) {}

  // Returns an empty string on success, else the reason for not rewriting.
  std::string TryRewrite(HloInstruction* dot, std::string* applied_message,
                         std::vector<HloInstruction*>* dead);
  // The epilogues the last successful TryRewrite did not fold, with the reasons.
  const std::vector<std::string>& skipped_epilogues() const { return skipped_; }

 private:
  struct Canon {
    HloInstruction* value = nullptr;
    int64_t contracting = 0;  // index of K in value
    bool transposed = false;
    bool reshaped = false;
  };

  HloInstruction* Add(HloOpcode op, const Shape& shape, std::vector<HloInstruction*> operands,
                      const std::string& name) {
    return comp_->AddInstruction(op, shape, std::move(operands), name);
  }
  HloInstruction* ScalarConstant(PrimitiveType t, double v, const std::string& name) {
    HloInstruction* c = Add(HloOpcode::kConstant, Shape::Scalar(t), {}, name);
    c->literal = Literal::Scalar(t, v);
    return c;
  }
  HloInstruction* RecreateOnFp8(const Fp8OperandMatch& m);
  HloInstruction* F32Scale(const Fp8OperandMatch& m);
  HloInstruction* F32ScaleOf(HloInstruction* s, bool reciprocal);
  // Brings x to [batch?, free, K] (K physically minor-most, "TN"), inserting an FP8 transpose
  // and, for several batch/free/contracting dims, a reshape that collapses them.
  Canon Canonicalize(HloInstruction* x, const std::vector<int64_t>& batch,
                     const std::vector<int64_t>& contracting);
  HloInstruction* PadMatrixDims(HloInstruction* x, int64_t first_matrix_dim);

  // The FP8 operand of the call for a dot operand (moved ops, TN/canonical form, padding); one per
  // (operand, batch dims, contracting dims), shared by every dot reading the same operand.
  struct Prepared {
    Canon canon;
    HloInstruction* padded = nullptr;
  };
  Prepared Prepare(HloInstruction* operand, const Fp8OperandMatch& m,
                   const std::vector<int64_t>& batch, const std::vector<int64_t>& contracting,
                   int64_t nb);

  HloComputation* comp_;
  const GpuTarget& target_;
  XlaBackendConfigVersion schema_;
  std::vector<std::string> skipped_;  // see skipped_epilogues()
  HloInstruction* one_f32_ = nullptr;
  std::map<std::tuple<HloInstruction*, std::vector<int64_t>, std::vector<int64_t>>, Prepared>
      prepared_;
  std::map<std::pair<HloInstruction*, bool>, HloInstruction*> f32_scales_;
};

DotRewriter::Prepared DotRewriter::Prepare(HloInstruction* operand, const Fp8OperandMatch& m,
                                           const std::vector<int64_t>& batch,
                                           const std::vector<int64_t>& contracting, int64_t nb) {
  auto key = std::make_tuple(operand, batch, contracting);
  auto it = prepared_.find(key);
  if (it != prepared_.end()) return it->second;
  Prepared p;
  p.canon = Canonicalize(RecreateOnFp8(m), batch, contracting);
  p.padded = PadMatrixDims(p.canon.value, nb);
  prepared_.emplace(key, p);
  return p;
}

HloInstruction* DotRewriter::RecreateOnFp8(const Fp8OperandMatch& m) {
  const PrimitiveType t = m.fp8->shape().element_type;
  HloInstruction* cur = m.fp8;
  HloInstruction* prev = m.kind == Fp8OperandMatch::Kind::kDirect ? m.fp8 : m.dequant;
  for (HloInstruction* op : m.ops) {
    std::vector<HloInstruction*> operands = op->operands();
    for (size_t i = 0; i < operands.size(); ++i) {
      if (operands[i] == prev) {
        operands[i] = cur;
      } else if (op->opcode() == HloOpcode::kPad && i == 1) {
        operands[i] = Add(HloOpcode::kConvert, operands[i]->shape().WithElementType(t),
                          {operands[i]}, op->name() + ".fp8.padval");
      } else if (op->opcode() == HloOpcode::kSelect && i > 0) {
        operands[i] = Add(HloOpcode::kConvert, operands[i]->shape().WithElementType(t),
                          {operands[i]}, op->name() + ".fp8.zero");
      }
    }
    cur = comp_->AddInstruction(op->CloneWithNewOperands(op->shape().WithElementType(t),
                                                         std::move(operands), ".fp8"));
    prev = op;
  }
  return cur;
}

HloInstruction* DotRewriter::F32ScaleOf(HloInstruction* s, bool reciprocal) {
  HloInstruction*& cached = f32_scales_[{s, reciprocal}];
  if (cached != nullptr) return cached;
  const PrimitiveType st = s->shape().element_type;
  if (reciprocal) {
    HloInstruction* one = ScalarConstant(st, 1.0, s->name() + ".one");
    s = Add(HloOpcode::kDivide, Shape::Scalar(st), {one, s}, s->name() + ".inv");
  }
  if (st != PrimitiveType::F32) {
    s = Add(HloOpcode::kConvert, Shape::Scalar(PrimitiveType::F32), {s}, s->name() + ".f32");
  }
  cached = s;
  return s;
}

HloInstruction* DotRewriter::F32Scale(const Fp8OperandMatch& m) {
  if (m.kind != Fp8OperandMatch::Kind::kScaled) {
    if (one_f32_ == nullptr) one_f32_ = ScalarConstant(PrimitiveType::F32, 1.0, "fp8_gemm.one");
    return one_f32_;
  }
  return F32ScaleOf(m.scale, m.scale_is_divide);
}

DotRewriter::Canon DotRewriter::Canonicalize(HloInstruction* x, const std::vector<int64_t>& batch,
                                             const std::vector<int64_t>& contracting) {
  Canon out;
  const Shape& s = x->shape();
  const int64_t rank = s.rank();
  const int64_t nb = static_cast<int64_t>(batch.size());
  std::vector<int64_t> free = FreeDims(rank, batch, contracting);
  bool batch_leading = true;
  for (int64_t i = 0; i < nb; ++i) batch_leading &= batch[static_cast<size_t>(i)] == i;
  if (batch_leading && nb <= 1 && contracting.size() == 1 && free.size() == 1) {
    // Already [batch?, M, K] or [batch?, K, M]: only the TN rule. K must be the physically
    // minor-most of the two matrix dims.
    const int64_t k = contracting[0];
    const int64_t other = free[0];
    const std::vector<int64_t> mtm = s.MinorToMajor();
    const auto pos = [&](int64_t d) {
      return std::find(mtm.begin(), mtm.end(), d) - mtm.begin();
    };
    out.value = x;
    out.contracting = k;
    if (pos(k) > pos(other)) {
      // Swap the two matrix dims logically, keeping the physical minor_to_major.
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[static_cast<size_t>(k)], perm[static_cast<size_t>(other)]);
      Shape ts = s;
      std::swap(ts.dims[static_cast<size_t>(k)], ts.dims[static_cast<size_t>(other)]);
      ts.layout = Layout{mtm, s.layout ? s.layout->suffix : ""};
      HloInstruction* t = Add(HloOpcode::kTranspose, ts, {x}, x->name() + ".tn");
      t->dimensions = perm;
      t->has_dimensions_attr = true;
      out.value = t;
      out.contracting = other;
      out.transposed = true;
    }
    return out;
  }
  // General case: transpose to [batch..., free..., contracting...] and collapse to
  // [B?, prod(free), prod(contracting)] with default layouts.
  std::vector<int64_t> perm = batch;
  perm.insert(perm.end(), free.begin(), free.end());
  perm.insert(perm.end(), contracting.begin(), contracting.end());
  HloInstruction* v = x;
  bool identity = true;
  for (int64_t i = 0; i < rank; ++i) identity &= perm[static_cast<size_t>(i)] == i;
  if (!identity || !s.HasDefaultLayout()) {
    std::vector<int64_t> td;
    for (int64_t p : perm) td.push_back(s.dims[static_cast<size_t>(p)]);
    HloInstruction* t = Add(HloOpcode::kTranspose, Shape(s.element_type, td), {x},
                            x->name() + ".canon");
    t->dimensions = perm;
    t->has_dimensions_attr = true;
    v = t;
    out.transposed = true;
  }
  std::vector<int64_t> cd;
  if (nb > 0) cd.push_back(Product(s.dims, batch));
  cd.push_back(Product(s.dims, free));
  cd.push_back(Product(s.dims, contracting));
  if (cd != v->shape().dims) {
    v = Add(HloOpcode::kReshape, Shape(s.element_type, cd), {v}, x->name() + ".canon.rs");
    out.reshaped = true;
  }
  out.value = v;
  out.contracting = nb > 0 ? 2 : 1;
  return out;
}

HloInstruction* DotRewriter::PadMatrixDims(HloInstruction* x, int64_t first_matrix_dim) {
  const Shape& s = x->shape();
  std::vector<PadDim> pads(static_cast<size_t>(s.rank()));
  bool any = false;
  Shape ps = s;
  for (int64_t d = first_matrix_dim; d < s.rank(); ++d) {
    const int64_t n = s.dims[static_cast<size_t>(d)];
    const int64_t hi = (kPadMultiple - n % kPadMultiple) % kPadMultiple;
    pads[static_cast<size_t>(d)].hi = hi;
    ps.dims[static_cast<size_t>(d)] += hi;
    any |= hi != 0;
  }
  if (!any) return x;
  HloInstruction* zero = ScalarConstant(s.element_type, 0.0, x->name() + ".padzero");
  HloInstruction* p = Add(HloOpcode::kPad, ps, {x, zero}, x->name() + ".pad16");
  p->padding = pads;
  return p;
}

std::string PrecisionName(const HloInstruction* dot, size_t i) {
  if (i < dot->operand_precision.size() && !dot->operand_precision[i].empty()) {
    return absl::AsciiStrToUpper(dot->operand_precision[i]);
  }
  return "DEFAULT";
}

ordered_json IntList(const std::vector<int64_t>& v) {
  ordered_json a = ordered_json::array();
  for (int64_t x : v) a.push_back(std::to_string(x));
  return a;
}

ordered_json JsonNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
    return ordered_json(static_cast<int64_t>(v));
  }
  return ordered_json(v);
}

// The GpuBackendConfig of the call in the schema of XLA version `v`: the dot's own fields kept
// (operation_queue_id, force_earliest_schedule, ...), gemm_backend_config set with the fields of
// GemmBackendConfig (passes/gpu_backend_config.h), in proto field-number order.
std::string BackendConfig(const HloInstruction* dot, const OutputPlan& plan, int64_t nb,
                          int64_t lhs_k, int64_t rhs_k, int64_t lhs_stride, int64_t rhs_stride,
                          XlaBackendConfigVersion v) {
  ordered_json gemm = ordered_json::object();
  gemm["alpha_real"] = JsonNumber(plan.alpha);
  gemm["beta"] = 0;
  std::vector<int64_t> batch_dims;
  if (nb > 0) batch_dims.push_back(0);
  gemm["dot_dimension_numbers"] = {{"lhs_contracting_dimensions", IntList({lhs_k})},
                                   {"rhs_contracting_dimensions", IntList({rhs_k})},
                                   {"lhs_batch_dimensions", IntList(batch_dims)},
                                   {"rhs_batch_dimensions", IntList(batch_dims)}};
  gemm["alpha_imag"] = 0;
  std::string algorithm = "ALG_UNSET";
  if (const std::string* alg = dot->GetRawAttribute("algorithm")) {
    algorithm = "ALG_" + absl::AsciiStrToUpper(*alg);
  }
  gemm["precision_config"] = {
      {"operand_precision", ordered_json::array({PrecisionName(dot, 0), PrecisionName(dot, 1)})},
      {"algorithm", algorithm}};
  gemm["epilogue"] = "DEFAULT";
  gemm["lhs_stride"] = std::to_string(lhs_stride);
  gemm["rhs_stride"] = std::to_string(rhs_stride);
  gemm["grad_x"] = dot->GetFrontendAttribute("grad_x").value_or("") == "true";
  gemm["grad_y"] = dot->GetFrontendAttribute("grad_y").value_or("") == "true";
  gemm["damax_output"] = plan.amax_reduce != nullptr;

  // A dot's config that is not JSON (never written by XLA) is replaced by a fresh one.
  absl::StatusOr<GpuBackendConfigEditor> edit = GpuBackendConfigEditor::Of(*dot, v);
  GpuBackendConfigEditor cfg = edit.ok() ? std::move(*edit) : GpuBackendConfigEditor(v);
  // The dot's own backend (oneof) config does not describe the GEMM call.
  static const char* kOneof[] = {"cudnn_conv_backend_config", "bitcast_backend_config",
                                 "collective_backend_config", "fusion_backend_config",
                                 "cudnn_norm_backend_config", "cudnn_fmha_backend_config",
                                 "custom_call_backend_config"};
  GpuBackendConfigEditor out(v);
  for (auto it = cfg.json().begin(); it != cfg.json().end(); ++it) {
    if (std::find(std::begin(kOneof), std::end(kOneof), it.key()) != std::end(kOneof)) continue;
    out.SetField(it.key(), it.value());
  }
  out.SetField("gemm_backend_config", std::move(gemm));
  return out.ToString();
}

const char* KindName(Fp8OperandMatch::Kind k) {
  switch (k) {
    case Fp8OperandMatch::Kind::kDirect: return "direct";
    case Fp8OperandMatch::Kind::kScaled: return "scaled";
    case Fp8OperandMatch::Kind::kUnscaled: return "unscaled";
  }
  return "";
}

std::string DotRewriter::TryRewrite(HloInstruction* dot, std::string* applied_message,
                                    std::vector<HloInstruction*>* dead) {
  if (dot->operand_count() != 2) return "dot does not have two operands";
  Fp8OperandMatch ma, mb;
  std::string why;
  if (!MatchFp8Operand(dot->operand(0), &ma, &why)) return "lhs: " + why;
  if (!MatchFp8Operand(dot->operand(1), &mb, &why)) return "rhs: " + why;
  const PrimitiveType ta = ma.fp8->shape().element_type;
  const PrimitiveType tb = mb.fp8->shape().element_type;
  if (!target_.HasFnuzFp8() && !target_.HasOcpFp8()) {
    if (!target_.rocm) {
      return absl::StrCat(target_.Name(), " is below 8.9: no FP8 GEMM");
    }
    return absl::StrCat(target_.Name(), " has no FP8 GEMM (XLA: gfx942 for the FNUZ types, "
                                        "gfx950 and gfx12 for f8e4m3fn/f8e5m2)");
  }
  if (std::string why = Fp8PairRule(target_, ta, tb); !why.empty()) return why;
  for (const Fp8OperandMatch* m : {&ma, &mb}) {
    if (m->kind == Fp8OperandMatch::Kind::kScaled &&
        !(m->scale->shape().IsArray() && m->scale->shape().rank() == 0)) {
      return absl::StrCat("scale '", m->scale->name(), "' of '", m->fp8->name(),
                          "' is not a scalar (", m->scale->shape().ToString(false),
                          "): a per-row/per-channel scale, which cuBLASLt's FP8 GEMM (one scalar "
                          "scale per operand) cannot take; the dot stays dequantize + dot");
    }
  }
  const PrimitiveType out_t = dot->shape().element_type;
  if (out_t != PrimitiveType::BF16 && out_t != PrimitiveType::F16 &&
      out_t != PrimitiveType::F32) {
    return absl::StrCat("output type ", std::string(PrimitiveTypeName(out_t)),
                        " is not bf16, f16 or f32");
  }
  const DotDims& dd = dot->dot_dims;
  const Shape& sa = dot->operand(0)->shape();
  const Shape& sb = dot->operand(1)->shape();
  if (dd.lhs_batch.size() != dd.rhs_batch.size() ||
      dd.lhs_contracting.size() != dd.rhs_contracting.size() || dd.lhs_contracting.empty()) {
    return "dimension numbers are not a plain matrix multiplication";
  }
  for (int64_t d : dd.lhs_batch) if (d < 0 || d >= sa.rank()) return "bad lhs batch dim";
  for (int64_t d : dd.lhs_contracting) if (d < 0 || d >= sa.rank()) return "bad lhs contracting dim";
  for (int64_t d : dd.rhs_batch) if (d < 0 || d >= sb.rank()) return "bad rhs batch dim";
  for (int64_t d : dd.rhs_contracting) if (d < 0 || d >= sb.rank()) return "bad rhs contracting dim";
  const std::vector<int64_t> free_a = FreeDims(sa.rank(), dd.lhs_batch, dd.lhs_contracting);
  const std::vector<int64_t> free_b = FreeDims(sb.rank(), dd.rhs_batch, dd.rhs_contracting);
  if (free_a.empty() || free_b.empty()) return "matrix-vector dot (an operand has no free dim)";
  const int64_t batch = Product(sa.dims, dd.lhs_batch);
  if (batch > kMaxBatchProduct) {
    return absl::StrCat("batch product ", batch, " exceeds ", kMaxBatchProduct);
  }
  const int64_t nb = dd.lhs_batch.empty() ? 0 : 1;

  OutputPlan plan = PlanOutput(dot);
  // An FP8 output the target cannot write stays a convert after the GEMM (XLA: OCP outputs on
  // CUDA/gfx950/gfx12, FNUZ outputs on gfx942).
  if (plan.fp8_convert != nullptr &&
      (target_.HasFnuzFp8() ? !IsFnuzFp8(plan.fp8_type) : !IsOcpFp8(plan.fp8_type))) {
    plan.skipped.push_back(absl::StrCat(
        "FP8 output not folded: the target writes no ",
        std::string(PrimitiveTypeName(plan.fp8_type)), " GEMM output (",
        target_.HasFnuzFp8() ? "FNUZ types only" : "OCP types only",
        "); the convert stays after the GEMM"));
    plan.fp8_convert = nullptr;
    plan.fp8_type = PrimitiveType::kInvalid;
    plan.d_scale = nullptr;
    plan.amax_reduce = nullptr;
    plan.folds.erase(std::remove_if(plan.folds.begin(), plan.folds.end(),
                                    [](const std::string& f) {
                                      return f == "fp8-output" || f == "amax";
                                    }),
                     plan.folds.end());
  }
  skipped_ = plan.skipped;

  // ---- operands: FP8 value, movable ops, canonical TN form, padding.
  const Prepared pa = Prepare(dot->operand(0), ma, dd.lhs_batch, dd.lhs_contracting, nb);
  const Prepared pb = Prepare(dot->operand(1), mb, dd.rhs_batch, dd.rhs_contracting, nb);
  const Canon& ca = pa.canon;
  const Canon& cb = pb.canon;
  const int64_t m_dim = ca.contracting == nb ? nb + 1 : nb;  // index of M in ca.value
  const int64_t n_dim = cb.contracting == nb ? nb + 1 : nb;
  const int64_t M = ca.value->shape().dims[static_cast<size_t>(m_dim)];
  const int64_t N = cb.value->shape().dims[static_cast<size_t>(n_dim)];
  HloInstruction* a = pa.padded;
  HloInstruction* b = pb.padded;
  const int64_t Mp = a->shape().dims[static_cast<size_t>(m_dim)];
  const int64_t Np = b->shape().dims[static_cast<size_t>(n_dim)];
  const bool padded = a != ca.value || b != cb.value;

  // ---- scales.
  std::vector<HloInstruction*> operands = {a, b, F32Scale(ma), F32Scale(mb)};
  if (plan.fp8_convert != nullptr) {
    if (plan.d_scale == nullptr) {
      if (one_f32_ == nullptr) one_f32_ = ScalarConstant(PrimitiveType::F32, 1.0, "fp8_gemm.one");
      operands.push_back(one_f32_);
    } else {
      operands.push_back(F32ScaleOf(plan.d_scale, plan.d_scale_is_divide));
    }
  }

  // ---- the call.
  const PrimitiveType d_type = plan.fp8_convert ? plan.fp8_type : out_t;
  std::vector<int64_t> canon_out;
  if (nb > 0) canon_out.push_back(batch);
  canon_out.push_back(M);
  canon_out.push_back(N);
  const bool reshape_out = canon_out != dot->shape().dims;
  Shape d_shape(d_type, canon_out);
  if (nb > 0) d_shape.dims = {batch, Mp, Np};
  else d_shape.dims = {Mp, Np};
  if (!reshape_out && dot->shape().layout.has_value()) {
    d_shape.layout = Layout{dot->shape().MinorToMajor(), ""};
  } else {
    d_shape.SetDefaultLayout();
  }
  std::vector<Shape> results = {d_shape};
  if (plan.amax_reduce != nullptr) results.push_back(Shape::Scalar(PrimitiveType::F32));
  Shape ws(PrimitiveType::S8, {target_.WorkspaceBytes()});
  ws.SetDefaultLayout();
  results.push_back(ws);
  HloInstruction* call = Add(HloOpcode::kCustomCall, Shape::Tuple(results), operands,
                             nb > 0 ? "cublas-batch-gemm" : "cublas-gemm");
  call->custom_call_target = std::string(kCublasLtMatmulF8Target);
  call->metadata = dot->metadata;
  call->frontend_attributes = dot->frontend_attributes;
  call->backend_config =
      BackendConfig(dot, plan, nb, ca.contracting, cb.contracting,
                    sa.ElementCount() / std::max<int64_t>(batch, 1),
                    sb.ElementCount() / std::max<int64_t>(batch, 1), schema_);

  HloInstruction* out = Add(HloOpcode::kGetTupleElement, d_shape, {call}, call->name() + ".d");
  out->tuple_index = 0;
  if (padded) {
    Shape ss = d_shape;
    ss.dims = canon_out;
    HloInstruction* sl = Add(HloOpcode::kSlice, ss, {out}, call->name() + ".unpad");
    for (int64_t d : canon_out) sl->slice.push_back(SliceDim{0, d, 1});
    out = sl;
  }
  if (reshape_out) {
    out = Add(HloOpcode::kReshape, dot->shape().WithElementType(d_type), {out},
              call->name() + ".out");
  }
  HloInstruction* replaced = plan.fp8_convert   ? plan.fp8_convert
                             : plan.alpha_multiply ? plan.alpha_multiply
                                                   : dot;
  // The replaced value keeps its layout: when the dot had a non-default layout and a reshape was
  // needed, the reshape carries it (set above via dot->shape()).
  if (!replaced->ReplaceAllUsesWith(out).ok()) return "internal: cannot replace the dot's uses";
  dead->push_back(replaced);
  if (plan.amax_reduce != nullptr) {
    HloInstruction* amax =
        Add(HloOpcode::kGetTupleElement, Shape::Scalar(PrimitiveType::F32), {call},
            call->name() + ".amax");
    amax->tuple_index = 1;
    const PrimitiveType rt = plan.amax_reduce->shape().element_type;
    if (rt != PrimitiveType::F32) {
      amax = Add(HloOpcode::kConvert, plan.amax_reduce->shape(), {amax}, call->name() + ".amax.cvt");
    }
    if (!plan.amax_reduce->ReplaceAllUsesWith(amax).ok()) return "internal: cannot replace amax";
    dead->push_back(plan.amax_reduce);
  }
  dead->push_back(dot);

  std::vector<std::string> notes;
  notes.push_back(absl::StrCat("a: ", KindName(ma.kind), " ", std::string(PrimitiveTypeName(ta)),
                               ma.ops.empty() ? "" : absl::StrCat(" +", ma.ops.size(), " moved op(s)")));
  notes.push_back(absl::StrCat("b: ", KindName(mb.kind), " ", std::string(PrimitiveTypeName(tb)),
                               mb.ops.empty() ? "" : absl::StrCat(" +", mb.ops.size(), " moved op(s)")));
  if (ca.transposed || cb.transposed) {
    notes.push_back(absl::StrCat("transposed", ca.transposed ? " a" : "", cb.transposed ? " b" : "",
                                 " for TN layout"));
  }
  if (ca.reshaped || cb.reshaped || reshape_out) notes.push_back("collapsed to canonical rank");
  if (padded) notes.push_back(absl::StrCat("padded to ", Mp, "x", Np, " and sliced back"));
  if (!plan.folds.empty()) notes.push_back("folded: " + absl::StrJoin(plan.folds, ", "));
  *applied_message = absl::StrCat("rewritten into ", std::string(kCublasLtMatmulF8Target), " '", call->name(),
                                  "' (", absl::StrJoin(notes, "; "), ")");
  return "";
}

}  // namespace

int64_t CublasWorkspaceBytes(double compute_capability) {
  return compute_capability >= 9.0 ? int64_t{33554432} : int64_t{4194304};
}

absl::StatusOr<bool> Fp8GemmRewriter::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    DotRewriter rewriter(comp, target_, backend_config_);
    std::vector<HloInstruction*> dead;
    for (HloInstruction* instr : comp->MakeInstructionPostOrder()) {
      if (instr->opcode() != HloOpcode::kDot) continue;
      std::string applied;
      std::string reason = rewriter.TryRewrite(instr, &applied, &dead);
      if (reason.empty()) {
        changed = true;
        AddRemark(instr->name(), true, applied);
        for (const std::string& s : rewriter.skipped_epilogues()) {
          AddRemark(instr->name(), false, "epilogue: " + s);
        }
      } else {
        AddRemark(instr->name(), false, "not rewritten: " + reason);
      }
    }
    RemoveDeadChains(comp, dead);
  }
  return changed;
}

namespace {
absl::StatusOr<std::unique_ptr<HloPass>> MakeFp8GemmRewriter(const PassOptions& options) {
  auto target = GpuTarget::Parse(options.GetString("gpu-compute-capability", "9.0"));
  if (!target.ok()) return target.status();
  auto schema = XlaBackendConfigVersionFromOptions(options);
  if (!schema.ok()) return schema.status();
  return std::unique_ptr<HloPass>(new Fp8GemmRewriter(*target, *schema));
}
}  // namespace

WEAVE_REGISTER_PASS("fp8-gemm-rewriter", MakeFp8GemmRewriter);

}  // namespace weave
