// Resharding (see reshard.h).
#include "spmd/reshard.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// The sharding whose tiles the reshard moves (partial values are summed before, Reshard).
Sharding Physical(const Sharding& s) {
  if (s.IsUnset() || s.IsUnknown() || s.IsMaximal() || s.IsUnreduced()) return Sharding::Replicated();
  return s;
}

int64_t LocalBytes(const Sharding& s, const Shape& global) {
  return LocalShape(global, s).ByteSize();
}

// Tile range [offset, offset + size) of device p along dim d; Replicated: the whole dim.
std::pair<int64_t, int64_t> TileRange(const Sharding& s, int64_t p, int64_t d, int64_t size) {
  if (!s.IsTiled() || s.tile(d) == 1) return {0, size};
  return {TileOffset(s, p, d, size), ShardSize(size, s.tile(d))};
}

bool SameDeviceSet(const Sharding& s, int64_t n) {
  if (!s.IsTiled()) return true;
  if (static_cast<int64_t>(s.devices().size()) != n) return false;
  for (int64_t p = 0; p < n; ++p) {
    if (s.PositionOf(p) < 0) return false;
  }
  return true;
}

// Whether `to` is `from` with the tiles of dim i moved to dim j on the same devices.
bool IsAllToAll(const Sharding& from, const Sharding& to, int64_t n, int64_t* i, int64_t* j) {
  if (!from.IsTiled() || !to.IsTiled() || from.rank() != to.rank()) return false;
  if (from.subgroups() != to.subgroups()) return false;
  int64_t fi = -1, tj = -1;
  for (int64_t d = 0; d < from.rank(); ++d) {
    if (from.tile(d) == to.tile(d)) continue;
    if (from.tile(d) > 1 && to.tile(d) == 1 && fi < 0) {
      fi = d;
    } else if (from.tile(d) == 1 && to.tile(d) > 1 && tj < 0) {
      tj = d;
    } else {
      return false;
    }
  }
  if (fi < 0 || tj < 0 || from.tile(fi) != to.tile(tj)) return false;
  std::vector<int64_t> devices(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) devices[static_cast<size_t>(p)] = p;
  // Every device's index along j in `to` is its index along i in `from`, all else equal.
  for (int64_t p = 0; p < n; ++p) {
    auto a = from.ArrayIndex(p);
    auto b = to.ArrayIndex(p);
    if (!a || !b) return false;
    std::vector<int64_t> expect = *a;
    expect[static_cast<size_t>(tj)] = (*a)[static_cast<size_t>(fi)];
    expect[static_cast<size_t>(fi)] = 0;
    // Replicated subgroup positions carry no meaning: compare data indices only.
    for (int64_t d = 0; d < from.rank(); ++d) {
      if (expect[static_cast<size_t>(d)] != (*b)[static_cast<size_t>(d)]) return false;
    }
  }
  *i = fi;
  *j = tj;
  return true;
}

// True for the element types whose zero is an exact identity of add, so that a value can be
// broadcast by an all-reduce (add) of copies masked to zero. Not f8e8m0fnu: E8M0 has no zero (a
// zero converts to NaN) and its sums round to powers of two.
bool SumsMaskedCopies(PrimitiveType t) { return t != PrimitiveType::F8E8M0FNU; }

absl::StatusOr<HloInstruction*> MaximalToReplicated(SpmdBuilder& b, HloInstruction* x,
                                                    int64_t device) {
  if (!SumsMaskedCopies(x->shape().element_type)) {
    // Broadcast the bits: u8 sums of one copy and zeros are exact.
    Shape bits = x->shape();
    bits.element_type = PrimitiveType::U8;
    HloInstruction* u = b.Add(HloOpcode::kBitcastConvert, bits, {x}, "bits");
    ASSIGN_OR_RETURN(HloInstruction* r, MaximalToReplicated(b, u, device));
    return b.Add(HloOpcode::kBitcastConvert, x->shape(), {r}, "from_bits");
  }
  const Shape& s = x->shape();
  HloInstruction* is_d = b.Add(HloOpcode::kCompare, Shape::Scalar(PrimitiveType::PRED),
                               {b.PartitionId(), b.ScalarConst(PrimitiveType::U32, static_cast<double>(device))},
                               "is_owner");
  is_d->comparison_direction = ComparisonDirection::kEq;
  HloInstruction* pred = b.Splat(is_d, s);
  HloInstruction* masked = b.Select(pred, x, b.Zeros(s));
  std::vector<int64_t> all(static_cast<size_t>(b.num_partitions()));
  for (int64_t p = 0; p < b.num_partitions(); ++p) all[static_cast<size_t>(p)] = p;
  return b.AllReduce(masked, {all}, b.SumReducer(s.element_type));
}

