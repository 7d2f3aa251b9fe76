// Text, JSON and Chrome-trace output of a simulation.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"

namespace weave::sim {

namespace {
constexpr const char* kFusionNote =
    "no fusion modelled beyond XLA's loop glue: every non-GEMM instruction is its own kernel "
    "costed by the bytes it reads and writes over HBM, except adds folded into a GEMM's "
    "epilogue, the zero fills they replace, and dynamic-update-slices a GEMM writes in place";
}  // namespace

std::string SimResultToText(const SimResult& r) {
  std::string out;
  absl::StrAppend(&out, "system: ", r.system.origin, "\n");
  absl::StrAppend(&out, "values: ", r.system.Summary(), "\n");
  absl::StrAppend(&out, "note: ", kFusionNote, "\n");
  for (const std::string& w : r.warnings) absl::StrAppend(&out, "warning: ", w, "\n");
  absl::StrAppend(&out, absl::StrFormat("total_us: %.2f\n", r.total_us));
  absl::StrAppend(&out, absl::StrFormat("compute_us: %.2f (gemm %.2f)\n", r.compute_us, r.gemm_us));
  absl::StrAppend(&out, absl::StrFormat("comm_us: %.2f\n", r.comm_us));
  absl::StrAppend(&out, absl::StrFormat("exposed_comm_us: %.2f\n", r.exposed_comm_us));
  absl::StrAppend(&out, absl::StrFormat("kernels: %d on %d streams\n", r.num_tasks,
                                        r.stream_names.size()));
  if (r.loops.empty()) {
    absl::StrAppend(&out, "windowed loops: none\n");
  } else {
    absl::StrAppend(&out, "windowed loops:\n");
    for (const WindowedLoopReport& l : r.loops) {
      absl::StrAppend(
          &out,
          absl::StrFormat("  %s (body %s): simulated_us %.2f ideal_us %.2f ratio %.3f "
                          "[N=%d trips=%d instances=%d permutes=%d t_gemm_us=%.2f "
                          "t_comm_us=%.2f]\n",
                          l.name, l.body, l.simulated_us, l.ideal_us, l.ratio, l.ring_size,
                          l.trip_count, l.instances, l.num_permutes, l.t_gemm_us, l.t_comm_us));
    }
    absl::StrAppend(&out,
                    "  ideal = t_gemm + (N-1) * max(t_gemm, t_comm), per-step times from the "
                    "loop body\n");
  }
  return out;
}

std::string SimResultToJson(const SimResult& r) {
  nlohmann::json j;
  const SystemSpec& s = r.system;
  j["system"] = {
      {"name", s.name},
      {"origin", s.origin},
      {"source", s.source},
      {"num_gpus", s.num_gpus},
      {"sm_count", s.sm_count},
      {"matmul_tflops",
       {{"bf16", s.bf16_tflops}, {"f16", s.f16_tflops}, {"f32", s.f32_tflops},
        {"fp8", s.fp8_tflops}, {"fp4", s.fp4_tflops}, {"f64", s.f64_tflops}}},
      {"hbm_gbps", s.hbm_gbps},
      {"link_gbps", s.link_gbps},
      {"latency_us", s.latency_us},
      {"link_efficiency", s.link_efficiency},
      {"hbm_efficiency", s.hbm_efficiency},
      {"collective_engine", s.collective_engine},
      {"contention", s.contention},
      {"contention_by_engine",
       {{"sm", s.contention_sm}, {"copy_engine", s.contention_copy_engine}}},
      {"sources", s.sources},
      {"gemm",
       {{"efficiency", s.gemm.efficiency}, {"tiled", s.gemm.tiled}, {"tile_m", s.gemm.tile_m},
        {"tile_n", s.gemm.tile_n}, {"tile_k", s.gemm.tile_k},
        {"overhead_us", s.gemm.overhead_us}}},
  };
  j["note"] = kFusionNote;
  j["total_us"] = r.total_us;
  j["compute_us"] = r.compute_us;
  j["gemm_us"] = r.gemm_us;
  j["comm_us"] = r.comm_us;
  j["exposed_comm_us"] = r.exposed_comm_us;
  j["kernels"] = r.num_tasks;
  j["streams"] = r.stream_names;
  j["warnings"] = r.warnings;
  nlohmann::json loops = nlohmann::json::array();
  for (const WindowedLoopReport& l : r.loops) {
    loops.push_back({{"name", l.name},
                     {"body", l.body},
                     {"instances", l.instances},
                     {"trip_count", l.trip_count},
                     {"ring_size", l.ring_size},
                     {"num_permutes", l.num_permutes},
                     {"t_gemm_us", l.t_gemm_us},
                     {"t_comm_us", l.t_comm_us},
                     {"simulated_us", l.simulated_us},
                     {"ideal_us", l.ideal_us},
                     {"ratio", l.ratio}});
  }
  j["windowed_loops"] = loops;
  return j.dump(2) + "\n";
}

std::string SimResultToChromeTrace(const SimResult& r) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0},
                    {"args", {{"name", absl::StrCat("weave simulate on ", r.system.name)}}}});
  for (size_t i = 0; i < r.stream_names.size(); ++i) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1},
                      {"tid", static_cast<int64_t>(i)},
                      {"args", {{"name", r.stream_names[i]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1},
                      {"tid", static_cast<int64_t>(i)},
                      {"args", {{"sort_index", static_cast<int64_t>(i)}}}});
  }
  for (const TraceEvent& e : r.trace) {
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", e.stream},
                      {"ts", e.start_us},
                      {"dur", e.duration_us}});
  }
  nlohmann::json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ns";
  j["otherData"] = {{"total_us", r.total_us}, {"system", r.system.origin}};
  return j.dump() + "\n";
}

}  // namespace weave::sim
