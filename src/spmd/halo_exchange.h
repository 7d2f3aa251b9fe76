// Halo exchange: each device's window of a value sharded along one dim, fetched from the
// neighbouring tiles by collective-permutes instead of an all-gather of the whole dim (XLA's
// ExchangeHalo and PartitionedHlo::ReshardAsWindowedInput in spmd_partitioner_util.cc /
// spmd_partitioner.cc; ../shared/specs/spmd-partitioner.md §3).
//
// The value x is the local tile of a global array of shape `global` under sharding `s`, tiled
// k ways along dim `dim` with tiles of T = ceil(G / k) elements (the last may end in padding).
// The device holding tile i wants the W elements at global indices lo(i) .. lo(i) + W - 1 along
// `dim`, with lo(i) = first + i * step (any integers: a window may start before 0 or end past
// G), or, with `starts`, each device p those from starts[p] on. The result, on every device, is its window: shape x's with `dim` = W.
//
// How: relative to the start of its own tile every device reads the same range of positions
// (the union over the tiles of where their windows hold data, indices in [0, G)); that range is
// fetched piece by piece from the tiles it spans, one collective-permute per piece (a device at
// the edge receives zeros; the own tile's part is a local slice, and a tile nobody reads is not
// fetched: slice [3:4] of 4 tiles moves one element), concatenated, padded with zeros where a
// window reaches past the data, and each device dynamic-slices its window at its own offset (a
// partition-id table). With `fill` (a scalar of x's type), window elements at indices outside
// [0, G) are set to it (select on an iota of the global index); without, they are left
// unspecified (a slice never reads them).
//
// Errors: Unimplemented when `s` is not tiled along `dim`, carries a manual or unreduced
// subgroup, or the fetched halo is larger than the other k - 1 tiles together (an all-gather is
// then cheaper; the caller falls back to it). Memory: the buffer spans the fetched halo and the
// zeros a window reaches past the data (a pad far past the end: up to the padded extent, as the
// gathered fallback). Cost: linear in the pieces and the devices.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "spmd/spmd_builder.h"

namespace weave::spmd {

struct HaloWindow {
  int64_t dim = 0;
  int64_t first = 0;  // lo(0)
  int64_t step = 0;   // lo(i) = first + i * step
  int64_t size = 0;   // W
  // When not empty (one entry per partition 0..n-1): partition p's window starts at starts[p],
  // whatever its tile index; first and step are then unused (reshard_halo.h: a reshard whose
  // target tiles do not follow the source tile order).
  std::vector<int64_t> starts;
  // When not empty (one entry per partition): the [begin, end) global indices along `dim` that
  // partition p reads of its window; the rest of its window is unspecified (the caller masks it).
  // Only these ranges are fetched, and a partition with an empty range reads nothing (its window
  // is then any W elements of its buffer): a dynamic-update-slice's update fetched only where
  // it lands (partition_dynamic_update_slice.cc).
  std::vector<std::pair<int64_t, int64_t>> needed;
};

// Whether ExchangeHalo applies to `w` on a value of `global` shape under `s` over partitions
// 0..n-1 (OkStatus), or the Unimplemented error it would return; no instruction is built.
absl::Status CheckHalo(const Sharding& s, const Shape& global, const HaloWindow& w, int64_t n);
// The elements along the dim every device receives (the union of the windows' reach outside
// the own tile), or CheckHalo's error.
absl::StatusOr<int64_t> HaloFetchedElements(const Sharding& s, const Shape& global, const HaloWindow& w,
                                            int64_t n);

absl::StatusOr<HloInstruction*> ExchangeHalo(SpmdBuilder& b, HloInstruction* x, const Sharding& s,
                                             const Shape& global, const HaloWindow& w,
                                             HloInstruction* fill);

}  // namespace weave::spmd
