// ScalarProgram: see scalar_program.h.
#include "eval/scalar_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "eval/numerics.h"
#include "eval/ops.h"

namespace weave::eval {
namespace {

bool IsIntLike(PrimitiveType t) { return t == PrimitiveType::PRED || IsInteger(t); }
bool IsScalarOfUsableType(const Shape& s) {
  return s.IsArray() && s.dims.empty() &&
         (IsIntLike(s.element_type) ||
          (IsFloatingPoint(s.element_type) && StorageFor(s.element_type) != Storage::kNone));
}

// The bit pattern of a register holding a value of type t.
uint64_t BitsOf(double d, int64_t i, PrimitiveType t) {
  switch (StorageFor(t)) {
    case Storage::kFloat:
      if (t == PrimitiveType::F32 || t == PrimitiveType::BF16) {  // as ops_elementwise.cc: NaN payloads kept
        const float f = static_cast<float>(d);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        return t == PrimitiveType::F32 ? u : (u >> 16);
      }
      return EncodeFloat(d, t);
    case Storage::kDouble: {
      uint64_t u;
      std::memcpy(&u, &d, 8);
      return u;
    }
    default: {
      const int w = BitWidth(t);
      const uint64_t mask = w >= 64 ? ~uint64_t{0} : ((uint64_t{1} << w) - 1);
      return static_cast<uint64_t>(i) & mask;
    }
  }
}

// Whether the operands of `in` have the types the verifier requires of them, `type` being its
// result type (an unverified module is not compiled).
bool OperandTypesAsVerified(const HloInstruction* in, PrimitiveType type) {
  const size_t nops = in->operands().size();
  auto type_of = [&](size_t k) { return in->operand(k)->shape().element_type; };
  switch (in->opcode()) {
    case HloOpcode::kCompare:
      if (nops == 2 && type_of(0) != type_of(1)) return false;
      break;
    case HloOpcode::kSelect:
      if (nops == 3 && (type_of(0) != PrimitiveType::PRED || type_of(1) != type ||
                        type_of(2) != type)) {
        return false;
      }
      break;
    case HloOpcode::kConvert:
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
      break;
    default:
      for (size_t k = 0; k < nops; ++k) {
        if (type_of(k) != type) return false;
      }
  }
  return true;
}

}  // namespace

std::optional<ScalarProgram> ScalarProgram::Compile(const HloComputation& c) {
  ScalarProgram p;
  absl::flat_hash_map<const HloInstruction*, int32_t> reg;
  for (const HloInstruction* in : c.MakeInstructionPostOrder()) {
    if (!IsScalarOfUsableType(in->shape())) return std::nullopt;
    Step s{};
    s.type = in->shape().element_type;
    // Every operand is an earlier step.
    const size_t nops = in->operands().size();
    std::vector<int32_t> operand_reg(nops);
    for (size_t k = 0; k < nops; ++k) {
      auto it = reg.find(in->operand(k));
      if (it == reg.end()) return std::nullopt;
      operand_reg[k] = it->second;
    }
    if (nops > 0) s.from = in->operand(0)->shape().element_type;
    if (!OperandTypesAsVerified(in, s.type)) return std::nullopt;
    std::optional<Step> step = CompileStep(in, operand_reg, s);
    if (!step.has_value()) return std::nullopt;
    reg[in] = static_cast<int32_t>(p.steps_.size());
    p.steps_.push_back(*step);
  }
  if (p.steps_.empty() || reg.find(c.root()) == reg.end() ||
      reg[c.root()] != static_cast<int32_t>(p.steps_.size()) - 1) {
    return std::nullopt;
  }
  p.regs_.resize(p.steps_.size());
  p.SortStepsBySide();
  return p;
}

std::optional<ScalarProgram::Step> ScalarProgram::CompileStep(
    const HloInstruction* in, const std::vector<int32_t>& operand_reg, Step s) {
  const size_t nops = in->operands().size();
  switch (in->opcode()) {
    case HloOpcode::kParameter:
      s.kind = Kind::kParam;
      s.a = static_cast<int32_t>(in->parameter_number);
      break;
    case HloOpcode::kConstant: {
      auto v = ops::FromLiteral(*in->literal, in->shape());
      if (!v.ok() || v->size() != 1) return std::nullopt;
      s.kind = Kind::kConst;
      if (IsIntLike(s.type)) {
        s.ci = v->GetInt(0);
      } else {
        s.cd = v->GetDouble(0);
      }
      break;
    }
    case HloOpcode::kConvert:
      if (nops != 1) return std::nullopt;
      s.kind = Kind::kConvert;
      s.a = operand_reg[0];
      break;
    case HloOpcode::kBitcastConvert:
      if (nops != 1 || BitWidth(s.type) != BitWidth(s.from) || s.type == PrimitiveType::PRED ||
          s.from == PrimitiveType::PRED) {
        return std::nullopt;
      }
      s.kind = Kind::kBitcast;
      s.a = operand_reg[0];
      break;
    case HloOpcode::kCompare:
      if (nops != 2 || !in->comparison_direction.has_value()) return std::nullopt;
      s.kind = Kind::kCompare;
      s.dir = *in->comparison_direction;
      s.total_order = in->comparison_type() == "TOTALORDER";
      s.a = operand_reg[0];
      s.b = operand_reg[1];
      break;
    case HloOpcode::kSelect:
      if (nops != 3) return std::nullopt;
      s.kind = Kind::kSelect;
      s.a = operand_reg[0];
      s.b = operand_reg[1];
      s.c = operand_reg[2];
      break;
    case HloOpcode::kNot:
    case HloOpcode::kNegate:
    case HloOpcode::kAbs:
      if (nops != 1 || (in->opcode() == HloOpcode::kNot && !IsIntLike(s.type))) return std::nullopt;
      s.kind = Kind::kUnary;
      s.op = in->opcode();
      s.a = operand_reg[0];
      break;
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kMultiply:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
    case HloOpcode::kXor:
      if (nops != 2) return std::nullopt;
      if (!IsIntLike(s.type) &&
          (in->opcode() == HloOpcode::kAnd || in->opcode() == HloOpcode::kOr ||
           in->opcode() == HloOpcode::kXor)) {
        return std::nullopt;
      }
      s.kind = Kind::kBinary;
      s.op = in->opcode();
      s.a = operand_reg[0];
      s.b = operand_reg[1];
      break;
    default:
      return std::nullopt;
  }
  return s;
}

void ScalarProgram::SortStepsBySide() {
  // Side of each step: bit 0 = reads a left (even) parameter, bit 1 = a right (odd) one.
  std::vector<uint8_t> side(steps_.size(), 0);
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& s = steps_[k];
    if (s.kind == Kind::kParam) {
      side[k] = (s.a % 2 == 0) ? 1 : 2;
    } else if (s.kind != Kind::kConst) {
      for (int32_t o : {s.a, s.b, s.c}) {
        if (o >= 0) side[k] |= side[static_cast<size_t>(o)];
      }
    }
    std::vector<int32_t>* list[] = {&const_steps_, &left_steps_, &right_steps_, &mixed_steps_};
    list[side[k]]->push_back(static_cast<int32_t>(k));
  }
}

