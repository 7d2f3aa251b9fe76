// spmd-partitioner: gather and scatter (../shared/specs/spmd-partitioner.md §3 table; XLA's
// gather_scatter_handler.cc: PartitionGather/ScatterIndexParallelDimensions,
// ...OperandPassthroughDimensions, ...TrivialSlicedOperandDimensions).
//
// Rules, for a gather whose operand is tiled only on dims it takes whole (pass-through: slice
// size = dim size) and on dims it indexes with slice size 1 (trivially sliced: an embedding
// table's vocab dim):
//  - index-parallel / pass-through: the indices keep their tiling on their batch dims
//    (index_vector_dim untiled), the operand its pass-through tiling; the local gather gives the
//    output tiled on its batch dims like the indices and on its offset dims like the operand.
//    No communication.
//  - vocab-sharded operand (trivially sliced dims tiled): each partition holds rows
//    [offset, offset + c) of such a dim. Every index component on such a dim is clamped to the
//    global bounds (gather's own semantics), the partition's offset subtracted, the local gather
//    reads row max(0, min(adjusted, c - 1)), rows whose adjusted index falls outside [0, c) are
//    zeroed (select), and one all-reduce (add) over the devices that differ only in those dims
//    sums the single non-zero contribution of each row (exact in any float type). The indices
//    keep their batch tiling when it is independent of the vocab tiling (2-D mesh), else they
//    are replicated.
// Scatter (one operand), the embedding gradient's two forms:
//  - vocab-sharded operand (inserted window dims of size 1 tiled), replicated indices: each
//    partition subtracts its offset from the index components on those dims and scatters
//    locally; an update whose row is in another shard lands out of the local bounds and is
//    skipped (scatter's semantics); no communication, the result keeps the operand's sharding.
//  - index pass-through (indices and updates tiled on their scatter dims): with an add,
//    multiply, minimum, maximum, and or or combiner, the first device of each group of batch
//    tiles scatters into the operand, the others into the combiner's identity, then one
//    all-reduce with the combiner over the group; without batch tiling the local scatter needs
//    no communication.
// Both: index-parallel dims (explicit batching pairs, iota-derived dims; gather_scatter_parallel.h)
// tile operand and indices alike and need no communication, merged with the rules above; operand
// dims no rule uses are all-gathered first (XLA does the same).
// Anything else (unsigned indices with a vocab-sharded operand, batch-tiled indices with another
// combiner, scatters of several operands): computed replicated with the remark naming the reason.
#include <algorithm>
#include <climits>
#include <cmath>

#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spmd/gather_scatter_parallel.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> d(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) d[static_cast<size_t>(p)] = p;
  return d;
}

// The output sharding of a local gather with the operand in `op` and the indices in `idx`:
// batch dims tiled like the indices' batch dims, offset dims like the operand's pass-through
// dims; the operand's `vocab` dims tile nothing of the output (their devices hold partial sums
// before the all-reduce). nullopt when the three tilings are not independent.
std::optional<Sharding> LocalGatherOutput(const GatherScatterDims& g, const Sharding& op,
                                          const Sharding& idx, const std::vector<int64_t>& vocab,
                                          int64_t out_rank, int64_t n) {
  std::vector<int64_t> src_kind(static_cast<size_t>(out_rank), 0), src_dim(static_cast<size_t>(out_rank), -1);
  for (size_t k = 0; k < g.batch_out.size(); ++k) {
    src_kind[static_cast<size_t>(g.batch_out[k])] = 1;
    src_dim[static_cast<size_t>(g.batch_out[k])] = g.indices_batch[k];
  }
  for (size_t w = 0; w < g.operand_to_offset.size(); ++w) {
    if (g.pass_through[w]) {
      src_kind[static_cast<size_t>(g.operand_to_offset[w])] = 2;
      src_dim[static_cast<size_t>(g.operand_to_offset[w])] = static_cast<int64_t>(w);
    }
  }
  auto tile = [](const Sharding& s, int64_t d) { return s.IsTiled() && d >= 0 ? s.tile(d) : 1; };
  auto index = [](const Sharding& s, int64_t dev) {
    auto i = s.TileIndex(dev, s.IsTiled() ? s.rank() : 0);
    return i ? *i : std::vector<int64_t>();
  };
  std::vector<int64_t> tiles;
  for (int64_t d = 0; d < out_rank; ++d) {
    const size_t u = static_cast<size_t>(d);
    tiles.push_back(src_kind[u] == 1 ? tile(idx, src_dim[u]) : src_kind[u] == 2 ? tile(op, src_dim[u]) : 1);
  }
  auto tile_of = [&](int64_t dev, bool with_vocab) {
    const std::vector<int64_t> ii = index(idx, dev), io = index(op, dev);
    std::vector<int64_t> out;
    for (int64_t d = 0; d < out_rank; ++d) {
      const size_t u = static_cast<size_t>(d);
      const std::vector<int64_t>& from = src_kind[u] == 1 ? ii : io;
      out.push_back(src_kind[u] == 0 || from.empty() ? 0 : from[static_cast<size_t>(src_dim[u])]);
    }
    if (with_vocab) {
      for (int64_t v : vocab) out.push_back(io.empty() ? 0 : io[static_cast<size_t>(v)]);
    }
    return out;
  };
  // Independence: the output tiles and the vocab tiles together form a valid tiling.
  std::vector<int64_t> ext = tiles;
  for (int64_t v : vocab) ext.push_back(tile(op, v));
  if (!Sharding::FromTileFunction(ext, Iota(n), [&](int64_t dev) { return tile_of(dev, true); })) {
    return std::nullopt;
  }
  return Sharding::FromTileFunction(tiles, Iota(n), [&](int64_t dev) { return tile_of(dev, false); });
}

