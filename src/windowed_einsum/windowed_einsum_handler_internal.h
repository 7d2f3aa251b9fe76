// Internals of the windowed-einsum-handler pass (windowed_einsum/windowed_einsum_handler.h), shared by the
// files that implement its steps; not for use elsewhere.
//
//   windowed_einsum_handler.cc           the pass driver: recognise the loops of a computation,
//                                        then run the steps below on each, in this order
//   windowed_einsum_handler_fp8_shift.cc 1. move dequantize(fp8, scale) into the loop (spec §2)
//   windowed_einsum_handler_cache.cc     2. serve all-gathers of the windowed operand from a
//                                           cache filled by the loop (spec §3)
//   windowed_einsum_handler_cache_type.cc 2b. FP8 or wide cache (option, or the cost gate)
//   windowed_einsum_handler_unroll.cc    3. full unrolling (spec §5)
//   windowed_einsum_handler_partials.cc  3b. contracting-dim loops: partial products collected
//                                           outside the add chain (spec §8)
//   windowed_einsum_handler_streams.cc   4. compute streams and scheduling hints (spec §4)
//   windowed_einsum_handler_ir.cc        IR helpers and the per-run state below
//
// Spec: ../shared/specs/windowed-einsum-handler.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "hlo/builders.h"
#include "windowed_einsum/windowed_loop.h"
#include "hlo/ir.h"
#include "nlohmann/json.hpp"
#include "windowed_einsum/windowed_einsum_handler.h"
#include "passes/cost_oracle.h"
#include "passes/gpu_backend_config.h"

namespace weave::handler_internal {

using Json = nlohmann::ordered_json;

// ---- small IR helpers (windowed_einsum_handler_ir.cc) ----

// (Typed builders: hlo/builders.h.)
// Removes `i` if nothing reads it, then its operands that became dead (targeted, not a full DCE,
// so that the pass stays linear in the module size). Instructions with control predecessors are
// kept, like everything IsRemovableWhenUnused refuses.
absl::Status RemoveIfDead(HloComputation* c, HloInstruction* i);
// A new loop init waiting to take over the name of the init it replaced (see ReplaceInit):
// `name` once the old one is gone, applied only if the instruction still exists and still has its
// `temporary` name (a later step may have replaced it in turn, and dead-code removal freed it).
struct PendingRename {
  std::string name;
  std::string temporary;
};
using PendingRenames = absl::flat_hash_map<HloInstruction*, PendingRename>;
// Gives the while `w` a new init tuple of `ops` and the loop state shape `state`. The old init,
// once unused, is left for the dead-code removal at the end of the computation (removing one
// instruction at a time from a large computation is linear each time); the new init takes over
// its name then (*rename, applied by ApplyPendingRenames). O(1) besides the new tuple.
absl::Status ReplaceInit(HloInstruction* w, const Shape& state, std::vector<HloInstruction*> ops,
                         PendingRenames* rename);
// After `comp`'s dead-code removal: gives each pending instruction that is still in `comp` (and
// still named as when it was made) the name of the init it replaced. Linear in `comp`.
void ApplyPendingRenames(HloComputation* comp, PendingRenames* rename);
// Replaces every use of `old` by `v` among the given users (snapshot), and the root.
absl::Status ReplaceUses(HloInstruction* old, const std::vector<HloInstruction*>& users,
                         HloInstruction* v);
// XLA's prefix for the computations of a fully unrolled loop (WindowedEinsumHandler).
inline constexpr char kUnrolledPrefix[] = "unrolled_";
// A backend_config as a JSON object (empty text = empty object); *ok = false if not an object.
Json ParseConfig(const std::string& text, bool* ok);

// The instruction holding an all-gather's attributes (operand, dimensions, replica groups,
// channel): the all-gather itself, or for the async form all-gather-done(all-gather-start(x)) the
// start (when the done is its only user). nullptr for anything else.
const HloInstruction* GatherAttributes(const HloInstruction* ag);

// True for a pred conditional(c, x, x) whose true branch permutes its parameter once and whose
// false branch returns it (the rolled ring guard).
bool IsGuardedPermute(const HloInstruction* u, const HloInstruction* x);

// The scalar dequantizations reading all-gather `ag` of an FP8 value (multiply or divide of
// convert(ag) by a broadcast scalar, of type bf16/f16/f32), when they are all of its readers
// (each convert(ag) read only by such roots); nullopt otherwise, with *why set
// (windowed_einsum_handler_cache_type.cc).
std::optional<std::vector<DequantMatch>> DequantReaders(HloInstruction* ag, std::string* why);

// ---- per-run state ----

// What the FP8 shift replaced in a loop's init tuple: the wide operands (the dequantizations, or
// views of them) and their dequantizations. All-gathers of those wide values can still be served
// by the loop's FP8 cache.
struct ShiftedOperands {
  HloInstruction* wide[2] = {nullptr, nullptr};
  DequantMatch dq[2];
};

// "entry parameters 'x' have no sharding and count as replicated (...)" for the unannotated
// parameters a replication proof relied on; empty when there are none.
std::string UnannotatedNote(const ReplicationProof& proof);

// One all-gather the cache (step 2) will serve.
struct CacheUse {
  HloInstruction* all_gather = nullptr;
  int64_t dim = 0;
  // FP8 cache: the all-gather read this dequantization of the loop's FP8 operand.
  std::optional<DequantMatch> dequant;
};

// A loop that circulates the value an all-gather gathers: a candidate to serve it (step 2).
struct CacheCandidate {
  HloInstruction* loop = nullptr;
  std::optional<DequantMatch> dequant;  // set: the all-gather reads the value dequantized
};
// The loops MatchWindowedLoop matched, by while (step 2).
using LoopsByWhile = std::unordered_map<HloInstruction*, WindowedLoop>;
// The caches step 2 will add: by the loop's position, the loop and the all-gathers it serves.
using PlannedCaches = std::map<int64_t, std::pair<HloInstruction*, std::vector<CacheUse>>>;

// The pass on one module. Each step returns whether it changed the loop and sets *msg to the
// remark (what was done, or the first condition that failed).
class Handler {
 public:
  // `oracle`: the cost gate (nullptr: none), asked for the cache type when `cache_type` is
  // kAuto.
  Handler(HloModule* m, bool unroll, XlaBackendConfigVersion backend_config,
          WindowedEinsumHandler::CacheType cache_type, CostOracle* oracle,
          std::function<void(std::string, bool, std::string)> remark,
          std::function<void(std::string, std::string)> analysis)
      : module_(m),
        unroll_(unroll),
        backend_config_(backend_config),
        cache_type_(cache_type),
        oracle_(oracle),
        remark_(std::move(remark)),
        analysis_(std::move(analysis)) {}

