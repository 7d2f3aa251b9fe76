// A small pattern matcher for HLO in the spirit of XLA's `pattern_matcher.h`, so that a pass can
// be written like the diagram in its comment:
//
//   HloInstruction *dot, *x, *w;
//   if (Match(instr, m::Dot(&dot, m::Convert(m::Op(&x).WithElementType(PrimitiveType::F8E4M3FN)),
//                           m::Op(&w)).WithOneUser())) { ... }
//
// A Pattern is an immutable value: a list of checks on one instruction (opcode, operands matched
// by sub-patterns, predicates) plus optional captures. `WithX(...)` returns a new pattern with one
// more check. Captures (`HloInstruction**` or `const HloInstruction**`) are written when the
// pattern they belong to matches; after a failed Match their contents are unspecified.
//
// Operands: `m::Multiply(a, b)` matches operand 0 against a and operand 1 against b; the
// `...AnyOrder` forms (and `m::AnyOrder(opcode, a, b)`) also try the swapped order, for
// commutative ops. Factories without operand patterns match any operands.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hlo/ir.h"

namespace weave {

namespace m {

// A capture destination: HloInstruction** or const HloInstruction**.
template <typename T>
concept Capture = std::same_as<T, HloInstruction**> || std::same_as<T, const HloInstruction**>;

class Pattern {
 public:
  // Matches any instruction (and not null).
  Pattern() = default;

  // True if `instr` satisfies every check; then writes every capture of this pattern and of its
  // sub-patterns. False for null.
  bool Match(HloInstruction* instr) const;

  // ---- refinements (each returns a new pattern) ----
  Pattern WithOpcode(HloOpcode op) const;
  // Exactly these operands, in order.
  Pattern WithOperands(std::vector<Pattern> operands) const;
  // Operand i matches p (any operand count > i).
  Pattern WithOperand(int64_t i, Pattern p) const;
  // Exactly two operands matching (a, b) or (b, a).
  Pattern WithBinaryOperandsAnyOrder(Pattern a, Pattern b) const;
  Pattern WithOperandCount(int64_t n) const;
  Pattern WithPredicate(std::function<bool(const HloInstruction*)> fn) const;
  // Exactly one user, and not the computation root (XLA's WithOneUser counts users; the root's
  // implicit use makes a value live after the computation, so passes want it excluded).
  Pattern WithOneUser() const;
  // Exactly one use: one user that uses the value in exactly one operand slot; not the root.
  Pattern WithOneUse() const;
  Pattern WithElementType(PrimitiveType t) const;
  // Element type is f8e4m3fn or f8e5m2 (the FP8 types the rewrites accept).
  Pattern WithFp8ElementType() const;
  Pattern WithShapeScalar() const;                    // rank-0 array
  Pattern WithRank(int64_t rank) const;               // array of this rank
  Pattern WithShapeCompatibleTo(const Shape& s) const;  // dims + element type, layout ignored
  Pattern WithTupleIndex(int64_t index) const;        // get-tuple-element index
  Pattern WithName(std::string_view name) const;
  Pattern WithCustomCallTarget(std::string_view target) const;
  Pattern WithParameterNumber(int64_t n) const;
  Pattern WithComparisonDirection(ComparisonDirection d) const;

  // Also store the matched instruction in *cap.
  Pattern Capture(HloInstruction** cap) const;
  Pattern Capture(const HloInstruction** cap) const;

