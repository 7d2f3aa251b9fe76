// Global vs partitioned check (see global_compare.h).
#include "eval/global_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "eval/global_compare_internal.h"
#include "eval/global_view.h"
#include "eval/numerics.h"
#include "eval/output_precision.h"
#include "eval/random_outputs.h"
#include "spmd/sharding.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::eval::global_compare_internal {

using spmd::Sharding;

void FlattenShapes(const Shape& s, std::vector<Shape>* out) {
  if (s.IsTuple()) {
    for (const Shape& e : s.tuple_shapes) FlattenShapes(e, out);
  } else {
    out->push_back(s);
  }
}

std::vector<Sharding> LeafShardings(const Sharding& s, int64_t leaves) {
  if (s.IsTuple()) return s.leaves();
  return std::vector<Sharding>(static_cast<size_t>(leaves), s);
}

absl::StatusOr<Sharding> ShardingOf(const HloInstruction* h, const Shape& global) {
  if (!h->sharding) return Sharding::Broadcast(Sharding::Replicated(), global);
  return Sharding::FromHlo(*h->sharding, global);
}

void Poison(Value* v, int64_t k) {
  switch (v->storage()) {
    case Storage::kFloat: v->f[static_cast<size_t>(k)] = std::nanf(""); break;
    case Storage::kDouble: v->d[static_cast<size_t>(k)] = std::nan(""); break;
    case Storage::kComplex: v->c[static_cast<size_t>(k)] = {std::nan(""), std::nan("")}; break;
    case Storage::kInt:
      if (v->shape.element_type == PrimitiveType::PRED) {
        v->i[static_cast<size_t>(k)] = 1;
      } else {
        v->SetInt(k, static_cast<int64_t>(0x5A5A5A5A5A5A5A5Aull));
      }
      break;
    default: break;
  }
}

void CopyElement(const Value& from, int64_t i, Value* to, int64_t j) {
  switch (from.storage()) {
    case Storage::kFloat: to->f[static_cast<size_t>(j)] = from.f[static_cast<size_t>(i)]; break;
    case Storage::kDouble: to->d[static_cast<size_t>(j)] = from.d[static_cast<size_t>(i)]; break;
    case Storage::kInt: to->i[static_cast<size_t>(j)] = from.i[static_cast<size_t>(i)]; break;
    case Storage::kComplex: to->c[static_cast<size_t>(j)] = from.c[static_cast<size_t>(i)]; break;
    default: break;
  }
}

bool SameBits(const Value& a, int64_t i, const Value& b, int64_t j) {
  switch (a.storage()) {
    case Storage::kFloat: {
      uint32_t x, y;
      std::memcpy(&x, &a.f[static_cast<size_t>(i)], 4);
      std::memcpy(&y, &b.f[static_cast<size_t>(j)], 4);
      return x == y || (std::isnan(a.f[static_cast<size_t>(i)]) && std::isnan(b.f[static_cast<size_t>(j)]));
    }
    case Storage::kDouble: {
      uint64_t x, y;
      std::memcpy(&x, &a.d[static_cast<size_t>(i)], 8);
      std::memcpy(&y, &b.d[static_cast<size_t>(j)], 8);
      return x == y || (std::isnan(a.d[static_cast<size_t>(i)]) && std::isnan(b.d[static_cast<size_t>(j)]));
    }
    case Storage::kInt: return a.i[static_cast<size_t>(i)] == b.i[static_cast<size_t>(j)];
    case Storage::kComplex: {
      const std::complex<double> x = a.c[static_cast<size_t>(i)], y = b.c[static_cast<size_t>(j)];
      auto same = [](double u, double v) { return std::memcmp(&u, &v, 8) == 0 || (std::isnan(u) && std::isnan(v)); };
      return same(x.real(), y.real()) && same(x.imag(), y.imag());
    }
    default: return true;
  }
}

std::vector<int64_t> Offsets(const Sharding& s, int64_t p, const Shape& global) {
  std::vector<int64_t> o(static_cast<size_t>(global.rank()), 0);
  for (int64_t d = 0; d < global.rank(); ++d) o[static_cast<size_t>(d)] = spmd::TileOffset(s, p, d, global.dims[static_cast<size_t>(d)]);
  return o;
}

