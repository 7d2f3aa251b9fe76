// Multi-step reshard planning (see reshard_steps.h).
#include "spmd/reshard_steps.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "spmd/reshard.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

// The device array read as axes: every device's coordinate on each axis; each tiled data dim
// owns some axes (major first), the replicated subgroup the rest.
struct Model {
  std::vector<int64_t> size;                // per axis
  std::vector<std::vector<int64_t>> coord;  // [device][axis]
  std::vector<std::vector<int64_t>> dims;   // per data dim: its axes, major first
  std::vector<int64_t> repl;                // the replicated subgroup's axes
};

std::optional<Model> ModelOf(const Sharding& s, int64_t rank, int64_t n) {
  Model m;
  m.dims.resize(static_cast<size_t>(rank));
  m.coord.resize(static_cast<size_t>(n));
  if (s.IsReplicated()) {
    m.size = {n};
    m.repl = {0};
    for (int64_t p = 0; p < n; ++p) m.coord[static_cast<size_t>(p)] = {p};
    return m;
  }
  if (!s.IsTiled() || s.rank() != rank || static_cast<int64_t>(s.devices().size()) != n) return std::nullopt;
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return std::nullopt;
  }
  m.size = s.ArrayDims();
  for (int64_t a = 0; a < static_cast<int64_t>(m.size.size()); ++a) {
    if (m.size[static_cast<size_t>(a)] == 1) continue;
    if (a < rank) {
      m.dims[static_cast<size_t>(a)].push_back(a);
    } else {
      m.repl.push_back(a);
    }
  }
  for (int64_t p = 0; p < n; ++p) {
    std::optional<std::vector<int64_t>> idx = s.ArrayIndex(p);
    if (!idx) return std::nullopt;
    m.coord[static_cast<size_t>(p)] = *std::move(idx);
  }
  return m;
}

int64_t Product(const Model& m, const std::vector<int64_t>& axes) {
  int64_t r = 1;
  for (int64_t a : axes) r *= m.size[static_cast<size_t>(a)];
  return r;
}

// Mixed-radix number of device p's coordinates on `axes` (major first).
int64_t Radix(const Model& m, int64_t p, const std::vector<int64_t>& axes) {
  int64_t r = 0;
  for (int64_t a : axes) r = r * m.size[static_cast<size_t>(a)] + m.coord[static_cast<size_t>(p)][static_cast<size_t>(a)];
  return r;
}

std::vector<int64_t> Tiles(const Model& m) {
  std::vector<int64_t> t;
  for (const std::vector<int64_t>& axes : m.dims) t.push_back(Product(m, axes));
  return t;
}

std::vector<int64_t> TileIndexOf(const Model& m, int64_t p) {
  std::vector<int64_t> t;
  for (const std::vector<int64_t>& axes : m.dims) t.push_back(Radix(m, p, axes));
  return t;
}

// Splits axis a into (size/g major, g minor); returns the new minor axis.
int64_t Split(Model& m, int64_t a, int64_t g) {
  const int64_t id = static_cast<int64_t>(m.size.size());
  m.size.push_back(g);
  m.size[static_cast<size_t>(a)] /= g;
  for (std::vector<int64_t>& c : m.coord) {
    c.push_back(c[static_cast<size_t>(a)] % g);
    c[static_cast<size_t>(a)] /= g;
  }
  return id;
}

// Removes the minor factor g from the end of `list` (whole axes, and a split of one where g
// ends inside it) and returns its axes, major first; nullopt when g is no such factor.
std::optional<std::vector<int64_t>> TakeMinor(Model& m, std::vector<int64_t>& list, int64_t g) {
  std::vector<int64_t> taken;
  int64_t rest = g;
  while (rest > 1) {
    if (list.empty()) return std::nullopt;
    const int64_t a = list.back();
    const int64_t s = m.size[static_cast<size_t>(a)];
    if (rest % s == 0) {
      list.pop_back();
      taken.insert(taken.begin(), a);
      rest /= s;
    } else if (s % rest == 0) {
      taken.insert(taken.begin(), Split(m, a, rest));
      rest = 1;
    } else {
      return std::nullopt;
    }
  }
  return taken;
}