// A partial value summed: one all-reduce (add; or for pred) over each addend group, as XLA
// reduces unreduced axes before any reshard that needs the whole value.
HloInstruction* SumAddends(SpmdBuilder& b, HloInstruction* x, const Sharding& s) {
  return b.AllReduce(x, AddendGroups(s, b.num_partitions()), b.SumReducer(x->shape().element_type));
}

// A whole value split into the addends of the partial sharding `to`: the first partition of each
// addend group keeps it, the others hold zeros.
HloInstruction* SplitIntoAddends(SpmdBuilder& b, HloInstruction* x, const Sharding& to) {
  std::vector<int64_t> first(static_cast<size_t>(b.num_partitions()), 0);
  for (const std::vector<int64_t>& g : AddendGroups(to, b.num_partitions())) {
    if (!g.empty()) first[static_cast<size_t>(g[0])] = 1;
  }
  HloInstruction* keeps = b.Add(HloOpcode::kCompare, Shape::Scalar(PrimitiveType::PRED),
                                {b.TableLookup(first), b.ScalarConst(PrimitiveType::S32, 1)}, "keeps");
  keeps->comparison_direction = ComparisonDirection::kEq;
  return b.Select(b.Splat(keeps, x->shape()), x, b.Zeros(x->shape()));
}

// Dim d of x (tiled g ways in `cur`, the whole dim gathered over `groups`) made whole on every
// device of each group. As XLA's PartitionedHlo::ReplicatePartial: where the dim holds at most
// g / 2 elements (most tiles are padding; with 1 element only the first tile holds data), each
// device zeroes its padding, writes its tile into zeros of the whole dim at its offset
// (dynamic-update-slice; a one-element dim needs none) and the group sums by all-reduce (or, for
// pred): a broadcast by all-reduce that moves `size` elements where an all-gather moves g tiles.
// Otherwise an all-gather, its padding sliced off.
HloInstruction* GatherWholeDim(SpmdBuilder& b, HloInstruction* x, const Sharding& cur, int64_t d,
                               const std::vector<std::vector<int64_t>>& groups, const Shape& global) {
  const int64_t size = global.dims[static_cast<size_t>(d)];
  const int64_t g = cur.IsTiled() && d < cur.rank() ? cur.tile(d) : 1;
  const Shape& local = x->shape();
  if (size >= 1 && g >= 2 && size <= g / 2 && local.IsArray() && local.dims[static_cast<size_t>(d)] == 1 &&
      SumsMaskedCopies(local.element_type)) {
    const PrimitiveType t = local.element_type;
    HloInstruction* masked = b.MaskPadding(x, cur, global, {d}, b.ScalarConst(t, 0));
    Shape full = local;
    full.dims[static_cast<size_t>(d)] = size;
    return b.AllReduceInto(masked, full, d, b.OffsetTable(cur, global, d), groups);
  }
  return b.AllGatherTrimmed(x, d, groups, size);
}

// All-gathers dims `dims` (last first); returns the value and its new sharding. `cur` has no
// manual or unreduced subgroup (Reshard sums partial values first).
HloInstruction* GatherDims(SpmdBuilder& b, HloInstruction* x, Sharding* cur, const Shape& global,
                           std::vector<int64_t> dims) {
  std::sort(dims.rbegin(), dims.rend());
  for (int64_t d : dims) {
    if (!cur->IsTiled() || cur->tile(d) == 1) continue;
    x = GatherWholeDim(b, x, *cur, d, DeviceGroups(*cur, {d}), global);
    *cur = *ReplicateDims(*cur, {d});
  }
  return x;
}

