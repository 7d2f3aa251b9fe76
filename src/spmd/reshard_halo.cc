// Resharding one dim by halo exchange (see reshard_halo.h).
#include "spmd/reshard_halo.h"

#include <algorithm>
#include <map>

#include "spmd/halo_exchange.h"

namespace weave::spmd {
namespace {

bool OnlyReplicatedSubgroups(const Sharding& s) {
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return false;
  }
  return true;
}

}  // namespace

std::optional<HaloReshard> PlanHaloReshard(const Sharding& from, const Sharding& to,
                                           const Shape& global, int64_t n) {
  if (!global.IsArray() || !from.IsTiled() || !to.IsTiled()) return std::nullopt;
  const int64_t rank = global.rank();
  if (from.rank() != rank || to.rank() != rank) return std::nullopt;
  if (!OnlyReplicatedSubgroups(from) || !OnlyReplicatedSubgroups(to)) return std::nullopt;
  if (static_cast<int64_t>(from.devices().size()) != n || static_cast<int64_t>(to.devices().size()) != n) {
    return std::nullopt;
  }
  int64_t d = -1;
  for (int64_t e = 0; e < rank; ++e) {
    if (from.tile(e) == to.tile(e)) continue;
    if (d >= 0) return std::nullopt;
    d = e;
  }
  if (d < 0) return std::nullopt;
  const int64_t k = from.tile(d), m = to.tile(d);
  if (k < 2 || m < 2) return std::nullopt;
  if (m < k && k % m != 0) return std::nullopt;
  for (int64_t p = 0; p < n; ++p) {
    if (from.PositionOf(p) < 0 || to.PositionOf(p) < 0) return std::nullopt;
    for (int64_t e = 0; e < rank; ++e) {
      if (e == d || from.tile(e) == 1) continue;
      const int64_t size = global.dims[static_cast<size_t>(e)];
      if (TileOffset(from, p, e, size) != TileOffset(to, p, e, size)) return std::nullopt;
    }
  }
  const int64_t size = global.dims[static_cast<size_t>(d)];
  HaloReshard h;
  h.dim = d;
  h.target_tile = ShardSize(size, m);
  h.starts.resize(static_cast<size_t>(n));
  if (m > k) {
    h.width = h.target_tile;
    for (int64_t p = 0; p < n; ++p) h.starts[static_cast<size_t>(p)] = TileOffset(to, p, d, size);
  } else {
    h.r = k / m;
    h.width = ShardSize(h.target_tile, h.r);
    h.slot.resize(static_cast<size_t>(n));
    // The devices of each target tile (all dims), in source tile order along d.
    std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, int64_t>>> sharers;
    for (int64_t p = 0; p < n; ++p) {
      std::vector<int64_t> key(static_cast<size_t>(rank));
      for (int64_t e = 0; e < rank; ++e) key[static_cast<size_t>(e)] = TileOffset(to, p, e, global.dims[static_cast<size_t>(e)]);
      sharers[key].push_back({TileOffset(from, p, d, size), p});
    }
    for (auto& [key, devs] : sharers) {
      const int64_t count = static_cast<int64_t>(devs.size());
      if (count % h.r != 0) return std::nullopt;
      std::sort(devs.begin(), devs.end());
      const int64_t per_slot = count / h.r;
      std::vector<std::vector<int64_t>> groups(static_cast<size_t>(per_slot));
      for (int64_t j = 0; j < count; ++j) {
        const int64_t p = devs[static_cast<size_t>(j)].second;
        const int64_t s = j / per_slot;
        h.slot[static_cast<size_t>(p)] = s;
        h.starts[static_cast<size_t>(p)] = key[static_cast<size_t>(d)] + s * h.width;
        groups[static_cast<size_t>(j % per_slot)].push_back(p);
      }
      for (auto& g : groups) h.groups.push_back(std::move(g));
    }
  }
  HaloWindow w;
  w.dim = d;
  w.size = h.width;
  w.starts = h.starts;
  absl::StatusOr<int64_t> fetched = HaloFetchedElements(from, global, w, n);
  if (!fetched.ok()) return std::nullopt;
  // Bytes: what every device receives (the exchange sends each the union of the windows' reach
  // outside the own tile), plus the join.
  int64_t row = 1;
  for (int64_t e = 0; e < rank; ++e) {
    if (e != d) row *= ShardSize(global.dims[static_cast<size_t>(e)], from.tile(e));
  }
  const double elem = BitWidth(global.element_type) / 8.0;
  const int64_t halo = *fetched;
  const int64_t join = h.r == 1 ? 0
                       : h.target_tile <= h.r / 2 ? h.r * h.width
                                                  : (h.r - 1) * h.width;
  h.bytes = static_cast<double>((halo + join) * row) * elem;
  return h;
}

absl::StatusOr<HloInstruction*> EmitHaloReshard(SpmdBuilder& b, HloInstruction* x,
                                                const Sharding& from, const HaloReshard& h,
                                                const Shape& global) {
  HaloWindow w;
  w.dim = h.dim;
  w.size = h.width;
  w.starts = h.starts;
  absl::StatusOr<HloInstruction*> y = ExchangeHalo(b, x, from, global, w, nullptr);
  if (!y.ok() || h.r == 1) return y;
  HloInstruction* v = *y;
  const size_t d = static_cast<size_t>(h.dim);
  const PrimitiveType t = v->shape().element_type;
  std::vector<int64_t> joined = v->shape().dims;
  joined[d] = h.r * h.width;
  if (h.target_tile <= h.r / 2) {
    // Most slots hold padding only: each writes its sub-tile into zeros at s * u, the group sums.
    std::vector<int64_t> at(h.slot.size());
    for (size_t p = 0; p < at.size(); ++p) at[p] = h.slot[p] * h.width;
    v = b.AllReduceInto(v, Shape(t, joined), h.dim, at, h.groups);
  } else {
    v = b.AllGather(v, h.dim, h.groups);
  }
  if (v->shape().dims[d] > h.target_tile) {
    std::vector<int64_t> limits = v->shape().dims;
    limits[d] = h.target_tile;
    v = b.Slice(v, limits);
  }
  return v;
}

}  // namespace weave::spmd