  absl::StatusOr<bool> Run();

 private:
  // Driver (windowed_einsum_handler.cc).
  absl::Status Prepare();
  absl::StatusOr<bool> RunOnComputation(HloComputation* comp);
  absl::StatusOr<bool> RunOnLoops(HloComputation* comp, const std::vector<HloInstruction*>& whiles,
                                  const std::vector<HloInstruction*>& gathers,
                                  const std::vector<HloInstruction*>& order);

  // The steps that rewrite a loop take its while `w` (mutable) beside what MatchWindowedLoop found.
  // Step 1, FP8 shift (windowed_einsum_handler_fp8_shift.cc).
  absl::StatusOr<bool> ShiftFp8(HloInstruction* w, const WindowedLoop& L,
                                std::string* msg);
  absl::Status RetypeBranch(HloInstruction* cond, PrimitiveType t);
  // The operands' dequantizations and the body's FP8 carriers (defined in the step's file).
  struct Fp8ShiftPlan;
  // Why the shift may not apply for the loop's scales and users: the windowed operand's scale of
  // an all-gather loop not proven the same within each ring group, or the while read other than
  // by get-tuple-element ("" when it may).
  std::string WhyNotShiftScales(HloInstruction* w, const WindowedLoop& L, const Fp8ShiftPlan& plan);
  // The rewrite: FP8 operands and their scales in the loop state, the carriers retyped, a
  // dequantization for each other reader inside the body and for the readers after the loop.
  absl::Status RewriteFp8Shift(HloInstruction* w, const WindowedLoop& L, Fp8ShiftPlan& plan);
  absl::Status RetypeCarriers(const WindowedLoop& L, Fp8ShiftPlan& plan,
                              HloInstruction* const scale_gte[2]);
  // The groups of partitions the loop's ring connects.
  std::vector<std::vector<int64_t>> LoopRingGroups(const WindowedLoop& L) const;

