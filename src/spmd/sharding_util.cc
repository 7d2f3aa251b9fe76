// Sharding transformations (see sharding_util.h).
#include "spmd/sharding_util.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "hlo/conv_dims.h"
#include "hlo/mesh.h"
#include "hlo/window.h"

namespace weave::spmd {
namespace {

// Results of a pure sharding transformation by a key that holds everything it reads (shardings
// by their canonical text, which Sharding caches per distinct tiled sharding). A propagation over
// a stack of identical layers asks the same questions thousands of times; each answer is built
// once. One table per transformation and per thread, emptied when it reaches kMemoEntries.
using MemoTable = absl::flat_hash_map<std::string, std::optional<Sharding>>;
constexpr size_t kMemoEntries = size_t{1} << 14;

template <typename Compute>
std::optional<Sharding> Memoized(MemoTable& memo, std::string key, Compute compute) {
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  std::optional<Sharding> result = compute();
  if (memo.size() >= kMemoEntries) memo.clear();
  memo.emplace(std::move(key), result);
  return result;
}

void AppendKey(std::string* key, int64_t v) {
  key->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// The count, then the values' bytes (unambiguous, nothing formatted).
void AppendKey(std::string* key, const std::vector<int64_t>& v) {
  AppendKey(key, static_cast<int64_t>(v.size()));
  key->append(reinterpret_cast<const char*>(v.data()), sizeof(int64_t) * v.size());
}

void AppendKey(std::string* key, const Sharding& s) {
  const size_t at = key->size();
  AppendKey(key, int64_t{0});  // the entry's length (this count, kind, text), filled in below
  key->push_back(static_cast<char>('A' + static_cast<int>(s.kind())));
  s.AppendTo(key);
  const int64_t length = static_cast<int64_t>(key->size() - at);
  key->replace(at, sizeof(length), reinterpret_cast<const char*>(&length), sizeof(length));
}

// A dot's dimension numbers and operand/result ranks: all the dot-rule transformations read.
void AppendDotKey(std::string* key, const HloInstruction& dot) {
  const DotDims& dd = dot.dot_dims();
  AppendKey(key, dd.lhs_batch);
  AppendKey(key, dd.lhs_contracting);
  AppendKey(key, dd.rhs_batch);
  AppendKey(key, dd.rhs_contracting);
  AppendKey(key, dot.operand(0)->shape().rank());
  AppendKey(key, dot.operand(1)->shape().rank());
  AppendKey(key, dot.shape().rank());
}

bool OnlyReplicatedSubgroups(const Sharding& s) {
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return false;
  }
  return true;
}

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The dot's non-contracting, non-batch dims of operand `operand`, ascending.
std::vector<int64_t> NonContracting(const HloInstruction& dot, int64_t operand) {
  const DotDims& dd = dot.dot_dims();
  const std::vector<int64_t>& batch = operand == 0 ? dd.lhs_batch : dd.rhs_batch;
  const std::vector<int64_t>& contr = operand == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  std::vector<int64_t> nc;
  for (int64_t d = 0; d < dot.operand(operand)->shape().rank(); ++d) {
    if (!Contains(batch, d) && !Contains(contr, d)) nc.push_back(d);
  }
  return nc;
}

// Output dim of each operand dim (-1 for contracting dims).
std::vector<int64_t> OperandToOutputDims(const HloInstruction& dot, int64_t operand) {
  const DotDims& dd = dot.dot_dims();
  const std::vector<int64_t>& batch = operand == 0 ? dd.lhs_batch : dd.rhs_batch;
  std::vector<int64_t> map(static_cast<size_t>(dot.operand(operand)->shape().rank()), -1);
  for (size_t i = 0; i < batch.size(); ++i) map[static_cast<size_t>(batch[i])] = static_cast<int64_t>(i);
  const int64_t nb = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> lnc = NonContracting(dot, 0);
  const std::vector<int64_t> nc = NonContracting(dot, operand);
  const int64_t base = operand == 0 ? nb : nb + static_cast<int64_t>(lnc.size());
  for (size_t k = 0; k < nc.size(); ++k) {
    map[static_cast<size_t>(nc[k])] = base + static_cast<int64_t>(k);
  }
  return map;
}

}  // namespace

std::vector<int64_t> SortedDevices(const Sharding& s) {
  std::vector<int64_t> d = s.devices();
  std::sort(d.begin(), d.end());
  return d;
}

namespace {

std::optional<Sharding> ReplicateDimsUncached(const Sharding& s,
                                               const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  const int64_t rank = s.rank();
  std::vector<bool> replicate(static_cast<size_t>(rank), false);
  bool any = false;
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) continue;
    replicate[static_cast<size_t>(d)] = true;
    any |= s.tile(d) > 1;
  }
  if (!any) return s;
  if (!OnlyReplicatedSubgroups(s)) return std::nullopt;
  // The device array with the replicated data dims moved next to the replication subgroup: in
  // row-major order over the kept dims, each block of (their tiles x the old replication)
  // devices holds one tile of the result (Tiled sorts the ids within a block).
  std::vector<int64_t> tiles = s.tiles(), perm;
  int64_t replication = s.ReplicationSize();
  for (int64_t d = 0; d < rank; ++d) {
    if (!replicate[static_cast<size_t>(d)]) perm.push_back(d);
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (!replicate[static_cast<size_t>(d)]) continue;
    perm.push_back(d);
    replication *= tiles[static_cast<size_t>(d)];
    tiles[static_cast<size_t>(d)] = 1;
  }
  for (size_t k = 0; k < s.subgroups().size(); ++k) perm.push_back(rank + static_cast<int64_t>(k));
  absl::StatusOr<Sharding> out =
      Sharding::Tiled(std::move(tiles), {{SubgroupType::kReplicated, replication}},
                      TransposeDeviceArray(s.devices(), s.ArrayDims(), perm));
  if (!out.ok()) return std::nullopt;
  return *std::move(out);
}

}  // namespace

