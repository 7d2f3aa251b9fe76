#include "windowed_einsum/windowed_einsum_handler.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "windowed_einsum/windowed_einsum_handler_internal.h"
#include "passes/gpu_backend_config.h"
#include "hlo/status_macros.h"

namespace weave {
namespace handler_internal {

absl::Status Handler::Prepare() {
  for (HloComputation* c : module_->computations()) {
    for (HloInstruction* i : c->instructions()) {
      for (HloComputation* callee : i->called_computations()) ++callers_[callee];
    }
  }
  // New streams take ids above every queue the module names, each read as the backend-config
  // editor reads it (one reading for every pass that assigns streams).
  next_queue_id_ = MaxOperationQueueId(*module_) + 1;
  next_channel_id_ = module_->NextChannelId();
  return absl::OkStatus();
}

absl::StatusOr<bool> Handler::Run() {
  RETURN_IF_ERROR(Prepare());
  bool changed = false;
  std::vector<HloComputation*> comps = module_->MakeComputationPostOrder();
  for (HloComputation* c : comps) {
    ASSIGN_OR_RETURN(auto r, RunOnComputation(c));
    changed |= r;
  }
  // Drop the conditional branches this pass replaced by retyped copies, if nothing calls them.
  if (!maybe_orphaned_.empty()) {
    absl::flat_hash_set<const HloComputation*> called;
    for (HloComputation* c : module_->computations()) {
      for (HloInstruction* i : c->instructions()) {
        for (HloComputation* callee : i->called_computations()) called.insert(callee);
      }
    }
    for (HloComputation* c : maybe_orphaned_) {
      if (!called.count(c) && c != module_->entry()) {
        RETURN_IF_ERROR(module_->RemoveComputation(c));
      }
    }
  }
  return changed;
}

absl::StatusOr<bool> Handler::RunOnComputation(HloComputation* comp) {
  std::vector<HloInstruction*> whiles, gathers;
  std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
  for (HloInstruction* i : order) {
    if (i->opcode() == HloOpcode::kWhile) whiles.push_back(i);
    if (i->opcode() == HloOpcode::kAllGather || i->opcode() == HloOpcode::kAllGatherDone) {
      gathers.push_back(i);
    }
  }
  if (whiles.empty() && gathers.empty()) return false;
  rename_.clear();
  shifted_.clear();
  ASSIGN_OR_RETURN(auto changed_or, RunOnLoops(comp, whiles, gathers, order));
  if (changed_or) {
    // One linear sweep removes what the rewrites left unused in this computation (old init
    // tuples and dequantizations, replaced all-gathers).
    comp->RemoveDeadCode();
    ApplyPendingRenames(comp, &rename_);
  }
  return changed_or;
}

absl::StatusOr<bool> Handler::RunOnLoops(HloComputation* comp,
                                         const std::vector<HloInstruction*>& whiles,
                                         const std::vector<HloInstruction*>& gathers,
                                         const std::vector<HloInstruction*>& order) {
  position_.clear();
  for (size_t i = 0; i < order.size(); ++i) position_[order[i]] = static_cast<int64_t>(i);

  bool changed = false;
  // Each step leaves a valid loop; if a later step no longer recognises it (a form the matcher
  // does not know), the loop keeps what was done so far and a remark says which steps were left
  // out, never an internal error: the pass does not stop half way.
  auto rematch = [&](HloInstruction* w, const char* after,
                     const char* left_out) -> std::optional<WindowedLoop> {
    std::string why;
    auto L = MatchWindowedLoop(w, &why);
    if (!L) {
      remark_(w->name(), false,
              absl::StrCat("loop no longer recognised after ", after, " (", why, "); ", left_out,
                           " left out for this loop"));
    }
    return L;
  };

  std::vector<HloInstruction*> loops;  // recognised
  for (HloInstruction* w : whiles) {
    std::string why;
    auto L = MatchWindowedLoop(w, &why);
    if (!L) {
      remark_(w->name(), false, "not a windowed einsum loop: " + why);
      continue;
    }
    EnsureUnshared(w);
    L = rematch(w, "unsharing its computations", "every step");
    if (!L) continue;
    analysis_(w->name(), "recognised: " + L->ToString());
    std::string msg;
    ASSIGN_OR_RETURN(auto r, ShiftFp8(w, *L, &msg));
    remark_(w->name(), r, msg);
    changed |= r;
    loops.push_back(w);
  }

  // All-gathers whose value a loop already circulates: served by the loop's cache.
  ASSIGN_OR_RETURN(auto cached, PlanAndAddCaches(comp, loops, gathers));
  changed |= cached;

  for (HloInstruction* w : loops) {
    auto L = rematch(w, "the FP8 shift and the cache", "unrolling and streams");
    if (!L) continue;
    if (unroll_ && L->layout != WindowedLoopLayout::kFullyUnrolled) {
      std::string msg;
      ASSIGN_OR_RETURN(auto r, Unroll(w, *L, &msg));
      remark_(w->name(), r, msg);
      changed |= r;
      L = rematch(w, "unrolling", "streams");
      if (!L) continue;
    }
    {
      std::string msg;
      ASSIGN_OR_RETURN(auto r, CollectPartials(w, *L, &msg));
      if (!msg.empty()) remark_(w->name(), r, msg);
      if (r) {
        changed = true;
        L = rematch(w, "collecting the partial products", "streams");
        if (!L) continue;
      }
    }
    std::string msg;
    ASSIGN_OR_RETURN(auto r, AnnotateStreams(*L, &msg));
    remark_(w->name(), r, msg);
    changed |= r;
  }
  return changed;
}

}  // namespace handler_internal

absl::StatusOr<bool> WindowedEinsumHandler::Run(HloModule* module) {
  handler_internal::Handler h(
      module, unroll_, backend_config_, cache_type_, cost_oracle(),
      [this](std::string loc, bool applied, std::string msg) {
        AddRemark(std::move(loc), applied, std::move(msg));
      },
      [this](std::string loc, std::string msg) {
        AddAnalysisRemark(std::move(loc), std::move(msg));
      });
  return h.Run();
}

WEAVE_REGISTER_PASS("windowed-einsum-handler",
                    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      ASSIGN_OR_RETURN(auto unroll, options.GetBool(WindowedEinsumHandler::kUnrollOption, true));
                      ASSIGN_OR_RETURN(auto schema, XlaBackendConfigVersionFromOptions(options));
                      using CacheType = WindowedEinsumHandler::CacheType;
                      const std::string cache = options.GetString(
                          WindowedEinsumHandler::kCacheTypeOption, "auto");
                      CacheType type = CacheType::kAuto;
                      if (cache == "fp8") {
                        type = CacheType::kFp8;
                      } else if (cache == "wide") {
                        type = CacheType::kWide;
                      } else if (cache != "auto") {
                        return absl::InvalidArgumentError(absl::StrCat(
                            std::string(WindowedEinsumHandler::kCacheTypeOption),
                            " must be auto, fp8 or wide, got '", cache, "'"));
                      }
                      return std::make_unique<WindowedEinsumHandler>(unroll, schema, type);
                    });

}  // namespace weave