 private:
  struct Node {
    std::vector<std::function<bool(HloInstruction*)>> checks;
    std::vector<std::function<void(HloInstruction*)>> captures;
  };
  Pattern With(std::function<bool(HloInstruction*)> check) const;
  std::shared_ptr<const Node> node_;
};

// ---- leaves ----
inline Pattern Op() { return Pattern(); }
template <Capture C>
Pattern Op(C cap) { return Pattern().Capture(cap); }

// An instruction with opcode `op`; with operands, exactly those operands in order.
Pattern Opcode(HloOpcode op);
Pattern Opcode(HloOpcode op, std::vector<Pattern> operands);
// Binary `op` with operands (a, b) in either order.
Pattern AnyOrder(HloOpcode op, Pattern a, Pattern b);
template <Capture C>
Pattern AnyOrder(C cap, HloOpcode op, Pattern a, Pattern b) {
  return AnyOrder(op, std::move(a), std::move(b)).Capture(cap);
}

// parameter, optionally with its number: m::Parameter(), m::Parameter(&p), m::Parameter(2),
// m::Parameter(&p, 2).
inline Pattern Parameter() { return Opcode(HloOpcode::kParameter); }
inline Pattern Parameter(int64_t n) { return Parameter().WithParameterNumber(n); }
template <Capture C>
Pattern Parameter(C cap) { return Parameter().Capture(cap); }
template <Capture C>
Pattern Parameter(C cap, int64_t n) { return Parameter(n).Capture(cap); }

// constant; ConstantScalar additionally requires a rank-0 shape.
inline Pattern Constant() { return Opcode(HloOpcode::kConstant); }
template <Capture C>
Pattern Constant(C cap) { return Constant().Capture(cap); }
inline Pattern ConstantScalar() { return Constant().WithShapeScalar(); }
template <Capture C>
Pattern ConstantScalar(C cap) { return ConstantScalar().Capture(cap); }
// A constant whose every element equals v (exact literal values; elided constants never match).
Pattern ConstantEffectiveScalar(double v);

// get-tuple-element of a tuple-shaped operand, optionally with its index.
inline Pattern GetTupleElement() { return Opcode(HloOpcode::kGetTupleElement); }
inline Pattern GetTupleElement(Pattern tuple) {
  return Opcode(HloOpcode::kGetTupleElement, {std::move(tuple)});
}
inline Pattern GetTupleElement(Pattern tuple, int64_t index) {
  return GetTupleElement(std::move(tuple)).WithTupleIndex(index);
}
template <Capture C>
Pattern GetTupleElement(C cap, Pattern tuple) { return GetTupleElement(std::move(tuple)).Capture(cap); }
template <Capture C>
Pattern GetTupleElement(C cap, Pattern tuple, int64_t index) {
  return GetTupleElement(std::move(tuple), index).Capture(cap);
}

// Nullary ops.
#define WEAVE_M_NULLARY(Name, opcode)                                   \
  inline Pattern Name() { return Opcode(HloOpcode::opcode); }           \
  template <Capture C>                                                  \
  Pattern Name(C cap) { return Name().Capture(cap); }
WEAVE_M_NULLARY(Iota, kIota)
WEAVE_M_NULLARY(PartitionId, kPartitionId)
WEAVE_M_NULLARY(ReplicaId, kReplicaId)
#undef WEAVE_M_NULLARY

// Unary ops: Name(), Name(&cap), Name(operand), Name(&cap, operand).
#define WEAVE_M_UNARY(Name, opcode)                                               \
  inline Pattern Name() { return Opcode(HloOpcode::opcode); }                     \
  inline Pattern Name(Pattern a) { return Opcode(HloOpcode::opcode, {std::move(a)}); } \
  template <Capture C>                                                            \
  Pattern Name(C cap) { return Name().Capture(cap); }                             \
  template <Capture C>                                                            \
  Pattern Name(C cap, Pattern a) { return Name(std::move(a)).Capture(cap); }
WEAVE_M_UNARY(Abs, kAbs)
WEAVE_M_UNARY(AllGather, kAllGather)
WEAVE_M_UNARY(AllReduce, kAllReduce)
WEAVE_M_UNARY(AllToAll, kAllToAll)
WEAVE_M_UNARY(Bitcast, kBitcast)
WEAVE_M_UNARY(Broadcast, kBroadcast)
WEAVE_M_UNARY(CollectivePermute, kCollectivePermute)
WEAVE_M_UNARY(Convert, kConvert)
WEAVE_M_UNARY(Copy, kCopy)
WEAVE_M_UNARY(Exp, kExp)
WEAVE_M_UNARY(Negate, kNegate)
WEAVE_M_UNARY(OptimizationBarrier, kOptimizationBarrier)
WEAVE_M_UNARY(Reduce, kReduce)
WEAVE_M_UNARY(ReduceScatter, kReduceScatter)
WEAVE_M_UNARY(Reshape, kReshape)
WEAVE_M_UNARY(Slice, kSlice)
WEAVE_M_UNARY(Sqrt, kSqrt)
WEAVE_M_UNARY(Transpose, kTranspose)
WEAVE_M_UNARY(While, kWhile)
#undef WEAVE_M_UNARY

// Binary ops: Name(), Name(&cap), Name(a, b), Name(&cap, a, b), and for every binary op also
// NameAnyOrder(a, b) / NameAnyOrder(&cap, a, b).
#define WEAVE_M_BINARY(Name, opcode)                                                      \
  inline Pattern Name() { return Opcode(HloOpcode::opcode); }                             \
  inline Pattern Name(Pattern a, Pattern b) {                                             \
    return Opcode(HloOpcode::opcode, {std::move(a), std::move(b)});                       \
  }                                                                                       \
  template <Capture C>                                                                    \
  Pattern Name(C cap) { return Name().Capture(cap); }                                     \
  template <Capture C>                                                                    \
  Pattern Name(C cap, Pattern a, Pattern b) {                                             \
    return Name(std::move(a), std::move(b)).Capture(cap);                                 \
  }                                                                                       \
  inline Pattern Name##AnyOrder(Pattern a, Pattern b) {                                   \
    return AnyOrder(HloOpcode::opcode, std::move(a), std::move(b));                       \
  }                                                                                       \
  template <Capture C>                                                                    \
  Pattern Name##AnyOrder(C cap, Pattern a, Pattern b) {                                   \
    return Name##AnyOrder(std::move(a), std::move(b)).Capture(cap);                       \
  }