HloInstruction* SliceAlong(SpmdBuilder& b, HloInstruction* x, int64_t dim, int64_t start) {
  std::vector<int64_t> dims = x->shape().dims;
  dims[static_cast<size_t>(dim)] = 1;
  HloInstruction* s = b.Add(HloOpcode::kSlice, Shape(x->shape().element_type, dims), {x}, "slice");
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t lo = static_cast<int64_t>(d) == dim ? start : 0;
    s->mutable_slice()->push_back(SliceDim{lo, lo + dims[d], 1});
  }
  return s;
}

// The operand dims of a gather/scatter that `osh` tiles (rank `rank`), by what the rules do with
// them: *vocab, dims indexed with slice size 1 (each partition holds a vocabulary range);
// *unsupported, dims neither taken whole (pass-through) nor indexed with slice size 1.
// Pass-through and parallel (`par`) dims are in neither list.
void ClassifyOperandTiling(const Sharding& osh, int64_t rank, const GatherScatterDims& g,
                           const std::vector<ParallelDim>& par, std::vector<int64_t>* vocab,
                           std::vector<int64_t>* unsupported) {
  if (!osh.IsTiled()) return;
  for (int64_t d = 0; d < rank; ++d) {
    if (osh.tile(d) == 1 || IsParallelOperandDim(par, d)) continue;
    if (g.trivially_sliced[static_cast<size_t>(d)]) {
      vocab->push_back(d);
    } else if (!g.pass_through[static_cast<size_t>(d)]) {
      unsupported->push_back(d);
    }
  }
}

// AlignParallelDimsOnly, then the operand's tiled dims classified again under the new *osh
// (parallel dims set aside only when aligned).
bool AlignParallelDims(const std::vector<ParallelDim>& par, const Shape& og, const Shape& ig,
                       const GatherScatterDims& g, Sharding* osh, const Sharding& ish, Sharding* idx,
                       std::vector<int64_t>* vocab, std::vector<int64_t>* unsupported) {
  const bool aligned = AlignParallelDimsOnly(par, og, ig, g.index_vector_dim, osh, ish, idx);
  // Not aligned: a parallel dim the operand tiles is then no longer set aside (the vocab rule
  // takes it, or the caller refuses it as unusable).
  vocab->clear();
  unsupported->clear();
  ClassifyOperandTiling(*osh, og.rank(), g, aligned ? par : std::vector<ParallelDim>(), vocab, unsupported);
  return aligned;
}

// The indices with each component on an iota-parallel dim tiled in `osh` shifted by the
// partition's offset along it (its rows then index the local tile).
HloInstruction* ShiftParallelIndices(SpmdBuilder& b, HloInstruction* indices, const GatherScatterDims& g,
                                     const std::vector<ParallelDim>& par, const Sharding& osh,
                                     const Shape& og);

// Operand dims no rule uses (`unsupported`, described by `why`) all-gathered first, as XLA's
// gather and scatter handlers do: *osh loses their tiling and *note says so for the remark.
// False (nothing changed) when the sharding cannot drop them or nothing would be left to
// partition by (operand whole, indices replicated): the caller computes the op replicated.
bool DropUnusableOperandDims(Sharding* osh, const Sharding& ish, const std::vector<int64_t>& unsupported,
                             std::string_view why, std::string* note) {
  std::optional<Sharding> rest = ReplicateDims(*osh, unsupported);
  if (!rest || (rest->NumTiles() < 2 && !ish.IsTiled())) return false;
  *note = absl::StrCat(" (operand dim(s) ", absl::StrJoin(unsupported, ","), ", ", std::string(why), ", gathered first)");
  *osh = *std::move(rest);
  return true;
}

HloInstruction* Compare(SpmdBuilder& b, HloInstruction* x, HloInstruction* y, ComparisonDirection d) {
  HloInstruction* c = b.Add(HloOpcode::kCompare, Shape(PrimitiveType::PRED, x->shape().dims), {x, y}, "compare");
  c->comparison_direction = d;
  return c;
}

// `indices` with each index component (along index_vector_dim; the whole array when there is
// none) that addresses one of the operand dims `dims` replaced by rewrite(dim, component), the
// other components kept, joined again in order. `indices` itself when `dims` is empty.
HloInstruction* RewriteIndexComponents(SpmdBuilder& b, HloInstruction* indices, const GatherScatterDims& g,
                                       const std::vector<int64_t>& dims,
                                       const std::function<HloInstruction*(int64_t, HloInstruction*)>& rewrite) {
  if (dims.empty()) return indices;
  const bool has_ivd = g.index_vector_dim < indices->shape().rank();
  std::vector<HloInstruction*> comps;
  for (size_t j = 0; j < g.start_index_map.size(); ++j) {
    HloInstruction* c = has_ivd ? SliceAlong(b, indices, g.index_vector_dim, static_cast<int64_t>(j)) : indices;
    const int64_t d = g.start_index_map[j];
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) c = rewrite(d, c);
    comps.push_back(c);
  }
  if (!has_ivd) return comps[0];
  HloInstruction* cat = b.Add(HloOpcode::kConcatenate, indices->shape(), comps, "concatenate");
  cat->dimensions = {g.index_vector_dim};
  return cat;
}

// The partition's tile offset along operand dim d (of `osh` on global shape `og`), a scalar of
// index type `it`.
HloInstruction* TileOffsetIndex(SpmdBuilder& b, const Sharding& osh, const Shape& og, int64_t d, PrimitiveType it) {
  HloInstruction* off = b.TableLookup(b.OffsetTable(osh, og, d));
  if (it != PrimitiveType::S32) off = b.Add(HloOpcode::kConvert, Shape::Scalar(it), {off}, "convert");
  return off;
}

