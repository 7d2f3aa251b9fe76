// Index-parallel dims of gathers and scatters (XLA's hlo_sharding_util::
// GetGatherScatterBatchParallelDims and the index-parallel partitioning of
// gather_scatter_handler.cc): an operand dim and an indices dim that move together, so that
// tiled alike every device gathers from or scatters into its own tile.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "hlo/ir.h"
#include "spmd/sharding.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {

// An explicit batching pair, or an operand dim read with slice size 1 at the index an iota along
// the indices dim gives (row r of the indices reads operand row r: tf.reverse_sequence,
// take_along_axis). Tiled alike, every device gathers from its own tile, an iota pair's index
// shifted by the tile's offset.
struct ParallelDim {
  int64_t operand_dim = -1, indices_dim = -1;
  bool iota = false;  // false: an explicit batching pair (the index is implicit)
};

// The dim of the index array `x` along which its values are their own position (iota, a
// broadcast of one, a signed integer constant of that form (up to 2^20 elements); through
// copies), or nullopt.
std::optional<int64_t> IotaDim(const HloInstruction* x);

// The parallel dims of the gather or scatter `h` (dims `g`): its explicit batching pairs, then
// the iota-derived ones of its indices (a concatenate along index_vector_dim of pieces, or one
// iota; signed index types only), where slice size 1 and the operand dim as long as the indices
// dim; none of the iota ones where two would share a dim or a size differs (as XLA).
std::vector<ParallelDim> ParallelDims(const HloInstruction& h, const GatherScatterDims& g);

// Whether operand dim d is the operand side of one of `par`.
bool IsParallelOperandDim(const std::vector<ParallelDim>& par, int64_t d);

// Operand and indices shardings tiled alike on the parallel dims: where the operand tiles one,
// the indices keep their own tiling if it matches on those dims (index_vector_dim `ivd`
// untiled), else take the operand's tiling of them (*idx; other operand dims' devices
// replicate); else where the indices tile one, the operand takes theirs (*osh). False (nothing
// changed) when neither tiles a parallel dim or the shardings cannot be carried over.
bool AlignParallelDimsOnly(const std::vector<ParallelDim>& par, const Shape& og, const Shape& ig,
                           int64_t ivd, Sharding* osh, const Sharding& ish, Sharding* idx);

}  // namespace weave::spmd
