// The report's cost gate section (report.h: CostGateRecord).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/report.h"

namespace weave::tools {

nlohmann::json CostGateToJson(const CostGateRecord& g) {
  nlohmann::json j;
  j["mode"] = g.mode;
  if (!g.system.empty()) j["system"] = g.system;
  nlohmann::json decisions = nlohmann::json::array();
  for (const CostDecision& d : g.decisions) {
    const CostEstimate& e = d.estimate;
    nlohmann::json variants = nlohmann::json::array();
    for (size_t i = 0; i < e.labels.size(); ++i) {
      nlohmann::json v = {{"label", e.labels[i]}};
      if (i < e.us.size()) v["predicted_us"] = e.us[i];
      // The estimate with the loop's GEMMs on their own streams, when the one-stream bound
      // (the slower, in predicted_us) was asked for.
      if (i < e.concurrent_us.size()) v["concurrent_us"] = e.concurrent_us[i];
      variants.push_back(v);
    }
    nlohmann::json dj = {{"pass", d.pass},
                         {"location", d.location},
                         {"what", d.what},
                         {"system", e.system},
                         {"variants", variants},
                         {"chosen", e.chosen},
                         {"chosen_label", e.chosen >= 0 && e.chosen < static_cast<int>(e.labels.size())
                                              ? e.labels[static_cast<size_t>(e.chosen)]
                                              : std::string()},
                         {"rewritten", e.chosen != 0},
                         {"note", e.Note()}};
    if (e.us.size() >= 2) {
      dj["without_us"] = e.us[0];
      dj["with_us"] = e.us[static_cast<size_t>(e.chosen != 0 ? e.chosen : 1)];
    }
    if (!e.ok()) dj["error"] = e.error;
    if (e.margin_us > 0) dj["margin_us"] = e.margin_us;
    decisions.push_back(dj);
  }
  j["decisions"] = decisions;
  return j;
}

std::string CostGateToTable(const CostGateRecord& g, int max_rows) {
  std::string o;
  if (g.mode == "off") {
    return "\nCost gate: off (--cost-gate=off: every match is rewritten)\n";
  }
  if (g.mode == "threshold") {
    return "\nCost gate: XLA's byte threshold (--windowed-einsum-threshold-mib or "
           "--xla_gpu_operand_bytes_threshold_for_windowed_einsum given; --cost-gate=on adds the "
           "model)\n";
  }
  int64_t rewritten = 0;
  for (const CostDecision& d : g.decisions) rewritten += d.estimate.chosen != 0 ? 1 : 0;
  absl::StrAppendFormat(&o, "\nCost gate (%s): %d candidates, %d rewritten, %d left\n", g.system,
                        g.decisions.size(), rewritten,
                        static_cast<int64_t>(g.decisions.size()) - rewritten);
  int shown = 0;
  for (const CostDecision& d : g.decisions) {
    if (max_rows > 0 && shown >= max_rows) {
      absl::StrAppendFormat(&o, "  ... %d more (see --report)\n",
                            static_cast<int>(g.decisions.size()) - shown);
      break;
    }
    const CostEstimate& e = d.estimate;
    std::string choice = e.chosen >= 0 && e.chosen < static_cast<int>(e.labels.size())
                             ? e.labels[static_cast<size_t>(e.chosen)]
                             : "?";
    absl::StrAppendFormat(&o, "  %-28s %-9s %s\n", d.location,
                          e.chosen != 0 ? "rewritten" : "left", e.Note());
    if (!d.what.empty() || e.labels.size() > 2) {
      absl::StrAppendFormat(&o, "      %s%s%s\n", d.what, d.what.empty() ? "" : "; ",
                            absl::StrCat("chosen: ", choice));
    }
    ++shown;
  }
  return o;
}

}  // namespace weave::tools
