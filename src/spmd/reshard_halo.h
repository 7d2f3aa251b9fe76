// Resharding one dim between tile counts whose tiles do not line up, by halo exchange instead of
// an all-gather of the dim (XLA's PartitionedHlo::ReshardFromPartialReplicateWithDynamicSlice with
// PadFromPartialReplicateShape, and ReshardToPartialReplicateWithAllGather with
// TileToPartialReplicateHaloExchange, in spmd_partitioner.cc).
//
// Applies where `from` and `to` tile the same devices, differ in dim d's tile count only (k -> m,
// both >= 2; the replicated subgroup takes up the difference) and every device keeps its tile of
// every other dim. With G elements along d, source tiles of ceil(G / k) and target tiles of
// c = ceil(G / m) elements:
//   finer   (m > k; e.g. 6 rows from 2 to 4 tiles: target tile [2, 4) straddles source tiles
//           [0, 3) and [3, 6)): each device fetches its target tile from its source tile and its
//           neighbours by collective-permutes (halo_exchange.h with one window per device). No
//           all-gather.
//   coarser (k = r * m): the R devices that share a target tile are split into R / r groups of
//           r; the member at slot s of a group first fetches the sub-tile [s * u, s * u + u) of
//           the target tile (u = ceil(c / r)) by halo exchange, then the group joins its r
//           sub-tiles: an all-gather, or where c <= r / 2 (most sub-tiles are padding) a
//           dynamic-update-slice into zeros and an all-reduce, as XLA's ReplicatePartial; the
//           padding past c is sliced off. Slots follow the source tile order, so most sub-tiles
//           are already local.
// Padding of the target's last tile is left unspecified, as every reshard leaves it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "spmd/spmd_builder.h"

namespace weave::spmd {

struct HaloReshard {
  int64_t dim = -1;
  int64_t r = 1;                           // 1: finer; > 1: sub-tiles joined in groups of r
  int64_t width = 0;                       // elements each device fetches along dim (c or u)
  int64_t target_tile = 0;                 // c
  std::vector<int64_t> starts;             // [partition] -> global index its window starts at
  std::vector<int64_t> slot;               // r > 1: [partition] -> its slot s in its group
  std::vector<std::vector<int64_t>> groups;  // r > 1: partitions, member s at slot s
  double bytes = 0;                        // bytes one device receives (halo + join)
};

// The halo plan from `from` to `to` for an array of `global` shape on partitions 0..n-1, or
// nullopt where it does not apply (see above), where m is neither above k nor a divisor of it,
// or where the halo would be larger than the other source tiles (an all-gather is then as cheap).
std::optional<HaloReshard> PlanHaloReshard(const Sharding& from, const Sharding& to,
                                           const Shape& global, int64_t n);

// x (the local tile under `from`) resharded by `h`. Errors: Unimplemented when the halo
// exchange refuses (a local extent that is not the source tile).
absl::StatusOr<HloInstruction*> EmitHaloReshard(SpmdBuilder& b, HloInstruction* x,
                                                const Sharding& from, const HaloReshard& h,
                                                const Shape& global);

}  // namespace weave::spmd
