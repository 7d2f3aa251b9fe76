// Uneven windowed dims (see windowed_einsum_uneven.h).
#include "windowed_einsum/windowed_einsum_uneven.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "hlo/builders.h"
#include "spmd/partition_ring.h"
#include "windowed_einsum/windowed_einsum_plan.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

struct RingContext {
  int64_t num_partitions = 1, replica_count = 1;
};

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

// The all-gather's shard with the elements past `valid` along the gathered dim set to zero: a
// device's shard starts at (its index in its group) * T of the gathered dim (XLA's all-gather
// concatenates in group order). nullptr when the groups cannot be read.
HloInstruction* ZeroPastEnd(HloComputation* comp, HloInstruction* ag, int64_t dim, int64_t valid,
                            const RingContext& ring) {
  if (ag->opcode() != HloOpcode::kAllGather || ag->operand_count() != 1) return nullptr;
  absl::StatusOr<PartitionRing> r = AnalyzePartitionRing(*ag, ring.num_partitions, ring.replica_count);
  if (!r.ok()) return nullptr;
  HloInstruction* x = ag->operand(0);
  const Shape& xs = x->shape();
  const int64_t t = xs.dims[static_cast<size_t>(dim)];
  std::vector<int64_t> starts;
  for (int64_t p = 0; p < ring.num_partitions; ++p) starts.push_back(r->index_in_group[static_cast<size_t>(p)] * t);
  const std::string base = absl::StrCat(ag->name(), ".valid");
  HloInstruction* table = comp->AddInstruction(HloOpcode::kConstant, Shape(PrimitiveType::S32, {ring.num_partitions}), {}, base);
  table->literal = Literal::Vector(PrimitiveType::S32, starts);
  HloInstruction* pid = comp->AddInstruction(HloOpcode::kPartitionId, Shape::Scalar(PrimitiveType::U32), {}, base);
  HloInstruction* at = comp->AddInstruction(HloOpcode::kDynamicSlice, Shape(PrimitiveType::S32, {1}), {table, pid}, base);
  at->set_dynamic_slice_sizes({1});
  HloInstruction* start = comp->AddInstruction(HloOpcode::kReshape, Shape::Scalar(PrimitiveType::S32), {at}, base);
  const Shape s32(PrimitiveType::S32, {t}), pred(PrimitiveType::PRED, {t});
  HloInstruction* iota = comp->AddInstruction(HloOpcode::kIota, s32, {}, base);
  iota->iota_dimension = 0;
  HloInstruction* sb = AddBroadcast(comp, start, s32, {}, base);
  HloInstruction* index = comp->AddInstruction(HloOpcode::kAdd, s32, {iota, sb}, base);
  HloInstruction* limit = comp->AddInstruction(HloOpcode::kConstant, Shape::Scalar(PrimitiveType::S32), {}, base);
  limit->literal = Literal::ScalarInt(PrimitiveType::S32, valid);
  HloInstruction* lb = AddBroadcast(comp, limit, s32, {}, base);
  HloInstruction* in = comp->AddInstruction(HloOpcode::kCompare, pred, {index, lb}, base);
  in->comparison_direction = ComparisonDirection::kLt;
  HloInstruction* mask = AddBroadcast(comp, in, Shape(PrimitiveType::PRED, xs.dims), {dim}, base);
  HloInstruction* zero = AddScalarConstant(comp, xs.element_type, 0, base);
  HloInstruction* zeros = AddBroadcast(comp, zero, xs, {}, base);
  HloInstruction* masked = comp->AddInstruction(HloOpcode::kSelect, xs, {mask, x, zeros}, base);
  return comp->AddInstruction(ag->CloneWithNewOperands(ag->shape(), {masked}, ".valid"));
}