// The local input of partition p (of n): its tile of `g`, padding poisoned. Under a sharding that
// holds addends (unreduced) the partitions of an addend group hold 2x, -x and zeros (x the tile),
// whose sum is x exactly (floats: doubling and the sum 2x - x are exact; integers wrap back), and
// whose products are not: a partitioning that applies a non-linear op to the addends shows.
Value TileOf(const Value& g, const Sharding& s, int64_t p, int64_t n) {
  const Shape local = spmd::LocalShape(g.shape, s);
  Value v = Value::Zeros(local);
  int64_t addend = -1;  // p's position in its addend group
  for (const std::vector<int64_t>& group : spmd::AddendGroups(s, n)) {
    auto it = std::find(group.begin(), group.end(), p);
    if (it != group.end()) addend = it - group.begin();
  }
  if (addend >= 0) {
    const PrimitiveType t = g.shape.element_type;
    ForEachTileElement(local.dims, g.shape.dims, Offsets(s, p, g.shape), [&](int64_t k, int64_t gi) {
      if (gi < 0) {
        Poison(&v, k);
      } else if (addend <= 1 && v.storage() == Storage::kInt) {
        const int64_t x = g.GetInt(gi);
        v.SetInt(k, t == PrimitiveType::PRED ? x : WrapToType(addend == 0 ? 2 * x : -x, t));
      } else if (addend <= 1 && v.storage() == Storage::kComplex) {
        const std::complex<double> x = g.c[static_cast<size_t>(gi)];
        v.c[static_cast<size_t>(k)] = addend == 0 ? 2.0 * x : -x;
      } else if (addend <= 1) {
        const double x = g.GetDouble(gi);
        v.SetDouble(k, addend == 0 ? 2 * x : -x);
      }
    });
    return v;
  }
  if (s.IsMaximal() && s.maximal_device() != p) {
    for (int64_t k = 0; k < v.size(); ++k) Poison(&v, k);
    return v;
  }
  ForEachTileElement(local.dims, g.shape.dims, Offsets(s, p, g.shape), [&](int64_t k, int64_t gi) {
    if (gi < 0) {
      Poison(&v, k);
    } else {
      CopyElement(g, gi, &v, k);
    }
  });
  return v;
}

// Each output leaf whose sharding holds addends (unreduced) replaced, on every device, by the sum
// over its addend group (within its replica), so that it reassembles under its Summed sharding;
// *leaves gets those shardings.
void SumAddendOutputs(EvalResult* r, std::vector<Sharding>* leaves, int64_t n, int64_t replicas) {
  for (size_t k = 0; k < leaves->size(); ++k) {
    const Sharding s = (*leaves)[k];
    if (!spmd::HoldsAddends(s)) continue;
    for (int64_t rep = 0; rep < replicas; ++rep) {
      for (const std::vector<int64_t>& group : spmd::AddendGroups(s, n)) {
        Value sum = *r->outputs[static_cast<size_t>(rep * n + group[0])][k];
        for (size_t m = 1; m < group.size(); ++m) {
          const Value& part = *r->outputs[static_cast<size_t>(rep * n + group[m])][k];
          for (int64_t e = 0; e < sum.size() && e < part.size(); ++e) {
            if (sum.storage() == Storage::kInt) {
              const bool pred = sum.shape.element_type == PrimitiveType::PRED;
              sum.SetInt(e, pred ? (sum.GetInt(e) | part.GetInt(e)) : sum.GetInt(e) + part.GetInt(e));
            } else if (sum.storage() == Storage::kComplex) {
              sum.c[static_cast<size_t>(e)] = RoundComplex(sum.c[static_cast<size_t>(e)] + part.c[static_cast<size_t>(e)],
                                                           sum.shape.element_type);
            } else {
              sum.SetDouble(e, sum.GetDouble(e) + part.GetDouble(e));
            }
          }
        }
        const ValuePtr shared = Share(std::move(sum));
        for (int64_t p : group) r->outputs[static_cast<size_t>(rep * n + p)][k] = shared;
      }
    }
    (*leaves)[k] = spmd::Summed(s);
  }
}

int64_t LargestReductionGroup(const HloModule& m) {
  int64_t g = 1;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if ((h->opcode() == HloOpcode::kAllReduce || h->opcode() == HloOpcode::kReduceScatter) &&
          h->replica_groups) {
        for (const auto& grp : h->replica_groups->groups) g = std::max<int64_t>(g, static_cast<int64_t>(grp.size()));
      }
    }
  }
  return g;
}

// Runs `global` (the global program, or a clone of it such as SumMagnitudeModule's) on one device
// with its parameter shardings dropped; with manual regions, its global view on the partitioned
// module's P devices, every device on the full inputs. The reference outputs are device 0's.
absl::StatusOr<EvalResult> RunReference(const HloModule& global, const HloModule& partitioned,
                                        const EvalOptions& options, const EvalOptions& ge,
                                        const Inputs& gin,
                                        const std::vector<std::vector<ValuePtr>>* view_inputs = nullptr) {
  absl::StatusOr<EvalResult> gr;
  if (!GlobalViewReason(global).empty()) {
    const int64_t p = ResolvedNumPartitions(partitioned, options);
    absl::StatusOr<std::unique_ptr<HloModule>> view = BuildGlobalViewModule(global, p);
    if (!view.ok()) {
      return absl::Status(view.status().code(),
                          absl::StrCat("global module: manual regions: ", view.status().message()));
    }
    EvalOptions ve = ge;
    ve.num_partitions = p;
    Inputs vin;
    if (view_inputs != nullptr && static_cast<int64_t>(view_inputs->size()) == p) {
      vin.per_device = *view_inputs;
    } else {
      vin.per_device.assign(static_cast<size_t>(p), gin.per_device[0]);
    }
    gr = RunModule(**view, ve, &vin);
  } else {
    std::unique_ptr<HloModule> ref = global.Clone();
    for (HloInstruction* p : ref->entry()->parameters()) p->sharding.reset();
    gr = RunModule(*ref, ge, &gin);
  }
  if (!gr.ok()) return absl::Status(gr.status().code(), absl::StrCat("global module: ", gr.status().message()));
  return gr;
}

