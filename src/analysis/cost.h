// Static byte and FLOP accounting shared by `weave stats`, the compile report and the simulator.
//
// Conventions follow the usual ring-collective model (see ../shared/specs/performance-model.md):
// bytes are what one partition receives over the links for one execution of the instruction; N is
// the replica-group size (all partitions when the groups are empty).
#pragma once

#include <cstdint>
#include <optional>

#include "hlo/ir.h"

namespace weave {

// FLOPs of one dot: 2 * prod(batch) * M * N * K = 2 * (result elements) * (product of the lhs
// contracting dimension sizes). 0 for a non-dot or a malformed dot (tuple shapes, bad dims).
int64_t DotFlops(const HloInstruction& dot);

// Bytes per partition of a collective.
struct CollectiveCost {
  int64_t group_size = 1;  // N: partitions (or replicas) exchanging data
  int64_t bytes = 0;       // bytes received per partition (see CollectiveBytes)
  int64_t data_bytes = 0;  // the array bytes the formula starts from (output for all-gather,
                           // operand for the others)
};

// For all-gather (and -start): output bytes * (N-1)/N; reduce-scatter: input bytes * (N-1)/N;
// all-reduce (and -start): 2 * (N-1)/N * bytes; all-to-all: operand bytes * (N-1)/N;
// collective-permute (and -start): operand bytes. Bytes of multi-operand (tuple) collectives are
// summed. Sugared async forms (`reduce-scatter-start`, `all-to-all-start`: async-start with
// async_sugar set) count like the wrapped collective. N is the size of the first replica group; with empty groups, the module's
// num_partitions (cross-partition or global ids) or replica_count (cross-replica, no channel_id).
// nullopt for other opcodes (including the -done halves, which move nothing by themselves).
std::optional<CollectiveCost> CollectiveBytes(const HloInstruction& instr);

// N for a collective as described above (1 when it cannot be told).
int64_t CollectiveGroupSize(const HloInstruction& instr);

}  // namespace weave
