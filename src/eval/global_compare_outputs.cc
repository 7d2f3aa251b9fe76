// The global-vs-partitioned check's copies of a reassembled output's tiles, and its outputs that
// are not one reassembled array (see global_compare_internal.h): manual outputs, outputs per
// manual group, outfeeds.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "eval/global_compare.h"
#include "eval/global_compare_internal.h"
#include "eval/numerics.h"
#include "eval/output_precision.h"

namespace weave::eval::global_compare_internal {

using spmd::Sharding;

// The manual index of every partition under the partitioned module's partially manual parameter
// shardings (a manual subgroup; XLA's subgroup-manual shardings), or empty when no parameter has
// one. Unimplemented when two parameters group the devices differently.
absl::StatusOr<std::vector<int64_t>> ManualGroupsOfParameters(const HloModule& partitioned,
                                                              const HloModule& global, int64_t n) {
  std::vector<int64_t> groups;
  for (int64_t i = 0; i < partitioned.entry()->num_parameters(); ++i) {
    const HloInstruction* p = partitioned.entry()->parameter(i);
    if (!p->sharding || global.entry()->parameter(i)->shape().IsTuple()) continue;
    absl::StatusOr<Sharding> s = ShardingOf(p, global.entry()->parameter(i)->shape());
    if (!s.ok() || !s->IsTiled() || !s->HasManualSubgroup()) continue;
    const int64_t mdim = s->SubgroupArrayDim(spmd::SubgroupType::kManual);
    std::vector<int64_t> mine(static_cast<size_t>(n), 0);
    for (int64_t d = 0; d < n; ++d) {
      std::optional<std::vector<int64_t>> idx = s->ArrayIndex(d);
      if (!idx) return absl::UnimplementedError(absl::StrCat("parameter ", i, "'s sharding ", s->ToString(), " leaves out device ", d));
      mine[static_cast<size_t>(d)] = (*idx)[static_cast<size_t>(mdim)];
    }
    if (!groups.empty() && groups != mine) {
      return absl::UnimplementedError("the partially manual parameters group the devices differently");
    }
    groups = std::move(mine);
  }
  return groups;
}

// Output leaf k with a manual subgroup, when the manual groups ran on their own inputs: each
// group's tiles reassembled and compared with the reference of that group (grs[m]), every copy
// of a tile inside a group agreeing with its first (bit for bit, or within the type's default
// tolerance when !exact); the worst group's comparison, its `device` the group's first holder.
OutputComparison CompareManualGroups(const std::vector<EvalResult>& grs, const EvalResult& pr, size_t k,
                                     const Sharding& s, const Shape& gs, int64_t n, int64_t replicas,
                                     const std::function<int64_t(int64_t)>& group_of,
                                     const CompareOptions& co, bool exact,
                                     std::vector<std::string>* copy_mismatches) {
  OutputComparison worst;
  const std::vector<std::vector<int64_t>> all = TileHolders(s, gs.rank(), n, replicas);
  const Shape local = spmd::LocalShape(gs, s);
  for (int64_t m = 0; m < static_cast<int64_t>(grs.size()); ++m) {
    std::vector<std::vector<int64_t>> holders;
    for (const std::vector<int64_t>& hs : all) {
      std::vector<int64_t> mine;
      for (int64_t d : hs) {
        if (group_of(d) == m) mine.push_back(d);
      }
      if (!mine.empty()) holders.push_back(std::move(mine));
    }
    OutputComparison c;
    c.shape = gs.ToString(false);
    bool shapes_ok = !holders.empty();
    for (const std::vector<int64_t>& hs : holders) {
      shapes_ok = shapes_ok && pr.outputs[static_cast<size_t>(hs[0])][k]->shape.dims == local.dims;
    }
    if (!shapes_ok) {
      c.pass = false;
      c.path = absl::StrCat("manual group ", m, ": the devices' outputs are not the tiles of ", gs.ToString(false),
                            " under ", s.ToString());
    } else {
      const std::pair<double, double> tol = DefaultTolerance(gs.element_type);
      for (const std::vector<int64_t>& hs : holders) {
        const Value& first = *pr.outputs[static_cast<size_t>(hs[0])][k];
        for (size_t h = 1; h < hs.size(); ++h) {
          const Value& other = *pr.outputs[static_cast<size_t>(hs[h])][k];
          int64_t bad = -1;
          ForEachTileElement(first.shape.dims, gs.dims, Offsets(s, hs[0] % n, gs), [&](int64_t lk, int64_t gi) {
            if (gi < 0 || bad >= 0 || SameBits(first, lk, other, lk)) return;
            const double x = first.GetDouble(lk), y = other.GetDouble(lk);
            if (exact || !IsFloatingPoint(gs.element_type) ||
                !(std::fabs(x - y) <= tol.second + tol.first * std::max(std::fabs(x), std::fabs(y)))) {
              bad = lk;
            }
          });
          if (bad >= 0) {
            c.pass = false;
            copy_mismatches->push_back(absl::StrFormat(
                "output %d, manual group %d: device %d differs from device %d at local element %d "
                "(%g vs %g): copies of a tile inside a manual group must agree",
                k, m, hs[h], hs[0], bad, other.GetDouble(bad), first.GetDouble(bad)));
          }
        }
      }
      const bool copies_ok = c.pass;
      c = CompareOutputValues(*grs[static_cast<size_t>(m)].outputs[0][k], Reassemble(pr, k, s, gs, n, holders), co);
      c.pass = c.pass && copies_ok;
      c.path = absl::StrCat("manual groups: each of the ", grs.size(),
                            " groups' tiles against the reference run on that group's inputs");
    }
    c.device = holders.empty() ? -1 : holders[0][0];
    if (m == 0 || (worst.pass && !c.pass) || (worst.pass == c.pass && c.max_abs_error > worst.max_abs_error)) {
      worst = std::move(c);
    }
  }
  return worst;
}

// Output leaf k of a reassembled output: every other copy of each tile against its first
// holder's, on the valid region, bit for bit when `exact`, else within the tolerance of the type
// its path (or none) judges it at, per element or norm-wise (co.norm_ulps ulps of the tile's
// largest magnitude, as the comparison with the reference). A copy that differs fails *report,
// with a line in its copy_mismatches.
void CheckTileCopies(const EvalResult& pr, size_t k, const Sharding& s, const Shape& gs, int64_t n,
                     const std::vector<std::vector<int64_t>>& holders, const PathPrecision* path,
                     const CompareOptions& co, bool exact, GlobalCompareReport* report) {
  for (const std::vector<int64_t>& hs : holders) {
    const Value& first = *pr.outputs[static_cast<size_t>(hs[0])][k];
    const std::vector<int64_t> offsets = Offsets(s, hs[0] % n, gs);
    const std::vector<int64_t> t = *s.TileIndex(hs[0] % n, gs.rank());
    for (size_t h = 1; h < hs.size(); ++h) {
      const Value& other = *pr.outputs[static_cast<size_t>(hs[h])][k];
      int64_t bad = -1;
      PrimitiveType judged = first.shape.element_type;
      if (path != nullptr && path->type != PrimitiveType::kInvalid &&
          MantissaBits(path->type) < MantissaBits(judged)) {
        judged = path->type;
      }
      const std::pair<double, double> tol = DefaultTolerance(judged);
      const double rt = tol.first, at = tol.second;
      // Within tolerance: per element, or norm-wise (norm_ulps ulps of the tile's largest
      // magnitude, as the comparison with the reference).
      double norm_atol = 0;
      if (!exact && IsFloatingPoint(first.shape.element_type)) {
        double max_abs = 0;
        ForEachTileElement(first.shape.dims, gs.dims, offsets, [&](int64_t lk, int64_t gi) {
          const double x = first.GetDouble(lk);
          if (gi >= 0 && std::isfinite(x)) max_abs = std::max(max_abs, std::fabs(x));
        });
        norm_atol = co.norm_ulps.value_or(kDefaultNormUlps) * UlpOf(max_abs, judged);
      }
      auto close = [&](int64_t lk) {
        if (SameBits(first, lk, other, lk)) return true;
        if (exact || !IsFloatingPoint(first.shape.element_type)) return false;
        const double x = first.GetDouble(lk), y = other.GetDouble(lk);
        if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
        return std::fabs(x - y) <=
               std::max(at + rt * std::max(std::fabs(x), std::fabs(y)), norm_atol);
      };
      ForEachTileElement(first.shape.dims, gs.dims, offsets, [&](int64_t lk, int64_t gi) {
        if (gi >= 0 && bad < 0 && !close(lk)) bad = lk;
      });
      if (bad >= 0) {
        report->pass = false;
        report->copy_mismatches.push_back(absl::StrCat(
            absl::StrFormat("output %d tile (%s): device %d differs from device %d at local "
                            "element %d (%g vs %g): ",
                            k, absl::StrJoin(t, ","), hs[h], hs[0], bad, other.GetDouble(bad),
                            first.GetDouble(bad)),
            exact ? "copies that must be identical are not"
                         : "copies that must agree within tolerance do not",
            " (a replica-group or offset bug)"));
      }
    }
  }
}

// Whether `m` calls partition-id or replica-id.
bool ReadsDeviceId(const HloModule& m) {
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (h->opcode() == HloOpcode::kPartitionId || h->opcode() == HloOpcode::kReplicaId) return true;
    }
  }
  return false;
}