// The holders of each distinct tile of a value of `rank` with sharding `s` over n partitions and
// `replicas` replicas, tiles in device-array order (replicated: every partition, in id order),
// each tile's devices as r * n + p.
std::vector<std::vector<int64_t>> TileHolders(const Sharding& s, int64_t rank, int64_t n, int64_t replicas) {
  std::vector<int64_t> partitions;
  if (s.IsTiled()) {
    partitions = s.devices();
  } else if (s.IsMaximal()) {
    partitions = {s.maximal_device()};
  } else {
    for (int64_t p = 0; p < n; ++p) partitions.push_back(p);
  }
  std::map<std::vector<int64_t>, size_t> slot;
  std::vector<std::vector<int64_t>> holders;
  for (int64_t p : partitions) {
    const std::vector<int64_t> t = *s.TileIndex(p, rank);
    auto [it, fresh] = slot.emplace(t, holders.size());
    if (fresh) holders.emplace_back();
    for (int64_t r = 0; r < replicas; ++r) holders[it->second].push_back(r * n + p);
  }
  return holders;
}

// Output leaf k of a partitioned run reassembled into the global `shape` from its sharding `s`:
// each tile from its first holder, padding stripped. `holders`: TileHolders.
Value Reassemble(const EvalResult& pr, size_t k, const Sharding& s, const Shape& shape, int64_t n,
                 const std::vector<std::vector<int64_t>>& holders) {
  Value assembled = Value::Zeros(shape);
  for (const std::vector<int64_t>& hs : holders) {
    const Value& tile = *pr.outputs[static_cast<size_t>(hs[0])][k];
    ForEachTileElement(tile.shape.dims, shape.dims, Offsets(s, hs[0] % n, shape), [&](int64_t lk, int64_t gi) {
      if (gi >= 0) CopyElement(tile, lk, &assembled, gi);
    });
  }
  return assembled;
}

}  // namespace weave::eval::global_compare_internal

namespace weave::eval {

using namespace global_compare_internal;  // NOLINT: this file's own helpers

bool IsGlobalPartitionedPair(const HloModule& global, const HloModule& partitioned,
                             std::string* why) {
  auto fail = [&](std::string m) {
    if (why) *why = std::move(m);
    return false;
  };
  const HloComputation* ge = global.entry();
  const HloComputation* pe = partitioned.entry();
  if (ge == nullptr || pe == nullptr) return fail("a module has no entry");
  if (ge->num_parameters() != pe->num_parameters()) return fail("parameter counts differ");
  bool differs = false;
  for (int64_t i = 0; i < ge->num_parameters(); ++i) {
    const Shape& gs = ge->parameter(i)->shape();
    absl::StatusOr<Sharding> s = ShardingOf(pe->parameter(i), gs);
    if (!s.ok()) return fail(absl::StrCat("parameter ", i, ": ", s.status().message()));
    const Shape local = spmd::LocalShape(gs, *s);
    if (!local.Compatible(pe->parameter(i)->shape())) {
      return fail(absl::StrCat("parameter ", i, " is ", pe->parameter(i)->shape().ToString(false),
                               ", not the local shape ", local.ToString(false), " of ",
                               gs.ToString(false), " under ", s->ToString()));
    }
    differs |= !gs.Compatible(local);
  }
  const Shape& gr = ge->root()->shape();
  absl::StatusOr<Sharding> rs = ShardingOf(pe->root(), gr);
  if (!rs.ok()) return fail(absl::StrCat("root: ", rs.status().message()));
  const Shape local_root = spmd::LocalShape(gr, *rs);
  if (!local_root.Compatible(pe->root()->shape())) {
    return fail(absl::StrCat("the root is ", pe->root()->shape().ToString(false),
                             ", not the local shape ", local_root.ToString(false)));
  }
  differs |= !gr.Compatible(local_root);
  if (!differs) return fail("every parameter and output has the same shape in both");
  return true;
}

// `v` with each array leaf replaced by tile(leaf), in leaf order; `*next` counts the leaves
// visited (callers index per-leaf data with it).
template <typename Fn>
ValuePtr RebuildTuple(const Value& v, const Fn& tile, size_t* next) {
  if (!v.shape.IsTuple()) {
    ValuePtr r = tile(v);
    ++*next;
    return r;
  }
  Value t;
  std::vector<Shape> shapes;
  for (const ValuePtr& e : v.elements) {
    t.elements.push_back(RebuildTuple(*e, tile, next));
    shapes.push_back(t.elements.back()->shape);
  }
  t.shape = Shape::Tuple(std::move(shapes));
  return Share(std::move(t));
}

std::vector<bool> SharedInputParameters(const HloModule& partitioned) {
  std::vector<bool> shared;
  const HloComputation* entry = partitioned.entry();
  if (entry == nullptr) return shared;
  for (const HloInstruction* p : entry->parameters()) {
    const size_t num = static_cast<size_t>(p->parameter_number);
    if (num >= shared.size()) shared.resize(num + 1, false);
    if (p->shape().IsTuple()) continue;
    absl::StatusOr<Sharding> s = ShardingOf(p, p->shape());
    shared[num] = s.ok() && s->IsReplicated();
  }
  return shared;
}

namespace {

// One global-vs-partitioned check (CompareGlobalWithPartitioned), its steps numbered as in
// global_compare.h; each step reads the state the earlier ones left.
struct GlobalPartitionedCheck {
  GlobalPartitionedCheck(const HloModule& global, const HloModule& partitioned,
                         const CompareOptions& options, bool exact_copies)
      : global(global), partitioned(partitioned), options(options), exact_copies(exact_copies),
        pentry(partitioned.entry()) {}

