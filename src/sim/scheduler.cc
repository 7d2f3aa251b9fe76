// The simulator's list scheduler with fluid rates (sim/scheduler.h).
#include "sim/scheduler.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weave::sim::internal {
namespace {

// The state of one RunSchedule: the kernel graph's users (CSR), each kernel's priority, the
// streams' ready queues and what runs now, and the simulated clock. The event loop (Run) serves
// the streams, gives the running kernels their rates and advances the clock to the next event.
struct FluidScheduler {
  // (0 if force_earliest else 1, -level, task id): smallest first.
  using Key = std::tuple<int, double, int32_t>;

  FluidScheduler(const std::vector<Task>& tasks, const std::vector<int32_t>& deps,
                 const std::vector<internal::Phase>& phases, size_t num_streams,
                 double contention)
      : tasks(tasks), deps(deps), phases(phases), n(tasks.size()), contention(contention),
        queues(num_streams), running(num_streams, -1), remaining(n, 0), phase(n, 0), rate(n, 0),
        is_dirty(num_streams, 0) {}

  // Fills user_begin/users (the users of each kernel, in CSR form) and pending (the number of
  // dependencies not yet finished).
  void BuildUsers();
  // Fills level: the longest path of work from each kernel to the end of the graph.
  void ComputeLevels();
  // Queues a stream for serving once.
  void MarkStreamDirty(int32_t s);
  // A kernel whose dependencies have all finished: zero-work ones go to instant, the others to
  // their stream's queue.
  void MakeReady(int32_t t);
  // Ends kernel t now and readies the users it was the last dependency of.
  void Finish(int32_t t);
  // Moves a compute kernel to its next phase with work; false when it has none left.
  bool NextPhase(int32_t t);
  // The work below which kernel t's remaining phase counts as done (a relative floor on its
  // phase's work, so that rounding in the rate updates cannot leave a sliver that never ends).
  double Tolerance(int32_t t) const;
  // Starts and finishes the ready zero-work kernels at the current time.
  void RunInstant();
  // Starts the queued kernels of the dirty streams that are idle; compute kernels without any phase
  // work finish at once. True when any did (the streams must be served again).
  bool ServeDirtyStreams();
  // Gives each running compute kernel its rate (issue order over the compute capacity) and each
  // collective rate 1. True when any compute kernel makes progress.
  bool AssignRates();
  // The time until the first running kernel finishes its phase; -1 when none makes progress.
  double NextEventDelta() const;
  // Advances the running compute kernels by dt at their rates; those out of phases go to done.
  void AdvanceCompute(double dt);
  // Advances the running collectives by dt; those finished go to done.
  void AdvanceComm(double dt);
  // The event loop; errors when the graph stalls (a dependency cycle) or nothing progresses.
  absl::StatusOr<Schedule> Run();

  const std::vector<Task>& tasks;
  const std::vector<int32_t>& deps;
  const std::vector<internal::Phase>& phases;
  const size_t n;
  const double contention;
  Schedule sch;
  std::vector<uint32_t> user_begin;
  std::vector<int32_t> users;
  std::vector<uint32_t> pending;
  std::vector<double> level;
  std::vector<std::priority_queue<Key, std::vector<Key>, std::greater<Key>>> queues;
  std::vector<int32_t> running;
  std::vector<double> remaining;  // work left in the current phase (comm: in the task)
  std::vector<uint32_t> phase;    // current phase (compute kernels)
  std::vector<double> rate;
  std::vector<int32_t> compute;  // running compute kernels, in issue order
  std::vector<int32_t> comm;     // running collectives
  std::vector<int32_t> dirty;    // streams that may be able to start a kernel
  std::vector<char> is_dirty;
  std::vector<int32_t> instant;  // ready zero-work kernels: finish as soon as they are ready
  std::vector<int32_t> empty;    // started compute kernels without any phase work
  double now = 0;
  size_t finished = 0;
  std::vector<int32_t> done;
};

void FluidScheduler::BuildUsers() {
  user_begin.assign(n + 1, 0);
  for (const Task& t : tasks) {
    for (uint32_t d = 0; d < t.dep_count; ++d) ++user_begin[static_cast<size_t>(deps[t.dep_begin + d]) + 1];
  }
  for (size_t i = 0; i < n; ++i) user_begin[i + 1] += user_begin[i];
  users.assign(user_begin[n], 0);
  {
    std::vector<uint32_t> fill(user_begin.begin(), user_begin.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      const Task& t = tasks[i];
      for (uint32_t d = 0; d < t.dep_count; ++d) {
        users[fill[static_cast<size_t>(deps[t.dep_begin + d])]++] = static_cast<int32_t>(i);
      }
    }
  }
  pending.resize(n);
  for (size_t i = 0; i < n; ++i) pending[i] = tasks[i].dep_count;
}

void FluidScheduler::ComputeLevels() {
  // Priority: the longest path of work from the kernel to the end of the graph (critical path
  // first), computed backwards (dependencies always have smaller ids).
  level.assign(n, 0);
  for (size_t i = n; i-- > 0;) {
    double below = 0;
    for (uint32_t u = user_begin[i]; u < user_begin[i + 1]; ++u) {
      below = std::max(below, level[static_cast<size_t>(users[u])]);
    }
    level[i] = tasks[i].work + below;
  }
}

void FluidScheduler::MarkStreamDirty(int32_t s) {
  if (!is_dirty[static_cast<size_t>(s)]) {
    is_dirty[static_cast<size_t>(s)] = 1;
    dirty.push_back(s);
  }
}

void FluidScheduler::MakeReady(int32_t t) {
  const Task& task = tasks[static_cast<size_t>(t)];
  if (task.kind == CostKind::kFree) {
    instant.push_back(t);
    return;
  }
  queues[static_cast<size_t>(task.stream)].push(
      {task.force_earliest ? 0 : 1, -level[static_cast<size_t>(t)], t});
  MarkStreamDirty(task.stream);
}

void FluidScheduler::Finish(int32_t t) {
  sch.end[static_cast<size_t>(t)] = now;
  ++finished;
  for (uint32_t u = user_begin[static_cast<size_t>(t)];
       u < user_begin[static_cast<size_t>(t) + 1]; ++u) {
    int32_t user = users[u];
    if (--pending[static_cast<size_t>(user)] == 0) MakeReady(user);
  }
}

bool FluidScheduler::NextPhase(int32_t t) {
  const Task& task = tasks[static_cast<size_t>(t)];
  uint32_t& p = phase[static_cast<size_t>(t)];
  while (p < task.phase_count && !(phases[task.phase_begin + p].work > 0)) ++p;
  if (p >= task.phase_count) return false;
  remaining[static_cast<size_t>(t)] = phases[task.phase_begin + p].work;
  return true;
}

double FluidScheduler::Tolerance(int32_t t) const {
  return 1e-9 * std::max(1.0, tasks[static_cast<size_t>(t)].work);
}

void FluidScheduler::RunInstant() {
  while (!instant.empty()) {
    int32_t t = instant.back();
    instant.pop_back();
    sch.start[static_cast<size_t>(t)] = now;
    Finish(t);
  }
}

bool FluidScheduler::ServeDirtyStreams() {
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
        if (!NextPhase(t)) {  // no work at all: finished once the streams are served
          empty.push_back(t);
          continue;
        }
        running[static_cast<size_t>(s)] = t;
        compute.push_back(t);
      }
    }
  }
  dirty.clear();
  for (int32_t t : empty) Finish(t);
  const bool served = !empty.empty();
  empty.clear();
  return served;
}

