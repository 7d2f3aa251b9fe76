#include "gpu/fp8_gemm_rewriter.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gpu/fp8_gemm_internal.h"
#include "hlo/dot_dims.h"
#include "passes/fp8_operand.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

using fp8_gemm_internal::BackendConfig;
using fp8_gemm_internal::Fp8PairRule;
using fp8_gemm_internal::IsFnuzFp8;
using fp8_gemm_internal::IsOcpFp8;
using fp8_gemm_internal::OutputPlan;
using fp8_gemm_internal::PlanOutput;
using fp8_gemm_internal::ScalarConstantValue;
using fp8_gemm_internal::ScalarUnderBroadcast;

constexpr int64_t kPadMultiple = 16;      // cuBLASLt FP8: M, N and K multiples of 16
constexpr int64_t kMaxBatchProduct = 65535;

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t p = 1;
  for (int64_t d : which) p *= dims[static_cast<size_t>(d)];
  return p;
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
  // (new value, name): the values that replaced a folded epilogue's last op, with its name.
  const std::vector<std::pair<HloInstruction*, std::string>>& renames() const { return renames_; }

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
  // C for the call: the matrix bias (in the dot's result shape) collapsed to the call's
  // [batch?, M, N] and padded with zeros to [batch?, Mp, Np].
  HloInstruction* MatrixBiasOperand(HloInstruction* c, const std::vector<int64_t>& canon,
                                    const std::vector<int64_t>& padded);
  // The vector bias [N] padded with zeros to [Np].
  HloInstruction* VectorBiasOperand(HloInstruction* bias, int64_t np);

  // The FP8 operand of the call for a dot operand (moved ops, TN/canonical form, padding); one per
  // (operand, batch dims, contracting dims), shared by every dot reading the same operand.
  struct Prepared {
    Canon canon;
    HloInstruction* padded = nullptr;
  };
  Prepared Prepare(HloInstruction* operand, const Fp8OperandMatch& m,
                   const std::vector<int64_t>& batch, const std::vector<int64_t>& contracting,
                   int64_t nb);

  // Steps of TryRewrite. Why the operands cannot feed an FP8 GEMM on this target, or "" (the
  // matches in *ma, *mb).
  std::string MatchOperands(HloInstruction* dot, Fp8OperandMatch* ma, Fp8OperandMatch* mb) const;
  // Why the call cannot write the dot's result type `out_t`, or "".
  std::string OutputTypeRule(PrimitiveType out_t) const;
  // The epilogues folded into the call (none after a dot that writes FP8 itself; then `skipped`
  // says so when one follows). `free_b`: b's free dims; `reshape_out`: D is reshaped back.
  OutputPlan PlanEpilogue(HloInstruction* dot, const Fp8OperandMatch& ma,
                          const std::vector<int64_t>& free_b, bool reshape_out) const;
  // The call's operands in XLA's order: a, b, [C], a_scale, b_scale, [bias], [d_scale]; C and
  // the bias padded to `padded_out` and `np`.
  std::vector<HloInstruction*> CallOperands(const OutputPlan& plan, const Fp8OperandMatch& ma,
                                            const Fp8OperandMatch& mb, HloInstruction* a,
                                            HloInstruction* b,
                                            const std::vector<int64_t>& canon_out,
                                            const std::vector<int64_t>& padded_out, int64_t np);
  // The cuBLASLt FP8 custom-call: results (D, [aux], [amax], workspace), the dot's metadata and
  // frontend attributes, its backend config, and C's aliasing when the plan allows it.
  HloInstruction* AddCall(HloInstruction* dot, const OutputPlan& plan,
                          const std::vector<HloInstruction*>& operands, const Shape& d_shape,
                          int64_t nb, int64_t batch, const Canon& ca, const Canon& cb);
  // The call and how its D is laid out: [batch?, Mp, Np] (`padded`: Mp, Np past canon_out).
  struct CallResult {
    HloInstruction* call;
    Shape d_shape;
    std::vector<int64_t> canon_out;  // [batch?, M, N]
    bool padded;
  };
  // Output `index` of the call as the program reads it: unpadded, reshaped to `as`. Names: D is
  // call.d / call.unpad / call.out, the auxiliary output call.aux / .aux.unpad / ...
  HloInstruction* ReadBack(const CallResult& c, int64_t index, const Shape& as,
                           const std::string& tag);
  // Points the readers of the folded chain's last value (and of the GELU input, the amax) at the
  // call's outputs; those values go to *dead. "" or an internal error.
  std::string ReplaceWithCall(HloInstruction* dot, const OutputPlan& plan, const CallResult& c,
                              PrimitiveType d_type, std::vector<HloInstruction*>* dead);

  HloComputation* comp_;
  const GpuTarget& target_;
  XlaBackendConfigVersion schema_;
  std::vector<std::string> skipped_;  // see skipped_epilogues()
  std::vector<std::pair<HloInstruction*, std::string>> renames_;  // see renames()
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
  std::vector<int64_t> free = DotFreeDims(rank, batch, contracting);
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
    // Blackwell (compute capability 10.x) takes either operand order: XLA inserts no transpose
    // there (CreateF8CustomCall's IsBlackwell()).
    const bool blackwell = !target_.rocm && target_.cuda_cc >= 10.0 && target_.cuda_cc < 11.0;
    if (pos(k) > pos(other) && !blackwell) {
      // Swap the two matrix dims logically, keeping the physical minor_to_major.
      std::vector<int64_t> perm(static_cast<size_t>(rank));
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[static_cast<size_t>(k)], perm[static_cast<size_t>(other)]);
      Shape ts = s;
      std::swap(ts.dims[static_cast<size_t>(k)], ts.dims[static_cast<size_t>(other)]);
      ts.layout = Layout{mtm, s.layout ? s.layout->suffix : ""};
      HloInstruction* t = Add(HloOpcode::kTranspose, ts, {x}, x->name() + ".tn");
      t->dimensions = perm;
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
  p->set_padding(pads);
  return p;
}

