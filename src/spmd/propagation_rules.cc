// Per-op sharding inference (see propagation_rules.h).
#include "spmd/propagation_rules.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "hlo/conv_dims.h"
#include "spmd/gather_scatter_parallel.h"
#include "spmd/propagation_block_scaled.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

const Shape& LeafShape(const HloInstruction& h) { return h.shape(); }

// Dims where `sizes` is smaller than the operand's dims (sliced dims of a dynamic slice).
std::vector<int64_t> SlicedDims(const std::vector<int64_t>& full, const std::vector<int64_t>& part) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < full.size() && d < part.size(); ++d) {
    if (part[d] < full[d]) out.push_back(static_cast<int64_t>(d));
  }
  return out;
}

// Merges candidates into one (elementwise-style), leaves of the same rank as `dims` only.
Sharding MergeAll(const std::vector<const Sharding*>& cands, const std::vector<int64_t>& dims,
                  int a) {
  Sharding out;
  for (const Sharding* c : cands) {
    if (c == nullptr || c->IsTuple()) continue;
    if (c->IsTiled() && c->rank() != static_cast<int64_t>(dims.size())) continue;
    out = ImproveLeaf(out, *c, a >= 1, true, dims);
  }
  return out;
}

std::optional<Sharding> NonEmpty(Sharding s) {
  if (s.IsUnset()) return std::nullopt;
  return s;
}

// Broadcast: operand dim k -> result dim dims[k]. Sorted positions + the permutation that
// orders the operand dims by their result position.
std::vector<int64_t> OrderOf(const std::vector<int64_t>& dims) {
  std::vector<int64_t> order(dims.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return dims[static_cast<size_t>(x)] < dims[static_cast<size_t>(y)];
  });
  return order;
}

std::optional<Sharding> BroadcastForward(const HloInstruction& h, const Sharding& s) {
  if (!s.IsTiled()) return s.IsReplicated() ? std::optional<Sharding>(s) : std::nullopt;
  const std::vector<int64_t>& dims = h.dimensions;
  std::optional<Sharding> sorted = TransposeSharding(s, OrderOf(dims));
  if (!sorted) return std::nullopt;
  std::vector<int64_t> positions;
  for (int64_t d = 0; d < h.shape().rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) positions.push_back(d);
  }
  return InsertDims(*sorted, positions);
}

std::optional<Sharding> BroadcastBackward(const HloInstruction& h, const Sharding& s) {
  if (!s.IsTiled()) return s.IsReplicated() || s.IsManual() ? std::optional<Sharding>(s) : std::nullopt;
  const std::vector<int64_t>& dims = h.dimensions;
  std::vector<int64_t> added;
  for (int64_t d = 0; d < h.shape().rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) added.push_back(d);
  }
  std::optional<Sharding> r = ReplicateDims(s, added);
  if (!r) return std::nullopt;
  r = RemoveDims(*r, added);
  if (!r) return std::nullopt;
  // Back from sorted result order to operand order.
  const std::vector<int64_t> order = OrderOf(dims);
  std::vector<int64_t> inv(order.size());
  for (size_t k = 0; k < order.size(); ++k) inv[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  return TransposeSharding(*r, inv);
}

// `s` (of a value of rank `src_rank`) carried to a value whose dim t takes the tiling of `s`'s
// dim src_of[t] (-1: untiled); tiles of unmapped dims join replication.
std::optional<Sharding> MapDims(const Sharding& s, const std::vector<int64_t>& src_of) {
  if (s.IsUnset() || s.IsUnknown() || s.IsTuple()) return std::nullopt;
  if (!s.IsTiled()) return s.IsReplicated() ? std::optional<Sharding>(s) : std::nullopt;
  if (s.HasManualSubgroup()) return std::nullopt;
  std::vector<int64_t> tiles;
  for (int64_t d : src_of) tiles.push_back(d >= 0 ? s.tile(d) : 1);
  return Sharding::FromTileFunction(tiles, SortedDevices(s), [&](int64_t dev) {
    const std::vector<int64_t> i = *s.TileIndex(dev, s.rank());
    std::vector<int64_t> out;
    for (int64_t d : src_of) out.push_back(d >= 0 ? i[static_cast<size_t>(d)] : 0);
    return out;
  });
}

// The parallel dims of gather/scatter `h` (ParallelDims: explicit batching pairs and iota-derived
// indices): each as its operand dim, its indices dim and the output's (gather) or the updates'
// (scatter) dim that indices dim becomes.
struct ParallelDimMap {
  int64_t operand = -1, indices = -1, batch = -1;
};
std::vector<ParallelDimMap> ParallelDimMaps(const HloInstruction& h, const GatherScatterDims& g) {
  std::vector<ParallelDimMap> out;
  for (const ParallelDim& p : ParallelDims(h, g)) {
    auto at = std::find(g.indices_batch.begin(), g.indices_batch.end(), p.indices_dim);
    if (at == g.indices_batch.end()) continue;
    const size_t k = static_cast<size_t>(at - g.indices_batch.begin());
    if (k >= g.batch_out.size()) continue;
    out.push_back({p.operand_dim, p.indices_dim, g.batch_out[k]});
  }
  return out;
}

