// The compile report as the readable table `weave compile` prints on stderr (report.h).
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/cli_util.h"
#include "tools/report.h"
#include "tools/report_internal.h"

namespace weave::tools {
namespace {

std::string Pct(double before, double after) {
  if (before == 0) return after == 0 ? "" : "new";
  return absl::StrFormat("%+.1f%%", 100.0 * (after - before) / before);
}

std::string FormatFlops(double f) {
  if (f >= 1e12) return absl::StrFormat("%.3f TFLOP", f / 1e12);
  if (f >= 1e9) return absl::StrFormat("%.3f GFLOP", f / 1e9);
  if (f >= 1e6) return absl::StrFormat("%.3f MFLOP", f / 1e6);
  if (f >= 1e3) return absl::StrFormat("%.1f kFLOP", f / 1e3);
  return absl::StrFormat("%.0f FLOP", f);
}

}  // namespace

std::string FormatBytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  if (b < 1024.0 * 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024));
  return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024 * 1024));
}

std::string PercentChange(double before, double after) { return Pct(before, after); }

namespace {

// The table's first lines: input, output, module and partitions, a partitioned global input, and
// the pipeline's passes.
void AppendHeader(const CompileReport& r, std::string* out) {
  std::string& o = *out;
  absl::StrAppendFormat(&o, "weave compile: %s -> %s  (module %s, %s)\n",
                        r.input, r.output.empty() ? "(not written)" : r.output, r.module,
                        r.num_partitions_inferred
                            ? absl::StrCat(r.num_partitions,
                                           " partitions: not in the header, inferred from the "
                                           "device ids of its collectives")
                            : CountOf(r.num_partitions, "partition", "partitions"));
  if (r.partitioned_from_global) {
    absl::StrAppend(&o, "input: a global module, partitioned by Weave's SPMD pipeline first; "
                        "'before' below is the partitioned module\n");
  }
  if (!r.passes.empty()) {
    std::vector<std::string> names;
    for (const PassRecord& p : r.passes) names.push_back(p.changed ? p.pass : p.pass + "(-)");
    absl::StrAppend(&o, "pipeline: ", absl::StrJoin(names, " > "), "   ((-) = no change)\n");
  }
}

// "Windowed loops": one row per loop (ring, trips, wire type, GEMMs, cache users, bytes sent).
void AppendWindowedLoops(const CompileReport& r, std::string* out) {
  std::string& o = *out;
  absl::StrAppendFormat(&o, "\nWindowed loops: %d\n", r.loops.size());
  if (!r.loops.empty()) {
    absl::StrAppendFormat(&o, "  %-28s %-15s %4s %5s %-10s %4s %4s %11s %12s\n", "loop", "kind",
                          "ring", "trips", "wire", "dots", "fp8", "cache users", "sent/part");
    for (const WindowedLoopInfo& l : r.loops) {
      std::string cache =
          l.cache_consumers ? absl::StrFormat("%d (%d fp8)", l.cache_consumers,
                                              l.cache_consumers_fp8)
                            : "0";
      absl::StrAppendFormat(&o, "  %-28s %-15s %4d %5s %-10s %4d %4d %11s %12s\n", l.name, l.kind,
                            l.ring_size,
                            l.kind == "all-to-all" ? absl::StrCat(l.chunks, "ch")
                            : l.trip_count < 0     ? "?"
                                                   : absl::StrCat(l.trip_count),
                            l.wire_type, l.dots, l.fp8_gemms, cache, FormatBytes(l.bytes_sent));
    }
  }

  if (std::any_of(r.loops.begin(), r.loops.end(),
                  [](const WindowedLoopInfo& l) { return l.kind == "all-to-all"; })) {
    absl::StrAppend(&o, "  (all-to-all rows: ring = group size, trips = chunks, each one "
                        "all-to-all and one partial GEMM on its own stream)\n");
  }
}

// "Collectives left alone": each with its reshard and reason, at most max_rows (0: all).
void AppendCollectivesLeftAlone(const CompileReport& r, int max_rows, std::string* out) {
  std::string& o = *out;
  const int64_t by_reshards =
      std::count_if(r.left_alone.begin(), r.left_alone.end(),
                    [](const LeftAlone& l) { return !l.reshard.empty(); });
  absl::StrAppendFormat(&o, "\nCollectives left alone: %d\n", r.left_alone.size());
  if (by_reshards > 0) {
    absl::StrAppendFormat(&o, "  (%d of them emitted by the SPMD partitioner's reshards)\n",
                          by_reshards);
  }
  int shown = 0;
  for (const LeftAlone& l : r.left_alone) {
    if (max_rows > 0 && shown >= max_rows) {
      absl::StrAppendFormat(&o, "  ... %d more (see --report)\n",
                            static_cast<int>(r.left_alone.size()) - shown);
      break;
    }
    absl::StrAppendFormat(&o, "  %-28s %-18s %s\n", l.name, l.opcode, l.shape);
    if (!l.reshard.empty()) absl::StrAppend(&o, "      reshard: ", l.reshard, "\n");
    absl::StrAppend(&o, "      why: ", l.reason, "\n");
    ++shown;
  }
}

// "Per partition": bytes sent (per collective and per element type), FLOPs, FP8 GEMMs, folded
// epilogues, dots and instructions, before and after, and the summary's notes.
void AppendPerPartition(const CompileReport& r, std::string* out) {
  std::string& o = *out;
  absl::StrAppend(&o, "\nPer partition                        before          after   change\n");
  auto row = [&](const std::string& label, int64_t b, int64_t a) {
    absl::StrAppendFormat(&o, "  %-30s %12s %14s   %s\n", label, FormatBytes(b), FormatBytes(a),
                          Pct(static_cast<double>(b), static_cast<double>(a)));
  };
  row("bytes sent", r.before.bytes_sent, r.after.bytes_sent);
  std::set<std::string> keys;
  for (const auto& kv : r.before.bytes_by_collective) keys.insert(kv.first);
  for (const auto& kv : r.after.bytes_by_collective) keys.insert(kv.first);
  auto get = [](const std::map<std::string, int64_t>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? int64_t{0} : it->second;
  };
  for (const std::string& k : keys) {
    row("  " + k, get(r.before.bytes_by_collective, k), get(r.after.bytes_by_collective, k));
  }
  keys.clear();
  for (const auto& kv : r.before.bytes_by_type) keys.insert(kv.first);
  for (const auto& kv : r.after.bytes_by_type) keys.insert(kv.first);
  for (const std::string& k : keys) {
    row("  as " + k, get(r.before.bytes_by_type, k), get(r.after.bytes_by_type, k));
  }
  absl::StrAppendFormat(&o, "  %-30s %12s %14s   %s\n", "FLOPs", FormatFlops(r.before.flops),
                        FormatFlops(r.after.flops), Pct(r.before.flops, r.after.flops));
  absl::StrAppendFormat(&o, "  %-30s %12s %14s\n", "  in FP8 GEMMs",
                        FormatFlops(r.before.fp8_flops), FormatFlops(r.after.fp8_flops));
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "FP8 GEMMs (custom calls)",
                        r.before.fp8_gemms, r.after.fp8_gemms);
  if (r.epilogue_gemms > 0) {
    absl::StrAppendFormat(&o, "  %-30s %12s %14d   %s of HBM traffic saved per execution\n",
                          "  with epilogues folded", "", r.epilogue_gemms,
                          FormatBytes(r.epilogue_bytes_saved));
  }
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "dots", r.before.dots, r.after.dots);
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "instructions", r.before.instructions,
                        r.after.instructions);
  for (const std::string& n : r.after.notes) absl::StrAppend(&o, "  note: ", n, "\n");
  if (r.after.fp8_gemms > 0) {
    absl::StrAppend(&o, "  note: FP8 GEMM FLOPs count the custom calls' operands as padded to "
                        "multiples of 16 (the work cuBLASLt does)\n");
  }
}

