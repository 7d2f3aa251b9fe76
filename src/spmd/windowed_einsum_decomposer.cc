#include "spmd/windowed_einsum_decomposer.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "passes/cost_oracle.h"
#include "spmd/windowed_einsum_plan.h"

// The pass driver: visits every computation in post order and hands each candidate to the
// planner (windowed_einsum_plan.cc) and the loop builders (windowed_einsum_ag_loop.cc,
// windowed_einsum_rs_loop.cc); the loop-building primitives are in windowed_einsum_emitter.cc.

namespace weave {
namespace {

using windowed_einsum::DecomposerContext;

// The cost gate (passes/cost_oracle.h): one decision per candidate, asked once every structural
// check passed. An all-gather is decided once for every dot that reads it (Q/K/V share one
// loop: their GEMM time hides its transfers together); `left` remembers the all-gathers the gate
// left, for the other dots' remarks. Returns true when the candidate is to be rewritten; on
// false the missed remark is given. `note` receives the estimate for the applied remark.
bool GateAllows(DecomposerContext& ctx, CostOracle* oracle, HloInstruction* location,
                std::vector<const HloInstruction*> seeds, std::string what, std::string* note) {
  if (oracle == nullptr) return true;
  CostEstimate e = oracle->Decide(CostQuery::WithOrWithout(
      "windowed-einsum-decomposer", location->name(), std::move(what), std::move(seeds)));
  if (e.chosen == 0) {
    ctx.remark(location->name(), false, absl::StrCat("not decomposed: ", e.Note()));
    return false;
  }
  absl::StrAppend(note, "; ", e.Note());
  return true;
}

absl::StatusOr<bool> RunOnComputation(DecomposerContext& ctx, CostOracle* oracle,
                                      HloComputation* comp) {
  bool changed = false;
  ctx.removed.clear();
  absl::flat_hash_map<const HloInstruction*, std::string> left;  // all-gather -> first dot
  for (HloInstruction* instr : comp->MakeInstructionPostOrder()) {
    if (ctx.removed.contains(instr)) continue;
    if (instr->opcode() == HloOpcode::kDot && instr->operand_count() == 2) {
      for (int side = 0; side < 2; ++side) {
        const HloInstruction* op = instr->operand(side);
        if (op->opcode() != HloOpcode::kAllGather) {
          // An all-gather reaching the dot through a layout/type change is a candidate this
          // pass does not handle (XLA peels one reshape/bitcast/transpose).
          switch (op->opcode()) {
            case HloOpcode::kReshape:
            case HloOpcode::kBitcast:
            case HloOpcode::kTranspose:
            case HloOpcode::kCopy:
            case HloOpcode::kConvert:
              if (op->operand_count() == 1 && op->operand(0)->opcode() == HloOpcode::kAllGather) {
                ctx.remark(instr->name(), false,
                           absl::StrCat(
                               "all-gather '", op->operand(0)->name(), "' reaches the dot through ",
                               std::string(HloOpcodeString(op->opcode())), " '", op->name(),
                               "': unsupported pattern (the dot must read the "
                               "all-gather directly)"));
              }
              break;
            default:
              break;
          }
          continue;
        }
        std::string why;
        std::optional<windowed_einsum::AgPlan> plan =
            windowed_einsum::PlanAllGatherDot(ctx, instr, side, &why);
        if (!plan) {
          ctx.remark(instr->name(), false, why);
          continue;
        }
        if (oracle != nullptr) {
          if (auto it = left.find(plan->ag); it != left.end()) {
            ctx.remark(instr->name(), false,
                       absl::StrCat("not decomposed: the cost gate left all-gather '",
                                    plan->ag->name(), "' alone (see '", it->second, "')"));
            continue;
          }
          std::vector<const HloInstruction*> seeds = {plan->ag};
          std::vector<std::string> dots;
          for (const HloInstruction* u : plan->ag->users()) {
            if (u->opcode() != HloOpcode::kDot) continue;
            seeds.push_back(u);
            dots.push_back(absl::StrCat("'", u->name(), "'"));
          }
          if (!GateAllows(ctx, oracle, instr, seeds,
                          absl::StrCat("all-gather '", plan->ag->name(), "' -> dot",
                                       dots.size() > 1 ? "s " : " ", absl::StrJoin(dots, ", ")),
                          &plan->note)) {
            left[plan->ag] = instr->name();
            continue;
          }
        }
        if (absl::Status s = windowed_einsum::BuildAgLoop(ctx, *plan); !s.ok()) return s;
        changed = true;
        break;
      }
    } else if (instr->opcode() == HloOpcode::kReduceScatter) {
      std::string why;
      std::optional<windowed_einsum::RsPlan> plan =
          windowed_einsum::PlanReduceScatter(ctx, instr, &why);
      if (!plan) {
        ctx.remark(instr->name(), false, why);
        continue;
      }
      if (!GateAllows(ctx, oracle, instr, {plan->dot, plan->result},
                      absl::StrCat("dot '", plan->dot->name(), "' -> reduce-scatter '",
                                   instr->name(), "'"),
                      &plan->note)) {
        continue;
      }
      if (absl::Status s = windowed_einsum::BuildRsLoop(ctx, *plan); !s.ok()) return s;
      changed = true;
    } else if (instr->opcode() == HloOpcode::kDynamicSlice && instr->operand_count() >= 1 &&
               instr->operand(0)->opcode() == HloOpcode::kAllReduce &&
               instr->operand(0)->operand_count() == 1 &&
               instr->operand(0)->operand(0)->opcode() == HloOpcode::kDot) {
      std::string why;
      std::optional<windowed_einsum::RsPlan> plan =
          windowed_einsum::PlanAllReduceSlice(ctx, instr, &why);
      if (!plan) {
        ctx.remark(instr->name(), false, why);
        continue;
      }
      if (!GateAllows(ctx, oracle, instr, {plan->dot, plan->reduce, plan->result},
                      absl::StrCat("dot '", plan->dot->name(), "' -> all-reduce '",
                                   plan->reduce->name(), "' -> dynamic-slice '", instr->name(),
                                   "'"),
                      &plan->note)) {
        continue;
      }
      if (absl::Status s = windowed_einsum::BuildRsLoop(ctx, *plan); !s.ok()) return s;
      changed = true;
    }
  }
  return changed;
}

}  // namespace

absl::StatusOr<WindowedEinsumDecomposerOptions> ParseWindowedEinsumDecomposerOptions(
    const PassOptions& options) {
  WindowedEinsumDecomposerOptions o;
  auto t = options.GetInt("windowed-einsum-threshold-mib", 0);
  if (!t.ok()) return t.status();
  if (*t < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-threshold-mib must be >= 0, got ", *t));
  }
  o.threshold_mib = *t;
  auto r = options.GetInt("windowed-einsum-max-ring", 32);
  if (!r.ok()) return r.status();
  if (*r < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-max-ring must be >= 1, got ", *r));
  }
  o.max_ring = *r;
  auto d = options.GetBool("windowed-einsum-duplicate-loops", false);
  if (!d.ok()) return d.status();
  o.duplicate_loops = *d;
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
  ctx.remark = [this](const std::string& loc, bool applied, const std::string& msg) {
    AddRemark(loc, applied, msg);
  };
  ctx.next_channel = module->NextChannelId();
  ctx.num_partitions = module->num_partitions;
  const int64_t inferred = DevicesAddressedByCollectives(*module);
  if (ctx.num_partitions <= 1 && !module->has_num_partitions && module->replica_count == 1 &&
      inferred > 1) {
    ctx.num_partitions = inferred;
  }
  bool changed = false;
  for (HloComputation* c : module->MakeComputationPostOrder()) {
    absl::StatusOr<bool> r = RunOnComputation(ctx, cost_oracle(), c);
    if (!r.ok()) return r.status();
    changed |= *r;
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
                      auto o = ParseWindowedEinsumDecomposerOptions(options);
                      if (!o.ok()) return o.status();
                      return std::unique_ptr<HloPass>(
                          std::make_unique<WindowedEinsumDecomposer>(*o));
                    });

}  // namespace weave