HloInstruction* DotRewriter::MatrixBiasOperand(HloInstruction* c, const std::vector<int64_t>& canon,
                                               const std::vector<int64_t>& padded) {
  HloInstruction* v = c;
  if (c->shape().dims != canon) {
    v = Add(HloOpcode::kReshape, Shape(c->shape().element_type, canon), {c}, c->name() + ".canon");
  }
  if (padded == canon) return v;
  const PrimitiveType t = c->shape().element_type;
  std::vector<PadDim> pads(canon.size());
  for (size_t d = 0; d < canon.size(); ++d) pads[d].hi = padded[d] - canon[d];
  HloInstruction* zero = ScalarConstant(t, 0.0, c->name() + ".padzero");
  HloInstruction* p = Add(HloOpcode::kPad, Shape(t, padded), {v, zero}, c->name() + ".pad16");
  p->set_padding(pads);
  return p;
}

HloInstruction* DotRewriter::VectorBiasOperand(HloInstruction* bias, int64_t np) {
  const Shape& s = bias->shape();
  if (s.dims[0] == np) return bias;
  std::vector<PadDim> pads(1);
  pads[0].hi = np - s.dims[0];
  HloInstruction* zero = ScalarConstant(s.element_type, 0.0, bias->name() + ".padzero");
  HloInstruction* p =
      Add(HloOpcode::kPad, Shape(s.element_type, {np}), {bias, zero}, bias->name() + ".pad16");
  p->set_padding(pads);
  return p;
}

// Is `r` one of the ops of the GELU whose output is `out`: those between its input `pre`
// (exclusive) and `out`, which are multiplies, adds and a tanh?
bool IsInGelu(const HloInstruction* r, const HloInstruction* out, const HloInstruction* pre) {
  std::vector<const HloInstruction*> work = {out};
  std::set<const HloInstruction*> seen;
  while (!work.empty()) {
    const HloInstruction* i = work.back();
    work.pop_back();
    if (i == pre || !seen.insert(i).second || seen.size() > 16) continue;
    if (i == r) return true;
    for (const HloInstruction* o : i->operands()) {
      if (o->opcode() == HloOpcode::kMultiply || o->opcode() == HloOpcode::kAdd ||
          o->opcode() == HloOpcode::kTanh) {
        work.push_back(o);
      }
    }
  }
  return false;
}

const char* KindName(Fp8OperandMatch::Kind k) {
  switch (k) {
    case Fp8OperandMatch::Kind::kDirect: return "direct";
    case Fp8OperandMatch::Kind::kScaled: return "scaled";
    case Fp8OperandMatch::Kind::kUnscaled: return "unscaled";
  }
  return "";
}

