// spmd-partitioner rules for everything but dot (see spmd_partitioner.h for the table).
#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "hlo/raw_dims_attribute.h"
#include "hlo/window.h"
#include "spmd/partitioner_internal.h"
#include "spmd/propagation_rules.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The leaf sharding of a (possibly tuple) target.
Sharding Leaf(const Sharding& s) {
  if (s.IsTuple()) return s.leaves().empty() ? Sharding::Replicated() : s.leaves()[0];
  return s;
}

// Dims a reduce-window's window touches (size, stride, padding or dilation not trivial); every
// dim when the window does not parse (the op is then computed replicated along them).
std::vector<int64_t> WindowDims(const HloInstruction& h) {
  const int64_t rank = h.operand(0)->shape().rank();
  std::vector<int64_t> out;
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(h, static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) {
    if (!w.ok()) {
      out.push_back(d);
      continue;
    }
    const WindowDim& x = (*w)[static_cast<size_t>(d)];
    if (x.size != 1 || x.stride != 1 || x.lo != 0 || x.hi != 0 || x.lhs_dilate != 1 || x.rhs_dilate != 1 ||
        x.reversal) {
      out.push_back(d);
    }
  }
  return out;
}

bool UniformLiteral(const Literal& l) {
  if (l.elided) return false;
  if (!l.f.empty()) {
    return std::all_of(l.f.begin(), l.f.end(), [&](double v) {
      return v == l.f[0] || (v != v && l.f[0] != l.f[0]);
    });
  }
  return std::all_of(l.i.begin(), l.i.end(), [&](int64_t v) { return v == l.i[0]; });
}

}  // namespace

// A bitcast-convert between element widths (XLA's BitcastConvertType) adds or drops the last,
// narrow-side dim of wide/narrow pieces: that dim stays whole on every device, the others keep
// the target's tiling (XLA's partitioner does the same: HandleBitcastConvert).
absl::StatusOr<PValue> PartitionBitcastConvertResize(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding target = Summed(cp.Target(&h));
  const int64_t in_rank = h.operand(0)->shape().rank(), out_rank = h.shape().rank();
  std::optional<Sharding> in_s, out_s;
  if (target.IsTiled() && !target.HasManualSubgroup()) {
    if (out_rank == in_rank + 1) {  // split: the result's last dim is the pieces
      if (std::optional<Sharding> r = ReplicateDims(target, {out_rank - 1})) {
        in_s = RemoveDims(*r, {out_rank - 1});
        out_s = r;
      }
    } else {  // join: the operand's last dim is the pieces
      in_s = InsertDims(target, {in_rank - 1});
      out_s = target;
    }
  } else if (target.IsReplicated()) {
    in_s = out_s = Sharding::Replicated();
  }
  if (!in_s || !out_s) in_s = out_s = Sharding::Replicated();
  ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, 0, *in_s));
  return PValue{cp.Clone(h, LocalShape(h.shape(), *out_s), {o}), *out_s, h.shape()};
}