// The index components on operand dims `dims` shifted by the partition's tile offset along them
// (their rows then index the local tile).
HloInstruction* ShiftIndexComponents(SpmdBuilder& b, HloInstruction* indices, const GatherScatterDims& g,
                                     const std::vector<int64_t>& dims, const Sharding& osh, const Shape& og) {
  const PrimitiveType it = indices->shape().element_type;
  return RewriteIndexComponents(b, indices, g, dims, [&](int64_t d, HloInstruction* c) {
    return b.Add(HloOpcode::kSubtract, c->shape(), {c, b.Splat(TileOffsetIndex(b, osh, og, d, it), c->shape())},
                 "local_index");
  });
}

HloInstruction* ShiftParallelIndices(SpmdBuilder& b, HloInstruction* indices, const GatherScatterDims& g,
                                     const std::vector<ParallelDim>& par, const Sharding& osh,
                                     const Shape& og) {
  std::vector<int64_t> shifted;  // iota-parallel operand dims the operand tiles
  for (const ParallelDim& p : par) {
    if (p.iota && osh.IsTiled() && osh.tile(p.operand_dim) > 1) shifted.push_back(p.operand_dim);
  }
  return ShiftIndexComponents(b, indices, g, shifted, osh, og);
}

// The indices' tiling `idx` moved into the operand's replication: the same tile counts, each
// operand tile's replicated devices split among the index tiles (in their order along the
// replicated subgroup), so that the operand's tiling and the indices' use independent devices
// (XLA's merged operand pass-through + index pass-through, where the indices reach their new
// devices by a collective-permute). nullopt unless `osh` is tiled with only a replicated
// subgroup whose size the index tile count divides, and `idx` is tiled.
std::optional<Sharding> RetileInOperandReplication(const Sharding& idx, const Sharding& osh, int64_t n) {
  if (!idx.IsTiled() || !osh.IsTiled() || osh.HasManualSubgroup() || osh.SubgroupSize(SubgroupType::kUnreduced) > 1) {
    return std::nullopt;
  }
  const int64_t r = osh.ReplicationSize();
  const int64_t t = idx.NumTiles();
  const int64_t rep_dim = osh.SubgroupArrayDim(SubgroupType::kReplicated);
  if (t < 2 || rep_dim < 0 || r % t != 0) return std::nullopt;
  const int64_t per_tile = r / t;
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  return Sharding::FromTileFunction(idx.tiles(), all, [&](int64_t dev) -> std::vector<int64_t> {
    const std::optional<std::vector<int64_t>> at = osh.ArrayIndex(dev);
    if (!at) return {};
    int64_t flat = (*at)[static_cast<size_t>(rep_dim)] / per_tile;  // the index tile, row-major
    std::vector<int64_t> tile(idx.tiles().size());
    for (size_t d = tile.size(); d-- > 0;) {
      tile[d] = flat % idx.tiles()[d];
      flat /= idx.tiles()[d];
    }
    return tile;
  });
}

// When the local op's sharding `*local` is missing or rejected by `ok`, tries the indices moved
// into the operand's replication (RetileInOperandReplication); on success updates *idx and
// *local and returns the remark's note, else returns "" and changes nothing.
template <typename Ok>
std::string TryIndicesInOperandReplication(const GatherScatterDims& g, const Sharding& osh,
                                           const std::vector<int64_t>& vocab, int64_t rank, int64_t n,
                                           Ok ok, Sharding* idx, std::optional<Sharding>* local) {
  if (*local && ok(**local)) return "";
  std::optional<Sharding> re = RetileInOperandReplication(*idx, osh, n);
  if (!re) return "";
  std::optional<Sharding> again = LocalGatherOutput(g, osh, *re, vocab, rank, n);
  if (!again || !ok(*again)) return "";
  std::string note = absl::StrCat(" (indices moved from ", idx->ToString(), " into the operand's replicated devices)");
  *idx = *re;
  *local = again;
  return note;
}

// The decisions gather and scatter share: the operand's and the indices' shardings, the
// index-parallel dims (aligned or not), the operand's vocab dims and the remark's notes.
struct GatherScatterPlan {
  Sharding osh;
  Sharding idx_req = Sharding::Replicated();
  std::vector<ParallelDim> par;
  std::vector<int64_t> vocab;
  bool parallel = false;
  std::string gathered;  // the remark's note on dims the rules cannot use
  std::string moved;     // the remark's note when the indices move into the operand's replication
};

// What one gather's partitioning decides besides: the local output's sharding and the vocab
// rule's device groups.
struct GatherPlan : GatherScatterPlan {
  // The all-reduce of the vocab rule sums one device per vocab tile; those devices must hold
  // the same output tile.
  std::vector<std::vector<int64_t>> vocab_groups;
  std::optional<Sharding> out_s;
};