// A MapDims source map of rank `rank`: dim to(m) takes the tiling of dim from(m), for each map.
template <typename To, typename From>
std::vector<int64_t> ParallelSrc(const std::vector<ParallelDimMap>& maps, int64_t rank, To to,
                                 From from) {
  std::vector<int64_t> src(static_cast<size_t>(rank), -1);
  for (const ParallelDimMap& m : maps) {
    const int64_t t = to(m);
    if (t >= 0 && t < rank) src[static_cast<size_t>(t)] = from(m);
  }
  return src;
}
constexpr auto kOperandDim = [](const ParallelDimMap& m) { return m.operand; };
constexpr auto kIndicesDim = [](const ParallelDimMap& m) { return m.indices; };
constexpr auto kBatchDim = [](const ParallelDimMap& m) { return m.batch; };

// `s` carried along the parallel dims of `h` to a value of rank `rank` (ParallelSrc), or nullopt
// when `s` tiles nothing: the parallel dims (which may read a constant's elements) are looked
// for only when a tiling could travel along them, since the rules run every round.
template <typename To, typename From>
std::optional<Sharding> AlongParallelDims(const Sharding& s, const HloInstruction& h,
                                          const GatherScatterDims& g, int64_t rank, To to,
                                          From from) {
  if (!s.IsTiled()) return std::nullopt;
  return MapDims(s, ParallelSrc(ParallelDimMaps(h, g), rank, to, from));
}

// Gather (spec §2 table): the output's batch dims take the indices' tiling, its offset dims the
// tiling of the operand dims taken whole (pass-through); the indices' tiling first, the
// operand's merged in (XLA's InferGatherParallelShardingFromOperands and the pass-through rule).
std::optional<Sharding> GatherForward(const HloInstruction& h, const ShardingOf& get) {
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(h);
  if (!g) return std::nullopt;
  const int64_t out_rank = h.shape().rank();
  std::vector<int64_t> from_indices(static_cast<size_t>(out_rank), -1);
  std::vector<int64_t> from_operand(static_cast<size_t>(out_rank), -1);
  for (size_t k = 0; k < g->batch_out.size(); ++k) {
    from_indices[static_cast<size_t>(g->batch_out[k])] = g->indices_batch[k];
  }
  for (size_t w = 0; w < g->operand_to_offset.size(); ++w) {
    if (g->pass_through[w]) from_operand[static_cast<size_t>(g->operand_to_offset[w])] = static_cast<int64_t>(w);
  }
  std::optional<Sharding> ci = MapDims(get(h.operand(1)), from_indices);
  std::optional<Sharding> co = MapDims(get(h.operand(0)), from_operand);
  // The operand's parallel dims (XLA's InferGatherParallelShardingFromOperands).
  std::optional<Sharding> cp =
      AlongParallelDims(get(h.operand(0)), h, *g, out_rank, kBatchDim, kOperandDim);
  std::vector<const Sharding*> order;
  if (ci) order.push_back(&*ci);
  if (cp && cp->IsTiled()) order.push_back(&*cp);
  if (co) order.push_back(&*co);
  return NonEmpty(MergeAll(order, h.shape().dims, 1));
}

// Gather backward: the operand's pass-through dims from the output's offset dims (others
// untiled); the indices' batch dims from the output's batch dims (index_vector_dim untiled).
std::optional<Sharding> GatherBackward(const HloInstruction& user, int64_t i, const Sharding& us) {
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(user);
  if (!g || us.IsTuple() || i > 1) return std::nullopt;
  const Shape& os = user.operand(i)->shape();
  std::vector<int64_t> src(static_cast<size_t>(os.rank()), -1);
  if (i == 0) {
    for (int64_t w = 0; w < os.rank(); ++w) {
      if (g->pass_through[static_cast<size_t>(w)]) src[static_cast<size_t>(w)] = g->operand_to_offset[static_cast<size_t>(w)];
    }
    // The output's parallel dims first (XLA's GatherOperandShardingFromOutputParallelDimensions),
    // the pass-through ones merged in.
    std::optional<Sharding> par =
        AlongParallelDims(us, user, *g, os.rank(), kOperandDim, kBatchDim);
    std::optional<Sharding> pass = MapDims(us, src);
    if (par && par->IsTiled()) {
      std::vector<const Sharding*> order = {&*par};
      if (pass) order.push_back(&*pass);
      return NonEmpty(MergeAll(order, os.dims, 1));
    }
    return pass;
  } else {
    for (size_t k = 0; k < g->indices_batch.size(); ++k) {
      src[static_cast<size_t>(g->indices_batch[k])] = g->batch_out[k];
    }
  }
  return MapDims(us, src);
}