HloInstruction* SliceToRefinement(SpmdBuilder& b, HloInstruction* x, const Sharding& from,
                                  const Sharding& to, const Shape& global) {
  const int64_t n = b.num_partitions();
  const Shape local_to = LocalShape(global, to);
  std::vector<int64_t> buffer = x->shape().dims;
  std::vector<std::vector<int64_t>> tables(static_cast<size_t>(global.rank()));
  for (int64_t d = 0; d < global.rank(); ++d) {
    const int64_t size = global.dims[static_cast<size_t>(d)];
    std::vector<int64_t>& t = tables[static_cast<size_t>(d)];
    t.assign(static_cast<size_t>(n), 0);
    int64_t need = local_to.dims[static_cast<size_t>(d)];
    for (int64_t p = 0; p < n; ++p) {
      auto [fo, fc] = TileRange(from, p, d, size);
      auto [to_off, tc] = TileRange(to, p, d, size);
      (void)fc;
      const int64_t off = to_off >= size ? 0 : to_off - fo;
      t[static_cast<size_t>(p)] = off;
      need = std::max(need, off + tc);
    }
    buffer[static_cast<size_t>(d)] = std::max(buffer[static_cast<size_t>(d)], need);
  }
  x = b.PadHigh(x, buffer);
  std::vector<HloInstruction*> offsets;
  for (const auto& t : tables) offsets.push_back(b.TableLookup(t));
  return b.DynamicSlice(x, offsets, local_to.dims);
}

HloInstruction* Permute(SpmdBuilder& b, HloInstruction* x, const Sharding& from,
                        const Sharding& to) {
  const int64_t n = b.num_partitions();
  std::map<std::vector<int64_t>, std::vector<int64_t>> src, dst;
  for (int64_t p = 0; p < n; ++p) {
    src[*from.TileIndex(p, from.rank())].push_back(p);
    dst[*to.TileIndex(p, to.rank())].push_back(p);
  }
  std::vector<std::pair<int64_t, int64_t>> pairs;
  bool all_identity = true;
  for (auto& [tile, targets] : dst) {
    std::vector<int64_t>& sources = src[tile];
    std::vector<int64_t> free_src, free_dst;
    for (int64_t t : targets) {
      if (std::find(sources.begin(), sources.end(), t) != sources.end()) {
        pairs.push_back({t, t});
      } else {
        free_dst.push_back(t);
      }
    }
    for (int64_t s : sources) {
      if (std::find(targets.begin(), targets.end(), s) == targets.end()) free_src.push_back(s);
    }
    for (size_t k = 0; k < free_dst.size() && k < free_src.size(); ++k) {
      pairs.push_back({free_src[k], free_dst[k]});
      all_identity = false;
    }
  }
  if (all_identity) return x;
  std::sort(pairs.begin(), pairs.end());
  return b.CollectivePermute(x, pairs);
}

int64_t TileCount(const Sharding& s, int64_t d) { return s.IsTiled() ? s.tile(d) : 1; }