absl::StatusOr<PValue> PartitionElementwise(ComputationPartitioner& cp, const HloInstruction& h) {
  if (h.opcode() == HloOpcode::kBitcastConvert && h.operand_count() == 1 &&
      h.operand(0)->shape().rank() != h.shape().rank()) {
    return PartitionBitcastConvertResize(cp, h);
  }
  const Sharding& target = cp.Target(&h);
  // Operands that already agree among themselves: compute in their sharding.
  std::optional<Sharding> common;
  bool agree = true;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    if (h.operand(i)->shape().rank() != h.shape().rank()) continue;
    const Sharding& s = cp.Value(h.operand(i)).sharding;
    if (!common) {
      common = s;
    } else if (*common != s) {
      agree = false;
    }
  }
  // Partial values (an unreduced sharding) stay partial only through ops linear in every operand
  // (a sum of sums, a sum of negations); any other op computes on the summed values.
  const HloOpcode op = h.opcode();
  const bool linear = op == HloOpcode::kAdd || op == HloOpcode::kSubtract || op == HloOpcode::kNegate ||
                      op == HloOpcode::kCopy;
  Sharding in = linear ? target : Summed(target);
  // Replicated operands are sliced to a tiled target for free (a dynamic-slice, as XLA's
  // HandleElementwise reshards every operand to the op's sharding): computing the whole value on
  // every device and slicing the result would cost N times the work and memory.
  const bool slice_replicated = common && common->IsReplicated() && target.IsTiled() &&
                                !HoldsAddends(target) && !target.HasManualSubgroup();
  if (agree && common && (common->IsTiled() || common->IsReplicated()) && !common->HasManualSubgroup() &&
      (linear || !HoldsAddends(*common)) && h.operand_count() > 0 && !slice_replicated) {
    in = *common;
  }
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const bool same_rank = h.operand(i)->shape().rank() == h.shape().rank();
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, same_rank ? in : Sharding::Replicated()));
    ops.push_back(o);
  }
  return PValue{cp.Clone(h, LocalShape(h.shape(), in), std::move(ops)), in, h.shape()};
}

absl::StatusOr<PValue> PartitionBroadcast(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  std::vector<int64_t> added;
  for (int64_t d = 0; d < h.shape().rank(); ++d) {
    if (!Contains(h.dimensions, d)) added.push_back(d);
  }
  std::optional<Sharding> result = ReplicateDims(target, added);
  std::optional<Sharding> op = result ? RemoveDims(*result, added) : std::nullopt;
  if (op && op->IsTiled()) {
    // Operand dim k is result dim dimensions[k]: order the kept result dims by operand dim.
    std::vector<int64_t> order(h.dimensions.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return h.dimensions[static_cast<size_t>(x)] < h.dimensions[static_cast<size_t>(y)];
    });
    std::vector<int64_t> inv(order.size());
    for (size_t k = 0; k < order.size(); ++k) inv[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
    op = TransposeSharding(*op, inv);
  }
  if (!result || !op) return cp.Replicated(h, "broadcast: the operand cannot follow the result's sharding");
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *op));
  // Along the added dims the value does not depend on the index: broadcast straight into the
  // local tile.
  return PValue{cp.Clone(h, LocalShape(h.shape(), target), {x}), target, h.shape()};
}

absl::StatusOr<PValue> PartitionTranspose(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  std::vector<int64_t> inv(h.dimensions.size());
  for (size_t k = 0; k < inv.size(); ++k) inv[static_cast<size_t>(h.dimensions[k])] = static_cast<int64_t>(k);
  std::optional<Sharding> op = TransposeSharding(target, inv);
  if (!op) return cp.Replicated(h, "transpose: the operand cannot follow the result's sharding");
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *op));
  return PValue{cp.Clone(h, LocalShape(h.shape(), target), {x}), target, h.shape()};
}