// Scatter (XLA's ScatterOutputShardingFromUpdate, ScatterUpdateShardingFromOutput's
// pass-through part, ScatterIndexShardingFromUpdate, ScatterUpdateShardingFromIndex): `src` maps
// for MapDims
// between a scatter's operands (operand, indices, updates; `g` its dims). Each is the dims of
// the target value, -1 where nothing carries over.
// Operand (result) dim w <- update dim: w taken whole (pass-through) -> its update window dim.
std::vector<int64_t> ScatterOperandFromUpdateDims(const GatherScatterDims& g) {
  std::vector<int64_t> src(g.pass_through.size(), -1);
  for (size_t w = 0; w < g.pass_through.size(); ++w) {
    if (g.pass_through[w]) src[w] = g.operand_to_offset[w];
  }
  return src;
}

// Update dim <- operand (result) dim: the inverse of ScatterOperandFromUpdateDims.
std::vector<int64_t> ScatterUpdateFromOperandDims(const GatherScatterDims& g, int64_t update_rank) {
  std::vector<int64_t> src(static_cast<size_t>(update_rank), -1);
  for (size_t w = 0; w < g.pass_through.size(); ++w) {
    if (g.pass_through[w] && g.operand_to_offset[w] >= 0 && g.operand_to_offset[w] < update_rank) {
      src[static_cast<size_t>(g.operand_to_offset[w])] = static_cast<int64_t>(w);
    }
  }
  return src;
}

// Indices dim <- update dim: each indices batch dim from its update scatter dim.
std::vector<int64_t> ScatterIndicesFromUpdateDims(const GatherScatterDims& g, int64_t indices_rank) {
  std::vector<int64_t> src(static_cast<size_t>(indices_rank), -1);
  for (size_t k = 0; k < g.indices_batch.size() && k < g.batch_out.size(); ++k) {
    src[static_cast<size_t>(g.indices_batch[k])] = g.batch_out[k];
  }
  return src;
}

// Update dim <- indices dim: each update scatter dim from its indices batch dim.
std::vector<int64_t> ScatterUpdateFromIndicesDims(const GatherScatterDims& g, int64_t update_rank) {
  std::vector<int64_t> src(static_cast<size_t>(update_rank), -1);
  for (size_t k = 0; k < g.indices_batch.size() && k < g.batch_out.size(); ++k) {
    src[static_cast<size_t>(g.batch_out[k])] = g.indices_batch[k];
  }
  return src;
}

// The number of scattered operands of a (variadic) scatter: operands, indices, updates.
int64_t ScatterOperandCount(const HloInstruction& h) { return (h.operand_count() - 1) / 2; }

// Scatter forward: result i from operand i, the parallel dims (explicit batch or iota-derived)
// of the indices and of update i (XLA's InferScatterParallelShardingFromOperands), and update
// i's pass-through window dims, merged in that order (XLA's order); a tuple for a variadic one.
std::optional<Sharding> ScatterForward(const HloInstruction& h, const ShardingOf& get) {
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(h);
  const int64_t n = ScatterOperandCount(h);
  if (!g || n < 1 || h.operand_count() != 2 * n + 1) return std::nullopt;
  const HloInstruction* indices = h.operand(n);
  std::vector<Sharding> leaves;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    const Shape& out = h.operand(i)->shape();
    const Sharding& update = get(h.operand(n + 1 + i));
    std::optional<Sharding> par_indices =
        AlongParallelDims(get(indices), h, *g, out.rank(), kOperandDim, kIndicesDim);
    std::optional<Sharding> par_update =
        AlongParallelDims(update, h, *g, out.rank(), kOperandDim, kBatchDim);
    std::optional<Sharding> from_update = MapDims(update, ScatterOperandFromUpdateDims(*g));
    std::vector<const Sharding*> order = {&get(h.operand(i))};
    for (const std::optional<Sharding>* c : {&par_indices, &par_update, &from_update}) {
      if (*c && (*c)->IsTiled()) order.push_back(&**c);
    }
    leaves.push_back(MergeAll(order, out.dims, 1));
    any |= !leaves.back().IsUnset();
  }
  if (!any) return std::nullopt;
  if (!h.shape().IsTuple()) return leaves[0];
  return Sharding::Tuple(std::move(leaves));
}