// The factor g of dim i's tiling moved to dim j within `groups` (member k holds factor index k
// of dim i, and takes chunk k of dim j): ci_after = dim i's tiles after, cj_before = dim j's
// tiles before. 1. pad dim j to g chunks of its new tile and split it into [g, chunk];
// 2. all-to-all over the chunk dim; 3. move the chunk dim in front of dim i and merge (the g
// received tiles of dim i, in member order); 4. slice dim i's padding off when it ends untiled.
HloInstruction* AllToAll(SpmdBuilder& b, HloInstruction* x, int64_t i, int64_t j, int64_t g,
                         const std::vector<std::vector<int64_t>>& groups, int64_t ci_after,
                         int64_t cj_before, const Shape& global) {
  const int64_t si = global.dims[static_cast<size_t>(i)];
  const int64_t sj = global.dims[static_cast<size_t>(j)];
  const int64_t cj = ShardSize(sj, cj_before * g);
  // 1. Pad dim j to g * cj and split it into [g, cj].
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(j)] = g * cj;
  x = b.PadHigh(x, dims);
  std::vector<int64_t> split;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int64_t>(d) == j) {
      split.push_back(g);
      split.push_back(cj);
    } else {
      split.push_back(dims[d]);
    }
  }
  x = b.Reshape(x, split);
  // 2. Exchange the g chunks within the groups.
  x = b.AllToAll(x, j, groups);
  // 3. Move the chunk dim in front of dim i and merge them.
  const int64_t kpos = j;
  const int64_t ipos = i < j ? i : i + 1;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
    if (d == kpos) continue;
    if (d == ipos) perm.push_back(kpos);
    perm.push_back(d);
  }
  x = b.Transpose(x, perm);
  std::vector<int64_t> merged;
  const std::vector<int64_t>& td = x->shape().dims;
  for (size_t d = 0; d < td.size(); ++d) {
    if (perm[d] == kpos) {
      merged.push_back(td[d] * td[d + 1]);
      ++d;
    } else {
      merged.push_back(td[d]);
    }
  }
  x = b.Reshape(x, merged);
  // 4. Slice the padding of dim i off.
  if (ci_after == 1 && x->shape().dims[static_cast<size_t>(i)] > si) {
    std::vector<int64_t> limits = x->shape().dims;
    limits[static_cast<size_t>(i)] = si;
    x = b.Slice(x, limits);
  }
  return x;
}

// The steps of a kSteps plan (reshard_steps.h), each from its `before` to its `after`.
HloInstruction* EmitSteps(SpmdBuilder& b, HloInstruction* x, const ReshardSteps& plan, const Shape& global) {
  for (const ReshardStep& s : plan.steps) {
    switch (s.kind) {
      case ReshardStepKind::kSlice:
        x = SliceToRefinement(b, x, s.before, s.after, global);
        break;
      case ReshardStepKind::kPermute:
        x = Permute(b, x, s.before, s.after);
        break;
      case ReshardStepKind::kAllToAll:
        x = AllToAll(b, x, s.dim, s.to_dim, s.factor, s.groups, TileCount(s.after, s.dim),
                     TileCount(s.before, s.to_dim), global);
        break;
      case ReshardStepKind::kAllGather:
        // The dim made whole (the step gathers all its tiles), or a factor of it gathered.
        x = TileCount(s.after, s.dim) == 1 ? GatherWholeDim(b, x, s.before, s.dim, s.groups, global)
                                           : b.AllGather(x, s.dim, s.groups);
        break;
    }
  }
  return x;
}

// ---- manual subgroups (XLA's subgroup-manual shardings: last_tile_dims={manual, ...}) ----
// A value with a manual subgroup is separate per manual group (each group runs its own program);
// inside a group it is tiled by the data dims. Reshards of such values move data only inside
// the groups: the all-gathers' groups come from the device array with the manual index fixed.

// Position of the manual subgroup in the device array (tiles ++ subgroups), or -1.
int64_t ManualArrayDim(const Sharding& s) { return s.SubgroupArrayDim(SubgroupType::kManual); }