// Why the operands of `dot` cannot feed an FP8 GEMM on this target, or "": each an FP8 value
// (MatchFp8Operand, into *ma and *mb), a pair of types the target's GEMM takes, scalar scales.
std::string DotRewriter::MatchOperands(HloInstruction* dot, Fp8OperandMatch* ma,
                                       Fp8OperandMatch* mb) const {
  std::string why;
  if (!MatchFp8Operand(dot->operand(0), ma, &why)) return "lhs: " + why;
  if (!MatchFp8Operand(dot->operand(1), mb, &why)) return "rhs: " + why;
  const PrimitiveType ta = ma->fp8->shape().element_type;
  const PrimitiveType tb = mb->fp8->shape().element_type;
  if (!target_.HasFnuzFp8() && !target_.HasOcpFp8()) {
    if (!target_.rocm) {
      return absl::StrCat(target_.Name(), " is below 8.9: no FP8 GEMM");
    }
    return absl::StrCat(target_.Name(), " has no FP8 GEMM (XLA: gfx942 for the FNUZ types, "
                                        "gfx950 and gfx12 for f8e4m3fn/f8e5m2)");
  }
  if (std::string why = Fp8PairRule(target_, ta, tb); !why.empty()) return why;
  for (const Fp8OperandMatch* m : {ma, mb}) {
    if (m->kind == Fp8OperandMatch::Kind::kScaled &&
        !(m->scale->shape().IsArray() && m->scale->shape().rank() == 0)) {
      return absl::StrCat("scale '", m->scale->name(), "' of '", m->fp8->name(),
                          "' is not a scalar (", m->scale->shape().ToString(false),
                          "): a per-row/per-channel scale, which cuBLASLt's FP8 GEMM (one scalar "
                          "scale per operand) cannot take; the dot stays dequantize + dot");
    }
  }
  return "";
}

// Why the dot's result type `out_t` is not one the call writes, or "".
std::string DotRewriter::OutputTypeRule(PrimitiveType out_t) const {
  // A dot whose own result is FP8 becomes a call writing FP8 D without a d scale (XLA's
  // CreateF8CustomCall takes F8E4M3FN/F8E5M2 outputs on CUDA and OCP ROCm, FNUZ on gfx942).
  const bool fp8_result = IsFp8(out_t);
  if (fp8_result && !(IsOcpFp8(out_t) ? target_.HasOcpFp8()
                                        : IsFnuzFp8(out_t) && target_.HasFnuzFp8())) {
    return absl::StrCat("output type ", std::string(PrimitiveTypeName(out_t)), " is not an FP8 "
                        "type ", target_.Name(), " writes");
  }
  if (!fp8_result && out_t != PrimitiveType::BF16 && out_t != PrimitiveType::F16 &&
      out_t != PrimitiveType::F32) {
    return absl::StrCat("output type ", std::string(PrimitiveTypeName(out_t)),
                        " is not bf16, f16, f32 or FP8");
  }
  return "";
}

// Why the dimension numbers of `dot` are not a (batched) matrix multiplication the call takes,
// or "".
std::string DotDimsRule(const HloInstruction* dot) {
  const DotDims& dd = dot->dot_dims();
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
  const std::vector<int64_t> free_a = DotFreeDims(sa.rank(), dd.lhs_batch, dd.lhs_contracting);
  const std::vector<int64_t> free_b = DotFreeDims(sb.rank(), dd.rhs_batch, dd.rhs_contracting);
  if (free_a.empty() || free_b.empty()) return "matrix-vector dot (an operand has no free dim)";
  const int64_t batch = Product(sa.dims, dd.lhs_batch);
  if (batch > kMaxBatchProduct) {
    return absl::StrCat("batch product ", batch, " exceeds ", kMaxBatchProduct);
  }
  return "";
}

