// windowed-einsum-handler, step 4: compute streams and scheduling hints
// (../shared/specs/windowed-einsum-handler.md §4).
#include "windowed_einsum/windowed_einsum_handler_internal.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weave::handler_internal {

absl::StatusOr<bool> Handler::AnnotateStreams(const WindowedLoop& L, std::string* msg) {
  bool changed = false;
  int64_t fresh = 0, waits = 0, early = 0;
  std::vector<std::string> skipped;
  const bool with_waits = backend_config_ != XlaBackendConfigVersion::k2026;
  for (const WindowedDot& d : L.dots) {
    auto cfg = GpuBackendConfigEditor::Of(*d.dot, backend_config_);
    if (!cfg.ok()) {
      skipped.push_back(d.dot->name());
      continue;
    }
    int64_t id = cfg->operation_queue_id();
    if (id <= 0) {
      id = next_queue_id_++;
      cfg->set_operation_queue_id(id);
      ++fresh;
    }
    changed |= cfg->ApplyTo(d.dot);
    if (d.merge == nullptr) continue;
    // XLA up to 2025: the merging user waits on the dot's queue. Since 2026 XLA's stream
    // assignment adds the waits; a config the merging user already has is still rewritten in
    // the chosen schema (old waits dropped), none is added.
    if (!with_waits && d.merge->backend_config.empty()) continue;
    auto mc = GpuBackendConfigEditor::Of(*d.merge, backend_config_);
    if (!mc.ok()) {
      skipped.push_back(d.merge->name());
      continue;
    }
    if (mc->AddWaitOnOperationQueue(id)) ++waits;
    changed |= mc->ApplyTo(d.merge);
  }
  // Permutes fed straight from the loop state start their iteration: issue them first.
  for (HloInstruction* cp : L.permutes) {
    const HloComputation* c = cp->parent();
    if (c->num_parameters() != 1 || (cp->operand(0) != c->parameter(0) &&
                                     TraceRing(cp->operand(0), c->parameter(0), nullptr) == nullptr)) {
      continue;
    }
    auto cfg = GpuBackendConfigEditor::Of(*cp, backend_config_);
    if (!cfg.ok()) {
      skipped.push_back(cp->name());
      continue;
    }
    if (!cfg->force_earliest_schedule()) ++early;
    cfg->set_force_earliest_schedule(true);
    changed |= cfg->ApplyTo(cp);
  }
  if (!changed) {
    *msg = "streams already annotated";
  } else if (with_waits) {
    *msg = absl::StrFormat("streams: %d dot%s given an operation_queue_id, %d merging user%s wait "
                           "on them, %d collective-permute%s forced earliest (XLA %s schema)",
                           fresh, fresh == 1 ? "" : "s", waits, waits == 1 ? "" : "s", early,
                           early == 1 ? "" : "s", XlaBackendConfigVersionName(backend_config_));
  } else {
    *msg = absl::StrFormat("streams: %d dot%s given an operation_queue_id, %d collective-permute%s "
                           "forced earliest (XLA %s schema: XLA's stream assignment adds the "
                           "waits)",
                           fresh, fresh == 1 ? "" : "s", early, early == 1 ? "" : "s",
                           XlaBackendConfigVersionName(backend_config_));
  }
  if (!skipped.empty()) {
    absl::StrAppend(msg, "; backend_config not JSON, left alone: ", absl::StrJoin(skipped, ", "));
  }
  return changed;
}

}  // namespace weave::handler_internal