void ScalarProgram::CacheLine(const Value* const* vals, const std::vector<int64_t>& at) const {
  const size_t nl = left_steps_.size(), nr = right_steps_.size();
  left_cache_.resize(at.size() * nl);
  right_cache_.resize(at.size() * nr);
  int64_t max_param = -1;
  for (const Step& s : steps_) {
    if (s.kind == Kind::kParam) max_param = std::max<int64_t>(max_param, s.a);
  }
  std::vector<const Value*> pv(static_cast<size_t>(max_param + 1));
  std::vector<int64_t> idx(pv.size());
  for (size_t p = 0; p < pv.size(); ++p) pv[p] = vals[p / 2];
  for (int32_t k : const_steps_) Exec(static_cast<size_t>(k), pv.data(), idx.data());
  for (size_t e = 0; e < at.size(); ++e) {
    std::fill(idx.begin(), idx.end(), at[e]);
    for (size_t q = 0; q < nl; ++q) {
      Exec(static_cast<size_t>(left_steps_[q]), pv.data(), idx.data());
      left_cache_[e * nl + q] = regs_[static_cast<size_t>(left_steps_[q])];
    }
    for (size_t q = 0; q < nr; ++q) {
      Exec(static_cast<size_t>(right_steps_[q]), pv.data(), idx.data());
      right_cache_[e * nr + q] = regs_[static_cast<size_t>(right_steps_[q])];
    }
  }
}

