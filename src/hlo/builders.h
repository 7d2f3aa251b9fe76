// Typed builders for the instructions passes add most often. Each adds one instruction to a
// computation with the attributes its opcode needs and its result shape derived from its
// operands, as XLA's HloInstruction::Create* factories do; the printer decides which attributes
// to print (a pass never sets has_dimensions_attr).
//
// Names are the caller's, taken as given: HloComputation::AddInstruction makes them unique.
#pragma once

#include <cstdint>
#include <string_view>

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

// An array of `shape` filled with zeros (false for pred): the scalar constant `<name>.zero`
// broadcast (no dimensions) to `shape`, named `name`. Returns the broadcast.
HloInstruction* AddZeros(HloComputation* c, const Shape& shape, std::string_view name);

}  // namespace weave
