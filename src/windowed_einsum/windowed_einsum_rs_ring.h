// The ring layout of the reduce-scatter windowed einsum (issue 17 item 5): each partition sends
// each of its N-1 foreign partial blocks straight to the block's owner and sums what it receives
// with its own partial block, N-1 transfers of one block, the bytes of a ring reduce-scatter.
// XLA's unrolled-by-2 layout for even rings (two accumulators travelling s -> s-2 and a shift
// after the loop, spmd-windowed-einsum.md §3) moves N+1 blocks instead (5 for N = 4); XLA's rolled
// layout moves N-1 but its one accumulator makes every step's GEMM wait for the previous step's
// transfer (the accumulator add is folded into the GEMM epilogue), so it cannot overlap.
//
// The loop (trip count 1, `windowed_dot_general_body_rs_ring`, backend_config known_trip_count 1):
//   for t = 1 .. N-1, then 0:  part_t = dot(slice of the sliced operand at block (i + t) mod N,
//                                            the other operand)      (own operation_queue_id)
//                              recv_t = collective-permute(part_t), position j -> j + t
//   result = part_0 + recv_1 + ... + recv_{N-1}
// where i is the partition's position in its group. Operands dequantized from FP8 with a scalar
// scale travel into the loop as FP8 and are dequantized after their slice (so the partial dots
// become FP8 GEMMs); operands with per-row scales are carried as the decomposer plans them. The
// result buffer of the loop state starts as XLA's AllocateBuffer (nothing to fill: the body
// writes it whole).
//
// Chosen by the cost gate (the decomposer's "with the ring loop" variant) or by the option
// `windowed-einsum-rs-layout=ring` (default `xla`). Internal to src/spmd.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "windowed_einsum/windowed_einsum_plan.h"

namespace weave::windowed_einsum {

// Whether the ring layout can build plan `p` (not for reduce-scatters over a batch dim that
// slices both operands); *why says why not.
bool CanBuildRsRingLoop(const RsPlan& p, std::string* why);
// Builds the ring loop of `p`, replaces the reduce-scatter result, reports the applied remark.
absl::Status BuildRsRingLoop(DecomposerContext& ctx, const RsPlan& p);

}  // namespace weave::windowed_einsum
