// The dot handler's decision procedure (einsum_planner.h), over any einsum-like op's iteration
// space: XLA's SPMD dot handler order (xla/service/spmd/dot_handler.cc, PartitionDot), as
// partition_dot.cc's header comment lays out step by step.
#include "spmd/einsum_planner.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "spmd/reshard.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<int64_t> AllDevices(int64_t n) {
  std::vector<int64_t> d(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) d[static_cast<size_t>(p)] = p;
  return d;
}

// Tile index of `dev` along each dim of `s` (zeros when not tiled).
std::vector<int64_t> Index(const Sharding& s, int64_t dev, int64_t rank) {
  auto idx = s.TileIndex(dev, rank);
  return idx ? *idx : std::vector<int64_t>(static_cast<size_t>(rank), 0);
}

// Space sharding from parts: for every space dim, which sharding and which of its dims gives
// the tiles (-1 = untiled).
struct Part {
  const Sharding* s;
  const std::vector<int64_t>* map;  // that sharding's dim -> space dim
  std::vector<bool> use;            // per space dim: take it from this part
};

std::optional<Sharding> Combine(const EinsumSpace& sp, const std::vector<Part>& parts, int64_t n) {
  std::vector<int64_t> tiles(static_cast<size_t>(sp.rank()), 1);
  for (const Part& p : parts) {
    if (!p.s->IsTiled()) continue;
    if (p.s->HasManualSubgroup() || p.s->SubgroupSize(SubgroupType::kUnreduced) > 1) return std::nullopt;
    for (size_t d = 0; d < p.map->size(); ++d) {
      const int64_t sd = (*p.map)[d];
      if (sd >= 0 && p.use[static_cast<size_t>(sd)]) tiles[static_cast<size_t>(sd)] = p.s->tile(static_cast<int64_t>(d));
    }
  }
  return Sharding::FromTileFunction(tiles, AllDevices(n), [&](int64_t dev) {
    std::vector<int64_t> idx(static_cast<size_t>(sp.rank()), 0);
    for (const Part& p : parts) {
      if (!p.s->IsTiled()) continue;
      const std::vector<int64_t> i = Index(*p.s, dev, p.s->rank());
      for (size_t d = 0; d < p.map->size(); ++d) {
        const int64_t sd = (*p.map)[d];
        if (sd >= 0 && p.use[static_cast<size_t>(sd)]) idx[static_cast<size_t>(sd)] = i[d];
      }
    }
    return idx;
  });
}

// X projected onto an operand (or the output): dims through `map`.
Sharding Project(const Sharding& x, const std::vector<int64_t>& map, int64_t n) {
  if (!x.IsTiled()) return x;
  std::vector<int64_t> tiles;
  for (int64_t sd : map) tiles.push_back(sd >= 0 ? x.tile(sd) : 1);
  std::optional<Sharding> s = Sharding::FromTileFunction(tiles, AllDevices(n), [&](int64_t dev) {
    const std::vector<int64_t> i = Index(x, dev, x.rank());
    std::vector<int64_t> out;
    for (int64_t sd : map) out.push_back(sd >= 0 ? i[static_cast<size_t>(sd)] : 0);
    return out;
  });
  return s ? *s : Sharding::Replicated();
}

// ---- XLA's decision procedure over the iteration space ----

enum Cls { kB = 0, kL = 1, kR = 2, kC = 3 };
enum CompId { kLhs = 0, kRhs = 1, kOut = 2 };

class EinsumPlanner {
 public:
  struct Plan {
    std::vector<Part> parts;
    std::vector<std::string> steps;
  };

