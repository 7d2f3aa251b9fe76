// The simulator's kernel graph (sim/simulator.h): the module expanded into kernels with their
// dependencies, streams and work (loops unrolled trip-count times, calls inlined, conditionals
// reduced to their costlier branch, GEMMs whose add XLA folds into the epilogue waiting for that
// add), ready for the scheduler (sim/scheduler.h). Internal to src/sim.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "sim/costs.h"
#include "sim/simulator.h"
#include "windowed_einsum/windowed_step_scan.h"

namespace weave::sim::internal {

constexpr int32_t kMainStream = 0;
constexpr int32_t kCommStream = 1;

// The producers a value depends on. A leaf is produced by one kernel (`task`, -1 = available at
// time 0); a tuple holds one value per element; a join (not a tuple, elems set) depends on all
// of its elems and on `task`.
struct ValueNode;
using Value = std::shared_ptr<const ValueNode>;
struct ValueNode {
  int32_t task = -1;
  bool tuple = false;
  std::vector<Value> elems;
};

struct Task {
  const HloInstruction* instr = nullptr;
  double work = 0;  // microseconds at full speed
  CostKind kind = CostKind::kMemory;
  int32_t stream = 0;
  bool force_earliest = false;
  uint32_t dep_begin = 0, dep_count = 0;
  uint32_t phase_begin = 0, phase_count = 0;  // compute kernels: into Expander::phases
};

// Static per-instruction information, computed once.
struct InstrInfo {
  InstrCost cost;
  int64_t queue = 0;
  std::vector<int64_t> waits;
  bool force_earliest = false;
};

struct LoopInstance {
  const HloInstruction* loop = nullptr;
  int64_t trips = 0;
  int32_t begin = 0, end = 0;  // task range
};

// Expands a module into `tasks` (kernels, dependencies in `deps`, compute phases in `phases`) and
// records each windowed loop's task range in `loops`. Run() returns the entry's result value.
class Expander {
 public:
  Expander(const HloModule& m, const SystemSpec& s, const SimOptions& o);
  absl::StatusOr<Value> Run();

  std::vector<Task> tasks;
  std::vector<int32_t> deps;
  std::vector<internal::Phase> phases;
  std::vector<LoopInstance> loops;
  std::vector<std::string> warnings;
  const std::vector<std::string>& stream_names() const { return stream_names_; }

 private:
  const InstrInfo& Info(const HloInstruction* instr);
  const std::vector<HloInstruction*>& PostOrder(const HloComputation* comp);
  int32_t StreamForQueue(int64_t queue);
  std::optional<int64_t> TripCount(const HloInstruction* w);
  // Estimated cost (sum of kernel times) and kernel count of one execution of `comp`.
  std::pair<double, double> Estimate(const HloComputation* comp);
  // Appends a kernel depending on `*dep_ids` (modified) and on the innermost loop gate.
  int32_t AddTask(const HloInstruction* instr, CostKind kind, double work, int32_t stream,
                  bool force_earliest, std::vector<int32_t>* dep_ids,
                  const std::vector<internal::Phase>* task_phases = nullptr);
  Value Leaf(int32_t task);
  Value Join(std::vector<Value> parts);
  void CollectLeaves(const Value& v, std::vector<int32_t>* out);
  absl::StatusOr<Value> Expand(const HloComputation* comp, const std::vector<Value>& args);

  // A GEMM whose add is folded into its epilogue, waiting for that add (see CostOf).
  struct Deferred {
    const HloInstruction* gemm = nullptr;
    const HloInstruction* value = nullptr;  // the GEMM's result as the add reads it
    std::vector<int32_t> deps;
    int32_t stream = 0;
  };

  // ExpandBody walks a computation in post order; a conditional expands its most expensive
  // branch, a while its body trip-count times behind a gate per iteration, any other
  // instruction its kernel (ExpandKernel: a task on its stream, a GEMM whose add is folded into
  // its epilogue deferred to that add).
  struct Scope;
  absl::StatusOr<Value> ExpandBody(const HloComputation* comp, const std::vector<Value>& args);
  absl::StatusOr<Value> ExpandConditional(const HloInstruction* instr, Scope& scope);
  absl::StatusOr<Value> ExpandWhile(const HloInstruction* instr, Scope& scope);
  absl::StatusOr<Value> ExpandKernel(const HloInstruction* instr, Scope& scope);
  // The warnings a kernel can raise once per run: a collective over more devices than the
  // system has, an FP8 GEMM on a system without FP8 tensor cores.
  void WarnAboutSystem(const HloInstruction* instr, const InstrInfo& info);
  // Adds to scratch_ the last task of each stream whose queue the kernel waits on.
  void AddQueueWaits(const InstrInfo& info);

  const HloModule& module_;
  const SystemSpec& sys_;
  const SimOptions& opts_;
  Value ready_;
  std::vector<std::string> stream_names_;
  std::vector<int32_t> last_on_stream_;
  absl::flat_hash_map<int64_t, int32_t> queue_stream_;
  absl::flat_hash_map<const HloInstruction*, InstrInfo> info_;
  absl::flat_hash_map<const HloComputation*, std::vector<HloInstruction*>> post_order_;
  absl::flat_hash_map<const HloInstruction*, std::optional<int64_t>> trips_;
  // Which loop bodies are windowed einsum loops (recorded in `loops`).
  WindowedStepScan step_scan_;
  absl::flat_hash_map<const HloComputation*, std::pair<double, double>> estimate_;
  absl::flat_hash_set<const HloComputation*> active_;
  absl::flat_hash_set<const HloInstruction*> warned_;
  bool warned_group_ = false;
  bool warned_fp8_ = false;
  std::vector<int32_t> scratch_;
  std::vector<int32_t> gates_;  // zero-work gates of the loops being expanded, innermost last
};

}  // namespace weave::sim::internal