// Scatter backward (XLA's GetShardingFromUser): operand i from result leaf i; the indices from
// the first update that gives them a tiling; update j from the result's pass-through dims, the
// indices' tiling merged in, else from the indices alone.
std::optional<Sharding> ScatterBackward(const HloInstruction& user, int64_t i, const Sharding& us,
                                        const ShardingOf& get) {
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(user);
  const int64_t n = ScatterOperandCount(user);
  if (!g || n < 1 || user.operand_count() != 2 * n + 1) return std::nullopt;
  const bool tuple = user.shape().IsTuple();
  if (i < n) return NonEmpty(tuple ? us.TupleElement(user.shape(), i) : us);
  const HloInstruction* indices = user.operand(n);
  if (i == n) {
    for (int64_t j = 0; j < n; ++j) {
      std::optional<Sharding> s = MapDims(get(user.operand(n + 1 + j)),
                                          ScatterIndicesFromUpdateDims(*g, indices->shape().rank()));
      if (s && s->IsTiled()) return s;
    }
    return std::nullopt;
  }
  const int64_t j = i - n - 1;
  const Shape& update = user.operand(i)->shape();
  std::optional<Sharding> from_indices =
      MapDims(get(indices), ScatterUpdateFromIndicesDims(*g, update.rank()));
  const Sharding leaf = tuple ? us.TupleElement(user.shape(), j) : us;
  // From the output: its parallel dims first (XLA's
  // ScatterUpdateShardingFromOutputParallelDimensions), then its pass-through dims.
  std::optional<Sharding> par_output =
      AlongParallelDims(leaf, user, *g, update.rank(), kBatchDim, kOperandDim);
  std::optional<Sharding> from_output =
      MapDims(leaf, ScatterUpdateFromOperandDims(*g, update.rank()));
  std::vector<const Sharding*> order;
  for (const std::optional<Sharding>* c : {&par_output, &from_output}) {
    if (*c && (*c)->IsTiled()) order.push_back(&**c);
  }
  if (!order.empty()) {
    if (from_indices && from_indices->IsTiled()) order.push_back(&*from_indices);
    return NonEmpty(MergeAll(order, update.dims, 1));
  }
  if (from_indices && from_indices->IsTiled()) return from_indices;
  return std::nullopt;
}

// XLA's LookaheadUserSharding (sharding_propagation.cc): down the chain of single users from
// `h` to the first value that has a sharding, that sharding carried back up the chain with the
// backward rules (the chain's members keep no sharding). nullopt when `h` or a member of the
// chain has several users (or none) before a sharded value is reached.
std::optional<Sharding> LookaheadUserSharding(const HloInstruction& h, const ShardingOf& get) {
  if (h.user_count() != 1) return std::nullopt;
  std::vector<const HloInstruction*> chain = {&h, h.users()[0]};
  const HloInstruction* cur = h.users()[0];
  while (get(cur).IsUnset() || get(cur).IsUnknown()) {
    if (cur->user_count() != 1) return std::nullopt;
    cur = cur->users()[0];
    chain.push_back(cur);
  }
  std::vector<std::pair<const HloInstruction*, Sharding>> temp;
  const ShardingOf through = [&](const HloInstruction* x) -> const Sharding& {
    for (const auto& [i, s] : temp) {
      if (i == x) return s;
    }
    return get(x);
  };
  std::optional<Sharding> s;
  for (size_t i = chain.size() - 1; i >= 1; --i) {
    const HloInstruction* user = chain[i];
    const HloInstruction* current = chain[i - 1];
    int64_t idx = -1;
    for (int64_t k = 0; k < user->operand_count(); ++k) {
      if (user->operand(k) == current) {
        idx = k;
        break;
      }
    }
    if (idx < 0) return std::nullopt;
    s = InferOperandFromUser(*user, idx, through, 3);
    if (!s || s->IsUnset() || s->IsTuple()) return std::nullopt;
    if (i != 1) temp.emplace_back(current, *s);
  }
  return s;
}

// The tile count `s` gives the group dim of a grouped convolution's operand or result (`which`:
// 0 lhs, 1 kernel, 2 result); 1 without groups or tiling.
int64_t ConvolutionGroupTiles(const HloInstruction& conv, int which, const Sharding& s) {
  if (!s.IsTiled()) return 1;
  absl::StatusOr<ConvDims> cd = ParseConvDims(conv, conv.shape().rank());
  if (!cd.ok()) return 1;
  int64_t dim = -1;
  if (cd->feature_group_count > 1) {
    dim = which == 0 ? cd->lhs.b : which == 1 ? cd->kernel.b : cd->out.b;
  } else if (cd->batch_group_count > 1) {
    dim = which == 0 ? cd->lhs.a : which == 1 ? cd->kernel.b : cd->out.b;
  }
  return dim >= 0 && dim < s.rank() ? s.tile(dim) : 1;
}

