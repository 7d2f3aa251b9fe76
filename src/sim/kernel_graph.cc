// The simulator's kernel graph (sim/kernel_graph.h): expansion of a module into kernels.
#include "sim/kernel_graph.h"

#include <algorithm>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hlo/gemm_call.h"
#include "passes/gpu_backend_config.h"
#include "hlo/status_macros.h"

namespace weave::sim::internal {

Expander::Expander(const HloModule& m, const SystemSpec& s, const SimOptions& o)
    : module_(m), sys_(s), opts_(o) {
  stream_names_ = {"compute", "comm"};
  last_on_stream_ = {-1, -1};
  ready_ = std::make_shared<ValueNode>();
}

absl::StatusOr<Value> Expander::Run() {
  const HloComputation* entry = module_.entry();
  if (entry == nullptr) return absl::InvalidArgumentError("module has no entry computation");
  std::vector<Value> args(static_cast<size_t>(entry->num_parameters()), ready_);
  return Expand(entry, args);
}

const InstrInfo& Expander::Info(const HloInstruction* instr) {
  auto it = info_.find(instr);
  if (it != info_.end()) return it->second;
  InstrInfo info;
  info.cost = internal::CostOf(*instr, sys_, module_.num_partitions, module_.replica_count);
  nlohmann::json cfg = internal::BackendConfig(*instr);
  // The stream as every pass that assigns streams reads it (passes/gpu_backend_config.h).
  info.queue = OperationQueueId(*instr);
  info.waits = internal::WaitOnOperationQueues(cfg);
  info.force_earliest = internal::ForceEarliestSchedule(cfg);
  return info_.emplace(instr, std::move(info)).first->second;
}

const std::vector<HloInstruction*>& Expander::PostOrder(const HloComputation* comp) {
  auto it = post_order_.find(comp);
  if (it != post_order_.end()) return it->second;
  return post_order_.emplace(comp, comp->MakeInstructionPostOrder()).first->second;
}

int32_t Expander::StreamForQueue(int64_t queue) {
  if (queue == 0) return kMainStream;
  auto it = queue_stream_.find(queue);
  if (it != queue_stream_.end()) return it->second;
  int32_t id = static_cast<int32_t>(stream_names_.size());
  stream_names_.push_back(absl::StrCat("compute:queue", queue));
  last_on_stream_.push_back(-1);
  queue_stream_[queue] = id;
  return id;
}

std::optional<int64_t> Expander::TripCount(const HloInstruction* w) {
  auto it = trips_.find(w);
  if (it != trips_.end()) return it->second;
  std::optional<int64_t> t = WhileTripCount(*w);
  trips_[w] = t;
  return t;
}

// (has GEMM, has collective-permute), through callees.
// Estimated cost (sum of kernel times) and kernel count of one execution of `comp`.
std::pair<double, double> Expander::Estimate(const HloComputation* comp) {
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
int32_t Expander::AddTask(const HloInstruction* instr, CostKind kind, double work, int32_t stream,
                          bool force_earliest, std::vector<int32_t>* dep_ids,
                          const std::vector<internal::Phase>* task_phases) {
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

Value Expander::Leaf(int32_t task) {
  auto n = std::make_shared<ValueNode>();
  n->task = task;
  return n;
}

Value Expander::Join(std::vector<Value> parts) {
  parts.erase(std::remove_if(parts.begin(), parts.end(),
                             [&](const Value& v) { return v == nullptr || v == ready_; }),
              parts.end());
  if (parts.empty()) return ready_;
  if (parts.size() == 1) return parts[0];
  auto n = std::make_shared<ValueNode>();
  n->elems = std::move(parts);
  return n;
}

void Expander::CollectLeaves(const Value& v, std::vector<int32_t>* out) {
  if (v == nullptr) return;
  if (v->task >= 0) out->push_back(v->task);
  for (const Value& e : v->elems) CollectLeaves(e, out);
}

absl::StatusOr<Value> Expander::Expand(const HloComputation* comp, const std::vector<Value>& args) {
  if (active_.contains(comp)) {
    return absl::InvalidArgumentError(
        absl::StrCat("computation ", comp->name(), " calls itself: cannot simulate"));
  }
  active_.insert(comp);
  absl::StatusOr<Value> r = ExpandBody(comp, args);
  active_.erase(comp);
  return r;
}

// The values of one computation's instructions as it is expanded, and the GEMMs waiting for the
// add folded into their epilogue (keyed by that add).
struct Expander::Scope {
  Value ready;
  absl::flat_hash_map<const HloInstruction*, Deferred> deferred;
  absl::flat_hash_map<const HloInstruction*, Value> vals;

  Value Get(const HloInstruction* op) const {
    auto it = vals.find(op);
    return it == vals.end() ? ready : it->second;
  }
  std::vector<Value> OperandValues(const HloInstruction* i) const {
    std::vector<Value> v;
    v.reserve(i->operands().size());
    for (const HloInstruction* op : i->operands()) v.push_back(Get(op));
    return v;
  }
};

absl::StatusOr<Value> Expander::ExpandBody(const HloComputation* comp,
                                           const std::vector<Value>& args) {
  Scope scope;
  scope.ready = ready_;
  scope.vals.reserve(static_cast<size_t>(comp->instruction_count()));
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
        Value t = instr->operand_count() > 0 ? scope.Get(instr->operand(0)) : ready_;
        int64_t idx = instr->tuple_index;
        v = t->tuple && idx >= 0 && idx < static_cast<int64_t>(t->elems.size())
                ? t->elems[static_cast<size_t>(idx)]
                : t;
        break;
      }
      case HloOpcode::kTuple: {
        auto n = std::make_shared<ValueNode>();
        n->tuple = true;
        n->elems = scope.OperandValues(instr);
        v = n;
        break;
      }
      case HloOpcode::kCall: {
        if (instr->called_computations().empty() || instr->to_apply() == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("call ", instr->name(), " has no computation"));
        }
        ASSIGN_OR_RETURN(v, Expand(instr->to_apply(), scope.OperandValues(instr)));
        break;
      }
      case HloOpcode::kConditional: {
        ASSIGN_OR_RETURN(v, ExpandConditional(instr, scope));
        break;
      }
      case HloOpcode::kWhile: {
        ASSIGN_OR_RETURN(v, ExpandWhile(instr, scope));
        break;
      }
      default: {
        ASSIGN_OR_RETURN(v, ExpandKernel(instr, scope));
        break;
      }
    }
    scope.vals[instr] = v;
  }
  if (comp->root() == nullptr) return ready_;
  return scope.Get(comp->root());
}

