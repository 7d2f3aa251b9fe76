// Internals shared by the compile report's files (report.h), not a public API: collective and GEMM
// accounting used by report_summary.cc, the windowed loop analysis of report_loops.cc, and the
// helpers report_reasons.cc and report.cc need from both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "windowed_einsum/all_to_all_window.h"
#include "windowed_einsum/windowed_step_scan.h"
#include "hlo/ir.h"
#include "sim/simulator.h"
#include "tools/report.h"

namespace weave::tools {

// Base opcode name for counting ("all-gather", ...): -start forms and sugared async-starts under
// their plain name; "" for anything else (an unsugared async-start counts through what it wraps).
// A view of a static string (no allocation: the report asks it of every instruction).
std::string_view CollectiveBaseName(const HloInstruction& instr);
// Bytes of the array elements of `s` (tuples summed; tokens 0).
int64_t ArrayBytes(const Shape& s);
// The element type of the first array in `s` (kInvalid if none).
PrimitiveType FirstArrayType(const Shape& s);
bool IsPermute(const HloInstruction& i);  // collective-permute or its -start
// Computations an instruction runs "inline" for the purposes of a loop body: conditional
// branches, calls, fusions, async wrappers (not nested while loops, not reducers).
bool DescendsInto(const HloInstruction& i);
// Group size for empty replica_groups: `num_partitions` if > 0, else partitions x replicas.
int64_t DefaultGroup(const HloModule& m, int64_t num_partitions);
// Every instruction of `c` and of the computations it runs inline (see DescendsInto), each
// computation once (`seen`).
void CollectInline(const HloComputation* c, std::vector<const HloInstruction*>* out,
                   std::set<const HloComputation*>* seen);

// Per-computation totals, loop-expanded (bytes sent per partition, per collective and element
// type, executions, FLOPs).
struct Totals {
  int64_t bytes = 0;
  std::map<std::string, int64_t> by_collective, by_type, executed;
  double flops = 0, fp8_flops = 0;
  bool unknown_trip = false;

  void Add(const Totals& o, int64_t mult) {
    bytes += o.bytes * mult;
    for (const auto& [k, v] : o.by_collective) by_collective[k] += v * mult;
    for (const auto& [k, v] : o.by_type) by_type[k] += v * mult;
    for (const auto& [k, v] : o.executed) executed[k] += v * mult;
    flops += o.flops * static_cast<double>(mult);
    fp8_flops += o.fp8_flops * static_cast<double>(mult);
    unknown_trip = unknown_trip || o.unknown_trip;
  }
};

class TotalsCache {
 public:
  explicit TotalsCache(int64_t default_group) : default_group_(default_group) {}

  const Totals& Of(const HloComputation* c) {
    auto it = cache_.find(c);
    if (it != cache_.end()) return it->second;
    // Guard against (malformed) recursion: an in-progress computation counts as empty.
    cache_[c] = Totals{};
    Totals t;
    for (const HloInstruction* i : c->instructions()) AddInstruction(*i, &t);
    cache_[c] = t;
    return cache_[c];
  }

  Totals OfInstruction(const HloInstruction& i) {
    Totals t;
    AddInstruction(i, &t);
    return t;
  }

 private:
  // Adds `i`'s totals to `t` (what t.Add(OfInstruction(i), 1) gives, without a Totals and its
  // maps made per instruction).
  void AddInstruction(const HloInstruction& i, Totals* t) {
    const std::string_view view = CollectiveBaseName(i);
    if (!view.empty()) {
      const int64_t sent = CollectiveBytesSent(i, default_group_);
      const std::string base(view);
      t->executed[base] += 1;
      t->bytes += sent;
      t->by_collective[base] += sent;
      const HloInstruction* src = i.operand_count() > 0 ? i.operand(0) : nullptr;
      PrimitiveType ty = src ? FirstArrayType(src->shape()) : PrimitiveType::kInvalid;
      if (ty != PrimitiveType::kInvalid) t->by_type[std::string(PrimitiveTypeName(ty))] += sent;
    }
    const double f = GemmFlops(i);
    t->flops += f;
    if (f != 0 && IsFp8GemmCustomCall(i)) t->fp8_flops += f;
    if (i.opcode() == HloOpcode::kWhile && i.called_computations().size() >= 2) {
      std::optional<int64_t> trips = sim::WhileTripCount(i);
      int64_t n = trips.value_or(1);
      if (!trips) t->unknown_trip = true;
      t->Add(Of(i.while_body()), std::max<int64_t>(n, 0));
    } else if (i.opcode() == HloOpcode::kConditional) {
      const Totals* best = nullptr;
      for (const HloComputation* b : i.called_computations()) {
        const Totals& bt = Of(b);
        if (!best || bt.bytes > best->bytes || (bt.bytes == best->bytes && bt.flops > best->flops)) {
          best = &bt;
        }
      }
      if (best) t->Add(*best, 1);
    } else if (DescendsInto(i)) {
      for (const HloComputation* c : i.called_computations()) t->Add(Of(c), 1);
    }
  }

  int64_t default_group_;
  std::unordered_map<const HloComputation*, Totals> cache_;
};

// "+12.5%" change from `before` to `after` ("" when both are 0, "new" from 0; report_table.cc).
std::string PercentChange(double before, double after);

// Analyses one while; false if it is not a windowed loop (report_loops.cc). `steps` remembers
// what the module's computations hold across the whiles of one module.
bool AnalyzeLoop(const HloInstruction& w, WindowedStepScan* steps, WindowedLoopInfo* info);

// The windowed loops of one module, found once for the report's several views of it
// (SummarizeModule, FindWindowedLoops, FindCollectivesLeftAlone): each while AnalyzeLoop accepts,
// with its analysis, in computation post order then instruction post order; and the all-to-all
// windows (windowed_einsum/all_to_all_window.h) of each computation, in computation post order. Valid while
// the module is unchanged.
struct LoopScan {
  std::vector<std::pair<const HloInstruction*, WindowedLoopInfo>> loops;
  std::vector<AllToAllWindow> all_to_all;
};
LoopScan ScanLoops(const HloModule& module);
// The views above, from a scan of `module`.
ModuleSummary SummarizeModule(const HloModule& module, int64_t num_partitions,
                              const LoopScan& scan);
std::vector<WindowedLoopInfo> FindWindowedLoops(const HloModule& module, const LoopScan& scan);
std::vector<LeftAlone> FindCollectivesLeftAlone(const HloModule& module,
                                                const std::vector<Remark>& remarks,
                                                const LoopScan& scan);
// The all-to-all windows of a scan as windowed loops of kind "all-to-all" (see
// FindAllToAllWindowLoops).
std::vector<WindowedLoopInfo> AllToAllWindowLoops(const std::vector<AllToAllWindow>& windows,
                                                  int64_t default_group);

}  // namespace weave::tools
