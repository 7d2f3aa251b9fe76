// The compile report as JSON (report.h; field names are stable, see README "The report").
#include "tools/report.h"

namespace weave::tools {

nlohmann::json ReportToJson(const CompileReport& r) {
  using nlohmann::json;
  auto summary = [](const ModuleSummary& s) {
    json j;
    j["instructions"] = s.instructions;
    j["bytes_sent_per_partition"] = s.bytes_sent;
    j["bytes_by_collective"] = s.bytes_by_collective;
    j["bytes_by_type"] = s.bytes_by_type;
    j["collectives"] = s.collectives;
    j["flops_per_partition"] = s.flops;
    j["fp8_flops_per_partition"] = s.fp8_flops;
    j["dots"] = s.dots;
    j["fp8_gemms"] = s.fp8_gemms;
    j["windowed_loops"] = s.windowed_loops;
    j["notes"] = s.notes;
    return j;
  };
  json j;
  j["input"] = r.input;
  j["output"] = r.output;
  j["module"] = r.module;
  j["num_partitions"] = r.num_partitions;
  j["num_partitions_inferred"] = r.num_partitions_inferred;
  j["status"] = r.status;
  j["exit_code"] = r.exit_code;
  j["pipeline"] = r.pipeline;
  json passes = json::array();
  for (const PassRecord& p : r.passes) {
    passes.push_back({{"pass", p.pass},
                      {"seconds", p.seconds},
                      {"changed", p.changed},
                      {"instructions_before", p.instructions_before},
                      {"instructions_after", p.instructions_after},
                      {"remarks_applied", p.remarks_applied},
                      {"remarks_missed", p.remarks_missed}});
  }
  j["passes"] = passes;
  j["before"] = summary(r.before);
  j["after"] = summary(r.after);
  json loops = json::array();
  for (const WindowedLoopInfo& l : r.loops) {
    loops.push_back({{"name", l.name},
                     {"body", l.body},
                     {"kind", l.kind},
                     {"ring_size", l.ring_size},
                     {"trip_count", l.trip_count},
                     {"unrolled", l.unrolled},
                     {"layout", l.layout},
                     {"cache_index", l.cache_index},
                     {"wire_type", l.wire_type},
                     {"permutes", l.permutes},
                     {"dots", l.dots},
                     {"fp8_gemms", l.fp8_gemms},
                     {"cache_consumers", l.cache_consumers},
                     {"cache_consumers_fp8", l.cache_consumers_fp8},
                     {"bytes_sent_per_partition", l.bytes_sent}});
    if (l.kind == "all-to-all") loops.back()["chunks"] = l.chunks;
  }
  j["windowed_loops"] = loops;
  json left = json::array();
  for (const LeftAlone& l : r.left_alone) {
    left.push_back({{"name", l.name},
                    {"opcode", l.opcode},
                    {"shape", l.shape},
                    {"bytes_sent_per_partition", l.bytes_sent},
                    {"reason", l.reason}});
    if (!l.reshard.empty()) left.back()["reshard"] = l.reshard;
  }
  j["collectives_left_alone"] = left;
  json remarks = json::array();
  for (const Remark& m : r.remarks) {
    json rm = {{"pass", m.pass},
               {"location", m.location},
               {"applied", m.applied},
               {"kind", m.applied ? "applied" : m.analysis ? "analysis" : "missed"},
               {"message", m.message}};
    if (!m.about.empty()) rm["about"] = m.about;
    remarks.push_back(rm);
  }
  j["remarks"] = remarks;
  j["fired"] = r.fired;
  j["fp8_gemm_epilogues"] = {{"calls", r.epilogue_gemms},
                             {"hbm_bytes_saved_per_execution", r.epilogue_bytes_saved}};
  j["cost_gate"] = CostGateToJson(r.cost_gate);
  j["numerics"] = NumericsToJson(r.numerics);
  if (!r.input_form.empty()) j["input_form"] = r.input_form;
  j["partitioned_from_global"] = r.partitioned_from_global;
  if (r.sim.requested) j["simulation"] = SimToJson(r.sim);
  return j;
}

}  // namespace weave::tools
