// Internals shared by the spmd-partitioner's files (spmd_partitioner.cc, partition_ops.cc,
// partition_dot.cc). Not a public interface.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "hlo/instruction_index.h"
#include "passes/pass.h"
#include "spmd/einsum_planner.h"
#include "spmd/reshard.h"
#include "spmd/spmd_builder.h"

namespace weave::spmd {

// Partitions one computation into a fresh one.
class ComputationPartitioner {
 public:
  ComputationPartitioner(const HloComputation* old, HloComputation* fresh, SpmdContext* ctx,
                         std::vector<Remark>* remarks)
      : old_(old), fresh_(fresh), b_(fresh, ctx), ctx_(ctx), remarks_(remarks) {}

  // Partitions the computation; parameters take `params` (one per parameter; their global
  // shapes are the old parameters'), the root is resharded to `root` when given.
  absl::Status Run(const std::vector<Sharding>& params, const Sharding* root);

  SpmdBuilder& b() { return b_; }
  SpmdContext* ctx() { return ctx_; }
  int64_t num_partitions() const { return ctx_->num_partitions; }
  // The sharding the old instruction must end up in (its `sharding=`; replicated if none).
  const Sharding& Target(const HloInstruction* old) const;
  // The partitioned value of an already partitioned old instruction.
  const PValue& Value(const HloInstruction* old) const;
  // Operand `i` of `h` resharded to `s` (cached per (operand, s)).
  absl::StatusOr<HloInstruction*> Operand(const HloInstruction& h, int64_t i, const Sharding& s);
  // Any old instruction's value resharded to `s` (cached).
  absl::StatusOr<HloInstruction*> ValueIn(const HloInstruction* old, const Sharding& s);
  // Reshard of an intermediate value (not cached).
  absl::StatusOr<HloInstruction*> Reshard(const PValue& v, const Sharding& s,
                                          const HloInstruction& for_instr);
  // A remark about `h` (missed = false means applied).
  void Remark(const HloInstruction& h, bool applied, std::string message);
  // An analysis remark about `h` (a finding, neither a rewrite nor a refusal).
  void Analysis(const HloInstruction& h, std::string message);
  // Reshard of v to s with its remarks located at `at`: the remat remark when the full fallback
  // was used, and NoteReshard's.
  absl::StatusOr<HloInstruction*> EmitReshard(const PValue& v, const Sharding& s,
                                              const HloInstruction& at);
  // The analysis remark of a reshard of `h`'s value (or of a value `h` reads): its kinds and the
  // bytes one device receives (reshard.h ReshardSummary), about (Remark::about) the collectives
  // among `created`, the instructions the reshard emitted; none when nothing moved.
  void NoteReshard(const HloInstruction& h, const Sharding& from, const Sharding& to,
                   const ReshardSummary& summary, const std::vector<HloInstruction*>& created);
  // Computes `h` replicated: every operand replicated, the op cloned with global shapes; the
  // value is replicated. With a non-empty `why`, remarks an involuntary full
  // rematerialization when any operand or the result is sharded.
  absl::StatusOr<PValue> Replicated(const HloInstruction& h, const std::string& why);
  // Clones `h` with new operands and shape into the fresh computation (attributes, metadata and
  // called computations kept, sharding dropped).
  HloInstruction* Clone(const HloInstruction& h, Shape shape,
                        std::vector<HloInstruction*> operands);
  // Partitions a called computation (loop body/condition, branch) into a new one.
  absl::StatusOr<HloComputation*> PartitionCallee(const HloComputation* callee,
                                                  const std::vector<Sharding>& params,
                                                  const Sharding* root);
  int64_t remat_count() const { return remat_count_; }

