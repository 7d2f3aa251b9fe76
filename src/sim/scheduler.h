// The simulator's scheduler (sim/simulator.h): runs a kernel graph (sim/kernel_graph.h) over its
// streams and gives each kernel's start and end. Internal to src/sim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/costs.h"
#include "sim/kernel_graph.h"

namespace weave::sim::internal {

// Times in microseconds; exposed_comm: time when a collective runs and no compute does.
struct Schedule {
  std::vector<double> start, end;
  double makespan = 0;
  double exposed_comm = 0;
};

// List scheduler with fluid rates. Each stream runs one kernel at a time, picking among its ready
// kernels the force_earliest ones first, then the one with the longest path to the end (critical
// path), then program order. Running compute kernels share the GPU in issue order (the order they
// started): each takes, for its current phase, the SM and HBM fractions it asks for out of what
// the earlier ones left, and runs at the rate that allows. While a collective runs, compute has
// 1 / (1 + contention) of the GPU. Collectives run at full rate on their own stream.
absl::StatusOr<Schedule> RunSchedule(const std::vector<Task>& tasks,
                                     const std::vector<int32_t>& deps,
                                     const std::vector<internal::Phase>& phases,
                                     size_t num_streams, double contention);

}  // namespace weave::sim::internal
