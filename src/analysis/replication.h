// "Is this value the same on every partition?" — a small, conservative version of XLA's
// HloReplicationAnalysis (across partitions), used to prove that an FP8 scale is equal on every
// partition of a windowed einsum ring (../shared/specs/windowed-einsum-handler.md §2: otherwise a
// partition would dequantize a neighbour's shard with its own scale).
//
// A value is proven the same on all partitions when it is:
//  - a constant or an iota;
//  - an entry parameter (or one of its tuple leaves) whose sharding is `{replicated}` (tuple
//    shardings are followed per element);
//  - a parameter of a non-entry computation whose every caller passes a proven value (call,
//    conditional branches, while body/condition: the init element, and for loop-carried elements
//    the body's root element, proven by induction, with a proven loop condition unless the element
//    is passed through unchanged);
//  - the result of a while/call/conditional whose relevant roots are proven (conditional: its
//    selector too);
//  - an all-reduce or all-gather whose replica groups are a single group holding every device
//    (or empty groups);
//  - any other side-effect-free op (elementwise, broadcast, reshape, dot, reduce, fusion, ...)
//    whose operands are all proven and whose called computations hold no partition-id,
//    replica-id, rng, collective or side-effecting op.
// Everything else (partition-id, replica-id, collective-permute, all-to-all, reduce-scatter, rng,
// custom-call, infeed/recv, parameters without a replicated sharding) is not proven.
#pragma once

#include <string>

#include "hlo/ir.h"

namespace weave {

// True when `instr`'s value (every leaf of it, for tuples) is proven equal on all partitions (see
// the file comment). Conservative: false means "not proven". When false and `why` is non-null,
// *why receives a one-line reason naming the first unproven instruction, e.g.
// "'pid' is partition-id". Linear in the size of the computations involved.
bool IsSameOnAllPartitions(const HloInstruction* instr, std::string* why = nullptr);

}  // namespace weave
