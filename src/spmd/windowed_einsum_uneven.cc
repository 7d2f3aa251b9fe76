// Uneven windowed dims (see windowed_einsum_uneven.h).
#include "spmd/windowed_einsum_uneven.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spmd/windowed_einsum_plan.h"

namespace weave::spmd {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The result dim of each dim of operand `side` of `dot` (-1 for contracting dims); *batch marks
// the batch dims.
std::vector<int64_t> ResultDims(const HloInstruction& dot, int side, std::vector<bool>* batch) {
  const DotDims& dd = dot.dot_dims();
  const std::vector<int64_t>& b = side == 0 ? dd.lhs_batch : dd.rhs_batch;
  const std::vector<int64_t>& c = side == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const int64_t rank = dot.operand(side)->shape().rank();
  std::vector<int64_t> map(static_cast<size_t>(rank), -1);
  batch->assign(static_cast<size_t>(rank), false);
  for (size_t k = 0; k < b.size(); ++k) {
    map[static_cast<size_t>(b[k])] = static_cast<int64_t>(k);
    (*batch)[static_cast<size_t>(b[k])] = true;
  }
  int64_t next = static_cast<int64_t>(b.size());
  if (side == 1) {  // after the lhs's free dims
    const DotDims& d = dot.dot_dims();
    for (int64_t k = 0; k < dot.operand(0)->shape().rank(); ++k) {
      if (!Contains(d.lhs_batch, k) && !Contains(d.lhs_contracting, k)) ++next;
    }
  }
  for (int64_t k = 0; k < rank; ++k) {
    if (!Contains(b, k) && !Contains(c, k)) map[static_cast<size_t>(k)] = next++;
  }
  return map;
}

bool IsZeroScalar(const HloInstruction* v) {
  if (v->opcode() != HloOpcode::kConstant || !v->shape().IsArray() || v->shape().rank() != 0) return false;
  const Literal& l = v->literal.value_or_empty();
  return !l.elided && (l.f.empty() ? l.GetAsInt(0) == 0 : l.GetAsDouble(0) == 0.0);
}

HloInstruction* SliceOf(HloComputation* comp, HloInstruction* x, const Shape& to, const std::string& name) {
  HloInstruction* s = comp->AddInstruction(HloOpcode::kSlice, to, {x}, name);
  for (size_t d = 0; d < to.dims.size(); ++d) s->mutable_slice()->push_back(SliceDim{0, to.dims[d], 1});
  return s;
}

// AG form at operand `side` of `dot`; the new result (a slice of the wider dot) or nullptr.
absl::StatusOr<HloInstruction*> PullSliceOut(HloComputation* comp, HloInstruction* dot, int side,
                                             std::vector<std::string>* done) {
  HloInstruction* s = dot->operand(side);
  if (s->opcode() != HloOpcode::kSlice || s->operand_count() != 1) return nullptr;
  HloInstruction* ag = s->operand(0);
  if (windowed_einsum::CollectiveKind(ag) != HloOpcode::kAllGather || !ag->shape().IsArray()) return nullptr;
  const Shape& wide = ag->shape();
  int64_t trimmed = -1;
  for (size_t d = 0; d < s->slice().size(); ++d) {
    const SliceDim& sd = s->slice()[d];
    if (sd.start != 0 || sd.stride != 1) return nullptr;
    if (sd.limit == wide.dims[d]) continue;
    if (trimmed >= 0) return nullptr;
    trimmed = static_cast<int64_t>(d);
  }
  if (trimmed < 0) return nullptr;
  std::vector<bool> batch;
  const std::vector<int64_t> map = ResultDims(*dot, side, &batch);
  const int64_t out_dim = map[static_cast<size_t>(trimmed)];
  if (out_dim < 0 || batch[static_cast<size_t>(trimmed)]) return nullptr;
  Shape shape = dot->shape();
  shape.dims[static_cast<size_t>(out_dim)] = wide.dims[static_cast<size_t>(trimmed)];
  std::vector<HloInstruction*> ops = {dot->operand(0), dot->operand(1)};
  ops[static_cast<size_t>(side)] = ag;
  HloInstruction* wider = comp->AddInstruction(dot->CloneWithNewOperands(shape, ops, ".padded"));
  HloInstruction* cut = SliceOf(comp, wider, dot->shape(), absl::StrCat(dot->name(), ".unpad"));
  done->push_back(absl::StrCat("'", dot->name(), "': uneven gathered dim ", trimmed, " (",
                               s->shape().dims[static_cast<size_t>(trimmed)], " of ",
                               wide.dims[static_cast<size_t>(trimmed)],
                               " gathered): the dot reads the all-gather and its result drops the padding"));
  return cut;
}

// RS form at `pad` (its operand a dot); the new value for the pad's users or nullptr.
absl::StatusOr<HloInstruction*> PushPadIn(HloComputation* comp, HloInstruction* pad,
                                          std::vector<std::string>* done) {
  HloInstruction* dot = pad->operand(0);
  if (dot->opcode() != HloOpcode::kDot || dot->user_count() != 1 || dot->operand_count() != 2 ||
      !IsZeroScalar(pad->operand(1))) {
    return nullptr;
  }
  std::vector<std::vector<PadDim>> pads(2);
  std::vector<bool> padded(2, false);
  for (int side = 0; side < 2; ++side) {
    pads[static_cast<size_t>(side)].assign(static_cast<size_t>(dot->operand(side)->shape().rank()), PadDim{0, 0, 0});
  }
  std::vector<std::vector<int64_t>> maps(2);
  std::vector<std::vector<bool>> batch(2);
  for (int side = 0; side < 2; ++side) maps[static_cast<size_t>(side)] = ResultDims(*dot, side, &batch[static_cast<size_t>(side)]);
  for (size_t o = 0; o < pad->padding().size(); ++o) {
    const PadDim& p = pad->padding()[o];
    if (p.lo == 0 && p.hi == 0 && p.interior == 0) continue;
    if (p.lo != 0 || p.hi < 0 || p.interior != 0) return nullptr;
    bool found = false;
    for (int side = 0; side < 2 && !found; ++side) {
      const std::vector<int64_t>& m = maps[static_cast<size_t>(side)];
      for (size_t d = 0; d < m.size(); ++d) {
        if (m[d] != static_cast<int64_t>(o)) continue;
        if (batch[static_cast<size_t>(side)][d]) return nullptr;
        pads[static_cast<size_t>(side)][d].hi = p.hi;
        padded[static_cast<size_t>(side)] = true;
        found = true;
        break;
      }
    }
    if (!found) return nullptr;
  }
  std::vector<HloInstruction*> ops = {dot->operand(0), dot->operand(1)};
  for (int side = 0; side < 2; ++side) {
    if (!padded[static_cast<size_t>(side)]) continue;
    HloInstruction* x = ops[static_cast<size_t>(side)];
    Shape ps = x->shape();
    for (size_t d = 0; d < ps.dims.size(); ++d) ps.dims[d] += pads[static_cast<size_t>(side)][d].hi;
    HloInstruction* zero = comp->AddInstruction(
        HloOpcode::kConstant, Shape::Scalar(x->shape().element_type), {}, absl::StrCat(x->name(), ".zero"));
    const PrimitiveType et = x->shape().element_type;
    zero->literal = et == PrimitiveType::PRED || IsInteger(et) ? Literal::ScalarInt(et, 0) : Literal::Scalar(et, 0);
    HloInstruction* xp = comp->AddInstruction(HloOpcode::kPad, ps, {x, zero}, absl::StrCat(x->name(), ".padded"));
    *xp->mutable_padding() = pads[static_cast<size_t>(side)];
    ops[static_cast<size_t>(side)] = xp;
  }
  HloInstruction* wider = comp->AddInstruction(dot->CloneWithNewOperands(pad->shape(), ops, ".padded"));
  done->push_back(absl::StrCat("'", dot->name(), "': the zero padding '", pad->name(),
                               "' of its result to whole blocks moves into its operands"));
  return wider;
}

}  // namespace

