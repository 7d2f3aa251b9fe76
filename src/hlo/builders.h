// Typed builders for the instructions passes add most often. Each adds one instruction to a
// computation with the attributes its opcode needs and its result shape derived from its
// operands, as XLA's HloInstruction::Create* factories do; the printer decides which attributes
// to print (a pass never sets has_dimensions_attr).
//
// Names are the caller's, taken as given: HloComputation::AddInstruction makes them unique.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "hlo/ir.h"

namespace weave {

// get-tuple-element(tuple), index=`index`, with the element's shape. `tuple` must be
// tuple-shaped with more than `index` elements (std::out_of_range otherwise: a caller's bug).
HloInstruction* AddGetTupleElement(HloComputation* c, HloInstruction* tuple, int64_t index,
                                   std::string_view name);

// A scalar constant of type `t` holding `value`: exactly for pred and integer types, as the
// double nearest `value` for floating types.
HloInstruction* AddScalarConstant(HloComputation* c, PrimitiveType t, int64_t value,
                                  std::string_view name);

// broadcast(operand) to `shape` (its dims and layout; its element type is the operand's), with
// `dimensions` mapping operand dim i to result dim dimensions[i] (empty for a scalar operand).
HloInstruction* AddBroadcast(HloComputation* c, HloInstruction* operand, const Shape& shape,
                             std::vector<int64_t> dimensions, std::string_view name);

// An array of `shape` filled with zeros (false for pred): the scalar constant `<name>.zero`
// broadcast (no dimensions) to `shape`, named `name`. Returns the broadcast.
HloInstruction* AddZeros(HloComputation* c, const Shape& shape, std::string_view name);

// dot(lhs, rhs) with dot dims `dims`, its result of element type `t` shaped as XLA infers it
// (DotResultShape in hlo/dot_dims.h: batch, lhs free, rhs free dims) with the default descending
// layout, or exactly `layout` when given (std::nullopt: none, as a shape parsed without one; so a
// caller copying another instruction's layout passes its shape().layout). The dims must be within
// the operands' ranks; that they match in size is the verifier's to check. CreateDot makes the
// same dot free-standing and unnamed.
HloInstruction* AddDot(HloComputation* c, HloInstruction* lhs, HloInstruction* rhs,
                       const DotDims& dims, PrimitiveType t, std::string_view name);
HloInstruction* AddDot(HloComputation* c, HloInstruction* lhs, HloInstruction* rhs,
                       const DotDims& dims, PrimitiveType t, std::string_view name,
                       std::optional<Layout> layout);
std::unique_ptr<HloInstruction> CreateDot(HloInstruction* lhs, HloInstruction* rhs,
                                          const DotDims& dims, PrimitiveType t,
                                          std::optional<Layout> layout);

}  // namespace weave
