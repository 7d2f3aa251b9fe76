// The TopK custom call (xla/service/topk_rewriter's "TopK": T[..., n] -> (T[..., k],
// s32[..., k]), the k largest (comparator GT, the default) or smallest (LT) of each row, ties in
// index order) partitioned as XLA's partitioner does (HandleCustomCallTopK in
// custom_call_handler.cc):
//
//   leading dims tiled only   each device runs TopK on its rows.
//   the row dim tiled k_s ways (tiles of T > k elements)
//       x tile ──mask padding──► TopK ──► (values, indices + tile offset)   [rows, k] per tile
//            ──all-gather along the row dim──► [rows, k * k_s]
//            ──sort (value in TopK's order, then index)──► first k.
//   Each device moves k * k_s candidates per row instead of the whole row.
//
// The padding of an uneven last tile is set to the value ranked last (-inf / the lowest value for
// GT, +inf / the largest for LT), so it never ranks ahead of an element. Unimplemented (the caller
// computes TopK replicated) for another comparator, k >= T, or an operand with a manual or
// unreduced subgroup.
#include <limits>

#include "absl/strings/str_cat.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// The TopK's order: GT (largest first) or LT, and its compare type ("" for the default).
struct TopKOrder {
  ComparisonDirection dir = ComparisonDirection::kGt;
  std::string type = "TOTALORDER";
};

std::optional<TopKOrder> ReadOrder(const HloInstruction& h) {
  TopKOrder o;
  if (h.called_computations().empty()) return o;
  const HloComputation* c = h.called_computations()[0];
  const HloInstruction* r = c->root();
  if (r == nullptr || r->opcode() != HloOpcode::kCompare || r->operand(0)->opcode() != HloOpcode::kParameter ||
      r->operand(1)->opcode() != HloOpcode::kParameter || r->operand(0)->parameter_number != 0 ||
      r->operand(1)->parameter_number != 1) {
    return std::nullopt;
  }
  if (r->comparison_direction != ComparisonDirection::kGt && r->comparison_direction != ComparisonDirection::kLt) {
    return std::nullopt;
  }
  o.dir = *r->comparison_direction;
  o.type = r->comparison_type();
  return o;
}

// The scalar of type t ranked last by `dir` (-inf or the smallest integer for GT, +inf or the
// largest for LT); null for a type without one (a float without infinities, 64-bit unsigned).
HloInstruction* Last(SpmdBuilder& b, PrimitiveType t, ComparisonDirection dir) {
  const bool low = dir == ComparisonDirection::kGt;
  const int bits = BitWidth(t);
  if (IsFloatingPoint(t)) {
    if (!HasInfinity(t)) return nullptr;
    const double inf = std::numeric_limits<double>::infinity();
    return b.ScalarConst(t, low ? -inf : inf);
  }
  if (IsSignedInteger(t) && bits <= 64) {
    const int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
    return b.Constant(Literal::ScalarInt(t, low ? -hi - 1 : hi));
  }
  if (IsUnsignedInteger(t) && bits < 64) return b.Constant(Literal::ScalarInt(t, low ? 0 : (int64_t{1} << bits) - 1));
  return nullptr;
}

// (v0, v1, i0, i1) -> v0 ranked ahead of v1 by `o`, ties by the smaller index.
HloComputation* MergeComparator(SpmdBuilder& b, PrimitiveType t, const TopKOrder& o) {
  auto comp = std::make_unique<HloComputation>(absl::StrCat("topk_merge.", std::string(PrimitiveTypeName(t))));
  const Shape v = Shape::Scalar(t), i = Shape::Scalar(PrimitiveType::S32), p = Shape::Scalar(PrimitiveType::PRED);
  HloInstruction* v0 = comp->AddParameter(v, "v0");
  HloInstruction* v1 = comp->AddParameter(v, "v1");
  HloInstruction* i0 = comp->AddParameter(i, "i0");
  HloInstruction* i1 = comp->AddParameter(i, "i1");
  HloComputation* c = b.context()->module->AddComputation(std::move(comp));
  auto cmp = [&](HloInstruction* x, HloInstruction* y, ComparisonDirection dir, bool typed) {
    HloInstruction* r = c->AddInstruction(HloOpcode::kCompare, p, {x, y}, "compare");
    r->comparison_direction = dir;
    if (typed && IsFloatingPoint(t) && !o.type.empty()) r->set_comparison_type(o.type);
    return r;
  };
  HloInstruction* ahead = cmp(v0, v1, o.dir, true);
  HloInstruction* behind = cmp(v1, v0, o.dir, true);
  HloInstruction* not_behind = c->AddInstruction(HloOpcode::kNot, p, {behind}, "not");
  HloInstruction* not_ahead = c->AddInstruction(HloOpcode::kNot, p, {ahead}, "not");
  HloInstruction* tie = c->AddInstruction(HloOpcode::kAnd, p, {not_ahead, not_behind}, "tie");
  HloInstruction* first = c->AddInstruction(HloOpcode::kAnd, p, {tie, cmp(i0, i1, ComparisonDirection::kLt, false)}, "first");
  c->set_root(c->AddInstruction(HloOpcode::kOr, p, {ahead, first}, "ranked_ahead"));
  return c;
}