absl::StatusOr<Value> Expander::ExpandConditional(const HloInstruction* instr, Scope& scope) {
  const auto& branches = instr->called_computations();
  if (branches.empty() || instr->operand_count() != static_cast<int64_t>(branches.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conditional ", instr->name(), ": expected one operand per branch plus the "
        "selector"));
  }
  // The most expensive branch stands for the conditional.
  size_t best = 0;
  double best_us = -1;
  for (size_t b = 0; b < branches.size(); ++b) {
    double us = branches[b] == nullptr ? 0 : Estimate(branches[b]).first;
    if (us > best_us) {
      best_us = us;
      best = b;
    }
  }
  if (branches[best] == nullptr) return ready_;
  Value arg = scope.Get(instr->operand(static_cast<int64_t>(best) + 1));
  Value pred = scope.Get(instr->operand(0));
  if (!arg->tuple) arg = Join({pred, arg});
  return Expand(branches[best], {arg});
}

absl::StatusOr<Value> Expander::ExpandWhile(const HloInstruction* instr, Scope& scope) {
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
  Value state = scope.Get(instr->operand(0));
  // Iterations run one after the other, as XLA's while thunk does: a zero-work gate starts each
  // iteration once the previous one has finished (the first once the initial state is ready),
  // and every kernel of the iteration depends on it. The loop's result is a last gate after the
  // last iteration.
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
  if (step_scan_.HoldsWindowedStep(instr->while_body())) loops.push_back(inst);
  return state;
}

