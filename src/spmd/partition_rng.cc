// spmd-partitioner rule for `rng`, as XLA's SpmdPartitioningVisitor::HandleRng partitions it:
// the bounds are read replicated; then, by the result's sharding,
//   tiled                 every device draws its own tile at the local shape;
//   partially replicated  every device draws its local tile, and the copies of each tile are
//                         made to agree: the first device of each replication group keeps its
//                         draw, the others contribute zeros to an all-reduce over the group;
//   replicated            drawn on device 0 and broadcast (select + all-reduce), so that every
//                         device holds the same values;
//   maximal               drawn where it lives.
// Separate devices' generators draw separate values (eval/evaluator_random.cc models that), so a
// replicated copy that is not made to agree is a real bug, which the global-vs-partitioned
// check's copy comparison catches.
#include "absl/strings/str_cat.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {

absl::StatusOr<PValue> PartitionRng(ComputationPartitioner& cp, const HloInstruction& h) {
  const Sharding& target = cp.Target(&h);
  if (!h.shape().IsArray() || target.IsMaximal() || target.IsTuple() ||
      (target.IsTiled() && target.SubgroupSize(SubgroupType::kManual) > 1)) {
    return cp.Replicated(h, "");
  }
  std::vector<HloInstruction*> bounds;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, Sharding::Replicated()));
    bounds.push_back(o);
  }
  if (!target.IsTiled()) {
    // Replicated (or unset): one draw, on device 0, broadcast.
    HloInstruction* x = cp.Clone(h, h.shape(), bounds);
    ASSIGN_OR_RETURN(HloInstruction* r, cp.Reshard(PValue{x, Sharding::Maximal(0), h.shape()},
                                                    Sharding::Replicated(), h));
    return PValue{r, Sharding::Replicated(), h.shape()};
  }
  const Shape local = LocalShape(h.shape(), target);
  HloInstruction* x = cp.Clone(h, local, bounds);
  if (!target.HasPartialReplication()) return PValue{x, target, h.shape()};
  const std::vector<std::vector<int64_t>> groups =
      DeviceGroups(target, {target.SubgroupArrayDim(SubgroupType::kReplicated)});
  SpmdBuilder& b = cp.b();
  std::vector<int64_t> leader(static_cast<size_t>(b.num_partitions()), 0);
  for (const std::vector<int64_t>& g : groups) {
    if (!g.empty()) leader[static_cast<size_t>(g[0])] = 1;
  }
  HloInstruction* keeps = b.Add(HloOpcode::kCompare, Shape::Scalar(PrimitiveType::PRED),
                                {b.TableLookup(leader), b.ScalarConst(PrimitiveType::S32, 1)},
                                "draws");
  keeps->comparison_direction = ComparisonDirection::kEq;
  HloInstruction* masked = b.Select(b.Splat(keeps, local), x, b.Zeros(local));
  HloInstruction* agreed = b.AllReduce(masked, groups, b.Reducer(HloOpcode::kAdd, local.element_type));
  return PValue{agreed, target, h.shape()};
}

}  // namespace weave::spmd