  // Device d's manual group (0 without partially manual parameters).
  int64_t GroupOf(int64_t d) const {
    return mgroup.empty() ? int64_t{0} : mgroup[static_cast<size_t>(d % n)];
  }
  absl::Status MakeGlobalInputs();
  absl::Status RunReferences();
  absl::Status TileInputs();
  absl::Status RunPartitioned();
  absl::Status ResolveOutputShardings();
  void MergePathPrecisions();
  void RunSumMagnitudes();
  absl::Status CompareOutput(size_t k);
  void CompareReassembled(size_t k, const std::vector<std::vector<int64_t>>& holders);
  absl::Status RecheckExactSums();

  const HloModule& global;
  const HloModule& partitioned;
  const CompareOptions& options;
  const bool exact_copies;
  const HloComputation* pentry;
  // 1./2. The reference: the global module unsharded (ref), its options (ge), inputs (gin; gins:
  // one per manual group) and runs (grs, one per manual group; gr: the first's).
  std::unique_ptr<HloModule> ref;
  EvalOptions ge, pe;
  Inputs gin;
  int64_t n = 1, devices = 1;
  std::vector<int64_t> mgroup;  // the manual group of each partition, or empty
  int64_t num_groups = 1;
  std::vector<Inputs> gins;
  std::vector<EvalResult> grs;
  EvalResult* gr = nullptr;
  // 3. The partitioned module's tiles, run (pr) and magnitude run (mr).
  Inputs pin;
  EvalResult pr;
  std::optional<EvalResult> mr;
  // 4./5. The report, root leaves' shapes and shardings (given_leaves: before summing addends),
  // options, path precisions, sum magnitudes (sr), random outputs, reassembled magnitude runs.
  GlobalCompareReport report;
  std::vector<Shape> leaf_shapes;
  std::vector<Sharding> leaves, given_leaves;
  CompareOptions co;
  std::vector<PathPrecision> paths;
  std::optional<EvalResult> sr;
  std::vector<RandomOutput> random;
  std::vector<std::optional<Value>> magnitudes;
};

// 1. The global inputs from the seed (ref, ge, gin, gins) and the partitioned run's counts (pe,
// n, devices, mgroup). Partially manual parameters: every manual group runs its own program, so
// each group gets its own inputs (a group reading another's data then shows), and its outputs
// are checked against the reference run on them; the other parameters are the same for every
// group. Errors: MakeInputs's ("global module: "), ManualGroupsOfParameters's.
absl::Status GlobalPartitionedCheck::MakeGlobalInputs() {
  ref = global.Clone();
  for (HloInstruction* p : ref->entry()->parameters()) p->sharding.reset();
  ge = options.eval;
  ge.num_partitions = 1;
  ge.replica_count = 1;
  ge.replicate_unsharded = true;
  absl::StatusOr<Inputs> made = MakeInputs(*ref, ge);
  if (!made.ok()) return absl::Status(made.status().code(), absl::StrCat("global module: ", made.status().message()));
  gin = *std::move(made);
  pe = options.eval;
  pe.num_partitions = ResolvedNumPartitions(partitioned, options.eval);
  pe.replica_count = ResolvedReplicaCount(partitioned, options.eval);
  n = pe.num_partitions;
  devices = n * pe.replica_count;
  ASSIGN_OR_RETURN(mgroup, ManualGroupsOfParameters(partitioned, global, n));
  num_groups = mgroup.empty() ? 1 : *std::max_element(mgroup.begin(), mgroup.end()) + 1;
  gins = {gin};
  for (int64_t m = 1; m < num_groups; ++m) {
    EvalOptions gm = ge;
    gm.seed = ge.seed + 0x9e3779b9ULL * static_cast<uint64_t>(m);
    absl::StatusOr<Inputs> in = MakeInputs(*ref, gm);
    if (!in.ok()) return absl::Status(in.status().code(), absl::StrCat("global module: ", in.status().message()));
    for (int64_t i = 0; i < pentry->num_parameters(); ++i) {
      const HloInstruction* p = pentry->parameter(i);
      absl::StatusOr<Sharding> ps = ShardingOf(p, global.entry()->parameter(i)->shape());
      if (!ps.ok() || !ps->IsTiled() || !ps->HasManualSubgroup()) {
        in->per_device[0][static_cast<size_t>(i)] = gin.per_device[0][static_cast<size_t>(i)];
      }
    }
    gins.push_back(*std::move(in));
  }
  return absl::OkStatus();
}

// 2. The reference of each manual group (grs; gr: the first): with manual regions, one global
// view run with each partition on its group's inputs; otherwise one run per group. RunReference's
// errors.
absl::Status GlobalPartitionedCheck::RunReferences() {
  if (num_groups > 1 && !GlobalViewReason(global).empty()) {
    std::vector<std::vector<ValuePtr>> view_in;
    for (int64_t d = 0; d < n; ++d) view_in.push_back(gins[static_cast<size_t>(GroupOf(d))].per_device[0]);
    ASSIGN_OR_RETURN(EvalResult r, RunReference(global, partitioned, options.eval, ge, gin, &view_in));
    // Group m's reference: the view's outputs on the first device of group m.
    for (int64_t m = 0; m < num_groups; ++m) {
      EvalResult g = r;
      for (int64_t d = 0; d < n; ++d) {
        if (GroupOf(d) == m) {
          g.outputs[0] = r.outputs[static_cast<size_t>(d)];
          break;
        }
      }
      grs.push_back(std::move(g));
    }
  } else {
    for (int64_t m = 0; m < num_groups; ++m) {
      ASSIGN_OR_RETURN(EvalResult r, RunReference(global, partitioned, options.eval, ge, gins[static_cast<size_t>(m)]));
      grs.push_back(std::move(r));
    }
  }
  gr = &grs[0];
  return absl::OkStatus();
}

// 3. Each device's tiles of its group's inputs (pin), padding poisoned; a tuple parameter's
// leaves each tiled by its own sharding. Errors: a parameter's sharding, or a tuple sharding
// whose leaf count differs from the tuple's.
absl::Status GlobalPartitionedCheck::TileInputs() {
  pin.per_device.assign(static_cast<size_t>(devices), {});
  for (int64_t i = 0; i < pentry->num_parameters(); ++i) {
    const ValuePtr& g = gin.per_device[0][static_cast<size_t>(i)];
    ASSIGN_OR_RETURN(Sharding s, ShardingOf(pentry->parameter(i), g->shape));
    if (g->shape.IsTuple()) {
      // A tuple parameter: each leaf tiled by its own sharding, the tuple rebuilt around them.
      std::vector<ValuePtr> leaves;
      FlattenLeaves(g, &leaves);
      const std::vector<Sharding> ls = LeafShardings(s, static_cast<int64_t>(leaves.size()));
      if (ls.size() != leaves.size()) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", i, "'s sharding has ", ls.size(),
                                                       " leaves for ", leaves.size(), " tuple leaves"));
      }
      for (int64_t d = 0; d < devices; ++d) {
        size_t next = 0;
        pin.per_device[static_cast<size_t>(d)].push_back(
            RebuildTuple(*g, [&](const Value& leaf) { return Share(TileOf(leaf, ls[next], d % n, n)); }, &next));
      }
      continue;
    }
    for (int64_t d = 0; d < devices; ++d) {
      const ValuePtr& gv = gins[static_cast<size_t>(GroupOf(d))].per_device[0][static_cast<size_t>(i)];
      // A replicated parameter's tile is the whole input: every device shares it (no copies;
      // SharedInputParameters says which, for the memory estimate).
      pin.per_device[static_cast<size_t>(d)].push_back(
          s.IsReplicated() && gv->shape.dims == pentry->parameter(i)->shape().dims
              ? gv
              : Share(TileOf(*gv, s, d % n, n)));
    }
  }
  return absl::OkStatus();
}

