// Multi-step reshards: the cheapest chain of local slices, all-to-alls, all-gathers and at most
// one collective-permute that moves an array value between two shardings of the same devices
// (tiled, possibly partially replicated; no manual or unreduced subgroup).
//
// This is what XLA's PartitionedHlo::ReshardNoCache reaches through its chain of special cases
// (ReshardWithAllToAll over several source/target dim pairs, ReshardPartialReplicateWithAllToAll,
// ReshardToPartialReplicateWithAllGather, ReshardFromPartialReplicateWithDynamicSlice, then
// ReshardWithCollectivePermute for the device order), found here by one small search instead:
//
//   The devices are read as the source's device array; each tiled data dim owns one or more
//   factors of it (its tile index is their mixed-radix number, major first) and the rest is the
//   replicated subgroup. A step moves one factor g:
//     slice       a replicated factor becomes the minor part of dim d's tiling: every device
//                 keeps its sub-tile by a local dynamic-slice (0 bytes received), placed as the
//                 target places it where the target allows;
//     all-to-all  the minor factor g of dim i's tiling moves to the minor end of dim j's: the g
//                 devices that differ only in that factor exchange g chunks of their dim-j tile
//                 (each receives (g-1)/g of its tile);
//     all-gather  the minor factor g of dim d's tiling becomes replicated: those g devices gather
//                 their tiles along d (each receives (g-1)/g of the new tile);
//     permute     last, when the tile counts match but not the devices: one collective-permute
//                 (each receives its whole tile).
//   Uneven dims (ceil-sized tiles, padding on the last): a step is taken only where the padded
//   tiles line up (g old tiles concatenated are exactly one new tile, or the dim ends untiled and
//   the padding is sliced off, or a chunked dim was untiled and is padded to g chunks).
//
// The search is A* over the shardings reached (each expanded once): cheapest first by bytes
// received per device plus a lower bound of what is still to receive (the most data a device's
// target tile holds outside its current tile), then by steps; an all-to-all may move more of a dim than it must
// lose, to be refilled by another. Plans are at most 2 * rank + 4 steps long (2 * rank + 3
// moves and a final slice or permute); the search gives up after expanding 2000 shardings (fewer for more devices: 60000 / n, at least 16). An
// expansion tries about rank^2 * divisors moves, each O(n) to build its sharding and groups, and
// every queued state keeps its groups: time and memory grow with the states times n.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "spmd/sharding.h"

namespace weave::spmd {

enum class ReshardStepKind : uint8_t { kSlice, kAllToAll, kAllGather, kPermute };

struct ReshardStep {
  ReshardStepKind kind = ReshardStepKind::kSlice;
  int64_t dim = -1;     // slice: the dim tiled further; all-gather: the dim; all-to-all: i, the
                        // dim whose minor factor leaves
  int64_t to_dim = -1;  // all-to-all: j, the dim the factor joins (at its minor end)
  int64_t factor = 1;   // g
  // all-to-all / all-gather: partition ids, each group's member k holding factor index k.
  std::vector<std::vector<int64_t>> groups;
  Sharding before, after;
  double bytes = 0;  // bytes one device receives in this step
};

struct ReshardSteps {
  std::vector<ReshardStep> steps;
  double bytes = 0;  // sum over the steps
};

// The cheapest plan from `from` to `to` for a value of array shape `global` on partitions
// 0..n-1, or nullopt when both are not tiled/replicated over exactly those partitions (or carry
// a manual or unreduced subgroup, or ranks differ), when no chain of the steps above reaches
// `to` (uneven tiles that do not line up), or when the search's state budget runs out.
// Plans are cached by (from, to, shape, n), up to 4096 (then the cache starts over).
std::optional<ReshardSteps> PlanReshardSteps(const Sharding& from, const Sharding& to,
                                             const Shape& global, int64_t n);
// The same search without the cache (benchmarks).
std::optional<ReshardSteps> SearchReshardSteps(const Sharding& from, const Sharding& to,
                                               const Shape& global, int64_t n);

}  // namespace weave::spmd
