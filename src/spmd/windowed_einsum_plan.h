// Candidate finding for the windowed einsum decomposer (spmd/windowed_einsum_decomposer.h): which
// dots, reduce-scatters and all-reduce + dynamic-slice pairs can become windowed einsum loops, and
// the plan each loop builder (windowed_einsum_ag_loop.cc, windowed_einsum_rs_loop.cc) follows.
// Every Plan* function either returns a plan or nullopt with a one-line reason fit for a remark
// (the first condition that failed). Internal to src/spmd; not a public API.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "hlo/ir.h"
#include "spmd/partition_ring.h"
#include "spmd/windowed_einsum_decomposer.h"

namespace weave::windowed_einsum {

// State shared by the candidate finder and the loop builders during one run of the pass.
struct DecomposerContext {
  HloModule* module = nullptr;
  WindowedEinsumDecomposerOptions options;
  // remark(location, applied, message)
  std::function<void(const std::string&, bool, const std::string&)> remark;
  int64_t next_channel = 1;
  int64_t num_partitions = 1;  // the header's, or inferred when the header has none
  // Instructions removed by a rewrite during the current sweep (never visited again).
  absl::flat_hash_set<const HloInstruction*> removed;

  int64_t NextChannel() { return next_channel++; }
};

// dot(all-gather(x), w) or dot(w, all-gather(x)).
struct AgPlan {
  HloInstruction* dot = nullptr;
  HloInstruction* ag = nullptr;
  int side = 0;  // 0: all-gather is the lhs, 1: the rhs
  PartitionRing ring;
  bool contracting = false;
  bool batch = false;     // gathered dim is a batch dim: slice the stationary operand and DUS
  int64_t out_dim = -1;   // non-contracting/batch: output dim written by dynamic-update-slice
  int64_t stat_dim = -1;  // contracting/batch: stationary operand dim that is dynamic-sliced
  int64_t block = 0;      // shard length along the gathered dim
  std::string note;       // appended to the applied remark (threshold figures, owner choice)
};

// reduce-scatter(dot(x, w)) or dynamic-slice(all-reduce(dot(x, w))).
struct RsPlan {
  HloInstruction* result = nullptr;  // reduce-scatter or dynamic-slice (replaced)
  HloInstruction* reduce = nullptr;  // reduce-scatter or all-reduce
  HloInstruction* dot = nullptr;
  PartitionRing ring;
  int sliced_side = 0;       // 0 lhs, 1 rhs, 2 both (scattered batch dim)
  int64_t sliced_dim = -1;   // operand dim sliced per step (lhs dim when both)
  int64_t sliced_dim2 = -1;  // rhs batch dim when both are sliced
  int64_t out_dim = -1;      // scattered output dim
  int64_t block = 0;
  std::string note;  // appended to the applied remark (threshold figures)
};

// Plans an AG loop for `dot` whose operand `side` is an all-gather.
std::optional<AgPlan> PlanAllGatherDot(DecomposerContext& ctx, HloInstruction* dot, int side,
                                       std::string* why);
// Plans an RS loop for reduce-scatter `rs`.
std::optional<RsPlan> PlanReduceScatter(DecomposerContext& ctx, HloInstruction* rs,
                                        std::string* why);
// Plans an RS loop for dynamic-slice `ds` of an all-reduce of a dot, when the slice is the
// partition's reduce-scatter block on every partition.
std::optional<RsPlan> PlanAllReduceSlice(DecomposerContext& ctx, HloInstruction* ds,
                                         std::string* why);

// Builds the loop of a plan, replaces the dot (AG) or the reduce-scatter result (RS) by the
// loop's result, removes what became unused and reports the applied remark.
absl::Status BuildAgLoop(DecomposerContext& ctx, const AgPlan& p);
absl::Status BuildRsLoop(DecomposerContext& ctx, const RsPlan& p);

// An all-gather loop of the same computation that circulates the value an all-gather gathers.
struct CirculatingLoop {
  HloInstruction* loop = nullptr;  // the while
  // "" when the handler's activation cache step can serve the all-gather from this loop (same
  // value or its FP8 value with a scalar scale proven equal on all partitions, same dim, ring
  // s -> s-1 over the all-gather's groups, no cache yet, the dot does not feed the loop); else
  // the first condition that fails, for a remark.
  std::string why_not;
};
// The loop (if any) whose windowed element (state index 0 or 1, passed through a ring of
// collective-permutes) is the operand of `ag` or the FP8 value that operand dequantizes.
std::optional<CirculatingLoop> FindCirculatingLoop(DecomposerContext& ctx, HloInstruction* ag,
                                                   HloInstruction* dot);

// Among the dots that read `dot`'s all-gather operand `side` (or another all-gather of the same
// value with the same dims and groups), the one that should own the loop: an FP8 dot (both
// operands derive from FP8) before a wide one, then most FLOPs, then first in `post_order`;
// consumers that depend on another consumer are never chosen. Returns `dot` when it has no
// competitor; sets *owner_side and, when there are several consumers, *note (for the remark).
HloInstruction* ChooseLoopOwner(DecomposerContext& ctx, HloInstruction* dot, int side,
                                const std::vector<HloInstruction*>& post_order, int* owner_side,
                                std::string* note);

// Text for remarks: "a ring of 4 partitions (replica_groups={{0,1,2,3}})".
std::string RingText(const PartitionRing& ring);
// Text describing how an operand is carried ("'x' is f8e4m3fn: carried as FP8", ...), or "".
std::string CarriedText(HloInstruction* v);
// Replaces `old` by `repl` (moving its sharding), removes `old` and records it in ctx.removed.
absl::Status FinishReplace(DecomposerContext& ctx, HloInstruction* old, HloInstruction* repl);

}  // namespace weave::windowed_einsum
