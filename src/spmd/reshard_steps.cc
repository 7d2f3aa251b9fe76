// Multi-step reshard planning (see reshard_steps.h).
#include "spmd/reshard_steps.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>

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

// Uniform-cost search over shardings: the cheapest plan (bytes received per device, then fewest
// steps) is the first to reach the goal.
class Search {
 public:
  Search(const Sharding& to, const Shape& global, int64_t n) : to_(to), global_(global), n_(n) {
    rank_ = global.rank();
    std::optional<Model> m = ModelOf(to, rank_, n);
    if (!m) return;
    target_tiles_ = Tiles(*m);
    for (int64_t p = 0; p < n; ++p) target_index_.push_back(TileIndexOf(*m, p));
    valid_ = true;
  }

  std::optional<ReshardSteps> Run(const Sharding& from) {
    if (!valid_) return std::nullopt;
    nodes_.push_back(Node{from, -1, {}, 0, 0, false});
    queue_.push({0, 0, 0});
    std::set<std::string> expanded;
    int64_t budget = kBudget;
    while (!queue_.empty() && budget > 0) {
      const Entry e = queue_.top();
      queue_.pop();
      if (nodes_[static_cast<size_t>(e.node)].goal) return PathTo(e.node);
      if (!expanded.insert(nodes_[static_cast<size_t>(e.node)].sharding.ToString()).second) continue;
      --budget;
      Expand(e.node);
    }
    return std::nullopt;
  }

 private:
  static constexpr int64_t kBudget = 2000;  // states expanded before giving up

  struct Node {
    Sharding sharding;
    int64_t parent;
    ReshardStep step;  // the step from the parent
    double bytes;
    int64_t steps;
    bool goal;
  };
  struct Entry {
    double bytes;
    int64_t steps;
    int64_t node;
    bool operator<(const Entry& o) const {  // reversed: the queue's top is the cheapest
      if (bytes != o.bytes) return bytes > o.bytes;
      if (steps != o.steps) return steps > o.steps;
      return node > o.node;
    }
  };

  ReshardSteps PathTo(int64_t node) const {
    ReshardSteps out;
    out.bytes = nodes_[static_cast<size_t>(node)].bytes;
    for (int64_t k = node; nodes_[static_cast<size_t>(k)].parent >= 0; k = nodes_[static_cast<size_t>(k)].parent) {
      out.steps.insert(out.steps.begin(), nodes_[static_cast<size_t>(k)].step);
    }
    return out;
  }

  void Add(int64_t parent, ReshardStep step, bool goal) {
    const Node& p = nodes_[static_cast<size_t>(parent)];
    const double bytes = p.bytes + step.bytes;
    const int64_t steps = p.steps + 1;
    Sharding after = step.after;
    nodes_.push_back(Node{std::move(after), parent, std::move(step), bytes, steps, goal});
    queue_.push({bytes, steps, static_cast<int64_t>(nodes_.size()) - 1});
  }

  void Expand(int64_t node) {
    const Sharding cur = nodes_[static_cast<size_t>(node)].sharding;
    std::optional<Model> m = ModelOf(cur, rank_, n_);
    if (!m) return;
    const std::vector<int64_t> c = Tiles(*m);
    if (c == target_tiles_) {
      bool placed = true;
      for (int64_t p = 0; p < n_ && placed; ++p) placed = TileIndexOf(*m, p) == target_index_[static_cast<size_t>(p)];
      if (placed) {
        // The devices hold the target's tiles already: the path so far is the plan.
        nodes_[static_cast<size_t>(node)].goal = true;
        queue_.push({nodes_[static_cast<size_t>(node)].bytes, nodes_[static_cast<size_t>(node)].steps, node});
      } else {
        Add(node, ReshardStep{ReshardStepKind::kPermute, -1, -1, 1, {}, cur, to_, LocalBytesOf(to_, global_)}, true);
      }
      return;
    }
    if (RefinesOnEveryDevice(cur, to_, global_, n_)) {
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
      if (g > 1) TrySlice(node, cur, *m, j, g);
    }
    // Any factor of what must move: an all-gather of part of a dim before an all-to-all of the
    // rest can place the tiles where the target wants them. An all-to-all may also take more of
    // dim i than it must lose ([2,4,1] -> [1,2,4]: all 4 of dim 1 to dim 2, then dim 0's 2 to
    // dim 1, lands on the target's devices where moving only the excess would need a permute).
    for (int64_t i = 0; i < rank_; ++i) {
      for (int64_t j = 0; j < rank_; ++j) {
        if (i == j) continue;
        const int64_t most = std::gcd(c[static_cast<size_t>(i)], deficit[static_cast<size_t>(j)]);
        for (int64_t g : Divisors(most)) TryAllToAll(node, cur, *m, i, j, g);
      }
    }
    for (int64_t i = 0; i < rank_; ++i) {
      for (int64_t g : Divisors(excess[static_cast<size_t>(i)])) TryGather(node, cur, *m, i, g);
    }
  }

