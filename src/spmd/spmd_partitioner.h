// "spmd-partitioner": rewrites a global module whose instructions all carry shardings (after
// sharding-propagation) into the per-device module every partition runs
// (../shared/specs/spmd-partitioner.md §3; XLA's SpmdPartitioner, base version).
//
// Post order per computation; while bodies and conditions are partitioned with the loop's
// sharding. Every value gets its local shape (dim d: ceil(S_d / t_d)); operands are resharded
// to what each op needs (reshard.h: cached per (value, target), so one all-gather serves every
// user that needs the same sharding). Rules (partition_ops.cc, partition_dot.cc):
//   parameter, constant, iota   local shape; constants replicated + dynamic-slice (uniform ones
//                               built locally); iota + broadcast(offset[pid]) on a tiled dim
//   elementwise, convert, copy  operands resharded to the result's sharding, local op
//   broadcast, transpose,       operand resharded to the result's sharding mapped back, local
//   reshape                     op (an unmappable reshape computes replicated: remark)
//   reduce                      mask uneven reduced dims with the init value, local reduce, one
//                               all-reduce per tiled reduced dim with the reduce's computation
//   slice, pad, concatenate,    local when the affected dims are untiled; otherwise those dims
//   reverse, sort,              are replicated first
//   reduce-window
//   dynamic-slice, DUS          sliced dims untiled, index operands replicated, index 0 on
//                               tiled dims
//   dot                         base cases: operands resharded to an iteration-space sharding
//                               chosen by estimated bytes moved (output's, operands' or a
//                               contracting split), partial sums all-reduced (add) per tiled
//                               contracting dim; uneven contracting dims zero-masked
//   tuple, get-tuple-element,   per element; loop init resharded to the loop's sharding, body
//   while, conditional          root too
//   custom-call                 SPMDFullToShardShape/SPMDShardToFullShape: copies; manual
//                               regions unchanged; others computed replicated (remark);
//                               CustomSPMDPartitioning and side-effecting calls on sharded
//                               values: declined (error naming each)
//   rng                         partition_rng.cc (XLA's HandleRng): tiled draws local; copies
//                               made to agree (replicated: device 0's broadcast; partially
//                               replicated: each group's first device's, all-reduced)
//   manual values               {manual} (and tuples manual in every leaf) cloned as they are;
//                               {manual} <-> {replicated} reads are identities; partially
//                               manual values (a manual subgroup) resharded inside their manual
//                               groups (reshard.cc); a user collective there that joins devices
//                               of different manual subgroups is refused, as XLA refuses it
// An op without a rule is computed replicated with a remark ("involuntary full
// rematerialization", XLA's term). Entry parameters and root keep their shardings; the header
// gets num_partitions=P and a local entry_computation_layout; allow_spmd_* attributes go.
// Errors (InvalidArgument / Unimplemented, naming the instruction): shardings on devices outside
// 0..P-1, manual values that would need resharding across manual groups, declined calls.
#pragma once

#include "passes/pass.h"

namespace weave::spmd {

// The calls the partitioner declines, all listed at once: Unimplemented naming each
// `CustomSPMDPartitioning` call (name, target, op_name) and suggesting a dump after XLA's
// `spmd-partitioning` pass; OK when there are none.
absl::Status CheckDeclinedCalls(const HloModule& module);

class SpmdPartitioner : public HloPass {
 public:
  // `xla_windowed_threshold_mib`: XLA's xla_gpu_threshold_for_windowed_einsum_mib, used only to
  // say in remarks (and the _weave_xla_window stamp) what XLA's partitioner would window; Weave
  // always emits plain collectives. Pass option `--xla_gpu_threshold_for_windowed_einsum_mib`.
  // `enzyme_comms_opt`: XLA's xla_enable_enzyme_comms_opt (default false, as in XLA): a
  // dynamic-update-slice at constant starts along tiled dims moves its update by halo exchange
  // (partition_dynamic_update_slice.cc). Pass option `--xla_enable_enzyme_comms_opt`.
  explicit SpmdPartitioner(double xla_windowed_threshold_mib = 100000, bool enzyme_comms_opt = false)
      : xla_windowed_threshold_mib_(xla_windowed_threshold_mib), enzyme_comms_opt_(enzyme_comms_opt) {}
  std::string_view name() const override { return "spmd-partitioner"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  double xla_windowed_threshold_mib_;
  bool enzyme_comms_opt_;
};

}  // namespace weave::spmd