// A convolution's result from its operands (XLA's InferConvolutionShardingFromOperands, through
// the dims ConvolutionOperandToOutputDims maps): each sharded operand implies a result sharding;
// the larger operand's comes first and the other is merged into it.
std::optional<Sharding> ConvolutionForward(const HloInstruction& h, const ShardingOf& get) {
  std::optional<Sharding> c[2];
  for (int i = 0; i < 2; ++i) {
    const Sharding& s = get(h.operand(i));
    if (s.IsUnset() || s.IsUnknown()) continue;
    std::vector<int64_t> map = ConvolutionOperandToOutputDims(h, i, ConvolutionGroupTiles(h, i, s));
    if (map.empty()) continue;
    // A strided window shrinks the dim: no more tiles than the result has elements there.
    for (size_t d = 0; d < map.size(); ++d) {
      if (map[d] >= 0 && s.IsTiled() && s.tile(static_cast<int64_t>(d)) > h.shape().dims[static_cast<size_t>(map[d])]) {
        map[d] = -1;
      }
    }
    c[i] = MapShardingDims(s, map, h.shape().rank());
  }
  const bool lhs_first = h.operand(0)->shape().ByteSize() >= h.operand(1)->shape().ByteSize();
  std::vector<const Sharding*> order;
  for (int i : {lhs_first ? 0 : 1, lhs_first ? 1 : 0}) {
    if (c[i]) order.push_back(&*c[i]);
  }
  return NonEmpty(MergeAll(order, h.shape().dims, 1));
}

// XLA's InferDotShardingFromOperands: each sharded operand implies an output sharding (its batch
// and own non-contracting dims); with two, the one the lookahead user sharding is a sub-tiling
// of comes first, else the larger operand's (bytes), and the other is merged into it.
std::optional<Sharding> DotForward(const HloInstruction& h, const ShardingOf& get,
                                   bool* read_users) {
  const Sharding& l = get(h.operand(0));
  const Sharding& r = get(h.operand(1));
  std::optional<Sharding> cl, cr;
  if (!l.IsUnset() && !l.IsUnknown()) cl = DotOutputFromOperand(l, 0, h);
  if (!r.IsUnset() && !r.IsUnknown()) cr = DotOutputFromOperand(r, 1, h);
  bool lhs_first =
      h.operand(0)->shape().ByteSize() >= h.operand(1)->shape().ByteSize();
  if (cl && cr && cl->IsTiled() && cr->IsTiled() && *cl != *cr) {
    if (read_users != nullptr) *read_users = true;
    if (std::optional<Sharding> look = LookaheadUserSharding(h, get)) {
      const bool sub0 = IsSubTilingOrEqual(h.shape().dims, *look, *cl);
      const bool sub1 = IsSubTilingOrEqual(h.shape().dims, *look, *cr);
      if (sub0 != sub1) lhs_first = sub0;
    }
  }
  std::vector<const Sharding*> order;
  const std::optional<Sharding>& first = lhs_first ? cl : cr;
  const std::optional<Sharding>& second = lhs_first ? cr : cl;
  if (first) order.push_back(&*first);
  if (second) order.push_back(&*second);
  return NonEmpty(MergeAll(order, h.shape().dims, 1));
}

}  // namespace

std::vector<int64_t> WindowSizes(const HloInstruction& h) {
  const std::string* w = h.GetRawAttribute("window");
  std::vector<int64_t> out;
  if (w == nullptr) return out;
  const size_t p = w->find("size=");
  if (p == std::string::npos) return out;
  size_t e = w->find_first_of(" }", p);
  std::string sizes = w->substr(p + 5, e == std::string::npos ? std::string::npos : e - p - 5);
  for (absl::string_view part : absl::StrSplit(sizes, 'x')) {
    int64_t v;
    if (absl::SimpleAtoi(part, &v)) out.push_back(v);
  }
  return out;
}

namespace {

// A bitcast-convert between element widths from its operand sharding `s`: the narrow side's last
// dim (the pieces) is never tiled. nullopt when `s` is unset or unknown or cannot follow.
std::optional<Sharding> BitcastConvertResizeForward(const HloInstruction& h, const Sharding& s) {
  const Shape& shape = LeafShape(h);
  if (s.IsUnset() || s.IsUnknown()) return std::nullopt;
  const int64_t in_last = h.operand(0)->shape().rank() - 1;
  if (shape.rank() > h.operand(0)->shape().rank()) return InsertDims(s, {shape.rank() - 1});
  std::optional<Sharding> r = ReplicateDims(s, {in_last});
  return r ? RemoveDims(*r, {in_last}) : std::nullopt;
}

// An elementwise op (or all-reduce, collective-permute): its same-rank operands merged.
std::optional<Sharding> ElementwiseForward(const HloInstruction& h, const ShardingOf& get, int a) {
  const Shape& shape = LeafShape(h);
  if (h.operand_count() == 0 || shape.IsTuple()) return std::nullopt;
  std::vector<const Sharding*> c;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    if (h.operand(i)->shape().rank() == shape.rank()) c.push_back(&get(h.operand(i)));
  }
  return NonEmpty(MergeAll(c, shape.dims, a));
}