bool HoldsAddends(const Sharding& s) {
  return s.IsUnreduced() || s.SubgroupSize(SubgroupType::kUnreduced) > 1;
}

Sharding Summed(const Sharding& s) {
  if (s.IsUnreduced()) return Sharding::Replicated();
  if (s.SubgroupSize(SubgroupType::kUnreduced) <= 1) return s;
  std::vector<Sharding::Subgroup> subgroups = s.subgroups();
  for (Sharding::Subgroup& g : subgroups) {
    if (g.type == SubgroupType::kUnreduced) g.type = SubgroupType::kReplicated;
  }
  absl::StatusOr<Sharding> r = Sharding::Tiled(s.tiles(), std::move(subgroups), s.devices());
  return r.ok() ? *std::move(r) : Sharding::Replicated();
}

std::vector<std::vector<int64_t>> AddendGroups(const Sharding& s, int64_t n) {
  if (s.IsUnreduced()) {
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) all[static_cast<size_t>(p)] = p;
    return {all};
  }
  if (!s.IsTiled()) return {};
  for (size_t k = 0; k < s.subgroups().size(); ++k) {
    if (s.subgroups()[k].type == SubgroupType::kUnreduced && s.subgroups()[k].size > 1) {
      return DeviceGroups(s, {s.rank() + static_cast<int64_t>(k)});
    }
  }
  return {};
}

std::optional<Sharding> ReplicateDimsInManualGroups(const Sharding& s, const std::vector<int64_t>& dims) {
  const int64_t mdim = s.SubgroupArrayDim(SubgroupType::kManual);
  if (mdim < 0 || s.SubgroupSize(SubgroupType::kUnreduced) > 1) return std::nullopt;
  const int64_t rank = s.rank();
  std::vector<int64_t> tiles = s.tiles(), perm;
  int64_t replication = s.ReplicationSize();
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  }
  perm.push_back(mdim);
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) continue;
    perm.push_back(d);
    replication *= tiles[static_cast<size_t>(d)];
    tiles[static_cast<size_t>(d)] = 1;
  }
  for (int64_t a = rank; a < static_cast<int64_t>(s.ArrayDims().size()); ++a) {
    if (a != mdim) perm.push_back(a);
  }
  std::vector<Sharding::Subgroup> subgroups = {{SubgroupType::kManual, s.SubgroupSize(SubgroupType::kManual)}};
  if (replication > 1) subgroups.push_back({SubgroupType::kReplicated, replication});
  absl::StatusOr<Sharding> out =
      Sharding::Tiled(std::move(tiles), std::move(subgroups), TransposeDeviceArray(s.devices(), s.ArrayDims(), perm));
  if (!out.ok()) return std::nullopt;
  return *std::move(out);
}