  // The divisors of k above 1, largest first.
  static std::vector<int64_t> Divisors(int64_t k) {
    std::vector<int64_t> out;
    for (int64_t g = k; g > 1; --g) {
      if (k % g == 0) out.push_back(g);
    }
    return out;
  }

  int64_t Dim(int64_t d) const { return global_.dims[static_cast<size_t>(d)]; }

  // A replicated factor g becomes part of dim j's tiling. First as the target places it (each
  // device takes the coarsened target tile it will hold); else as the model's minor split.
  void TrySlice(int64_t node, const Sharding& cur, const Model& m, int64_t j, int64_t g) {
    const std::vector<int64_t> c = Tiles(m);
    const int64_t cj = c[static_cast<size_t>(j)];
    const int64_t tj = target_tiles_[static_cast<size_t>(j)];
    if (tj % (cj * g) == 0) {
      std::vector<int64_t> tiles = c;
      tiles[static_cast<size_t>(j)] = cj * g;
      const int64_t coarsen = tj / (cj * g);
      std::optional<Sharding> after = Sharding::FromTileFunction(tiles, Iota(n_), [&](int64_t p) {
        std::vector<int64_t> t = TileIndexOf(m, p);
        t[static_cast<size_t>(j)] = target_index_[static_cast<size_t>(p)][static_cast<size_t>(j)] / coarsen;
        return t;
      });
      if (after && RefinesOnEveryDevice(cur, *after, global_, n_)) {
        Add(node, ReshardStep{ReshardStepKind::kSlice, j, -1, g, {}, cur, *after, 0}, false);
        return;
      }
    }
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.repl, g);
    if (!moved) return;
    std::vector<int64_t>& axes = m2.dims[static_cast<size_t>(j)];
    axes.insert(axes.end(), moved->begin(), moved->end());
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (after && RefinesOnEveryDevice(cur, *after, global_, n_)) {
      Add(node, ReshardStep{ReshardStepKind::kSlice, j, -1, g, {}, cur, *after, 0}, false);
    }
  }

  void TryAllToAll(int64_t node, const Sharding& cur, const Model& m, int64_t i, int64_t j, int64_t g) {
    const std::vector<int64_t> c = Tiles(m);
    if (!MergesEvenly(Dim(i), c[static_cast<size_t>(i)], g) || !SplitsEvenly(Dim(j), c[static_cast<size_t>(j)], g)) {
      return;
    }
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.dims[static_cast<size_t>(i)], g);
    if (!moved) return;
    std::vector<std::vector<int64_t>> groups = GroupsOver(m2, *moved, n_);
    std::vector<int64_t>& axes = m2.dims[static_cast<size_t>(j)];
    axes.insert(axes.end(), moved->begin(), moved->end());
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (!after) return;
    const double bytes = LocalBytesOf(cur, global_) * static_cast<double>(g - 1) / static_cast<double>(g);
    Add(node, ReshardStep{ReshardStepKind::kAllToAll, i, j, g, std::move(groups), cur, *after, bytes}, false);
  }

  void TryGather(int64_t node, const Sharding& cur, const Model& m, int64_t i, int64_t g) {
    if (!MergesEvenly(Dim(i), Tiles(m)[static_cast<size_t>(i)], g)) return;
    Model m2 = m;
    std::optional<std::vector<int64_t>> moved = TakeMinor(m2, m2.dims[static_cast<size_t>(i)], g);
    if (!moved) return;
    std::vector<std::vector<int64_t>> groups = GroupsOver(m2, *moved, n_);
    m2.repl.insert(m2.repl.end(), moved->begin(), moved->end());
    std::optional<Sharding> after = ShardingOf(m2, n_);
    if (!after) return;
    const double bytes = LocalBytesOf(*after, global_) * static_cast<double>(g - 1) / static_cast<double>(g);
    Add(node, ReshardStep{ReshardStepKind::kAllGather, i, -1, g, std::move(groups), cur, *after, bytes}, false);
  }

  const Sharding& to_;
  const Shape& global_;
  int64_t n_ = 0;
  int64_t rank_ = 0;
  bool valid_ = false;
  std::vector<int64_t> target_tiles_;
  std::vector<std::vector<int64_t>> target_index_;
  std::vector<Node> nodes_;
  std::priority_queue<Entry> queue_;
};

}  // namespace

std::optional<ReshardSteps> PlanReshardSteps(const Sharding& from, const Sharding& to, const Shape& global,
                                             int64_t n) {
  if (!global.IsArray() || global.rank() == 0 || n < 1) return std::nullopt;
  if (!ModelOf(from, global.rank(), n)) return std::nullopt;
  Search search(to, global, n);
  return search.Run(from);
}

}  // namespace weave::spmd
