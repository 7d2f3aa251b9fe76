#include "eval/output_precision.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "hlo/conv_dims.h"
#include "hlo/gemm_call.h"

namespace weave::eval {

int MantissaBits(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F64: return 52;
    case PrimitiveType::F32: return 23;
    case PrimitiveType::F16: return 10;
    case PrimitiveType::BF16: return 7;
    default: break;
  }
  if (!IsFloatingPoint(t)) return -1;
  // Small float types are named f<bits>e<E>m<M>[suffix]: the digits after 'm'.
  const std::string name(PrimitiveTypeName(t));
  const size_t m = name.find('m', 1);
  if (m != std::string::npos && m + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[m + 1]))) {
    return name[m + 1] - '0';
  }
  return 0;
}

namespace {

bool Narrower(PrimitiveType a, PrimitiveType b) {
  if (b == PrimitiveType::kInvalid) return a != PrimitiveType::kInvalid;
  if (a == PrimitiveType::kInvalid) return false;
  return MantissaBits(a) < MantissaBits(b);
}

bool SamePrecision(PrimitiveType a, PrimitiveType b) {
  return a != PrimitiveType::kInvalid && b != PrimitiveType::kInvalid &&
         MantissaBits(a) == MantissaBits(b);
}

// The narrower of two paths; on equal precision the longer rounding chain and larger ring.
PathPrecision Merge(const PathPrecision& a, const PathPrecision& b) {
  if (Narrower(a.type, b.type)) return a;
  if (Narrower(b.type, a.type)) return b;
  PathPrecision m = a;
  if (a.type == PrimitiveType::kInvalid) return b.type == PrimitiveType::kInvalid ? a : b;
  m.roundings = std::max(a.roundings, b.roundings);
  m.ring = std::max(a.ring, b.ring);
  m.k = std::max(a.k, b.k);
  m.sum_terms = std::max(a.sum_terms, b.sum_terms);
  if (m.where.empty()) m.where = b.where;
  return m;
}

// Whether `c` is a scalar add of its two parameters (a sum reducer).
bool IsSumReducer(const HloComputation* c) {
  if (c == nullptr || c->root() == nullptr || c->root()->opcode() != HloOpcode::kAdd) return false;
  const HloInstruction* r = c->root();
  return r->operand_count() == 2 && r->operand(0)->opcode() == HloOpcode::kParameter &&
         r->operand(1)->opcode() == HloOpcode::kParameter && r->operand(0) != r->operand(1);
}

// The number of terms each result element of a sum `reduce` adds (the product of its reduced
// dims); 0 for any other reduce.
int64_t SumTerms(const HloInstruction& i) {
  if (i.opcode() != HloOpcode::kReduce || i.operand_count() < 2 || !IsSumReducer(i.to_apply())) return 0;
  const Shape& in = i.operand(0)->shape();
  int64_t terms = 1;
  for (int64_t d : i.dimensions) {
    if (d >= 0 && d < in.rank()) terms *= in.dims[static_cast<size_t>(d)];
  }
  return terms;
}

// The opcode an instruction computes: the wrapped one of a sugared async op
// (`reduce-scatter-start` is an async-start of a reduce-scatter), else its own.
HloOpcode EffectiveOpcode(const HloInstruction& i) {
  if (i.opcode() == HloOpcode::kAsyncStart && !i.async_sugar().empty()) {
    if (auto op = ParseHloOpcode(i.async_sugar())) return *op;
  }
  return i.opcode();
}

// Opcodes whose float result is an exact function of their operands' values.
bool IsExact(HloOpcode op) {
  switch (op) {
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
    case HloOpcode::kIota:
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kBitcast:
    case HloOpcode::kCopy:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kConcatenate:
    case HloOpcode::kPad:
    case HloOpcode::kReverse:
    case HloOpcode::kGather:
    case HloOpcode::kSelect:
    case HloOpcode::kClamp:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kNegate:
    case HloOpcode::kAbs:
    case HloOpcode::kSign:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
    case HloOpcode::kCollectivePermuteDone:
    case HloOpcode::kAllReduceDone:
    case HloOpcode::kAsyncDone:
    case HloOpcode::kAsyncUpdate:
    case HloOpcode::kCopyStart:
    case HloOpcode::kCopyDone:
    case HloOpcode::kCompare:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kWhile:
    case HloOpcode::kCall:
    case HloOpcode::kConditional:
    case HloOpcode::kFusion:
    case HloOpcode::kAsyncStart:
    case HloOpcode::kOptimizationBarrier:
      return true;
    default:
      return false;
  }
}

// Element type of an array, or the narrowest float element type of a tuple's leaves. Not
// f8e8m0fnu: an MX block scale is a power of two that multiplies values of another type
// exactly, so the precision of a path through it is that of the data it scales (judging by
// E8M0's 0 mantissa bits would accept any value within a factor of two).
PrimitiveType ResultFloatType(const Shape& s) {
  if (s.IsArray()) {
    return IsFloatingPoint(s.element_type) && s.element_type != PrimitiveType::F8E8M0FNU
               ? s.element_type
               : PrimitiveType::kInvalid;
  }
  PrimitiveType t = PrimitiveType::kInvalid;
  for (const Shape& e : s.tuple_shapes) {
    const PrimitiveType x = ResultFloatType(e);
    if (Narrower(x, t)) t = x;
  }
  return t;
}

int64_t GroupSize(const HloInstruction& i, int64_t num_partitions) {
  if (i.replica_groups && !i.replica_groups->groups.empty() && !i.replica_groups->groups[0].empty()) {
    return static_cast<int64_t>(i.replica_groups->groups[0].size());
  }
  return std::max<int64_t>(1, num_partitions);
}

bool IsReductionCollective(HloOpcode op) {
  return op == HloOpcode::kAllReduce || op == HloOpcode::kAllReduceStart ||
         op == HloOpcode::kReduceScatter;
}

class Analysis {
 public:
  explicit Analysis(int64_t num_partitions) : n_(num_partitions) {}