absl::StatusOr<PValue> PartitionReshape(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  const Shape& in = h.operand(0)->shape();
  auto local_ok = [&](const Sharding& os, const Sharding& rs) {
    return LocalShape(in, os).ElementCount() == LocalShape(h.shape(), rs).ElementCount();
  };
  // The operand in the sharding the target maps back to.
  std::optional<Sharding> op = target.IsTiled()
                                   ? ReshapeSharding(target, h.shape().dims, in.dims)
                                   : std::optional<Sharding>(target);
  if (op && local_ok(*op, target)) {
    ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *op));
    return PValue{cp.Clone(h, LocalShape(h.shape(), target), {x}), target, h.shape()};
  }
  // Else the operand's own sharding carried forward.
  const PValue& v = cp.Value(h.operand(0));
  std::optional<Sharding> fwd = v.sharding.IsTiled()
                                    ? ReshapeSharding(v.sharding, in.dims, h.shape().dims)
                                    : std::nullopt;
  if (fwd && local_ok(v.sharding, *fwd)) {
    return PValue{cp.Clone(h, LocalShape(h.shape(), *fwd), {v.hlo}), *fwd, h.shape()};
  }
  // Else the target with fewer tiles on one dim (the rest replicated), as XLA's HandleReshape
  // reshards through a partially replicated form: 24 elements in 4 tiles of 6 cannot become
  // [6,4] in 4 row tiles of 1.5 rows, but in 2 tiles of 3 rows they can; the result is then
  // resharded to the target (a halo exchange where the tiles do not line up).
  if (target.IsTiled()) {
    for (int64_t f = 2; f <= cp.b().num_partitions(); ++f) {
      for (int64_t d = 0; d < target.rank(); ++d) {
        if (target.tile(d) % f != 0) continue;
        std::optional<Sharding> fewer = ReplicateTileFactor(target, d, f);
        if (!fewer || fewer->NumTiles() < 2) continue;  // replicated: the remark below
        std::optional<Sharding> back = ReshapeSharding(*fewer, h.shape().dims, in.dims);
        if (!back || !local_ok(*back, *fewer)) continue;
        ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *back));
        return PValue{cp.Clone(h, LocalShape(h.shape(), *fewer), {x}), *fewer, h.shape()};
      }
    }
  }
  return cp.Replicated(h, "reshape: the sharding cannot follow the reshape");
}

absl::StatusOr<PValue> PartitionReduce(ComputationPartitioner& cp, const HloInstruction& h) {
  const int64_t n = h.operand_count() / 2;
  const Sharding target = Leaf(cp.Target(&h));
  const Shape& in_shape = h.operand(0)->shape();
  std::vector<int64_t> reduced = h.dimensions;
  std::sort(reduced.begin(), reduced.end());
  const Sharding& in = cp.Value(h.operand(0)).sharding;
  bool tiled_reduced = false;
  if (in.IsTiled()) {
    for (int64_t d : reduced) tiled_reduced |= in.tile(d) > 1;
  }
  std::vector<HloInstruction*> inits;
  for (int64_t i = n; i < h.operand_count(); ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, Sharding::Replicated()));
    inits.push_back(o);
  }
  if (n == 1 && tiled_reduced && in.SubgroupSize(SubgroupType::kUnreduced) <= 1) {
    // Keep the reduced dims sharded: masked local reduce, then all-reduce per tiled dim (inside
    // each manual group where the value is partially manual: the groups of DeviceGroups differ
    // only along the reduced dim).
    const PValue& v = cp.Value(h.operand(0));
    HloInstruction* x = cp.b().MaskPadding(v.hlo, in, in_shape, reduced, inits[0]);
    std::optional<Sharding> r = in.HasManualSubgroup() ? ReplicateDimsInManualGroups(in, reduced)
                                                       : ReplicateDims(in, reduced);
    if (r) r = RemoveDims(*r, reduced);
    if (r) {
      HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), *r), {x, inits[0]});
      for (auto it = reduced.rbegin(); it != reduced.rend(); ++it) {
        if (in.tile(*it) == 1) continue;
        local = cp.b().AllReduce(local, DeviceGroups(in, {*it}), h.to_apply());
      }
      return PValue{local, *r, h.shape()};
    }
  }
  // Reduced dims untiled: the inputs follow the result's sharding.
  std::optional<Sharding> op = target.IsTiled() ? InsertDims(target, reduced)
                                                : std::optional<Sharding>(target);
  if (!op) return cp.Replicated(h, "reduce: the operand cannot follow the result's sharding");
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, *op));
    ops.push_back(o);
  }
  ops.insert(ops.end(), inits.begin(), inits.end());
  const Sharding result = Sharding::Broadcast(target, h.shape());
  return PValue{cp.Clone(h, LocalShape(h.shape(), result), std::move(ops)), result, h.shape()};
}