absl::StatusOr<Value> Expander::ExpandKernel(const HloInstruction* instr, Scope& scope) {
  const InstrInfo& info = Info(instr);
  switch (info.cost.kind) {
    case CostKind::kPassThrough:
      if (instr->operand_count() == 0) return ready_;
      if (instr->operand_count() == 1 || instr->opcode() == HloOpcode::kOptimizationBarrier) {
        return scope.Get(instr->operand(0));
      }
      return Join(scope.OperandValues(instr));
    case CostKind::kFree:
    case CostKind::kStructural:
      if (auto it = scope.deferred.find(instr); it != scope.deferred.end()) {
        // The add folded into a GEMM's epilogue: the GEMM runs now, once the accumulator (the
        // add's other operand) is ready too.
        Deferred d = std::move(it->second);
        scope.deferred.erase(it);
        for (const HloInstruction* op : instr->operands()) {
          if (op != d.value) CollectLeaves(scope.Get(op), &d.deps);
        }
        const InstrInfo& gi = Info(d.gemm);
        int32_t id = AddTask(d.gemm, gi.cost.kind, gi.cost.us, d.stream, gi.force_earliest,
                             &d.deps, &gi.cost.phases);
        last_on_stream_[static_cast<size_t>(d.stream)] = id;
        return Leaf(id);
      }
      return Join(scope.OperandValues(instr));
    default:
      break;
  }
  if (!(info.cost.us > 0)) return Join(scope.OperandValues(instr));
  if (static_cast<int64_t>(tasks.size()) >= opts_.max_tasks) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("module expands to more than %d kernels", opts_.max_tasks));
  }
  WarnAboutSystem(instr, info);
  scratch_.clear();
  for (const HloInstruction* op : instr->operands()) CollectLeaves(scope.Get(op), &scratch_);
  AddQueueWaits(info);
  int32_t stream = info.cost.kind == CostKind::kComm ? kCommStream : StreamForQueue(info.queue);
  if (opts_.serial_sub_wave_gemms && info.cost.kind == CostKind::kGemm) {
    // A GEMM of less than one wave (no phase on every SM): on the main stream.
    bool sub_wave = true;
    for (const Phase& p : info.cost.phases) sub_wave = sub_wave && p.sm < 1.0;
    if (sub_wave) stream = kMainStream;
  }
  if (info.cost.kind == CostKind::kGemm) {
    if (const HloInstruction* add = internal::FoldingAddOfGemm(instr)) {
      // beta = 1: issued at its add (above), which supplies the accumulator.
      const HloInstruction* value = instr;
      if (instr->shape().IsTuple()) {
        for (const HloInstruction* u : instr->users()) {
          if (u->opcode() == HloOpcode::kGetTupleElement && u->tuple_index == 0) value = u;
        }
      }
      scope.deferred[add] = Deferred{instr, value, scratch_, stream};
      return ready_;
    }
  }
  int32_t id = AddTask(instr, info.cost.kind, info.cost.us, stream, info.force_earliest,
                       &scratch_, &info.cost.phases);
  last_on_stream_[static_cast<size_t>(stream)] = id;
  return Leaf(id);
}

void Expander::WarnAboutSystem(const HloInstruction* instr, const InstrInfo& info) {
  if (info.cost.kind == CostKind::kComm && info.cost.group > sys_.num_gpus && !warned_group_) {
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
}

void Expander::AddQueueWaits(const InstrInfo& info) {
  for (int64_t q : info.waits) {
    if (q == 0) {
      if (last_on_stream_[kMainStream] >= 0) scratch_.push_back(last_on_stream_[kMainStream]);
      continue;
    }
    auto it = queue_stream_.find(q);
    if (it != queue_stream_.end() && last_on_stream_[static_cast<size_t>(it->second)] >= 0) {
      scratch_.push_back(last_on_stream_[static_cast<size_t>(it->second)]);
    }
  }
}

}  // namespace weave::sim::internal
