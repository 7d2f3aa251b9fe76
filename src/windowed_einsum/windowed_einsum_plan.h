// Candidate finding for the windowed einsum decomposer (windowed_einsum/windowed_einsum_decomposer.h): which
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

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "hlo/ir.h"
#include "spmd/partition_ring.h"
#include "windowed_einsum/windowed_einsum_decomposer.h"
#include "windowed_einsum/windowed_einsum_emitter.h"

namespace weave::windowed_einsum {

// State shared by the candidate finder and the loop builders during one run of the pass.
struct DecomposerContext {
  HloModule* module = nullptr;
  WindowedEinsumDecomposerOptions options;
  // sink(location, applied, message, about): the pass's AddRemark.
  std::function<void(const std::string&, bool, const std::string&,
                     const std::vector<std::string>&)>
      sink;
  int64_t next_channel = 1;
  int64_t num_partitions = 1;  // the header's, or inferred when the header has none
  // Instructions removed by a rewrite during the current sweep (never visited again).
  absl::flat_hash_set<const HloInstruction*> removed;
  // Computations called by removed instructions (async-start wrappers): removed at the end of the
  // run when nothing calls them any more.
  std::vector<HloComputation*> maybe_unused;
  // Post-order index of each instruction of the computation being swept, as it was when the
  // sweep began, keyed by unique_id (ids are never reused; addresses are). Instructions the
  // rewrites add have none. The rewrites only replace a value by one computed from its own
  // operands' ancestors, so no new path appears between indexed instructions: the index stays a
  // topological order of them, and an ancestor walk may stop below its target's index.
  absl::flat_hash_map<int64_t, int64_t> position;

