#include "passes/fp8_operand.h"

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"

namespace weave {
namespace {

bool IsFp8Array(const HloInstruction* i) {
  return i->shape().IsArray() && IsFp8(i->shape().element_type);
}

// Depth-first walk upward; `path` ends at the current node. Returns true when an FP8-typed
// instruction was reached (it is then path.back()).
bool Walk(HloInstruction* instr, std::vector<HloInstruction*>* path,
          std::unordered_set<const HloInstruction*>* visited) {
  if (!visited->insert(instr).second) return false;
  path->push_back(instr);
  if (IsFp8Array(instr)) return true;
  auto try_operand = [&](int64_t i) {
    return i < instr->operand_count() && Walk(instr->operand(i), path, visited);
  };
  bool found = false;
  switch (instr->opcode()) {
    case HloOpcode::kMultiply:
      found = try_operand(0) || try_operand(1);
      break;
    case HloOpcode::kSelect:
      found = try_operand(1) || try_operand(2);
      break;
    case HloOpcode::kDivide:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kPad:
      found = try_operand(0);
      break;
    default:
      if (instr->operand_count() == 1 && instr->called_computations().empty()) {
        found = try_operand(0);
      }
      break;
  }
  if (!found) path->pop_back();
  return found;
}

// Checks one movable op; `from` is the path operand it reads.
bool CheckMovable(HloInstruction* op, HloInstruction* from, std::string* why) {
  auto fail = [&](const std::string& reason) {
    if (why) *why = absl::StrCat("'", op->name(), "' (", std::string(HloOpcodeString(op->opcode())), ") ", reason);
    return false;
  };
  if (!IsMovableFp8Op(op->opcode())) {
    return fail("between the FP8 value and the dot is not a movable op");
  }
  if (op->opcode() != HloOpcode::kSelect && op->operand(0) != from) {
    return fail("does not read the dequantized value as operand 0");
  }
  switch (op->opcode()) {
    case HloOpcode::kBitcast:
      if (op->shape().element_type != from->shape().element_type) {
        return fail("changes the element type");
      }
      break;
    case HloOpcode::kPad:
      if (!IsBroadcastOfConstant(op->operand(1), 0.0)) return fail("pads with a non-zero value");
      break;
    case HloOpcode::kSelect: {
      // The walk reached `from` through operand 1 or 2; the other data operand must be zero.
      if (op->operand(1) == from && op->operand(2) == from) return fail("selects between two copies");
      HloInstruction* other = op->operand(1) == from ? op->operand(2) : op->operand(1);
      if (op->operand(1) != from && op->operand(2) != from) {
        return fail("does not read the dequantized value as a data operand");
      }
      if (!IsBroadcastOfConstant(other, 0.0)) return fail("selects against a non-zero value");
      break;
    }
    default:
      break;
  }
  return true;
}

}  // namespace

bool IsMovableFp8Op(HloOpcode op) {
  switch (op) {
    case HloOpcode::kBitcast:
    case HloOpcode::kBroadcast:
    case HloOpcode::kCopy:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kPad:
    case HloOpcode::kReshape:
    case HloOpcode::kSelect:
    case HloOpcode::kSlice:
    case HloOpcode::kTranspose:
      return true;
    default:
      return false;
  }
}

bool IsBroadcastOfConstant(const HloInstruction* instr, double value) {
  if (instr->opcode() == HloOpcode::kBroadcast && instr->operand_count() == 1) {
    instr = instr->operand(0);
  }
  if (instr->opcode() != HloOpcode::kConstant || !instr->literal.has_value()) return false;
  const Literal& lit = *instr->literal;
  if (lit.elided || !lit.IsScalar()) return false;
  return lit.GetAsDouble(0) == value;
}

bool ReachesFp8(HloInstruction* operand) {
  std::vector<HloInstruction*> path;
  std::unordered_set<const HloInstruction*> visited;
  return Walk(operand, &path, &visited);
}

bool MatchFp8Operand(HloInstruction* operand, Fp8OperandMatch* match, std::string* why) {
  std::vector<HloInstruction*> path;
  std::unordered_set<const HloInstruction*> visited;
  if (!Walk(operand, &path, &visited)) {
    if (why) *why = absl::StrCat("'", operand->name(), "' does not derive from an FP8 value");
    return false;
  }
  std::reverse(path.begin(), path.end());  // [fp8, n1, ..., operand]
  Fp8OperandMatch m;
  m.fp8 = path[0];
  const PrimitiveType t = m.fp8->shape().element_type;
  if (!IsDequantizableFp8(t)) {
    if (why) {
      *why = absl::StrCat("'", m.fp8->name(), "' has type ", std::string(PrimitiveTypeName(t)),
                          "; only f8e4m3fn and f8e5m2 (CUDA) and f8e4m3fnuz and f8e5m2fnuz "
                          "(ROCm) are supported");
    }
    return false;
  }
  size_t first_op = 1;
  if (path.size() == 1) {
    m.kind = Fp8OperandMatch::Kind::kDirect;
  } else {
    HloInstruction* n1 = path[1];
    if (n1->opcode() != HloOpcode::kConvert) {
      if (why) {
        *why = absl::StrCat("'", n1->name(), "' (", std::string(HloOpcodeString(n1->opcode())),
                            ") reads the FP8 value '", m.fp8->name(), "' instead of a convert");
      }
      return false;
    }
    std::optional<DequantMatch> dq;
    if (path.size() > 2) dq = MatchDequantize(path[2]);
    if (dq.has_value() && dq->convert == n1) {
      m.kind = Fp8OperandMatch::Kind::kScaled;
      m.scale = dq->scale;
      m.scale_is_divide = dq->is_divide;
      m.dequant = path[2];
      first_op = 3;
    } else {
      m.kind = Fp8OperandMatch::Kind::kUnscaled;
      m.dequant = n1;
      first_op = 2;
    }
  }
  for (size_t i = first_op; i < path.size(); ++i) {
    if (!CheckMovable(path[i], path[i - 1], why)) return false;
    m.ops.push_back(path[i]);
  }
  *match = m;
  return true;
}

}  // namespace weave