// 3. The partitioned module run on the tiles (pr; its errors prefixed "partitioned module: "),
// and with path-aware checks its magnitude run (mr; output_precision.h, the K-aware term: the
// partial sums its reductions add, on the same tiles), absent when that run fails.
absl::Status GlobalPartitionedCheck::RunPartitioned() {
  absl::StatusOr<EvalResult> run = RunModule(partitioned, pe, &pin);
  if (!run.ok()) {
    return absl::Status(run.status().code(), absl::StrCat("partitioned module: ", run.status().message()));
  }
  pr = *std::move(run);
  if (options.path_aware) {
    if (std::unique_ptr<HloModule> mag = MagnitudeModule(partitioned)) {
      absl::StatusOr<EvalResult> r = RunModule(*mag, pe, &pin);
      if (r.ok()) mr = *std::move(r);
    }
  }
  return absl::OkStatus();
}

// 4. The report's header, the root leaves' shapes and shardings (leaves; given_leaves as the
// partitioned module gives them), partial (unreduced) outputs summed over their addend groups.
// Errors: the root's sharding, a leaf sharding naming a device outside the partitions, output
// counts that differ.
absl::Status GlobalPartitionedCheck::ResolveOutputShardings() {
  report.num_partitions = n;
  report.compare.num_partitions = n;
  report.compare.replica_count = pe.replica_count;
  report.compare.seed = options.eval.seed;
  FlattenShapes(global.entry()->root()->shape(), &leaf_shapes);
  ASSIGN_OR_RETURN(Sharding root_sharding, ShardingOf(pentry->root(), global.entry()->root()->shape()));
  leaves = LeafShardings(root_sharding, static_cast<int64_t>(leaf_shapes.size()));
  for (size_t k = 0; k < leaves.size(); ++k) {
    std::vector<int64_t> named = leaves[k].IsTiled() ? leaves[k].devices() : std::vector<int64_t>{};
    if (leaves[k].IsMaximal()) named.push_back(leaves[k].maximal_device());
    for (int64_t d : named) {
      if (d < 0 || d >= n) {
        return absl::InvalidArgumentError(absl::StrCat("output ", k, "'s sharding ", leaves[k].ToString(),
                                                       " names device ", d, ", outside partitions 0..", n - 1));
      }
    }
  }
  // Partial (unreduced) outputs: summed over their addend groups first.
  given_leaves = leaves;
  SumAddendOutputs(&pr, &leaves, n, pe.replica_count);
  if (mr) {
    std::vector<Sharding> again = given_leaves;
    SumAddendOutputs(&*mr, &again, n, pe.replica_count);
  }
  if (gr->outputs[0].size() != leaf_shapes.size() || leaves.size() != leaf_shapes.size()) {
    return absl::InvalidArgumentError("output counts differ between the modules");
  }
  return absl::OkStatus();
}

