// Result shapes the parser infers for instructions written without one, as XLA's HLO parser does
// for the ops its shape inference covers (xla/hlo/parser/hlo_parser.cc CanInferShape, and
// ShapeInference::Infer{Unary,Binary,Ternary,Variadic}OpShape): `ROOT t = tuple(a, b)`,
// `m = minimum(a, b)`, `c = copy(x)`.
//
// Covered: tuple; get-tuple-element (its `index=`); copy and the other same-type elementwise
// unary ops (abs, negate, exp, ...; not convert, bitcast-convert, real/imag, is-finite, which
// change the type, see below); elementwise binary ops on operands of one shape (compare and the
// predicates give pred); select (its on-true shape); clamp (its operand); is-finite (pred);
// partition-id and replica-id (u32[]); after-all (token[]); add-dependency and opt-barrier
// (their operand's shape); dot (batch dims, then the lhs and the rhs free dims, on operands of one
// element type); call (its computation's root), conditional (its first branch's root) and while
// (its body's root). Every inferred array shape has the default layout.
#pragma once

#include <optional>

#include "hlo/ir.h"

namespace weave {

// The result shape of `h` (its opcode, operands and already-parsed attributes) by XLA's shape
// inference, for the opcodes listed above; nullopt for any other opcode, or when the operands do
// not allow one (a binary op on different shapes, an index out of a tuple's range, ...): the
// parser then asks for the shape to be written.
std::optional<Shape> InferResultShape(const HloInstruction& h);

}  // namespace weave