std::optional<Sharding> ReplicateTileFactor(const Sharding& s, int64_t d, int64_t f) {
  if (!s.IsTiled() || d < 0 || d >= s.rank() || f < 1 || s.tile(d) % f != 0) return std::nullopt;
  if (f == 1) return s;
  if (!OnlyReplicatedSubgroups(s)) return std::nullopt;
  // The device array with dim d split into [tile / f, f] (row-major: the same device list), the
  // f part moved in front of the replication subgroup.
  const int64_t rank = s.rank();
  std::vector<int64_t> split, perm;
  for (int64_t a = 0; a < static_cast<int64_t>(s.ArrayDims().size()); ++a) {
    if (a == d) {
      split.push_back(s.tile(d) / f);
      split.push_back(f);
    } else {
      split.push_back(s.ArrayDims()[static_cast<size_t>(a)]);
    }
  }
  for (int64_t a = 0; a <= rank; ++a) {
    if (a != d + 1) perm.push_back(a);
  }
  perm.push_back(d + 1);
  for (int64_t a = rank + 1; a < static_cast<int64_t>(split.size()); ++a) perm.push_back(a);
  std::vector<int64_t> tiles = s.tiles();
  tiles[static_cast<size_t>(d)] /= f;
  absl::StatusOr<Sharding> out =
      Sharding::Tiled(std::move(tiles), {{SubgroupType::kReplicated, f * s.ReplicationSize()}},
                      TransposeDeviceArray(s.devices(), split, perm));
  if (!out.ok()) return std::nullopt;
  return *std::move(out);
}

std::optional<Sharding> ReplicateDims(const Sharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  thread_local MemoTable memo;
  std::string key;
  AppendKey(&key, s);
  AppendKey(&key, dims);
  return Memoized(memo, std::move(key), [&] { return ReplicateDimsUncached(s, dims); });
}

std::optional<Sharding> ReplicateAllDimsExcept(const Sharding& s,
                                               const std::vector<int64_t>& dims) {
  std::vector<int64_t> others;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (!Contains(dims, d)) others.push_back(d);
  }
  return ReplicateDims(s, others);
}

std::optional<Sharding> TransposeSharding(const Sharding& s, const std::vector<int64_t>& perm) {
  if (!s.IsTiled()) return s;
  if (static_cast<int64_t>(perm.size()) != s.rank()) return std::nullopt;
  std::vector<int64_t> full = perm;
  std::vector<int64_t> tiles;
  for (int64_t p : perm) tiles.push_back(s.tile(p));
  for (size_t k = 0; k < s.subgroups().size(); ++k) full.push_back(s.rank() + static_cast<int64_t>(k));
  absl::StatusOr<Sharding> out = Sharding::Tiled(
      tiles, s.subgroups(), TransposeDeviceArray(s.devices(), s.ArrayDims(), full));
  if (!out.ok()) return std::nullopt;
  return *out;
}

std::optional<Sharding> RemoveDims(const Sharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> tiles;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (Contains(dims, d)) {
      if (s.tile(d) != 1) return std::nullopt;
    } else {
      tiles.push_back(s.tile(d));
    }
  }
  absl::StatusOr<Sharding> out = Sharding::Tiled(tiles, s.subgroups(), s.devices());
  if (!out.ok()) return std::nullopt;
  return *out;
}

Sharding PhysicalSharding(const Sharding& s) {
  return s.IsTiled() && !s.HasManualSubgroup() && s.SubgroupSize(SubgroupType::kUnreduced) <= 1
             ? s
             : Sharding::Replicated();
}

std::optional<Sharding> InsertDims(const Sharding& s, const std::vector<int64_t>& positions) {
  if (!s.IsTiled()) return s;
  std::vector<int64_t> tiles;
  size_t src = 0;
  const int64_t rank = s.rank() + static_cast<int64_t>(positions.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (Contains(positions, d)) {
      tiles.push_back(1);
    } else {
      if (src >= s.tiles().size()) return std::nullopt;
      tiles.push_back(s.tiles()[src++]);
    }
  }
  if (src != s.tiles().size()) return std::nullopt;
  absl::StatusOr<Sharding> out = Sharding::Tiled(tiles, s.subgroups(), s.devices());
  if (!out.ok()) return std::nullopt;
  return *out;
}

