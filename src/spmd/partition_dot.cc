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
// remark names the step taken. The procedure itself is einsum_planner.cc (the convolution handler
// runs it too); this file emits the partitioned dot it decides.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spmd/einsum_planner.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// XLA's windowed einsum decision at this dot (spec §4 "Windowed einsum", handler step (1c)):
// an operand all-gathered into the dot (config A/B) or partial sums reduce-scattered to a sharded
// output (config C/D) is windowed by XLA's partitioner when the windowed value's global bytes
// reach xla_gpu_threshold_for_windowed_einsum_mib (GPU default 100000 MiB: off). Weave emits
// the plain form either way (the decomposer and the cost gate decide); the choice XLA would
// make is stamped as _weave_xla_window="ag|rs|none" and said in a remark.
void StampXlaWindow(ComputationPartitioner& cp, const HloInstruction& h, HloInstruction* local,
                    const Sharding& lhs_sharding, const Sharding& lhs_target, const Sharding& rhs_sharding,
                    const Sharding& rhs_target, const Sharding& output_sharding, bool partial_sums) {
  const int64_t n = cp.num_partitions();
  std::string form;
  double bytes = 0;
  for (int i = 0; i < 2; ++i) {
    const Sharding& from = i == 0 ? lhs_sharding : rhs_sharding;
    const Sharding& to = i == 0 ? lhs_target : rhs_target;
    if (PlanReshard(from, to, h.operand(i)->shape(), n).Gathers()) {
      form = absl::StrCat("all-gather of ", i == 0 ? "lhs" : "rhs", " '", h.operand(i)->name(),
                          "' into the dot");
      bytes = std::max(bytes, static_cast<double>(h.operand(i)->shape().ByteSize()));
    }
  }
  const bool rs_form = partial_sums && output_sharding.IsTiled();
  if (rs_form && form.empty()) {
    form = "partial sums reduced to a sharded output (reduce-scatter)";
    bytes = static_cast<double>(h.shape().ByteSize());
  }
  if (form.empty()) return;
  std::string divergence;
  if (rs_form) {
    for (int i = 0; i < 2; ++i) {
      const Sharding& from = i == 0 ? lhs_sharding : rhs_sharding;
      const Sharding& to = i == 0 ? lhs_target : rhs_target;
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

// is canonical).
std::string DotDecisionKey(const HloInstruction& h, const Sharding& lhs_sharding, const Sharding& rhs_sharding,
                           const Sharding& output_sharding, int64_t n) {
  const DotDims& dd = h.dot_dims();
  return absl::StrCat(n, "|", absl::StrJoin(dd.lhs_batch, ","), "|",
                      absl::StrJoin(dd.lhs_contracting, ","), "|", absl::StrJoin(dd.rhs_batch, ","),
                      "|", absl::StrJoin(dd.rhs_contracting, ","), "|",
                      h.operand(0)->shape().ToString(), "|", h.operand(1)->shape().ToString(), "|",
                      h.shape().ToString(), "|", lhs_sharding.ToString(), "|", rhs_sharding.ToString(), "|",
                      output_sharding.ToString());
}

}  // namespace

std::vector<int64_t> TiledContractingDims(const EinsumSpace& sp, const Sharding& best) {
  std::vector<int64_t> c_dims;
  if (!best.IsTiled()) return c_dims;
  for (int64_t d = sp.nb + sp.nl + sp.nr; d < sp.rank(); ++d) {
    if (best.tile(d) > 1) c_dims.push_back(d);
  }
  return c_dims;
}

HloInstruction* SumPartials(ComputationPartitioner& cp, HloInstruction* local, const Sharding& best,
                            const std::vector<int64_t>& c_dims) {
  for (auto it = c_dims.rbegin(); it != c_dims.rend(); ++it) {
    local = cp.b().AllReduce(local, DeviceGroups(best, {*it}),
                             cp.b().Reducer(HloOpcode::kAdd, local->shape().element_type));
  }
  return local;
}

absl::StatusOr<PValue> PartitionDot(ComputationPartitioner& cp, const HloInstruction& h) {
  const int64_t n = cp.num_partitions();
  const EinsumSpace sp = DotSpace(h);
  const Sharding& out = cp.Target(&h);
  const PValue& lv = cp.Value(h.operand(0));
  const PValue& rv = cp.Value(h.operand(1));
  const Sharding lhs_sharding = PhysicalSharding(lv.sharding), rhs_sharding = PhysicalSharding(rv.sharding), output_sharding = PhysicalSharding(out);
  std::shared_ptr<const EinsumDecision>& decided =
      cp.ctx()->dot_decisions[DotDecisionKey(h, lhs_sharding, rhs_sharding, output_sharding, n)];
  if (decided == nullptr) {
    decided = std::make_shared<const EinsumDecision>(
        PlanEinsum(sp, h.operand(0)->shape(), h.operand(1)->shape(), h.shape(), lhs_sharding, rhs_sharding, output_sharding, n));
  }
  const EinsumDecision& decision = *decided;
  const std::optional<Sharding>& best = decision.best;
  if (!best) return cp.Replicated(h, "dot: no consistent sharding of its iteration space");
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  const Sharding& lhs_target = decision.lhs_target;
  const Sharding& rhs_target = decision.rhs_target;
  const Sharding& output_target = decision.output_target;
  ASSIGN_OR_RETURN(HloInstruction* l, cp.Operand(h, 0, lhs_target));
  ASSIGN_OR_RETURN(HloInstruction* r, cp.Operand(h, 1, rhs_target));
  const std::vector<int64_t> c_dims = TiledContractingDims(sp, *best);
  HloInstruction* lhs = l;
  HloInstruction* rhs = r;
  if (!c_dims.empty()) {
    SpmdBuilder& b = cp.b();
    lhs = b.MaskPadding(lhs, lhs_target, lg, h.dot_dims().lhs_contracting,
                        b.ScalarConst(lg.element_type, 0));
    rhs = b.MaskPadding(rhs, rhs_target, rg, h.dot_dims().rhs_contracting,
                        b.ScalarConst(rg.element_type, 0));
  }
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), output_target), {lhs, rhs});
  StampXlaWindow(cp, h, local, lhs_sharding, lhs_target, rhs_sharding, rhs_target, output_sharding, !c_dims.empty());
  local = SumPartials(cp, local, *best, c_dims);
  cp.Remark(h, true,
            absl::StrCat("dot by XLA's handler order: ", absl::StrJoin(decision.steps, "; then "),
                         "; iteration space ", best->ToString(), ": lhs ", lhs_target.ToString(),
                         ", rhs ", rhs_target.ToString(),
                         c_dims.empty() ? std::string()
                                        : absl::StrCat(", ", c_dims.size(),
                                                       " all-reduce(s) of the partial sums")));
  return PValue{local, output_target, h.shape()};
}

}  // namespace weave::spmd