absl::StatusOr<int64_t> CanonicalizeUnevenWindows(HloComputation* comp, std::vector<std::string>* done) {
  int64_t rewrites = 0;
  for (HloInstruction* h : comp->MakeInstructionPostOrder()) {
    HloInstruction* replacement = nullptr;
    if (h->opcode() == HloOpcode::kDot && h->operand_count() == 2 && h->shape().IsArray()) {
      for (int side = 0; side < 2 && replacement == nullptr; ++side) {
        absl::StatusOr<HloInstruction*> r = PullSliceOut(comp, h, side, done);
        if (!r.ok()) return r.status();
        replacement = *r;
      }
    } else if (h->opcode() == HloOpcode::kPad && h->operand_count() == 2 && h->user_count() > 0) {
      bool feeds_reduction = true;
      for (const HloInstruction* u : h->users()) {
        const HloOpcode k = windowed_einsum::CollectiveKind(u);
        feeds_reduction &= k == HloOpcode::kReduceScatter || k == HloOpcode::kAllReduce;
      }
      if (feeds_reduction) {
        absl::StatusOr<HloInstruction*> r = PushPadIn(comp, h, done);
        if (!r.ok()) return r.status();
        replacement = *r;
      }
    }
    if (replacement == nullptr) continue;
    const bool root = h->IsRoot();
    if (absl::Status st = h->ReplaceAllUsesWith(replacement); !st.ok()) return st;
    if (root) comp->set_root(replacement);
    ++rewrites;
    // The replaced dot (or pad and its dot) and a slice nothing else reads go now, so that the
    // decomposer's sweep never meets them.
    std::vector<HloInstruction*> dead = {h};
    for (HloInstruction* o : h->operands()) {
      if (o->opcode() == HloOpcode::kSlice || o->opcode() == HloOpcode::kDot) dead.push_back(o);
    }
    for (HloInstruction* d : dead) {
      if (d->user_count() == 0 && !d->IsRoot()) {
        if (absl::Status st = comp->RemoveInstruction(d); !st.ok()) return st;
      }
    }
  }
  return rewrites;
}

}  // namespace weave::spmd