OutputPlan DotRewriter::PlanEpilogue(HloInstruction* dot, const Fp8OperandMatch& ma,
                                     const std::vector<int64_t>& free_b, bool reshape_out) const {
  const PrimitiveType out_t = dot->shape().element_type;
  const Shape& sb = dot->operand(1)->shape();
  OutputPlan plan;
  plan.last = dot;
  if (IsFp8(out_t)) {
    bool epilogue_like = false;
    for (const HloInstruction* u : dot->users()) {
      epilogue_like |= u->opcode() == HloOpcode::kAdd || u->opcode() == HloOpcode::kMaximum ||
                       u->opcode() == HloOpcode::kMultiply || u->opcode() == HloOpcode::kDivide;
    }
    if (epilogue_like) {
      plan.skipped.push_back(absl::StrCat(
          "nothing after the GEMM is folded: the dot itself writes ",
          std::string(PrimitiveTypeName(out_t)), ", and an epilogue after an FP8 D would run on "
          "rounded values"));
    }
  } else {
    fp8_gemm_internal::OutputContext ctx;
    ctx.a_scale_is_one = ma.kind != Fp8OperandMatch::Kind::kScaled;
    ctx.cuda = !target_.rocm;
    ctx.rhs_free_dims = static_cast<int64_t>(free_b.size());
    ctx.n = Product(sb.dims, free_b);
    ctx.reshaped_output = reshape_out;
    plan = PlanOutput(dot, ctx);
  }
  return plan;
}

std::vector<HloInstruction*> DotRewriter::CallOperands(const OutputPlan& plan,
                                                       const Fp8OperandMatch& ma,
                                                       const Fp8OperandMatch& mb, HloInstruction* a,
                                                       HloInstruction* b,
                                                       const std::vector<int64_t>& canon_out,
                                                       const std::vector<int64_t>& padded_out,
                                                       int64_t np) {
  std::vector<HloInstruction*> operands = {a, b};
  if (plan.matrix_bias != nullptr) {
    operands.push_back(MatrixBiasOperand(plan.matrix_bias, canon_out, padded_out));
  }
  operands.push_back(plan.output_scale != nullptr
                         ? F32ScaleOf(plan.output_scale, plan.output_scale_is_divide)
                         : F32Scale(ma));
  operands.push_back(F32Scale(mb));
  if (plan.vector_bias != nullptr) operands.push_back(VectorBiasOperand(plan.vector_bias, np));
  if (plan.fp8_convert != nullptr) {
    if (plan.d_scale == nullptr) {
      if (one_f32_ == nullptr) one_f32_ = ScalarConstant(PrimitiveType::F32, 1.0, "fp8_gemm.one");
      operands.push_back(one_f32_);
    } else {
      operands.push_back(F32ScaleOf(plan.d_scale, plan.d_scale_is_divide));
    }
  }
  return operands;
}

HloInstruction* DotRewriter::AddCall(HloInstruction* dot, const OutputPlan& plan,
                                     const std::vector<HloInstruction*>& operands,
                                     const Shape& d_shape, int64_t nb, int64_t batch,
                                     const Canon& ca, const Canon& cb) {
  const Shape& sa = dot->operand(0)->shape();
  const Shape& sb = dot->operand(1)->shape();
  std::vector<Shape> results = {d_shape};
  if (plan.aux_readers_of != nullptr) results.push_back(d_shape);  // GELU_AUX: pre-activation
  if (plan.amax_reduce != nullptr) results.push_back(Shape::Scalar(PrimitiveType::F32));
  Shape ws(PrimitiveType::S8, {target_.WorkspaceBytes()});
  ws.SetDefaultLayout();
  results.push_back(ws);
  HloInstruction* call = Add(HloOpcode::kCustomCall, Shape::Tuple(results), operands,
                             nb > 0 ? "cublas-batch-gemm" : "cublas-gemm");
  call->set_custom_call_target(std::string(kCublasLtMatmulF8Target));
  call->metadata = dot->metadata;
  call->frontend_attributes = dot->frontend_attributes;
  call->backend_config =
      BackendConfig(dot, plan, nb, ca.contracting, cb.contracting,
                    sa.ElementCount() / std::max<int64_t>(batch, 1),
                    sb.ElementCount() / std::max<int64_t>(batch, 1), schema_);
  if (plan.matrix_bias_aliasable) {
    // XLA lets the output reuse C's buffer when nothing else reads C (FuseMatrixBiasAdd).
    call->SetRawAttribute("output_to_operand_aliasing", "{{0}: (2, {})}");
  }
  return call;
}