// Decides the shardings of gather `h` (dims `g`) into *p from its operands' current ones;
// returns why the gather is computed replicated instead (the remark's reason), or nullopt.
// Builds nothing.
std::optional<std::string> PlanGather(ComputationPartitioner& cp, const HloInstruction& h,
                                      const GatherScatterDims& g, GatherPlan* p) {
  const int64_t n = cp.num_partitions();
  Sharding& osh = p->osh;
  osh = PhysicalSharding(cp.Value(h.operand(0)).sharding);
  const Sharding ish = PhysicalSharding(cp.Value(h.operand(1)).sharding);
  const Shape& og = h.operand(0)->shape();
  const Shape& ig = h.operand(1)->shape();
  const Shape& out = h.shape();
  p->par = ParallelDims(h, g);
  const std::vector<ParallelDim>& par = p->par;
  std::vector<int64_t>& vocab = p->vocab;
  std::vector<int64_t> unsupported;
  ClassifyOperandTiling(osh, og.rank(), g, par, &vocab, &unsupported);
  if (!unsupported.empty() &&
      !DropUnusableOperandDims(&osh, ish, unsupported, "neither taken whole nor indexed with slice size 1",
                               &p->gathered)) {
    return absl::StrCat("gather: operand tiled along dim(s) ", absl::StrJoin(unsupported, ","),
                        " that it neither takes whole nor indexes with slice size 1 "
                        "(no partitioning rule)");
  }
  if (!vocab.empty() && !IsSignedInteger(ig.element_type)) {
    return "gather: vocab-sharded operand with unsigned indices (no partitioning rule)";
  }
  // The indices keep their batch tiling (index_vector_dim untiled) when it combines with the
  // operand's tiling; else they are replicated.
  Sharding& idx_req = p->idx_req;
  if (ish.IsTiled() && g.index_vector_dim < ig.rank()) {
    std::optional<Sharding> r = ReplicateDims(ish, {g.index_vector_dim});
    if (r) idx_req = *r;
  } else if (ish.IsTiled()) {
    idx_req = ish;
  }
  // Index-parallel dims: operand and indices tiled alike on them.
  const bool parallel = AlignParallelDims(par, og, ig, g, &osh, ish, &idx_req, &vocab, &unsupported);
  p->parallel = parallel;
  if (!unsupported.empty()) {
    return absl::StrCat("gather: operand tiled along dim(s) ", absl::StrJoin(unsupported, ","),
                        " that no rule uses after aligning the index-parallel dims "
                        "(no partitioning rule)");
  }
  p->vocab_groups = vocab.empty() ? std::vector<std::vector<int64_t>>() : DeviceGroups(osh, vocab);
  auto groups_agree = [&](const Sharding& s) {
    for (const std::vector<int64_t>& grp : p->vocab_groups) {
      for (int64_t dev : grp) {
        if (s.TileIndex(dev, out.rank()) != s.TileIndex(grp[0], out.rank())) return false;
      }
    }
    return true;
  };
  std::optional<Sharding>& out_s = p->out_s;
  out_s = LocalGatherOutput(g, osh, idx_req, vocab, out.rank(), n);
  if (parallel && (!out_s || !groups_agree(*out_s))) {
    return "gather: index-parallel dims do not combine with the other tilings (no partitioning rule)";
  }
  p->moved = parallel ? std::string()
                      : TryIndicesInOperandReplication(g, osh, vocab, out.rank(), n, groups_agree, &idx_req, &out_s);
  if (!out_s || !groups_agree(*out_s)) {
    idx_req = Sharding::Replicated();
    out_s = LocalGatherOutput(g, osh, idx_req, vocab, out.rank(), n);
    if (out_s && !groups_agree(*out_s)) out_s.reset();
  }
  if (!out_s) return "gather: no consistent local sharding (no partitioning rule)";
  return std::nullopt;
}

// The vocab rule's indices: each component on a `vocab` dim of the operand (global `og`, tiled by
// `osh`) clamped to the global bounds and shifted by the partition's offset (index type `it`);
// *mask receives, and-ed over those dims, whether each row's shifted index lies in the local tile.
HloInstruction* LocalVocabIndices(SpmdBuilder& b, HloInstruction* indices, const GatherScatterDims& g,
                                  const std::vector<int64_t>& vocab, const Sharding& osh, const Shape& og,
                                  PrimitiveType it, HloInstruction** mask) {
  return RewriteIndexComponents(b, indices, g, vocab, [&](int64_t v, HloInstruction* c) {
    const Shape cs = c->shape();
    const int64_t size = og.dims[static_cast<size_t>(v)];
    const int64_t local = ShardSize(size, osh.tile(v));
    HloInstruction* lo = b.Splat(b.ScalarConst(it, 0), cs);
    HloInstruction* hi = b.Splat(b.ScalarConst(it, static_cast<double>(size - 1)), cs);
    HloInstruction* clamped = b.Add(HloOpcode::kClamp, cs, {lo, c, hi}, "clamp");
    HloInstruction* adj = b.Add(HloOpcode::kSubtract, cs,
                                {clamped, b.Splat(TileOffsetIndex(b, osh, og, v, it), cs)}, "local_index");
    HloInstruction* ge = Compare(b, adj, lo, ComparisonDirection::kGe);
    HloInstruction* lt = Compare(b, adj, b.Splat(b.ScalarConst(it, static_cast<double>(local)), cs),
                                 ComparisonDirection::kLt);
    HloInstruction* in = b.Add(HloOpcode::kAnd, ge->shape(), {ge, lt}, "in_shard");
    *mask = *mask == nullptr ? in : b.Add(HloOpcode::kAnd, in->shape(), {*mask, in}, "and");
    return adj;
  });
}

// The local gather's slice_sizes attribute: its pass-through dims take their local extent
// under `osh` (the operand's global shape `og`).
void SetLocalSliceSizes(HloInstruction* local, const GatherScatterDims& g, const Shape& og,
                        const Sharding& osh) {
  const Shape local_operand = LocalShape(og, osh);
  std::vector<int64_t> sizes = g.slice_sizes;
  for (int64_t d = 0; d < og.rank(); ++d) {
    if (g.pass_through[static_cast<size_t>(d)]) sizes[static_cast<size_t>(d)] = local_operand.dims[static_cast<size_t>(d)];
  }
  for (auto& [key, value] : *local->mutable_raw_attributes()) {
    if (key == "slice_sizes") value = absl::StrCat("{", absl::StrJoin(sizes, ","), "}");
  }
}