  // Step 2, activation cache (windowed_einsum_handler_cache.cc): PlanCaches finds, for every
  // all-gather of `gathers`, the loop that circulates the gathered value and checks that the
  // loop visits exactly the gathered blocks (MatchAllGather); AddCache rewrites one loop.
  absl::StatusOr<bool> PlanAndAddCaches(HloComputation* comp,
                                        const std::vector<HloInstruction*>& loops,
                                        const std::vector<HloInstruction*>& gathers);
  std::string MatchAllGather(HloInstruction* ag, const WindowedLoop& L, CacheUse* use);
  // Indexes `comp` topologically into topo_ (valid, and position_ trusted again).
  void IndexTopologically(HloComputation* comp);
  // The first of `candidates` (loops of `matched`) whose cache can serve all-gather `ag`
  // (attributes `attrs`; *use filled): no cache yet, MatchAllGather, the dim of the all-gathers
  // already planned for it in `caches`, a dequantization's scale the same within each group.
  // nullptr if none; *reasons gets why each candidate is not.
  HloInstruction* ChooseCacheLoop(HloInstruction* ag, const HloInstruction* attrs,
                                  const std::vector<CacheCandidate>& candidates,
                                  const LoopsByWhile& matched, const PlannedCaches& caches,
                                  CacheUse* use, std::vector<std::string>* reasons);
  HloInstruction* BlockOffset(const WindowedDot& d, int64_t w, int64_t dim);
  bool IsAncestorOfWhile(const HloInstruction* u, const HloInstruction* w);
  // The readers of `v` the cache may serve: those loop `w` does not depend on (the others are
  // named in *kept).
  std::vector<HloInstruction*> RewirableReaders(HloInstruction* v, HloInstruction* w,
                                                std::vector<std::string>* kept);
  // The cache phase's topological index of `h` (topo_), or -1 (added since, or none kept).
  int64_t TopoOf(const HloInstruction* h) const;
  // Keeps topo_ a topological order after `r` was made to read loop `w`'s result (an edge
  // w -> r): Pearce-Kelly's repair, bounded by the instructions between r and w.
  void RepairTopo(HloInstruction* w, HloInstruction* r);
  // The partition groups of an all-gather (empty: one group of every partition).
  std::vector<std::vector<int64_t>> GatherGroups(const HloInstruction* ag) const;
  // The dequantization a wide cache stores its shards with: the one every use shares, either
  // the all-gather's operand (CacheUse::dequant) or, for an all-gather of the FP8 value itself,
  // the dequantizations of it that are its only readers (their roots then read the cache).
  struct WideForm {
    HloInstruction* scale = nullptr;  // scalar, of type `wide`
    bool is_divide = false;
    PrimitiveType wide = PrimitiveType::kInvalid;
    // Per use (same index as the uses): the dequantizations of an FP8 all-gather, whose roots
    // then read the cache (DequantReaders, found once); empty for a use with
    // CacheUse::dequant.
    std::vector<std::vector<DequantMatch>> readers;
  };
  // `wide`: the wide cache in `form` (from WhyNoWideCache), else the cache in the loop's
  // windowed element type.
  absl::StatusOr<bool> AddCache(HloInstruction* w, const WindowedLoop& L,
                                std::vector<CacheUse>& uses, const WideForm* wide,
                                std::string* msg);
  // AddCache's steps. Appends the cache (zeros on entry) to loop w's state and, for a wide cache
  // the loop does not already pass through, its scale after it (*new_state: the state's shape).
  // Returns the scale's tuple index (-1 without a wide cache). Errors: the IR refuses an edit.
  absl::StatusOr<int64_t> AppendCacheToState(HloInstruction* w, const WindowedLoop& L,
                                             const Shape& cache_shape, const WideForm* wide,
                                             Shape* new_state);
  // The loop now reads wide cache scale `scale`: stops trusting position_ and topo_ when the
  // scale comes after loop `w` in them.
  void NoteScaleEdge(const HloInstruction* scale, const HloInstruction* w);
  // In L's body: the cache (tuple index n) updated by one dynamic-update-slice per dot at its
  // block offset on `dim` (`offsets`, by dot; the shard dequantized with the scale at
  // `scale_slot` for a wide cache), and the root passing it (and a new scale element) on.
  static void FillCache(const WindowedLoop& L, const std::vector<HloInstruction*>& offsets,
                        const Shape& cache_shape, int64_t dim, int64_t n, int64_t scale_slot,
                        const WideForm* wide, const Shape& state);
  // After loop `w`: `cache` (its element n, of `cache_type`) replaces each use's all-gather (or,
  // for an FP8 all-gather and a wide cache, its dequantizations) for the readers the loop does
  // not depend on (the others named in *kept), with a remark per use. Returns how many readers
  // read the cache now. Errors: the IR refuses an edit.
  absl::StatusOr<int64_t> RewireToCache(HloInstruction* w, const std::vector<CacheUse>& uses,
                                        const WideForm* wide, HloInstruction* cache, int64_t n,
                                        PrimitiveType cache_type,
                                        std::vector<std::string>* kept);
  // Why a wide cache cannot serve `uses` of loop L ("" when it can, with *form set): the loop
  // circulates no FP8; an all-gather of the FP8 value has a reader that is not a scalar
  // dequantization; the dequantizations differ; or the scale depends on the loop.
  std::string WhyNoWideCache(const WindowedLoop& L, const std::vector<CacheUse>& uses,
                             WideForm* form);
  // The cache type for loop L serving `uses`: the option, or with kAuto the cost gate's choice
  // (FP8 without a gate). *note gets the remark's addition (the estimates, or why not wide).
  bool ChooseWideCache(const WindowedLoop& L, const std::vector<CacheUse>& uses, WideForm* form,
                       std::string* note);