absl::StatusOr<PValue> PartitionConstant(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  if (!target.IsTiled() || h.shape().IsTuple() || !h.literal) {
    return PValue{cp.Clone(h, h.shape(), {}), Sharding::Broadcast(Sharding::Replicated(), h.shape()),
                  h.shape()};
  }
  const Shape local = LocalShape(h.shape(), target);
  if (UniformLiteral(*h.literal) && h.literal->shape.ElementCount() > 0) {
    Literal lit;
    lit.shape = local;
    const int64_t count = local.ElementCount();
    if (!h.literal->f.empty()) {
      lit.f.assign(static_cast<size_t>(count), h.literal->f[0]);
    } else {
      lit.i.assign(static_cast<size_t>(count), h.literal->i[0]);
    }
    HloInstruction* c = cp.Clone(h, local, {});
    c->literal = std::move(lit);
    return PValue{c, target, h.shape()};
  }
  // Non-uniform: replicated, then sliced (the driver reshards to the target).
  return PValue{cp.Clone(h, h.shape(), {}), Sharding::Replicated(), h.shape()};
}

absl::StatusOr<PValue> PartitionIota(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  const Shape local = LocalShape(h.shape(), target);
  HloInstruction* iota = cp.Clone(h, local, {});
  const int64_t d = h.iota_dimension;
  if (!target.IsTiled() || d < 0 || d >= target.rank() || target.tile(d) == 1) {
    return PValue{iota, target, h.shape()};
  }
  SpmdBuilder& b = cp.b();
  HloInstruction* offset = b.TableLookup(b.OffsetTable(target, h.shape(), d));
  if (h.shape().element_type != PrimitiveType::S32) {
    offset = b.Add(HloOpcode::kConvert, Shape::Scalar(h.shape().element_type), {offset}, "convert");
  }
  HloInstruction* sum = b.Add(HloOpcode::kAdd, local, {iota, b.Splat(offset, local)}, "iota_offset");
  return PValue{sum, target, h.shape()};
}

// `s` with the tiling of `dims` moved onto one dim of `shape` outside `avoid` (every dim the op
// needs whole; `dims` among them): its tile index there becomes old * f + the index over
// `dims`, f the tiles moved; the largest such dim that the new tile count divides. nullopt when
// `s` is not tiled along `dims`, has a manual or unreduced subgroup, or no dim has room. XLA's
// HandleSort moves a sharded sort dim's tiling the same way.
std::optional<Sharding> MoveTilingOff(const Sharding& s, const std::vector<int64_t>& dims,
                                      const std::vector<int64_t>& avoid, const Shape& shape) {
  if (!s.IsTiled() || s.rank() != shape.rank() || s.HasManualSubgroup() || HoldsAddends(s)) return std::nullopt;
  int64_t f = 1;
  for (int64_t d : dims) f *= s.tile(d);
  if (f == 1) return std::nullopt;
  int64_t to = -1;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (Contains(dims, d) || Contains(avoid, d)) continue;
    const int64_t need = s.tile(d) * f;
    if (shape.dims[static_cast<size_t>(d)] % need != 0) continue;
    if (to < 0 || shape.dims[static_cast<size_t>(d)] > shape.dims[static_cast<size_t>(to)]) to = d;
  }
  if (to < 0) return std::nullopt;
  std::vector<int64_t> tiles = s.tiles();
  tiles[static_cast<size_t>(to)] *= f;
  for (int64_t d : dims) tiles[static_cast<size_t>(d)] = 1;
  return Sharding::FromTileFunction(tiles, s.devices(), [&](int64_t p) {
    std::vector<int64_t> idx = *s.TileIndex(p, s.rank());
    int64_t moved = 0;
    for (int64_t d : dims) {
      moved = moved * s.tile(d) + idx[static_cast<size_t>(d)];
      idx[static_cast<size_t>(d)] = 0;
    }
    idx[static_cast<size_t>(to)] = idx[static_cast<size_t>(to)] * f + moved;
    return idx;
  });
}

