// spmd-partitioner: dot (../shared/specs/spmd-partitioner.md §4), in the order of XLA's SPMD dot
// handler (xla/service/spmd/dot_handler.cc, PartitionDot):
//   0. top: every step below is tried first requiring the operands' device groups to match
//      (no reshard to regroup), then allowing reshards; if none applies, both operands are
//      resharded to what the output sharding implies (XLA's ReshardLHSRHSToMatchOutputSharding).
//   1. base cases before partial matches (skipped when the output is partially replicated):
//      (a) lhs and rhs sharded alike on batch dims only: local dot;
//      (b) output batch-sharded like one operand: the other resharded by collective-permute or
//          all-to-all only; (c) XLA's windowed einsum configs (Weave emits the plain form and
//          stamps XLA's choice, see StampXlaWindow); (d) as (b) with any reshard;
//      (e) lhs sharded like the output on its non-contracting dims: dot(lhs, replicated rhs);
//      (f) the mirror for rhs (the column-parallel activation gather).
//   2. group on batch dims, 3. group on non-contracting dims (the operand matching the output
//      keeps its sharding; if both match, the one whose choice replicates fewer bytes of the
//      other), 4. group on contracting dims (partial sums: the smaller operand aligned to the
//      larger, both zero-masked on the uneven contracting dims, then one all-reduce per
//      contracting dim; an output sharded over those devices gets all-reduce + dynamic-slice,
//      which reduce-scatter-creator turns into a reduce-scatter), each followed by the whole
//      procedure within the groups; 5. replicated operands with a partially replicated output:
//      the procedure over the output's tiles; 6. base cases after partial matches (output
//      batch / lhs / rhs non-contracting sharded over all devices of the group: reshard the
//      operands to it; replicated output with one operand contracting-sharded over all devices
//      and larger than the output: partial sums).
//
// Weave expresses every outcome as one sharding X of the dot's iteration space (dims B batch, L
// lhs non-contracting, R rhs non-contracting, C contracting): grouping fixes X on the grouped
// dims from the sharding that defines the groups; within a group an operand keeps the tiling of
// the dims that are independent of the grouping, the others count as replicated. The lhs is
// resharded to X projected on (B, L, C), the rhs on (B, R, C) (the reshard cache makes one
// all-gather serve every dot that reads the same value), the local dot gives the output in X
// projected on (B, L, R) as partial sums over the devices that differ in C, summed by one
// all-reduce (add) per tiled C dim (last first); the driver reshards the result to the output's
// sharding. Uneven tiled C dims are zero-masked on both operands (padding is undefined and may
// be NaN). Where Weave's grouping is an approximation of XLA's (the other operand's regrouping
// in step 3, XLA's choose_faster_windowed_einsum_over_mem option, which is off by default), the
// remark names the step taken.
#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

struct Space {
  int64_t nb = 0, nl = 0, nr = 0, nc = 0;
  std::vector<int64_t> lhs_map, rhs_map, out_map;  // operand/output dim -> space dim
  int64_t rank() const { return nb + nl + nr + nc; }
  bool IsC(int64_t d) const { return d >= nb + nl + nr; }
};

bool Contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