  // Step 3, unrolling (windowed_einsum_handler_unroll.cc).
  absl::StatusOr<bool> Unroll(HloInstruction* w, const WindowedLoop& L,
                              std::string* msg);
  // Adds trips 1..T-1 of L's body: each a copy of `cloned_order` (the instructions that depend on
  // the loop state) reading the previous trip's values and its counter ks[t] as a constant of
  // type `ct`. Returns the root operands after the last trip.
  std::vector<HloInstruction*> CloneTrips(const WindowedLoop& L,
                                          const std::vector<HloInstruction*>& cloned_order,
                                          const std::vector<int64_t>& ks, PrimitiveType ct);
  // Folds the scalar arithmetic on constants of `body` (the counter's) and inlines the taken
  // branch of each guarded permute whose predicate became a constant.
  absl::Status FoldCounterArithmetic(HloComputation* body);
  // Conditional `i` of `body` with a constant predicate: its taken branch inlined in its place
  // (nothing when the predicate cannot be evaluated or the branch has not one parameter).
  absl::Status InlineTakenBranch(HloComputation* body, HloInstruction* i);

  // Step 3b, contracting-dim loops (windowed_einsum_handler_partials.cc): the partial products
  // of a fully unrolled AG loop that accumulates into one element are collected in a buffer and
  // reduced after the loop.
  absl::StatusOr<bool> CollectPartials(HloInstruction* w, const WindowedLoop& L,
                                       std::string* msg);
  HloComputation* ScalarAddComputation(PrimitiveType t);

  // Step 4, streams (windowed_einsum_handler_streams.cc).
  absl::StatusOr<bool> AnnotateStreams(const WindowedLoop& L, std::string* msg);

  // Shared (windowed_einsum_handler_ir.cc).
  void EnsureUnshared(HloInstruction* w);
  // Renames computation `c` to `name`, or name.1, name.2, ... if another computation has it.
  void RenameComputation(HloComputation* c, const std::string& name);
  // Records a computation the handler added (for RenameComputation's name set).
  void NoteComputation(const HloComputation* c);
  std::vector<int64_t> CounterSequence(const WindowedLoop& L);

  HloModule* module_;
  bool unroll_;
  XlaBackendConfigVersion backend_config_;
  WindowedEinsumHandler::CacheType cache_type_;
  CostOracle* oracle_;
  std::function<void(std::string, bool, std::string)> remark_;
  std::function<void(std::string, std::string)> analysis_;  // informational remarks
  int64_t next_queue_id_ = 1;
  int64_t next_channel_id_ = 1;
  absl::flat_hash_map<const HloComputation*, int64_t> callers_;
  std::set<HloComputation*> maybe_orphaned_;
  absl::flat_hash_map<const HloInstruction*, int64_t> position_;  // current computation
  // During the cache phase: a topological index of the computation's instructions (operands
  // first), by unique_id, kept topological as the caches rewire readers (RepairTopo). Ancestor
  // walks stop below their target's index. Instructions added since have none (walked through);
  // topo_valid_ false: no index (every walk is whole).
  absl::flat_hash_map<int64_t, int64_t> topo_;
  bool topo_valid_ = false;
  // A wide cache's scale became an operand of a loop it comes after in position_: position_ is
  // no longer a topological order of the computation (cache phase; IsAncestorOfWhile stops
  // taking its shortcut).
  bool order_stale_ = false;
  // Outer computation: dead instructions are removed in one sweep at the end (linear), then
  // these instructions get their predecessors' names.
  PendingRenames rename_;
  // Loops the FP8 shift rewrote, with what it replaced (current computation).
  absl::flat_hash_map<const HloInstruction*, ShiftedOperands> shifted_;
  // Scalar add computations made for reductions, by type (shared by the whole module).
  absl::flat_hash_map<PrimitiveType, HloComputation*> add_computations_;
  // Names of the module's computations, built on the first rename.
  absl::flat_hash_set<std::string> computation_names_;
  bool names_built_ = false;
};

}  // namespace weave::handler_internal