 private:
  // The local value of `h` (any sharding; Run reshards it to the target): partial operands
  // summed first, manual regions cloned, then the rule of h's opcode.
  absl::StatusOr<PValue> Partition(const HloInstruction& h);
  // Unless `h` passes partial values through (elementwise, copy, tuple, get-tuple-element): each
  // operand holding addends resharded to its sum in place, and h's target summed too. Errors:
  // the reshards'.
  absl::Status SumPartialOperands(const HloInstruction& h);
  const HloComputation* old_;
  HloComputation* fresh_;
  SpmdBuilder b_;
  SpmdContext* ctx_;
  std::vector<weave::Remark>* remarks_;
  // Per instruction of old_, by its slot (its position in old_'s post order): the target
  // sharding, and the partitioned value (hlo null until partitioned). Dense arrays, not hash
  // maps: each entry is written once and read by the instruction's users, and arrays sized to
  // the computation touch only their own memory.
  InstructionIndex slots_;
  std::vector<Sharding> targets_;
  std::vector<PValue> values_;
  std::map<std::pair<const HloInstruction*, std::string>, HloInstruction*> cache_;
  int64_t remat_count_ = 0;
};

// Per-op handlers: return the value of `h` in any sharding (the driver reshards it to the
// target). partition_ops.cc:
absl::StatusOr<PValue> PartitionElementwise(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionBroadcast(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionTranspose(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionReshape(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionReduce(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionConstant(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionIota(ComputationPartitioner& cp, const HloInstruction& h);
// partition_rng.cc: rng drawn per tile, its copies made to agree (XLA's HandleRng).
absl::StatusOr<PValue> PartitionRng(ComputationPartitioner& cp, const HloInstruction& h);
// slice, pad, concatenate, reverse, sort, reduce-window, cholesky, triangular-solve, fft: local
// on untiled affected dims (a cholesky / triangular-solve: its two matrix dims; an fft: its
// transformed dims).
absl::StatusOr<PValue> PartitionAlongUntiledDims(ComputationPartitioner& cp,
                                                 const HloInstruction& h);
// partition_halo.cc: slice / pad / reduce-window with the result tiled along an `affected` dim,
// by halo exchange; reverse by a permute to the mirrored tile order (and a halo shift when uneven)
// (Unimplemented where it does not apply; the caller then gathers those dims). `result`, when
// given, is the sharding to compute in instead of h's target (the caller's reshard follows).
absl::StatusOr<PValue> PartitionByHalo(ComputationPartitioner& cp, const HloInstruction& h,
                                       const std::vector<int64_t>& affected,
                                       const Sharding* result = nullptr);
absl::StatusOr<PValue> PartitionDynamicSlice(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionDynamicUpdateSlice(ComputationPartitioner& cp,
                                                   const HloInstruction& h);
// partition_dynamic_update_slice.cc: a dynamic-update-slice along tiled dims without gathering
// them: in place on the owning tile (the update within one tile), or the update moved by halo
// exchange (constant starts, --xla_enable_enzyme_comms_opt). Unimplemented where neither applies,
// with kNoTiledSlicedDim as its message when no sliced dim is tiled, else the reason the sliced
// dims are gathered (the caller remarks it).
inline constexpr char kNoTiledSlicedDim[] = "no tiled sliced dim";
absl::StatusOr<PValue> PartitionDynamicUpdateSliceInTiles(ComputationPartitioner& cp,
                                                          const HloInstruction& h);
// partition_scan.cc: scan along its non-scan dims, the body partitioned for the slices
// (Unimplemented where it does not apply).
absl::StatusOr<PValue> PartitionScan(ComputationPartitioner& cp, const HloInstruction& h);
// partition_ops.cc: `s` with the tiling of `dims` moved onto one dim of `shape` outside `avoid`
// (nullopt when there is none; see its definition).
std::optional<Sharding> MoveTilingOff(const Sharding& s, const std::vector<int64_t>& dims,
                                      const std::vector<int64_t>& avoid, const Shape& shape);
// partition_topk.cc: the TopK custom call (XLA's HandleCustomCallTopK); Unimplemented where it
// does not apply (the caller computes it replicated).
absl::StatusOr<PValue> PartitionTopK(ComputationPartitioner& cp, const HloInstruction& h);
// partition_block_scaled.cc: XLA's block-scaling calls (quantize, dequantize, block-scaled dot)
// with each scale sharded like its data; Unimplemented where a tile would split a block (the
// caller computes the call replicated).
absl::StatusOr<PValue> PartitionBlockScaled(ComputationPartitioner& cp, const HloInstruction& h);
// partition_ragged_dot.cc: ragged-dot through the dot's decision procedure, its ragged and group
// dims whole (Unimplemented where it does not apply).
absl::StatusOr<PValue> PartitionRaggedDot(ComputationPartitioner& cp, const HloInstruction& h);
// partition_dot.cc:
absl::StatusOr<PValue> PartitionDot(ComputationPartitioner& cp, const HloInstruction& h);
// The contracting dims of einsum space `sp` that `best` (the chosen iteration-space sharding)
// tiles, in space order: the local dot's result is a partial sum over each.
std::vector<int64_t> TiledContractingDims(const EinsumSpace& sp, const Sharding& best);
// `local` (a partial-sum shard) summed by one all-reduce (add, in its element type) per dim of
// `c_dims`, last first, over the devices that differ only along it; `local` itself when empty.
HloInstruction* SumPartials(ComputationPartitioner& cp, HloInstruction* local, const Sharding& best,
                            const std::vector<int64_t>& c_dims);
// partition_convolution.cc: dims read as an einsum's (einsum_planner.h), sliding windows by halo.
absl::StatusOr<PValue> PartitionConvolution(ComputationPartitioner& cp, const HloInstruction& h);
// partition_gather_scatter.cc:
absl::StatusOr<PValue> PartitionGather(ComputationPartitioner& cp, const HloInstruction& h);
absl::StatusOr<PValue> PartitionScatter(ComputationPartitioner& cp, const HloInstruction& h);

}  // namespace weave::spmd