// A tuple: its operands' shardings as leaves (unset operands give unset leaves); nullopt when
// every operand is unset.
std::optional<Sharding> TupleForward(const HloInstruction& h, const ShardingOf& get) {
  std::vector<Sharding> leaves;
  bool any = false;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const Sharding& s = get(h.operand(i));
    const Shape& es = h.operand(i)->shape();
    if (s.IsUnset()) {
      for (int64_t k = 0; k < Sharding::LeafCount(es); ++k) leaves.push_back(Sharding());
      continue;
    }
    any = true;
    const Sharding b = Sharding::Broadcast(s, es);
    if (b.IsTuple()) {
      leaves.insert(leaves.end(), b.leaves().begin(), b.leaves().end());
    } else {
      leaves.push_back(b);
    }
  }
  if (!any) return std::nullopt;
  return Sharding::Tuple(std::move(leaves));
}

// A concatenate: its operands merged; at level 0 those tiled along the concatenated dim skipped.
std::optional<Sharding> ConcatenateForward(const HloInstruction& h, const ShardingOf& get, int a) {
  std::vector<const Sharding*> c;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const Sharding& s = get(h.operand(i));
    const int64_t dim = h.dimensions.empty() ? 0 : h.dimensions[0];
    if (a == 0 && s.IsTiled() && dim < s.rank() && s.tile(dim) > 1) continue;
    c.push_back(&s);
  }
  return NonEmpty(MergeAll(c, LeafShape(h).dims, a));
}

// A dynamic-update-slice: the operand's sharding, merged with the update's (and, the operand
// unset, the operand's) with the sliced dims replicated.
std::optional<Sharding> DynamicUpdateSliceForward(const HloInstruction& h, const ShardingOf& get,
                                                  int a) {
  auto operand = [&](int64_t i) -> const Sharding& { return get(h.operand(i)); };
  const std::vector<int64_t> sliced =
      SlicedDims(h.operand(0)->shape().dims, h.operand(1)->shape().dims);
  std::optional<Sharding> s0 = ReplicateDims(operand(0), sliced);
  std::optional<Sharding> s1 = ReplicateDims(operand(1), sliced);
  std::vector<const Sharding*> c;
  // The operand's own sharding (with sliced dims tiled) is also a fine result sharding.
  c.push_back(&operand(0));
  if (s1) c.push_back(&*s1);
  if (s0 && operand(0).IsUnset()) c.push_back(&*s0);
  return NonEmpty(MergeAll(c, LeafShape(h).dims, a));
}

// A reduce: its inputs merged, the reduced dims replicated and removed, for every result.
std::optional<Sharding> ReduceForward(const HloInstruction& h, const ShardingOf& get, int a) {
  const int64_t n = h.operand_count() / 2;
  std::vector<const Sharding*> c;
  for (int64_t i = 0; i < n; ++i) c.push_back(&get(h.operand(i)));
  Sharding in = MergeAll(c, h.operand(0)->shape().dims, a);
  if (in.IsUnset()) return std::nullopt;
  std::optional<Sharding> r = ReplicateDims(in, h.dimensions);
  if (!r) return std::nullopt;
  r = RemoveDims(*r, h.dimensions);
  if (!r) return std::nullopt;
  return Sharding::Broadcast(*r, LeafShape(h));
}

// The dims a reduce-window's window spans (size above 1).
std::vector<int64_t> WindowSpannedDims(const HloInstruction& h) {
  std::vector<int64_t> window_dims;
  const std::vector<int64_t> sizes = WindowSizes(h);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1) window_dims.push_back(static_cast<int64_t>(d));
  }
  return window_dims;
}

// A custom call: block-scaled calls by their rule (their dot by DotForward), the manual-sharding
// markers none, any other replicated.
std::optional<Sharding> CustomCallForward(const HloInstruction& h, const ShardingOf& get,
                                          bool* read_users) {
  if (IsBlockScaledPropagated(h)) {
    return BlockScaledForward(h, get, [&](const HloInstruction& dot) {
      return DotForward(dot, get, read_users);
    });
  }
  if (h.custom_call_target() == "SPMDFullToShardShape" ||
      h.custom_call_target() == "SPMDShardToFullShape") {
    return std::nullopt;
  }
  return Sharding::Broadcast(Sharding::Replicated(), LeafShape(h));
}

}  // namespace