std::optional<Sharding> ReshapeSharding(const Sharding& s, const std::vector<int64_t>& from,
                                        const std::vector<int64_t>& to) {
  if (!s.IsTiled()) return s;
  if (static_cast<int64_t>(from.size()) != s.rank()) return std::nullopt;
  std::vector<int64_t> tiles(to.size(), 1);
  size_t i = 0, j = 0;
  while (i < from.size() || j < to.size()) {
    // One group: the shortest runs from[i..i2) and to[j..j2) with equal products.
    size_t i2 = i, j2 = j;
    int64_t pf = 1, pt = 1;
    if (i2 < from.size()) pf *= from[i2++];
    if (j2 < to.size()) pt *= to[j2++];
    while (pf != pt) {
      if (pf < pt) {
        if (i2 >= from.size()) return std::nullopt;
        pf *= from[i2++];
      } else {
        if (j2 >= to.size()) return std::nullopt;
        pt *= to[j2++];
      }
    }
    // Size-1 dims at the end of the group belong to it as well.
    while (i2 < from.size() && from[i2] == 1 && (j2 >= to.size() || to[j2] != 1)) ++i2;
    while (j2 < to.size() && to[j2] == 1 && (i2 >= from.size() || from[i2] != 1)) ++j2;
    // Tiled source dims of the group.
    std::vector<size_t> tiled;
    for (size_t k = i; k < i2; ++k) {
      if (s.tile(static_cast<int64_t>(k)) > 1) tiled.push_back(k);
    }
    if (!tiled.empty()) {
      // Only the first non-1 source dim may be tiled; its tiles go to the first non-1 target
      // dim, whose size they must divide (or equal the source dim's size for 1:1).
      size_t src_major = i;
      while (src_major < i2 && from[src_major] == 1) ++src_major;
      size_t dst_major = j;
      while (dst_major < j2 && to[dst_major] == 1) ++dst_major;
      if (tiled.size() != 1 || tiled[0] != src_major || dst_major >= j2) return std::nullopt;
      int64_t t = s.tile(static_cast<int64_t>(src_major));
      const bool one_to_one = from[src_major] == to[dst_major];
      if (one_to_one) {
        tiles[dst_major] = t;
      } else {
        // The tiles' chunks are P / t elements of the group in both shapes: they stay aligned
        // when t divides the source dim and can be laid over the target dims from the major
        // one (whole dims first, then a divisor of the next).
        if (from[src_major] % t != 0) return std::nullopt;
        for (size_t k = dst_major; k < j2 && t > 1; ++k) {
          if (to[k] == 1) continue;
          if (t % to[k] == 0) {
            tiles[k] = to[k];
            t /= to[k];
          } else if (to[k] % t == 0) {
            tiles[k] = t;
            t = 1;
          } else {
            return std::nullopt;
          }
        }
        if (t != 1) return std::nullopt;
      }
    }
    i = i2;
    j = j2;
  }
  absl::StatusOr<Sharding> out = Sharding::Tiled(tiles, s.subgroups(), s.devices());
  if (!out.ok()) return std::nullopt;
  return *out;
}

std::optional<Sharding> MapShardingDims(const Sharding& s, const std::vector<int64_t>& map,
                                        int64_t out_rank) {
  if (s.IsReplicated() || s.IsManual()) return s;
  if (!s.IsTiled() || !OnlyReplicatedSubgroups(s) || static_cast<int64_t>(map.size()) != s.rank()) {
    return std::nullopt;
  }
  std::vector<int64_t> tiles(static_cast<size_t>(out_rank), 1);
  for (size_t d = 0; d < map.size(); ++d) {
    if (map[d] >= out_rank) return std::nullopt;
    if (map[d] >= 0) tiles[static_cast<size_t>(map[d])] = s.tile(static_cast<int64_t>(d));
  }
  return Sharding::FromTileFunction(tiles, SortedDevices(s), [&](int64_t dev) {
    std::vector<int64_t> in = *s.TileIndex(dev, s.rank());
    std::vector<int64_t> out(static_cast<size_t>(out_rank), 0);
    for (size_t d = 0; d < map.size(); ++d) {
      if (map[d] >= 0) out[static_cast<size_t>(map[d])] = in[d];
    }
    return out;
  });
}