// `s` (replicated, or tiled with at most a replicated subgroup) read inside the manual groups of
// `m`: the same tiling in every group, the members of each group (in m's order) taking the tiles
// in row-major order, each tile on size/tiles members. nullopt when the tiles do not divide a
// group.
std::optional<Sharding> InManualGroups(const Sharding& s, const Sharding& m, int64_t rank) {
  const int64_t mdim = ManualArrayDim(m);
  if (mdim < 0 || (s.IsTiled() && (s.HasManualSubgroup() || s.SubgroupSize(SubgroupType::kUnreduced) > 1)) ||
      !(s.IsTiled() || s.IsReplicated())) {
    return std::nullopt;
  }
  std::vector<int64_t> others;
  for (int64_t a = 0; a < static_cast<int64_t>(m.ArrayDims().size()); ++a) {
    if (a != mdim) others.push_back(a);
  }
  const std::vector<std::vector<int64_t>> groups = DeviceGroups(m, others);  // one per manual index
  const std::vector<int64_t> tiles = s.IsTiled() ? s.tiles() : std::vector<int64_t>(static_cast<size_t>(rank), 1);
  int64_t t = 1;
  for (int64_t x : tiles) t *= x;
  const int64_t k = groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
  if (k == 0 || k % t != 0) return std::nullopt;
  // Array [tiles.., M, k/t]: device(tile i, group g, copy j) = groups[g][i * (k/t) + j].
  std::vector<int64_t> devices;
  for (int64_t i = 0; i < t; ++i) {
    for (const std::vector<int64_t>& g : groups) {
      for (int64_t j = 0; j < k / t; ++j) devices.push_back(g[static_cast<size_t>(i * (k / t) + j)]);
    }
  }
  std::vector<Sharding::Subgroup> subgroups = {{SubgroupType::kManual, static_cast<int64_t>(groups.size())}};
  if (k / t > 1) subgroups.push_back({SubgroupType::kReplicated, k / t});
  absl::StatusOr<Sharding> out = Sharding::Tiled(tiles, std::move(subgroups), std::move(devices));
  if (!out.ok()) return std::nullopt;
  return *std::move(out);
}

// Whether every device has the same manual index in `a` and `b` (both with manual subgroups).
bool SameManualGroups(const Sharding& a, const Sharding& b, int64_t n) {
  const int64_t ma = ManualArrayDim(a), mb = ManualArrayDim(b);
  for (int64_t p = 0; p < n; ++p) {
    const std::optional<std::vector<int64_t>> ia = a.ArrayIndex(p), ib = b.ArrayIndex(p);
    if (!ia || !ib || (*ia)[static_cast<size_t>(ma)] != (*ib)[static_cast<size_t>(mb)]) return false;
  }
  return true;
}

// The reshard of a value with a manual subgroup, or into one, inside the manual groups (see
// above). Unimplemented when the groups differ or the move is not a gather and/or a slice.
absl::StatusOr<HloInstruction*> ReshardInManualGroups(SpmdBuilder& b, HloInstruction* x,
                                                      const Sharding& from_in, const Sharding& to_in,
                                                      const Shape& global) {
  const int64_t n = b.num_partitions();
  auto refuse = [&]() {
    return absl::UnimplementedError(absl::StrCat("cannot reshard a manual value from ", from_in.ToString(),
                                                 " to ", to_in.ToString(), " inside its manual groups"));
  };
  std::optional<Sharding> from = from_in.HasManualSubgroup() ? std::optional<Sharding>(from_in)
                                                              : InManualGroups(from_in, to_in, global.rank());
  std::optional<Sharding> to = to_in.HasManualSubgroup() ? std::optional<Sharding>(to_in)
                                                          : InManualGroups(to_in, from_in, global.rank());
  if (!from || !to || !SameDeviceSet(*from, n) || !SameDeviceSet(*to, n) || !SameManualGroups(*from, *to, n) ||
      from->rank() != global.rank() || to->rank() != global.rank()) {
    return refuse();
  }
  if (*from == *to) return x;
  if (RefinesOnEveryDevice(*from, *to, global, n)) return SliceToRefinement(b, x, *from, *to, global);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < from->rank(); ++d) {
    if (from->tile(d) > 1 && to->tile(d) != from->tile(d)) dims.push_back(d);
  }
  std::sort(dims.rbegin(), dims.rend());
  Sharding cur = *from;
  for (int64_t d : dims) {
    x = b.AllGatherTrimmed(x, d, DeviceGroups(cur, {d}), global.dims[static_cast<size_t>(d)]);
    std::optional<Sharding> next = ReplicateDimsInManualGroups(cur, {d});
    if (!next) return refuse();
    cur = *std::move(next);
  }
  if (cur == *to) return x;
  if (!RefinesOnEveryDevice(cur, *to, global, n)) return refuse();
  return SliceToRefinement(b, x, cur, *to, global);
}

}  // namespace

bool ReshardPlan::Gathers() const {
  if (kind == ReshardKind::kGather || kind == ReshardKind::kFull) return true;
  if (kind == ReshardKind::kHalo) return halo.r > 1;
  if (kind != ReshardKind::kSteps) return false;
  return std::any_of(steps.steps.begin(), steps.steps.end(),
                     [](const ReshardStep& s) { return s.kind == ReshardStepKind::kAllGather; });
}

