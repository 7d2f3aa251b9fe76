// spmd-partitioner: dot, base cases (../shared/specs/spmd-partitioner.md §4, steps 1 and 7;
// the full handler with XLA's order of cases and windowed einsum configs is the next stage).
//
// A dot's iteration space has the dims B (batch), L (lhs non-contracting), R (rhs
// non-contracting) and C (contracting). A sharding X of that space fixes everything: the lhs
// needs X projected on (B, L, C), the rhs on (B, R, C); the local dot gives the output projected
// on (B, L, R), as partial sums over the devices that differ only in C, which one all-reduce
// (add) per tiled C dim sums. Candidates for X: the output's sharding; each operand's; the
// lhs's (B, L, C) with the rhs's R and the mirror; the output's with either operand's C. As in
// XLA's handler, shardings the operands already have (no operand reshard: the base cases and the
// contracting split) come first; among those, and otherwise among all, the cheapest in estimated
// bytes received per device (operand reshards + all-reduces + the final reshard to the output's
// sharding) wins; ties go to the earlier candidate. Uneven tiled C dims
// are zero-masked on both operands (padding is undefined and may be NaN).
#include <algorithm>

#include "absl/strings/str_cat.h"
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
  const DotDims& dd = dot.dot_dims;
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

}  // namespace

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
  auto use = [&](bool b, bool l, bool r, bool c) {
    std::vector<bool> u(static_cast<size_t>(sp.rank()), false);
    for (int64_t d = 0; d < sp.rank(); ++d) {
      const bool is_b = d < sp.nb, is_l = d >= sp.nb && d < sp.nb + sp.nl,
                 is_r = d >= sp.nb + sp.nl && d < sp.nb + sp.nl + sp.nr, is_c = sp.IsC(d);
      u[static_cast<size_t>(d)] = (is_b && b) || (is_l && l) || (is_r && r) || (is_c && c);
    }
    return u;
  };
  struct Candidate {
    std::string name;
    std::vector<Part> parts;
  };
  const std::vector<Candidate> candidates = {
      {"output", {{&os, &sp.out_map, use(true, true, true, false)}}},
      {"lhs", {{&ls, &sp.lhs_map, use(true, true, false, true)}}},
      {"rhs", {{&rs, &sp.rhs_map, use(true, false, true, true)}}},
      {"lhs+rhs", {{&ls, &sp.lhs_map, use(true, true, false, true)},
                   {&rs, &sp.rhs_map, use(false, false, true, false)}}},
      {"rhs+lhs", {{&rs, &sp.rhs_map, use(true, false, true, true)},
                   {&ls, &sp.lhs_map, use(false, true, false, false)}}},
      {"output+lhs contracting", {{&os, &sp.out_map, use(true, true, true, false)},
                                  {&ls, &sp.lhs_map, use(false, false, false, true)}}},
      {"output+rhs contracting", {{&os, &sp.out_map, use(true, true, true, false)},
                                  {&rs, &sp.rhs_map, use(false, false, false, true)}}},
  };
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  std::optional<Sharding> best;
  std::string best_name;
  double best_cost = 0;
  bool best_compatible = false;
  for (const Candidate& c : candidates) {
    std::optional<Sharding> x = Combine(sp, c.parts, n);
    if (!x) continue;
    const Sharding lreq = Project(*x, sp.lhs_map, n);
    const Sharding rreq = Project(*x, sp.rhs_map, n);
    const Sharding oreq = Project(*x, sp.out_map, n);
    const double operand_cost = ReshardCostBytes(ls, lreq, lg, n) + ReshardCostBytes(rs, rreq, rg, n);
    double cost = operand_cost + ReshardCostBytes(oreq, os, h.shape(), n);
    bool split_c = false;
    if (x->IsTiled()) {
      for (int64_t d = 0; d < sp.rank(); ++d) split_c |= sp.IsC(d) && x->tile(d) > 1;
    }
    if (split_c) cost += 2.0 * static_cast<double>(LocalShape(h.shape(), oreq).ByteSize());
    // XLA's order: a sharding the operands already have (base cases, contracting split) comes
    // before any that reshards an operand.
    const bool compatible = operand_cost == 0;
    if (!best || (compatible && !best_compatible) ||
        (compatible == best_compatible && cost < best_cost)) {
      best = *x;
      best_cost = cost;
      best_name = c.name;
      best_compatible = compatible;
    }
  }
  if (!best) return cp.Replicated(h, "dot: no consistent sharding of its iteration space");
  const Sharding lreq = Project(*best, sp.lhs_map, n);
  const Sharding rreq = Project(*best, sp.rhs_map, n);
  const Sharding oreq = Project(*best, sp.out_map, n);
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
    lhs = b.MaskPadding(lhs, lreq, lg, h.dot_dims.lhs_contracting,
                        b.ScalarConst(lg.element_type, 0));
    rhs = b.MaskPadding(rhs, rreq, rg, h.dot_dims.rhs_contracting,
                        b.ScalarConst(rg.element_type, 0));
  }
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), oreq), {lhs, rhs});
  for (auto it = c_dims.rbegin(); it != c_dims.rend(); ++it) {
    local = cp.b().AllReduce(local, DeviceGroups(*best, {*it}),
                             cp.b().Reducer(HloOpcode::kAdd, h.shape().element_type));
  }
  cp.Remark(h, true,
            absl::StrCat("dot in the ", best_name, " sharding of its iteration space ",
                         best->ToString(), ": lhs ", lreq.ToString(), ", rhs ", rreq.ToString(),
                         c_dims.empty() ? std::string()
                                        : absl::StrCat(", ", c_dims.size(),
                                                       " all-reduce(s) of the partial sums"),
                         ", estimated ", static_cast<int64_t>(best_cost), " bytes received per device"));
  return PValue{local, oreq, h.shape()};
}

}  // namespace weave::spmd
