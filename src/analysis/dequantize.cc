#include "analysis/dequantize.h"

#include <string>

#include "hlo/builders.h"

namespace weave {

bool IsDequantizableFp8(PrimitiveType t) {
  return t == PrimitiveType::F8E4M3FN || t == PrimitiveType::F8E5M2 ||
         t == PrimitiveType::F8E4M3FNUZ || t == PrimitiveType::F8E5M2FNUZ;
}

bool IsDequantWideType(PrimitiveType t) {
  return t == PrimitiveType::BF16 || t == PrimitiveType::F16 || t == PrimitiveType::F32;
}

bool IsWindowedEinsumFp8Pair(PrimitiveType a, PrimitiveType b) {
  using T = PrimitiveType;
  return (a == T::F8E4M3FN && (b == T::F8E4M3FN || b == T::F8E5M2)) ||
         (a == T::F8E5M2 && b == T::F8E4M3FN) ||
         (a == T::F8E4M3FNUZ && (b == T::F8E4M3FNUZ || b == T::F8E5M2FNUZ)) ||
         (a == T::F8E5M2FNUZ && b == T::F8E4M3FNUZ);
}

namespace {

bool SameDims(const Shape& a, const Shape& b) { return a.IsArray() && b.IsArray() && a.dims == b.dims; }

// Fills m from a candidate (convert, broadcast) pair of `root`; false if they do not fit.
bool FillMatch(HloInstruction* root, HloInstruction* cvt, HloInstruction* bc, bool divide,
               DequantMatch* m) {
  if (cvt->opcode() != HloOpcode::kConvert || bc->opcode() != HloOpcode::kBroadcast) return false;
  if (cvt->operand_count() != 1 || bc->operand_count() != 1) return false;
  HloInstruction* q = cvt->operand(0);
  if (!q->shape().IsArray() || !IsDequantizableFp8(q->shape().element_type)) return false;
  const PrimitiveType wide = root->shape().element_type;
  if (!root->shape().IsArray() || !IsFloatingPoint(wide) || IsFp8(wide)) return false;
  if (cvt->shape().element_type != wide || bc->shape().element_type != wide) return false;
  if (!SameDims(root->shape(), cvt->shape()) || !SameDims(root->shape(), bc->shape()) ||
      !SameDims(root->shape(), q->shape())) {
    return false;
  }
  m->root = root;
  m->q = q;
  m->convert = cvt;
  m->broadcast = bc;
  m->scale = bc->operand(0);
  m->is_divide = divide;
  m->fp8_type = q->shape().element_type;
  m->wide_type = wide;
  return true;
}

}  // namespace

std::optional<DequantMatch> MatchDequantize(HloInstruction* instr) {
  if (instr == nullptr || instr->operand_count() != 2) return std::nullopt;
  DequantMatch m;
  if (instr->opcode() == HloOpcode::kMultiply) {
    if (FillMatch(instr, instr->operand(0), instr->operand(1), false, &m)) return m;
    if (FillMatch(instr, instr->operand(1), instr->operand(0), false, &m)) return m;
  } else if (instr->opcode() == HloOpcode::kDivide) {
    if (FillMatch(instr, instr->operand(0), instr->operand(1), true, &m)) return m;
  }
  return std::nullopt;
}

bool IsScalarScale(const DequantMatch& m) {
  return m.scale != nullptr && m.scale->shape().IsArray() && m.scale->shape().rank() == 0 &&
         m.scale->shape().element_type == m.wide_type && m.broadcast != nullptr &&
         m.broadcast->dimensions.empty();
}

HloInstruction* BuildDequantize(HloComputation* comp, HloInstruction* q, HloInstruction* scale,
                                bool divide, PrimitiveType wide, const Shape& shape,
                                const std::vector<int64_t>& broadcast_dims) {
  Shape out = shape.WithElementType(wide);
  const std::string base = q->name() + ".dq";
  HloInstruction* cvt = comp->AddInstruction(HloOpcode::kConvert, out, {q}, base + ".cvt");
  HloInstruction* bc = AddBroadcast(comp, scale, out, broadcast_dims, base + ".bcast");
  return comp->AddInstruction(divide ? HloOpcode::kDivide : HloOpcode::kMultiply, out, {cvt, bc},
                              base);
}

HloInstruction* StripDequantizeAndViews(HloInstruction* v, bool through_pad) {
  for (int guard = 0; guard < 64 && v != nullptr; ++guard) {
    if (auto m = MatchDequantize(v)) {
      v = m->q;
      continue;
    }
    switch (v->opcode()) {
      case HloOpcode::kPad:
        if (!through_pad) return v;
        [[fallthrough]];
      case HloOpcode::kReshape:
      case HloOpcode::kBitcast:
      case HloOpcode::kTranspose:
      case HloOpcode::kCopy:
      case HloOpcode::kConvert:
        if (v->operand_count() < 1) return v;
        v = v->operand(0);
        continue;
      default:
        return v;
    }
  }
  return v;
}

}  // namespace weave