std::string_view ReshardKindName(ReshardKind k) {
  switch (k) {
    case ReshardKind::kNone: return "none";
    case ReshardKind::kSlice: return "slice";
    case ReshardKind::kPermute: return "collective-permute";
    case ReshardKind::kAllToAll: return "all-to-all";
    case ReshardKind::kHalo: return "halo exchange";
    case ReshardKind::kSteps: return "steps";
    case ReshardKind::kGather: return "all-gather";
    case ReshardKind::kFull: return "full rematerialization";
  }
  return "?";
}

bool RefinesOnEveryDevice(const Sharding& from_in, const Sharding& to_in, const Shape& global,
                          int64_t n) {
  const Sharding from = Physical(from_in), to = Physical(to_in);
  if (!SameDeviceSet(from, n) || !SameDeviceSet(to, n)) return false;
  if ((from.IsTiled() && from.rank() != global.rank()) || (to.IsTiled() && to.rank() != global.rank())) {
    return false;
  }
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t d = 0; d < global.rank(); ++d) {
      const int64_t size = global.dims[static_cast<size_t>(d)];
      auto [fo, fc] = TileRange(from, p, d, size);
      auto [to_off, tc] = TileRange(to, p, d, size);
      if (to_off >= size) continue;  // an all-padding tile
      if (to_off < fo || std::min(to_off + tc, size) > std::min(fo + fc, size)) return false;
    }
  }
  return true;
}

ReshardPlan PlanReshard(const Sharding& from_in, const Sharding& to_in, const Shape& global,
                        int64_t n) {
  ReshardPlan plan;
  const Sharding from = Physical(from_in), to = Physical(to_in);
  if (from == to) return plan;
  if (from.HasManualSubgroup() || to.HasManualSubgroup() || from.IsManual() || to.IsManual()) {
    plan.kind = ReshardKind::kFull;
    return plan;
  }
  if (RefinesOnEveryDevice(from, to, global, n)) {
    plan.kind = ReshardKind::kSlice;
    return plan;
  }
  if (from.IsTiled() && to.IsTiled() && from.tiles() == to.tiles() &&
      from.subgroups() == to.subgroups() && SameDeviceSet(from, n) && SameDeviceSet(to, n)) {
    plan.kind = ReshardKind::kPermute;
    return plan;
  }
  if (IsAllToAll(from, to, n, &plan.from_dim, &plan.to_dim)) {
    plan.kind = ReshardKind::kAllToAll;
    return plan;
  }
  // A halo exchange, gathering whole dims and slicing, or the cheapest chain of steps, whichever
  // receives fewer bytes.
  std::optional<HaloReshard> halo = PlanHaloReshard(from, to, global, n);
  std::optional<double> gather_bytes;
  if (from.IsTiled() && SameDeviceSet(from, n)) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < from.rank(); ++d) {
      if (from.tile(d) > 1 && (!to.IsTiled() || to.tile(d) != from.tile(d))) dims.push_back(d);
    }
    if (!dims.empty()) {
      std::optional<Sharding> inter = ReplicateDims(from, dims);
      // Gathering everything to slice a tiled target again is the full fallback (remarked).
      const bool everything = inter && inter->IsReplicated() && !to.IsReplicated();
      if (inter && !everything && (*inter == to || RefinesOnEveryDevice(*inter, to, global, n))) {
        plan.gather_dims = std::move(dims);
        gather_bytes = static_cast<double>(LocalBytes(*inter, global) - LocalBytes(from, global));
      }
    }
  }
  if (global.IsArray() && SameDeviceSet(from, n) && SameDeviceSet(to, n)) {
    std::optional<ReshardSteps> steps = PlanReshardSteps(from, to, global, n);
    // A chain through the replicated value to slice a tiled target again is the full fallback,
    // which is remarked (an involuntary full rematerialization), whatever reaches it.
    const bool replicates =
        steps && !to.IsReplicated() &&
        std::any_of(steps->steps.begin(), steps->steps.end(),
                    [](const ReshardStep& st) { return st.after.IsReplicated(); });
    if (steps && !replicates && (!gather_bytes || steps->bytes < *gather_bytes) &&
        (!halo || steps->bytes <= halo->bytes)) {
      plan.kind = ReshardKind::kSteps;
      plan.gather_dims.clear();
      plan.steps = *std::move(steps);
      return plan;
    }
  }
  if (halo && (!gather_bytes || halo->bytes < *gather_bytes)) {
    plan.kind = ReshardKind::kHalo;
    plan.gather_dims.clear();
    plan.halo = *std::move(halo);
    return plan;
  }
  plan.kind = gather_bytes ? ReshardKind::kGather : ReshardKind::kFull;
  return plan;
}