// `local` (the local gather, of shape `local_shape`) with the rows `mask` marks out of the shard
// zeroed: the mask's index_vector_dim (size 1) dropped, broadcast over the offset dims.
HloInstruction* ZeroOutOfShardRows(SpmdBuilder& b, HloInstruction* local, HloInstruction* mask,
                                   const GatherScatterDims& g, const Shape& local_shape) {
  std::vector<int64_t> batch_sizes;
  for (int64_t d : g.indices_batch) batch_sizes.push_back(mask->shape().dims[static_cast<size_t>(d)]);
  HloInstruction* m = b.Reshape(mask, batch_sizes);
  HloInstruction* mb = b.Add(HloOpcode::kBroadcast, Shape(PrimitiveType::PRED, local_shape.dims), {m}, "broadcast");
  mb->dimensions = g.batch_out;
  return b.Select(mb, local, b.Zeros(local_shape));
}

}  // namespace

absl::StatusOr<PValue> PartitionGather(ComputationPartitioner& cp, const HloInstruction& h) {
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(h);
  if (!g) return cp.Replicated(h, "gather: unreadable dimension numbers, no partitioning rule");
  GatherPlan p;
  if (std::optional<std::string> why = PlanGather(cp, h, *g, &p)) return cp.Replicated(h, *why);
  const Sharding& osh = p.osh;
  const Sharding& idx_req = p.idx_req;
  const std::optional<Sharding>& out_s = p.out_s;
  const Shape& og = h.operand(0)->shape();
  const Shape& ig = h.operand(1)->shape();
  const Shape& out = h.shape();
  ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, 0, osh));
  ASSIGN_OR_RETURN(HloInstruction* ix, cp.Operand(h, 1, idx_req));
  SpmdBuilder& b = cp.b();
  HloInstruction* indices = p.parallel ? ShiftParallelIndices(b, ix, *g, p.par, osh, og) : ix;
  HloInstruction* mask = nullptr;
  if (!p.vocab.empty()) indices = LocalVocabIndices(b, indices, *g, p.vocab, osh, og, ig.element_type, &mask);
  const Shape local_shape = LocalShape(out, *out_s);
  HloInstruction* local = cp.Clone(h, local_shape, {o, indices});
  SetLocalSliceSizes(local, *g, og, osh);
  if (mask != nullptr) {
    local = ZeroOutOfShardRows(b, local, mask, *g, local_shape);
    local = b.AllReduce(local, p.vocab_groups, b.Reducer(HloOpcode::kAdd, out.element_type));
    cp.Remark(h, true,
              absl::StrCat("gather from an operand tiled on its indexed dim(s) ", absl::StrJoin(p.vocab, ","),
                           " (vocab-sharded): indices ", idx_req.ToString(),
                           " shifted by the partition's offset, out-of-shard rows zeroed, local "
                           "gather, one all-reduce (add); result ", out_s->ToString(), p.gathered));
  } else if (p.parallel) {
    std::vector<std::string> pairs;
    for (const ParallelDim& pd : p.par) {
      pairs.push_back(absl::StrCat(pd.operand_dim, "~", pd.indices_dim, pd.iota ? " (iota)" : " (batching)"));
    }
    cp.Remark(h, true,
              absl::StrCat("gather, index-parallel dims (operand~indices) ", absl::StrJoin(pairs, ", "),
                           ": operand ", osh.ToString(), ", indices ", idx_req.ToString(),
                           ", iota indices shifted by the tile's offset, local gather; result ",
                           out_s->ToString(), p.gathered));
  } else if (out_s->IsTiled()) {
    cp.Remark(h, true,
              absl::StrCat("gather, index-parallel / operand pass-through: local gather with "
                           "operand ", osh.ToString(), ", indices ", idx_req.ToString(), p.moved, "; result ",
                           out_s->ToString(), p.gathered));
  }
  return PValue{local, *out_s, out};
}

