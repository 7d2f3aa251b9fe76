// The performance model's engine: expands the module into a graph of kernels (loops unrolled
// trip-count times, calls inlined, conditionals reduced to their costlier branch), then runs a
// list scheduler with fluid rates over the streams (see simulator.h).
#include "sim/simulator.h"

#include <algorithm>
#include <memory>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpu/windowed_loop.h"
#include "sim/costs.h"

namespace weave::sim {
namespace {

using internal::CostKind;
using internal::InstrCost;

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

class Expander {
 public:
  Expander(const HloModule& m, const SystemSpec& s, const SimOptions& o)
      : module_(m), sys_(s), opts_(o) {
    stream_names_ = {"compute", "comm"};
    last_on_stream_ = {-1, -1};
    ready_ = std::make_shared<ValueNode>();
  }

  absl::StatusOr<Value> Run() {
    const HloComputation* entry = module_.entry();
    if (entry == nullptr) return absl::InvalidArgumentError("module has no entry computation");
    std::vector<Value> args(static_cast<size_t>(entry->num_parameters()), ready_);
    return Expand(entry, args);
  }

  std::vector<Task> tasks;
  std::vector<int32_t> deps;
  std::vector<internal::Phase> phases;
  std::vector<LoopInstance> loops;
  std::vector<std::string> warnings;
  const std::vector<std::string>& stream_names() const { return stream_names_; }

  bool IsWindowedBody(const HloComputation* comp) {
    auto [gemm, permute] = Contents(comp);
    return gemm && permute;
  }

 private:
  const InstrInfo& Info(const HloInstruction* instr) {
    auto it = info_.find(instr);
    if (it != info_.end()) return it->second;
    InstrInfo info;
    info.cost = internal::CostOf(*instr, sys_, module_.num_partitions, module_.replica_count);
    nlohmann::json cfg = internal::BackendConfig(*instr);
    info.queue = internal::OperationQueueId(cfg);
    info.waits = internal::WaitOnOperationQueues(cfg);
    info.force_earliest = internal::ForceEarliestSchedule(cfg);
    return info_.emplace(instr, std::move(info)).first->second;
  }

  const std::vector<HloInstruction*>& PostOrder(const HloComputation* comp) {
    auto it = post_order_.find(comp);
    if (it != post_order_.end()) return it->second;
    return post_order_.emplace(comp, comp->MakeInstructionPostOrder()).first->second;
  }

  int32_t StreamForQueue(int64_t queue) {
    if (queue == 0) return kMainStream;
    auto it = queue_stream_.find(queue);
    if (it != queue_stream_.end()) return it->second;
    int32_t id = static_cast<int32_t>(stream_names_.size());
    stream_names_.push_back(absl::StrCat("compute:queue", queue));
    last_on_stream_.push_back(-1);
    queue_stream_[queue] = id;
    return id;
  }

  std::optional<int64_t> TripCount(const HloInstruction* w) {
    auto it = trips_.find(w);
    if (it != trips_.end()) return it->second;
    std::optional<int64_t> t = WhileTripCount(*w);
    trips_[w] = t;
    return t;
  }

  // (has GEMM, has collective-permute), through callees.
  std::pair<bool, bool> Contents(const HloComputation* comp) {
    auto it = contents_.find(comp);
    if (it != contents_.end()) return it->second;
    contents_[comp] = {false, false};  // cycle guard
    bool gemm = false, permute = false;
    for (const HloInstruction* i : comp->instructions()) {
      HloOpcode op = i->opcode();
      if (op == HloOpcode::kDot || internal::IsGemmCustomCall(*i)) gemm = true;
      if (op == HloOpcode::kCollectivePermute || op == HloOpcode::kCollectivePermuteStart) {
        permute = true;
      }
      if (op == HloOpcode::kFusion) {
        if (Info(i).cost.kind == CostKind::kGemm) gemm = true;
        continue;
      }
      for (const HloComputation* c : i->called_computations()) {
        if (c == nullptr) continue;
        auto [g, p] = Contents(c);
        gemm |= g;
        permute |= p;
      }
    }
    contents_[comp] = {gemm, permute};
    return {gemm, permute};
  }