// 5. The comparison options (co: the norm-wise floor from the largest reduction group) and
// path precisions: the narrower of the global program's and the partitioned module's (whose
// paths hold the partial-sum reductions).
void GlobalPartitionedCheck::MergePathPrecisions() {
  co = options;
  if (!co.norm_ulps) {
    co.norm_ulps = std::max<double>(kDefaultNormUlps, 2.0 * static_cast<double>(LargestReductionGroup(partitioned)));
  }
  if (co.path_aware) {
    paths = OutputPathPrecisions(partitioned, n);
    const std::vector<PathPrecision> gpaths = OutputPathPrecisions(global, 1);
    for (size_t k = 0; k < paths.size() && k < gpaths.size(); ++k) {
      const PathPrecision& g = gpaths[k];
      if (g.type == PrimitiveType::kInvalid) continue;
      if (paths[k].type == PrimitiveType::kInvalid ||
          MantissaBits(g.type) < MantissaBits(paths[k].type)) {
        paths[k] = g;
      } else if (MantissaBits(g.type) == MantissaBits(paths[k].type)) {
        // The global program's sums are the long ones the partitioned module splits.
        paths[k].sum_terms = std::max(paths[k].sum_terms, g.sum_terms);
      }
    }
  }
}

// 5. The global program's sum magnitudes (sr: sum |x| of each sum reduce's terms, exact sums),
// for the reassociated-sum allowance of outputs with such a sum on their path; absent when no
// path has one or the run fails.
void GlobalPartitionedCheck::RunSumMagnitudes() {
  if (std::any_of(paths.begin(), paths.end(), [](const PathPrecision& p) { return p.sum_terms > 1; })) {
    if (std::unique_ptr<HloModule> sums = SumMagnitudeModule(global)) {
      EvalOptions se = ge;
      se.exact_sums = true;
      absl::StatusOr<EvalResult> r = RunReference(*sums, partitioned, options.eval, se, gin);
      if (r.ok()) sr = *std::move(r);
    }
  }
}