HloInstruction* Gte(SpmdBuilder& b, HloInstruction* t, int64_t i) {
  HloInstruction* g = b.Add(HloOpcode::kGetTupleElement, t->shape().tuple_shapes[static_cast<size_t>(i)], {t},
                            "get-tuple-element");
  g->tuple_index = i;
  return g;
}

}  // namespace

absl::StatusOr<PValue> PartitionTopK(ComputationPartitioner& cp, const HloInstruction& h) {
  const HloInstruction* operand = h.operand(0);
  const Shape& in = operand->shape();
  const Shape& out = h.shape();
  if (h.operand_count() != 1 || !in.IsArray() || in.rank() < 1 || !out.IsTuple() || out.tuple_shapes.size() != 2) {
    return absl::UnimplementedError("not a TopK of one array operand");
  }
  std::optional<TopKOrder> order = ReadOrder(h);
  if (!order) return absl::UnimplementedError("TopK comparator other than compare(p0, p1) GT or LT");
  const int64_t rank = in.rank(), row = rank - 1;
  const int64_t n = in.dims[static_cast<size_t>(row)], k = out.tuple_shapes[0].dims[static_cast<size_t>(row)];
  const Sharding s = Sharding::Broadcast(cp.Value(operand).sharding, in);
  if (!s.IsTiled()) return absl::UnimplementedError("the operand is not tiled");
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return absl::UnimplementedError("a manual or unreduced subgroup");
  }
  SpmdBuilder& b = cp.b();
  const int64_t ks = s.tile(row);
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, s));
  if (ks == 1) {
    // Rows only: TopK per device on its rows.
    const Sharding rs = Sharding::Broadcast(s, out);
    HloInstruction* local = cp.Clone(h, LocalShape(out, rs), {x});
    cp.Remark(h, true, "TopK with only its leading dims tiled: computed on each device's rows");
    return PValue{local, rs, out};
  }
  const int64_t t = ShardSize(n, ks);
  if (k >= t) return absl::UnimplementedError(absl::StrCat("k = ", k, " is not below the row tile of ", t));
  const PrimitiveType et = in.element_type;
  HloInstruction* last = Last(b, et, order->dir);
  if (last == nullptr) return absl::UnimplementedError("no value ranked last for the padding");
  HloInstruction* xm = b.MaskPadding(x, s, in, {row}, last);
  // Local TopK: [rows, k] values and indices per tile, the indices made global.
  Shape cand(et, in.dims);
  cand.dims[static_cast<size_t>(row)] = k * ks;
  Shape cand_idx = cand;
  cand_idx.element_type = PrimitiveType::S32;
  const Shape local_vals = LocalShape(cand, s), local_idx = LocalShape(cand_idx, s);
  HloInstruction* topk = cp.Clone(h, Shape::Tuple({local_vals, local_idx}), {xm});
  HloInstruction* vals = Gte(b, topk, 0);
  HloInstruction* idx = Gte(b, topk, 1);
  idx = b.Add(HloOpcode::kAdd, local_idx, {idx, b.Splat(b.TableLookup(b.OffsetTable(s, in, row)), local_idx)},
              "global_index");
  // Every tile's candidates, then the merge.
  std::optional<Sharding> gathered = ReplicateDims(s, {row});
  if (!gathered) return absl::UnimplementedError("no sharding with the row dim whole");
  ASSIGN_OR_RETURN(HloInstruction* all_vals, cp.Reshard(PValue{vals, s, cand}, *gathered, h));
  ASSIGN_OR_RETURN(HloInstruction* all_idx, cp.Reshard(PValue{idx, s, cand_idx}, *gathered, h));
  const Shape merged_vals = LocalShape(cand, *gathered), merged_idx = LocalShape(cand_idx, *gathered);
  HloInstruction* sort =
      b.Add(HloOpcode::kSort, Shape::Tuple({merged_vals, merged_idx}), {all_vals, all_idx}, "sort");
  sort->dimensions = {row};
  *sort->mutable_called_computations() = {MergeComparator(b, et, *order)};
  const Sharding rs = Sharding::Broadcast(*gathered, out);
  const Shape local_out = LocalShape(out, rs);
  std::vector<HloInstruction*> parts;
  for (int64_t i = 0; i < 2; ++i) {
    const Shape& ps = local_out.tuple_shapes[static_cast<size_t>(i)];
    HloInstruction* sl = b.Add(HloOpcode::kSlice, ps, {Gte(b, sort, i)}, "slice");
    for (int64_t d = 0; d < rank; ++d) sl->mutable_slice()->push_back(SliceDim{0, ps.dims[static_cast<size_t>(d)], 1});
    parts.push_back(sl);
  }
  HloInstruction* tuple = b.Add(HloOpcode::kTuple, local_out, parts, "tuple");
  cp.Remark(h, true,
            absl::StrCat("TopK along a row dim tiled ", ks, " ways: TopK per tile, the ", k * ks,
                         " candidates per row all-gathered and merged by a sort (XLA's partitioned TopK)"));
  return PValue{tuple, rs, out};
}

}  // namespace weave::spmd
