// windowed-einsum-handler, step 4: compute streams and scheduling hints
// (../shared/specs/windowed-einsum-handler.md §4).
#include "gpu/windowed_einsum_handler_internal.h"

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
  for (const WindowedDot& d : L.dots) {
    bool ok;
    Json cfg = ParseConfig(d.dot->backend_config, &ok);
    if (!ok) {
      skipped.push_back(d.dot->name());
      continue;
    }
    if (d.dot->backend_config.empty()) cfg = FreshGpuConfig();
    int64_t id = QueueIdOf(cfg);
    if (id <= 0) {
      id = next_queue_id_++;
      cfg["operation_queue_id"] = std::to_string(id);
      if (!cfg.contains("wait_on_operation_queues")) cfg["wait_on_operation_queues"] = Json::array();
      std::string text = cfg.dump();
      if (text != d.dot->backend_config) {
        d.dot->backend_config = text;
        changed = true;
      }
      ++fresh;
    }
    if (d.merge != nullptr) {
      Json mc = ParseConfig(d.merge->backend_config, &ok);
      if (!ok) {
        skipped.push_back(d.merge->name());
        continue;
      }
      if (d.merge->backend_config.empty()) mc = FreshGpuConfig();
      if (!mc.contains("wait_on_operation_queues") || !mc["wait_on_operation_queues"].is_array()) {
        mc["wait_on_operation_queues"] = Json::array();
      }
      const std::string ids = std::to_string(id);
      bool present = false;
      for (const auto& e : mc["wait_on_operation_queues"]) {
        if ((e.is_string() && e.get<std::string>() == ids) ||
            (e.is_number_integer() && e.get<int64_t>() == id)) {
          present = true;
        }
      }
      if (!present) {
        mc["wait_on_operation_queues"].push_back(ids);
        d.merge->backend_config = mc.dump();
        changed = true;
        ++waits;
      }
    }
  }
  // Permutes fed straight from the loop state start their iteration: issue them first.
  for (HloInstruction* cp : L.permutes) {
    const HloComputation* c = cp->parent();
    if (c->num_parameters() != 1 || (cp->operand(0) != c->parameter(0) &&
                                     TraceRing(cp->operand(0), c->parameter(0), nullptr) == nullptr)) {
      continue;
    }
    bool ok;
    Json cfg = ParseConfig(cp->backend_config, &ok);
    if (!ok) {
      skipped.push_back(cp->name());
      continue;
    }
    if (cp->backend_config.empty()) cfg = FreshGpuConfig();
    if (cfg.contains("force_earliest_schedule") && cfg["force_earliest_schedule"].is_boolean() &&
        cfg["force_earliest_schedule"].get<bool>()) {
      continue;
    }
    cfg["force_earliest_schedule"] = true;
    cp->backend_config = cfg.dump();
    changed = true;
    ++early;
  }
  *msg = changed ? absl::StrFormat("streams: %d dot%s given an operation_queue_id, %d merging "
                                   "user%s wait on them, %d collective-permute%s forced earliest",
                                   fresh, fresh == 1 ? "" : "s", waits, waits == 1 ? "" : "s",
                                   early, early == 1 ? "" : "s")
                 : "streams already annotated";
  if (!skipped.empty()) {
    absl::StrAppend(msg, "; backend_config not JSON, left alone: ", absl::StrJoin(skipped, ", "));
  }
  return changed;
}

}  // namespace weave::handler_internal