namespace {

// The dims `h` needs whole (`affected`) and which of its operands are data, tiled like the result
// (`is_data`: not a pad value, an init value or select-and-scatter's init). Returns the reason
// `h` is computed replicated instead (no rule for its op, an unusable shape or attribute).
std::optional<std::string> UntiledDimsOf(const HloInstruction& h, const Shape& leaf_shape,
                                         std::vector<int64_t>& affected,
                                         std::vector<bool>& is_data) {
  switch (h.opcode()) {
    case HloOpcode::kSlice:
      for (size_t d = 0; d < h.slice().size(); ++d) {
        const SliceDim& s = h.slice()[d];
        if (s.start != 0 || s.stride != 1 || s.limit != h.operand(0)->shape().dims[d]) {
          affected.push_back(static_cast<int64_t>(d));
        }
      }
      break;
    case HloOpcode::kPad:
      for (size_t d = 0; d < h.padding().size(); ++d) {
        const PadDim& p = h.padding()[d];
        if (p.lo != 0 || p.hi != 0 || p.interior != 0) affected.push_back(static_cast<int64_t>(d));
      }
      is_data[1] = false;
      break;
    case HloOpcode::kConcatenate:
      affected = h.dimensions;
      break;
    case HloOpcode::kReverse:
    case HloOpcode::kSort:
      affected = h.dimensions;
      break;
    case HloOpcode::kSelectAndScatter:
      // Operand and source tiled alike along the dims the window does not touch (the source
      // has the operand's size there); the window dims whole. XLA exchanges halos along them
      // (HandleSelectAndScatter); Weave moves their tiling to a free dim or gathers them.
      if (h.operand_count() != 3) return "select-and-scatter without three operands";
      affected = WindowDims(h);
      is_data[2] = false;
      break;
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
      // XLA's HandleCholesky / HandleTriangularSolve: the matrix dims whole, batch dims tiled.
      if (leaf_shape.rank() < 2) return "no partitioning rule for a rank < 2 operand";
      affected = {leaf_shape.rank() - 2, leaf_shape.rank() - 1};
      break;
    case HloOpcode::kFft: {
      // The transformed dims (the last |fft_length|) whole, the batch dims tiled as they are.
      // XLA's HandleFft runs a distributed FFT when the last one is tiled; Weave moves the
      // tiling off them or gathers them.
      absl::StatusOr<std::vector<int64_t>> lengths = RawDimsAttribute(h, "fft_length");
      const int64_t rank = leaf_shape.rank();
      if (!lengths.ok() || lengths->empty() || static_cast<int64_t>(lengths->size()) > rank) {
        return "fft without a usable fft_length";
      }
      for (int64_t d = rank - static_cast<int64_t>(lengths->size()); d < rank; ++d) affected.push_back(d);
      break;
    }
    case HloOpcode::kReduceWindow:
      affected = WindowDims(h);
      for (int64_t i = h.operand_count() / 2; i < h.operand_count(); ++i) {
        is_data[static_cast<size_t>(i)] = false;
      }
      break;
    default:
      return "no partitioning rule";
  }
  return std::nullopt;
}

// Whether the result's sharding `s` is tiled along dim `d`.
bool TiledAlong(const Sharding& s, int64_t d) {
  return s.IsTiled() && d < s.rank() && s.tile(d) > 1;
}

// The `affected` dims along which the result's target or a data operand (not manual) is tiled.
std::vector<int64_t> TiledAffectedDims(ComputationPartitioner& cp, const HloInstruction& h,
                                       const Sharding& target, const std::vector<int64_t>& affected,
                                       const std::vector<bool>& is_data) {
  std::vector<int64_t> tiled_affected;
  for (int64_t d : affected) {
    bool tiled = TiledAlong(target, d);
    for (int64_t i = 0; i < h.operand_count(); ++i) {
      if (!is_data[static_cast<size_t>(i)]) continue;
      const Sharding os = Leaf(cp.Value(h.operand(i)).sharding);
      tiled |= os.IsTiled() && !os.HasManualSubgroup() && d < os.rank() && os.tile(d) > 1;
    }
    if (tiled) tiled_affected.push_back(d);
  }
  return tiled_affected;
}

// A slice, pad, reduce-window or reverse tiled along `tiled_affected` by halo exchange
// (partition_halo.cc), or a small slice computed in its operand's tiling (remarked). Returns the
// value where either applies; else nullopt, `halo_why` then saying why halos did not apply.
std::optional<PValue> PartitionAffectedByHalo(ComputationPartitioner& cp, const HloInstruction& h,
                                              const Sharding& target,
                                              const std::vector<int64_t>& affected,
                                              const std::vector<int64_t>& tiled_affected,
                                              std::string& halo_why) {
  absl::StatusOr<PValue> r = PartitionByHalo(cp, h, affected);
  if (r.ok()) return *std::move(r);
  halo_why = absl::StrCat(": no halo exchange (", r.status().message(), ")");
  // A slice taking at most half of the operand's tiled dims, its result wanted whole there:
  // computed in the operand's tiling and its (smaller) result resharded after, as XLA does
  // (a small result is then made whole by an all-reduce, reshard.cc), not the operand gathered.
  const Shape& out = h.shape();
  const Shape& leaf_shape = out.IsTuple() ? out.tuple_shapes.at(0) : out;
  const Sharding os = Leaf(cp.Value(h.operand(0)).sharding);
  bool small = h.opcode() == HloOpcode::kSlice && os.IsTiled() && os.rank() == leaf_shape.rank();
  for (int64_t d : tiled_affected) {
    small &= !TiledAlong(target, d) && 2 * out.dims[static_cast<size_t>(d)] <=
                                           h.operand(0)->shape().dims[static_cast<size_t>(d)];
  }
  if (!small) return std::nullopt;
  absl::StatusOr<PValue> in_operand = PartitionByHalo(cp, h, affected, &os);
  if (!in_operand.ok()) return std::nullopt;
  cp.Remark(h, true,
            absl::StrCat("slice of at most half of tiled dim(s) ",
                         absl::StrJoin(tiled_affected, ","), ": computed in the operand's tiling ",
                         os.ToString(), ", the result resharded after"));
  return *std::move(in_operand);
}

// The result tiled along an affected dim and another dim free: the target with that tiling moved
// there (the reshards to and from it are all-to-alls), remarked as applied. nullopt when the
// target is not tiled along an affected dim or no dim has room.
std::optional<Sharding> MoveAffectedTilingOff(ComputationPartitioner& cp, const HloInstruction& h,
                                              const Sharding& target,
                                              const std::vector<int64_t>& affected,
                                              const Shape& leaf_shape,
                                              const std::string& halo_why) {
  std::vector<int64_t> target_affected;
  for (int64_t d : affected) {
    if (TiledAlong(target, d)) target_affected.push_back(d);
  }
  if (target_affected.empty()) return std::nullopt;
  std::optional<Sharding> moved = MoveTilingOff(target, target_affected, affected, leaf_shape);
  if (!moved) return std::nullopt;
  cp.Remark(h, true,
            absl::StrCat(std::string(HloOpcodeString(h.opcode())), " along tiled dim(s) ",
                         absl::StrJoin(target_affected, ","),
                         ": computed with their tiling moved to ", moved->ToString(),
                         " (all-to-all there and back)", halo_why));
  return moved;
}

// The reason `op`'s `tiled_affected` dims are gathered and computed replicated: the rule it
// lacks, whether its other dims stay sharded (`others_tiled`), then `halo_why`.
std::string GatheredDimsWhy(HloOpcode op, const std::vector<int64_t>& tiled_affected,
                            bool others_tiled, const std::string& halo_why) {
  return absl::StrCat(
      std::string(HloOpcodeString(op)), " along tiled dim(s) ", absl::StrJoin(tiled_affected, ","),
      ": those dims are gathered and computed replicated (no ",
      op == HloOpcode::kSort ? "partitioned sort"
      : op == HloOpcode::kCholesky || op == HloOpcode::kTriangularSolve ? "matrix-dim partitioning"
      : op == HloOpcode::kFft                                           ? "distributed FFT"
                                                                        : "halo exchange",
      " rule", others_tiled ? "; other dims stay sharded)" : ")", halo_why);
}

// `h` cloned on its data operands resharded to `s` and the others replicated; a slice's
// unaffected dims cover the local extent. Returns the operands' reshard errors.
absl::StatusOr<PValue> CloneInSharding(ComputationPartitioner& cp, const HloInstruction& h,
                                       const Sharding& s, const std::vector<int64_t>& affected,
                                       const std::vector<bool>& is_data) {
  const Shape& out = h.shape();
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    ASSIGN_OR_RETURN(
        HloInstruction* o,
        cp.Operand(h, i, is_data[static_cast<size_t>(i)] ? s : Sharding::Replicated()));
    ops.push_back(o);
  }
  const Sharding result = Sharding::Broadcast(s, out);
  HloInstruction* local = cp.Clone(h, LocalShape(out, result), ops);
  if (h.opcode() == HloOpcode::kSlice) {
    // Full slices of tiled dims cover the local extent.
    for (size_t d = 0; d < local->slice().size(); ++d) {
      if (!Contains(affected, static_cast<int64_t>(d))) {
        local->mutable_slice()->at(d) = SliceDim{0, local->shape().dims[d], 1};
      }
    }
  }
  return PValue{local, result, out};
}

}  // namespace