// The devices that differ only on `moved`, each group ordered by its members' number on them.
std::vector<std::vector<int64_t>> GroupsOver(const Model& m, const std::vector<int64_t>& moved, int64_t n) {
  std::map<std::vector<int64_t>, std::vector<int64_t>> by_key;
  const int64_t g = Product(m, moved);
  for (int64_t p = 0; p < n; ++p) {
    std::vector<int64_t> key = m.coord[static_cast<size_t>(p)];
    for (int64_t a : moved) key[static_cast<size_t>(a)] = 0;
    std::vector<int64_t>& members = by_key[key];
    if (members.empty()) members.assign(static_cast<size_t>(g), -1);
    members[static_cast<size_t>(Radix(m, p, moved))] = p;
  }
  std::vector<std::vector<int64_t>> groups;
  for (auto& [key, members] : by_key) groups.push_back(std::move(members));
  return groups;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Every device's tile index along every dim, flat: [p * rank + d] (no allocation per device).
std::vector<int64_t> IndexesOf(const Model& m, int64_t n) {
  const size_t rank = m.dims.size();
  std::vector<int64_t> out(static_cast<size_t>(n) * rank);
  for (int64_t p = 0; p < n; ++p) {
    for (size_t d = 0; d < rank; ++d) out[static_cast<size_t>(p) * rank + d] = Radix(m, p, m.dims[d]);
  }
  return out;
}

std::optional<Sharding> ShardingOf(const Model& m, int64_t n) {
  return Sharding::FromTileFunction(Tiles(m), Iota(n), [&](int64_t p) { return TileIndexOf(m, p); });
}

double LocalBytesOf(const Sharding& s, const Shape& global) {
  return static_cast<double>(LocalShape(global, s).ByteSize());
}

// Whether g tiles of dim size `s` at `c` tiles, concatenated, are one tile at c/g tiles (or the
// dim ends untiled, the padding then sliced off).
bool MergesEvenly(int64_t s, int64_t c, int64_t g) {
  return c / g == 1 || g * ShardSize(s, c) == ShardSize(s, c / g);
}

// Whether a tile of dim size `s` at `c` tiles splits into g chunks that are the tiles at c*g
// tiles (or the dim was untiled and is padded up to g chunks).
bool SplitsEvenly(int64_t s, int64_t c, int64_t g) {
  return c == 1 || ShardSize(s, c) == g * ShardSize(s, c * g);
}

// A* search over shardings: the cheapest plan (bytes received per device, then fewest
// steps) is the first to reach the goal.
class Search {
 public:
  Search(const Sharding& to, const Shape& global, int64_t n) : to_(to), global_(global), n_(n) {
    rank_ = global.rank();
    std::optional<Model> m = ModelOf(to, rank_, n);
    if (!m) return;
    target_tiles_ = Tiles(*m);
    target_idx_ = IndexesOf(*m, n);
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t d = 0; d < rank_; ++d) {
        const int64_t size = Dim(d), c = to.IsTiled() ? to.tile(d) : 1;
        const int64_t a = c == 1 ? 0 : TileOffset(to, p, d, size);
        target_range_.push_back({std::min(a, size), std::min(size, a + ShardSize(size, c))});
      }
    }
    element_bytes_ = static_cast<double>(global.ByteSize()) /
                     std::max<double>(1.0, static_cast<double>(global.ElementCount()));
    valid_ = true;
  }

  std::optional<ReshardSteps> Run(const Sharding& from) {
    if (!valid_) return std::nullopt;
    nodes_.push_back(Node{from, -1, {}, 0, 0, false});
    std::optional<Model> fm = ModelOf(from, rank_, n_);
    if (!fm) return std::nullopt;
    queue_.push({Missing(Tiles(*fm), IndexesOf(*fm, n_)), 0, 0});
    std::set<std::string> expanded;
    // Fewer states for more devices (each costs O(n)): 2000 up to 30 devices, 39 at 1536.
    int64_t budget = std::clamp<int64_t>(60000 / std::max<int64_t>(n_, 1), 16, 2000);
    while (!queue_.empty() && budget > 0) {
      const Entry e = queue_.top();
      queue_.pop();
      if (nodes_[static_cast<size_t>(e.node)].goal) return PathTo(e.node);
      if (e.bytes > best_goal_) break;  // nothing cheaper left to find
      if (!expanded.insert(nodes_[static_cast<size_t>(e.node)].sharding.ToString()).second) continue;
      --budget;
      Expand(e.node);
    }
    return std::nullopt;
  }

 private:
  struct Node {
    Sharding sharding;
    int64_t parent;
    ReshardStep step;  // the step from the parent
    double bytes;
    int64_t steps;
    bool goal;
  };
  // Queued by bytes so far plus a lower bound of the bytes still to receive (A*).
  struct Entry {
    double bytes;  // f = g + h
    int64_t steps;
    int64_t node;
    bool operator<(const Entry& o) const {  // reversed: the queue's top is the cheapest
      if (bytes != o.bytes) return bytes > o.bytes;
      if (steps != o.steps) return steps > o.steps;
      return node > o.node;
    }
  };

  // The plan to `node`, with the groups of its all-to-alls and all-gathers (made only here, for
  // the plan chosen: from each step's `before` as the search's move made it).
  ReshardSteps PathTo(int64_t node) const {
    ReshardSteps out;
    out.bytes = nodes_[static_cast<size_t>(node)].bytes;
    for (int64_t k = node; nodes_[static_cast<size_t>(k)].parent >= 0; k = nodes_[static_cast<size_t>(k)].parent) {
      out.steps.insert(out.steps.begin(), nodes_[static_cast<size_t>(k)].step);
    }
    for (ReshardStep& st : out.steps) {
      if (st.kind != ReshardStepKind::kAllToAll && st.kind != ReshardStepKind::kAllGather) continue;
      std::optional<Model> m = ModelOf(st.before, rank_, n_);
      std::optional<std::vector<int64_t>> moved = TakeMinor(*m, m->dims[static_cast<size_t>(st.dim)], st.factor);
      st.groups = GroupsOver(*m, *moved, n_);
    }
    return out;
  }

  // A lower bound of the bytes any chain from `s` still makes a device receive: the most data a
  // device's target tile holds outside its tile under `s` (every step's cost is at least what
  // each device receives in it), so the search is A* and stays optimal.
  double Missing(const std::vector<int64_t>& tiles, const std::vector<int64_t>& idx) const {
    double worst = 0;
    for (int64_t p = 0; p < n_; ++p) {
      double need = 1, have = 1;
      for (int64_t d = 0; d < rank_; ++d) {
        const int64_t size = Dim(d);
        const auto [ta, tz] = target_range_[static_cast<size_t>(p * rank_ + d)];
        const int64_t len = ShardSize(size, tiles[static_cast<size_t>(d)]);
        const int64_t a = idx[static_cast<size_t>(p * rank_ + d)] * len;
        const int64_t z = std::min(size, a + len);
        need *= static_cast<double>(std::max<int64_t>(0, tz - ta));
        have *= static_cast<double>(std::max<int64_t>(0, std::min(tz, z) - std::max(ta, a)));
      }
      worst = std::max(worst, need - have);
    }
    return worst * element_bytes_;
  }

  // Whether every device's tile under (tb, ib) lies within (the data of) its tile under (ta, ia):
  // RefinesOnEveryDevice on index tables.
  bool Within(const std::vector<int64_t>& ta, const std::vector<int64_t>& ia, const std::vector<int64_t>& tb,
              const std::vector<int64_t>& ib) const {
    for (int64_t p = 0; p < n_; ++p) {
      for (int64_t d = 0; d < rank_; ++d) {
        const int64_t size = Dim(d);
        const int64_t lb = ShardSize(size, tb[static_cast<size_t>(d)]);
        const int64_t ob = ib[static_cast<size_t>(p * rank_ + d)] * lb;
        if (ob >= size) continue;  // an all-padding tile
        const int64_t la = ShardSize(size, ta[static_cast<size_t>(d)]);
        const int64_t oa = ia[static_cast<size_t>(p * rank_ + d)] * la;
        if (ob < oa || std::min(ob + lb, size) > std::min(oa + la, size)) return false;
      }
    }
    return true;
  }

  // Whether a step of `bytes` from `parent` can still beat the cheapest plan queued so far.
  bool Worth(int64_t parent, double bytes) const {
    return nodes_[static_cast<size_t>(parent)].bytes + bytes <= best_goal_;
  }

  void Add(int64_t parent, ReshardStep step, bool goal, double h = 0) {
    const Node& p = nodes_[static_cast<size_t>(parent)];
    const double bytes = p.bytes + step.bytes;
    const int64_t steps = p.steps + 1;
    if (bytes > best_goal_) return;
    if (goal) best_goal_ = std::min(best_goal_, bytes);
    Sharding after = step.after;
    if (bytes + h > best_goal_) return;
    nodes_.push_back(Node{std::move(after), parent, std::move(step), bytes, steps, goal});
    queue_.push({bytes + h, steps, static_cast<int64_t>(nodes_.size()) - 1});
  }

  void Expand(int64_t node) {
    const Sharding cur = nodes_[static_cast<size_t>(node)].sharding;
    std::optional<Model> m = ModelOf(cur, rank_, n_);
    if (!m) return;
    const std::vector<int64_t> c = Tiles(*m);
    const std::vector<int64_t> idx = IndexesOf(*m, n_);
    if (c == target_tiles_) {
      if (idx == target_idx_) {
        // The devices hold the target's tiles already: the path so far is the plan.
        nodes_[static_cast<size_t>(node)].goal = true;
        queue_.push({nodes_[static_cast<size_t>(node)].bytes, nodes_[static_cast<size_t>(node)].steps, node});
      } else {
        Add(node, ReshardStep{ReshardStepKind::kPermute, -1, -1, 1, {}, cur, to_, LocalBytesOf(to_, global_)}, true);
      }
      return;
    }
    if (Within(c, idx, target_tiles_, target_idx_)) {
      Add(node, ReshardStep{ReshardStepKind::kSlice, -1, -1, 1, {}, cur, to_, 0}, true);
      return;
    }
    if (nodes_[static_cast<size_t>(node)].steps >= 2 * rank_ + 3) return;
    std::vector<int64_t> excess(static_cast<size_t>(rank_)), deficit(static_cast<size_t>(rank_));
    for (int64_t d = 0; d < rank_; ++d) {
      const int64_t g = std::gcd(c[static_cast<size_t>(d)], target_tiles_[static_cast<size_t>(d)]);
      excess[static_cast<size_t>(d)] = c[static_cast<size_t>(d)] / g;
      deficit[static_cast<size_t>(d)] = target_tiles_[static_cast<size_t>(d)] / g;
    }
    for (int64_t j = 0; j < rank_; ++j) {
      const int64_t g = std::gcd(deficit[static_cast<size_t>(j)], Product(*m, m->repl));
      if (g > 1) TrySlice(node, cur, *m, idx, j, g);
    }
    // Any factor of what must move: an all-gather of part of a dim before an all-to-all of the
    // rest can place the tiles where the target wants them. An all-to-all may also take more of
    // dim i than it must lose ([2,4,1] -> [1,2,4]: all 4 of dim 1 to dim 2, then dim 0's 2 to
    // dim 1, lands on the target's devices where moving only the excess would need a permute).
    for (int64_t i = 0; i < rank_; ++i) {
      for (int64_t j = 0; j < rank_; ++j) {
        if (i == j) continue;
        const int64_t most = std::gcd(c[static_cast<size_t>(i)], deficit[static_cast<size_t>(j)]);
        for (int64_t g : Factors(most, deficit)) TryAllToAll(node, cur, *m, i, j, g);
      }
    }
    for (int64_t i = 0; i < rank_; ++i) {
      for (int64_t g : Factors(excess[static_cast<size_t>(i)], deficit)) TryGather(node, cur, *m, i, g);
    }
  }

  // The factors a move may take of k, largest first: every divisor above 1 on up to 128 devices;
  // beyond (the states multiply with the divisors, each costing O(n)), k itself and the parts
  // of k that leave room for, or match, another dim's deficit (gather 24 of 1536 row tiles, then
  // move the other 64 to the columns).
  std::vector<int64_t> Factors(int64_t k, const std::vector<int64_t>& deficit) const {
    std::vector<int64_t> out;
    if (k <= 1) return out;
    if (n_ <= 128) {
      for (int64_t g = k; g > 1; --g) {
        if (k % g == 0) out.push_back(g);
      }
      return out;
    }
    out.push_back(k);
    for (int64_t f : deficit) {
      if (f <= 1) continue;
      out.push_back(k / std::gcd(k, f));
      out.push_back(std::gcd(k, f));
    }
    std::sort(out.rbegin(), out.rend());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    while (!out.empty() && out.back() <= 1) out.pop_back();
    return out;
  }

  int64_t Dim(int64_t d) const { return global_.dims[static_cast<size_t>(d)]; }

  // A replicated factor g becomes part of dim j's tiling. First as the target places it (each
  // device takes the coarsened target tile it will hold); else as the model's minor split.
  void TrySlice(int64_t node, const Sharding& cur, const Model& m, const std::vector<int64_t>& idx, int64_t j,
                int64_t g) {
    const std::vector<int64_t> c = Tiles(m);
    const int64_t cj = c[static_cast<size_t>(j)];
    const int64_t tj = target_tiles_[static_cast<size_t>(j)];
    if (tj % (cj * g) == 0) {
      std::vector<int64_t> tiles = c;
      tiles[static_cast<size_t>(j)] = cj * g;
      const int64_t coarsen = tj / (cj * g);
      std::vector<int64_t> idx2 = idx;
      for (int64_t p = 0; p < n_; ++p) {
        idx2[static_cast<size_t>(p * rank_ + j)] = target_idx_[static_cast<size_t>(p * rank_ + j)] / coarsen;
      }
      if (Within(c, idx, tiles, idx2)) {
        std::optional<Sharding> after = Sharding::FromTileFunction(tiles, Iota(n_), [&](int64_t p) {
          return std::vector<int64_t>(idx2.begin() + p * rank_, idx2.begin() + (p + 1) * rank_);
        });
        if (after) {
          Add(node, ReshardStep{ReshardStepKind::kSlice, j, -1, g, {}, cur, *after, 0}, false, Missing(tiles, idx2));
          return;
        }
      }
    }
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.repl, g);
    if (!moved) return;
    std::vector<int64_t>& axes = m2.dims[static_cast<size_t>(j)];
    axes.insert(axes.end(), moved->begin(), moved->end());
    const std::vector<int64_t> tiles2 = Tiles(m2), idx2 = IndexesOf(m2, n_);
    if (!Within(c, idx, tiles2, idx2)) return;
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (after) Add(node, ReshardStep{ReshardStepKind::kSlice, j, -1, g, {}, cur, *after, 0}, false, Missing(tiles2, idx2));
  }

  void TryAllToAll(int64_t node, const Sharding& cur, const Model& m, int64_t i, int64_t j, int64_t g) {
    const std::vector<int64_t> c = Tiles(m);
    if (!MergesEvenly(Dim(i), c[static_cast<size_t>(i)], g) || !SplitsEvenly(Dim(j), c[static_cast<size_t>(j)], g)) {
      return;
    }
    const double bytes = LocalBytesOf(cur, global_) * static_cast<double>(g - 1) / static_cast<double>(g);
    if (!Worth(node, bytes)) return;
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.dims[static_cast<size_t>(i)], g);
    if (!moved) return;
    std::vector<int64_t>& axes = m2.dims[static_cast<size_t>(j)];
    axes.insert(axes.end(), moved->begin(), moved->end());
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (!after) return;
    Add(node, ReshardStep{ReshardStepKind::kAllToAll, i, j, g, {}, cur, *after, bytes}, false,
        Missing(Tiles(m2), IndexesOf(m2, n_)));
  }

  void TryGather(int64_t node, const Sharding& cur, const Model& m, int64_t i, int64_t g) {
    std::vector<int64_t> c = Tiles(m);
    if (!MergesEvenly(Dim(i), c[static_cast<size_t>(i)], g)) return;
    // Bytes from the tile counts alone (each device receives (g-1)/g of its new tile).
    c[static_cast<size_t>(i)] /= g;
    int64_t elems = 1;
    for (int64_t d = 0; d < rank_; ++d) elems *= ShardSize(Dim(d), c[static_cast<size_t>(d)]);
    const double bytes =
        static_cast<double>(elems) * element_bytes_ * static_cast<double>(g - 1) / static_cast<double>(g);
    if (!Worth(node, bytes)) return;
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.dims[static_cast<size_t>(i)], g);
    if (!moved) return;
    m2.repl.insert(m2.repl.end(), moved->begin(), moved->end());
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (!after) return;
    Add(node, ReshardStep{ReshardStepKind::kAllGather, i, -1, g, {}, cur, *after, bytes}, false,
        Missing(Tiles(m2), IndexesOf(m2, n_)));
  }

  const Sharding& to_;
  const Shape& global_;
  int64_t n_ = 0;
  int64_t rank_ = 0;
  bool valid_ = false;
  std::vector<int64_t> target_tiles_;
  std::vector<int64_t> target_idx_;  // [p * rank + d]
  std::vector<Node> nodes_;
  std::priority_queue<Entry> queue_;
  double best_goal_ = std::numeric_limits<double>::infinity();  // cheapest plan queued so far
  std::vector<std::pair<int64_t, int64_t>> target_range_;  // [p * rank + d]: [start, end) in the data
  double element_bytes_ = 0;
};

}  // namespace

std::optional<ReshardSteps> SearchReshardSteps(const Sharding& from, const Sharding& to, const Shape& global,
                                               int64_t n) {
  if (!global.IsArray() || global.rank() == 0 || n < 1) return std::nullopt;
  if (!ModelOf(from, global.rank(), n)) return std::nullopt;
  return Search(to, global, n).Run(from);
}

std::optional<ReshardSteps> PlanReshardSteps(const Sharding& from, const Sharding& to, const Shape& global,
                                             int64_t n) {
  if (!global.IsArray() || global.rank() == 0 || n < 1) return std::nullopt;
  // Plans by (from, to, shape, n): the partitioner asks for the same pair many times (each dot
  // strategy it weighs, each use of a value), and a search on many devices costs milliseconds.
  static std::mutex mu;
  static std::map<std::string, std::optional<ReshardSteps>> cache;
  const std::string key = absl::StrCat(from.ToString(), "|", to.ToString(), "|", global.ToString(false), "|", n);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::optional<ReshardSteps> plan = SearchReshardSteps(from, to, global, n);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, plan);
  return plan;
}

}  // namespace weave::spmd