std::vector<int64_t> ConvolutionOperandToOutputDims(const HloInstruction& conv, int64_t operand,
                                                    int64_t tiles_of_groups) {
  const Shape& os = conv.operand(operand)->shape();
  absl::StatusOr<ConvDims> cd = ParseConvDims(conv, os.rank());
  if (!cd.ok()) return {};
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(conv, cd->lhs.spatial.size());
  if (!w.ok()) return {};
  std::vector<int64_t> map(static_cast<size_t>(os.rank()), -1);
  const int64_t fgc = cd->feature_group_count, bgc = cd->batch_group_count;
  const bool groups_split = tiles_of_groups >= 1 && (fgc > 1 ? fgc : bgc) % tiles_of_groups == 0;
  if (operand == 0) {
    if (bgc == 1) map[static_cast<size_t>(cd->lhs.a)] = cd->out.a;
    if (fgc > 1 && groups_split) map[static_cast<size_t>(cd->lhs.b)] = cd->out.b;
    if (bgc > 1 && groups_split) map[static_cast<size_t>(cd->lhs.a)] = cd->out.b;
    for (size_t j = 0; j < w->size(); ++j) {
      const WindowDim& wd = (*w)[j];
      const int64_t in = os.dims[static_cast<size_t>(cd->lhs.spatial[j])];
      if (wd.lhs_dilate == 1 && 2 * ((wd.size - 1) * wd.rhs_dilate + 1) <= std::max<int64_t>(in, 2)) {
        map[static_cast<size_t>(cd->lhs.spatial[j])] = cd->out.spatial[j];
      }
    }
  } else if ((fgc == 1 && bgc == 1) || groups_split) {
    map[static_cast<size_t>(cd->kernel.b)] = cd->out.b;
  }
  return map;
}