namespace {

// Whether `s` tiles any of `dims` of `global` unevenly (its last tile holds padding).
bool HasUnevenTiledDim(const Sharding& s, const Shape& global, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return false;
  for (int64_t d : dims) {
    if (d < s.rank() && s.tile(d) > 1 && global.dims[static_cast<size_t>(d)] % s.tile(d) != 0) return true;
  }
  return false;
}

// An index value no window of the scatter `g` (operand `og`, updates `ug`) can start at, for the
// padding rows of an uneven index tile, as XLA's partitioner pads scatter indices: -1 for signed
// index types (XLA's pad value); for unsigned ones the type's largest value, where it lies past
// some indexed dim's last window start. nullopt when no value of the type is out of bounds
// (u8/u16 indices into a dim longer than the type's range).
std::optional<int64_t> OutOfBoundsIndex(PrimitiveType it, const GatherScatterDims& g, const Shape& og,
                                        const Shape& ug) {
  if (IsSignedInteger(it)) return -1;
  if (!IsUnsignedInteger(it)) return std::nullopt;
  const int bits = BitWidth(it);
  // u64's largest value is all ones: -1 in the constant's int64 storage.
  const int64_t largest = bits >= 64 ? -1 : (int64_t{1} << bits) - 1;
  if (bits >= 63) return largest;
  for (int64_t d : g.start_index_map) {
    // The window extent along operand dim d: 1 where it is collapsed, else its update dim's size.
    int64_t window = 1;
    for (size_t j = 0; j < g.window_operand.size(); ++j) {
      if (g.window_operand[j] == d) window = ug.dims[static_cast<size_t>(g.offset_dims[j])];
    }
    if (largest + window > og.dims[static_cast<size_t>(d)]) return largest;
  }
  return std::nullopt;
}

// The combiner of a scatter whose index-parallel form Weave partitions: the scalar computation
// op(p0, p1) for an associative, commutative op with an identity of type `t` (add 0, multiply 1,
// minimum +inf / the type's largest, maximum -inf / its smallest (float types with an
// infinity only), and true, or false): the
// devices of a batch group that do not own the operand start from the identity, and one
// all-reduce with `op` combines them (XLA's PartitionScatterIndexPassthroughDimensions). nullopt
// otherwise.
struct Combiner {
  HloOpcode op;
  Literal identity;
};
std::optional<Combiner> ScatterCombiner(const HloComputation* c, PrimitiveType t) {
  if (c == nullptr || c->num_parameters() != 2) return std::nullopt;
  const HloInstruction* r = c->root();
  if (r->operand_count() != 2 || r->operand(0)->opcode() != HloOpcode::kParameter ||
      r->operand(1)->opcode() != HloOpcode::kParameter || r->operand(0) == r->operand(1)) {
    return std::nullopt;
  }
  const bool fp = IsFloatingPoint(t), sint = IsSignedInteger(t), uint = IsUnsignedInteger(t);
  const int bits = BitWidth(t);
  auto lit = [&](double f, int64_t i) { return fp ? Literal::Scalar(t, f) : Literal::ScalarInt(t, i); };
  switch (r->opcode()) {
    case HloOpcode::kAdd:
      if (t == PrimitiveType::PRED) return std::nullopt;
      return Combiner{HloOpcode::kAdd, lit(0, 0)};
    case HloOpcode::kMultiply:
      if (t == PrimitiveType::PRED) return std::nullopt;
      return Combiner{HloOpcode::kMultiply, lit(1, 1)};
    case HloOpcode::kMinimum:
    case HloOpcode::kMaximum: {
      const bool mn = r->opcode() == HloOpcode::kMinimum;
      if (fp) {
        // +-inf is the identity only where the type has an infinity.
        if (!HasInfinity(t)) return std::nullopt;
        return Combiner{r->opcode(), Literal::Scalar(t, mn ? HUGE_VAL : -HUGE_VAL)};
      }
      if (sint && bits <= 64) {
        const int64_t hi = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
        return Combiner{r->opcode(), Literal::ScalarInt(t, mn ? hi : -hi - 1)};
      }
      if (uint && bits < 64) return Combiner{r->opcode(), Literal::ScalarInt(t, mn ? (int64_t{1} << bits) - 1 : 0)};
      return std::nullopt;
    }
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
      if (t != PrimitiveType::PRED) return std::nullopt;
      return Combiner{r->opcode(), Literal::ScalarInt(t, r->opcode() == HloOpcode::kAnd ? 1 : 0)};
    default:
      return std::nullopt;
  }
}

// What one scatter's partitioning (k operands and k updates) decides besides: the updates'
// sharding and the batch groups whose partial scatters an all-reduce combines.
struct ScatterPlan : GatherScatterPlan {
  int64_t k = 0;
  // The element type the combiner's identity is of (none for a variadic scatter).
  PrimitiveType et = PrimitiveType::TUPLE;
  std::vector<bool> par_index;  // per indices dim: an aligned index-parallel dim
  std::optional<Sharding> upd;
  std::vector<std::vector<int64_t>> groups;
};

// The first half of scatter `h`'s decision (p->k and p->et set): the operand's tiling classified
// (unusable dims gathered), the index-parallel dims aligned, the indices' sharding. Returns why
// the scatter is computed replicated instead (the remark's reason), or nullopt. Builds nothing.
std::optional<std::string> PlanScatterIndices(ComputationPartitioner& cp, const HloInstruction& h,
                                              const GatherScatterDims& g, ScatterPlan* p) {
  const PrimitiveType et = p->et;
  Sharding& osh = p->osh;
  osh = PhysicalSharding(cp.Value(h.operand(0)).sharding);
  const Sharding ish = PhysicalSharding(cp.Value(h.operand(p->k)).sharding);
  const Shape& og = h.operand(0)->shape();
  const Shape& ig = h.operand(p->k)->shape();
  p->par = ParallelDims(h, g);
  const std::vector<ParallelDim>& par = p->par;
  std::vector<int64_t>& vocab = p->vocab;
  std::vector<int64_t> unsupported;
  ClassifyOperandTiling(osh, og.rank(), g, par, &vocab, &unsupported);
  if (!unsupported.empty() &&
      !DropUnusableOperandDims(&osh, ish, unsupported,
                               "neither covered whole by the windows nor updated one row at a time", &p->gathered)) {
    return absl::StrCat("scatter: operand tiled along dim(s) ", absl::StrJoin(unsupported, ","),
                        " that its windows neither cover whole nor update one row "
                        "of (no partitioning rule)");
  }
  if (!vocab.empty() && !IsSignedInteger(ig.element_type)) {
    return "scatter: vocab-sharded operand with unsigned indices (no partitioning rule)";
  }
  Sharding& idx_req = p->idx_req;
  // Index-parallel dims: operand and indices tiled alike on them, no combining across them.
  const bool parallel = AlignParallelDims(par, og, ig, g, &osh, ish, &idx_req, &vocab, &unsupported);
  p->parallel = parallel;
  if (!unsupported.empty()) {
    return absl::StrCat("scatter: operand tiled along dim(s) ", absl::StrJoin(unsupported, ","),
                        " that no rule uses after aligning the index-parallel dims "
                        "(no partitioning rule)");
  }
  std::vector<bool>& par_index = p->par_index;
  par_index.assign(static_cast<size_t>(ig.rank()), false);
  for (const ParallelDim& pd : par) par_index[static_cast<size_t>(pd.indices_dim)] = parallel;
  if (parallel && idx_req.IsTiled()) {
    // Indices also tiled on other batch dims (index pass-through merged with the parallel dims):
    // partial scatters combined by an all-reduce, which needs the combiner and no vocab shift.
    bool other = false;
    for (int64_t d : g.indices_batch) other |= idx_req.tile(d) > 1 && !par_index[static_cast<size_t>(d)];
    if (other && (!vocab.empty() || !ScatterCombiner(h.to_apply(), et))) {
      return "scatter: indices tiled on parallel and other batch dims with a vocab-sharded "
             "operand or a combiner that is not add, multiply, minimum, maximum, and or or "
             "(no partitioning rule)";
    }
  }
  if (!parallel && vocab.empty() && ish.IsTiled()) {
    std::optional<Sharding> r =
        g.index_vector_dim < ig.rank() ? ReplicateDims(ish, {g.index_vector_dim}) : ish;
    if (r) idx_req = *r;
    if (idx_req.IsTiled() && !ScatterCombiner(h.to_apply(), et)) {
      return "scatter: indices tiled on their batch dims with a combiner that is not "
             "add, multiply, minimum, maximum, and or or (no partitioning rule)";
    }
  }
  return std::nullopt;
}

// The second half of scatter `h`'s decision, after PlanScatterIndices: the updates' sharding and
// the batch groups to combine (the indices moved into the operand's replication, or replicated,
// where the first choice does not combine). Returns why the scatter is computed replicated
// instead, or nullopt. Builds nothing.
std::optional<std::string> PlanScatterUpdates(const HloInstruction& h, const GatherScatterDims& g,
                                              int64_t n, ScatterPlan* p) {
  const Shape& og = h.operand(0)->shape();
  const Shape& ug = h.operand(p->k + 1)->shape();
  const Sharding& osh = p->osh;
  Sharding& idx_req = p->idx_req;
  const std::vector<int64_t>& vocab = p->vocab;
  // The updates: scatter dims like the indices' batch dims, window dims like the operand's
  // pass-through dims (the gather output's layout).
  std::optional<Sharding>& upd = p->upd;
  upd = LocalGatherOutput(g, osh, idx_req, vocab, ug.rank(), n);
  const std::vector<bool>& par_index = p->par_index;
  std::vector<std::vector<int64_t>>& groups = p->groups;
  auto groups_ok = [&](const Sharding& u) {
    groups.clear();
    if (!u.IsTiled()) return true;
    std::vector<int64_t> dims;  // batch dims tiled, parallel ones aside (not combined)
    for (size_t k = 0; k < g.batch_out.size(); ++k) {
      const int64_t d = g.batch_out[k];
      if (u.tile(d) > 1 && !par_index[static_cast<size_t>(g.indices_batch[k])]) dims.push_back(d);
    }
    if (dims.empty()) return true;
    groups = DeviceGroups(u, dims);
    for (const std::vector<int64_t>& grp : groups) {
      for (int64_t dev : grp) {
        if (osh.TileIndex(dev, og.rank()) != osh.TileIndex(grp[0], og.rank())) return false;
      }
    }
    return true;
  };
  if (p->parallel && (!upd || !groups_ok(*upd))) {
    return "scatter: index-parallel dims do not combine with the other tilings (no partitioning rule)";
  }
  // the remark's note when the indices move into the operand's replication
  p->moved = !vocab.empty() ? std::string()
                            : TryIndicesInOperandReplication(g, osh, vocab, ug.rank(), n, groups_ok, &idx_req, &upd);
  if (!upd || !groups_ok(*upd)) {
    idx_req = Sharding::Replicated();
    upd = LocalGatherOutput(g, osh, idx_req, vocab, ug.rank(), n);
    if (!upd || !groups_ok(*upd)) return "scatter: no consistent local sharding (no partitioning rule)";
  }
  if (!groups.empty() && !ScatterCombiner(h.to_apply(), p->et)) {
    return "scatter: partial scatters to combine without an elementwise combiner (no partitioning rule)";
  }
  return std::nullopt;
}

// The local scatter's indices from `ix` (global `ig`, sharded by p.idx_req): the padding rows of
// an uneven index tile set to `oob` (when given), then the components on iota-parallel dims and
// (the vocab rule) on vocab dims shifted by the partition's offset along them.
HloInstruction* LocalScatterIndices(SpmdBuilder& b, HloInstruction* ix, const GatherScatterDims& g,
                                    const ScatterPlan& p, std::optional<int64_t> oob, const Shape& ig,
                                    const Shape& og) {
  HloInstruction* indices = ix;
  if (oob) {
    indices = b.MaskPadding(indices, p.idx_req, ig, g.indices_batch,
                            b.Constant(Literal::ScalarInt(ig.element_type, *oob)));
  }
  if (p.parallel) indices = ShiftParallelIndices(b, indices, g, p.par, p.osh, og);
  if (!p.vocab.empty()) indices = ShiftIndexComponents(b, indices, g, p.vocab, p.osh, og);
  return indices;
}

// The operand `base` on the first device of each of `groups` (of partitions 0..n-1), the
// combiner's identity (of `combiner` in type `et`, which has one) splatted on the others.
HloInstruction* FirstDeviceBase(SpmdBuilder& b, HloInstruction* base,
                                const std::vector<std::vector<int64_t>>& groups, int64_t n,
                                const HloComputation* combiner, PrimitiveType et) {
  std::vector<int64_t> first(static_cast<size_t>(n), 0);
  for (const std::vector<int64_t>& grp : groups) first[static_cast<size_t>(grp[0])] = 1;
  HloInstruction* flag = b.TableLookup(first);
  HloInstruction* one = b.ScalarConst(PrimitiveType::S32, 1);
  HloInstruction* is_first = Compare(b, flag, one, ComparisonDirection::kEq);
  HloInstruction* pred = b.Add(HloOpcode::kBroadcast, Shape(PrimitiveType::PRED, base->shape().dims),
                               {is_first}, "broadcast");
  return b.Select(pred, base, b.Splat(b.Constant(ScatterCombiner(combiner, et)->identity),
                                      base->shape()));
}

// The local scatter `local` of `h` combined (one all-reduce with the combiner over the batch
// groups) when p.groups asks for it, and the remark of the rule applied. Returns the result's
// local value.
HloInstruction* CombineAndRemarkScatter(ComputationPartitioner& cp, const HloInstruction& h,
                                        const ScatterPlan& p, HloInstruction* local) {
  SpmdBuilder& b = cp.b();
  const Sharding& osh = p.osh;
  if (!p.vocab.empty()) {
    cp.Remark(h, true,
              absl::StrCat("scatter into an operand tiled on its indexed dim(s) ", absl::StrJoin(p.vocab, ","),
                           " (vocab-sharded): indices shifted by the partition's offset (updates "
                           "for other shards fall out of bounds and are skipped), local scatter; "
                           "result ", osh.ToString(), p.gathered));
  } else if (!p.groups.empty()) {
    const HloOpcode op = ScatterCombiner(h.to_apply(), p.et)->op;
    local = b.AllReduce(local, p.groups, b.Reducer(op, p.et));
    cp.Remark(h, true,
              absl::StrCat("scatter, index-parallel: indices ", p.idx_req.ToString(), ", updates ",
                           p.upd->ToString(), p.moved, "; the first device of each batch group scatters into "
                           "the operand, the others into the combiner's identity, one all-reduce (",
                           std::string(HloOpcodeString(op)), "); result ", osh.ToString(), p.gathered));
  } else if (p.parallel) {
    cp.Remark(h, true, absl::StrCat("scatter, index-parallel dims: operand ", osh.ToString(), ", indices ",
                                    p.idx_req.ToString(), ", updates ", p.upd->ToString(),
                                    ", iota indices shifted by the tile's offset, local scatter; result ",
                                    osh.ToString(), p.gathered));
  } else if (p.upd->IsTiled() || osh.IsTiled()) {
    cp.Remark(h, true, absl::StrCat("scatter, operand pass-through: local scatter; result ", osh.ToString(), p.gathered));
  }
  return local;
}

}  // namespace

