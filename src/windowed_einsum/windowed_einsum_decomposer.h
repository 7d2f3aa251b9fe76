// The windowed einsum decomposer: turns the plain collective matmuls of a partitioned module into
// the windowed einsum (collective matmul) loops XLA's SPMD partitioner emits when windowed einsum
// is enabled (../shared/specs/spmd-windowed-einsum.md §2-3, §6), so that the windowed einsum
// handler and the FP8 GEMM rewriter apply to any partitioned program.
//
// Rewrites (N = size of the collective's partition groups, the ring):
//  - AG: `dot(all-gather(x, dim d), w)` (the all-gather on either operand) becomes a while loop
//    `windowed_dot_general_body_ag` / `_cond_ag` over the tuple (lhs, rhs, out, extra, u32 k)
//    whose windowed element rotates s -> s-1 around each group with collective-permutes.
//      * d is a non-contracting dim of the dot: each step writes its block of the output with
//        dynamic-update-slice at the offset `table[(k + i) % N]`.
//      * d is a contracting dim: the other (stationary) operand is dynamic-sliced on the matching
//        contracting dim at that offset and the step adds its dot into `out`.
//      * d is a batch dim: the stationary operand is dynamic-sliced on the matching batch dim and
//        the block written to the output batch dim with dynamic-update-slice.
//    N even: unrolled by 2 (two permutes and two dots per iteration, N/2 trips). N odd: rolled,
//    one dot per iteration, the permute of the window guarded by a conditional
//    (true_computation permutes, false_computation passes the last window through).
//  - RS: `reduce-scatter(dot(x, w), dim d)`, and `dynamic-slice(all-reduce(dot(x, w)))` at
//    offsets that select block i of dim d on the partition at group position i, become a loop
//    `windowed_dot_general_body_rs` / `_cond_rs` in which the operands stay and the accumulator
//    rotates; the operand owning the scattered dim is dynamic-sliced per step (both operands
//    for a batch dim). N even: two accumulators (elements 2 and 3) permuted s -> s-2, then after the loop
//    `add(collective-permute(gte 2, s -> s+1), gte 3)`. N odd: rolled with the conditional.
//  - Uneven dims (windowed_einsum_uneven.h): the partitioner's slice of a padded all-gather
//    (non-contracting) moves after the dot and its zero pad before a reduce-scatter moves into
//    the dot's operand first, so both windows run over the padded dim.
// The offset tables are s32[N] constants {0, b, 2b, ...} indexed by the in-group position i,
// which is partition-id itself for one group {0..P-1}, else read from a u32[P] constant table
// indexed by partition-id. source_target_pairs use global partition ids; every new collective gets
// a fresh channel_id. Operands are carried as they are: FP8 stays FP8 on the ring, dequantized
// operands (multiply(convert(fp8), broadcast(scale))) stay in the init tuple for the handler.
//
// Options (PassOptions keys; CLI `--key=value`):
//   windowed-einsum-threshold-mib (int, default 0): only rewrite when the global bytes of the
//     gathered operand (AG) or of the dot output (RS) are >= M * 2^20, as XLA's
//     threshold_for_windowed_einsum_mib.
//   windowed-einsum-operand-bytes-threshold (int, default -1 = unset), also read under XLA's name
//     xla_gpu_operand_bytes_threshold_for_windowed_einsum: when >= 0, rewrite only when the global
//     bytes of the dot's two operands are >= it, and ignore windowed-einsum-threshold-mib (XLA's
//     total_bytes_windowed_einsum_threshold, PR 18271). The gathered operand counts at its
//     gathered size, the operands sharded over the ring n times their shard; FP8 operands count
//     1 byte per element even when the dot reads them dequantized (XLA counts the wide type).
//   windowed-einsum-max-ring (int, default 32): XLA's max_windowed_einsum_iteration; longer rings
//     are left alone.
//   windowed-einsum-rs-layout (xla|ring, default xla): XLA's reduce-scatter loop layouts, or the
//     ring layout (N-1 transfers of one block; windowed_einsum/windowed_einsum_rs_ring.h). With the cost gate
//     each reduce-scatter is decided among no loop, XLA's layout and the ring layout.
//   windowed-einsum-duplicate-loops (bool, default false): several dots reading one all-gather:
//     false gives the first in post order the loop and leaves the others (the handler's cache
//     serves them); true gives each dot its own loop.
//   windowed-einsum-loop-owner (auto|fp8|wide, default auto): when the dots reading one
//     all-gather of a dequantized FP8 value differ in whether their other operand is FP8 too,
//     which one owns the loop and computes its partial GEMMs inside the ring (the others read
//     the handler's activation cache after the loop): fp8: the FP8 dot (its partial dots become
//     FP8 GEMMs); wide: the wide dot with most FLOPs; auto: with the cost gate both loops are
//     estimated (with no loop as the third variant) and the faster is built; without a gate, fp8
//     (windowed_einsum_owner.cc).
// Every candidate gets a remark: converted (with the loop's name) or the reason it was not.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "passes/pass.h"

namespace weave {

struct WindowedEinsumDecomposerOptions {
  int64_t threshold_mib = 0;   // windowed-einsum-threshold-mib
  // windowed-einsum-operand-bytes-threshold (-1: unset); when >= 0 it replaces threshold_mib.
  int64_t operand_bytes_threshold = -1;
  int64_t max_ring = 32;       // windowed-einsum-max-ring
  bool duplicate_loops = false;  // windowed-einsum-duplicate-loops
  // windowed-einsum-rs-layout: "xla" (default: XLA's layouts) or "ring" (reduce-scatter loops in
  // the ring layout of windowed_einsum/windowed_einsum_rs_ring.h: N-1 transfers of one block). With the cost
  // gate, the layout is the gate's choice.
  bool rs_ring = false;
  // windowed-einsum-loop-owner.
  enum class LoopOwner { kAuto, kFp8, kWide };
  LoopOwner loop_owner = LoopOwner::kAuto;
};

// Reads the options above from `options`; InvalidArgument naming the option on a bad value
// (non-integer, negative threshold, max ring < 1).
absl::StatusOr<WindowedEinsumDecomposerOptions> ParseWindowedEinsumDecomposerOptions(
    const PassOptions& options);

// Devices named by the module's collectives with use_global_device_ids=true: 1 + the largest id
// in their replica_groups, 0 if there are none. Dumps of partitioned programs sometimes omit
// num_partitions from the header (e.g. a 16x8 Llama dump whose groups address 128 devices); the
// decomposer then uses this count when the header has none and replica_count is 1.
int64_t DevicesAddressedByCollectives(const HloModule& module);

class WindowedEinsumDecomposer : public HloPass {
 public:
  explicit WindowedEinsumDecomposer(WindowedEinsumDecomposerOptions options = {})
      : options_(options) {}
  std::string_view name() const override { return "windowed-einsum-decomposer"; }
  // Rewrites every matching dot / reduce-scatter / all-reduce+dynamic-slice in every computation
  // of the module (see the file comment). Returns whether anything changed. Errors only on an
  // inconsistent module (e.g. an IR mutation failing); unsupported patterns are remarks.
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  WindowedEinsumDecomposerOptions options_;
};

}  // namespace weave