  // The sweep-start index of `h`, or -1 for an instruction added since.
  int64_t PositionOf(const HloInstruction* h) const {
    auto it = position.find(h->unique_id());
    return it == position.end() ? -1 : it->second;
  }
  // The largest operation_queue_id in the module, or -1 until a ring reduce-scatter loop first
  // needs it (found then with one scan of the module; raised by each id given, so that building
  // many loops scans the module once; only those loops give queue ids during the pass).
  int64_t max_queue_id = -1;
  int64_t NextChannel() { return next_channel++; }
  // A remark at `location`; `about` names the collective(s) the decision is about.
  void remark(const std::string& location, bool applied, const std::string& message,
              const std::vector<std::string>& about = {}) {
    if (sink) sink(location, applied, message, about);
  }
};

// A data-movement op (reshape, transpose, copy, bitcast) re-created on a shard: `instr`'s
// attributes with `shape` (the shard's shape after the op; element type set when built).
struct ViewStep {
  HloInstruction* instr = nullptr;
  Shape shape;
};

// One elementwise step that rebuilds a dot operand in the loop body from the value the loop
// carries: a convert, or a multiply/divide by a broadcast scale (a dequantization's scaling).
struct ElementwiseStep {
  enum class Kind { kConvert, kScale };
  enum class ScaleMode {
    kStays,    // the scale is a loop state element passed through (same on every step)
    kSliced,   // a state element dynamic-sliced at the step's block offset on `slice_dim`
    kTravels,  // the shard's own scale, a state element rotated with the window
  };
  Kind kind = Kind::kConvert;
  PrimitiveType type = PrimitiveType::kInvalid;  // result element type
  HloInstruction* instr = nullptr;               // the original convert / multiply / divide
  // kScale:
  bool divide = false;              // divide(value, broadcast(scale))
  bool scale_first = false;         // multiply(broadcast(scale), value)
  HloInstruction* scale = nullptr;  // outer-computation value carried in the state
  std::vector<int64_t> scale_dims;  // broadcast dimensions= (scale dims -> operand dims)
  ScaleMode mode = ScaleMode::kStays;
  int64_t slice_dim = -1;  // kSliced: the scale dim sliced (block = the plan's block)
};

// How one dot operand is carried in the loop state and rebuilt in the body: the state element is
// `base` after `views` (built before the loop); the body applies `steps` in order to the step's
// value (the window shard, or the stationary operand after its dynamic-slice).
struct OperandCarry {
  HloInstruction* base = nullptr;  // outer computation: the value before `views`
  std::vector<ViewStep> views;     // re-created on `base`, in order
  std::vector<ElementwiseStep> steps;
  // For the remark: how the operand is carried ("carried as f8e4m3fn, dequantized per step", ...).
  std::string text;
  bool fp8() const;  // base is FP8 and steps rebuild the wide operand
};

// dot(C(all-gather(x)), w) or dot(w, C(all-gather(x))), where C is a chain of views (reshape,
// transpose, copy, bitcast) that keep the gathered dim whole and at most a convert and a scaling
// (a dequantization) after the all-gather; x may itself be a dequantization of an FP8 value.
struct AgPlan {
  HloInstruction* dot = nullptr;
  HloInstruction* ag = nullptr;
  int side = 0;  // 0: the gathered operand is the lhs, 1: the rhs
  PartitionRing ring;
  int64_t gathered_dim = -1;  // of the dot operand (after the views)
  bool contracting = false;
  bool batch = false;     // gathered dim is a batch dim: slice the stationary operand and DUS
  int64_t out_dim = -1;   // non-contracting/batch: output dim written by dynamic-update-slice
  int64_t stat_dim = -1;  // contracting/batch: stationary operand dim that is dynamic-sliced
  int64_t block = 0;      // shard length along the gathered dim (of the dot operand)
  OperandCarry window, stationary;
  // Accumulator type: f32 for contracting-dim loops of narrower float dots (the accumulator
  // stays on the partition, so it is summed in f32 and converted once after the loop), else the
  // dot's type.
  PrimitiveType acc_type = PrimitiveType::kInvalid;
  std::string note;  // appended to the applied remark (threshold figures, owner choice)
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
  int64_t out_dim = -1;      // scattered output dim (of the dot)
  int64_t block = 0;
  // Views between the dot and the reduce-scatter, re-created on the loop's result (shard shapes).
  std::vector<ViewStep> result_views;
  // How the operands are carried (FP8 with per-row/per-channel scales moved into the body; else
  // the operands as they are, dequantizations included, for the handler).
  OperandCarry lhs, rhs;
  std::string note;  // appended to the applied remark (threshold figures)
};

// The all-gather a dot operand reads, through the ops an AG loop can carry into its body (views,
// convert, scaling by a broadcast), in order from the all-gather's user to the dot operand.
struct GatheredChain {
  HloInstruction* ag = nullptr;
  std::vector<HloInstruction*> ops;
};
// nullopt when `dot`'s operand `side` is not such a chain; then *why is set (for a remark) only
// when an all-gather sits right below an op the chain cannot cross.
// *stuck (if non-null) receives that all-gather.
std::optional<GatheredChain> TraceGatheredOperand(HloInstruction* dot, int side, std::string* why,
                                                  HloInstruction** stuck = nullptr);

// Maps dim `dim` of a view's operand, split in n blocks, to the dim of its result that holds the
// same blocks (reshape, bitcast, transpose, copy). False with *why (naming the view and the dim
// it breaks) when no result dim does.
bool MapViewForward(const HloInstruction* view, int64_t dim, int64_t n, int64_t* out_dim,
                    std::string* why);
// The inverse: dim `dim` of the view's result, split in n blocks, to the operand dim that holds
// the same blocks.
bool MapViewBackward(const HloInstruction* view, int64_t dim, int64_t n, int64_t* in_dim,
                     std::string* why);

// Fills p.gathered_dim, p.block, p.window and p.stationary from the chain (see
// windowed_einsum_operands.cc); p.dot, p.side and p.ring must be set. False with *why.
bool PlanAgOperands(DecomposerContext& ctx, const GatheredChain& chain, AgPlan& p,
                    std::string* why);

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

// The other possible owner of a loop when the owner decides the cache type: the best wide
// consumer where the FP8 rule chose an FP8 one (or the reverse under loop-owner=wide).
struct OwnerAlternative {
  HloInstruction* dot = nullptr;  // nullptr: no alternative
  int side = 0;
  GatheredChain chain;
  bool fp8 = false;  // whether the alternative is an FP8 consumer
  std::string note;  // its remark note, as *note for the owner
};

// Among the dots that read `dot`'s all-gather operand `side` (or another all-gather of the same
// value with the same dims and groups), the one that should own the loop: with
// ctx.options.loop_owner auto or fp8, an FP8 dot (both operands derive from FP8) before a wide
// one, then most FLOPs, then first in `post_order`; with wide, the wide dot with most FLOPs
// first. Consumers that depend on another consumer are never chosen. Returns `dot` when it has
// no competitor; sets *owner_side and, when there are several consumers, *note (for the remark).
// When both an FP8 and a wide consumer could own the loop, *alt (if non-null) is the best of the
// other kind (the cost gate weighs the two caches), else alt->dot is nullptr.
HloInstruction* ChooseLoopOwner(DecomposerContext& ctx, HloInstruction* dot, int side,
                                const GatheredChain& chain,
                                const std::vector<HloInstruction*>& post_order, int* owner_side,
                                GatheredChain* owner_chain, std::string* note,
                                OwnerAlternative* alt = nullptr);

// Builds `c.base` after `c.views` in `comp` (the state element of the carried operand).
HloInstruction* BuildCarriedValue(HloComputation* comp, const OperandCarry& c);

// Rebuilds a dot operand in a loop body from `value` (the carried value, or its slice): c.steps
// in order; scale step i reads scales[i] (a state element or the step's travelled scale), sliced
// at `off` on its slice_dim (block `block`) when its mode is kSliced.
HloInstruction* RebuildOperand(Emitter& b, const OperandCarry& c, HloInstruction* value,
                               const std::vector<HloInstruction*>& scales, HloInstruction* off,
                               const RingValues& ring, int64_t block, const std::string& tag);

// Removes each seed that lost its last user and, transitively, its operands that did (never
// parameters, side-effecting ops or the root); records them in ctx.removed.
absl::Status RemoveDeadChains(DecomposerContext& ctx, const std::vector<HloInstruction*>& seeds);

// Sets p.contracting / p.batch / p.out_dim / p.stat_dim from p.gathered_dim and p.block.
bool ClassifyGatheredDim(AgPlan& p, std::string* why);

// Plans an AG loop for `dot` whose operand `side` reads all-gather `chain.ag`.
std::optional<AgPlan> PlanAllGatherDot(DecomposerContext& ctx, HloInstruction* dot, int side,
                                       const GatheredChain& chain, std::string* why);
// RS operands: an operand dequantized with a per-row / per-channel (non-scalar) scale is carried
// as FP8 with its scale, dequantized in the body after its slice (the scale sliced with it);
// others as they are. Fills p.lhs / p.rhs.
void PlanRsOperands(RsPlan& p);

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

// Collectives in synchronous or async form (windowed_einsum_async.cc). `v` is the value the
// program reads: the collective itself or the -done of an async pair.
// The -start of the pair whose -done is `v` (through async-update), or nullptr.
HloInstruction* AsyncStartOf(HloInstruction* v);
// The instruction holding the collective's attributes (replica_groups, dimensions, channel_id,
// to_apply): `v` itself, the -start (all-gather-start, all-reduce-start, sugared X-start), or the
// root of the computation an async-start wraps. nullptr when `v` is not a collective.
const HloInstruction* CollectiveAttributes(const HloInstruction* v);
// kAllGather, kReduceScatter, kAllReduce, kAllToAll for either form; kTuple when not one.
HloOpcode CollectiveKind(const HloInstruction* v);
// The data operand (of the collective or of its -start); nullptr unless there is exactly one.
HloInstruction* CollectiveInput(HloInstruction* v);
// The names a collective goes by (Remark::about): `v`, the -start of its async pair, the
// collective an async-start wraps.
std::vector<std::string> CollectiveNames(const HloInstruction* v);
// "all-gather 'xg'" or "async all-gather 'ags'/'agd'", for remarks.
std::string CollectiveText(const HloInstruction* v);

// "" when every reader of `result` is a dot, directly or through the ops an AG loop carries
// (views, convert, scaling); else the first other reader, for a remark ("add 'u'").
std::string NonWindowedReader(HloInstruction* result);

// Text for remarks: "a ring of 4 partitions (replica_groups={{0,1,2,3}})".
std::string RingText(const PartitionRing& ring);
// Text describing how an operand is carried ("'x' is f8e4m3fn: carried as FP8", ...), or "".
std::string CarriedText(HloInstruction* v);
// Replaces `old` by `repl` (moving its sharding), removes `old` and records it in ctx.removed.
absl::Status FinishReplace(DecomposerContext& ctx, HloInstruction* old, HloInstruction* repl);

}  // namespace weave::windowed_einsum
