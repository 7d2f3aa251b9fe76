// block-scaled-windowed-einsum: windowed einsum (collective matmul) loops for JAX's block-scaled
// dots ("__op$block_scaled_dot", hlo/block_scaled_call.h) of a partitioned module, with the
// FP8 data and its E8M0 (or other) block scales travelling the ring together. XLA's partitioner
// never windows these dots (dot_handler.cc: "Disable windowed einsums for block-scaled dot"), so
// its programs all-gather both and wait; this pass is Weave's own.
//
//   AG: block_scaled_dot(all-gather(x, d), W, all-gather(xs, d), Ws[, g]) (or the gathered pair
//       on the rhs side), d the gathered side's row dim (M of the lhs, N of the rhs), x and xs
//       gathered over one ring of N partitions:
//         while k < N-1:  y_k = block_scaled_dot(x_win, W, xs_win, Ws[, g])   [.., M/N, ..]
//                         out = dynamic-update-slice(out, y_k, block (k + i) % N on d's out dim)
//                         x_win, xs_win = collective-permute(s -> s-1) of both
//         after: the last block the same way (the loop is peeled: no permute is wasted).
//       The permutes read the window the step's dot reads, so they overlap it.
//   RS: reduce-scatter(block_scaled_dot(A, B, As, Bs[, g]), d), d a row dim of the output (M or
//       N), the dot's only user:
//         acc = 0; while k < N-1: acc = collective-permute(s -> s-1)(acc + dot of the operand
//         rows of block (i + k + 1) % N and their scales, dynamic-sliced); after: acc + the dot of
//         block i. The accumulator travels; data and scales stay.
// The dot's global scale (linear) applies to each partial dot. Every candidate gets a remark:
// windowed (the loop's name, the ring, what travels) or why not (gathered along the contracting
// or batch dim, the all-gathers of data and scale on different rings or dims, other users of an
// all-gather, a ring longer than windowed-einsum-max-ring, a scale padded along the gathered
// dim, below windowed-einsum-threshold-mib).
//
// Options: windowed-einsum-threshold-mib (default 0: the global bytes of the gathered data plus
// scales, or of the scattered output, must reach it), windowed-einsum-max-ring (default 32), as
// windowed-einsum-decomposer reads them.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "passes/pass.h"

namespace weave {

class BlockScaledWindowedEinsum : public HloPass {
 public:
  BlockScaledWindowedEinsum(int64_t threshold_mib, int64_t max_ring)
      : threshold_mib_(threshold_mib), max_ring_(max_ring) {}
  std::string_view name() const override { return "block-scaled-windowed-einsum"; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  int64_t threshold_mib_;
  int64_t max_ring_;
};

}  // namespace weave