std::optional<Sharding> InferFromOperands(const HloInstruction& h, const ShardingOf& get, int a,
                                          bool* read_users) {
  const HloOpcode op = h.opcode();
  const Shape& shape = LeafShape(h);
  auto operand = [&](int64_t i) -> const Sharding& { return get(h.operand(i)); };
  if (op == HloOpcode::kBitcastConvert && h.operand_count() == 1 &&
      h.operand(0)->shape().rank() != shape.rank()) {
    return BitcastConvertResizeForward(h, operand(0));
  }
  // A copy of a tuple (XLA's verifier allows it) carries each element's sharding, as an
  // optimization barrier does.
  if (op == HloOpcode::kCopy && h.shape().IsTuple()) return NonEmpty(operand(0));
  if (IsElementwise(op) || op == HloOpcode::kAllReduce || op == HloOpcode::kCollectivePermute) {
    return ElementwiseForward(h, get, a);
  }
  switch (op) {
    case HloOpcode::kTuple:
      return TupleForward(h, get);
    case HloOpcode::kGetTupleElement: {
      const Sharding& s = operand(0);
      if (!s.IsTuple()) return NonEmpty(s);
      return NonEmpty(s.TupleElement(h.operand(0)->shape(), h.tuple_index));
    }
    case HloOpcode::kWhile:
    case HloOpcode::kOptimizationBarrier:
      return NonEmpty(operand(0));
    case HloOpcode::kReshape:
      if (operand(0).IsTiled()) {
        return ReshapeSharding(operand(0), h.operand(0)->shape().dims, shape.dims);
      }
      return NonEmpty(operand(0));
    case HloOpcode::kTranspose:
      return TransposeSharding(operand(0), h.dimensions);
    case HloOpcode::kConcatenate:
      return ConcatenateForward(h, get, a);
    case HloOpcode::kDynamicSlice: {
      const Sharding& s = operand(0);
      std::optional<Sharding> r =
          ReplicateDims(s, SlicedDims(h.operand(0)->shape().dims, h.dynamic_slice_sizes()));
      if (!r) return std::nullopt;
      return NonEmpty(*r);
    }
    case HloOpcode::kDynamicUpdateSlice:
      return DynamicUpdateSliceForward(h, get, a);
    default:
      break;
  }
  if (a < 1) return std::nullopt;
  switch (op) {
    case HloOpcode::kBroadcast:
      if (a < 3 || operand(0).IsUnset()) return std::nullopt;
      return BroadcastForward(h, operand(0));
    case HloOpcode::kSlice:
    case HloOpcode::kPad:
    case HloOpcode::kReverse:
      return NonEmpty(operand(0));
    case HloOpcode::kReduce:
      return ReduceForward(h, get, a);
    case HloOpcode::kDot:
      return DotForward(h, get, read_users);
    case HloOpcode::kConvolution:
      return ConvolutionForward(h, get);
    case HloOpcode::kGather:
      return GatherForward(h, get);
    case HloOpcode::kScatter:
      return ScatterForward(h, get);
    case HloOpcode::kSort: {
      if (operand(0).IsUnset() || h.dimensions.empty()) return std::nullopt;
      std::optional<Sharding> r = ReplicateDims(operand(0), h.dimensions);
      if (!r) return std::nullopt;
      return Sharding::Broadcast(*r, shape);
    }
    case HloOpcode::kReduceWindow: {
      if (operand(0).IsUnset() || shape.IsTuple()) return std::nullopt;
      std::optional<Sharding> r = ReplicateDims(operand(0), WindowSpannedDims(h));
      if (!r) return std::nullopt;
      return NonEmpty(*r);
    }
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
      return Sharding::Broadcast(Sharding::Replicated(), shape);
    case HloOpcode::kCustomCall:
      return CustomCallForward(h, get, read_users);
    default:
      return std::nullopt;
  }
}

int ForwardLevelClass(HloOpcode op, int a) {
  if (a <= 0) return 0;
  return op == HloOpcode::kBroadcast && a >= 3 ? 2 : 1;
}

int BackwardLevelClass(HloOpcode op, int a) {
  if (a <= 0) return 0;
  return op == HloOpcode::kBroadcast && a >= 2 ? 2 : 1;
}

namespace {

// A get-tuple-element's operand `i` from its sharding `us`: only the read element's leaves are
// known, the others unset.
std::optional<Sharding> GetTupleElementBackward(const HloInstruction& user, int64_t i,
                                                const Sharding& us) {
  const Shape& os = user.operand(i)->shape();
  std::vector<Sharding> leaves(static_cast<size_t>(Sharding::LeafCount(os)));
  int64_t first = 0;
  for (int64_t k = 0; k < user.tuple_index; ++k) {
    first += Sharding::LeafCount(os.tuple_shapes[static_cast<size_t>(k)]);
  }
  const Sharding b = Sharding::Broadcast(us, user.shape());
  if (b.IsTuple()) {
    for (size_t k = 0; k < b.leaves().size(); ++k) {
      leaves[static_cast<size_t>(first) + k] = b.leaves()[k];
    }
  } else {
    leaves[static_cast<size_t>(first)] = b;
  }
  return Sharding::Tuple(std::move(leaves));
}

// A reduce's operand `i` from its sharding `us`: an input takes the (first) result's tiling with
// the reduced dims inserted untiled; an init value is replicated.
std::optional<Sharding> ReduceBackward(const HloInstruction& user, int64_t i, const Sharding& us) {
  const int64_t n = user.operand_count() / 2;
  if (i >= n) return Sharding::Replicated();
  const Sharding leaf = us.IsTuple() ? us.leaves()[0] : us;
  if (leaf.IsUnset()) return std::nullopt;
  std::vector<int64_t> dims = user.dimensions;
  std::sort(dims.begin(), dims.end());
  return InsertDims(leaf, dims);
}

// A convolution's operand `i` from its sharding `us`: the operand's dims that map to result
// dims take their tiles; the rest replicated.
std::optional<Sharding> ConvolutionBackward(const HloInstruction& user, int64_t i,
                                            const Sharding& us) {
  if (us.IsTuple() || i > 1) return std::nullopt;
  const std::vector<int64_t> map =
      ConvolutionOperandToOutputDims(user, i, ConvolutionGroupTiles(user, 2, us));
  if (map.empty()) return std::nullopt;
  std::vector<int64_t> inverse(static_cast<size_t>(user.shape().rank()), -1);
  for (size_t d = 0; d < map.size(); ++d) {
    if (map[d] >= 0) inverse[static_cast<size_t>(map[d])] = static_cast<int64_t>(d);
  }
  return MapShardingDims(us, inverse, user.operand(i)->shape().rank());
}

}  // namespace

