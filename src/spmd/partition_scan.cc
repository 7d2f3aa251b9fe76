// scan partitioned along its non-scan dims (XLA's HandleScan in spmd_partitioner.cc): inputs and
// outputs tiled alike, the scan dim whole (its tiling moved to another dim, else replicated),
// the carries tiled like an input slice (the input sharding without the scan dim), and the body
// partitioned for those slices by the partitioner itself (PartitionCallee), so any body the
// partitioner takes works, not only elementwise ones as in XLA.
//
//   inputs  [.., L (scan dim, whole), ..] tiled S      carries: S without the scan dim
//   body    (input slices.., carries..) -> (output slices.., carries..), all S less the scan dim
//
// Unimplemented (the caller computes it replicated) unless the result is a tuple of as many
// outputs as inputs, each output shaped like its input, and carries one rank below.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {

absl::StatusOr<PValue> PartitionScan(ComputationPartitioner& cp, const HloInstruction& h) {
  if (h.dimensions.size() != 1 || h.called_computations().size() != 1 || !h.shape().IsTuple()) {
    return absl::UnimplementedError("not a scan of one dim with a tuple result");
  }
  int64_t carries = 0;
  if (const std::string* v = h.GetRawAttribute("num_carries")) {
    if (!absl::SimpleAtoi(*v, &carries)) return absl::UnimplementedError("unreadable num_carries");
  }
  const int64_t n_in = h.operand_count() - carries;
  const int64_t n_out = static_cast<int64_t>(h.shape().tuple_shapes.size()) - carries;
  if (carries < 0 || n_in < 1 || n_in != n_out) return absl::UnimplementedError("inputs and outputs do not pair up");
  const Shape& in0 = h.operand(0)->shape();
  const int64_t d = h.dimensions[0];
  for (int64_t i = 0; i < n_in; ++i) {
    if (h.operand(i)->shape().dims != in0.dims || h.shape().tuple_shapes[static_cast<size_t>(i)].dims != in0.dims) {
      return absl::UnimplementedError("inputs or outputs of different shapes");
    }
  }
  for (int64_t i = 0; i < carries; ++i) {
    const Shape& c = h.operand(n_in + i)->shape();
    if (!c.IsArray() || c.rank() != in0.rank() - 1) return absl::UnimplementedError("a carry not one rank below the inputs");
  }
  const Sharding out0 = cp.Target(&h).IsTuple() ? cp.Target(&h).TupleElement(h.shape(), 0) : cp.Target(&h);
  if (!out0.IsTiled() || out0.rank() != in0.rank()) return absl::UnimplementedError("its outputs are not tiled");
  Sharding in_s = out0;
  if (in_s.tile(d) > 1) {
    std::optional<Sharding> moved = MoveTilingOff(in_s, {d}, {d}, in0);
    if (!moved) moved = ReplicateDims(in_s, {d});
    if (!moved) return absl::UnimplementedError("no sharding with the scan dim whole");
    in_s = *moved;
  }
  if (!in_s.IsTiled()) return absl::UnimplementedError("nothing tiled once the scan dim is whole");
  std::optional<Sharding> slice_s = RemoveDims(in_s, {d});
  if (!slice_s) return absl::UnimplementedError("no slice sharding");
  std::vector<Sharding> params, roots;
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const bool input = i < n_in;
    params.push_back(*slice_s);
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, input ? in_s : *slice_s));
    ops.push_back(o);
  }
  const HloComputation* body = h.called_computations()[0];
  for (int64_t i = 0; i < n_out + carries; ++i) roots.push_back(*slice_s);
  const Sharding root = Sharding::Tuple(roots);
  ASSIGN_OR_RETURN(HloComputation* nb, cp.PartitionCallee(body, params, &root));
  std::vector<Sharding> results;
  for (int64_t i = 0; i < n_out; ++i) results.push_back(in_s);
  for (int64_t i = 0; i < carries; ++i) results.push_back(*slice_s);
  const Sharding rs = Sharding::Tuple(results);
  HloInstruction* s = cp.Clone(h, LocalShape(h.shape(), rs), ops);
  *s->mutable_called_computations() = {nb};
  cp.Remark(h, true,
            absl::StrCat("scan along dim ", d, " with its inputs ", in_s.ToString(), " and carries ", slice_s->ToString(),
                         ": the body partitioned for the slices, the scan dim whole"));
  return PValue{s, rs, h.shape()};
}

}  // namespace weave::spmd
