// ragged-dot partitioned through the dot's decision procedure (einsum_planner.h), as XLA's
// HandleRaggedDot partitions it once Shardy has chosen its shardings (spmd_partitioner.cc):
// the iteration space is the dot's, less the dims whose tiling would change what a group
// means, which stay whole:
//   non-contracting mode (lhs_ragged_dims names a free lhs dim m; rhs_group_dims names g)
//       m and g whole; batch, the other free dims and the contracting dims may be tiled.
//   contracting mode (the ragged dim k is contracting; the output leads with G)
//       k and the output's G whole.
//   batch mode (the ragged dim is a batch dim: an ordinary batched dot whose batch elements
//       past the sum of the group sizes are 0)
//       that batch dim whole.
// The group sizes [batch.., (non-contracting mode: the other free lhs dims..), G] are tiled
// like the space dims their leading dims index, G whole. Tiled contracting dims hold partial
// sums: their padding is zeroed on both operands and the result all-reduced, as for a dot.
// Unimplemented (the caller computes it replicated) when the attributes cannot be read or no
// sharding of the space is consistent.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/raw_dims_attribute.h"
#include "spmd/einsum_planner.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

bool Has(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The ragged-dot's space (einsum_planner.h) and the group sizes' map onto it.
struct RaggedSpace {
  EinsumSpace sp;
  std::vector<int64_t> gs_map;
  std::string mode;
};

std::optional<RaggedSpace> MakeSpace(const HloInstruction& h) {
  const DotDims& dd = h.dot_dims();
  absl::StatusOr<std::vector<int64_t>> ragged = RawDimsAttribute(h, "lhs_ragged_dims");
  absl::StatusOr<std::vector<int64_t>> group = RawDimsAttribute(h, "rhs_group_dims");
  const int64_t lr = h.operand(0)->shape().rank(), rr = h.operand(1)->shape().rank();
  const int64_t gr = h.operand(2)->shape().rank();
  if (!ragged.ok() || !group.ok() || ragged->size() != 1 || (*ragged)[0] < 0 || (*ragged)[0] >= lr || gr < 1 ||
      dd.lhs_batch.size() != dd.rhs_batch.size() || dd.lhs_contracting.size() != dd.rhs_contracting.size()) {
    return std::nullopt;
  }
  const int64_t r = (*ragged)[0];
  const bool contracting = Has(dd.lhs_contracting, r), batch = Has(dd.lhs_batch, r);
  const bool grouped = !contracting && !batch;
  if (grouped != (group->size() == 1)) return std::nullopt;
  const int64_t g = grouped ? (*group)[0] : -1;
  RaggedSpace out;
  out.mode = grouped ? "non-contracting" : contracting ? "contracting" : "batch";
  EinsumSpace& s = out.sp;
  s.lhs_map.assign(static_cast<size_t>(lr), -1);
  s.rhs_map.assign(static_cast<size_t>(rr), -1);
  // Space dims in the dot's order; the ragged dims and the group dim get none.
  std::vector<int64_t> batch_space;  // per batch pair: its space dim, or -1
  for (size_t k = 0; k < dd.lhs_batch.size(); ++k) {
    const int64_t sd = dd.lhs_batch[k] == r ? -1 : s.nb++;
    batch_space.push_back(sd);
    s.lhs_map[static_cast<size_t>(dd.lhs_batch[k])] = sd;
    s.rhs_map[static_cast<size_t>(dd.rhs_batch[k])] = sd;
  }
  std::vector<int64_t> lfree, rfree, lfree_space;
  for (int64_t d = 0; d < lr; ++d) {
    if (!Has(dd.lhs_batch, d) && !Has(dd.lhs_contracting, d)) lfree.push_back(d);
  }
  for (int64_t d = 0; d < rr; ++d) {
    if (!Has(dd.rhs_batch, d) && !Has(dd.rhs_contracting, d) && d != g) rfree.push_back(d);
  }
  for (int64_t d : lfree) {
    const int64_t sd = d == r ? -1 : s.nb + s.nl++;
    lfree_space.push_back(sd);
    s.lhs_map[static_cast<size_t>(d)] = sd;
  }
  std::vector<int64_t> rfree_space;
  for (size_t k = 0; k < rfree.size(); ++k) rfree_space.push_back(s.nb + s.nl + s.nr++);
  for (size_t k = 0; k < rfree.size(); ++k) s.rhs_map[static_cast<size_t>(rfree[k])] = rfree_space[k];
  for (size_t k = 0; k < dd.lhs_contracting.size(); ++k) {
    const int64_t sd = dd.lhs_contracting[k] == r ? -1 : s.nb + s.nl + s.nr + s.nc++;
    s.lhs_map[static_cast<size_t>(dd.lhs_contracting[k])] = sd;
    s.rhs_map[static_cast<size_t>(dd.rhs_contracting[k])] = sd;
  }
  // Output: [G (contracting mode)], batch.., lhs free.., rhs free...
  if (contracting) s.out_map.push_back(-1);
  s.out_map.insert(s.out_map.end(), batch_space.begin(), batch_space.end());
  s.out_map.insert(s.out_map.end(), lfree_space.begin(), lfree_space.end());
  s.out_map.insert(s.out_map.end(), rfree_space.begin(), rfree_space.end());
  if (static_cast<int64_t>(s.out_map.size()) != h.shape().rank()) return std::nullopt;
  // Group sizes: batch dims, then (non-contracting) the free lhs dims other than r, then G.
  std::vector<int64_t> lead = batch_space;
  if (grouped) {
    for (size_t k = 0; k < lfree.size(); ++k) {
      if (lfree[k] != r) lead.push_back(lfree_space[k]);
    }
  }
  for (int64_t j = 0; j + 1 < gr; ++j) {
    out.gs_map.push_back(j < static_cast<int64_t>(lead.size()) ? lead[static_cast<size_t>(j)] : -1);
  }
  out.gs_map.push_back(-1);
  return out;
}

}  // namespace