  // Estimated cost (sum of kernel times) and kernel count of one execution of `comp`.
  std::pair<double, double> Estimate(const HloComputation* comp) {
    auto it = estimate_.find(comp);
    if (it != estimate_.end()) return it->second;
    estimate_[comp] = {0, 0};  // cycle guard
    double us = 0, count = 0;
    for (const HloInstruction* i : comp->instructions()) {
      switch (i->opcode()) {
        case HloOpcode::kCall:
          if (!i->called_computations().empty() && i->to_apply() != nullptr) {
            auto [u, c] = Estimate(i->to_apply());
            us += u;
            count += c;
          }
          break;
        case HloOpcode::kConditional: {
          double best = 0, best_count = 0;
          for (const HloComputation* b : i->called_computations()) {
            if (b == nullptr) continue;
            auto [u, c] = Estimate(b);
            if (u > best) best = u;
            best_count = std::max(best_count, c);
          }
          us += best;
          count += best_count;
          break;
        }
        case HloOpcode::kWhile: {
          if (i->called_computations().size() < 2 || i->while_body() == nullptr) break;
          double trips = static_cast<double>(TripCount(i).value_or(1));
          auto [u, c] = Estimate(i->while_body());
          us += trips * u;
          count += trips * c;
          break;
        }
        default: {
          const InstrInfo& info = Info(i);
          if (info.cost.kind == CostKind::kGemm || info.cost.kind == CostKind::kMemory ||
              info.cost.kind == CostKind::kComm) {
            us += info.cost.us;
            count += 1;
          }
        }
      }
    }
    estimate_[comp] = {us, count};
    return {us, count};
  }

  // Appends a kernel depending on `*dep_ids` (modified) and on the innermost loop gate.
  int32_t AddTask(const HloInstruction* instr, CostKind kind, double work, int32_t stream,
                  bool force_earliest, std::vector<int32_t>* dep_ids,
                  const std::vector<internal::Phase>* task_phases = nullptr) {
    if (!gates_.empty()) dep_ids->push_back(gates_.back());
    std::sort(dep_ids->begin(), dep_ids->end());
    dep_ids->erase(std::unique(dep_ids->begin(), dep_ids->end()), dep_ids->end());
    Task task;
    task.instr = instr;
    task.work = work;
    task.kind = kind;
    task.stream = stream;
    task.force_earliest = force_earliest;
    task.dep_begin = static_cast<uint32_t>(deps.size());
    task.dep_count = static_cast<uint32_t>(dep_ids->size());
    deps.insert(deps.end(), dep_ids->begin(), dep_ids->end());
    task.phase_begin = static_cast<uint32_t>(phases.size());
    if (kind == CostKind::kGemm || kind == CostKind::kMemory) {
      if (task_phases != nullptr && !task_phases->empty()) {
        phases.insert(phases.end(), task_phases->begin(), task_phases->end());
      } else {
        phases.push_back({work, 1.0, 1.0});
      }
    }
    task.phase_count = static_cast<uint32_t>(phases.size()) - task.phase_begin;
    tasks.push_back(task);
    return static_cast<int32_t>(tasks.size() - 1);
  }

  Value Leaf(int32_t task) {
    auto n = std::make_shared<ValueNode>();
    n->task = task;
    return n;
  }

  Value Join(std::vector<Value> parts) {
    parts.erase(std::remove_if(parts.begin(), parts.end(),
                               [&](const Value& v) { return v == nullptr || v == ready_; }),
                parts.end());
    if (parts.empty()) return ready_;
    if (parts.size() == 1) return parts[0];
    auto n = std::make_shared<ValueNode>();
    n->elems = std::move(parts);
    return n;
  }

  void CollectLeaves(const Value& v, std::vector<int32_t>* out) {
    if (v == nullptr) return;
    if (v->task >= 0) out->push_back(v->task);
    for (const Value& e : v->elems) CollectLeaves(e, out);
  }

  absl::StatusOr<Value> Expand(const HloComputation* comp, const std::vector<Value>& args) {
    if (active_.contains(comp)) {
      return absl::InvalidArgumentError(
          absl::StrCat("computation ", comp->name(), " calls itself: cannot simulate"));
    }
    active_.insert(comp);
    absl::StatusOr<Value> r = ExpandBody(comp, args);
    active_.erase(comp);
    return r;
  }

