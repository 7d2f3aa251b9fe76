#include "windowed_einsum/windowed_einsum_decomposer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "analysis/user_attributes.h"
#include "hlo/gemm_call.h"
#include "passes/cost_oracle.h"
#include "windowed_einsum/windowed_einsum_plan.h"
#include "windowed_einsum/windowed_einsum_rs_ring.h"
#include "windowed_einsum/windowed_einsum_uneven.h"
#include "hlo/status_macros.h"

// The pass driver: visits every computation in post order and hands each candidate to the
// planner (windowed_einsum_plan.cc) and the loop builders (windowed_einsum_ag_loop.cc,
// windowed_einsum_rs_loop.cc); the loop-building primitives are in windowed_einsum_emitter.cc.

namespace weave {
namespace {

using windowed_einsum::DecomposerContext;

// The cost gate (passes/cost_oracle.h): one decision per candidate, asked once every structural
// check passed, with the one-stream bound (CostQuery::one_stream_bound: a loop must pay even if
// its partial GEMMs run one after another, the only form measured at small M, row C3). An all-gather is decided once for every dot that reads it (Q/K/V share one loop,
// whose GEMMs hide its transfers together); `left` remembers the all-gathers the gate left alone,
// with the dot whose remark says why, for the other dots' remarks.
struct Gate {
  CostOracle* oracle = nullptr;
  absl::flat_hash_map<const HloInstruction*, std::string> left;
};

// The sweep's topological index, for the gate's region walk (CostQuery::topological_index).
std::function<int64_t(const HloInstruction*)> Index(const DecomposerContext& ctx) {
  return [&ctx](const HloInstruction* h) { return ctx.PositionOf(h); };
}

// Asks the gate about one candidate. True when it is to be rewritten (or there is no gate); on
// false the missed remark is given. The estimate is appended to `note` for the applied remark.
bool GateAllows(DecomposerContext& ctx, Gate& gate, const HloInstruction* location,
                const HloInstruction* about, std::vector<const HloInstruction*> seeds,
                std::string what, std::string* note) {
  if (gate.oracle == nullptr) return true;
  CostQuery q = CostQuery::WithOrWithout("windowed-einsum-decomposer", location->name(),
                                         std::move(what), std::move(seeds));
  q.one_stream_bound = true;
  q.topological_index = Index(ctx);
  CostEstimate e = gate.oracle->Decide(q);
  if (e.chosen == 0) {
    ctx.remark(location->name(), false, absl::StrCat("not decomposed: ", e.Note()),
               windowed_einsum::CollectiveNames(about));
    return false;
  }
  absl::StrAppend(note, "; ", e.Note());
  return true;
}

// A reduce-scatter candidate: no loop (false), or the loop in XLA's layout or the ring layout
// (*ring). With the gate, the variants the plan allows are estimated; without it, the option.
bool ChooseRsLoop(DecomposerContext& ctx, Gate& gate, const HloInstruction* location,
                  windowed_einsum::RsPlan& plan, std::string what, bool* ring) {
  std::string why_not_ring;
  const bool ring_ok = windowed_einsum::CanBuildRsRingLoop(plan, &why_not_ring);
  *ring = ctx.options.rs_ring && ring_ok;
  if (gate.oracle == nullptr) return true;
  std::vector<const HloInstruction*> seeds = {plan.dot, plan.reduce, plan.result};
  CostQuery q = CostQuery::WithOrWithout("windowed-einsum-decomposer", location->name(),
                                         std::move(what), seeds, "with the loop",
                                         {{"windowed-einsum-rs-layout", "xla"}});
  if (ring_ok) {
    q.variants.push_back({"with the ring loop", true, {{"windowed-einsum-rs-layout", "ring"}}});
  }
  q.one_stream_bound = true;
  q.topological_index = Index(ctx);
  CostEstimate e = gate.oracle->Decide(q);
  if (e.chosen == 0) {
    ctx.remark(location->name(), false, absl::StrCat("not decomposed: ", e.Note()),
               windowed_einsum::CollectiveNames(plan.reduce));
    return false;
  }
  *ring = e.chosen == 2;
  absl::StrAppend(&plan.note, "; ", e.Note());
  return true;
}

// The cost gate's seeds of an all-gather candidate: the all-gather, the views between it and
// the dot, and every dot reading the gathered value, directly or through the ops a loop carries
// (views, converts, scaling; as ChooseLoopOwner finds its consumers): the gate decides for the
// all-gather, so its region holds every dot the decision covers (else the estimate without the
// loop leaves out GEMMs the compiled module runs). Appends the dots' names to `dots`.
void AddAgSeeds(const HloInstruction* dot, const windowed_einsum::GatheredChain& chain,
                std::vector<const HloInstruction*>* seeds, std::vector<std::string>* dots) {
  auto add = [&](const HloInstruction* i) {
    if (std::find(seeds->begin(), seeds->end(), i) == seeds->end()) seeds->push_back(i);
  };
  auto add_dot = [&](const HloInstruction* d) {
    if (std::find(seeds->begin(), seeds->end(), d) != seeds->end()) return;
    seeds->push_back(d);
    dots->push_back(absl::StrCat("'", d->name(), "'"));
  };
  add(chain.ag);
  for (const HloInstruction* op : chain.ops) add(op);
  add_dot(dot);
  std::vector<std::pair<const HloInstruction*, int>> work{{chain.ag, 0}};
  absl::flat_hash_set<const HloInstruction*> visited;
  while (!work.empty()) {
    auto [v, depth] = work.back();
    work.pop_back();
    if (!visited.insert(v).second) continue;
    for (const HloInstruction* u : v->users()) {
      if (u->opcode() == HloOpcode::kDot) {
        std::string why;
        for (int s = 0; s < 2 && u->operand_count() == 2; ++s) {
          std::optional<windowed_einsum::GatheredChain> c =
              windowed_einsum::TraceGatheredOperand(const_cast<HloInstruction*>(u), s, &why);
          if (c && c->ag == chain.ag) {
            add_dot(u);
            break;
          }
        }
      } else if (IsCublasGemmCall(*u)) {
        // A GEMM already rewritten to cuBLAS (compiling a compiled module again) that reads the
        // gathered value: no candidate, but its time is the module's in both variants.
        add(u);
      } else if (depth < 8) {
        work.push_back({u, depth + 1});
      }
    }
  }
}

// Plans and builds the loop of `dot`, whose operand `side` is an all-gather; reports a missed
// remark when it does not. With the gate and an alternative owner of the other kind
// (`alt`, windowed_einsum_owner.cc), the gate weighs no loop, the loop on the FP8 dot and the
// loop on the wide dot, and the chosen owner's loop is built. Returns whether it built a loop;
// *built (if non-null) is the dot whose loop it built.
absl::StatusOr<bool> PlanAndBuild(DecomposerContext& ctx, Gate& gate, HloInstruction* dot,
                                  int side, const windowed_einsum::GatheredChain& chain,
                                  const std::string& note,
                                  const windowed_einsum::OwnerAlternative* alt = nullptr,
                                  HloInstruction** built = nullptr) {
  if (built != nullptr) *built = nullptr;
  std::string why;
  std::optional<windowed_einsum::AgPlan> plan =
      windowed_einsum::PlanAllGatherDot(ctx, dot, side, chain, &why);
  if (!plan) {
    ctx.remark(dot->name(), false, why, windowed_einsum::CollectiveNames(chain.ag));
    return false;
  }
  absl::StrAppend(&plan->note, note);
  HloInstruction* owner = dot;
  if (gate.oracle != nullptr) {
    std::vector<const HloInstruction*> seeds;
    std::vector<std::string> dots;
    AddAgSeeds(dot, chain, &seeds, &dots);
    std::optional<windowed_einsum::AgPlan> alt_plan;
    if (alt != nullptr && alt->dot != nullptr) {
      std::string alt_why;
      alt_plan = windowed_einsum::PlanAllGatherDot(ctx, alt->dot, alt->side, alt->chain, &alt_why);
      if (alt_plan) AddAgSeeds(alt->dot, alt->chain, &seeds, &dots);
    }
    std::string what = absl::StrCat("all-gather '", chain.ag->name(), "' -> dot",
                                    dots.size() > 1 ? "s " : " ", absl::StrJoin(dots, ", "));
    if (!alt_plan) {
      if (!GateAllows(ctx, gate, dot, chain.ag, seeds, std::move(what), &plan->note)) {
        gate.left[chain.ag] = dot->name();
        return false;
      }
    } else {
      // The owner's kind: one query, variants in the order no loop, the loop on the FP8 dot,
      // the loop on the wide dot (windowed-einsum-loop-owner).
      const bool owner_fp8 = !alt->fp8;
      const HloInstruction* fp8_dot = owner_fp8 ? dot : alt->dot;
      const HloInstruction* wide_dot = owner_fp8 ? alt->dot : dot;
      CostQuery q = CostQuery::WithOrWithout(
          "windowed-einsum-decomposer", dot->name(), absl::StrCat(what, " (FP8 or wide owner)"),
          seeds, absl::StrCat("with the loop on the FP8 dot '", fp8_dot->name(), "'"),
          {{"windowed-einsum-loop-owner", "fp8"}});
      q.variants.push_back({absl::StrCat("with the loop on the wide dot '", wide_dot->name(), "'"),
                            true,
                            {{"windowed-einsum-loop-owner", "wide"}}});
      q.fallback = 1;  // without an estimate: the FP8 rule, as without the gate
      q.one_stream_bound = true;
      q.topological_index = Index(ctx);
      CostEstimate e = gate.oracle->Decide(q);
      if (e.chosen == 0) {
        ctx.remark(dot->name(), false, absl::StrCat("not decomposed: ", e.Note()),
                   windowed_einsum::CollectiveNames(chain.ag));
        gate.left[chain.ag] = dot->name();
        return false;
      }
      const bool chose_fp8 = e.chosen == 1;
      if (chose_fp8 != owner_fp8) {
        plan = std::move(alt_plan);
        plan->note = absl::StrCat("; ", alt->note);
        owner = alt->dot;
      }
      absl::StrAppend(&plan->note, "; ", e.Note());
    }
  }
  RETURN_IF_ERROR(windowed_einsum::BuildAgLoop(ctx, *plan));
  if (built != nullptr) *built = owner;
  return true;
}

// One dot reading an all-gather: left for the handler's activation cache when a loop already
// circulates the gathered value and the cache can serve it; else the loop goes to the best
// consumer of the all-gather (windowed_einsum_owner.cc), which may be another dot; the others
// are then left for the cache, or get their own loops. Returns whether `dot` was decomposed or
// left for the cache (then its other operand is not tried); sets *changed when the module changed.
absl::StatusOr<bool> DecomposeAllGatherDot(DecomposerContext& ctx, Gate& gate, HloInstruction* dot,
                                           int side, const windowed_einsum::GatheredChain& chain,
                                           const std::vector<HloInstruction*>& order,
                                           bool* changed) {
  HloInstruction* ag = chain.ag;
  if (UserDisablesCollectiveMatmul(*dot)) {
    // Not a loop of its own, nor a loop's owner; another consumer's loop may serve it its
    // gathered operand through the handler's cache.
    ctx.remark(dot->name(), false,
               absl::StrCat("dot '", dot->name(), "' carries the user's _xla_collective_matmul=\"none\": ",
                            "no windowed loop, as XLA honours it"),
               windowed_einsum::CollectiveNames(ag));
    return false;
  }
  if (auto it = gate.left.find(ag); it != gate.left.end()) {
    if (it->second != dot->name()) {
      ctx.remark(dot->name(), false,
                 absl::StrCat("not decomposed: the cost gate left all-gather '", ag->name(),
                              "' alone (see '", it->second, "')"),
                 windowed_einsum::CollectiveNames(ag));
    }
    return true;
  }
  if (ctx.options.duplicate_loops) {
    absl::StatusOr<bool> r = PlanAndBuild(ctx, gate, dot, side, chain, "");
    if (r.ok()) *changed |= *r;
    return r;
  }
  std::optional<windowed_einsum::CirculatingLoop> c =
      windowed_einsum::FindCirculatingLoop(ctx, ag, dot);
  if (!c) {
    windowed_einsum::GatheredChain owner_chain;
    int owner_side = side;
    std::string owner_note;
    windowed_einsum::OwnerAlternative alt;
    HloInstruction* owner = windowed_einsum::ChooseLoopOwner(
        ctx, dot, side, chain, order, &owner_side, &owner_chain, &owner_note, &alt);
    // The alternative owner is weighed only by the gate (auto); fp8/wide force the kind.
    const windowed_einsum::OwnerAlternative* weigh =
        ctx.options.loop_owner == WindowedEinsumDecomposerOptions::LoopOwner::kAuto ? &alt
                                                                                    : nullptr;
    if (owner != dot || !owner_note.empty()) {
      HloInstruction* built = nullptr;
      ASSIGN_OR_RETURN(bool r, PlanAndBuild(ctx, gate, owner, owner_side, owner_chain,
                                            absl::StrCat("; ", owner_note), weigh, &built));
      *changed |= r;
      if (r && built == dot) return true;
      if (r) {
        c = windowed_einsum::FindCirculatingLoop(ctx, ag, dot);
      } else if (owner == dot) {
        return false;  // the missed remark is given; the dot's other operand may be tried
      }
    }
  }
  std::string note;
  if (c) {
    if (c->why_not.empty()) {
      ctx.remark(dot->name(), false,
                 absl::StrCat("all-gather '", ag->name(), "' already feeds windowed loop '",
                              c->loop->name(),
                              "' (same value, dim and ring): left for the "
                              "handler's cache (--windowed-einsum-duplicate-loops=true gives "
                              "each dot its own loop)"),
                 windowed_einsum::CollectiveNames(ag));
      return true;
    }
    note = absl::StrCat("; its own loop: loop '", c->loop->name(), "' circulates '",
                        windowed_einsum::CollectiveInput(ag)->name(),
                        "' but the handler's cache cannot serve this "
                        "all-gather (",
                        c->why_not, ")");
  }
  absl::StatusOr<bool> r = PlanAndBuild(ctx, gate, dot, side, chain, note);
  if (r.ok()) *changed |= *r;
  return r;
}

absl::StatusOr<bool> RunOnComputation(DecomposerContext& ctx, Gate& gate, HloComputation* comp) {
  bool changed = false;
  // Uneven gathered / scattered dims: the dot next to its collective first.
  std::vector<std::string> uneven;
  ASSIGN_OR_RETURN(int64_t canonical, spmd::CanonicalizeUnevenWindows(
      comp, ctx.num_partitions, ctx.module->replica_count, &uneven));
  changed |= canonical > 0;
  for (const std::string& line : uneven) ctx.remark(comp->name(), true, line, {});
  ctx.removed.clear();
  const std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
  ctx.position.clear();
  ctx.position.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    ctx.position[order[i]->unique_id()] = static_cast<int64_t>(i);
  }
  for (HloInstruction* instr : order) {
    if (ctx.removed.contains(instr)) continue;
    if (instr->opcode() == HloOpcode::kDot && instr->operand_count() == 2) {
      for (int side = 0; side < 2; ++side) {
        std::string why;
        HloInstruction* stuck = nullptr;
        std::optional<windowed_einsum::GatheredChain> chain =
            windowed_einsum::TraceGatheredOperand(instr, side, &why, &stuck);
        if (!chain) {
          if (!why.empty()) {
            ctx.remark(
                instr->name(), false, why,
                stuck ? windowed_einsum::CollectiveNames(stuck) : std::vector<std::string>{});
          }
          continue;
        }
        ASSIGN_OR_RETURN(bool r,
                         DecomposeAllGatherDot(ctx, gate, instr, side, *chain, order, &changed));
        if (r) break;
      }
    } else if (instr->opcode() == HloOpcode::kReduceScatter ||
               (instr->opcode() == HloOpcode::kAsyncDone &&
                windowed_einsum::CollectiveKind(instr) == HloOpcode::kReduceScatter)) {
      std::string why;
      std::optional<windowed_einsum::RsPlan> plan =
          windowed_einsum::PlanReduceScatter(ctx, instr, &why);
      if (!plan) {
        ctx.remark(instr->name(), false, why, windowed_einsum::CollectiveNames(instr));
        continue;
      }
      bool ring = false;
      if (!ChooseRsLoop(ctx, gate, instr, *plan,
                        absl::StrCat("dot '", plan->dot->name(), "' -> reduce-scatter '",
                                     instr->name(), "'"),
                        &ring)) {
        continue;
      }
      if (absl::Status s = ring ? windowed_einsum::BuildRsRingLoop(ctx, *plan)
                                : windowed_einsum::BuildRsLoop(ctx, *plan);
          !s.ok()) {
        return s;
      }
      changed = true;
    } else if (instr->opcode() == HloOpcode::kDynamicSlice && instr->operand_count() >= 1 &&
               windowed_einsum::CollectiveKind(instr->operand(0)) == HloOpcode::kAllReduce &&
               windowed_einsum::CollectiveInput(instr->operand(0)) != nullptr &&
               windowed_einsum::CollectiveInput(instr->operand(0))->opcode() == HloOpcode::kDot) {
      std::string why;
      std::optional<windowed_einsum::RsPlan> plan =
          windowed_einsum::PlanAllReduceSlice(ctx, instr, &why);
      if (!plan) {
        ctx.remark(instr->name(), false, why, windowed_einsum::CollectiveNames(instr->operand(0)));
        continue;
      }
      bool ring = false;
      if (!ChooseRsLoop(ctx, gate, instr, *plan,
                        absl::StrCat("dot '", plan->dot->name(), "' -> all-reduce '",
                                     plan->reduce->name(), "' -> dynamic-slice '", instr->name(),
                                     "'"),
                        &ring)) {
        continue;
      }
      if (absl::Status s = ring ? windowed_einsum::BuildRsRingLoop(ctx, *plan)
                                : windowed_einsum::BuildRsLoop(ctx, *plan);
          !s.ok()) {
        return s;
      }
      changed = true;
    }
  }
  return changed;
}

}  // namespace