HloInstruction* DotRewriter::ReadBack(const CallResult& c, int64_t index, const Shape& as,
                                      const std::string& tag) {
  const std::string base = c.call->name() + tag;
  HloInstruction* v = Add(HloOpcode::kGetTupleElement, c.d_shape, {c.call},
                          tag.empty() ? base + ".d" : base);
  v->tuple_index = index;
  if (c.padded) {
    Shape ss = c.d_shape;
    ss.dims = c.canon_out;
    HloInstruction* sl = Add(HloOpcode::kSlice, ss, {v}, base + ".unpad");
    for (int64_t d : c.canon_out) sl->mutable_slice()->push_back(SliceDim{0, d, 1});
    v = sl;
  }
  if (c.canon_out != as.dims) v = Add(HloOpcode::kReshape, as, {v}, base + ".out");
  return v;
}

std::string DotRewriter::ReplaceWithCall(HloInstruction* dot, const OutputPlan& plan,
                                         const CallResult& c, PrimitiveType d_type,
                                         std::vector<HloInstruction*>* dead) {
  HloInstruction* call = c.call;
  HloInstruction* out = ReadBack(c, 0, plan.last->shape().WithElementType(d_type), "");
  if (plan.aux_readers_of != nullptr) {
    // The GELU's input, read outside the GELU: the auxiliary output. Its readers inside the GELU
    // die with it.
    HloInstruction* pre = plan.aux_readers_of;
    HloInstruction* aux = ReadBack(c, 1, pre->shape(), ".aux");
    std::vector<HloInstruction*> readers = pre->users();
    for (HloInstruction* r : readers) {
      if (!IsInGelu(r, plan.last, pre)) {
        if (!r->ReplaceOperandWith(r->OperandIndex(pre), aux).ok()) {
          return "internal: cannot read the auxiliary output";
        }
      }
    }
  }
  // The replaced value keeps its layout: when the dot had a non-default layout and a reshape was
  // needed, the reshape carries it (set above via dot->shape()).
  HloInstruction* replaced = plan.last;
  if (!replaced->ReplaceAllUsesWith(out).ok()) return "internal: cannot replace the dot's uses";
  dead->push_back(replaced);
  // The value the program named after the folded epilogue keeps that name (see Run).
  if (replaced != dot) renames_.push_back({out, replaced->name()});
  if (plan.amax_reduce != nullptr) {
    HloInstruction* amax =
        Add(HloOpcode::kGetTupleElement, Shape::Scalar(PrimitiveType::F32), {call},
            call->name() + ".amax");
    amax->tuple_index = plan.aux_readers_of != nullptr ? 2 : 1;
    const PrimitiveType rt = plan.amax_reduce->shape().element_type;
    if (rt != PrimitiveType::F32) {
      amax = Add(HloOpcode::kConvert, plan.amax_reduce->shape(), {amax}, call->name() + ".amax.cvt");
    }
    if (!plan.amax_reduce->ReplaceAllUsesWith(amax).ok()) return "internal: cannot replace amax";
    dead->push_back(plan.amax_reduce);
  }
  return "";
}