std::optional<Sharding> InferOperandFromUser(const HloInstruction& user, int64_t i,
                                             const ShardingOf& get, int a) {
  const Sharding& us = get(&user);
  if (us.IsUnset() || us.IsUnknown()) return std::nullopt;
  const HloOpcode op = user.opcode();
  const Shape& os = user.operand(i)->shape();
  if (op == HloOpcode::kBitcastConvert && os.rank() != user.shape().rank()) {
    const int64_t out_last = user.shape().rank() - 1;
    if (os.rank() > user.shape().rank()) return InsertDims(us, {os.rank() - 1});
    std::optional<Sharding> r = ReplicateDims(us, {out_last});
    return r ? RemoveDims(*r, {out_last}) : std::nullopt;
  }
  if (op == HloOpcode::kCopy && user.shape().IsTuple()) return us;  // a tuple copy
  if (IsElementwise(op) || op == HloOpcode::kAllReduce || op == HloOpcode::kCollectivePermute) {
    if (os.rank() != user.shape().rank() || user.shape().IsTuple()) return std::nullopt;
    return us;
  }
  if (op == HloOpcode::kCustomCall && IsBlockScaledPropagated(user)) {
    return BlockScaledOperandFromUser(user, i, us, get);
  }
  switch (op) {
    case HloOpcode::kTuple:
      return NonEmpty(us.TupleElement(user.shape(), i));
    case HloOpcode::kGetTupleElement:
      return GetTupleElementBackward(user, i, us);
    case HloOpcode::kWhile:
    case HloOpcode::kOptimizationBarrier:
      return us;
    case HloOpcode::kReshape:
      if (us.IsTiled()) return ReshapeSharding(us, user.shape().dims, os.dims);
      return us;
    case HloOpcode::kTranspose: {
      std::vector<int64_t> inv(user.dimensions.size());
      for (size_t k = 0; k < inv.size(); ++k) {
        inv[static_cast<size_t>(user.dimensions[k])] = static_cast<int64_t>(k);
      }
      return TransposeSharding(us, inv);
    }
    case HloOpcode::kConcatenate:
      return us;
    case HloOpcode::kDynamicSlice:
      if (i > 0) return Sharding::Replicated();
      return ReplicateDims(us, SlicedDims(os.dims, user.dynamic_slice_sizes()));
    case HloOpcode::kDynamicUpdateSlice:
      if (i >= 2) return Sharding::Replicated();
      if (i == 0) return us;
      return ReplicateDims(us, SlicedDims(user.shape().dims, os.dims));
    default:
      break;
  }
  if (a < 1) return std::nullopt;
  switch (op) {
    case HloOpcode::kBroadcast:
      if (a < 2) return std::nullopt;
      return BroadcastBackward(user, us);
    case HloOpcode::kSlice:
    case HloOpcode::kReverse:
      return us;
    case HloOpcode::kPad:
      return i == 0 ? us : Sharding::Replicated();
    case HloOpcode::kReduce:
      return ReduceBackward(user, i, us);
    case HloOpcode::kDot: {
      const Sharding& other = get(user.operand(1 - i));
      const Sharding* o = other.IsTiled() ? &other : nullptr;
      return DotOperandFromOutput(us, o, i, user);
    }
    case HloOpcode::kConvolution:
      return ConvolutionBackward(user, i, us);
    case HloOpcode::kGather:
      return GatherBackward(user, i, us);
    case HloOpcode::kScatter:
      return ScatterBackward(user, i, us, get);
    case HloOpcode::kSort: {
      const Sharding leaf = us.IsTuple() ? us.leaves()[0] : us;
      if (leaf.IsUnset()) return std::nullopt;
      return ReplicateDims(leaf, user.dimensions);
    }
    case HloOpcode::kReduceWindow:
      if (i > 0 || us.IsTuple()) return i > 0 ? std::optional<Sharding>(Sharding::Replicated()) : std::nullopt;
      return ReplicateDims(us, WindowSpannedDims(user));
    default:
      return std::nullopt;
  }
}

}  // namespace weave::spmd
