// Transformations of spmd::Sharding used by propagation and partitioning (XLA's
// hlo_sharding_util): replicate dims, move dims, map through transpose/reshape/dot, merge, and
// the "more specific" order. All functions are pure; nullopt means "no sharding follows" (the
// caller leaves the value alone). Shardings with a manual subgroup are only passed through
// unchanged (transformations that would move their devices return nullopt).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "hlo/ir.h"
#include "spmd/sharding.h"

namespace weave::spmd {

// Sorted device ids of a tiled sharding.
std::vector<int64_t> SortedDevices(const Sharding& s);

// Whether `s` describes partial values (XLA's unreduced: the devices of a group hold addends whose
// sum is the value): Unreduced, or tiled with an unreduced subgroup.
bool HoldsAddends(const Sharding& s);
// `s` with its addends summed: the unreduced subgroup becomes a replicated one (Unreduced:
// Replicated); `s` itself when it holds no addends.
Sharding Summed(const Sharding& s);
// The groups of partitions 0..n-1 that hold the addends of one value under `s` (HoldsAddends):
// the devices that differ only in the unreduced subgroup, or every partition for Unreduced; the
// first of each group is its lowest position in the device array. Empty when s holds none.
std::vector<std::vector<int64_t>> AddendGroups(const Sharding& s, int64_t n);

// `s` with the data dims `dims` untiled: their devices join the replicated subgroup (the tile
// held by a device is the union of its old tiles along those dims). Non-tiled: s.
std::optional<Sharding> ReplicateDims(const Sharding& s, const std::vector<int64_t>& dims);
// `s` (with a manual subgroup and no unreduced one) with the data dims `dims` untiled inside its
// manual groups: their devices join the replicated subgroup, the manual subgroup stays. nullopt
// without a manual subgroup.
std::optional<Sharding> ReplicateDimsInManualGroups(const Sharding& s, const std::vector<int64_t>& dims);
// `s` with the minor factor f of dim d's tiling untiled (its devices join the replicated
// subgroup): dim d keeps tile(d) / f tiles, each the union of f old ones. nullopt unless `s` is
// tiled with only a replicated subgroup and f divides tile(d).
std::optional<Sharding> ReplicateTileFactor(const Sharding& s, int64_t d, int64_t f);
// Keeps only the tiling of `dims` (every other data dim replicated).
std::optional<Sharding> ReplicateAllDimsExcept(const Sharding& s, const std::vector<int64_t>& dims);

// Result dim k takes operand dim perm[k] (transpose).
std::optional<Sharding> TransposeSharding(const Sharding& s, const std::vector<int64_t>& perm);
// The sharding a partitioning rule splits a value by: `s` when it tiles across partitions (no
// manual or unreduced subgroup), else replicated (maximal, manual and partial values are not
// split by the dot, convolution, ragged-dot and gather/scatter rules).
Sharding PhysicalSharding(const Sharding& s);
// Removes data dims `dims` (each must be untiled; nullopt otherwise).
std::optional<Sharding> RemoveDims(const Sharding& s, const std::vector<int64_t>& dims);
// Inserts untiled data dims so that they sit at positions `positions` (sorted) of the result.
std::optional<Sharding> InsertDims(const Sharding& s, const std::vector<int64_t>& positions);

// Through a reshape from `from` dims to `to` dims: tiles follow dims kept, split (the tiles go
// to the major factor, which they must divide) or merged (only the major dim of a merged group
// may be tiled, and its tiles must divide its size). nullopt where the tiling cannot follow.
std::optional<Sharding> ReshapeSharding(const Sharding& s, const std::vector<int64_t>& from,
                                        const std::vector<int64_t>& to);

// `s` (tiled with replicated subgroups only) carried to a value of rank `out_rank` whose dim
// map[d] is s's dim d (-1: d has no image; the devices along it join replication). Replicated
// and manual shardings pass as they are; nullopt for other subgroups or an inconsistent map.
std::optional<Sharding> MapShardingDims(const Sharding& s, const std::vector<int64_t>& map,
                                        int64_t out_rank);

// For a convolution: operand `operand`'s dim -> result dim, -1 where none (XLA's
// InferConvolutionShardingFromOperands and its backward rule): lhs batch (no batch groups),
// lhs feature (feature groups, when `tiles_of_groups` divide them: pass the operand's tile on
// that dim), lhs spatial dims with a sliding window (no base dilation, the window's extent at
// most half the input: a window spanning the input is a contraction); kernel output feature (no
// groups, or tiles dividing them). Empty when the dims are unreadable.
std::vector<int64_t> ConvolutionOperandToOutputDims(const HloInstruction& conv, int64_t operand,
                                                    int64_t tiles_of_groups);

// For a dot: the output sharding implied by operand `operand` (0 lhs, 1 rhs): batch and own
// non-contracting dims keep their tiles, contracting dims replicated, the other operand's
// non-contracting dims untiled.
std::optional<Sharding> DotOutputFromOperand(const Sharding& s, int64_t operand,
                                             const HloInstruction& dot);
// The operand sharding implied by the output sharding (batch and own non-contracting dims),
// with the contracting dims tiled as in `other` (the other operand's sharding) when that is
// consistent; other non-contracting dims of the output join replication.
std::optional<Sharding> DotOperandFromOutput(const Sharding& out, const Sharding* other,
                                             int64_t operand, const HloInstruction& dot);

// XLA's IsShardingMoreSpecific for leaves: manual beats replicated/maximal; a tiled sharding
// beats one with fewer tiles; anything but replicated beats replicated; anything beats unset.
bool IsMoreSpecific(const Sharding& a, const Sharding& b);
// Merges two partially replicated shardings (XLA's MergeShardingIfCompatible): per dim the
// tile counts must be equal or one of them 1; each merged tile is held by the intersection of
// the two replication groups, which must be non-empty and of equal sizes. nullopt otherwise or
// when the result has fewer than `min_tiles` tiles.
std::optional<Sharding> MergeCompatible(const Sharding& a, const Sharding& b, int64_t min_tiles);
// Whether every device's tile of `sub` lies within its tile of `s` (for a value of `dims`).
bool IsSubTilingOrEqual(const std::vector<int64_t>& dims, const Sharding& sub, const Sharding& s);

// XLA's ReturnImprovedSharding for one (non-tuple) leaf of a value of `dims`: `cand` when it is
// strictly more specific than `cur`, the merge of two compatible partially replicated shardings
// (with `may_combine_partial`), else `cur`. Maximal and Unknown candidates are never taken;
// manual ones only over Unset/replicated. Without `aggressive`, a candidate that replaces a
// tiled `cur` must be a sub-tiling of it.
Sharding ImproveLeaf(const Sharding& cur, const Sharding& cand, bool may_combine_partial,
                     bool aggressive, const std::vector<int64_t>& dims);

// The dims of a gather (or scatter: operand = input, indices = scatter_indices, output =
// updates) from its attributes (XLA's GatherDimensionNumbers / ScatterDimensionNumbers; for
// scatter update_window_dims, inserted_window_dims and scatter_dims_to_operand_dims are read as
// offset_dims, collapsed_slice_dims and start_index_map, and slice_sizes as the window of
// operand dims the updates cover). Source: hlo_sharding_util's GatherScatterDims (same name).
struct GatherScatterDims {
  std::vector<int64_t> offset_dims, collapsed, start_index_map, slice_sizes;
  std::vector<int64_t> operand_batching, indices_batching;
  int64_t index_vector_dim = -1;
  // Output (updates) dims that are not offset dims, in order; they correspond one to one to
  // `indices_batch` (the indices dims other than index_vector_dim, in order).
  std::vector<int64_t> batch_out, indices_batch;
  // Operand dims that are neither collapsed nor batching, in order: window_operand[j] is
  // offset_dims[j]'s operand dim.
  std::vector<int64_t> window_operand;
  // Operand dim -> its output offset dim (-1 if none).
  std::vector<int64_t> operand_to_offset;
  // Per operand dim: taken whole (slice size = dim size: the start index is clamped to 0), so
  // its tiling passes through to its offset dim.
  std::vector<bool> pass_through;
  // Per operand dim: indexed with slice size 1, collapsed or not (an embedding's vocab dim;
  // XLA's trivially sliced dims).
  std::vector<bool> trivially_sliced;
};
// nullopt when an attribute is missing or malformed (the caller leaves the op alone).
std::optional<GatherScatterDims> ParseGatherScatterDims(const HloInstruction& h);
// The operand number of a gather's (1) or scatter's (k, after its k operands) indices.
int64_t GatherScatterIndicesOperand(const HloInstruction& h);

// A block-scaled value (hlo/block_scaled_call.h): data [..., K] and its scale [..., K/B], which
// has the data's rank and dims but the last. `s` (a sharding of the data) shards the scale alike
// when every tile keeps its blocks whole: the last dim tiled t ways with K % t == 0 and
// (K/t) % B == 0, and the scale not padded along a tiled dim. ScaleShardingMismatch says why
// not (empty when it does, and for a non-tiled `s`); FitScaleBlocks gives `s`, or `s` with the
// last dim untiled when that fits, else nullopt.
std::string ScaleShardingMismatch(const Sharding& s, const Shape& data, const Shape& scale, int64_t block);
std::optional<Sharding> FitScaleBlocks(const Sharding& s, const Shape& data, const Shape& scale, int64_t block);

}  // namespace weave::spmd