  EinsumPlanner(const EinsumSpace& sp, const std::array<const Shape*, 3>& shapes,
                const Sharding& ls, const Sharding& rs, const Sharding& os, int64_t n)
      : sp_(sp), shapes_(shapes), n_(n) {
    comp_[kLhs] = {&ls, &sp.lhs_map, {}};
    comp_[kRhs] = {&rs, &sp.rhs_map, {}};
    comp_[kOut] = {&os, &sp.out_map, {}};
    for (Comp& c : comp_) {
      c.inv.assign(static_cast<size_t>(sp.rank()), -1);
      for (size_t d = 0; d < c.map->size(); ++d) {
        if ((*c.map)[d] >= 0) c.inv[static_cast<size_t>((*c.map)[d])] = static_cast<int64_t>(d);
      }
    }
    lhs_bytes_ = LocalShape(*shapes[kLhs], ls).ByteSize();
    rhs_bytes_ = LocalShape(*shapes[kRhs], rs).ByteSize();
  }

  Plan Run() {
    Sub top;
    top.fixed.assign(static_cast<size_t>(sp_.rank()), false);
    top.n = n_;
    Finish(top);
    return Top(top);
  }

  Cls ClassOf(int64_t d) const {
    if (d < sp_.nb) return kB;
    if (d < sp_.nb + sp_.nl) return kL;
    if (d < sp_.nb + sp_.nl + sp_.nr) return kR;
    return kC;
  }

 private:
  struct Comp {
    const Sharding* s;
    const std::vector<int64_t>* map;  // comp dim -> space dim
    std::vector<int64_t> inv;         // space dim -> comp dim (-1)
  };
  struct Sub {
    std::vector<Part> parts;
    std::vector<bool> fixed;              // per space dim: fixed by a grouping step
    int64_t n = 1;                        // devices per group
    std::array<std::vector<bool>, 3> eff;  // per comp: space dims it tiles within the group
    std::vector<std::string> steps;
  };

  int64_t TileOn(int k, int64_t sd) const {
    const Comp& c = comp_[k];
    const int64_t cd = c.inv[static_cast<size_t>(sd)];
    return cd >= 0 && c.s->IsTiled() ? c.s->tile(cd) : 1;
  }
  Part MakePart(int k, const std::vector<bool>& use) const {
    return Part{comp_[k].s, comp_[k].map, use};
  }
  bool Valid(const std::vector<Part>& parts) const { return Combine(sp_, parts, n_).has_value(); }