int64_t ScalarProgram::Compare(int64_t x, int64_t y) const {
  const size_t nl = left_steps_.size(), nr = right_steps_.size();
  const Reg* lc = left_cache_.data() + static_cast<size_t>(x) * nl;
  const Reg* rc = right_cache_.data() + static_cast<size_t>(y) * nr;
  for (size_t q = 0; q < nl; ++q) regs_[static_cast<size_t>(left_steps_[q])] = lc[q];
  for (size_t q = 0; q < nr; ++q) regs_[static_cast<size_t>(right_steps_[q])] = rc[q];
  for (int32_t k : mixed_steps_) Exec(static_cast<size_t>(k), nullptr, nullptr);
  const size_t last = steps_.size() - 1;
  return IsIntLike(steps_[last].type) ? regs_[last].i : static_cast<int64_t>(regs_[last].d);
}

void ScalarProgram::Exec(size_t k, const Value* const* vals, const int64_t* idx) const {
  Reg* r = regs_.data();
  {
    const Step& s = steps_[k];
    Reg& out = r[k];
    const bool int_result = IsIntLike(s.type);
    switch (s.kind) {
      case Kind::kParam: {
        const Value& v = *vals[s.a];
        const size_t e = static_cast<size_t>(idx[s.a]);
        switch (v.storage()) {
          case Storage::kFloat: out.d = v.f[e]; break;
          case Storage::kDouble: out.d = v.d[e]; break;
          default: out.i = v.i[e]; break;
        }
        break;
      }
      case Kind::kConst:
        out.d = s.cd;
        out.i = s.ci;
        break;
      case Kind::kConvert: {
        const Reg& x = r[s.a];
        const bool int_from = IsIntLike(s.from);
        if (int_result) {
          out.i = int_from ? WrapToType(x.i, s.type) : FloatToInteger(x.d, s.type);
        } else if (s.type == PrimitiveType::F64) {
          out.d = int_from ? IntegerToDouble(x.i, s.from) : x.d;
        } else if (!int_from && StorageFor(s.from) == Storage::kFloat) {
          out.d = RoundFloatToType(static_cast<float>(x.d), s.type);
        } else {
          out.d = static_cast<float>(RoundToType(int_from ? IntegerToDouble(x.i, s.from) : x.d, s.type));
        }
        break;
      }
      case Kind::kBitcast: {
        const Reg& x = r[s.a];
        const uint64_t u = BitsOf(x.d, x.i, s.from);
        switch (StorageFor(s.type)) {
          case Storage::kFloat:
            if (s.type == PrimitiveType::F32 || s.type == PrimitiveType::BF16) {
              const uint32_t bits = s.type == PrimitiveType::F32 ? static_cast<uint32_t>(u)
                                                                 : static_cast<uint32_t>(u) << 16;
              float f;
              std::memcpy(&f, &bits, 4);
              out.d = f;
            } else {
              out.d = static_cast<float>(DecodeFloat(static_cast<uint32_t>(u), s.type));
            }
            break;
          case Storage::kDouble: std::memcpy(&out.d, &u, 8); break;
          default: out.i = WrapToType(static_cast<int64_t>(u), s.type); break;
        }
        break;
      }
      case Kind::kCompare: {
        const Reg& x = r[s.a];
        const Reg& y = r[s.b];
        out.i = IsIntLike(s.from) ? ops::CompareInts(s.dir, x.i, y.i, s.from == PrimitiveType::U64)
                                  : ops::CompareFloats(s.dir, x.d, y.d, s.total_order);
        break;
      }
      case Kind::kSelect:
        out = r[s.a].i != 0 ? r[s.b] : r[s.c];
        break;
      case Kind::kUnary: {
        const Reg& x = r[s.a];
        if (int_result) {
          int64_t v = 0;
          switch (s.op) {
            case HloOpcode::kNot: v = s.type == PrimitiveType::PRED ? !x.i : ~x.i; break;
            case HloOpcode::kNegate: v = static_cast<int64_t>(-static_cast<uint64_t>(x.i)); break;
            default: v = x.i < 0 ? static_cast<int64_t>(-static_cast<uint64_t>(x.i)) : x.i; break;
          }
          out.i = WrapToType(v, s.type);
        } else {
          out.d = s.op == HloOpcode::kNegate ? -x.d : std::fabs(x.d);
        }
        break;
      }
      case Kind::kBinary:
        if (int_result) {
          out.i = ops::CombineInt(s.op, r[s.a].i, r[s.b].i, s.type);
        } else {
          out.d = ops::CombineFloat(s.op, r[s.a].d, r[s.b].d, s.type);
        }
        break;
    }
  }
}

}  // namespace weave::eval