absl::StatusOr<PValue> PartitionAlongUntiledDims(ComputationPartitioner& cp,
                                                 const HloInstruction& h) {
  const HloOpcode op = h.opcode();
  const Shape& out = h.shape();
  const Shape& leaf_shape = out.IsTuple() ? out.tuple_shapes.at(0) : out;
  std::vector<int64_t> affected;
  std::vector<bool> is_data(static_cast<size_t>(h.operand_count()), true);
  if (std::optional<std::string> why = UntiledDimsOf(h, leaf_shape, affected, is_data)) {
    return cp.Replicated(h, *why);
  }
  const Sharding target = Leaf(cp.Target(&h));
  std::optional<Sharding> s = ReplicateDims(target, affected);
  if (!s || (s->IsTiled() && s->rank() != leaf_shape.rank())) {
    return cp.Replicated(
        h, absl::StrCat(std::string(HloOpcodeString(op)), ": no sharding without its dims"));
  }
  // Tiled along an affected dim (the result's target or a data operand): a slice, pad or
  // reduce-window whose result is tiled there exchanges halos (partition_halo.cc); otherwise
  // that dim is computed replicated (sort works on its whole sort dim).
  std::vector<int64_t> tiled_affected = TiledAffectedDims(cp, h, target, affected, is_data);
  std::string halo_why;
  if (!tiled_affected.empty() &&
      (op == HloOpcode::kSlice || op == HloOpcode::kPad || op == HloOpcode::kReduceWindow ||
       op == HloOpcode::kReverse)) {
    if (std::optional<PValue> v =
            PartitionAffectedByHalo(cp, h, target, affected, tiled_affected, halo_why)) {
      return *std::move(v);
    }
  }
  // The result tiled along an affected dim and another dim free: the op runs with that tiling
  // moved there instead of replicated.
  if (std::optional<Sharding> moved =
          MoveAffectedTilingOff(cp, h, target, affected, leaf_shape, halo_why)) {
    s = *moved;
    tiled_affected.clear();
  }
  if (!tiled_affected.empty()) {
    const std::string why = GatheredDimsWhy(op, tiled_affected, s->IsTiled(), halo_why);
    // Nothing left tiled: the whole op is computed replicated, an involuntary full
    // rematerialization, and said so.
    if (!s->IsTiled()) return cp.Replicated(h, why);
    cp.Remark(h, false, why);
  }
  return CloneInSharding(cp, h, *s, affected, is_data);
}