// AG form on a contracting dim: dot(slice(all-gather(x)), w) with the slice trimming contracting
// dim `dim` -> dot(all-gather(x with its padding zeroed), pad(w, 0)) over the padded length.
absl::StatusOr<HloInstruction*> ZeroPaddedContraction(HloComputation* comp, HloInstruction* dot, int side,
                                                      HloInstruction* s, HloInstruction* ag, int64_t dim,
                                                      const RingContext& ring, std::vector<std::string>* done) {
  const DotDims& dd = dot->dot_dims();
  const std::vector<int64_t>& own = side == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const std::vector<int64_t>& other = side == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  const auto it = std::find(own.begin(), own.end(), dim);
  if (it == own.end()) return nullptr;
  const int64_t odim = other[static_cast<size_t>(it - own.begin())];
  const int64_t valid = s->shape().dims[static_cast<size_t>(dim)];
  const int64_t full = ag->shape().dims[static_cast<size_t>(dim)];
  HloInstruction* gathered = ZeroPastEnd(comp, ag, dim, valid, ring);
  if (gathered == nullptr) return nullptr;
  HloInstruction* w = dot->operand(1 - side);
  Shape ps = w->shape();
  ps.dims[static_cast<size_t>(odim)] = full;
  HloInstruction* zero = AddScalarConstant(comp, w->shape().element_type, 0, absl::StrCat(w->name(), ".zero"));
  HloInstruction* wp = comp->AddInstruction(HloOpcode::kPad, ps, {w, zero}, absl::StrCat(w->name(), ".padded"));
  std::vector<PadDim> pads(static_cast<size_t>(ps.rank()), PadDim{0, 0, 0});
  pads[static_cast<size_t>(odim)].hi = full - valid;
  *wp->mutable_padding() = pads;
  std::vector<HloInstruction*> ops(2);
  ops[static_cast<size_t>(side)] = gathered;
  ops[static_cast<size_t>(1 - side)] = wp;
  HloInstruction* wider = comp->AddInstruction(dot->CloneWithNewOperands(dot->shape(), ops, ".padded"));
  done->push_back(absl::StrCat("'", dot->name(), "': uneven gathered contracting dim ", dim, " (", valid,
                               " of ", full, " gathered): the shard's padding zeroed before the all-gather, "
                               "the other operand zero-padded to match"));
  return wider;
}

// AG form at operand `side` of `dot`; the new result (a slice of the wider dot) or nullptr.
absl::StatusOr<HloInstruction*> PullSliceOut(HloComputation* comp, HloInstruction* dot, int side,
                                             const RingContext& ring, std::vector<std::string>* done) {
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
  // The trimmed dim must be the gathered one (its padding is the all-gather's).
  const HloInstruction* attrs = windowed_einsum::CollectiveAttributes(ag);
  if (attrs == nullptr || attrs->dimensions.size() != 1 || attrs->dimensions[0] != trimmed) return nullptr;
  std::vector<bool> batch;
  const std::vector<int64_t> map = ResultDims(*dot, side, &batch);
  const int64_t out_dim = map[static_cast<size_t>(trimmed)];
  if (batch[static_cast<size_t>(trimmed)]) return nullptr;
  if (out_dim < 0) return ZeroPaddedContraction(comp, dot, side, s, ag, trimmed, ring, done);
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
    HloInstruction* zero = AddScalarConstant(comp, x->shape().element_type, 0, absl::StrCat(x->name(), ".zero"));
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

absl::StatusOr<int64_t> CanonicalizeUnevenWindows(HloComputation* comp, int64_t num_partitions,
                                                 int64_t replica_count, std::vector<std::string>* done) {
  const RingContext ring{num_partitions, replica_count};
  int64_t rewrites = 0;
  for (HloInstruction* h : comp->MakeInstructionPostOrder()) {
    HloInstruction* replacement = nullptr;
    if (h->opcode() == HloOpcode::kDot && h->operand_count() == 2 && h->shape().IsArray()) {
      for (int side = 0; side < 2 && replacement == nullptr; ++side) {
        ASSIGN_OR_RETURN(HloInstruction* r, PullSliceOut(comp, h, side, ring, done));
        replacement = r;
      }
    } else if (h->opcode() == HloOpcode::kPad && h->operand_count() == 2 && h->user_count() > 0) {
      bool feeds_reduction = true;
      for (const HloInstruction* u : h->users()) {
        const HloOpcode k = windowed_einsum::CollectiveKind(u);
        feeds_reduction &= k == HloOpcode::kReduceScatter || k == HloOpcode::kAllReduce;
      }
      if (feeds_reduction) {
        ASSIGN_OR_RETURN(HloInstruction* r, PushPadIn(comp, h, done));
        replacement = r;
      }
    }
    if (replacement == nullptr) continue;
    const bool root = h->IsRoot();
    RETURN_IF_ERROR(h->ReplaceAllUsesWith(replacement));
    if (root) comp->set_root(replacement);
    ++rewrites;
    // The replaced dot (or pad and its dot) and a slice nothing else reads go now, so that the
    // decomposer's sweep never meets them.
    // So is an all-gather the contracting form replaced by its masked copy.
    std::vector<HloInstruction*> dead = {h};
    for (HloInstruction* o : h->operands()) {
      if (o->opcode() == HloOpcode::kSlice || o->opcode() == HloOpcode::kDot) dead.push_back(o);
      if (o->opcode() == HloOpcode::kSlice && o->operand(0)->opcode() == HloOpcode::kAllGather) {
        dead.push_back(o->operand(0));
      }
    }
    for (HloInstruction* d : dead) {
      if (d->user_count() == 0 && !d->IsRoot()) {
        RETURN_IF_ERROR(comp->RemoveInstruction(d));
      }
    }
  }
  return rewrites;
}

}  // namespace weave::spmd