Space MakeSpace(const HloInstruction& dot) {
  const DotDims& dd = dot.dot_dims();
  Space s;
  const int64_t lr = dot.operand(0)->shape().rank(), rr = dot.operand(1)->shape().rank();
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

std::optional<Sharding> Combine(const Space& sp, const std::vector<Part>& parts, int64_t n) {
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

// XLA's windowed einsum decision at this dot (spec §4 "Windowed einsum", handler step (1c)):
// an operand all-gathered into the dot (config A/B) or partial sums reduce-scattered to a sharded
// output (config C/D) is windowed by XLA's partitioner when the windowed value's global bytes
// reach xla_gpu_threshold_for_windowed_einsum_mib (GPU default 100000 MiB: off). Weave emits
// the plain form either way (the decomposer and the cost gate decide); the choice XLA would
// make is stamped as _weave_xla_window="ag|rs|none" and said in a remark.
void StampXlaWindow(ComputationPartitioner& cp, const HloInstruction& h, HloInstruction* local,
                    const Sharding& ls, const Sharding& lreq, const Sharding& rs,
                    const Sharding& rreq, const Sharding& os, bool partial_sums) {
  const int64_t n = cp.num_partitions();
  std::string form;
  double bytes = 0;
  for (int i = 0; i < 2; ++i) {
    const Sharding& from = i == 0 ? ls : rs;
    const Sharding& to = i == 0 ? lreq : rreq;
    if (PlanReshard(from, to, h.operand(i)->shape(), n).Gathers()) {
      form = absl::StrCat("all-gather of ", i == 0 ? "lhs" : "rhs", " '", h.operand(i)->name(),
                          "' into the dot");
      bytes = std::max(bytes, static_cast<double>(h.operand(i)->shape().ByteSize()));
    }
  }
  const bool rs_form = partial_sums && os.IsTiled();
  if (rs_form && form.empty()) {
    form = "partial sums reduced to a sharded output (reduce-scatter)";
    bytes = static_cast<double>(h.shape().ByteSize());
  }
  if (form.empty()) return;
  std::string divergence;
  if (rs_form) {
    for (int i = 0; i < 2; ++i) {
      const Sharding& from = i == 0 ? ls : rs;
      const Sharding& to = i == 0 ? lreq : rreq;
      if (PlanReshard(from, to, h.operand(i)->shape(), n).kind == ReshardKind::kSlice) {
        divergence = absl::StrCat("; XLA takes its reduce-scatter loop (config C) only when both "
                                  "operands are already contracting-sharded, but '",
                                  h.operand(i)->name(), "' is sliced here from ", from.ToString(),
                                  ", so a Weave loop may form where XLA's would not");
      }
    }
  }
  const double mib = bytes / (1024.0 * 1024.0);
  const double threshold = cp.ctx()->xla_windowed_threshold_mib;
  const bool xla_windows = mib >= threshold;
  const std::string kind = !xla_windows ? "none" : rs_form && bytes == static_cast<double>(h.shape().ByteSize()) ? "rs" : "ag";
  local->frontend_attributes["_weave_xla_window"] = absl::StrCat("\"", kind, "\"");
  cp.Analysis(h,
              absl::StrCat("windowed einsum: Weave emits the plain ", form,
                         " for windowed-einsum-decomposer and the cost gate to decide; XLA's "
                         "partitioner would ",
                         xla_windows ? "emit a windowed einsum loop here"
                                     : "emit the same plain form",
                         " (", absl::StrFormat("%.3f", mib), " MiB global vs "
                         "xla_gpu_threshold_for_windowed_einsum_mib=",
                         threshold, threshold == 100000 ? ", GPU default)" : ")", divergence));
}

// ---- XLA's decision procedure over the iteration space ----

enum Cls { kB = 0, kL = 1, kR = 2, kC = 3 };
enum CompId { kLhs = 0, kRhs = 1, kOut = 2 };

class DotPlanner {
 public:
  struct Plan {
    std::vector<Part> parts;
    std::vector<std::string> steps;
  };

  DotPlanner(const Space& sp, const HloInstruction& h, const Sharding& ls, const Sharding& rs,
             const Sharding& os, int64_t n)
      : sp_(sp), h_(h), n_(n) {
    comp_[kLhs] = {&ls, &sp.lhs_map, {}};
    comp_[kRhs] = {&rs, &sp.rhs_map, {}};
    comp_[kOut] = {&os, &sp.out_map, {}};
    for (Comp& c : comp_) {
      c.inv.assign(static_cast<size_t>(sp.rank()), -1);
      for (size_t d = 0; d < c.map->size(); ++d) {
        if ((*c.map)[d] >= 0) c.inv[static_cast<size_t>((*c.map)[d])] = static_cast<int64_t>(d);
      }
    }
    lhs_bytes_ = LocalShape(h.operand(0)->shape(), ls).ByteSize();
    rhs_bytes_ = LocalShape(h.operand(1)->shape(), rs).ByteSize();
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
    const ReshardPlan r = PlanReshard(*comp_[other].s, req, h_.operand(other == kLhs ? 0 : 1)->shape(), n_);
    return r.kind == ReshardKind::kNone || r.kind == ReshardKind::kPermute ||
           r.kind == ReshardKind::kAllToAll || (r.kind == ReshardKind::kSteps && !r.Gathers());
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
    const int64_t out_elems = h_.shape().ElementCount();
    if (Count(s, kRhs, kC) == n && CountAll(s, kLhs) == 1 &&
        h_.operand(1)->shape().ElementCount() > out_elems) {
      return Done(s, {MakePart(kRhs, Mask(s, kRhs, {kC}))},
                  "late base: replicated output, rhs contracting-sharded: lhs sliced, partial sums");
    }
    if (Count(s, kLhs, kC) == n && CountAll(s, kRhs) == 1 &&
        h_.operand(0)->shape().ElementCount() > out_elems) {
      return Done(s, {MakePart(kLhs, Mask(s, kLhs, {kC}))},
                  "late base: replicated output, lhs contracting-sharded: rhs sliced, partial sums");
    }
    return std::nullopt;
  }

  const Space& sp_;
  const HloInstruction& h_;
  int64_t n_;
  std::array<Comp, 3> comp_;
  int64_t lhs_bytes_ = 0, rhs_bytes_ = 0;
};

// Everything DotPlanner and the projections read: the partition count, the dot's dimension
// numbers, its operand and result shapes, and the three physical shardings (by their text, which
// is canonical).
std::string DotDecisionKey(const HloInstruction& h, const Sharding& ls, const Sharding& rs,
                           const Sharding& os, int64_t n) {
  const DotDims& dd = h.dot_dims();
  return absl::StrCat(n, "|", absl::StrJoin(dd.lhs_batch, ","), "|",
                      absl::StrJoin(dd.lhs_contracting, ","), "|", absl::StrJoin(dd.rhs_batch, ","),
                      "|", absl::StrJoin(dd.rhs_contracting, ","), "|",
                      h.operand(0)->shape().ToString(), "|", h.operand(1)->shape().ToString(), "|",
                      h.shape().ToString(), "|", ls.ToString(), "|", rs.ToString(), "|",
                      os.ToString());
}

}  // namespace

// PartitionDot's decision for one form of dot (SpmdContext::dot_decisions).
struct DotDecision {
  std::optional<Sharding> best;  // the iteration space's sharding (nullopt: none consistent)
  Sharding lreq, rreq, oreq;     // best projected onto the operands and the output
  std::vector<std::string> steps;
};

absl::StatusOr<PValue> PartitionDot(ComputationPartitioner& cp, const HloInstruction& h) {
  const int64_t n = cp.num_partitions();
  const Space sp = MakeSpace(h);
  const Sharding& out = cp.Target(&h);
  const PValue& lv = cp.Value(h.operand(0));
  const PValue& rv = cp.Value(h.operand(1));
  auto physical = [](const Sharding& s) {
    return s.IsTiled() && !s.HasManualSubgroup() ? s : Sharding::Replicated();
  };
  const Sharding ls = physical(lv.sharding), rs = physical(rv.sharding), os = physical(out);
  std::shared_ptr<const DotDecision>& decided =
      cp.ctx()->dot_decisions[DotDecisionKey(h, ls, rs, os, n)];
  if (decided == nullptr) {
    auto d = std::make_shared<DotDecision>();
    DotPlanner planner(sp, h, ls, rs, os, n);
    DotPlanner::Plan plan = planner.Run();
    d->best = Combine(sp, plan.parts, n);
    if (d->best) {
      d->lreq = Project(*d->best, sp.lhs_map, n);
      d->rreq = Project(*d->best, sp.rhs_map, n);
      d->oreq = Project(*d->best, sp.out_map, n);
    }
    d->steps = std::move(plan.steps);
    decided = std::move(d);
  }
  const DotDecision& decision = *decided;
  const std::optional<Sharding>& best = decision.best;
  if (!best) return cp.Replicated(h, "dot: no consistent sharding of its iteration space");
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  const Sharding& lreq = decision.lreq;
  const Sharding& rreq = decision.rreq;
  const Sharding& oreq = decision.oreq;
  absl::StatusOr<HloInstruction*> l = cp.Operand(h, 0, lreq);
  if (!l.ok()) return l.status();
  absl::StatusOr<HloInstruction*> r = cp.Operand(h, 1, rreq);
  if (!r.ok()) return r.status();
  std::vector<int64_t> c_dims;
  if (best->IsTiled()) {
    for (int64_t d = sp.nb + sp.nl + sp.nr; d < sp.rank(); ++d) {
      if (best->tile(d) > 1) c_dims.push_back(d);
    }
  }
  HloInstruction* lhs = *l;
  HloInstruction* rhs = *r;
  if (!c_dims.empty()) {
    SpmdBuilder& b = cp.b();
    lhs = b.MaskPadding(lhs, lreq, lg, h.dot_dims().lhs_contracting,
                        b.ScalarConst(lg.element_type, 0));
    rhs = b.MaskPadding(rhs, rreq, rg, h.dot_dims().rhs_contracting,
                        b.ScalarConst(rg.element_type, 0));
  }
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), oreq), {lhs, rhs});
  StampXlaWindow(cp, h, local, ls, lreq, rs, rreq, os, !c_dims.empty());
  for (auto it = c_dims.rbegin(); it != c_dims.rend(); ++it) {
    local = cp.b().AllReduce(local, DeviceGroups(*best, {*it}),
                             cp.b().Reducer(HloOpcode::kAdd, h.shape().element_type));
  }
  cp.Remark(h, true,
            absl::StrCat("dot by XLA's handler order: ", absl::StrJoin(decision.steps, "; then "),
                         "; iteration space ", best->ToString(), ": lhs ", lreq.ToString(),
                         ", rhs ", rreq.ToString(),
                         c_dims.empty() ? std::string()
                                        : absl::StrCat(", ", c_dims.size(),
                                                       " all-reduce(s) of the partial sums")));
  return PValue{local, oreq, h.shape()};
}

}  // namespace weave::spmd