absl::StatusOr<WindowedEinsumDecomposerOptions> ParseWindowedEinsumDecomposerOptions(
    const PassOptions& options) {
  WindowedEinsumDecomposerOptions o;
  ASSIGN_OR_RETURN(auto t, options.GetInt("windowed-einsum-threshold-mib", 0));
  if (t < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-threshold-mib must be >= 0, got ", t));
  }
  o.threshold_mib = t;
  // XLA's operand-bytes threshold, under our name or XLA's (the flag's own name, as `weave opt`
  // passes it through); -1 leaves it unset.
  for (const char* key : {"windowed-einsum-operand-bytes-threshold",
                          "xla_gpu_operand_bytes_threshold_for_windowed_einsum"}) {
    if (!options.Has(key)) continue;
    ASSIGN_OR_RETURN(auto b, options.GetInt(key, -1));
    if (b < -1) {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be >= -1, got ", b));
    }
    o.operand_bytes_threshold = b;
  }
  ASSIGN_OR_RETURN(auto r, options.GetInt("windowed-einsum-max-ring", 32));
  if (r < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-max-ring must be >= 1, got ", r));
  }
  o.max_ring = r;
  ASSIGN_OR_RETURN(auto d, options.GetBool("windowed-einsum-duplicate-loops", false));
  o.duplicate_loops = d;
  const std::string layout = options.GetString("windowed-einsum-rs-layout", "xla");
  if (layout != "xla" && layout != "ring") {
    return absl::InvalidArgumentError(absl::StrCat(
        "windowed-einsum-rs-layout must be xla or ring, got '", layout, "'"));
  }
  o.rs_ring = layout == "ring";
  const std::string cache = options.GetString("windowed-einsum-loop-owner", "auto");
  if (cache == "auto") {
    o.loop_owner = WindowedEinsumDecomposerOptions::LoopOwner::kAuto;
  } else if (cache == "fp8") {
    o.loop_owner = WindowedEinsumDecomposerOptions::LoopOwner::kFp8;
  } else if (cache == "wide") {
    o.loop_owner = WindowedEinsumDecomposerOptions::LoopOwner::kWide;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "windowed-einsum-loop-owner must be auto, fp8 or wide, got '", cache, "'"));
  }
  return o;
}