absl::StatusOr<PValue> PartitionScatter(ComputationPartitioner& cp, const HloInstruction& h) {
  // Operands o_1..o_k, the indices, updates u_1..u_k (k > 1: a variadic scatter, whose operands
  // and updates are partitioned alike; its combiner couples them, so no rule that combines
  // partial scatters applies to it).
  const int64_t k = (h.operand_count() - 1) / 2;
  if (h.operand_count() != 2 * k + 1 || k < 1 || h.shape().IsTuple() != (k > 1)) {
    return cp.Replicated(h, "scatter: unexpected operand count (no partitioning rule)");
  }
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(h);
  if (!g) return cp.Replicated(h, "scatter: unreadable dimension numbers, no partitioning rule");
  const int64_t n = cp.num_partitions();
  const Shape& og = h.operand(0)->shape();
  const Shape& ig = h.operand(k)->shape();
  const Shape& ug = h.operand(k + 1)->shape();
  ScatterPlan p;
  p.k = k;
  p.et = k == 1 ? h.shape().element_type : PrimitiveType::TUPLE;
  if (std::optional<std::string> why = PlanScatterIndices(cp, h, *g, &p)) return cp.Replicated(h, *why);
  if (std::optional<std::string> why = PlanScatterUpdates(h, *g, n, &p)) return cp.Replicated(h, *why);
  const Sharding& osh = p.osh;
  const Sharding& idx_req = p.idx_req;
  std::vector<HloInstruction*> bases;
  for (int64_t i = 0; i < k; ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, osh));
    bases.push_back(o);
  }
  ASSIGN_OR_RETURN(HloInstruction* ix, cp.Operand(h, k, idx_req));
  // The padding rows of an uneven index tile (a trailing tile past the global index count) hold
  // no index: each is set out of bounds, so the local scatter skips its window (left as it is, a
  // clamp in the program before the scatter would move it into range and its update would land
  // twice).
  std::optional<int64_t> oob;
  if (idx_req.IsTiled()) {
    oob = OutOfBoundsIndex(ig.element_type, *g, og, ug);
    if (!oob && HasUnevenTiledDim(idx_req, ig, g->indices_batch)) {
      return cp.Replicated(h, absl::StrCat("scatter: indices tiled unevenly and no ", std::string(PrimitiveTypeName(ig.element_type)),
                                           " index is out of bounds to mask their padding with (no partitioning rule)"));
    }
  }
  std::vector<HloInstruction*> updates;
  for (int64_t i = 0; i < k; ++i) {
    ASSIGN_OR_RETURN(HloInstruction* u, cp.Operand(h, k + 1 + i, *p.upd));
    updates.push_back(u);
  }
  SpmdBuilder& b = cp.b();
  HloInstruction* indices = LocalScatterIndices(b, ix, *g, p, oob, ig, og);
  if (p.vocab.empty() && !p.groups.empty()) {
    // The first device of each group keeps the operand; the others start from zeros.
    bases[0] = FirstDeviceBase(b, bases[0], p.groups, n, h.to_apply(), p.et);
  }
  std::vector<HloInstruction*> ops = bases;
  ops.push_back(indices);
  ops.insert(ops.end(), updates.begin(), updates.end());
  const Sharding result = Sharding::Broadcast(osh, h.shape());
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), result), ops);
  local = CombineAndRemarkScatter(cp, h, p, local);
  return PValue{local, result, h.shape()};
}

}  // namespace weave::spmd
