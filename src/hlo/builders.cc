// Typed builders (builders.h).
#include "hlo/builders.h"

#include <string>

#include "hlo/dot_dims.h"

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
  return AddBroadcast(c, zero, shape, {}, name);
}

HloInstruction* AddBroadcast(HloComputation* c, HloInstruction* operand, const Shape& shape,
                             std::vector<int64_t> dimensions, std::string_view name) {
  HloInstruction* b = c->AddInstruction(HloOpcode::kBroadcast, shape, {operand}, name);
  b->dimensions = std::move(dimensions);
  return b;
}

namespace {

HloInstruction* AddDotOfShape(HloComputation* c, HloInstruction* lhs, HloInstruction* rhs,
                              const DotDims& dims, Shape shape, std::string_view name) {
  HloInstruction* d = c->AddInstruction(HloOpcode::kDot, std::move(shape), {lhs, rhs}, name);
  d->set_dot_dims(dims);
  return d;
}

}  // namespace

HloInstruction* AddDot(HloComputation* c, HloInstruction* lhs, HloInstruction* rhs,
                       const DotDims& dims, PrimitiveType t, std::string_view name) {
  return AddDotOfShape(c, lhs, rhs, dims, DotResultShape(lhs->shape(), rhs->shape(), dims, t),
                       name);
}

HloInstruction* AddDot(HloComputation* c, HloInstruction* lhs, HloInstruction* rhs,
                       const DotDims& dims, PrimitiveType t, std::string_view name,
                       std::optional<Layout> layout) {
  Shape shape = DotResultShape(lhs->shape(), rhs->shape(), dims, t);
  shape.layout = std::move(layout);
  return AddDotOfShape(c, lhs, rhs, dims, std::move(shape), name);
}

std::unique_ptr<HloInstruction> CreateDot(HloInstruction* lhs, HloInstruction* rhs,
                                          const DotDims& dims, PrimitiveType t,
                                          std::optional<Layout> layout) {
  Shape shape = DotResultShape(lhs->shape(), rhs->shape(), dims, t);
  shape.layout = std::move(layout);
  std::unique_ptr<HloInstruction> d =
      HloInstruction::Create(HloOpcode::kDot, std::move(shape), {lhs, rhs});
  d->set_dot_dims(dims);
  return d;
}

}  // namespace weave