bool FluidScheduler::AssignRates() {
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
  return computing;
}

double FluidScheduler::NextEventDelta() const {
  double dt = -1;
  for (const std::vector<int32_t>* list : {&compute, &comm}) {
    for (int32_t t : *list) {
      double r = rate[static_cast<size_t>(t)];
      if (!(r > 0)) continue;
      double d = remaining[static_cast<size_t>(t)] / r;
      if (dt < 0 || d < dt) dt = d;
    }
  }
  return dt;
}

void FluidScheduler::AdvanceCompute(double dt) {
  for (size_t a = 0; a < compute.size();) {
    int32_t t = compute[a];
    double& rem = remaining[static_cast<size_t>(t)];
    rem -= rate[static_cast<size_t>(t)] * dt;
    if (rem <= Tolerance(t)) {
      ++phase[static_cast<size_t>(t)];
      if (!NextPhase(t)) {
        done.push_back(t);
        const int32_t s = tasks[static_cast<size_t>(t)].stream;
        running[static_cast<size_t>(s)] = -1;
        MarkStreamDirty(s);
        compute.erase(compute.begin() + static_cast<std::ptrdiff_t>(a));  // keeps issue order
        continue;
      }
    }
    ++a;
  }
}

void FluidScheduler::AdvanceComm(double dt) {
  for (size_t a = 0; a < comm.size();) {
    int32_t t = comm[a];
    double& rem = remaining[static_cast<size_t>(t)];
    rem -= dt;
    if (rem <= Tolerance(t)) {
      done.push_back(t);
      const int32_t s = tasks[static_cast<size_t>(t)].stream;
      running[static_cast<size_t>(s)] = -1;
      MarkStreamDirty(s);
      comm[a] = comm.back();
      comm.pop_back();
    } else {
      ++a;
    }
  }
}

absl::StatusOr<Schedule> FluidScheduler::Run() {
  sch.start.assign(n, 0);
  sch.end.assign(n, 0);
  BuildUsers();
  ComputeLevels();
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) MakeReady(static_cast<int32_t>(i));
  }
  while (finished < n) {
    RunInstant();
    if (finished == n) break;
    const bool served = ServeDirtyStreams();
    if (!instant.empty() || served) continue;
    if (compute.empty() && comm.empty()) {
      return absl::InternalError(absl::StrFormat(
          "scheduler stalled with %d of %d kernels unfinished (dependency cycle?)", n - finished,
          n));
    }
    const bool computing = AssignRates();
    const double dt = NextEventDelta();
    if (dt < 0) {
      return absl::InternalError("scheduler: no running kernel makes progress");
    }
    if (!comm.empty() && !computing) sch.exposed_comm += dt;
    now += dt;
    done.clear();
    AdvanceCompute(dt);
    AdvanceComm(dt);
    for (int32_t t : done) Finish(t);
  }
  sch.makespan = now;
  return std::move(sch);
}

}  // namespace

absl::StatusOr<Schedule> RunSchedule(const std::vector<Task>& tasks,
                                     const std::vector<int32_t>& deps,
                                     const std::vector<internal::Phase>& phases,
                                     size_t num_streams, double contention) {
  FluidScheduler scheduler(tasks, deps, phases, num_streams, contention);
  return scheduler.Run();
}

}  // namespace weave::sim::internal