int64_t DevicesAddressedByCollectives(const HloModule& module) {
  int64_t count = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (!IsCollective(i->opcode()) || !i->use_global_device_ids || !i->replica_groups) continue;
      for (const auto& g : i->replica_groups->groups) {
        for (int64_t id : g) count = std::max(count, id + 1);
      }
    }
  }
  return count;
}

absl::StatusOr<bool> WindowedEinsumDecomposer::Run(HloModule* module) {
  DecomposerContext ctx;
  ctx.module = module;
  ctx.options = options_;
  ctx.sink = [this](const std::string& loc, bool applied, const std::string& msg,
                    const std::vector<std::string>& about) {
    if (about.empty()) {
      AddRemark(loc, applied, msg);
    } else {
      AddRemark(loc, applied, msg, about);
    }
  };
  ctx.next_channel = module->NextChannelId();
  ctx.num_partitions = module->num_partitions;
  const int64_t inferred = DevicesAddressedByCollectives(*module);
  if (ctx.num_partitions <= 1 && !module->has_num_partitions && module->replica_count == 1 &&
      inferred > 1) {
    ctx.num_partitions = inferred;
  }
  bool changed = false;
  // The computations async-starts wrap hold the collective itself: it is decomposed (or not)
  // from the async pair in the caller, never inside the wrapper.
  absl::flat_hash_set<const HloComputation*> wrapped;
  for (HloComputation* c : module->computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->opcode() != HloOpcode::kAsyncStart) continue;
      for (HloComputation* callee : i->called_computations()) wrapped.insert(callee);
    }
  }
  Gate gate;
  gate.oracle = cost_oracle();
  for (HloComputation* c : module->MakeComputationPostOrder()) {
    if (wrapped.contains(c)) continue;
    ASSIGN_OR_RETURN(bool r, RunOnComputation(ctx, gate, c));
    changed |= r;
  }
  if (!ctx.maybe_unused.empty()) {
    // Wrapped computations of async collectives the loops replaced.
    absl::flat_hash_set<const HloComputation*> called;
    for (HloComputation* c : module->computations()) {
      for (HloInstruction* i : c->instructions()) {
        for (HloComputation* callee : i->called_computations()) called.insert(callee);
      }
    }
    absl::flat_hash_set<const HloComputation*> done;
    for (HloComputation* c : ctx.maybe_unused) {
      if (called.contains(c) || !done.insert(c).second) continue;
      RETURN_IF_ERROR(module->RemoveComputation(c));
    }
  }
  if (changed && ctx.num_partitions != module->num_partitions) {
    // The loops read partition-id: the header must say how many partitions there are.
    module->num_partitions = ctx.num_partitions;
    module->has_num_partitions = true;
    AddRemark(module->name(), true,
              absl::StrCat("num_partitions absent from the header: ", ctx.num_partitions,
                           " partitions inferred from the replica groups of the module's "
                           "use_global_device_ids collectives (replica_count=1); header set to "
                           "num_partitions=",
                           ctx.num_partitions));
  }
  return changed;
}

WEAVE_REGISTER_PASS("windowed-einsum-decomposer",
                    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      ASSIGN_OR_RETURN(auto o, ParseWindowedEinsumDecomposerOptions(options));
                      return std::unique_ptr<HloPass>(
                          std::make_unique<WindowedEinsumDecomposer>(o));
                    });

}  // namespace weave