absl::StatusOr<PValue> PartitionRaggedDot(ComputationPartitioner& cp, const HloInstruction& h) {
  if (h.operand_count() != 3) return absl::UnimplementedError("ragged-dot without three operands");
  std::optional<RaggedSpace> rs = MakeSpace(h);
  if (!rs) return absl::UnimplementedError("unreadable ragged-dot dimension numbers");
  const EinsumSpace& sp = rs->sp;
  const int64_t n = cp.num_partitions();
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  const Sharding ls = PhysicalSharding(cp.Value(h.operand(0)).sharding), rsh = PhysicalSharding(cp.Value(h.operand(1)).sharding);
  const Sharding os = PhysicalSharding(cp.Target(&h));
  const EinsumDecision decision = PlanEinsum(sp, lg, rg, h.shape(), ls, rsh, os, n);
  if (!decision.best) return absl::UnimplementedError("no consistent sharding of its iteration space");
  const Sharding& best = *decision.best;
  const Sharding gsreq = ProjectSpace(best, rs->gs_map, n);
  ASSIGN_OR_RETURN(HloInstruction* l, cp.Operand(h, 0, decision.lhs_target));
  ASSIGN_OR_RETURN(HloInstruction* r, cp.Operand(h, 1, decision.rhs_target));
  ASSIGN_OR_RETURN(HloInstruction* gs, cp.Operand(h, 2, gsreq));
  std::vector<int64_t> c_space;
  if (best.IsTiled()) {
    for (int64_t d = sp.nb + sp.nl + sp.nr; d < sp.rank(); ++d) {
      if (best.tile(d) > 1) c_space.push_back(d);
    }
  }
  SpmdBuilder& b = cp.b();
  HloInstruction* lhs = l;
  HloInstruction* rhs = r;
  if (!c_space.empty()) {
    lhs = b.MaskPadding(lhs, decision.lhs_target, lg, h.dot_dims().lhs_contracting, b.ScalarConst(lg.element_type, 0));
    rhs = b.MaskPadding(rhs, decision.rhs_target, rg, h.dot_dims().rhs_contracting, b.ScalarConst(rg.element_type, 0));
  }
  HloInstruction* local = cp.Clone(h, LocalShape(h.shape(), decision.output_target), {lhs, rhs, gs});
  for (auto it = c_space.rbegin(); it != c_space.rend(); ++it) {
    local = b.AllReduce(local, DeviceGroups(best, {*it}), b.SumReducer(h.shape().element_type));
  }
  cp.Remark(h, true,
            absl::StrCat("ragged-dot (", rs->mode, " mode) by the dot's handler order with its ragged and group "
                         "dims whole: ", absl::StrJoin(decision.steps, "; then "), "; iteration space ",
                         best.ToString(), ": lhs ", decision.lhs_target.ToString(), ", rhs ", decision.rhs_target.ToString(),
                         ", group sizes ", gsreq.ToString(),
                         c_space.empty() ? std::string()
                                         : absl::StrCat(", ", c_space.size(), " all-reduce(s) of the partial sums")));
  return PValue{local, decision.output_target, h.shape()};
}

}  // namespace weave::spmd
