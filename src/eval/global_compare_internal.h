// Internals of the global-vs-partitioned check (global_compare.h), shared by its two files:
//   global_compare.cc          inputs, references, the reassembled comparison of each root leaf,
//                              the exact-sum recheck, the report
//   global_compare_outputs.cc  the copies of a reassembled output's tiles, and the outputs not
//                              compared as one reassembled array: manual outputs (device by
//                              device), outputs per manual group, outfeeds
// Only these files include it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/evaluator.h"
#include "eval/global_compare.h"
#include "eval/output_precision.h"
#include "eval/value.h"
#include "hlo/ir.h"
#include "spmd/sharding.h"

namespace weave::eval::global_compare_internal {

// Sharding of each of `leaves` tuple leaves (a non-tuple sharding applies to every leaf).
std::vector<spmd::Sharding> LeafShardings(const spmd::Sharding& s, int64_t leaves);
// The sharding of `h` for a value of `global` shape (replicated when it has none).
absl::StatusOr<spmd::Sharding> ShardingOf(const HloInstruction* h, const Shape& global);
// Whether element i of a and element j of b hold the same bits (any two NaNs agree).
bool SameBits(const Value& a, int64_t i, const Value& b, int64_t j);
// Offset of partition p's tile along each dim of `global` under `s`.
std::vector<int64_t> Offsets(const spmd::Sharding& s, int64_t p, const Shape& global);
// The holders of each distinct tile of a value of `rank` with sharding `s` over n partitions and
// `replicas` replicas, tiles in device-array order, each tile's devices as r * n + p.
std::vector<std::vector<int64_t>> TileHolders(const spmd::Sharding& s, int64_t rank, int64_t n,
                                              int64_t replicas);
// Output leaf k of a partitioned run reassembled into the global `shape` from its sharding `s`:
// each tile from its first holder (`holders`: TileHolders), padding stripped.
Value Reassemble(const EvalResult& pr, size_t k, const spmd::Sharding& s, const Shape& shape, int64_t n,
                 const std::vector<std::vector<int64_t>>& holders);

// Calls f(local_flat, global_flat) for every element of a tile of `local` dims at `offsets` of
// a `global` array; global_flat = -1 for padding.
template <typename F>
void ForEachTileElement(const std::vector<int64_t>& local, const std::vector<int64_t>& global,
                        const std::vector<int64_t>& offsets, F f) {
  const size_t rank = local.size();
  int64_t count = 1;
  for (int64_t d : local) count *= d;
  if (count == 0) return;
  std::vector<int64_t> gstride(rank, 1);
  for (size_t d = rank; d-- > 1;) gstride[d - 1] = gstride[d] * global[d];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < count; ++k) {
    int64_t g = 0;
    bool in = true;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t gi = offsets[d] + idx[d];
      if (gi >= global[d]) {
        in = false;
        break;
      }
      g += gi * gstride[d];
    }
    f(k, in ? g : -1);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

// ---- global_compare_outputs.cc ----

// The manual index of every partition under the partitioned module's partially manual parameter
// shardings, or empty when none has a manual subgroup. Unimplemented when two parameters group
// the devices differently.
absl::StatusOr<std::vector<int64_t>> ManualGroupsOfParameters(const HloModule& partitioned,
                                                              const HloModule& global, int64_t n);
// Whether `m` calls partition-id or replica-id.
bool ReadsDeviceId(const HloModule& m);
// Output leaf k of a partitioned run `pr` (sharding s, global shape gs) as reassembled from
// `holders` (TileHolders): every other copy of each tile against its first holder's, bit for bit
// when `exact`, else within the tolerance of the type `path` (optional) judges it at; a copy that
// differs sets report->pass false and appends a line to report->copy_mismatches.
void CheckTileCopies(const EvalResult& pr, size_t k, const spmd::Sharding& s, const Shape& gs,
                     int64_t n, const std::vector<std::vector<int64_t>>& holders,
                     const PathPrecision* path, const CompareOptions& co, bool exact,
                     GlobalCompareReport* report);
// Output leaf k when each manual group ran on its own inputs: every group's tiles against
// grs[m] (that group's reference), copies agreeing inside a group (bit for bit when `exact`);
// copy disagreements are appended to *copy_mismatches. The worst group's comparison.
OutputComparison CompareManualGroups(const std::vector<EvalResult>& grs, const EvalResult& pr, size_t k,
                                     const spmd::Sharding& s, const Shape& gs, int64_t n, int64_t replicas,
                                     const std::function<int64_t(int64_t)>& group_of,
                                     const CompareOptions& co, bool exact,
                                     std::vector<std::string>* copy_mismatches);
// Output leaf k of a manual root: every one of `devices` devices against the global view's
// output on its partition; the worst device's comparison.
OutputComparison CompareManualOutput(const EvalResult& view, const EvalResult& partitioned, size_t k,
                                     int64_t devices, int64_t n, const CompareOptions& co);
// Every outfeed of the global program against each device's outfeed of the same rank in order,
// reassembled by the global outfeed's sharding (manual: device by device against the view); one
// comparison per data leaf appended to report->compare, numbered from *next.
void CompareOutfeeds(const HloModule& global, const EvalResult& ref, const EvalResult& part,
                     int64_t n, int64_t replicas, const CompareOptions& co, int64_t* next,
                     GlobalCompareReport* report);

}  // namespace weave::eval::global_compare_internal