  // A GEMM whose add is folded into its epilogue, waiting for that add (see CostOf).
  struct Deferred {
    const HloInstruction* gemm = nullptr;
    const HloInstruction* value = nullptr;  // the GEMM's result as the add reads it
    std::vector<int32_t> deps;
    int32_t stream = 0;
  };

  absl::StatusOr<Value> ExpandBody(const HloComputation* comp, const std::vector<Value>& args) {
    absl::flat_hash_map<const HloInstruction*, Deferred> deferred;  // by the folding add
    absl::flat_hash_map<const HloInstruction*, Value> vals;
    vals.reserve(static_cast<size_t>(comp->instruction_count()));
    auto get = [&](const HloInstruction* op) -> Value {
      auto it = vals.find(op);
      return it == vals.end() ? ready_ : it->second;
    };
    auto operand_values = [&](const HloInstruction* i) {
      std::vector<Value> v;
      v.reserve(i->operands().size());
      for (const HloInstruction* op : i->operands()) v.push_back(get(op));
      return v;
    };
    for (const HloInstruction* instr : PostOrder(comp)) {
      Value v;
      switch (instr->opcode()) {
        case HloOpcode::kParameter: {
          int64_t n = instr->parameter_number;
          v = n >= 0 && n < static_cast<int64_t>(args.size()) ? args[static_cast<size_t>(n)]
                                                              : ready_;
          break;
        }
        case HloOpcode::kGetTupleElement: {
          Value t = instr->operand_count() > 0 ? get(instr->operand(0)) : ready_;
          int64_t idx = instr->tuple_index;
          v = t->tuple && idx >= 0 && idx < static_cast<int64_t>(t->elems.size())
                  ? t->elems[static_cast<size_t>(idx)]
                  : t;
          break;
        }
        case HloOpcode::kTuple: {
          auto n = std::make_shared<ValueNode>();
          n->tuple = true;
          n->elems = operand_values(instr);
          v = n;
          break;
        }
        case HloOpcode::kCall: {
          if (instr->called_computations().empty() || instr->to_apply() == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat("call ", instr->name(), " has no computation"));
          }
          auto r = Expand(instr->to_apply(), operand_values(instr));
          if (!r.ok()) return r.status();
          v = *r;
          break;
        }
        case HloOpcode::kConditional: {
          const auto& branches = instr->called_computations();
          if (branches.empty() || instr->operand_count() != static_cast<int64_t>(branches.size()) + 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "conditional ", instr->name(), ": expected one operand per branch plus the "
                "selector"));
          }
          size_t best = 0;
          double best_us = -1;
          for (size_t b = 0; b < branches.size(); ++b) {
            double us = branches[b] == nullptr ? 0 : Estimate(branches[b]).first;
            if (us > best_us) {
              best_us = us;
              best = b;
            }
          }
          if (branches[best] == nullptr) {
            v = ready_;
            break;
          }
          Value arg = get(instr->operand(static_cast<int64_t>(best) + 1));
          Value pred = get(instr->operand(0));
          if (!arg->tuple) arg = Join({pred, arg});
          auto r = Expand(branches[best], {arg});
          if (!r.ok()) return r.status();
          v = *r;
          break;
        }
        case HloOpcode::kWhile: {
          if (instr->called_computations().size() < 2 || instr->while_body() == nullptr ||
              instr->operand_count() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat("while ", instr->name(), ": needs one operand, condition and body"));
          }
          std::optional<int64_t> trips = TripCount(instr);
          if (!trips) {
            if (!warned_.contains(instr)) {
              warned_.insert(instr);
              warnings.push_back(absl::StrCat(
                  "while ", instr->name(),
                  ": trip count unknown (no known_trip_count, condition not a counter "
                  "compare); assumed 1"));
            }
            trips = 1;
          }
          double per_iter = Estimate(instr->while_body()).second;
          double total = static_cast<double>(tasks.size()) + per_iter * static_cast<double>(*trips);
          if (total > static_cast<double>(opts_.max_tasks)) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "while %s: %d iterations of %g kernels exceed the simulation limit of %d "
                "kernels",
                instr->name(), *trips, per_iter, opts_.max_tasks));
          }
          LoopInstance inst;
          inst.loop = instr;
          inst.trips = *trips;
          inst.begin = static_cast<int32_t>(tasks.size());
          Value state = get(instr->operand(0));
          // Iterations run one after the other, as XLA's while thunk does: a zero-work gate
          // starts each iteration once the previous one has finished (the first once the
          // initial state is ready), and every kernel of the iteration depends on it. The
          // loop's result is a last gate after the last iteration.
          scratch_.clear();
          CollectLeaves(state, &scratch_);
          int32_t gate = AddTask(instr, CostKind::kFree, 0, kMainStream, false, &scratch_);
          for (int64_t t = 0; t < *trips; ++t) {
            int32_t iter_begin = static_cast<int32_t>(tasks.size());
            gates_.push_back(gate);
            auto r = Expand(instr->while_body(), {state});
            gates_.pop_back();
            if (!r.ok()) return r.status();
            state = *r;
            scratch_.clear();
            CollectLeaves(state, &scratch_);
            scratch_.push_back(gate);
            for (int32_t i = iter_begin; i < static_cast<int32_t>(tasks.size()); ++i) {
              scratch_.push_back(i);
            }
            gate = AddTask(instr, CostKind::kFree, 0, kMainStream, false, &scratch_);
          }
          if (*trips > 0) state = Leaf(gate);
          inst.end = static_cast<int32_t>(tasks.size());
          if (IsWindowedBody(instr->while_body())) loops.push_back(inst);
          v = state;
          break;
        }
        default: {
          const InstrInfo& info = Info(instr);
          switch (info.cost.kind) {
            case CostKind::kPassThrough:
              if (instr->operand_count() == 0) {
                v = ready_;
              } else if (instr->operand_count() == 1 ||
                         instr->opcode() == HloOpcode::kOptimizationBarrier) {
                v = get(instr->operand(0));
              } else {
                v = Join(operand_values(instr));
              }
              break;
            case CostKind::kFree:
            case CostKind::kStructural:
              if (auto it = deferred.find(instr); it != deferred.end()) {
                // The add folded into a GEMM's epilogue: the GEMM runs now, once the
                // accumulator (the add's other operand) is ready too.
                Deferred d = std::move(it->second);
                deferred.erase(it);
                for (const HloInstruction* op : instr->operands()) {
                  if (op != d.value) CollectLeaves(get(op), &d.deps);
                }
                const InstrInfo& gi = Info(d.gemm);
                int32_t id = AddTask(d.gemm, gi.cost.kind, gi.cost.us, d.stream,
                                     gi.force_earliest, &d.deps, &gi.cost.phases);
                last_on_stream_[static_cast<size_t>(d.stream)] = id;
                v = Leaf(id);
                break;
              }
              v = Join(operand_values(instr));
              break;
            default: {
              if (!(info.cost.us > 0)) {
                v = Join(operand_values(instr));
                break;
              }
              if (static_cast<int64_t>(tasks.size()) >= opts_.max_tasks) {
                return absl::ResourceExhaustedError(absl::StrFormat(
                    "module expands to more than %d kernels", opts_.max_tasks));
              }
              if (info.cost.kind == CostKind::kComm && info.cost.group > sys_.num_gpus &&
                  !warned_group_) {
                warned_group_ = true;
                warnings.push_back(absl::StrFormat(
                    "%s: collective over %d devices but %s has %d GPUs; every collective is "
                    "modelled at its NVLink rate (no inter-node network)",
                    instr->name(), info.cost.group, sys_.name, sys_.num_gpus));
              }
              if (info.cost.fp8 && !(sys_.fp8_tflops > 0) && !warned_fp8_) {
                warned_fp8_ = true;
                warnings.push_back(absl::StrFormat(
                    "%s: FP8 GEMM but %s has no FP8 tensor cores; FP8 GEMMs run at the f16 rate",
                    instr->name(), sys_.name));
              }
              scratch_.clear();
              for (const HloInstruction* op : instr->operands()) CollectLeaves(get(op), &scratch_);
              for (int64_t q : info.waits) {
                if (q == 0) {
                  if (last_on_stream_[kMainStream] >= 0) {
                    scratch_.push_back(last_on_stream_[kMainStream]);
                  }
                  continue;
                }
                auto it = queue_stream_.find(q);
                if (it != queue_stream_.end() &&
                    last_on_stream_[static_cast<size_t>(it->second)] >= 0) {
                  scratch_.push_back(last_on_stream_[static_cast<size_t>(it->second)]);
                }
              }
              int32_t stream = info.cost.kind == CostKind::kComm ? kCommStream
                                                                 : StreamForQueue(info.queue);
              if (info.cost.kind == CostKind::kGemm) {
                if (const HloInstruction* add = internal::FoldingAddOfGemm(instr)) {
                  // beta = 1: issued at its add (below), which supplies the accumulator.
                  const HloInstruction* value = instr;
                  if (instr->shape().IsTuple()) {
                    for (const HloInstruction* u : instr->users()) {
                      if (u->opcode() == HloOpcode::kGetTupleElement && u->tuple_index == 0) {
                        value = u;
                      }
                    }
                  }
                  deferred[add] = Deferred{instr, value, scratch_, stream};
                  v = ready_;
                  break;
                }
              }
              int32_t id = AddTask(instr, info.cost.kind, info.cost.us, stream,
                                   info.force_earliest, &scratch_, &info.cost.phases);
              last_on_stream_[static_cast<size_t>(stream)] = id;
              v = Leaf(id);
            }
          }
        }
      }
      vals[instr] = v;
    }
    if (comp->root() == nullptr) return ready_;
    return get(comp->root());
  }

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
  absl::flat_hash_map<const HloComputation*, std::pair<bool, bool>> contents_;
  absl::flat_hash_map<const HloComputation*, std::pair<double, double>> estimate_;
  absl::flat_hash_set<const HloComputation*> active_;
  absl::flat_hash_set<const HloInstruction*> warned_;
  bool warned_group_ = false;
  bool warned_fp8_ = false;
  std::vector<int32_t> scratch_;
  std::vector<int32_t> gates_;  // zero-work gates of the loops being expanded, innermost last
};

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
  absl::StatusOr<SystemSpec> applied = ApplySimOptions(system, options);
  if (!applied.ok()) return applied.status();
  SimResult r;
  r.system = *applied;
  Expander ex(module, r.system, options);
  absl::StatusOr<Value> root = ex.Run();
  if (!root.ok()) return root.status();
  absl::StatusOr<Schedule> sch =
      RunSchedule(ex.tasks, ex.deps, ex.phases, ex.stream_names().size(), r.system.contention);
  if (!sch.ok()) return sch.status();
  r.total_us = sch->makespan;
  r.exposed_comm_us = sch->exposed_comm;
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
      e.start_us = sch->start[i];
      e.duration_us = sch->end[i] - sch->start[i];
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
      if (first < 0) first = sch->end[static_cast<size_t>(i)];
      last = std::max(last, sch->end[static_cast<size_t>(i)]);
      if (t.kind == CostKind::kGemm) gemm += t.work;
      HloOpcode op = t.instr->opcode();
      if (op == HloOpcode::kCollectivePermute || op == HloOpcode::kCollectivePermuteStart) {
        permute += t.work;
        ++permutes;
        if (ring == 0) ring = static_cast<int64_t>(t.instr->source_target_pairs.size());
      }
    }
    // The ring is the replica group the loop circulates over, not the permute's pair count when
    // several groups share one collective-permute (e.g. {{0,2,4,6},{1,3,5,7}}: 8 pairs, rings of
    // 4). The loop matcher's ring (trip count x dots per trip) is the group size for XLA's
    // one-dot-per-step layouts but counts every dot of a step that has several, so it is used
    // only to split the pair count into equal groups. MatchWindowedLoop only reads the loop.
    if (ring > 0) {
      if (auto L = MatchWindowedLoop(const_cast<HloInstruction*>(inst.loop))) {
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
