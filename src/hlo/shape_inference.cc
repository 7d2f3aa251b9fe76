// Result shapes of instructions written without one (see shape_inference.h).
#include "hlo/shape_inference.h"

#include "hlo/opcodes.h"

namespace weave {
namespace {

// The operand's shape without its layout (an inferred shape has the default one).
Shape Plain(const Shape& s) {
  if (s.IsTuple()) {
    std::vector<Shape> elements;
    for (const Shape& e : s.tuple_shapes) elements.push_back(Plain(e));
    return Shape::Tuple(std::move(elements));
  }
  Shape p = s;
  p.layout.reset();
  return p;
}

// Unary ops whose result type is not their operand's: convert and bitcast-convert name theirs,
// real and imag take a complex operand's component type.
bool SetsItsOwnType(HloOpcode op) {
  return op == HloOpcode::kConvert || op == HloOpcode::kBitcastConvert || op == HloOpcode::kReal ||
         op == HloOpcode::kImag;
}

}  // namespace

std::optional<Shape> InferResultShape(const HloInstruction& h) {
  const HloOpcode op = h.opcode();
  const int64_t n = h.operand_count();
  switch (op) {
    case HloOpcode::kTuple: {
      std::vector<Shape> elements;
      for (int64_t i = 0; i < n; ++i) elements.push_back(Plain(h.operand(i)->shape()));
      return Shape::Tuple(std::move(elements));
    }
    case HloOpcode::kGetTupleElement: {
      if (n != 1 || !h.operand(0)->shape().IsTuple()) return std::nullopt;
      const std::vector<Shape>& e = h.operand(0)->shape().tuple_shapes;
      if (h.tuple_index < 0 || h.tuple_index >= static_cast<int64_t>(e.size())) return std::nullopt;
      return Plain(e[static_cast<size_t>(h.tuple_index)]);
    }
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      return n == 0 ? std::optional<Shape>(Shape::Scalar(PrimitiveType::U32)) : std::nullopt;
    case HloOpcode::kAfterAll:
      return Shape(PrimitiveType::TOKEN, {});
    case HloOpcode::kAddDependency:
      return n == 2 ? std::optional<Shape>(Plain(h.operand(0)->shape())) : std::nullopt;
    case HloOpcode::kOptimizationBarrier:
      return n == 1 ? std::optional<Shape>(Plain(h.operand(0)->shape())) : std::nullopt;
    case HloOpcode::kSelect:
      if (n != 3 || !h.operand(1)->shape().IsArray()) return std::nullopt;
      return Plain(h.operand(1)->shape());
    case HloOpcode::kClamp:
      if (n != 3 || !h.operand(1)->shape().IsArray()) return std::nullopt;
      return Plain(h.operand(1)->shape());
    default:
      break;
  }
  if (IsElementwiseUnary(op) || op == HloOpcode::kIsFinite) {
    if (n != 1 || !h.operand(0)->shape().IsArray()) return std::nullopt;
    Shape s = Plain(h.operand(0)->shape());
    if (SetsItsOwnType(op)) return std::nullopt;
    // abs of a complex value is real (c64 -> f32): not inferred here.
    if (op == HloOpcode::kAbs && IsComplex(s.element_type)) return std::nullopt;
    if (op == HloOpcode::kIsFinite) s.element_type = PrimitiveType::PRED;
    return s;
  }
  if (IsElementwiseBinary(op)) {
    if (n != 2 || !h.operand(0)->shape().IsArray()) return std::nullopt;
    const Shape& a = h.operand(0)->shape();
    const Shape& b = h.operand(1)->shape();
    // complex and stochastic-convert make a type of their own.
    if (op == HloOpcode::kComplex || op == HloOpcode::kStochasticConvert) return std::nullopt;
    if (a.dims != b.dims || (op != HloOpcode::kCompare && a.element_type != b.element_type)) {
      return std::nullopt;
    }
    Shape s = Plain(a);
    if (op == HloOpcode::kCompare) s.element_type = PrimitiveType::PRED;
    return s;
  }
  return std::nullopt;
}

}  // namespace weave
