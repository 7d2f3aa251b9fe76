// Expansions the SPMD partitioner makes before it partitions (on the global module, after
// sharding propagation): ops with no rule of their own along a tiled dim, rewritten into ops that
// have one, every new instruction carrying the expanded op's sharding (XLA's partitioner handles
// these in custom_call_handler.cc; here they reuse the slice and pad halo exchanges):
//   "_SPMDInternalOp_RotateRight" (dimension=d, amount=a) -> concatenate(x[n-a:], x[:n-a]) along
//     d; where d is tiled, that concatenate as each slice padded with zeros into the result's
//     extent (a pad: halo exchange, or the gather the pad rule falls back to) and picked by an
//     index mask: select(i < e_1, pad(x_0), select(i < e_2, pad(x_1), ...)), i an iota along the
//     dim (rank 1, broadcast), e_k where operand k ends. Exact in every type (a select, no sum).
//     Concatenates the user wrote keep the partitioner's rule (XLA's HandleConcatenate moves
//     the tiling to another dim by all-to-all, else gathers).
//   "_SPMDInternalOp_MultiSlice" -> a tuple of the a+1 shifted slices.
//   "_SPMDInternalOp_MultiPad" -> pad by a on both sides along d, then a tuple of the a+1 windows.
//   "_SPMDInternalOp_MultiRotate" (left_amount=L, right_amount=R) -> a tuple of the L+R+1
//     rotations (left by L, ..., right by R), each as RotateRight above.
//   "_SPMDInternalOp_Wrap" (left_amount=L, right_amount=R; P tiles along d in its sharding,
//     k = n/P) -> d split into [P, k]; each row concatenated with the last L elements of the row
//     before (the rows of x rotated right by L) and the first R of the row after (rotated left
//     by R), merged back: the rotations' halo exchanges are the collective-permutes XLA's
//     handler sends. L and R at most k.
// The custom calls' global meaning is the evaluator's (eval/custom_calls_xla.cc). A custom call
// whose config does not parse or whose shapes do not fit is left as it is (the partitioner then
// computes it replicated, as any target it has no rule for).
// Returns one (instruction name, remark text) per expansion. Linear in the instructions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hlo/ir.h"

namespace weave::spmd {

std::vector<std::pair<std::string, std::string>> ExpandForPartitioning(HloModule* module);

}  // namespace weave::spmd