  // The dims of comp k that stay tiled within the groups of `s`: all unfixed tiled dims if they
  // combine with the grouping into a valid sharding, else the largest prefix-greedy subset.
  void Finish(Sub& s) const {
    for (int k = 0; k < 3; ++k) {
      std::vector<bool> all(static_cast<size_t>(sp_.rank()), false);
      bool any = false;
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (!s.fixed[static_cast<size_t>(d)] && TileOn(k, d) > 1) all[static_cast<size_t>(d)] = any = true;
      }
      if (!any) {
        s.eff[static_cast<size_t>(k)] = all;
        continue;
      }
      std::vector<Part> parts = s.parts;
      parts.push_back(MakePart(k, all));
      if (Valid(parts)) {
        s.eff[static_cast<size_t>(k)] = all;
        continue;
      }
      std::vector<bool> use(static_cast<size_t>(sp_.rank()), false);
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (!all[static_cast<size_t>(d)]) continue;
        use[static_cast<size_t>(d)] = true;
        parts.back() = MakePart(k, use);
        if (!Valid(parts)) use[static_cast<size_t>(d)] = false;
      }
      s.eff[static_cast<size_t>(k)] = use;
    }
  }

  int64_t Count(const Sub& s, int k, Cls c) const {
    int64_t p = 1;
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      if (ClassOf(d) == c && s.eff[static_cast<size_t>(k)][static_cast<size_t>(d)]) p *= TileOn(k, d);
    }
    return p;
  }
  int64_t CountAll(const Sub& s, int k) const {
    int64_t p = 1;
    for (int c = 0; c < 4; ++c) p *= Count(s, k, static_cast<Cls>(c));
    return p;
  }
  std::vector<bool> Mask(const Sub& s, int k, std::initializer_list<Cls> cls) const {
    std::vector<bool> m(static_cast<size_t>(sp_.rank()), false);
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      if (!s.eff[static_cast<size_t>(k)][static_cast<size_t>(d)]) continue;
      for (Cls c : cls) m[static_cast<size_t>(d)] = m[static_cast<size_t>(d)] || ClassOf(d) == c;
    }
    return m;
  }
  // Whether comps a and b tile the space dims in `mask_dims` (either's effective dims of those
  // classes) alike: same tile counts and the same tile on every device.
  bool SameOn(const Sub& s, int a, int b, std::initializer_list<Cls> cls) const {
    const std::vector<bool> ma = Mask(s, a, cls), mb = Mask(s, b, cls);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      const bool ea = ma[static_cast<size_t>(d)], eb = mb[static_cast<size_t>(d)];
      if (!ea && !eb) continue;
      if (ea != eb || TileOn(a, d) != TileOn(b, d)) return false;
      dims.push_back(d);
    }
    for (int64_t dev = 0; dev < n_; ++dev) {
      const std::vector<int64_t> ia = Index(*comp_[a].s, dev, comp_[a].s->rank());
      const std::vector<int64_t> ib = Index(*comp_[b].s, dev, comp_[b].s->rank());
      for (int64_t d : dims) {
        if (ia[static_cast<size_t>(comp_[a].inv[static_cast<size_t>(d)])] !=
            ib[static_cast<size_t>(comp_[b].inv[static_cast<size_t>(d)])]) {
          return false;
        }
      }
    }
    return true;
  }
  bool PerDimEqual(const Sub& s, int a, int b, Cls c) const {
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      if (ClassOf(d) != c || s.fixed[static_cast<size_t>(d)]) continue;
      const int64_t ta = s.eff[static_cast<size_t>(a)][static_cast<size_t>(d)] ? TileOn(a, d) : 1;
      const int64_t tb = s.eff[static_cast<size_t>(b)][static_cast<size_t>(d)] ? TileOn(b, d) : 1;
      if (ta != tb) return false;
    }
    return true;
  }

  Plan Done(const Sub& s, std::vector<Part> extra, std::string step) const {
    Plan p{s.parts, s.steps};
    for (Part& x : extra) p.parts.push_back(std::move(x));
    p.steps.push_back(std::move(step));
    return p;
  }
  // A grouped subproblem: `s` plus comp k's dims `use` as the group; nullopt when they do not
  // form a valid grouping or leave a fraction of a device per group.
  std::optional<Sub> Group(const Sub& s, int k, const std::vector<bool>& use,
                           std::string step) const {
    Sub g = s;
    int64_t groups = 1;
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      if (!use[static_cast<size_t>(d)]) continue;
      g.fixed[static_cast<size_t>(d)] = true;
      groups *= TileOn(k, d);
    }
    if (groups <= 1 || s.n % groups != 0) return std::nullopt;
    g.parts.push_back(MakePart(k, use));
    if (!Valid(g.parts)) return std::nullopt;
    g.n = s.n / groups;
    g.steps.push_back(std::move(step));
    Finish(g);
    return g;
  }

  Plan Top(const Sub& s) const {
    if (s.n <= 1) return Done(s, {}, "local dot in groups of one device");
    for (bool require_matching : {true, false}) {
      if (std::optional<Plan> p = Step(s, require_matching)) return *p;
    }
    return Done(s, {MakePart(kOut, Mask(s, kOut, {kB, kL, kR}))},
                "operands resharded to what the output sharding implies");
  }

  std::optional<Plan> Step(const Sub& s, bool req) const {
    if (std::optional<Plan> p = BaseBefore(s)) return p;
    if (std::optional<Plan> p = GroupOnBatch(s, req)) return p;
    if (std::optional<Plan> p = GroupOnNonContracting(s, req)) return p;
    if (std::optional<Plan> p = GroupOnContracting(s, req)) return p;
    const int64_t out_tiles = CountAll(s, kOut);
    if (CountAll(s, kLhs) == 1 && CountAll(s, kRhs) == 1 && out_tiles > 1 && out_tiles < s.n) {
      Sub inner = s;
      inner.n = out_tiles;
      inner.steps.push_back("operands replicated, output partially replicated: within its tiles");
      return Top(inner);
    }
    return BaseAfter(s);
  }

  bool OutputPartiallyReplicated(const Sub& s) const {
    const int64_t t = CountAll(s, kOut);
    return t > 1 && t < s.n;
  }

  std::optional<Plan> BaseBefore(const Sub& s) const {
    if (OutputPartiallyReplicated(s)) return std::nullopt;
    const int64_t n = s.n;
    const int64_t lb = Count(s, kLhs, kB), rb = Count(s, kRhs, kB), ob = Count(s, kOut, kB);
    if (lb == n && rb == n && SameOn(s, kLhs, kRhs, {kB})) {
      return Done(s, {MakePart(kLhs, Mask(s, kLhs, {kB}))}, "base (a): operands batch-sharded alike");
    }
    for (bool allow_any : {false, true}) {
      for (int k : {kLhs, kRhs}) {
        const int64_t kb = k == kLhs ? lb : rb;
        if (!(kb == n && ob == n && SameOn(s, k, kOut, {kB}))) continue;
        Plan p = Done(s, {MakePart(k, Mask(s, k, {kB}))},
                      absl::StrCat("base (", allow_any ? "d" : "b", "): output batch-sharded like the ",
                                   k == kLhs ? "lhs" : "rhs", ", the other operand resharded"));
        if (!allow_any && !OtherReshardIsPermuteOrAllToAll(p, k == kLhs ? kRhs : kLhs)) continue;
        return p;
      }
    }
    if (Count(s, kLhs, kL) == n && Count(s, kOut, kL) == n && SameOn(s, kLhs, kOut, {kL})) {
      return Done(s, {MakePart(kLhs, Mask(s, kLhs, {kL}))},
                  "base (e): lhs sharded like the output on its non-contracting dims, rhs gathered");
    }
    if (Count(s, kRhs, kR) == n && Count(s, kOut, kR) == n && SameOn(s, kRhs, kOut, {kR})) {
      return Done(s, {MakePart(kRhs, Mask(s, kRhs, {kR}))},
                  "base (f): rhs sharded like the output on its non-contracting dims, lhs gathered");
    }
    return std::nullopt;
  }

  bool OtherReshardIsPermuteOrAllToAll(const Plan& p, int other) const {
    std::optional<Sharding> x = Combine(sp_, p.parts, n_);
    if (!x) return false;
    const Sharding req = Project(*x, *comp_[other].map, n_);
    const ReshardPlan r = PlanReshard(*comp_[other].s, req, *shapes_[static_cast<size_t>(other)], n_);
    return r.kind == ReshardKind::kNone || r.kind == ReshardKind::kPermute ||
           r.kind == ReshardKind::kAllToAll || ((r.kind == ReshardKind::kSteps || r.kind == ReshardKind::kHalo) && !r.Gathers());
  }

  std::optional<Plan> GroupOnBatch(const Sub& s, bool req) const {
    const int64_t lb = Count(s, kLhs, kB), rb = Count(s, kRhs, kB), ob = Count(s, kOut, kB);
    if (!((lb == ob || rb == ob) && ob > 1)) return std::nullopt;
    bool matching = PerDimEqual(s, kLhs, kRhs, kB);
    if (req && matching) matching = SameOn(s, kLhs, kRhs, {kB});
    std::optional<Sub> g;
    if (matching && lb > 1) {
      const int larger = lhs_bytes_ > rhs_bytes_ ? kLhs : kRhs;
      g = Group(s, larger, Mask(s, larger, {kB}),
                absl::StrCat("group on batch dims (the ", larger == kLhs ? "lhs" : "rhs", "'s groups)"));
    } else {
      if (req) {
        for (int k : {kLhs, kRhs}) {
          if (CountAll(s, k) > 1 && !SameOn(s, k, kOut, {kB})) return std::nullopt;
        }
      }
      g = Group(s, kOut, Mask(s, kOut, {kB}), "group on batch dims (the output's groups)");
    }
    if (!g) return std::nullopt;
    return Top(*g);
  }

  std::optional<Plan> GroupOnNonContracting(const Sub& s, bool req) const {
    const int64_t ll = Count(s, kLhs, kL), rr = Count(s, kRhs, kR);
    const int64_t ol = Count(s, kOut, kL), orr = Count(s, kOut, kR);
    const bool may_l = ll == ol && ll > 1, may_r = rr == orr && rr > 1;
    bool lhs_matching = false;
    std::vector<bool> dims(static_cast<size_t>(sp_.rank()), false);
    bool found = false;
    if (may_l || may_r) {
      lhs_matching = may_l && (!may_r || ll * rhs_bytes_ < rr * lhs_bytes_);
      dims = Mask(s, kOut, {lhs_matching ? kL : kR});
      found = true;
    } else if (ll > 1 && ol > 1) {
      lhs_matching = true;
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (ClassOf(d) == kL && s.eff[kLhs][static_cast<size_t>(d)] &&
            s.eff[kOut][static_cast<size_t>(d)] && TileOn(kLhs, d) == TileOn(kOut, d)) {
          dims[static_cast<size_t>(d)] = found = true;
        }
      }
    } else if (rr > 1 && orr > 1) {
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (ClassOf(d) == kR && s.eff[kRhs][static_cast<size_t>(d)] &&
            s.eff[kOut][static_cast<size_t>(d)] && TileOn(kRhs, d) == TileOn(kOut, d)) {
          dims[static_cast<size_t>(d)] = found = true;
        }
      }
    }
    if (!found) return std::nullopt;
    const int m = lhs_matching ? kLhs : kRhs;
    if (req) {
      // The matching operand's tiles on those dims must sit on the output's devices.
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (!dims[static_cast<size_t>(d)]) continue;
        if (!s.eff[static_cast<size_t>(m)][static_cast<size_t>(d)]) return std::nullopt;
      }
      for (int64_t dev = 0; dev < n_; ++dev) {
        const std::vector<int64_t> im = Index(*comp_[m].s, dev, comp_[m].s->rank());
        const std::vector<int64_t> io = Index(*comp_[kOut].s, dev, comp_[kOut].s->rank());
        for (int64_t d = 0; d < sp_.rank(); ++d) {
          if (!dims[static_cast<size_t>(d)]) continue;
          if (im[static_cast<size_t>(comp_[m].inv[static_cast<size_t>(d)])] !=
              io[static_cast<size_t>(comp_[kOut].inv[static_cast<size_t>(d)])]) {
            return std::nullopt;
          }
        }
      }
    }
    std::optional<Sub> g = Group(s, kOut, dims,
                                 absl::StrCat("group on ", lhs_matching ? "lhs" : "rhs",
                                              " non-contracting dims (the ",
                                              lhs_matching ? "lhs" : "rhs",
                                              " keeps its sharding, the other operand is "
                                              "replicated within the groups where not "
                                              "independent of them)"));
    if (!g) return std::nullopt;
    return Top(*g);
  }

  std::optional<Plan> GroupOnContracting(const Sub& s, bool req) const {
    const int64_t lc = Count(s, kLhs, kC), rc = Count(s, kRhs, kC);
    std::vector<bool> dims(static_cast<size_t>(sp_.rank()), false);
    bool found = false;
    if (lc == rc && lc > 1) {
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (ClassOf(d) == kC && (s.eff[kLhs][static_cast<size_t>(d)] || s.eff[kRhs][static_cast<size_t>(d)])) {
          dims[static_cast<size_t>(d)] = found = true;
        }
      }
    } else if (lc > 1 && rc > 1) {
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (ClassOf(d) == kC && s.eff[kLhs][static_cast<size_t>(d)] &&
            s.eff[kRhs][static_cast<size_t>(d)] && TileOn(kLhs, d) == TileOn(kRhs, d)) {
          dims[static_cast<size_t>(d)] = found = true;
        }
      }
    }
    if (!found) return std::nullopt;
    // The smaller operand is aligned to the larger one's groups.
    const int larger = lhs_bytes_ > rhs_bytes_ ? kLhs : kRhs;
    for (int64_t d = 0; d < sp_.rank(); ++d) {
      if (dims[static_cast<size_t>(d)] && !s.eff[static_cast<size_t>(larger)][static_cast<size_t>(d)]) {
        return std::nullopt;
      }
    }
    if (req) {
      for (int64_t d = 0; d < sp_.rank(); ++d) {
        if (dims[static_cast<size_t>(d)] && TileOn(kLhs, d) != TileOn(kRhs, d)) return std::nullopt;
      }
      for (int64_t dev = 0; dev < n_; ++dev) {
        const std::vector<int64_t> il = Index(*comp_[kLhs].s, dev, comp_[kLhs].s->rank());
        const std::vector<int64_t> ir = Index(*comp_[kRhs].s, dev, comp_[kRhs].s->rank());
        for (int64_t d = 0; d < sp_.rank(); ++d) {
          if (!dims[static_cast<size_t>(d)]) continue;
          if (il[static_cast<size_t>(comp_[kLhs].inv[static_cast<size_t>(d)])] !=
              ir[static_cast<size_t>(comp_[kRhs].inv[static_cast<size_t>(d)])]) {
            return std::nullopt;
          }
        }
      }
    }
    std::optional<Sub> g = Group(s, larger, dims,
                                 absl::StrCat("group on contracting dims (partial sums; the ",
                                              larger == kLhs ? "rhs" : "lhs", " aligned to the ",
                                              larger == kLhs ? "lhs" : "rhs", ")"));
    if (!g) return std::nullopt;
    return Top(*g);
  }

  std::optional<Plan> BaseAfter(const Sub& s) const {
    if (OutputPartiallyReplicated(s)) return std::nullopt;
    const int64_t n = s.n;
    if (Count(s, kOut, kB) == n) {
      return Done(s, {MakePart(kOut, Mask(s, kOut, {kB}))}, "late base: output batch-sharded, operands resharded");
    }
    if (Count(s, kOut, kL) == n) {
      return Done(s, {MakePart(kOut, Mask(s, kOut, {kL}))},
                  "late base: output sharded on lhs non-contracting dims, lhs resharded, rhs replicated");
    }
    if (Count(s, kOut, kR) == n) {
      return Done(s, {MakePart(kOut, Mask(s, kOut, {kR}))},
                  "late base: output sharded on rhs non-contracting dims, rhs resharded, lhs replicated");
    }
    if (CountAll(s, kOut) != 1) return std::nullopt;
    const int64_t out_elems = shapes_[kOut]->ElementCount();
    if (Count(s, kRhs, kC) == n && CountAll(s, kLhs) == 1 &&
        shapes_[kRhs]->ElementCount() > out_elems) {
      return Done(s, {MakePart(kRhs, Mask(s, kRhs, {kC}))},
                  "late base: replicated output, rhs contracting-sharded: lhs sliced, partial sums");
    }
    if (Count(s, kLhs, kC) == n && CountAll(s, kRhs) == 1 &&
        shapes_[kLhs]->ElementCount() > out_elems) {
      return Done(s, {MakePart(kLhs, Mask(s, kLhs, {kC}))},
                  "late base: replicated output, lhs contracting-sharded: rhs sliced, partial sums");
    }
    return std::nullopt;
  }

  const EinsumSpace& sp_;
  std::array<const Shape*, 3> shapes_;  // lhs, rhs, output (global)
  int64_t n_;
  std::array<Comp, 3> comp_;
  int64_t lhs_bytes_ = 0, rhs_bytes_ = 0;
};

