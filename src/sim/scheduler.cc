// The simulator's list scheduler with fluid rates (sim/scheduler.h).
#include "sim/scheduler.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weave::sim::internal {

absl::StatusOr<Schedule> RunSchedule(const std::vector<Task>& tasks,
                                     const std::vector<int32_t>& deps,
                                     const std::vector<internal::Phase>& phases,
                                     size_t num_streams, double contention) {
  const size_t n = tasks.size();
  Schedule sch;
  sch.start.assign(n, 0);
  sch.end.assign(n, 0);
  // Users in CSR form.
  std::vector<uint32_t> user_begin(n + 1, 0);
  for (const Task& t : tasks) {
    for (uint32_t d = 0; d < t.dep_count; ++d) ++user_begin[static_cast<size_t>(deps[t.dep_begin + d]) + 1];
  }
  for (size_t i = 0; i < n; ++i) user_begin[i + 1] += user_begin[i];
  std::vector<int32_t> users(user_begin[n]);
  {
    std::vector<uint32_t> fill(user_begin.begin(), user_begin.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      const Task& t = tasks[i];
      for (uint32_t d = 0; d < t.dep_count; ++d) {
        users[fill[static_cast<size_t>(deps[t.dep_begin + d])]++] = static_cast<int32_t>(i);
      }
    }
  }
  std::vector<uint32_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = tasks[i].dep_count;

  // Priority: the longest path of work from the kernel to the end of the graph (critical path
  // first), computed backwards (dependencies always have smaller ids).
  std::vector<double> level(n, 0);
  for (size_t i = n; i-- > 0;) {
    double below = 0;
    for (uint32_t u = user_begin[i]; u < user_begin[i + 1]; ++u) {
      below = std::max(below, level[static_cast<size_t>(users[u])]);
    }
    level[i] = tasks[i].work + below;
  }
  // (0 if force_earliest else 1, -level, task id): smallest first.
  using Key = std::tuple<int, double, int32_t>;
  std::vector<std::priority_queue<Key, std::vector<Key>, std::greater<Key>>> queues(num_streams);
  std::vector<int32_t> running(num_streams, -1);
  std::vector<double> remaining(n, 0);   // work left in the current phase (comm: in the task)
  std::vector<uint32_t> phase(n, 0);     // current phase (compute kernels)
  std::vector<double> rate(n, 0);
  std::vector<int32_t> compute;  // running compute kernels, in issue order
  std::vector<int32_t> comm;     // running collectives
  std::vector<int32_t> dirty;    // streams that may be able to start a kernel
  std::vector<char> is_dirty(num_streams, 0);
  auto mark = [&](int32_t s) {
    if (!is_dirty[static_cast<size_t>(s)]) {
      is_dirty[static_cast<size_t>(s)] = 1;
      dirty.push_back(s);
    }
  };
  std::vector<int32_t> instant;  // ready zero-work kernels: finish as soon as they are ready
  std::vector<int32_t> empty;    // started compute kernels without any phase work
  auto make_ready = [&](int32_t t) {
    const Task& task = tasks[static_cast<size_t>(t)];
    if (task.kind == CostKind::kFree) {
      instant.push_back(t);
      return;
    }
    queues[static_cast<size_t>(task.stream)].push(
        {task.force_earliest ? 0 : 1, -level[static_cast<size_t>(t)], t});
    mark(task.stream);
  };
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) make_ready(static_cast<int32_t>(i));
  }
  double now = 0;
  size_t finished = 0;
  std::vector<int32_t> done;
  auto finish = [&](int32_t t) {
    sch.end[static_cast<size_t>(t)] = now;
    ++finished;
    for (uint32_t u = user_begin[static_cast<size_t>(t)];
         u < user_begin[static_cast<size_t>(t) + 1]; ++u) {
      int32_t user = users[u];
      if (--pending[static_cast<size_t>(user)] == 0) make_ready(user);
    }
  };
  // Moves a compute kernel to its next phase with work; false when it has none left.
  auto next_phase = [&](int32_t t) {
    const Task& task = tasks[static_cast<size_t>(t)];
    uint32_t& p = phase[static_cast<size_t>(t)];
    while (p < task.phase_count && !(phases[task.phase_begin + p].work > 0)) ++p;
    if (p >= task.phase_count) return false;
    remaining[static_cast<size_t>(t)] = phases[task.phase_begin + p].work;
    return true;
  };
  auto tolerance = [&](int32_t t) {
    return 1e-9 * std::max(1.0, tasks[static_cast<size_t>(t)].work);
  };
  while (finished < n) {
    while (!instant.empty()) {
      int32_t t = instant.back();
      instant.pop_back();
      sch.start[static_cast<size_t>(t)] = now;
      finish(t);
    }
    if (finished == n) break;
    for (int32_t s : dirty) {
      is_dirty[static_cast<size_t>(s)] = 0;
      auto& q = queues[static_cast<size_t>(s)];
      while (running[static_cast<size_t>(s)] < 0 && !q.empty()) {
        int32_t t = std::get<2>(q.top());
        q.pop();
        sch.start[static_cast<size_t>(t)] = now;
        const Task& task = tasks[static_cast<size_t>(t)];
        if (task.kind == CostKind::kComm) {
          remaining[static_cast<size_t>(t)] = task.work;
          running[static_cast<size_t>(s)] = t;
          comm.push_back(t);
        } else {
          phase[static_cast<size_t>(t)] = 0;
          if (!next_phase(t)) {  // no work at all: finished once the streams are served
            empty.push_back(t);
            continue;
          }
          running[static_cast<size_t>(s)] = t;
          compute.push_back(t);
        }
      }
    }
    dirty.clear();
    for (int32_t t : empty) finish(t);
    const bool served = !empty.empty();
    empty.clear();
    if (!instant.empty() || served) continue;
    if (compute.empty() && comm.empty()) {
      return absl::InternalError(absl::StrFormat(
          "scheduler stalled with %d of %d kernels unfinished (dependency cycle?)", n - finished,
          n));
    }
    // Rates: issue order over the compute capacity.
    const double capacity = comm.empty() ? 1.0 : 1.0 / (1.0 + contention);
    double sm_left = capacity, hbm_left = capacity;
    bool computing = false;
    for (int32_t t : compute) {
      const Task& task = tasks[static_cast<size_t>(t)];
      const internal::Phase& ph = phases[task.phase_begin + phase[static_cast<size_t>(t)]];
      double f = 1.0;
      if (ph.sm > 0) f = std::min(f, sm_left / ph.sm);
      if (ph.hbm > 0) f = std::min(f, hbm_left / ph.hbm);
      f = std::max(f, 0.0);
      sm_left = std::max(0.0, sm_left - f * ph.sm);
      hbm_left = std::max(0.0, hbm_left - f * ph.hbm);
      rate[static_cast<size_t>(t)] = f;
      computing |= f > 0;
    }
    for (int32_t t : comm) rate[static_cast<size_t>(t)] = 1.0;
    double dt = -1;
    for (const std::vector<int32_t>* list : {&compute, &comm}) {
      for (int32_t t : *list) {
        double r = rate[static_cast<size_t>(t)];
        if (!(r > 0)) continue;
        double d = remaining[static_cast<size_t>(t)] / r;
        if (dt < 0 || d < dt) dt = d;
      }
    }
    if (dt < 0) {
      return absl::InternalError("scheduler: no running kernel makes progress");
    }
    if (!comm.empty() && !computing) sch.exposed_comm += dt;
    now += dt;
    done.clear();
    for (size_t a = 0; a < compute.size();) {
      int32_t t = compute[a];
      double& rem = remaining[static_cast<size_t>(t)];
      rem -= rate[static_cast<size_t>(t)] * dt;
      if (rem <= tolerance(t)) {
        ++phase[static_cast<size_t>(t)];
        if (!next_phase(t)) {
          done.push_back(t);
          const int32_t s = tasks[static_cast<size_t>(t)].stream;
          running[static_cast<size_t>(s)] = -1;
          mark(s);
          compute.erase(compute.begin() + static_cast<std::ptrdiff_t>(a));  // keeps issue order
          continue;
        }
      }
      ++a;
    }
    for (size_t a = 0; a < comm.size();) {
      int32_t t = comm[a];
      double& rem = remaining[static_cast<size_t>(t)];
      rem -= dt;
      if (rem <= tolerance(t)) {
        done.push_back(t);
        const int32_t s = tasks[static_cast<size_t>(t)].stream;
        running[static_cast<size_t>(s)] = -1;
        mark(s);
        comm[a] = comm.back();
        comm.pop_back();
      } else {
        ++a;
      }
    }
    for (int32_t t : done) finish(t);
  }
  sch.makespan = now;
  return sch;
}

}  // namespace weave::sim::internal