namespace {

// Dynamic slice / update: dims where `part` is smaller than `full` are sliced.
absl::StatusOr<PValue> PartitionDynamic(ComputationPartitioner& cp, const HloInstruction& h,
                                        bool update) {
  const Shape& full = update ? h.shape() : h.operand(0)->shape();
  const std::vector<int64_t>& part = update ? h.operand(1)->shape().dims : h.dynamic_slice_sizes();
  std::vector<int64_t> sliced;
  for (size_t d = 0; d < full.dims.size() && d < part.size(); ++d) {
    if (part[d] < full.dims[d]) sliced.push_back(static_cast<int64_t>(d));
  }
  std::optional<Sharding> s = ReplicateDims(cp.Target(&h), sliced);
  if (!s) return cp.Replicated(h, "dynamic slice: no sharding without the sliced dims");
  const int64_t first_index = update ? 2 : 1;
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < first_index; ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, *s));
    ops.push_back(o);
  }
  // XLA's older packed form, all start indices in one rank-1 operand: unpacked into one scalar per
  // dim (the local op is written in the scalar form).
  const bool packed = h.operand_count() == first_index + 1 && full.rank() > 0 &&
                      h.operand(first_index)->shape().rank() == 1 &&
                      (full.rank() > 1 || h.operand(first_index)->shape().dims[0] == 1);
  HloInstruction* packed_indices = nullptr;
  if (packed) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, first_index, Sharding::Replicated()));
    packed_indices = o;
  }
  const int64_t index_count = packed ? full.rank() : h.operand_count() - first_index;
  for (int64_t d = 0; d < index_count; ++d) {
    const PrimitiveType it = h.operand(first_index + (packed ? 0 : d))->shape().element_type;
    if (!Contains(sliced, d)) {
      // A full-size dim: index 0 (the local extent is the whole tile).
      ops.push_back(cp.b().ScalarConst(it, 0));
    } else if (packed) {
      HloInstruction* one = cp.b().Add(HloOpcode::kSlice, Shape(it, {1}), {packed_indices}, "slice");
      one->mutable_slice()->push_back(SliceDim{d, d + 1, 1});
      ops.push_back(cp.b().Reshape(one, {}));
    } else {
      ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, first_index + d, Sharding::Replicated()));
      ops.push_back(o);
    }
  }
  const Shape local = LocalShape(h.shape(), *s);
  HloInstruction* x = cp.Clone(h, local, std::move(ops));
  if (!update) x->set_dynamic_slice_sizes(local.dims);
  return PValue{x, *s, h.shape()};
}

}  // namespace

absl::StatusOr<PValue> PartitionDynamicSlice(ComputationPartitioner& cp, const HloInstruction& h) {
  return PartitionDynamic(cp, h, /*update=*/false);
}

absl::StatusOr<PValue> PartitionDynamicUpdateSlice(ComputationPartitioner& cp,
                                                   const HloInstruction& h) {
  absl::StatusOr<PValue> in_tiles = PartitionDynamicUpdateSliceInTiles(cp, h);
  if (in_tiles.ok() || in_tiles.status().code() != absl::StatusCode::kUnimplemented) return in_tiles;
  if (in_tiles.status().message() != kNoTiledSlicedDim) cp.Remark(h, false, std::string(in_tiles.status().message()));
  return PartitionDynamic(cp, h, /*update=*/true);
}

}  // namespace weave::spmd