// Everything DotPlanner and the projections read: the partition count, the dot's dimension
// numbers, its operand and result shapes, and the three physical shardings (by their text, which
}  // namespace

Sharding ProjectSpace(const Sharding& x, const std::vector<int64_t>& map, int64_t n) {
  return Project(x, map, n);
}

EinsumSpace DotSpace(const HloInstruction& dot) {
  return DotSpaceOf(dot.dot_dims(), dot.operand(0)->shape().rank(), dot.operand(1)->shape().rank());
}

EinsumSpace DotSpaceOf(const DotDims& dd, int64_t lr, int64_t rr) {
  EinsumSpace s;
  s.nb = static_cast<int64_t>(dd.lhs_batch.size());
  s.nc = static_cast<int64_t>(dd.lhs_contracting.size());
  s.lhs_map.assign(static_cast<size_t>(lr), -1);
  s.rhs_map.assign(static_cast<size_t>(rr), -1);
  for (int64_t k = 0; k < s.nb; ++k) {
    s.lhs_map[static_cast<size_t>(dd.lhs_batch[static_cast<size_t>(k)])] = k;
    s.rhs_map[static_cast<size_t>(dd.rhs_batch[static_cast<size_t>(k)])] = k;
  }
  std::vector<int64_t> lnc, rnc;
  for (int64_t d = 0; d < lr; ++d) {
    if (!Contains(dd.lhs_batch, d) && !Contains(dd.lhs_contracting, d)) lnc.push_back(d);
  }
  for (int64_t d = 0; d < rr; ++d) {
    if (!Contains(dd.rhs_batch, d) && !Contains(dd.rhs_contracting, d)) rnc.push_back(d);
  }
  s.nl = static_cast<int64_t>(lnc.size());
  s.nr = static_cast<int64_t>(rnc.size());
  for (int64_t k = 0; k < s.nl; ++k) s.lhs_map[static_cast<size_t>(lnc[static_cast<size_t>(k)])] = s.nb + k;
  for (int64_t k = 0; k < s.nr; ++k) {
    s.rhs_map[static_cast<size_t>(rnc[static_cast<size_t>(k)])] = s.nb + s.nl + k;
  }
  for (int64_t k = 0; k < s.nc; ++k) {
    const int64_t c = s.nb + s.nl + s.nr + k;
    s.lhs_map[static_cast<size_t>(dd.lhs_contracting[static_cast<size_t>(k)])] = c;
    s.rhs_map[static_cast<size_t>(dd.rhs_contracting[static_cast<size_t>(k)])] = c;
  }
  for (int64_t d = 0; d < s.nb + s.nl + s.nr; ++d) s.out_map.push_back(d);
  return s;
}

EinsumDecision PlanEinsum(const EinsumSpace& sp, const Shape& lhs, const Shape& rhs,
                          const Shape& out, const Sharding& ls, const Sharding& rs,
                          const Sharding& os, int64_t n) {
  EinsumDecision d;
  EinsumPlanner planner(sp, {&lhs, &rhs, &out}, ls, rs, os, n);
  EinsumPlanner::Plan plan = planner.Run();
  d.best = Combine(sp, plan.parts, n);
  if (d.best) {
    d.lhs_target = Project(*d.best, sp.lhs_map, n);
    d.rhs_target = Project(*d.best, sp.rhs_map, n);
    d.output_target = Project(*d.best, sp.out_map, n);
  }
  d.steps = std::move(plan.steps);
  return d;
}

}  // namespace weave::spmd
