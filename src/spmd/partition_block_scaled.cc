// XLA's block-scaling custom calls (hlo/block_scaled_call.h) partitioned with each scale beside
// its data, as XLA's partitioner does for the dot (custom_call_handler.cc hands
// "__op$block_scaled_dot" to the dot handler with PartitionedHloMX: operand and scale resharded
// together). A scale has its data's rank and dims but the last, which counts blocks of B, so a
// sharding of the data is a sharding of the scale when it keeps every block whole:
//
//   data  Q[..., K]   tiled t ways along K     every tile K/t long, K/t a multiple of B
//   scale S[..., K/B] tiled t ways along K/B   every tile (K/t)/B blocks: the same elements
//
// and the scale is not padded along a tiled dim (a padded scale's tiles would not line up).
//
//   quantize    x in its own sharding (the last dim made whole when a tile would split a block)
//               -> local quantize -> (q, scale) both in that sharding.
//   dequantize  q and scale in the result's sharding (the same rule for the last dim)
//               -> local dequantize.
//   block_scaled_dot
//               the dot's decision procedure (einsum_planner.h) on lhs and rhs with the call's
//               dimension numbers (contracting dim last, batch dim 0 at rank 3); each scale is
//               resharded to its data's required sharding; the local call on the shards; partial
//               sums over a tiled contracting dim are all-reduced (a global scale is linear, so
//               it applies to each partial sum). The global scale is replicated.
//
// Unimplemented (the caller computes the call replicated and says why) where a tile would split a
// block, a scale is padded along a tiled dim, or the contracting dim is tiled unevenly.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/block_scaled_call.h"
#include "spmd/einsum_planner.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

absl::StatusOr<PValue> PartitionQuantize(ComputationPartitioner& cp, const HloInstruction& h) {
  const Shape& in = h.operand(0)->shape();
  const Shape& out = h.shape();
  if (!in.IsArray() || !out.IsTuple() || out.tuple_shapes.size() != 2) {
    return absl::UnimplementedError("not a quantize of one array into (data, scale)");
  }
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(out.tuple_shapes[0], out.tuple_shapes[1]);
  if (!block.ok()) return absl::UnimplementedError(block.status().message());
  const Sharding own = PhysicalSharding(cp.Value(h.operand(0)).sharding);
  std::optional<Sharding> s = FitScaleBlocks(own, in, out.tuple_shapes[1], *block);
  if (!s) return absl::UnimplementedError("no sharding of the operand keeps its blocks whole");
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *s));
  const Sharding rs = Sharding::Broadcast(*s, out);
  HloInstruction* local = cp.Clone(h, LocalShape(out, rs), {x});
  cp.Remark(h, true, absl::StrCat("quantize computed on each device's tiles (", s->ToString(),
                                  "), each block of ", *block, " whole on one device"));
  return PValue{local, rs, out};
}

absl::StatusOr<PValue> PartitionDequantize(ComputationPartitioner& cp, const HloInstruction& h) {
  if (h.operand_count() != 2) return absl::UnimplementedError("not a dequantize of (data, scale)");
  const Shape& q = h.operand(0)->shape();
  const Shape& sc = h.operand(1)->shape();
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(q, sc);
  if (!block.ok()) return absl::UnimplementedError("not a dequantize of (data, scale)");
  Sharding want = PhysicalSharding(cp.Target(&h));
  if (!want.IsTiled()) want = PhysicalSharding(cp.Value(h.operand(0)).sharding);
  std::optional<Sharding> s = FitScaleBlocks(want, q, sc, *block);
  if (!s) return absl::UnimplementedError("no sharding of the result keeps its blocks whole");
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *s));
  ASSIGN_OR_RETURN(HloInstruction* y, cp.Operand(h, 1, *s));
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), *s), {x, y});
  cp.Remark(h, true, absl::StrCat("dequantize computed on each device's tiles (", s->ToString(),
                                  "), data and scale sharded alike"));
  return PValue{local, *s, h.shape()};
}

