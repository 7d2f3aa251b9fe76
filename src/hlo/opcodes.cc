#include "hlo/opcodes.h"

#include <string>
#include <unordered_map>

namespace weave {

std::string_view HloOpcodeString(HloOpcode op) {
  switch (op) {
#define WEAVE_OPCODE_CASE(e, s) \
  case HloOpcode::e:            \
    return s;
    WEAVE_HLO_OPCODES(WEAVE_OPCODE_CASE)
#undef WEAVE_OPCODE_CASE
  }
  return "unknown";
}

std::optional<HloOpcode> ParseHloOpcode(std::string_view name) {
  static const auto* const kMap = [] {
    auto* m = new std::unordered_map<std::string_view, HloOpcode>();
#define WEAVE_OPCODE_MAP(e, s) (*m)[s] = HloOpcode::e;
    WEAVE_HLO_OPCODES(WEAVE_OPCODE_MAP)
#undef WEAVE_OPCODE_MAP
    (*m)["optimization-barrier"] = HloOpcode::kOptimizationBarrier;
    (*m)["clz"] = HloOpcode::kClz;
    return m;
  }();
  auto it = kMap->find(name);
  if (it == kMap->end()) return std::nullopt;
  return it->second;
}

bool IsElementwiseUnary(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAbs:
    case HloOpcode::kCbrt:
    case HloOpcode::kCeil:
    case HloOpcode::kClz:
    case HloOpcode::kConvert:
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kCopy:
    case HloOpcode::kCos:
    case HloOpcode::kErf:
    case HloOpcode::kExp:
    case HloOpcode::kExpm1:
    case HloOpcode::kFloor:
    case HloOpcode::kImag:
    case HloOpcode::kIsFinite:
    case HloOpcode::kLog:
    case HloOpcode::kLog1p:
    case HloOpcode::kLogistic:
    case HloOpcode::kNegate:
    case HloOpcode::kNot:
    case HloOpcode::kPopulationCount:
    case HloOpcode::kReal:
    case HloOpcode::kReducePrecision:
    case HloOpcode::kRoundNearestAfz:
    case HloOpcode::kRoundNearestEven:
    case HloOpcode::kRsqrt:
    case HloOpcode::kSign:
    case HloOpcode::kSin:
    case HloOpcode::kSqrt:
    case HloOpcode::kTan:
    case HloOpcode::kTanh:
      return true;
    default:
      return false;
  }
}

bool IsElementwiseBinary(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAdd:
    case HloOpcode::kAnd:
    case HloOpcode::kAtan2:
    case HloOpcode::kCompare:
    case HloOpcode::kComplex:
    case HloOpcode::kDivide:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kMultiply:
    case HloOpcode::kOr:
    case HloOpcode::kPower:
    case HloOpcode::kRemainder:
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArithmetic:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kSubtract:
    case HloOpcode::kXor:
    case HloOpcode::kStochasticConvert:
      return true;
    default:
      return false;
  }
}

bool IsElementwise(HloOpcode op) {
  return IsElementwiseUnary(op) || IsElementwiseBinary(op) || op == HloOpcode::kSelect ||
         op == HloOpcode::kClamp;
}

bool IsCollective(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
    case HloOpcode::kAllToAll:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
    case HloOpcode::kCollectiveBroadcast:
    case HloOpcode::kCollectiveReduce:
    case HloOpcode::kRaggedAllToAll:
      return true;
    default:
      return false;
  }
}

}  // namespace weave