namespace {

double PlanBytes(const ReshardPlan& plan, const Sharding& from, const Sharding& to, const Shape& global) {
  switch (plan.kind) {
    case ReshardKind::kNone:
    case ReshardKind::kSlice:
      return 0;
    case ReshardKind::kPermute:
      return static_cast<double>(LocalBytes(to, global));
    case ReshardKind::kAllToAll:
      return static_cast<double>(LocalBytes(from, global));
    case ReshardKind::kSteps:
      return plan.steps.bytes;
    case ReshardKind::kHalo:
      return plan.halo.bytes;
    case ReshardKind::kGather: {
      std::optional<Sharding> inter = ReplicateDims(from, plan.gather_dims);
      return static_cast<double>(LocalBytes(*inter, global) - LocalBytes(from, global));
    }
    case ReshardKind::kFull:
      return static_cast<double>(global.ByteSize()) * 2;
  }
  return 0;
}

}  // namespace

double ReshardCostBytes(const Sharding& from_in, const Sharding& to_in, const Shape& global,
                        int64_t n) {
  const Sharding from = Physical(from_in), to = Physical(to_in);
  return PlanBytes(PlanReshard(from, to, global, n), from, to, global);
}

void ReshardSummary::Add(std::string_view kind, double b) {
  bytes += b;
  const std::string k(kind);
  const std::vector<std::string> have = absl::StrSplit(kinds, '+', absl::SkipEmpty());
  if (std::find(have.begin(), have.end(), k) == have.end()) absl::StrAppend(&kinds, kinds.empty() ? "" : "+", k);
}

