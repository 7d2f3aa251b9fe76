// Shape checks of constants, iota, partition-id/replica-id, elementwise unary and binary ops,
// select and clamp (analysis/verifier_checker.h), after XLA's ShapeInference.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {

absl::Status Checker::Constant() {
  if (!h_.literal.has_value()) return Err("has no literal");
  const Literal& lit = *h_.literal;
  if (!lit.shape.Compatible(h_.shape()) && !ShapesMatch(lit.shape, h_.shape())) {
    return Err(absl::StrCat("literal shape ", ShapeText(lit.shape), " differs from result ",
                            ShapeText(h_.shape())));
  }
  if (!lit.elided && h_.shape().IsArray() && !HasDynamicDim(h_.shape())) {
    const int64_t n = h_.shape().ElementCount();
    const int64_t have = static_cast<int64_t>(IsComplex(h_.shape().element_type)
                                                  ? lit.f.size() / 2
                                                  : lit.f.size() + lit.i.size());
    if (have != n) {
      return Err(absl::StrCat("literal has ", have, " values but shape ",
                              ShapeText(h_.shape()), " has ", n, " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::Iota() {
  RETURN_IF_ERROR(OperandCount(0));
  RETURN_IF_ERROR(ArrayResult());
  if (h_.iota_dimension < 0 || h_.iota_dimension >= std::max<int64_t>(h_.shape().rank(), 1)) {
    return Err(absl::StrCat("iota_dimension=", h_.iota_dimension, " is out of range for ",
                            ShapeText(h_.shape())));
  }
  if (h_.shape().rank() == 0) return Err("iota needs a result of rank at least 1");
  const PrimitiveType t = h_.shape().element_type;
  if (!IsInteger(t) && !IsFloatingPoint(t) && !IsComplex(t)) {
    // XLA's HandleIota: integral, floating-point or complex only (no pred).
    return Err(absl::StrCat("iota of ", std::string(PrimitiveTypeName(t)),
                            ": only integer, floating-point and complex types"));
  }
  return absl::OkStatus();
}

absl::Status Checker::Rng() {
  // XLA's HandleRng: two scalar bounds of the result's element type; rng_normal of a float type.
  RETURN_IF_ERROR(OperandCount(2));
  RETURN_IF_ERROR(ArrayResult());
  for (int64_t i = 0; i < 2; ++i) {
    if (!Op(i).IsArray() || Op(i).rank() != 0 || !TypesCompatible(Op(i).element_type, h_.shape().element_type)) {
      return Err(absl::StrCat("operand ", i, " is ", ShapeText(Op(i)), "; the bounds are scalars of the result's type ",
                              std::string(PrimitiveTypeName(h_.shape().element_type))));
    }
  }
  const PrimitiveType t = h_.shape().element_type;
  const std::string* dist = h_.GetRawAttribute("distribution");
  if (dist != nullptr && *dist == "rng_normal" && !IsFloatingPoint(t)) {
    return Err(absl::StrCat("rng_normal of ", std::string(PrimitiveTypeName(t)), ": a floating-point type only"));
  }
  if (!IsInteger(t) && !IsFloatingPoint(t) && t != PrimitiveType::PRED) {
    return Err(absl::StrCat("rng of ", std::string(PrimitiveTypeName(t)), ": integer, floating-point or pred only"));
  }
  return absl::OkStatus();
}

absl::Status Checker::IdOp() {
  RETURN_IF_ERROR(OperandCount(0));
  if (!ShapesMatch(h_.shape(), Shape::Scalar(PrimitiveType::U32))) {
    return Err(absl::StrCat("result must be u32[], got ", ShapeText(h_.shape())));
  }
  return absl::OkStatus();
}

// XLA's BitcastConvertType: the same dims when the widths agree; otherwise the narrower side is
// the wider side's shape with one more, last dimension of size wide/narrow. Pred takes no part.
absl::Status Checker::BitcastConvert() {
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  const Shape& in = Op(0);
  const Shape& out = h_.shape();
  const int wi = BitWidth(in.element_type), wo = BitWidth(out.element_type);
  if (in.element_type == PrimitiveType::PRED || out.element_type == PrimitiveType::PRED ||
      wi <= 0 || wo <= 0) {
    return Err("bitcast-convert takes numeric element types (not pred)");
  }
  if (IsComplex(in.element_type) != IsComplex(out.element_type)) {
    return Err("bitcast-convert between complex and real types");
  }
  if (wi == wo) {
    if (!DimsEqual(out.dims, in.dims)) {
      return Err(absl::StrCat("result dims ", Dims(out.dims), " differ from operand dims ",
                              Dims(in.dims)));
    }
    return absl::OkStatus();
  }
  const bool split = wi > wo;
  const int ratio = split ? wi / wo : wo / wi;
  if ((split ? wi % wo : wo % wi) != 0) return Err("the element widths are not multiples");
  std::vector<int64_t> want = split ? in.dims : out.dims;
  want.push_back(ratio);
  const std::vector<int64_t>& narrow = split ? out.dims : in.dims;
  if (!DimsEqual(narrow, want)) {
    return Err(absl::StrCat(split ? "result" : "operand", " dims ", Dims(narrow), " must be ",
                            Dims(want), ": the wider side's dims and a last dimension of ",
                            ratio));
  }
  return absl::OkStatus();
}

absl::Status Checker::Unary() {
  RETURN_IF_ERROR(OperandCount(1));
  // XLA's ShapeInference::InferUnaryOpShape: a copy has its operand's shape, a tuple's included
  // (a copy of each element).
  if (h_.opcode() == HloOpcode::kCopy && Op(0).IsTuple()) {
    if (!h_.shape().Compatible(Op(0))) {
      return Err(absl::StrCat("result shape ", ShapeText(h_.shape()),
                              " differs from operand shape ", ShapeText(Op(0))));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  if (!DimsEqual(h_.shape().dims, Op(0).dims)) {
    return Err(absl::StrCat("result dims ", Dims(h_.shape().dims), " differ from operand dims ",
                            Dims(Op(0).dims)));
  }
  const HloOpcode op = h_.opcode();
  const PrimitiveType in = Op(0).element_type, out = h_.shape().element_type;
  if (op == HloOpcode::kConvert) return absl::OkStatus();
  if (op == HloOpcode::kIsFinite) {
    if (out != PrimitiveType::PRED) return Err("result must have element type pred");
    return absl::OkStatus();
  }
  if (IsComplex(in) && (op == HloOpcode::kAbs || op == HloOpcode::kReal ||
                        op == HloOpcode::kImag)) {
    return absl::OkStatus();
  }
  if (in != out) {
    return Err(absl::StrCat("result element type ", std::string(PrimitiveTypeName(out)),
                            " differs from operand element type ",
                            std::string(PrimitiveTypeName(in))));
  }
  return absl::OkStatus();
}

absl::Status Checker::Binary() {
  RETURN_IF_ERROR(OperandCount(2));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayOperand(1));
  RETURN_IF_ERROR(ArrayResult());
  const Shape &a = Op(0), &b = Op(1);
  if (!DimsEqual(a.dims, b.dims)) {
    return Err(absl::StrCat("operand shapes ", ShapeText(a), " and ", ShapeText(b),
                            " have different dimensions"));
  }
  if (!DimsEqual(h_.shape().dims, a.dims)) {
    return Err(absl::StrCat("result dims ", Dims(h_.shape().dims), " differ from operand dims ",
                            Dims(a.dims)));
  }
  if (a.element_type != b.element_type) {
    return Err(absl::StrCat("operand element types differ: ", ShapeText(a), " vs ",
                            ShapeText(b)));
  }
  const PrimitiveType out = h_.shape().element_type;
  switch (h_.opcode()) {
    case HloOpcode::kCompare:
      if (out != PrimitiveType::PRED) {
        return Err(absl::StrCat("result must be pred, got ", ShapeText(h_.shape())));
      }
      if (!h_.comparison_direction.has_value()) return Err("missing direction=");
      return ComparisonType(a.element_type);
    case HloOpcode::kComplex:
      return absl::OkStatus();
    default:
      if (out != a.element_type) {
        return Err(absl::StrCat("result element type ", std::string(PrimitiveTypeName(out)),
                                " differs from operand element type ",
                                std::string(PrimitiveTypeName(a.element_type))));
      }
      return absl::OkStatus();
  }
}

// rng-bit-generator(state) -> (new state, data): one operand, the state kept (XLA's
// InferRngBitGeneratorShape).
absl::Status Checker::RngBitGenerator() {
  RETURN_IF_ERROR(OperandCount(1));
  const Shape& r = h_.shape();
  if (!r.IsTuple() || r.tuple_shapes.size() != 2 || !ShapesMatch(r.tuple_shapes[0], Op(0))) {
    return Err(absl::StrCat("result ", ShapeText(r), " must be (", ShapeText(Op(0)), ", data)"));
  }
  return absl::OkStatus();
}

// XLA's HandleCompare: a written `type=` fits the operands' element type (FLOAT or TOTALORDER
// for floats, SIGNED for signed integers, UNSIGNED for unsigned integers and pred).
absl::Status Checker::ComparisonType(PrimitiveType t) const {
  const std::string& type = h_.comparison_type();
  if (type.empty()) return absl::OkStatus();
  std::string want;
  if (IsFloatingPoint(t) || IsComplex(t)) {
    if (type == "FLOAT" || type == "TOTALORDER") return absl::OkStatus();
    want = "FLOAT or TOTALORDER";
  } else if (IsSignedInteger(t)) {
    if (type == "SIGNED") return absl::OkStatus();
    want = "SIGNED";
  } else if (IsUnsignedInteger(t) || t == PrimitiveType::PRED) {
    if (type == "UNSIGNED") return absl::OkStatus();
    want = "UNSIGNED";
  } else {
    return absl::OkStatus();
  }
  return Err(absl::StrCat("comparison type=", type, " does not fit operands of element type ",
                          std::string(PrimitiveTypeName(t)), " (expected ", want, ")"));
}

absl::Status Checker::Select() {
  RETURN_IF_ERROR(OperandCount(3));
  const Shape &p = Op(0), &t = Op(1), &f = Op(2);
  if (!t.IsArray() || !f.IsArray()) {
    return Err(absl::StrCat("on_true ", ShapeText(t), " and on_false ", ShapeText(f),
                            " must be arrays (XLA's select takes no tuples)"));
  }
  if (!p.IsArray() || p.element_type != PrimitiveType::PRED) {
    return Err(absl::StrCat("predicate ", ShapeText(p), " must have element type pred"));
  }
  if (!SameShape(t, f)) {
    return Err(absl::StrCat("on_true ", ShapeText(t), " and on_false ", ShapeText(f),
                            " have different shapes"));
  }
  if (t.IsArray() && p.rank() != 0 && !DimsEqual(p.dims, t.dims)) {
    return Err(absl::StrCat("predicate ", ShapeText(p), " must be a scalar or have the dims of ",
                            ShapeText(t)));
  }
  return ResultIs(t, "operand shape");
}

absl::Status Checker::Clamp() {
  RETURN_IF_ERROR(OperandCount(3));
  for (int64_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
  }
  const Shape &lo = Op(0), &x = Op(1), &hi = Op(2);
  for (const Shape* b : {&lo, &hi}) {
    if (b->element_type != x.element_type || (b->rank() != 0 && !DimsEqual(b->dims, x.dims))) {
      return Err(absl::StrCat("bound ", ShapeText(*b),
                              " must be a scalar or match the operand ", ShapeText(x)));
    }
  }
  return ResultIs(x, "operand shape");
}

}  // namespace weave::verifier_internal
