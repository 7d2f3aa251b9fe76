// Result shapes of instructions written without one (see shape_inference.h).
#include "hlo/shape_inference.h"

#include <algorithm>

#include "hlo/dot_dims.h"
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

// Whether `dims` are distinct dims of a rank-`rank` operand.
bool ValidDims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

// dot: the batch dims (in lhs_batch order), then the lhs free dims, then the rhs free dims, each
// in increasing order; the operands' element type (operands of two types: not inferred). The
// paired batch and contracting dims must have the same sizes.
std::optional<Shape> InferDot(const HloInstruction& h) {
  if (h.operand_count() != 2) return std::nullopt;
  const Shape& lhs = h.operand(0)->shape();
  const Shape& rhs = h.operand(1)->shape();
  if (!lhs.IsArray() || !rhs.IsArray() || lhs.element_type != rhs.element_type) {
    return std::nullopt;
  }
  const DotDims& d = h.dot_dims();
  if (d.lhs_batch.size() != d.rhs_batch.size() ||
      d.lhs_contracting.size() != d.rhs_contracting.size()) {
    return std::nullopt;
  }
  std::vector<int64_t> lhs_used = d.lhs_batch, rhs_used = d.rhs_batch;
  lhs_used.insert(lhs_used.end(), d.lhs_contracting.begin(), d.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), d.rhs_contracting.begin(), d.rhs_contracting.end());
  if (!ValidDims(lhs_used, lhs.rank()) || !ValidDims(rhs_used, rhs.rank())) return std::nullopt;
  auto size_of = [](const Shape& s, int64_t dim) { return s.dims[static_cast<size_t>(dim)]; };
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (size_of(lhs, d.lhs_batch[i]) != size_of(rhs, d.rhs_batch[i])) return std::nullopt;
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (size_of(lhs, d.lhs_contracting[i]) != size_of(rhs, d.rhs_contracting[i])) {
      return std::nullopt;
    }
  }
  std::vector<int64_t> dims;
  std::vector<bool> dynamic;
  auto add = [&](const Shape& s, int64_t dim) {
    dims.push_back(size_of(s, dim));
    dynamic.push_back(static_cast<size_t>(dim) < s.dynamic.size() && s.dynamic[static_cast<size_t>(dim)]);
  };
  for (int64_t b : d.lhs_batch) add(lhs, b);
  for (int64_t f : DotFreeDims(lhs.rank(), d.lhs_batch, d.lhs_contracting)) add(lhs, f);
  for (int64_t f : DotFreeDims(rhs.rank(), d.rhs_batch, d.rhs_contracting)) add(rhs, f);
  Shape out(lhs.element_type, std::move(dims));
  if (std::find(dynamic.begin(), dynamic.end(), true) != dynamic.end()) {
    out.dynamic = std::move(dynamic);
  }
  return Plain(out);
}

// The root shape of called computation `i` (call: to_apply; conditional: the first branch; while:
// the body).
std::optional<Shape> CalleeRootShape(const HloInstruction& h, size_t i) {
  const auto& called = h.called_computations();
  if (called.size() <= i || called[i] == nullptr || called[i]->root() == nullptr) {
    return std::nullopt;
  }
  return Plain(called[i]->root()->shape());
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
    case HloOpcode::kDot:
      return InferDot(h);
    case HloOpcode::kCall:
      return h.called_computations().size() == 1 ? CalleeRootShape(h, 0) : std::nullopt;
    case HloOpcode::kConditional:
      return CalleeRootShape(h, 0);
    case HloOpcode::kWhile:
      return h.called_computations().size() == 2 ? CalleeRootShape(h, 1) : std::nullopt;
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