absl::StatusOr<HloInstruction*> Reshard(SpmdBuilder& b, const PValue& v, const Sharding& to_in,
                                        std::string* remat, ReshardSummary* summary) {
  const Shape& global = v.global;
  if (global.IsTuple()) {
    const Sharding from_t = Sharding::Broadcast(v.sharding, global);
    const Sharding to_t = Sharding::Broadcast(to_in, global);
    if (from_t == to_t) return v.hlo;
    std::vector<HloInstruction*> elements;
    bool changed = false;
    for (size_t k = 0; k < global.tuple_shapes.size(); ++k) {
      PValue e;
      e.global = global.tuple_shapes[k];
      e.sharding = from_t.TupleElement(global, static_cast<int64_t>(k));
      HloInstruction* g = b.Add(HloOpcode::kGetTupleElement,
                                v.hlo->shape().tuple_shapes[k], {v.hlo}, "get-tuple-element");
      g->tuple_index = static_cast<int64_t>(k);
      e.hlo = g;
      ASSIGN_OR_RETURN(
          HloInstruction* r,
          Reshard(b, e, to_t.TupleElement(global, static_cast<int64_t>(k)), remat, summary));
      changed |= r != g;
      elements.push_back(r);
    }
    if (!changed) return v.hlo;
    std::vector<Shape> shapes;
    for (HloInstruction* e : elements) shapes.push_back(e->shape());
    return b.Add(HloOpcode::kTuple, Shape::Tuple(shapes), elements, "tuple");
  }
  HloInstruction* x = v.hlo;
  // A token carries no data: it is where it is, whatever the shardings say.
  if (!global.IsArray()) return x;
  if (HoldsAddends(v.sharding) || HoldsAddends(to_in)) {
    // Partial values: summed before the reshard, split into addends after it.
    if (v.sharding == to_in) return x;
    if (v.sharding.HasManualSubgroup() || to_in.HasManualSubgroup()) {
      return absl::UnimplementedError(absl::StrCat("cannot reshard a manual value from ",
                                                   v.sharding.ToString(), " to ", to_in.ToString()));
    }
    PValue whole = v;
    if (HoldsAddends(v.sharding)) {
      whole.hlo = SumAddends(b, x, v.sharding);
      whole.sharding = Summed(v.sharding);
      if (summary) summary->Add("all-reduce (partial sums)", static_cast<double>(x->shape().ByteSize()));
    }
    absl::StatusOr<HloInstruction*> r = Reshard(b, whole, Summed(to_in), remat, summary);
    if (!r.ok() || !HoldsAddends(to_in)) return r;
    return SplitIntoAddends(b, *r, to_in);
  }
  Sharding from = Physical(v.sharding);
  if (v.sharding.IsMaximal()) {
    ASSIGN_OR_RETURN(HloInstruction* r, MaximalToReplicated(b, x, v.sharding.maximal_device()));
    x = r;
    if (summary) summary->Add("maximal broadcast", static_cast<double>(x->shape().ByteSize()));
  }
  const Sharding to = Physical(to_in);
  if (from == to) return x;
  // A manual value is each device's own: read replicated (or a replicated value read as manual),
  // it is the same data on every device, as XLA's partitioner reads the unannotated ops inside a
  // manual region. Partially manual values move inside their manual groups.
  if ((from.IsManual() && to.IsReplicated()) || (from.IsReplicated() && to.IsManual())) return x;
  if (!from.IsManual() && !to.IsManual() && (from.HasManualSubgroup() || to.HasManualSubgroup())) {
    return ReshardInManualGroups(b, x, from, to, global);
  }
  if (from.IsManual() || to.IsManual() || from.HasManualSubgroup() || to.HasManualSubgroup()) {
    return absl::UnimplementedError(absl::StrCat("cannot reshard a manual value from ",
                                                 from.ToString(), " to ", to.ToString()));
  }
  const int64_t n = b.num_partitions();
  const ReshardPlan plan = PlanReshard(from, to, global, n);
  if (summary && plan.kind != ReshardKind::kNone) {
    summary->Add(ReshardKindName(plan.kind), PlanBytes(plan, from, to, global));
  }
  switch (plan.kind) {
    case ReshardKind::kNone:
      return x;
    case ReshardKind::kSlice:
      return SliceToRefinement(b, x, from, to, global);
    case ReshardKind::kPermute:
      return Permute(b, x, from, to);
    case ReshardKind::kAllToAll:
      return AllToAll(b, x, plan.from_dim, plan.to_dim, from.tile(plan.from_dim),
                      DeviceGroups(from, {plan.from_dim}), 1, 1, global);
    case ReshardKind::kSteps:
      return EmitSteps(b, x, plan.steps, global);
    case ReshardKind::kHalo:
      return EmitHaloReshard(b, x, from, plan.halo, global);
    case ReshardKind::kGather: {
      Sharding cur = from;
      x = GatherDims(b, x, &cur, global, plan.gather_dims);
      if (cur == to) return x;
      return SliceToRefinement(b, x, cur, to, global);
    }
    case ReshardKind::kFull: {
      if (!SameDeviceSet(from, n) || !SameDeviceSet(to, n)) {
        return absl::UnimplementedError(absl::StrCat(
            "resharding ", from.ToString(), " -> ", to.ToString(),
            " involves devices outside partitions 0..", n - 1));
      }
      if (remat != nullptr) {
        *remat = absl::StrCat("resharding ", from.ToString(), " -> ", to.ToString(),
                              " replicates the value (involuntary full rematerialization)");
      }
      Sharding cur = from;
      std::vector<int64_t> all;
      for (int64_t d = 0; d < global.rank(); ++d) all.push_back(d);
      x = GatherDims(b, x, &cur, global, all);
      return SliceToRefinement(b, x, Sharding::Replicated(), to, global);
    }
  }
  return x;
}

}  // namespace weave::spmd