// "Remarks": the counts, per pass counts, then the missed remarks (why something did not fire),
// then the applied ones, each in pipeline order and limited to max_rows (0: all).
void AppendRemarks(const CompileReport& r, int max_rows, std::string* out) {
  std::string& o = *out;
  int64_t applied = 0, missed = 0, analysis = 0;
  for (const Remark& m : r.remarks) (m.applied ? applied : m.analysis ? analysis : missed)++;
  absl::StrAppendFormat(&o, "\nRemarks: %d (%d applied, %d missed, %d analysis)\n",
                        r.remarks.size(), applied, missed, analysis);
  int shown = 0;
  std::vector<std::string> order;
  std::map<std::string, std::pair<int64_t, int64_t>> per_pass;
  for (const Remark& m : r.remarks) {
    if (!per_pass.count(m.pass)) order.push_back(m.pass);
    auto& counts = per_pass[m.pass];  // created here, so each pass is listed once
    if (m.applied) ++counts.first;
    if (m.missed()) ++counts.second;
  }
  for (const std::string& p : order) {
    absl::StrAppendFormat(&o, "  %-32s %4d applied %4d missed\n", p, per_pass[p].first,
                          per_pass[p].second);
  }
  for (int kind = 0; kind < 2; ++kind) {
    const bool want_applied = kind == 1;
    int64_t total = want_applied ? applied : missed;
    if (total == 0) continue;
    absl::StrAppend(&o, want_applied ? "  applied:\n" : "  missed (why something did not fire):\n");
    shown = 0;
    for (const Remark& m : r.remarks) {
      if (m.applied != want_applied || m.analysis) continue;
      if (max_rows > 0 && shown >= max_rows) break;
      absl::StrAppend(&o, "    ", m.ToString(), "\n");
      ++shown;
    }
    if (shown < total) {
      absl::StrAppendFormat(&o, "    ... %d more (see --report, or -v)\n", total - shown);
    }
  }
}

}  // namespace

std::string ReportToTable(const CompileReport& r, int max_rows) {
  std::string o;
  AppendHeader(r, &o);
  AppendWindowedLoops(r, &o);
  AppendCollectivesLeftAlone(r, max_rows, &o);
  AppendPerPartition(r, &o);

  if (r.sim.requested) absl::StrAppend(&o, SimToTable(r.sim));

  absl::StrAppend(&o, CostGateToTable(r.cost_gate, max_rows));

  std::vector<std::string> fired;
  for (const auto& [k, v] : r.fired) fired.push_back(absl::StrCat(k, v ? "=yes" : "=no"));
  absl::StrAppend(&o, "\nRewrites: ", absl::StrJoin(fired, "  "), "\n");

  absl::StrAppend(&o, NumericsToTable(r.numerics));

  AppendRemarks(r, max_rows, &o);
  return o;
}

}  // namespace weave::tools