// 4./5. Root leaf k compared and its comparison appended to the report: per manual group, per
// device (manual), or reassembled (CompareReassembled). Errors: Unimplemented for a leaf that
// cannot be reassembled, InvalidArgument for a device whose output is not its tile's shape.
absl::Status GlobalPartitionedCheck::CompareOutput(size_t k) {
  const Sharding& s = leaves[k];
  const Shape& gs = leaf_shapes[k];
  const bool is_random = k < random.size() && random[k].rng != nullptr;
  // With partially manual parameters, every output is per manual group: one without the manual
  // subgroup in its sharding is that sharding inside each group (as the partitioner reads it).
  if (num_groups > 1 && !s.IsManual() && !s.IsMaximal()) {
    const std::function<int64_t(int64_t)> group_of = [this](int64_t d) { return GroupOf(d); };
    report.compare.outputs.push_back(CompareManualGroups(grs, pr, k, s, gs, n, pe.replica_count,
                                                         group_of, co, exact_copies,
                                                         &report.copy_mismatches));
    report.compare.outputs.back().output = static_cast<int64_t>(k);
    report.compare.pass &= report.compare.outputs.back().pass;
    return absl::OkStatus();
  }
  if (s.IsManual() && gr->outputs.size() >= static_cast<size_t>(n)) {
    // A manual output is per device: each device's against the global view's on that device
    // (the view runs the program on every device with the same inputs, global_view.h).
    report.compare.outputs.push_back(CompareManualOutput(*gr, pr, k, devices, n, co));
    if (is_random) {
      OutputComparison& c = report.compare.outputs.back();
      c = CompareRandomOutput(random[k], *gr->outputs[0][k], *pr.outputs[0][k], gin.per_device[0]);
      c.device = 0;
    }
    report.compare.outputs.back().output = static_cast<int64_t>(k);
    report.compare.pass &= report.compare.outputs.back().pass;
    return absl::OkStatus();
  }
  // A partially manual output: every manual group received the same tiles, so each group's
  // tiles reassemble the reference (and the groups' copies must agree) unless the program
  // reads the device id, which makes the groups' programs differ.
  if (s.IsManual() || (s.HasManualSubgroup() && ReadsDeviceId(global))) {
    return absl::UnimplementedError(absl::StrCat("output ", k, " is ", s.ToString(),
                                                 ": cannot be reassembled"));
  }
  const std::vector<std::vector<int64_t>> holders = TileHolders(s, gs.rank(), n, pe.replica_count);
  for (const std::vector<int64_t>& hs : holders) {
    const Value& first = *pr.outputs[static_cast<size_t>(hs[0])][k];
    if (first.shape.dims != spmd::LocalShape(gs, s).dims) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output ", k, " of device ", hs[0], " is ", first.shape.ToString(false),
          ", expected ", spmd::LocalShape(gs, s).ToString(false)));
    }
  }
  CompareReassembled(k, holders);
  return absl::OkStatus();
}

// 4./5. Root leaf k reassembled from its tiles (`holders`: TileHolders, each of the right shape),
// its copies checked (CheckTileCopies), and compared with the reference: on range (random), on
// its path with the magnitude and sum-magnitude runs, or plainly.
void GlobalPartitionedCheck::CompareReassembled(size_t k,
                                                const std::vector<std::vector<int64_t>>& holders) {
  const Sharding& s = leaves[k];
  const Shape& gs = leaf_shapes[k];
  const bool is_random = k < random.size() && random[k].rng != nullptr;
  const std::vector<ValuePtr>& ref_out = gr->outputs[0];
  const Value assembled = Reassemble(pr, k, s, gs, n, holders);
  // The magnitude run's tiles, where they have the output's shape.
  bool with_magnitude = mr.has_value() && IsFloatingPoint(gs.element_type);
  for (const std::vector<int64_t>& hs : holders) {
    with_magnitude = with_magnitude && mr->outputs[static_cast<size_t>(hs[0])][k]->shape.Compatible(
                                           pr.outputs[static_cast<size_t>(hs[0])][k]->shape);
  }
  const Value magnitude = with_magnitude ? Reassemble(*mr, k, s, gs, n, holders) : Value::Zeros(gs);
  if (with_magnitude) magnitudes[k] = magnitude;
  CheckTileCopies(pr, k, s, gs, n, holders, k < paths.size() ? &paths[k] : nullptr, co,
                  exact_copies, &report);
  OutputComparison c =
      is_random ? CompareRandomOutput(random[k], *ref_out[k], assembled, gin.per_device[0])
      : k < paths.size()
          ? CompareOutputValuesOnPath(*ref_out[k], assembled, co, paths[k],
                                      with_magnitude ? &magnitude : nullptr,
                                      sr.has_value() ? sr->outputs[0][k].get() : nullptr)
          : CompareOutputValues(*ref_out[k], assembled, co);
  c.output = static_cast<int64_t>(k);
  c.device = -1;
  report.compare.pass &= c.pass;
  report.compare.outputs.push_back(std::move(c));
}

