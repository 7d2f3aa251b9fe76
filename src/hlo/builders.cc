// Typed builders (builders.h).
#include "hlo/builders.h"

#include <string>

namespace weave {

HloInstruction* AddGetTupleElement(HloComputation* c, HloInstruction* tuple, int64_t index,
                                   std::string_view name) {
  HloInstruction* g = c->AddInstruction(
      HloOpcode::kGetTupleElement, tuple->shape().tuple_shapes.at(static_cast<size_t>(index)),
      {tuple}, std::string(name));
  g->tuple_index = index;
  return g;
}

HloInstruction* AddScalarConstant(HloComputation* c, PrimitiveType t, int64_t value,
                                  std::string_view name) {
  HloInstruction* k = c->AddInstruction(HloOpcode::kConstant, Shape::Scalar(t), {}, std::string(name));
  k->literal = t == PrimitiveType::PRED || IsInteger(t)
                   ? Literal::ScalarInt(t, value)
                   : Literal::Scalar(t, static_cast<double>(value));
  return k;
}

HloInstruction* AddZeros(HloComputation* c, const Shape& shape, std::string_view name) {
  HloInstruction* zero =
      AddScalarConstant(c, shape.element_type, 0, std::string(name) + ".zero");
  return c->AddInstruction(HloOpcode::kBroadcast, shape, {zero}, std::string(name));
}

}  // namespace weave