// Outfeeds: the k-th outfeed of the global program against the k-th outfeed of every device,
// reassembled by the global outfeed's sharding (XLA's outfeed sharding lays out the data sent:
// each device sends its tile; maximal: the device named). One comparison per data leaf, numbered
// after the root's leaves from *next; a device that sent a different number of outfeeds fails.
void CompareOutfeeds(const HloModule& global, const EvalResult& ref, const EvalResult& part,
                     int64_t n, int64_t replicas, const CompareOptions& co, int64_t* next,
                     GlobalCompareReport* report) {
  const std::vector<EvalResult::Outfeed> none;
  const std::vector<EvalResult::Outfeed>& want = ref.outfeeds.empty() ? none : ref.outfeeds[0];
  const int64_t devices = static_cast<int64_t>(part.outfeeds.size());
  for (int64_t d = 0; d < devices; ++d) {
    const size_t got = part.outfeeds[static_cast<size_t>(d)].size();
    if (got != want.size()) {
      report->pass = false;
      report->copy_mismatches.push_back(absl::StrCat("device ", d, " sent ", got, " outfeed(s), the global program ",
                                                     want.size()));
      return;
    }
  }
  absl::flat_hash_map<std::string, const HloInstruction*> by_name;
  for (const HloComputation* c : global.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (h->opcode() == HloOpcode::kOutfeed) by_name[h->name()] = h;
    }
  }
  for (size_t j = 0; j < want.size(); ++j) {
    const EvalResult::Outfeed& w = want[j];
    Sharding s = Sharding::Replicated();
    auto it = by_name.find(w.name);
    if (it != by_name.end() && it->second->sharding) {
      // A tuple sharding may name the token too, after the data's leaves: that entry goes.
      HloSharding hs = *it->second->sharding;
      if (hs.kind == HloSharding::Kind::kTuple &&
          static_cast<int64_t>(hs.tuple.size()) == Sharding::LeafCount(w.data->shape) + 1) {
        hs.tuple.pop_back();
      }
      absl::StatusOr<Sharding> parsed = Sharding::FromHlo(hs, w.data->shape);
      if (parsed.ok()) s = *std::move(parsed);
    }
    std::vector<ValuePtr> gleaves;
    FlattenLeaves(w.data, &gleaves);
    const std::vector<Sharding> ls = LeafShardings(s, static_cast<int64_t>(gleaves.size()));
    EvalResult sent;
    sent.outputs.resize(static_cast<size_t>(devices));
    for (int64_t d = 0; d < devices; ++d) {
      FlattenLeaves(part.outfeeds[static_cast<size_t>(d)][j].data, &sent.outputs[static_cast<size_t>(d)]);
    }
    for (size_t l = 0; l < gleaves.size(); ++l) {
      OutputComparison c;
      const Shape& gs = gleaves[l]->shape;
      const std::string what = absl::StrCat("outfeed '", w.name, "' #", j,
                                            gleaves.size() > 1 ? absl::StrCat(" leaf ", l) : std::string());
      const bool shapes_ok = l < ls.size() && !ls[l].IsManual() && !ls[l].HasManualSubgroup() &&
                             std::all_of(sent.outputs.begin(), sent.outputs.end(),
                                         [&](const std::vector<ValuePtr>& o) { return o.size() == gleaves.size(); });
      std::vector<std::vector<int64_t>> holders;
      bool tiles_ok = shapes_ok;
      if (shapes_ok) {
        holders = TileHolders(ls[l], gs.rank(), n, replicas);
        for (const std::vector<int64_t>& hs : holders) {
          tiles_ok = tiles_ok && sent.outputs[static_cast<size_t>(hs[0])][l]->shape.dims == spmd::LocalShape(gs, ls[l]).dims;
        }
      }
      if (l < ls.size() && ls[l].IsManual() && static_cast<int64_t>(ref.outfeeds.size()) >= n) {
        // A manual outfeed: each device sends its own data, compared with what the global view
        // sends on that device.
        OutputComparison worst;
        for (int64_t d = 0; d < devices; ++d) {
          std::vector<ValuePtr> mine;
          FlattenLeaves(ref.outfeeds[static_cast<size_t>(d % n)][j].data, &mine);
          OutputComparison cd = l < mine.size() && l < sent.outputs[static_cast<size_t>(d)].size()
                                    ? CompareOutputValues(*mine[l], *sent.outputs[static_cast<size_t>(d)][l], co)
                                    : OutputComparison{};
          if (l >= mine.size() || l >= sent.outputs[static_cast<size_t>(d)].size()) cd.pass = false;
          cd.device = d;
          if (d == 0 || (worst.pass && !cd.pass)) worst = std::move(cd);
        }
        c = std::move(worst);
        c.path = absl::StrCat(what, ": manual, every device's data against the global view's on that device");
        c.output = (*next)++;
        report->compare.pass &= c.pass;
        report->compare.outputs.push_back(std::move(c));
        continue;
      }
      if (!tiles_ok) {
        c.shape = gs.ToString(false);
        c.pass = false;
        c.path = absl::StrCat(what, ": the data sent does not have the tiles of ", gs.ToString(false), " under ",
                              l < ls.size() ? ls[l].ToString() : std::string("its sharding"));
      } else {
        c = CompareOutputValues(*gleaves[l], Reassemble(sent, l, ls[l], gs, n, holders), co);
        c.path = absl::StrCat(what, ": the devices' data reassembled by ", ls[l].ToString());
      }
      c.output = (*next)++;
      c.device = -1;
      report->compare.pass &= c.pass;
      report->compare.outputs.push_back(std::move(c));
    }
  }
}

// Output k of a manual root: every device's value against the global view's value on the same
// partition; the comparison reported is the worst device's (its `device` set).
OutputComparison CompareManualOutput(const EvalResult& view, const EvalResult& partitioned,
                                     size_t k, int64_t devices, int64_t n,
                                     const CompareOptions& co) {
  OutputComparison worst;
  for (int64_t d = 0; d < devices; ++d) {
    OutputComparison c = CompareOutputValues(*view.outputs[static_cast<size_t>(d % n)][k],
                                             *partitioned.outputs[static_cast<size_t>(d)][k], co);
    c.device = d;
    if (d == 0 || (worst.pass && !c.pass) ||
        (worst.pass == c.pass && c.max_abs_error > worst.max_abs_error)) {
      worst = std::move(c);
    }
  }
  worst.path = "manual: every device's output against the global view's on that device";
  return worst;
}

}  // namespace weave::eval::global_compare_internal
