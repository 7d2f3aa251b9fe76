// The performance model's engine (sim/simulator.h): expands the module into a graph of kernels
// (sim/kernel_graph.h: loops unrolled trip-count times, calls inlined, conditionals reduced to
// their costlier branch), runs a list scheduler with fluid rates over the streams
// (sim/scheduler.h), and reports the times, the trace and each windowed loop against its ideal
// overlapped bound.
#include "sim/simulator.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "windowed_einsum/windowed_loop.h"
#include "sim/costs.h"
#include "sim/kernel_graph.h"
#include "sim/scheduler.h"
#include "hlo/status_macros.h"

namespace weave::sim {
namespace {

using internal::CostKind;
using internal::Expander;
using internal::LoopInstance;
using internal::RunSchedule;
using internal::Schedule;
using internal::Task;
using internal::Value;

const char* Category(CostKind k) {
  switch (k) {
    case CostKind::kGemm: return "gemm";
    case CostKind::kComm: return "collective";
    default: return "memory";
  }
}

}  // namespace

absl::StatusOr<SimResult> SimulateModule(const HloModule& module, const SystemSpec& system,
                                         const SimOptions& options) {
  ASSIGN_OR_RETURN(SystemSpec applied, ApplySimOptions(system, options));
  SimResult r;
  r.system = applied;
  Expander ex(module, r.system, options);
  ASSIGN_OR_RETURN(Value root, ex.Run());
  ASSIGN_OR_RETURN(Schedule sch, RunSchedule(ex.tasks, ex.deps, ex.phases, ex.stream_names().size(),
                                             r.system.contention));
  r.total_us = sch.makespan;
  r.exposed_comm_us = sch.exposed_comm;
  r.num_tasks = 0;
  for (const Task& t : ex.tasks) r.num_tasks += t.kind == CostKind::kFree ? 0 : 1;
  r.stream_names = ex.stream_names();
  r.warnings = ex.warnings;
  for (const Task& t : ex.tasks) {
    if (t.kind == CostKind::kFree) continue;
    if (t.kind == CostKind::kComm) {
      r.comm_us += t.work;
    } else {
      r.compute_us += t.work;
      if (t.kind == CostKind::kGemm) r.gemm_us += t.work;
    }
  }
  if (options.record_trace) {
    r.trace.reserve(ex.tasks.size());
    for (size_t i = 0; i < ex.tasks.size(); ++i) {
      const Task& t = ex.tasks[i];
      if (t.kind == CostKind::kFree) continue;
      TraceEvent e;
      e.name = t.instr->name();
      e.category = Category(t.kind);
      e.stream = t.stream;
      e.start_us = sch.start[i];
      e.duration_us = sch.end[i] - sch.start[i];
      r.trace.push_back(std::move(e));
    }
  }
  // Windowed loops, aggregated per while instruction in first-seen order.
  absl::flat_hash_map<const HloInstruction*, size_t> index;
  for (const LoopInstance& inst : ex.loops) {
    double first = -1, last = 0, gemm = 0, permute = 0;
    int64_t permutes = 0, ring = 0;
    for (int32_t i = inst.begin; i < inst.end; ++i) {
      const Task& t = ex.tasks[static_cast<size_t>(i)];
      // The loop's span starts at its gate (the first task of the range).
      if (first < 0) first = sch.end[static_cast<size_t>(i)];
      last = std::max(last, sch.end[static_cast<size_t>(i)]);
      if (t.kind == CostKind::kGemm) gemm += t.work;
      HloOpcode op = t.instr->opcode();
      if (op == HloOpcode::kCollectivePermute || op == HloOpcode::kCollectivePermuteStart) {
        permute += t.work;
        ++permutes;
        if (ring == 0) ring = static_cast<int64_t>(t.instr->source_target_pairs().size());
      }
    }
    // The ring is the replica group the loop circulates over, not the permute's pair count when
    // several groups share one collective-permute (e.g. {{0,2,4,6},{1,3,5,7}}: 8 pairs, rings of
    // 4). The loop matcher's ring (trip count x dots per trip) is the group size for XLA's
    // one-dot-per-step layouts but counts every dot of a step that has several, so it is used
    // only to split the pair count into equal groups.
    if (ring > 0) {
      if (auto L = MatchWindowedLoop(inst.loop)) {
        if (L->layout != WindowedLoopLayout::kOther && L->ring_size > 1 && L->ring_size < ring &&
            ring % L->ring_size == 0) {
          ring = L->ring_size;
        }
      }
    }
    if (ring == 0) ring = std::max<int64_t>(module.num_partitions, 1);
    double nn = static_cast<double>(ring);
    double t_gemm = gemm / nn;
    double t_comm = permutes > 0 ? permute / static_cast<double>(permutes) : 0;
    double ideal = t_gemm + (nn - 1) * std::max(t_gemm, t_comm);
    double simulated = first < 0 ? 0 : last - first;
    auto it = index.find(inst.loop);
    if (it == index.end()) {
      WindowedLoopReport rep;
      rep.name = inst.loop->name();
      rep.body = inst.loop->while_body()->name();
      rep.trip_count = inst.trips;
      rep.ring_size = ring;
      rep.num_permutes = permutes;
      rep.t_gemm_us = t_gemm;
      rep.t_comm_us = t_comm;
      index[inst.loop] = r.loops.size();
      r.loops.push_back(rep);
      it = index.find(inst.loop);
    }
    WindowedLoopReport& rep = r.loops[it->second];
    rep.instances += 1;
    rep.simulated_us += simulated;
    rep.ideal_us += ideal;
  }
  for (WindowedLoopReport& rep : r.loops) {
    rep.ratio = rep.ideal_us > 0 ? rep.simulated_us / rep.ideal_us : 0;
  }
  return r;
}

}  // namespace weave::sim
