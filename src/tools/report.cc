// The compile report (report.h): what a compile changed, from the modules before and after and the
// passes' remarks. The pieces: report_summary.cc (bytes and FLOPs), report_loops.cc (windowed
// loops), report_reasons.cc (collectives left alone and why), report_all_to_all.cc,
// report_json.cc and report_table.cc (the two forms), report_cost_gate.cc and report_numerics.cc
// (their sections).
#include <cstdlib>
#include "tools/report.h"

#include <algorithm>
#include <optional>

#include "tools/report_internal.h"

namespace weave::tools {

const std::vector<std::string>& RewriteNames() {
  static const std::vector<std::string> names = {"windowed", "fp8-gemm", "fp8-wire", "cache",
                                                 "dot-merger", "windowed-in-ring",
                                                 "windowed-ring-rs"};
  return names;
}

namespace {

int64_t CacheConsumers(const std::vector<WindowedLoopInfo>& loops) {
  int64_t n = 0;
  for (const auto& l : loops) n += l.cache_consumers;
  return n;
}

}  // namespace

CompileInputAnalysis AnalyzeCompileInput(const HloModule& before, CompileReport* report) {
  // The module's windowed loops are found once, for both views of it below.
  const LoopScan scan = ScanLoops(before);
  report->before = SummarizeModule(before, report->num_partitions, scan);
  CompileInputAnalysis analysis;
  analysis.cache_consumers = CacheConsumers(FindWindowedLoops(before, scan));
  return analysis;
}

void AnalyzeCompileOutput(const CompileInputAnalysis& before, const HloModule& after,
                          CompileReport* report) {
  report->module = after.name();
  const LoopScan scan_after = ScanLoops(after);
  report->after = SummarizeModule(after, report->num_partitions, scan_after);
  report->loops = FindWindowedLoops(after, scan_after);
  report->left_alone = FindCollectivesLeftAlone(after, report->remarks, scan_after);
  auto applied_by = [&](const std::string& pass) {
    return std::any_of(report->remarks.begin(), report->remarks.end(),
                       [&](const Remark& r) { return r.applied && r.pass == pass; });
  };
  auto fp8_bytes = [](const ModuleSummary& s) {
    int64_t n = 0;
    for (const auto& [t, b] : s.bytes_by_type) {
      std::optional<PrimitiveType> pt = ParsePrimitiveType(t);
      if (pt && IsFp8(*pt)) n += b;
    }
    return n;
  };
  report->fired["windowed"] = applied_by("windowed-einsum-decomposer") ||
                              applied_by("block-scaled-windowed-einsum") ||
                              applied_by("all-to-all-windowed-einsum") ||
                              applied_by("windowed-einsum-handler") ||
                              report->after.windowed_loops > report->before.windowed_loops;
  report->fired["fp8-gemm"] = report->after.fp8_gemms > report->before.fp8_gemms;
  int64_t fb = fp8_bytes(report->before), fa = fp8_bytes(report->after);
  double share_b = report->before.bytes_sent ? double(fb) / double(report->before.bytes_sent) : 0;
  double share_a = report->after.bytes_sent ? double(fa) / double(report->after.bytes_sent) : 0;
  report->fired["fp8-wire"] = applied_by("collective-quantizer") || share_a > share_b;
  // Also when the loop whose cache serves the all-gathers lost its dots to the cleanup (its own
  // result unread: only the ring and the cache remain, no longer a windowed loop in the table).
  const bool cache_remark = std::any_of(
      report->remarks.begin(), report->remarks.end(), [](const Remark& r) {
        return r.applied && r.pass == "windowed-einsum-handler" &&
               r.message.rfind("all-gather replaced by the activation cache", 0) == 0;
      });
  report->fired["cache"] = CacheConsumers(report->loops) > before.cache_consumers || cache_remark;
  report->fired["dot-merger"] = applied_by("dot-merger");
  report->epilogue_gemms = 0;
  report->epilogue_bytes_saved = 0;
  for (const Remark& r : report->remarks) {
    if (!r.applied || r.pass != "fp8-gemm-rewriter") continue;
    const size_t k = r.message.find("saves an epilogue kernel's ");
    if (k == std::string::npos) continue;
    ++report->epilogue_gemms;
    report->epilogue_bytes_saved +=
        std::strtoll(r.message.c_str() + k + std::string_view("saves an epilogue kernel's ").size(),
                     nullptr, 10);
  }
  // Every consumer of an all-gather computed in the ring (windowed-einsum-consumers-in-ring), and
  // reduce-scatter loops in the ring layout (N-1 transfers; windowed_einsum/windowed_einsum_rs_ring.h).
  report->fired["windowed-in-ring"] = applied_by("windowed-einsum-consumers-in-ring");
  bool ring_rs = false;
  for (const WindowedLoopInfo& l : report->loops) {
    ring_rs |= l.body.find("windowed_dot_general_body_rs_ring") != std::string::npos;
  }
  report->fired["windowed-ring-rs"] = ring_rs;
}

void AnalyzeCompile(const HloModule& before, const HloModule& after, CompileReport* report) {
  const CompileInputAnalysis input = AnalyzeCompileInput(before, report);
  AnalyzeCompileOutput(input, after, report);
}

}  // namespace weave::tools