  // The precision of every instruction of `c`, parameters given by `params` (exact if absent).
  const PathPrecision& Of(const HloInstruction* i) { return values_[i]; }

  void RunComputation(const HloComputation* c, const std::vector<PathPrecision>& params) {
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      PathPrecision p;
      if (i->opcode() == HloOpcode::kParameter) {
        const size_t n = static_cast<size_t>(i->parameter_number);
        if (n < params.size()) p = params[n];
        values_[i] = p;
        continue;
      }
      for (const HloInstruction* o : i->operands()) p = Merge(p, values_[o]);
      // Callees holding the op's computation (not the scalar reducers of reduce, all-reduce,
      // sort, ..., which are the op's own rounding): every rounding inside them, their
      // parameters fed by the merged operands.
      const bool runs_callees =
          i->opcode() == HloOpcode::kWhile || i->opcode() == HloOpcode::kCall ||
          i->opcode() == HloOpcode::kConditional || i->opcode() == HloOpcode::kFusion ||
          (i->opcode() == HloOpcode::kAsyncStart && i->async_sugar().empty()) ||
          i->opcode() == HloOpcode::kCustomCall;
      for (const HloComputation* callee : i->called_computations()) {
        if (!runs_callees) break;
        if (callee == nullptr) continue;
        std::vector<PathPrecision> cp(static_cast<size_t>(callee->num_parameters()), p);
        RunComputation(callee, cp);
        for (const HloInstruction* ci : callee->instructions()) p = Merge(p, values_[ci]);
      }
      const PrimitiveType t = ResultFloatType(i->shape());
      const HloOpcode op = EffectiveOpcode(*i);
      bool rounds = !IsExact(op) && t != PrimitiveType::kInvalid;
      if (i->opcode() == HloOpcode::kConvert) {
        const PrimitiveType from = i->operand(0)->shape().element_type;
        rounds = t != PrimitiveType::kInvalid &&
                 (!IsFloatingPoint(from) || MantissaBits(from) > MantissaBits(t));
      }
      if (rounds) {
        PathPrecision own;
        own.type = t;
        own.roundings = 1;
        own.where = absl::StrCat("'", i->name(), "' (", std::string(HloOpcodeString(op)), ")");
        if (IsReductionCollective(op)) own.ring = GroupSize(*i, n_);
        own.sum_terms = SumTerms(*i);
        if (i->opcode() == HloOpcode::kDot && i->operand_count() >= 1) {
          int64_t k = 1;
          for (int64_t d : i->dot_dims().lhs_contracting) {
            if (d >= 0 && d < i->operand(0)->shape().rank()) k *= i->operand(0)->shape().dims[static_cast<size_t>(d)];
          }
          own.k = k;
        }
        if (i->opcode() == HloOpcode::kConvolution && i->operand_count() == 2) {
          // A convolution contracts the kernel's input features over its window positions.
          own.k = i->operand(1)->shape().ElementCount();
          if (absl::StatusOr<ConvDims> cd = ParseConvDims(*i, i->operand(1)->shape().rank()); cd.ok()) {
            const int64_t out_features = i->operand(1)->shape().dims[static_cast<size_t>(cd->kernel.b)];
            if (out_features > 0) own.k /= out_features;
          }
        }
        if (Narrower(t, p.type)) {
          p = own;
        } else if (SamePrecision(t, p.type)) {
          p.roundings += 1;
          p.ring = std::max(p.ring, own.ring);
          p.k = std::max(p.k, own.k);
          p.sum_terms = std::max(p.sum_terms, own.sum_terms);
        }
      }
      values_[i] = p;
    }
  }