WEAVE_M_BINARY(Add, kAdd)
WEAVE_M_BINARY(And, kAnd)
WEAVE_M_BINARY(Compare, kCompare)
WEAVE_M_BINARY(Divide, kDivide)
WEAVE_M_BINARY(Dot, kDot)
WEAVE_M_BINARY(Maximum, kMaximum)
WEAVE_M_BINARY(Minimum, kMinimum)
WEAVE_M_BINARY(Multiply, kMultiply)
WEAVE_M_BINARY(Or, kOr)
WEAVE_M_BINARY(Power, kPower)
WEAVE_M_BINARY(Remainder, kRemainder)
WEAVE_M_BINARY(Subtract, kSubtract)
#undef WEAVE_M_BINARY

// Variadic ops: Name() (any operands), Name({a, b, ...}) (exactly these), with optional capture.
#define WEAVE_M_VARIADIC(Name, opcode)                                                 \
  inline Pattern Name() { return Opcode(HloOpcode::opcode); }                          \
  inline Pattern Name(std::vector<Pattern> ops) {                                      \
    return Opcode(HloOpcode::opcode, std::move(ops));                                  \
  }                                                                                    \
  template <Capture C>                                                                 \
  Pattern Name(C cap) { return Name().Capture(cap); }                                  \
  template <Capture C>                                                                 \
  Pattern Name(C cap, std::vector<Pattern> ops) { return Name(std::move(ops)).Capture(cap); }
WEAVE_M_VARIADIC(Call, kCall)
WEAVE_M_VARIADIC(Clamp, kClamp)
WEAVE_M_VARIADIC(Concatenate, kConcatenate)
WEAVE_M_VARIADIC(Conditional, kConditional)
WEAVE_M_VARIADIC(CustomCall, kCustomCall)
WEAVE_M_VARIADIC(DynamicSlice, kDynamicSlice)
WEAVE_M_VARIADIC(DynamicUpdateSlice, kDynamicUpdateSlice)
WEAVE_M_VARIADIC(Pad, kPad)
WEAVE_M_VARIADIC(Select, kSelect)
WEAVE_M_VARIADIC(Tuple, kTuple)
#undef WEAVE_M_VARIADIC

}  // namespace m

// Matches `instr` against `pattern` (XLA's `Match`); writes captures on success.
inline bool Match(HloInstruction* instr, const m::Pattern& pattern) { return pattern.Match(instr); }
inline bool Match(const HloInstruction* instr, const m::Pattern& pattern) {
  return pattern.Match(const_cast<HloInstruction*>(instr));
}

}  // namespace weave