absl::StatusOr<PValue> PartitionScaledDot(ComputationPartitioner& cp, const HloInstruction& h) {
  const int64_t n = cp.num_partitions();
  const int64_t nops = h.operand_count();
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  const int64_t rank = lg.rank();
  if (nops < 3 || nops > 5 || (rank != 2 && rank != 3) || rg.rank() != rank || !h.shape().IsArray()) {
    return absl::UnimplementedError("not a block-scaled dot of rank-2 or rank-3 operands");
  }
  absl::StatusOr<int64_t> block = BlockScaledDotBlockSize(h);
  if (!block.ok()) return absl::UnimplementedError(block.status().message());
  const DotDims dims = BlockScaledDotDims(rank);
  const EinsumSpace sp = DotSpaceOf(dims, rank, rank);
  Sharding ls = PhysicalSharding(cp.Value(h.operand(0)).sharding);
  Sharding rs = PhysicalSharding(cp.Value(h.operand(1)).sharding);
  const Sharding os = PhysicalSharding(cp.Target(&h));
  const Shape* scales[2] = {&h.operand(2)->shape(), nops >= 4 ? &h.operand(3)->shape() : nullptr};
  const Shape* data[2] = {&lg, &rg};
  // Why the decision's operand shardings cannot carry the scales (empty when they can).
  auto mismatch = [&](const EinsumDecision& d) -> std::string {
    const Sharding* req[2] = {&d.lhs_target, &d.rhs_target};
    for (int i = 0; i < 2; ++i) {
      if (scales[i] == nullptr) continue;
      if (scales[i]->rank() != rank) return "a scale's rank differs from its data's";
      const std::string why = ScaleShardingMismatch(*req[i], *data[i], *scales[i], *block);
      if (!why.empty()) return absl::StrCat(i == 0 ? "lhs" : "rhs", " as the dot needs it (", req[i]->ToString(), "): ", why);
    }
    return "";
  };
  EinsumDecision decision = PlanEinsum(sp, lg, rg, h.shape(), ls, rs, os, n);
  if (!decision.best) return absl::UnimplementedError("no consistent sharding of its iteration space");
  std::string why = mismatch(decision);
  if (!why.empty()) {
    // A tile of the contracting dim would split a block: plan again with that dim whole on both
    // operands (an all-gather along K, then the dot on whole blocks).
    std::optional<Sharding> lw = ReplicateDims(ls, {rank - 1});
    std::optional<Sharding> rw = ReplicateDims(rs, {rank - 1});
    if (lw && rw) {
      EinsumDecision again = PlanEinsum(sp, lg, rg, h.shape(), *lw, *rw, os, n);
      if (again.best && mismatch(again).empty()) {
        cp.Remark(h, false, absl::StrCat("block-scaled dot: the contracting dim made whole, not summed in parts: ", why));
        decision = std::move(again);
        why.clear();
      }
    }
  }
  if (!why.empty()) return absl::UnimplementedError(why);
  const Sharding& best = *decision.best;
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < nops; ++i) {
    const Sharding want = i == 0 || i == 2 ? decision.lhs_target
                          : i == 1 || i == 3 ? decision.rhs_target
                                             : Sharding::Replicated();
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, want));
    ops.push_back(o);
  }
  const std::vector<int64_t> c_dims = TiledContractingDims(sp, best);
  HloInstruction* local = SumPartials(cp, cp.Clone(h, LocalShape(h.shape(), decision.output_target), ops), best, c_dims);
  cp.Remark(h, true,
            absl::StrCat("block-scaled dot by XLA's dot handler order: ",
                         absl::StrJoin(decision.steps, "; then "), "; iteration space ",
                         best.ToString(), ": lhs and its scale ", decision.lhs_target.ToString(),
                         ", rhs and its scale ", decision.rhs_target.ToString(),
                         c_dims.empty() ? std::string()
                                        : absl::StrCat(", ", c_dims.size(),
                                                       " all-reduce(s) of the partial sums")));
  return PValue{local, decision.output_target, h.shape()};
}

}  // namespace

absl::StatusOr<PValue> PartitionBlockScaled(ComputationPartitioner& cp, const HloInstruction& h) {
  switch (BlockScaledKindOf(h)) {
    case BlockScaledKind::kQuantize: return PartitionQuantize(cp, h);
    case BlockScaledKind::kDequantize: return PartitionDequantize(cp, h);
    case BlockScaledKind::kDot: return PartitionScaledDot(cp, h);
    default: return absl::UnimplementedError("not a block-scaling call of JAX's form");
  }
}

}  // namespace weave::spmd