 private:
  int64_t n_;
  absl::flat_hash_map<const HloInstruction*, PathPrecision> values_;
};

}  // namespace

std::vector<PathPrecision> OutputPathPrecisions(const HloModule& module, int64_t num_partitions) {
  std::vector<PathPrecision> out;
  const HloComputation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) return out;
  Analysis a(num_partitions);
  a.RunComputation(entry, {});
  // Leaves in the evaluator's order: tuple instructions are followed per operand, any other
  // tuple-shaped value gives each of its leaves its own precision.
  std::function<void(const HloInstruction*)> leaves = [&](const HloInstruction* i) {
    if (i->opcode() == HloOpcode::kTuple) {
      for (const HloInstruction* o : i->operands()) leaves(o);
      return;
    }
    std::function<void(const Shape&)> count = [&](const Shape& s) {
      if (s.IsArray()) {
        out.push_back(a.Of(i));
        return;
      }
      for (const Shape& e : s.tuple_shapes) count(e);
    };
    count(i->shape());
  };
  leaves(entry->root());
  return out;
}

namespace {

// Replaces each float array among the first `count` operands of `i` (in `c`) by its absolute
// value; *changed when any was. False when an operand cannot be replaced.
bool TakeMagnitudes(HloComputation* c, HloInstruction* i, int64_t count, bool* changed) {
  for (int64_t k = 0; k < count; ++k) {
    HloInstruction* o = i->operand(k);
    if (!o->shape().IsArray() || !IsFloatingPoint(o->shape().element_type)) continue;
    HloInstruction* a = c->AddInstruction(HloOpcode::kAbs, o->shape(), {o},
                                          absl::StrCat(o->name(), ".magnitude"));
    if (!i->ReplaceOperandWith(k, a).ok()) return false;
    *changed = true;
  }
  return true;
}

}  // namespace

std::unique_ptr<HloModule> MagnitudeModule(const HloModule& module) {
  std::unique_ptr<HloModule> m = module.Clone();
  bool changed = false;
  for (HloComputation* c : m->computations()) {
    for (HloInstruction* i : c->MakeInstructionPostOrder()) {
      const HloOpcode op = EffectiveOpcode(*i);
      // An elementwise function with |f'| <= 1 (tanh, logistic, sine, cosine) does not grow an
      // error of its operand: the bound after it is the operand's magnitude, not f of it (tanh
      // of a large sum is near 1 while the sum's rounding error is not).
      if ((op == HloOpcode::kTanh || op == HloOpcode::kLogistic || op == HloOpcode::kSin ||
           op == HloOpcode::kCos) &&
          i->operand_count() == 1 && i->operand(0)->shape() == i->shape()) {
        if (!i->ReplaceAllUsesWith(i->operand(0)).ok()) return nullptr;
        if (i->IsRoot()) c->set_root(i->operand(0));
        continue;
      }
      const bool gemm = IsCublasGemmCall(*i);
      if (op != HloOpcode::kDot && op != HloOpcode::kConvolution && !gemm && !IsReductionCollective(op)) continue;
      // A sum reducer is what a reduction collective must hold for |.| to bound it.
      if (IsReductionCollective(op) && !i->called_computations().empty()) {
        const HloComputation* r = i->called_computations()[0];
        if (r == nullptr || r->root() == nullptr || r->root()->opcode() != HloOpcode::kAdd) continue;
      }
      if (!TakeMagnitudes(c, i, i->operand_count(), &changed)) return nullptr;
    }
  }
  return changed ? std::move(m) : nullptr;
}

double NormUlpsFactor(const PathPrecision& p) {
  double f = 1;
  if (p.roundings > 3) f += static_cast<double>(p.roundings - 3) / 3;
  return f;
}

double MagnitudeUlpsFactor(const PathPrecision& p) {
  return 1 + (p.ring > 1 ? (static_cast<double>(p.ring) + 1) / 2 : 0);
}

std::unique_ptr<HloModule> SumMagnitudeModule(const HloModule& module) {
  std::unique_ptr<HloModule> m = module.Clone();
  bool changed = false;
  for (HloComputation* c : m->computations()) {
    for (HloInstruction* i : c->MakeInstructionPostOrder()) {
      if (SumTerms(*i) == 0) continue;
      // The data operands (the first half; the rest are the init values).
      if (!TakeMagnitudes(c, i, i->operand_count() / 2, &changed)) return nullptr;
    }
  }
  return changed ? std::move(m) : nullptr;
}

double SumReassociationAtol(const PathPrecision& p, double magnitude) {
  const int mantissa = MantissaBits(p.type);
  if (p.sum_terms <= 1 || mantissa < 0 || !std::isfinite(magnitude)) return 0;
  const double u = std::ldexp(1.0, -(mantissa + 1));
  return 2 * kSumLambda * std::sqrt(static_cast<double>(p.sum_terms)) * u * magnitude;
}

}  // namespace weave::eval