// 7. Outputs that passed only thanks to the reassociated-sum allowance, checked again with
// exact sums on both sides: the same sums in any order then agree to f32, so a term dropped,
// added twice or taken from the wrong place shows. Errors: either exact-sum run's.
absl::Status GlobalPartitionedCheck::RecheckExactSums() {
  std::vector<size_t> recheck;
  for (size_t k = 0; k < report.compare.outputs.size(); ++k) {
    const OutputComparison& c = report.compare.outputs[k];
    if (c.pass && c.by_sum_allowance > 0) recheck.push_back(k);
  }
  if (recheck.empty()) return absl::OkStatus();
  EvalOptions gx = ge, px = pe;
  gx.exact_sums = px.exact_sums = true;
  ASSIGN_OR_RETURN(EvalResult gxr, RunReference(global, partitioned, options.eval, gx, gin));
  absl::StatusOr<EvalResult> pxr = RunModule(partitioned, px, &pin);
  if (!pxr.ok()) {
    return absl::Status(pxr.status().code(),
                        absl::StrCat("partitioned module (exact sums): ", pxr.status().message()));
  }
  std::vector<Sharding> again = given_leaves;
  SumAddendOutputs(&*pxr, &again, n, pe.replica_count);
  for (size_t k : recheck) {
    OutputComparison& c = report.compare.outputs[k];
    const std::vector<std::vector<int64_t>> holders = TileHolders(leaves[k], leaf_shapes[k].rank(), n, pe.replica_count);
    const Value exact = Reassemble(*pxr, k, leaves[k], leaf_shapes[k], n, holders);
    PathPrecision without_sums = paths[k];
    without_sums.sum_terms = 0;
    const OutputComparison x = CompareOutputValuesOnPath(
        *gxr.outputs[0][k], exact, co, without_sums, magnitudes[k] ? &*magnitudes[k] : nullptr);
    c.exact_sums = absl::StrFormat("exact-sum run: max_abs_err=%.4g mismatches=%d/%d (%g ulps at max |A| %.4g = %.4g) %s",
                                   x.max_abs_error, x.mismatches, x.elements, x.norm_ulps,
                                   x.max_abs_value, x.norm_atol, x.pass ? "PASS" : "FAIL");
    if (!x.pass) {
      c.pass = false;
      c.mismatches += x.mismatches;
      report.compare.pass = false;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GlobalCompareReport> CompareGlobalWithPartitioned(const HloModule& global,
                                                                 const HloModule& partitioned,
                                                                 const CompareOptions& options,
                                                                 bool exact_copies) {
  std::string why;
  if (!IsGlobalPartitionedPair(global, partitioned, &why) &&
      why != "every parameter and output has the same shape in both") {
    return absl::InvalidArgumentError(
        absl::StrCat("the modules are not a global/partitioned pair: ", why));
  }
  GlobalPartitionedCheck check(global, partitioned, options, exact_copies);
  // 1./2. Global inputs and the reference on one device.
  RETURN_IF_ERROR(check.MakeGlobalInputs());
  RETURN_IF_ERROR(check.RunReferences());
  // 3. Tiles with poisoned padding.
  RETURN_IF_ERROR(check.TileInputs());
  RETURN_IF_ERROR(check.RunPartitioned());
  // 4. Reassembly.
  RETURN_IF_ERROR(check.ResolveOutputShardings());
  check.MergePathPrecisions();
  check.RunSumMagnitudes();
  // Outputs that depend on an rng: compared on shape, range and copies (random_outputs.h).
  check.random = RandomOutputs(global);
  // Each output's magnitude run, reassembled (kept for the exact-sum recheck).
  check.magnitudes.resize(check.leaf_shapes.size());
  for (size_t k = 0; k < check.leaf_shapes.size(); ++k) RETURN_IF_ERROR(check.CompareOutput(k));
  int64_t next_output = static_cast<int64_t>(check.leaf_shapes.size());
  CompareOutfeeds(global, *check.gr, check.pr, check.n, check.pe.replica_count, check.co,
                  &next_output, &check.report);
  RETURN_IF_ERROR(check.RecheckExactSums());
  check.report.pass &= check.report.compare.pass;
  return std::move(check.report);
}

std::string GlobalCompareReport::ToString() const {
  std::string s = absl::StrFormat(
      "compare: global module on 1 device vs partitioned module on %d partition(s)%s, seed %d\n",
      num_partitions,
      compare.replica_count > 1 ? absl::StrCat(" x ", compare.replica_count, " replicas") : "",
      compare.seed);
  for (const std::string& m : copy_mismatches) absl::StrAppend(&s, "  ", m, "\n");
  for (const OutputComparison& c : compare.outputs) {
    absl::StrAppendFormat(&s,
                          "  output %d %s (%s): max_abs_err=%.4g max_rel_err=%.4g "
                          "mismatches=%d/%d nan_diffs=%d inf_diffs=%d (rtol=%g atol=%g%s) %s\n",
                          c.output, c.shape,
                          c.device < 0 ? std::string("reassembled") : absl::StrCat("device ", c.device),
                          c.max_abs_error, c.max_rel_error, c.mismatches,
                          c.elements, c.nan_diffs, c.inf_diffs, c.rtol, c.atol,
                          c.norm_ulps > 0
                              ? absl::StrFormat(", or %g ulps at max |A| %.4g = %.4g",
                                                c.norm_ulps, c.max_abs_value, c.norm_atol)
                              : std::string(),
                          c.pass ? "PASS" : "FAIL");
    // An output judged as a reassociated sum says so, and what its exact-sum run found.
    if (c.sum_terms == 0 && (absl::StartsWith(c.path, "random:") || absl::StartsWith(c.path, "manual") ||
                             absl::StartsWith(c.path, "outfeed "))) {
      absl::StrAppend(&s, "    ", c.path, "\n");
    }
    if (c.sum_terms > 0) {
      absl::StrAppend(&s, "    ", c.path, "; ", c.by_sum_allowance, " element(s) within it",
                      c.exact_sums.empty() ? "" : "; ", c.exact_sums, "\n");
    }
  }
  s += pass ? "PASS\n" : "FAIL\n";
  return s;
}

std::string GlobalCompareReport::ToJson() const {
  nlohmann::json j = nlohmann::json::parse(compare.ToJson());
  j["pass"] = pass;
  j["mode"] = "global-vs-partitioned";
  j["copy_mismatches"] = copy_mismatches;
  return j.dump(2);
}

}  // namespace weave::eval