namespace {

std::optional<Sharding> DotOutputFromOperandUncached(const Sharding& s, int64_t operand,
                                                     const HloInstruction& dot) {
  return MapShardingDims(s, OperandToOutputDims(dot, operand), dot.shape().rank());
}

std::optional<Sharding> DotOperandFromOutputUncached(const Sharding& out, const Sharding* other,
                                                     int64_t operand, const HloInstruction& dot) {
  if (out.IsManual()) return out;
  if (!out.IsTiled() && !out.IsReplicated()) return std::nullopt;
  if (out.IsTiled() && !OnlyReplicatedSubgroups(out)) return std::nullopt;
  const std::vector<int64_t> map = OperandToOutputDims(dot, operand);
  const DotDims& dd = dot.dot_dims();
  const std::vector<int64_t>& own_c = operand == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const std::vector<int64_t>& other_c = operand == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  const int64_t rank = dot.operand(operand)->shape().rank();
  bool use_other = other != nullptr && other->IsTiled() && OnlyReplicatedSubgroups(*other) &&
                   (!out.IsTiled() || SortedDevices(*other) == SortedDevices(out));
  for (int attempt = use_other ? 0 : 1; attempt < 2; ++attempt) {
    const bool with_c = attempt == 0;
    std::vector<int64_t> tiles(static_cast<size_t>(rank), 1);
    for (int64_t d = 0; d < rank; ++d) {
      if (map[static_cast<size_t>(d)] >= 0 && out.IsTiled()) {
        tiles[static_cast<size_t>(d)] = out.tile(map[static_cast<size_t>(d)]);
      }
    }
    if (with_c) {
      for (size_t k = 0; k < own_c.size(); ++k) {
        tiles[static_cast<size_t>(own_c[k])] = other->tile(other_c[k]);
      }
    }
    if (!out.IsTiled() && !with_c) return Sharding::Replicated();
    const Sharding& devs = out.IsTiled() ? out : *other;
    std::optional<Sharding> s =
        Sharding::FromTileFunction(tiles, SortedDevices(devs), [&](int64_t dev) {
          std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
          if (out.IsTiled()) {
            const std::vector<int64_t> o = *out.TileIndex(dev, out.rank());
            for (int64_t d = 0; d < rank; ++d) {
              if (map[static_cast<size_t>(d)] >= 0) {
                idx[static_cast<size_t>(d)] = o[static_cast<size_t>(map[static_cast<size_t>(d)])];
              }
            }
          }
          if (with_c) {
            const std::vector<int64_t> oi = *other->TileIndex(dev, other->rank());
            for (size_t k = 0; k < own_c.size(); ++k) {
              idx[static_cast<size_t>(own_c[k])] = oi[static_cast<size_t>(other_c[k])];
            }
          }
          return idx;
        });
    if (s) return s;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Sharding> DotOutputFromOperand(const Sharding& s, int64_t operand,
                                             const HloInstruction& dot) {
  if (s.IsReplicated() || s.IsManual()) return s;
  thread_local MemoTable memo;
  std::string key;
  AppendKey(&key, operand);
  AppendKey(&key, s);
  AppendDotKey(&key, dot);
  return Memoized(memo, std::move(key), [&] { return DotOutputFromOperandUncached(s, operand, dot); });
}

std::optional<Sharding> DotOperandFromOutput(const Sharding& out, const Sharding* other,
                                             int64_t operand, const HloInstruction& dot) {
  if (out.IsManual()) return out;
  thread_local MemoTable memo;
  std::string key;
  AppendKey(&key, operand);
  AppendKey(&key, out);
  AppendKey(&key, int64_t{other != nullptr ? 1 : 0});
  if (other != nullptr) AppendKey(&key, *other);
  AppendDotKey(&key, dot);
  return Memoized(memo, std::move(key),
                  [&] { return DotOperandFromOutputUncached(out, other, operand, dot); });
}

bool IsMoreSpecific(const Sharding& a, const Sharding& b) {
  if (a.IsTuple() || b.IsTuple()) return false;
  if (a.IsUnset() || a.IsUnknown()) return false;
  if (b.IsUnset() || b.IsUnknown()) return true;
  if (a.IsManual() && b.IsReplicatedOrMaximal()) return true;
  if (a.IsManual() || b.IsManual()) return false;
  if (!b.IsReplicatedOrMaximal()) return a.NumTiles() > b.NumTiles();
  return b.IsReplicated() ? !a.IsReplicated() : !a.IsReplicatedOrMaximal();
}

std::optional<Sharding> MergeCompatible(const Sharding& a, const Sharding& b, int64_t min_tiles) {
  if (!a.IsTiled() || !b.IsTiled() || a.rank() != b.rank()) return std::nullopt;
  if (!OnlyReplicatedSubgroups(a) || !OnlyReplicatedSubgroups(b)) return std::nullopt;
  const std::vector<int64_t> devices = SortedDevices(a);
  if (devices != SortedDevices(b)) return std::nullopt;
  std::vector<int64_t> tiles(static_cast<size_t>(a.rank()));
  int64_t n = 1;
  for (int64_t d = 0; d < a.rank(); ++d) {
    const int64_t ta = a.tile(d), tb = b.tile(d);
    if (ta != tb && ta != 1 && tb != 1) return std::nullopt;
    tiles[static_cast<size_t>(d)] = std::max(ta, tb);
    n *= tiles[static_cast<size_t>(d)];
  }
  if (n < min_tiles || static_cast<int64_t>(devices.size()) % n != 0) return std::nullopt;
  bool consistent = true;
  std::optional<Sharding> out = Sharding::FromTileFunction(tiles, devices, [&](int64_t dev) {
    const std::vector<int64_t> ia = *a.TileIndex(dev, a.rank());
    const std::vector<int64_t> ib = *b.TileIndex(dev, b.rank());
    std::vector<int64_t> idx(ia.size());
    for (size_t d = 0; d < ia.size(); ++d) {
      const int64_t ta = a.tile(static_cast<int64_t>(d)), tb = b.tile(static_cast<int64_t>(d));
      if (ta > 1 && tb > 1 && ia[d] != ib[d]) consistent = false;
      idx[d] = ta > 1 ? ia[d] : ib[d];
    }
    return idx;
  });
  if (!consistent) return std::nullopt;
  return out;
}

bool IsSubTilingOrEqual(const std::vector<int64_t>& dims, const Sharding& sub, const Sharding& s) {
  if (!s.IsTiled()) return true;
  if (!sub.IsTiled()) return false;
  if (sub.rank() != s.rank() || static_cast<int64_t>(dims.size()) != s.rank()) return false;
  for (int64_t dev : SortedDevices(s)) {
    auto is = s.TileIndex(dev, s.rank());
    auto iu = sub.TileIndex(dev, sub.rank());
    if (!is || !iu) return false;
    for (int64_t d = 0; d < s.rank(); ++d) {
      const int64_t S = dims[static_cast<size_t>(d)];
      const int64_t cs = ShardSize(S, s.tile(d)), cu = ShardSize(S, sub.tile(d));
      const int64_t os = (*is)[static_cast<size_t>(d)] * cs;
      const int64_t ou = (*iu)[static_cast<size_t>(d)] * cu;
      if (ou < os) return false;
      if (ou + cu <= S && ou + cu > os + cs) return false;
    }
  }
  return true;
}

Sharding ImproveLeaf(const Sharding& cur, const Sharding& cand, bool may_combine_partial,
                     bool aggressive, const std::vector<int64_t>& dims) {
  if (cand.IsUnset() || cand.IsUnknown() || cand.IsMaximal() || cand.IsTuple()) return cur;
  if (cand == cur) return cur;  // what the steps below give for equal shardings
  if (cand.IsTiled() && cand.rank() != static_cast<int64_t>(dims.size())) return cur;
  if (cand.IsManual()) {
    return cur.IsUnset() || cur.IsUnknown() || cur.IsReplicatedOrMaximal() ? cand : cur;
  }
  if (cur.IsUnset() || cur.IsUnknown()) return cand;
  if (cur.IsManual() || cur.HasManualSubgroup()) return cur;
  if (may_combine_partial && cand.HasPartialReplication() && cur.HasPartialReplication()) {
    if (auto merged = MergeCompatible(cur, cand, std::max(cur.NumTiles(), cand.NumTiles()) + 1)) {
      return *merged;
    }
  }
  if (!IsMoreSpecific(cand, cur)) return cur;
  if (!aggressive && cur.IsTiled() && !IsSubTilingOrEqual(dims, cand, cur)) return cur;
  return cand;
}

namespace {

bool IntListAttr(const HloInstruction& h, std::string_view key, bool required,
                 std::vector<int64_t>* out) {
  out->clear();
  const std::string* text = h.GetRawAttribute(key);
  if (text == nullptr) return !required;
  std::string cur;
  for (char c : *text + ",") {
    if (c == '{' || c == '}' || c == ' ') continue;
    if (c == ',') {
      if (!cur.empty()) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(cur, &v)) return false;
        out->push_back(v);
      }
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  return true;
}

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

int64_t GatherScatterIndicesOperand(const HloInstruction& h) {
  return h.opcode() == HloOpcode::kScatter ? (h.operand_count() - 1) / 2 : 1;
}

std::optional<GatherScatterDims> ParseGatherScatterDims(const HloInstruction& h) {
  GatherScatterDims g;
  const bool scatter = h.opcode() == HloOpcode::kScatter;
  if (h.operand_count() < 2) return std::nullopt;
  const Shape& operand = h.operand(0)->shape();
  const Shape& indices = h.operand(GatherScatterIndicesOperand(h))->shape();
  if (operand.IsTuple() || indices.IsTuple()) return std::nullopt;
  std::vector<int64_t> ivd;
  const bool ok =
      IntListAttr(h, scatter ? "update_window_dims" : "offset_dims", true, &g.offset_dims) &&
      IntListAttr(h, scatter ? "inserted_window_dims" : "collapsed_slice_dims", false, &g.collapsed) &&
      IntListAttr(h, scatter ? "scatter_dims_to_operand_dims" : "start_index_map", true,
                  &g.start_index_map) &&
      IntListAttr(h, "index_vector_dim", true, &ivd) &&
      IntListAttr(h, scatter ? "input_batching_dims" : "operand_batching_dims", false,
                  &g.operand_batching) &&
      IntListAttr(h, scatter ? "scatter_indices_batching_dims" : "start_indices_batching_dims",
                  false, &g.indices_batching) &&
      (scatter || IntListAttr(h, "slice_sizes", true, &g.slice_sizes));
  if (!ok || ivd.size() != 1) return std::nullopt;
  g.index_vector_dim = ivd[0];
  const Shape& out = scatter ? h.operand(h.operand_count() - 1)->shape() : h.shape();
  if (out.IsTuple()) return std::nullopt;
  const int64_t orank = operand.rank(), out_rank = out.rank(), irank = indices.rank();
  for (int64_t d = 0; d < orank; ++d) {
    if (!Has(g.collapsed, d) && !Has(g.operand_batching, d)) g.window_operand.push_back(d);
  }
  if (g.window_operand.size() != g.offset_dims.size()) return std::nullopt;
  if (scatter) {
    // The window each update covers: its window dims' sizes, 1 on inserted/batching dims.
    g.slice_sizes.assign(static_cast<size_t>(orank), 1);
    for (size_t j = 0; j < g.window_operand.size(); ++j) {
      const int64_t od = g.offset_dims[j];
      if (od < 0 || od >= out_rank) return std::nullopt;
      g.slice_sizes[static_cast<size_t>(g.window_operand[j])] = out.dims[static_cast<size_t>(od)];
    }
  }
  if (static_cast<int64_t>(g.slice_sizes.size()) != orank) return std::nullopt;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (!Has(g.offset_dims, d)) g.batch_out.push_back(d);
  }
  for (int64_t d = 0; d < irank; ++d) {
    if (d != g.index_vector_dim) g.indices_batch.push_back(d);
  }
  if (g.batch_out.size() != g.indices_batch.size()) return std::nullopt;
  g.operand_to_offset.assign(static_cast<size_t>(orank), -1);
  g.pass_through.assign(static_cast<size_t>(orank), false);
  g.trivially_sliced.assign(static_cast<size_t>(orank), false);
  for (size_t j = 0; j < g.window_operand.size(); ++j) {
    const int64_t w = g.window_operand[j];
    if (g.offset_dims[j] < 0 || g.offset_dims[j] >= out_rank) return std::nullopt;
    g.operand_to_offset[static_cast<size_t>(w)] = g.offset_dims[j];
    const int64_t size = operand.dims[static_cast<size_t>(w)];
    g.pass_through[static_cast<size_t>(w)] =
        g.slice_sizes[static_cast<size_t>(w)] == size &&
        out.dims[static_cast<size_t>(g.offset_dims[j])] == size;
  }
  for (int64_t v : g.start_index_map) {
    if (v < 0 || v >= orank) return std::nullopt;
    g.trivially_sliced[static_cast<size_t>(v)] =
        g.slice_sizes[static_cast<size_t>(v)] == 1;
  }
  return g;
}

std::string ScaleShardingMismatch(const Sharding& s, const Shape& data, const Shape& scale, int64_t block) {
  if (!s.IsTiled()) return "";
  const int64_t rank = data.rank();
  if (scale.rank() != rank || rank < 1 || s.rank() < rank) return "the scale's rank is not its data's";
  for (int64_t d = 0; d + 1 < rank; ++d) {
    if (s.tile(d) > 1 && scale.dims[static_cast<size_t>(d)] != data.dims[static_cast<size_t>(d)]) {
      return absl::StrCat("the scale is padded along dim ", d, ", which is tiled");
    }
  }
  const int64_t t = s.tile(rank - 1);
  if (t == 1) return "";
  const int64_t k = data.dims.back();
  if (k % t != 0) return absl::StrCat("the last dim (", k, ") is tiled unevenly ", t, " ways");
  if ((k / t) % block != 0) {
    return absl::StrCat("a tile of ", k / t, " along the last dim would split a block of ", block);
  }
  if (scale.dims.back() != k / block) return "the scale is padded along the last dim, which is tiled";
  return "";
}

std::optional<Sharding> FitScaleBlocks(const Sharding& s, const Shape& data, const Shape& scale, int64_t block) {
  if (ScaleShardingMismatch(s, data, scale, block).empty()) return s;
  std::optional<Sharding> whole = ReplicateDims(s, {data.rank() - 1});
  if (!whole || !ScaleShardingMismatch(*whole, data, scale, block).empty()) return std::nullopt;
  return whole;
}

}  // namespace weave::spmd