std::string DotRewriter::TryRewrite(HloInstruction* dot, std::string* applied_message,
                                    std::vector<HloInstruction*>* dead) {
  if (dot->operand_count() != 2) return "dot does not have two operands";
  Fp8OperandMatch ma, mb;
  if (std::string why = MatchOperands(dot, &ma, &mb); !why.empty()) return why;
  const PrimitiveType ta = ma.fp8->shape().element_type;
  const PrimitiveType tb = mb.fp8->shape().element_type;
  const PrimitiveType out_t = dot->shape().element_type;
  if (std::string why = OutputTypeRule(out_t); !why.empty()) return why;
  if (std::string why = DotDimsRule(dot); !why.empty()) return why;
  const DotDims& dd = dot->dot_dims();
  const Shape& sa = dot->operand(0)->shape();
  const Shape& sb = dot->operand(1)->shape();
  const std::vector<int64_t> free_a = DotFreeDims(sa.rank(), dd.lhs_batch, dd.lhs_contracting);
  const std::vector<int64_t> free_b = DotFreeDims(sb.rank(), dd.rhs_batch, dd.rhs_contracting);
  const int64_t batch = Product(sa.dims, dd.lhs_batch);
  const int64_t nb = dd.lhs_batch.empty() ? 0 : 1;

  std::vector<int64_t> canon_out;
  if (nb > 0) canon_out.push_back(batch);
  canon_out.push_back(Product(sa.dims, free_a));
  canon_out.push_back(Product(sb.dims, free_b));
  const bool reshape_out = canon_out != dot->shape().dims;

  const OutputPlan plan = PlanEpilogue(dot, ma, free_b, reshape_out);
  skipped_ = plan.skipped;

  // ---- operands: FP8 value, movable ops, canonical TN form, padding.
  const Prepared pa = Prepare(dot->operand(0), ma, dd.lhs_batch, dd.lhs_contracting, nb);
  const Prepared pb = Prepare(dot->operand(1), mb, dd.rhs_batch, dd.rhs_contracting, nb);
  const Canon& ca = pa.canon;
  const Canon& cb = pb.canon;
  const int64_t m_dim = ca.contracting == nb ? nb + 1 : nb;  // index of M in ca.value
  const int64_t n_dim = cb.contracting == nb ? nb + 1 : nb;
  HloInstruction* a = pa.padded;
  HloInstruction* b = pb.padded;
  const int64_t Mp = a->shape().dims[static_cast<size_t>(m_dim)];
  const int64_t Np = b->shape().dims[static_cast<size_t>(n_dim)];
  const bool padded = a != ca.value || b != cb.value;

  // ---- operands: a, b, [C], a_scale, b_scale, [bias], [d_scale] (XLA's order).
  std::vector<int64_t> padded_out = canon_out;
  padded_out[static_cast<size_t>(nb)] = Mp;
  padded_out[static_cast<size_t>(nb) + 1] = Np;
  const std::vector<HloInstruction*> operands =
      CallOperands(plan, ma, mb, a, b, canon_out, padded_out, Np);

  // ---- the call. D is [batch?, Mp, Np]; the value replacing the chain's last op has that op's
  // shape (the dot's, or a view of it the epilogue was written on).
  const PrimitiveType d_type = plan.fp8_convert ? plan.fp8_type : out_t;
  const bool reshape_final = canon_out != plan.last->shape().dims;
  Shape d_shape(d_type, padded_out);
  if (!reshape_final && dot->shape().layout.has_value() && !reshape_out) {
    d_shape.layout = Layout{dot->shape().MinorToMajor(), ""};
  } else {
    d_shape.SetDefaultLayout();
  }
  HloInstruction* call = AddCall(dot, plan, operands, d_shape, nb, batch, ca, cb);
  const CallResult result{call, d_shape, canon_out, padded};
  if (std::string why = ReplaceWithCall(dot, plan, result, d_type, dead); !why.empty()) return why;
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
  if (ca.reshaped || cb.reshaped || reshape_final) notes.push_back("collapsed to canonical rank");
  if (padded) notes.push_back(absl::StrCat("padded to ", Mp, "x", Np, " and sliced back"));
  if (!plan.folds.empty()) {
    // What folding saves against XLA's other option, one fused epilogue kernel after the GEMM:
    // the GEMM's wide result written to HBM and read back (the bias / C reads are the same
    // either way).
    const int64_t wide = dot->shape().ElementCount() *
                         std::max<int64_t>(1, BitWidth(dot->shape().element_type) / 8);
    notes.push_back(absl::StrCat("folded: ", absl::StrJoin(plan.folds, ", "),
                                 "; saves an epilogue kernel's ", 2 * wide,
                                 " bytes of HBM traffic"));
  }
  *applied_message = absl::StrCat("rewritten into ", std::string(kCublasLtMatmulF8Target), " '", call->name(),
                                  "' (", absl::StrJoin(notes, "; "), ")");
  return "";
}

}  // namespace

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
    if (!rewriter.renames().empty()) {
      std::set<std::string> live;
      for (const HloInstruction* i : comp->instructions()) live.insert(i->name());
      for (const auto& [value, name] : rewriter.renames()) {
        if (live.insert(name).second) value->set_name(name);
      }
    }
  }
  return changed;
}

namespace {
absl::StatusOr<std::unique_ptr<HloPass>> MakeFp8GemmRewriter(const PassOptions& options) {
  ASSIGN_OR_RETURN(auto target, GpuTarget::Parse(options.GetString("gpu-compute-capability", "9.0")));
  ASSIGN_OR_RETURN(auto schema, XlaBackendConfigVersionFromOptions(options));
  return std::unique_ptr<HloPass>(new Fp8GemmRewriter(target, schema));
}
}  // namespace

WEAVE_REGISTER_PASS("fp8-gemm-rewriter", MakeFp8GemmRewriter);

}  // namespace weave
