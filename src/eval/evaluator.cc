// The reference evaluator: a per-device interpreter plus a rendezvous for collectives.
#include "eval/evaluator.h"

#include <malloc.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "eval/custom_calls.h"
#include "eval/numerics.h"
#include "eval/ops.h"

namespace weave::eval {
namespace {

using absl::InvalidArgumentError;

std::string OpName(HloOpcode op) { return std::string(HloOpcodeString(op)); }

std::string Describe(const HloInstruction* instr) {
  std::string s = absl::StrCat(OpName(instr->opcode()), " '", instr->name(), "'");
  if (instr->parent() != nullptr) absl::StrAppend(&s, " in computation '", instr->parent()->name(), "'");
  return s;
}

// ---------------------------------------------------------------------------------------------
// Program: per-computation evaluation plans, built once per run and shared by all devices.

struct CompPlan {
  std::vector<const HloInstruction*> order;     // reachable from the root, operands first
  std::vector<std::vector<int32_t>> operands;   // slot of each operand
  std::vector<std::vector<int32_t>> release;    // slots whose last use is this step
  int32_t root = -1;
};

// The binary opcode of a computation `(p0, p1) -> op(p0, p1)` on scalars, if it has that form.
std::optional<HloOpcode> SimpleBinary(const HloComputation* c) {
  if (c == nullptr || c->num_parameters() != 2) return std::nullopt;
  const HloInstruction* r = c->root();
  if (r == nullptr || r->operand_count() != 2 || !r->shape().IsArray() || r->shape().rank() != 0) {
    return std::nullopt;
  }
  switch (r->opcode()) {
    case HloOpcode::kAdd: case HloOpcode::kMultiply: case HloOpcode::kMaximum:
    case HloOpcode::kMinimum: case HloOpcode::kAnd: case HloOpcode::kOr: case HloOpcode::kXor:
      break;
    default: return std::nullopt;
  }
  const HloInstruction* a = r->operand(0);
  const HloInstruction* b = r->operand(1);
  if (a->opcode() != HloOpcode::kParameter || b->opcode() != HloOpcode::kParameter ||
      a == b) {
    return std::nullopt;
  }
  for (const HloInstruction* p : {a, b}) {
    if (p->shape().element_type != r->shape().element_type) return std::nullopt;
  }
  return r->opcode();
}

struct Program {
  const HloModule* module = nullptr;
  absl::flat_hash_map<const HloComputation*, CompPlan> plans;
  absl::flat_hash_map<const HloComputation*, std::optional<HloOpcode>> simple_binary;
};

CompPlan BuildPlan(const HloComputation* c) {
  CompPlan plan;
  std::vector<HloInstruction*> post = c->MakeInstructionPostOrder();
  // Reachable from the root (and parameters, which are always bound).
  std::set<const HloInstruction*> live;
  std::vector<const HloInstruction*> stack;
  if (c->root() != nullptr) stack.push_back(c->root());
  while (!stack.empty()) {
    const HloInstruction* x = stack.back();
    stack.pop_back();
    if (!live.insert(x).second) continue;
    for (const HloInstruction* o : x->operands()) stack.push_back(o);
  }
  absl::flat_hash_map<const HloInstruction*, int32_t> slot;
  for (HloInstruction* x : post) {
    if (!live.count(x)) continue;
    slot[x] = static_cast<int32_t>(plan.order.size());
    plan.order.push_back(x);
  }
  plan.operands.resize(plan.order.size());
  plan.release.resize(plan.order.size());
  std::vector<int32_t> last_use(plan.order.size(), -1);
  for (size_t k = 0; k < plan.order.size(); ++k) {
    for (const HloInstruction* o : plan.order[k]->operands()) {
      auto it = slot.find(o);
      const int32_t s = it == slot.end() ? -1 : it->second;
      plan.operands[k].push_back(s);
      if (s >= 0) last_use[static_cast<size_t>(s)] = static_cast<int32_t>(k);
    }
  }
  plan.root = c->root() != nullptr ? slot[c->root()] : -1;
  for (size_t s = 0; s < plan.order.size(); ++s) {
    if (static_cast<int32_t>(s) == plan.root) continue;
    if (last_use[s] >= 0) plan.release[static_cast<size_t>(last_use[s])].push_back(static_cast<int32_t>(s));
  }
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Coordinator: rendezvous of all devices at each execution of a collective, with deadlock
// (mismatch) detection that needs no timeouts.

using CollectiveFn =
    std::function<absl::StatusOr<std::vector<ValuePtr>>(const std::vector<std::vector<ValuePtr>>&)>;

class Coordinator {
 public:
  Coordinator(int64_t num_partitions, int64_t replica_count)
      : n_(num_partitions), r_(replica_count), devices_(num_partitions * replica_count),
        running_(devices_), where_(static_cast<size_t>(devices_), "running") {}

  std::string DeviceName(int64_t d) const {
    if (r_ == 1) return absl::StrCat("partition ", d);
    return absl::StrCat("device ", d, " (replica ", d / n_, ", partition ", d % n_, ")");
  }

  absl::StatusOr<ValuePtr> Exchange(int64_t device, const HloInstruction* instr, int64_t count,
                                    std::vector<ValuePtr> contribution, const CollectiveFn& fn) {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) return Aborted();
    Slot& slot = slots_[{instr, count}];
    if (slot.contrib.empty()) slot.contrib.resize(static_cast<size_t>(devices_));
    slot.contrib[static_cast<size_t>(device)] = std::move(contribution);
    ++slot.arrived;
    if (slot.arrived == devices_) {
      auto results = fn(slot.contrib);
      if (!results.ok()) {
        FailLocked(device, absl::Status(results.status().code(),
                                        absl::StrCat(Describe(instr), ": ",
                                                     results.status().message())));
        return Aborted();
      }
      slot.results = std::move(*results);
      slot.contrib.clear();
      slot.done = true;
      // The blocked devices are released now (not when their threads wake up), so that a device
      // racing ahead to its next collective does not see them as still blocked.
      waiting_ -= slot.waiters;
      cv_.notify_all();
    } else {
      ++waiting_;
      ++slot.waiters;
      where_[static_cast<size_t>(device)] =
          absl::StrCat("waits at ", Describe(instr), " (execution ", count + 1, ")");
      CheckDeadlockLocked();
      cv_.wait(lock, [&] { return slot.done || failed_; });
      if (!slot.done) return Aborted();
      where_[static_cast<size_t>(device)] = "running";
    }
    ValuePtr mine = slot.results[static_cast<size_t>(device)];
    if (++slot.fetched == devices_) slots_.erase({instr, count});
    return mine;
  }

  void Finish(int64_t device) {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    where_[static_cast<size_t>(device)] = "finished the entry computation";
    CheckDeadlockLocked();
  }

  void Fail(int64_t device, const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    FailLocked(device, s);
  }

  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }
  absl::Status failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

 private:
  struct Slot {
    std::vector<std::vector<ValuePtr>> contrib;
    std::vector<ValuePtr> results;
    int64_t arrived = 0, fetched = 0, waiters = 0;
    bool done = false;
  };

  absl::Status Aborted() const {
    return absl::AbortedError("aborted because another device failed");
  }

  void FailLocked(int64_t device, const absl::Status& s) {
    if (!failed_) {
      failed_ = true;
      if (absl::IsAborted(s)) {
        failure_ = s;
      } else {
        failure_ = absl::Status(s.code(), devices_ == 1 ? std::string(s.message())
                                                        : absl::StrCat(DeviceName(device), ": ",
                                                                       s.message()));
      }
    }
    cv_.notify_all();
  }

  void CheckDeadlockLocked() {
    if (failed_ || waiting_ == 0) return;
    // Every slot needs all devices: a finished device, or every running device blocked, means
    // the waiting devices can never meet.
    if (running_ < devices_ || waiting_ == running_) {
      std::vector<std::string> lines;
      for (int64_t d = 0; d < devices_; ++d) {
        lines.push_back(absl::StrCat(DeviceName(d), " ", where_[static_cast<size_t>(d)]));
      }
      failed_ = true;
      failure_ = InvalidArgumentError(absl::StrCat(
          "mismatched collectives: the devices cannot meet (they reach different collectives, "
          "or some finished while others wait): ",
          absl::StrJoin(lines, "; ")));
      cv_.notify_all();
    }
  }

  const int64_t n_, r_, devices_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t running_;
  int64_t waiting_ = 0;
  std::vector<std::string> where_;
  std::map<std::pair<const HloInstruction*, int64_t>, Slot> slots_;
  bool failed_ = false;
  absl::Status failure_;
};

// ---------------------------------------------------------------------------------------------
// Collective groups.

// Groups of device ids (device = replica * N + partition) for a collective.
absl::StatusOr<std::vector<std::vector<int64_t>>> DeviceGroups(const HloInstruction& instr,
                                                               HloOpcode kind, int64_t n,
                                                               int64_t r) {
  std::vector<std::vector<int64_t>> groups;
  if (instr.replica_groups.has_value()) {
    if (instr.replica_groups->is_mesh) {
      return InvalidArgumentError("replica_groups in mesh form are not supported");
    }
    groups = instr.replica_groups->groups;
  }
  const bool has_channel = instr.channel_id.has_value();
  const bool has_global_attr = kind == HloOpcode::kAllReduce || kind == HloOpcode::kAllGather ||
                               kind == HloOpcode::kReduceScatter;
  enum Mode { kCrossReplica, kCrossPartition, kCrossReplicaAndPartition, kFlattened } mode;
  if (!has_channel) {
    mode = kCrossReplica;
  } else if (!has_global_attr) {
    mode = kCrossPartition;
  } else {
    mode = instr.use_global_device_ids ? kFlattened : kCrossReplicaAndPartition;
  }
  if (r == 1) {
    // Single replica: members are partition ids. A group list naming only replica 0 keeps XLA's
    // meaning (cross-replica: each partition alone; cross-replica-and-partition: all partitions).
    bool only_zero = !groups.empty();
    for (const auto& g : groups) {
      for (int64_t id : g) only_zero &= id == 0;
    }
    std::vector<std::vector<int64_t>> out;
    if (groups.empty() || (only_zero && mode == kCrossReplicaAndPartition)) {
      out.emplace_back();
      for (int64_t p = 0; p < n; ++p) out.back().push_back(p);
      return out;
    }
    if (only_zero && mode == kCrossReplica) {
      for (int64_t p = 0; p < n; ++p) out.push_back({p});
      return out;
    }
    for (const auto& g : groups) {
      for (int64_t id : g) {
        if (id < 0 || id >= n) {
          return InvalidArgumentError(absl::StrCat("replica group member ", id,
                                                   " is not a partition id (num_partitions=", n,
                                                   ")"));
        }
      }
    }
    return groups;
  }
  std::vector<std::vector<int64_t>> out;
  const int64_t limit = mode == kFlattened ? n * r
                        : (mode == kCrossPartition ? n : r);
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t k = 0; k < limit; ++k) groups.back().push_back(k);
  }
  for (const auto& g : groups) {
    for (int64_t id : g) {
      if (id < 0 || id >= limit) {
        return InvalidArgumentError(absl::StrCat("replica group member ", id, " out of range"));
      }
    }
  }
  switch (mode) {
    case kCrossReplica:
      for (int64_t p = 0; p < n; ++p) {
        for (const auto& g : groups) {
          out.emplace_back();
          for (int64_t id : g) out.back().push_back(id * n + p);
        }
      }
      break;
    case kCrossPartition:
      for (int64_t rep = 0; rep < r; ++rep) {
        for (const auto& g : groups) {
          out.emplace_back();
          for (int64_t id : g) out.back().push_back(rep * n + id);
        }
      }
      break;
    case kCrossReplicaAndPartition:
      for (const auto& g : groups) {
        out.emplace_back();
        for (int64_t id : g) {
          for (int64_t p = 0; p < n; ++p) out.back().push_back(id * n + p);
        }
      }
      break;
    case kFlattened: out = groups; break;
  }
  return out;
}

// For each device: (group index, position) or (-1, -1) when absent.
struct GroupIndex {
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::pair<int64_t, int64_t>> where;
};

absl::StatusOr<GroupIndex> IndexGroups(std::vector<std::vector<int64_t>> groups, int64_t devices,
                                       bool require_all) {
  GroupIndex gi;
  gi.where.assign(static_cast<size_t>(devices), {-1, -1});
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = 0; k < groups[g].size(); ++k) {
      const int64_t d = groups[g][k];
      if (gi.where[static_cast<size_t>(d)].first >= 0) {
        return InvalidArgumentError(absl::StrCat("device ", d, " appears in two replica groups"));
      }
      gi.where[static_cast<size_t>(d)] = {static_cast<int64_t>(g), static_cast<int64_t>(k)};
    }
  }
  if (require_all) {
    for (int64_t d = 0; d < devices; ++d) {
      if (gi.where[static_cast<size_t>(d)].first < 0) {
        return InvalidArgumentError(absl::StrCat("device ", d, " is in no replica group"));
      }
    }
  }
  gi.groups = std::move(groups);
  return gi;
}

// ---------------------------------------------------------------------------------------------
// The per-device interpreter.

class DeviceEvaluator {
 public:
  DeviceEvaluator(const Program& program, Coordinator* coord, int64_t device, int64_t n,
                  int64_t r)
      : program_(program), coord_(coord), device_(device), n_(n), r_(r) {}

  absl::StatusOr<ValuePtr> EvalComputation(const HloComputation* c,
                                           const std::vector<ValuePtr>& args);

 private:
  absl::StatusOr<ValuePtr> EvalInstruction(const HloInstruction* instr,
                                           const std::vector<ValuePtr>& ops,
                                           const std::vector<ValuePtr>& args);
  absl::StatusOr<ValuePtr> EvalReduce(const HloInstruction* instr,
                                      const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalReduceWindow(const HloInstruction* instr,
                                            const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalSort(const HloInstruction* instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<Value> Scatter(const HloInstruction& instr, const std::vector<ValuePtr>& ops);
  absl::StatusOr<ValuePtr> EvalCollective(const HloInstruction* instr, HloOpcode kind,
                                          const Shape& result_shape,
                                          const std::vector<ValuePtr>& ops);
  // Applies a binary computation elementwise to two arrays of the same shape.
  absl::StatusOr<Value> ApplyBinaryComputation(const HloComputation* c, const Value& a,
                                               const Value& b);
  absl::StatusOr<ValuePtr> CallScalar(const HloComputation* c, const std::vector<ValuePtr>& args) {
    return EvalComputation(c, args);
  }

  const Program& program_;
  Coordinator* coord_;
  const int64_t device_, n_, r_;
  absl::flat_hash_map<const HloInstruction*, int64_t> exec_count_;
};

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalComputation(const HloComputation* c,
                                                          const std::vector<ValuePtr>& args) {
  auto it = program_.plans.find(c);
  if (it == program_.plans.end()) {
    return InvalidArgumentError(absl::StrCat("computation '", c->name(), "' is not in the module"));
  }
  const CompPlan& plan = it->second;
  if (plan.root < 0) return InvalidArgumentError(absl::StrCat("computation '", c->name(), "' has no root"));
  std::vector<ValuePtr> slots(plan.order.size());
  std::vector<ValuePtr> ops;
  for (size_t k = 0; k < plan.order.size(); ++k) {
    const HloInstruction* instr = plan.order[k];
    ops.clear();
    for (int32_t s : plan.operands[k]) {
      if (s < 0) return InvalidArgumentError(absl::StrCat(Describe(instr), ": operand outside its computation"));
      ops.push_back(slots[static_cast<size_t>(s)]);
    }
    auto v = EvalInstruction(instr, ops, args);
    if (!v.ok()) return v.status();
    slots[k] = std::move(*v);
    for (int32_t s : plan.release[k]) slots[static_cast<size_t>(s)].reset();
  }
  return slots[static_cast<size_t>(plan.root)];
}

absl::StatusOr<Value> DeviceEvaluator::ApplyBinaryComputation(const HloComputation* c,
                                                             const Value& a, const Value& b) {
  auto simple = program_.simple_binary.find(c);
  const Shape& s = a.shape;
  if (simple != program_.simple_binary.end() && simple->second.has_value()) {
    return ops::Binary(*simple->second, a, b, s);
  }
  Value r = Value::Zeros(s);
  const int64_t n = s.ElementCount();
  Shape scalar = Shape::Scalar(s.element_type);
  for (int64_t k = 0; k < n; ++k) {
    Value x = Value::Zeros(scalar), y = Value::Zeros(scalar);
    if (a.storage() == Storage::kInt) {
      x.i[0] = a.i[static_cast<size_t>(k)];
      y.i[0] = b.i[static_cast<size_t>(k)];
    } else {
      x.SetDouble(0, a.GetDouble(k));
      y.SetDouble(0, b.GetDouble(k));
    }
    auto res = CallScalar(c, {Share(std::move(x)), Share(std::move(y))});
    if (!res.ok()) return res.status();
    if ((*res)->storage() == Storage::kInt) {
      r.i[static_cast<size_t>(k)] = (*res)->i[0];
    } else {
      r.SetDouble(k, (*res)->GetDouble(0));
    }
  }
  return r;
}

// Scalar element `k` of array `v` as a new rank-0 value.
ValuePtr ScalarAt(const Value& v, int64_t k) {
  Value s = Value::Zeros(Shape::Scalar(v.shape.element_type));
  switch (v.storage()) {
    case Storage::kFloat: s.f[0] = v.f[static_cast<size_t>(k)]; break;
    case Storage::kDouble: s.d[0] = v.d[static_cast<size_t>(k)]; break;
    case Storage::kInt: s.i[0] = v.i[static_cast<size_t>(k)]; break;
    default: break;
  }
  return Share(std::move(s));
}

void StoreScalar(const Value& s, Value* dst, int64_t k) {
  switch (dst->storage()) {
    case Storage::kFloat: dst->f[static_cast<size_t>(k)] = s.f[0]; break;
    case Storage::kDouble: dst->d[static_cast<size_t>(k)] = s.d[0]; break;
    case Storage::kInt: dst->i[static_cast<size_t>(k)] = s.i[0]; break;
    default: break;
  }
}

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalReduce(const HloInstruction* instr,
                                                     const std::vector<ValuePtr>& ops) {
  const size_t k_ops = ops.size() / 2;
  if (k_ops == 0 || ops.size() != 2 * k_ops) return InvalidArgumentError("reduce needs 2K operands");
  const HloComputation* c = instr->to_apply();
  std::vector<Value> moved(k_ops);
  int64_t outer = 1, inner = 1;
  for (size_t j = 0; j < k_ops; ++j) {
    moved[j] = ops::MoveReducedDimsLast(*ops[j], instr->dimensions, &outer, &inner);
  }
  std::vector<Shape> out_shapes;
  if (instr->shape().IsTuple()) {
    out_shapes = instr->shape().tuple_shapes;
  } else {
    out_shapes = {instr->shape()};
  }
  if (out_shapes.size() != k_ops) return InvalidArgumentError("reduce result count mismatch");
  std::vector<Value> outs;
  for (const Shape& s : out_shapes) outs.push_back(Value::Zeros(s));
  auto simple = program_.simple_binary.find(c);
  if (k_ops == 1 && simple != program_.simple_binary.end() && simple->second.has_value() &&
      outs[0].storage() == moved[0].storage()) {
    const HloOpcode op = *simple->second;
    const PrimitiveType t = out_shapes[0].element_type;
    const Value& in = moved[0];
    Value& out = outs[0];
    switch (in.storage()) {
      case Storage::kFloat: {
        const float init = ops[1]->f[0];
        const bool f32_add = op == HloOpcode::kAdd && t == PrimitiveType::F32;
        for (int64_t o = 0; o < outer; ++o) {
          const float* row = in.f.data() + o * inner;
          if (f32_add) {
            float acc = init;
            for (int64_t q = 0; q < inner; ++q) acc += row[q];
            out.f[static_cast<size_t>(o)] = acc;
          } else {
            double acc = init;
            for (int64_t q = 0; q < inner; ++q) acc = ops::CombineFloat(op, acc, row[q], t);
            out.f[static_cast<size_t>(o)] = static_cast<float>(acc);
          }
        }
        break;
      }
      case Storage::kDouble: {
        const double init = ops[1]->d[0];
        for (int64_t o = 0; o < outer; ++o) {
          double acc = init;
          for (int64_t q = 0; q < inner; ++q) {
            acc = ops::CombineFloat(op, acc, in.d[static_cast<size_t>(o * inner + q)], t);
          }
          out.d[static_cast<size_t>(o)] = acc;
        }
        break;
      }
      case Storage::kInt: {
        const int64_t init = ops[1]->i[0];
        for (int64_t o = 0; o < outer; ++o) {
          int64_t acc = init;
          for (int64_t q = 0; q < inner; ++q) {
            acc = ops::CombineInt(op, acc, in.i[static_cast<size_t>(o * inner + q)], t);
          }
          out.i[static_cast<size_t>(o)] = acc;
        }
        break;
      }
      default: return InvalidArgumentError("reduce of an unsupported element type");
    }
    return Share(std::move(outs[0]));
  }
  // General path: call the computation per element.
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<ValuePtr> acc(k_ops);
    for (size_t j = 0; j < k_ops; ++j) acc[j] = ops[k_ops + j];
    for (int64_t q = 0; q < inner; ++q) {
      std::vector<ValuePtr> args = acc;
      for (size_t j = 0; j < k_ops; ++j) args.push_back(ScalarAt(moved[j], o * inner + q));
      auto res = CallScalar(c, args);
      if (!res.ok()) return res.status();
      if (k_ops == 1) {
        acc[0] = *res;
      } else {
        for (size_t j = 0; j < k_ops; ++j) acc[j] = (*res)->elements.at(j);
      }
    }
    for (size_t j = 0; j < k_ops; ++j) StoreScalar(*acc[j], &outs[j], o);
  }
  if (k_ops == 1) return Share(std::move(outs[0]));
  Value t;
  t.shape = instr->shape();
  for (Value& v : outs) t.elements.push_back(Share(std::move(v)));
  return Share(std::move(t));
}

// Parses `window={size=2x2 stride=1x1 pad=0_0x1_1 lhs_dilate=.. rhs_dilate=..}`.
struct WindowDim {
  int64_t size = 1, stride = 1, lo = 0, hi = 0, lhs_dilate = 1, rhs_dilate = 1;
};

absl::StatusOr<std::vector<WindowDim>> ParseWindow(const HloInstruction& instr, size_t rank) {
  std::vector<WindowDim> w(rank);
  const std::string* text = instr.GetRawAttribute("window");
  if (text == nullptr) return w;
  std::string body = *text;
  body.erase(std::remove(body.begin(), body.end(), '{'), body.end());
  body.erase(std::remove(body.begin(), body.end(), '}'), body.end());
  for (absl::string_view item : absl::StrSplit(body, ' ', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(item, '=');
    if (kv.size() != 2) continue;
    std::vector<std::string> parts = absl::StrSplit(kv[1], 'x');
    if (parts.size() != rank) return InvalidArgumentError(absl::StrCat("bad window attribute '", *text, "'"));
    for (size_t d = 0; d < rank; ++d) {
      try {
        if (kv[0] == "pad") {
          std::vector<std::string> lh = absl::StrSplit(parts[d], '_');
          if (lh.size() != 2) return InvalidArgumentError("bad window padding");
          w[d].lo = std::stoll(lh[0]);
          w[d].hi = std::stoll(lh[1]);
        } else {
          const int64_t v = std::stoll(parts[d]);
          if (kv[0] == "size") w[d].size = v;
          else if (kv[0] == "stride") w[d].stride = v;
          else if (kv[0] == "lhs_dilate") w[d].lhs_dilate = v;
          else if (kv[0] == "rhs_dilate") w[d].rhs_dilate = v;
          else return InvalidArgumentError(absl::StrCat("window field '", kv[0], "' is not supported"));
        }
      } catch (...) {
        return InvalidArgumentError(absl::StrCat("bad window attribute '", *text, "'"));
      }
    }
  }
  return w;
}

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalReduceWindow(const HloInstruction* instr,
                                                           const std::vector<ValuePtr>& ops) {
  if (ops.size() != 2 || instr->shape().IsTuple()) {
    return InvalidArgumentError("only single-operand reduce-window is supported");
  }
  const Value& in = *ops[0];
  const size_t rank = in.shape.dims.size();
  auto w = ParseWindow(*instr, rank);
  if (!w.ok()) return w.status();
  const Shape& out_shape = instr->shape();
  Value out = Value::Zeros(out_shape);
  const std::vector<int64_t> is = ops::Strides(in.shape.dims);
  const int64_t n_out = out_shape.ElementCount();
  std::vector<int64_t> oidx(rank, 0), widx(rank, 0);
  const HloComputation* c = instr->to_apply();
  auto simple = program_.simple_binary.find(c);
  const bool fast = simple != program_.simple_binary.end() && simple->second.has_value();
  const PrimitiveType t = out_shape.element_type;
  int64_t wcount = 1;
  for (const WindowDim& wd : *w) wcount *= wd.size;
  for (int64_t o = 0; o < n_out; ++o) {
    // Decode o into oidx.
    int64_t rem = o;
    for (size_t d = rank; d-- > 0;) {
      oidx[d] = rem % out_shape.dims[d];
      rem /= out_shape.dims[d];
    }
    ValuePtr acc = ops[1];
    double facc = ops[1]->GetDouble(0);
    int64_t iacc = ops[1]->storage() == Storage::kInt ? ops[1]->i[0] : 0;
    for (int64_t q = 0; q < wcount; ++q) {
      int64_t wr = q;
      for (size_t d = rank; d-- > 0;) {
        widx[d] = wr % (*w)[d].size;
        wr /= (*w)[d].size;
      }
      int64_t flat = 0;
      bool inside = true;
      for (size_t d = 0; d < rank && inside; ++d) {
        const WindowDim& wd = (*w)[d];
        int64_t pos = oidx[d] * wd.stride + widx[d] * wd.rhs_dilate - wd.lo;
        if (pos < 0 || pos % wd.lhs_dilate != 0) { inside = false; break; }
        pos /= wd.lhs_dilate;
        if (pos >= in.shape.dims[d]) { inside = false; break; }
        flat += pos * is[d];
      }
      if (!inside) continue;  // padding holds the init value: combining with it is a no-op
      if (fast) {
        if (in.storage() == Storage::kInt) {
          iacc = ops::CombineInt(*simple->second, iacc, in.i[static_cast<size_t>(flat)], t);
        } else {
          facc = ops::CombineFloat(*simple->second, facc, in.GetDouble(flat), t);
        }
      } else {
        auto res = CallScalar(c, {acc, ScalarAt(in, flat)});
        if (!res.ok()) return res.status();
        acc = *res;
      }
    }
    if (fast) {
      if (out.storage() == Storage::kInt) out.i[static_cast<size_t>(o)] = iacc;
      else out.SetDouble(o, facc);
    } else {
      StoreScalar(*acc, &out, o);
    }
  }
  return Share(std::move(out));
}

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalSort(const HloInstruction* instr,
                                                   const std::vector<ValuePtr>& ops) {
  if (ops.empty() || instr->dimensions.size() != 1) return InvalidArgumentError("sort needs one dimension");
  const Shape& s = ops[0]->shape;
  const int64_t dim = instr->dimensions[0];
  const int64_t extent = s.dims[static_cast<size_t>(dim)];
  const std::vector<int64_t> st = ops::Strides(s.dims);
  const int64_t stride = st[static_cast<size_t>(dim)];
  const int64_t n = s.ElementCount();
  std::vector<Value> outs;
  for (const ValuePtr& v : ops) outs.push_back(*v);
  const HloComputation* c = instr->to_apply();
  // Fast comparator: compare(p0, p1) LT/GT on the first operand.
  std::optional<ComparisonDirection> fast_dir;
  const HloInstruction* root = c->root();
  if (ops.size() == 1 && root->opcode() == HloOpcode::kCompare &&
      root->operand(0)->opcode() == HloOpcode::kParameter &&
      root->operand(1)->opcode() == HloOpcode::kParameter &&
      root->operand(0)->parameter_number == 0 && root->operand(1)->parameter_number == 1 &&
      root->comparison_direction.has_value() && root->comparison_type != "TOTALORDER" &&
      (*root->comparison_direction == ComparisonDirection::kLt ||
       *root->comparison_direction == ComparisonDirection::kGt)) {
    fast_dir = root->comparison_direction;
  }
  absl::Status error;
  for (int64_t base = 0; base < n; ++base) {
    if ((base / stride) % extent != 0) continue;  // visit each line once (its first element)
    std::vector<int64_t> perm(static_cast<size_t>(extent));
    for (int64_t q = 0; q < extent; ++q) perm[static_cast<size_t>(q)] = q;
    auto at = [&](int64_t q) { return base + q * stride; };
    auto less = [&](int64_t x, int64_t y) -> bool {
      if (!error.ok()) return false;
      if (fast_dir) {
        const double a = ops[0]->GetDouble(at(x)), b = ops[0]->GetDouble(at(y));
        return *fast_dir == ComparisonDirection::kLt ? a < b : a > b;
      }
      std::vector<ValuePtr> args;
      for (const ValuePtr& v : ops) {
        args.push_back(ScalarAt(*v, at(x)));
        args.push_back(ScalarAt(*v, at(y)));
      }
      auto res = CallScalar(c, args);
      if (!res.ok()) {
        error = res.status();
        return false;
      }
      return (*res)->i.at(0) != 0;
    };
    std::stable_sort(perm.begin(), perm.end(), less);
    if (!error.ok()) return error;
    for (size_t j = 0; j < ops.size(); ++j) {
      for (int64_t q = 0; q < extent; ++q) {
        const int64_t src = at(perm[static_cast<size_t>(q)]), dst = at(q);
        switch (outs[j].storage()) {
          case Storage::kFloat: outs[j].f[dst] = ops[j]->f[src]; break;
          case Storage::kDouble: outs[j].d[dst] = ops[j]->d[src]; break;
          case Storage::kInt: outs[j].i[dst] = ops[j]->i[src]; break;
          default: break;
        }
      }
    }
  }
  if (ops.size() == 1) return Share(std::move(outs[0]));
  Value t;
  t.shape = instr->shape();
  for (Value& v : outs) t.elements.push_back(Share(std::move(v)));
  return Share(std::move(t));
}

// `{1,2}` or `3` attribute text -> integers.
absl::StatusOr<std::vector<int64_t>> IntListAttr(const HloInstruction& instr, const char* key,
                                                 bool required) {
  const std::string* text = instr.GetRawAttribute(key);
  std::vector<int64_t> out;
  if (text == nullptr) {
    if (required) return InvalidArgumentError(absl::StrCat("missing attribute ", key));
    return out;
  }
  std::string body = *text;
  body.erase(std::remove(body.begin(), body.end(), '{'), body.end());
  body.erase(std::remove(body.begin(), body.end(), '}'), body.end());
  for (absl::string_view item : absl::StrSplit(body, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(item, &v)) {
      return InvalidArgumentError(absl::StrCat("bad ", key, " attribute '", *text, "'"));
    }
    out.push_back(v);
  }
  return out;
}

// XLA gather: for every output index, the batch dims select a start-index vector (clamped so the
// slice fits), the offset dims index inside the slice.
absl::StatusOr<Value> Gather(const HloInstruction& instr, const Value& operand,
                             const Value& indices) {
  auto offset_dims = IntListAttr(instr, "offset_dims", true);
  auto collapsed = IntListAttr(instr, "collapsed_slice_dims", false);
  auto start_map = IntListAttr(instr, "start_index_map", true);
  auto ivd = IntListAttr(instr, "index_vector_dim", true);
  auto sizes = IntListAttr(instr, "slice_sizes", true);
  auto op_batch = IntListAttr(instr, "operand_batching_dims", false);
  auto idx_batch = IntListAttr(instr, "start_indices_batching_dims", false);
  for (const auto* s : {&offset_dims, &collapsed, &start_map, &ivd, &sizes, &op_batch, &idx_batch}) {
    if (!s->ok()) return s->status();
  }
  if (ivd->size() != 1) return InvalidArgumentError("bad index_vector_dim");
  const int64_t index_vector_dim = (*ivd)[0];
  const Shape& out_shape = instr.shape();
  const size_t orank = operand.shape.dims.size();
  const size_t out_rank = out_shape.dims.size();
  if (sizes->size() != orank) return InvalidArgumentError("slice_sizes rank mismatch");
  std::vector<bool> is_offset(out_rank, false);
  for (int64_t d : *offset_dims) is_offset.at(static_cast<size_t>(d)) = true;
  std::vector<int64_t> batch_out_dims;
  for (size_t d = 0; d < out_rank; ++d) {
    if (!is_offset[d]) batch_out_dims.push_back(static_cast<int64_t>(d));
  }
  // Operand dims that the offset dims map to (not collapsed, not batching), in order.
  std::vector<bool> skip(orank, false);
  for (int64_t d : *collapsed) skip.at(static_cast<size_t>(d)) = true;
  for (int64_t d : *op_batch) skip.at(static_cast<size_t>(d)) = true;
  std::vector<int64_t> window_operand_dims;
  for (size_t d = 0; d < orank; ++d) {
    if (!skip[d]) window_operand_dims.push_back(static_cast<int64_t>(d));
  }
  if (window_operand_dims.size() != offset_dims->size()) {
    return InvalidArgumentError("offset_dims do not match the uncollapsed operand dims");
  }
  // Indices dims other than index_vector_dim, in order: they correspond to batch_out_dims.
  const size_t irank = indices.shape.dims.size();
  std::vector<int64_t> idx_batch_dims;
  for (size_t d = 0; d < irank; ++d) {
    if (static_cast<int64_t>(d) != index_vector_dim) idx_batch_dims.push_back(static_cast<int64_t>(d));
  }
  if (idx_batch_dims.size() != batch_out_dims.size()) {
    return InvalidArgumentError("gather batch dims do not match the indices");
  }
  const std::vector<int64_t> is = ops::Strides(indices.shape.dims);
  const std::vector<int64_t> os = ops::Strides(operand.shape.dims);
  Value out = Value::Zeros(out_shape);
  const int64_t n = out_shape.ElementCount();
  std::vector<int64_t> oidx(out_rank), start(orank);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k;
    for (size_t d = out_rank; d-- > 0;) {
      oidx[d] = rem % out_shape.dims[d];
      rem /= out_shape.dims[d];
    }
    // Flat offset into indices of the batch position (index_vector_dim at 0).
    int64_t ibase = 0;
    for (size_t j = 0; j < batch_out_dims.size(); ++j) {
      ibase += oidx[static_cast<size_t>(batch_out_dims[j])] * is[static_cast<size_t>(idx_batch_dims[j])];
    }
    std::fill(start.begin(), start.end(), 0);
    for (size_t j = 0; j < start_map->size(); ++j) {
      int64_t flat = ibase;
      if (index_vector_dim < static_cast<int64_t>(irank)) {
        flat += static_cast<int64_t>(j) * is[static_cast<size_t>(index_vector_dim)];
      }
      start.at(static_cast<size_t>((*start_map)[j])) = indices.GetInt(flat);
    }
    for (size_t j = 0; j < op_batch->size() && j < idx_batch->size(); ++j) {
      // The batch coordinate is the output coordinate of that indices dim.
      const int64_t idim = (*idx_batch)[j];
      for (size_t q = 0; q < idx_batch_dims.size(); ++q) {
        if (idx_batch_dims[q] == idim) {
          start[static_cast<size_t>((*op_batch)[j])] = oidx[static_cast<size_t>(batch_out_dims[q])];
        }
      }
    }
    int64_t src = 0;
    for (size_t d = 0; d < orank; ++d) {
      start[d] = std::clamp<int64_t>(start[d], 0, operand.shape.dims[d] - (*sizes)[d]);
      src += start[d] * os[d];
    }
    for (size_t j = 0; j < window_operand_dims.size(); ++j) {
      src += oidx[static_cast<size_t>((*offset_dims)[j])] * os[static_cast<size_t>(window_operand_dims[j])];
    }
    switch (out.storage()) {
      case Storage::kFloat: out.f[static_cast<size_t>(k)] = operand.f[static_cast<size_t>(src)]; break;
      case Storage::kDouble: out.d[static_cast<size_t>(k)] = operand.d[static_cast<size_t>(src)]; break;
      case Storage::kInt: out.i[static_cast<size_t>(k)] = operand.i[static_cast<size_t>(src)]; break;
      default: return InvalidArgumentError("gather of an unsupported type");
    }
  }
  return out;
}

// XLA scatter (one operand): every update element goes to operand position start + window index,
// combined with the current value by `to_apply`; update windows that do not fit the operand are
// skipped (as XLA's evaluator does).
absl::StatusOr<Value> DeviceEvaluator::Scatter(const HloInstruction& instr,
                                               const std::vector<ValuePtr>& ops) {
  if (ops.size() != 3) return InvalidArgumentError("only single-operand scatter is supported");
  const Value& operand = *ops[0];
  const Value& indices = *ops[1];
  const Value& updates = *ops[2];
  auto window_dims = IntListAttr(instr, "update_window_dims", true);
  auto inserted = IntListAttr(instr, "inserted_window_dims", false);
  auto to_operand = IntListAttr(instr, "scatter_dims_to_operand_dims", true);
  auto ivd = IntListAttr(instr, "index_vector_dim", true);
  auto in_batch = IntListAttr(instr, "input_batching_dims", false);
  auto idx_batch = IntListAttr(instr, "scatter_indices_batching_dims", false);
  for (const auto* a : {&window_dims, &inserted, &to_operand, &ivd, &in_batch, &idx_batch}) {
    if (!a->ok()) return a->status();
  }
  if (ivd->size() != 1) return InvalidArgumentError("bad index_vector_dim");
  const int64_t index_vector_dim = (*ivd)[0];
  const size_t orank = operand.shape.dims.size(), urank = updates.shape.dims.size();
  const size_t irank = indices.shape.dims.size();
  std::vector<bool> is_window(urank, false);
  for (int64_t d : *window_dims) is_window.at(static_cast<size_t>(d)) = true;
  std::vector<int64_t> scatter_update_dims;
  for (size_t d = 0; d < urank; ++d) {
    if (!is_window[d]) scatter_update_dims.push_back(static_cast<int64_t>(d));
  }
  std::vector<bool> skip(orank, false);
  for (int64_t d : *inserted) skip.at(static_cast<size_t>(d)) = true;
  for (int64_t d : *in_batch) skip.at(static_cast<size_t>(d)) = true;
  std::vector<int64_t> window_operand_dims;
  for (size_t d = 0; d < orank; ++d) {
    if (!skip[d]) window_operand_dims.push_back(static_cast<int64_t>(d));
  }
  if (window_operand_dims.size() != window_dims->size()) {
    return InvalidArgumentError("update_window_dims do not match the operand's window dims");
  }
  std::vector<int64_t> idx_dims;
  for (size_t d = 0; d < irank; ++d) {
    if (static_cast<int64_t>(d) != index_vector_dim) idx_dims.push_back(static_cast<int64_t>(d));
  }
  if (idx_dims.size() != scatter_update_dims.size()) {
    return InvalidArgumentError("scatter dims do not match the indices");
  }
  std::vector<int64_t> wsize(orank, 1);
  for (size_t j = 0; j < window_operand_dims.size(); ++j) {
    wsize[static_cast<size_t>(window_operand_dims[j])] =
        updates.shape.dims[static_cast<size_t>((*window_dims)[j])];
  }
  const std::vector<int64_t> is = ops::Strides(indices.shape.dims);
  const std::vector<int64_t> os = ops::Strides(operand.shape.dims);
  Value out = operand;
  out.shape = instr.shape();
  const HloComputation* c = instr.to_apply();
  auto simple = program_.simple_binary.find(c);
  const bool fast = simple != program_.simple_binary.end() && simple->second.has_value();
  const PrimitiveType t = operand.shape.element_type;
  const int64_t n = updates.shape.ElementCount();
  std::vector<int64_t> uidx(urank), start(orank);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k;
    for (size_t d = urank; d-- > 0;) {
      uidx[d] = rem % updates.shape.dims[d];
      rem /= updates.shape.dims[d];
    }
    int64_t ibase = 0;
    for (size_t j = 0; j < scatter_update_dims.size(); ++j) {
      ibase += uidx[static_cast<size_t>(scatter_update_dims[j])] * is[static_cast<size_t>(idx_dims[j])];
    }
    std::fill(start.begin(), start.end(), 0);
    for (size_t j = 0; j < to_operand->size(); ++j) {
      int64_t flat = ibase;
      if (index_vector_dim < static_cast<int64_t>(irank)) {
        flat += static_cast<int64_t>(j) * is[static_cast<size_t>(index_vector_dim)];
      }
      start.at(static_cast<size_t>((*to_operand)[j])) = indices.GetInt(flat);
    }
    for (size_t j = 0; j < in_batch->size() && j < idx_batch->size(); ++j) {
      for (size_t q = 0; q < idx_dims.size(); ++q) {
        if (idx_dims[q] == (*idx_batch)[j]) {
          start[static_cast<size_t>((*in_batch)[j])] = uidx[static_cast<size_t>(scatter_update_dims[q])];
        }
      }
    }
    bool fits = true;
    int64_t dst = 0;
    for (size_t d = 0; d < orank; ++d) {
      if (start[d] < 0 || start[d] + wsize[d] > operand.shape.dims[d]) fits = false;
      dst += start[d] * os[d];
    }
    if (!fits) continue;
    for (size_t j = 0; j < window_operand_dims.size(); ++j) {
      dst += uidx[static_cast<size_t>((*window_dims)[j])] * os[static_cast<size_t>(window_operand_dims[j])];
    }
    if (fast) {
      if (out.storage() == Storage::kInt) {
        out.i[static_cast<size_t>(dst)] = ops::CombineInt(*simple->second, out.i[static_cast<size_t>(dst)],
                                                          updates.i[static_cast<size_t>(k)], t);
      } else {
        out.SetDouble(dst, ops::CombineFloat(*simple->second, out.GetDouble(dst), updates.GetDouble(k), t));
      }
    } else {
      auto r = CallScalar(c, {ScalarAt(out, dst), ScalarAt(updates, k)});
      if (!r.ok()) return r.status();
      StoreScalar(**r, &out, dst);
    }
  }
  return out;
}

// Shapes of a collective's operands -> its per-device result (without the async wrapping).
absl::StatusOr<ValuePtr> DeviceEvaluator::EvalCollective(const HloInstruction* instr,
                                                         HloOpcode kind, const Shape& result_shape,
                                                         const std::vector<ValuePtr>& ops) {
  const int64_t devices = n_ * r_;
  const int64_t count = exec_count_[instr]++;
  std::vector<ValuePtr> contribution = ops;
  const HloInstruction* in = instr;
  CollectiveFn fn = [this, in, kind, result_shape, devices](
                        const std::vector<std::vector<ValuePtr>>& contrib)
      -> absl::StatusOr<std::vector<ValuePtr>> {
    std::vector<ValuePtr> results(static_cast<size_t>(devices));
    const size_t n_ops = contrib[0].size();
    auto leaf_shape = [&](size_t j) -> const Shape& {
      return result_shape.IsTuple() ? result_shape.tuple_shapes.at(j) : result_shape;
    };
    auto wrap = [&](std::vector<Value> leaves) -> ValuePtr {
      if (!result_shape.IsTuple()) return Share(std::move(leaves.at(0)));
      Value t;
      t.shape = result_shape;
      for (Value& v : leaves) t.elements.push_back(Share(std::move(v)));
      return Share(std::move(t));
    };
    if (kind == HloOpcode::kCollectivePermute) {
      // Pairs name partition ids (with channel_id or a single replica), else replica ids.
      const bool by_partition = in->channel_id.has_value() || r_ == 1;
      std::vector<int64_t> source_of(static_cast<size_t>(devices), -1);
      for (const auto& [src, dst] : in->source_target_pairs) {
        const int64_t limit = by_partition ? n_ : r_;
        if (src < 0 || src >= limit || dst < 0 || dst >= limit) {
          return InvalidArgumentError(absl::StrCat("source_target_pairs entry {", src, ",", dst,
                                                   "} is out of range"));
        }
        if (by_partition) {
          for (int64_t rep = 0; rep < r_; ++rep) source_of[rep * n_ + dst] = rep * n_ + src;
        } else {
          for (int64_t p = 0; p < n_; ++p) source_of[dst * n_ + p] = src * n_ + p;
        }
      }
      for (int64_t d = 0; d < devices; ++d) {
        std::vector<Value> leaves;
        for (size_t j = 0; j < n_ops; ++j) {
          const int64_t s = source_of[static_cast<size_t>(d)];
          if (s < 0) {
            leaves.push_back(Value::Zeros(leaf_shape(j)));
          } else {
            Value v = *contrib[static_cast<size_t>(s)][j];
            v.shape = leaf_shape(j);
            leaves.push_back(std::move(v));
          }
        }
        results[static_cast<size_t>(d)] = wrap(std::move(leaves));
      }
      return results;
    }
    auto groups = DeviceGroups(*in, kind, n_, r_);
    if (!groups.ok()) return groups.status();
    auto gi = IndexGroups(std::move(*groups), devices, /*require_all=*/true);
    if (!gi.ok()) return gi.status();
    for (size_t g = 0; g < gi->groups.size(); ++g) {
      const std::vector<int64_t>& members = gi->groups[g];
      const int64_t gsize = static_cast<int64_t>(members.size());
      switch (kind) {
        case HloOpcode::kAllGather: {
          if (in->dimensions.size() != 1) return InvalidArgumentError("all-gather needs dimensions={d}");
          for (int64_t pos = 0; pos < gsize; ++pos) {
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              std::vector<const Value*> parts;
              for (int64_t m : members) parts.push_back(contrib[static_cast<size_t>(m)][j].get());
              leaves.push_back(ops::Concatenate(parts, leaf_shape(j), in->dimensions[0]));
            }
            results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
          }
          break;
        }
        case HloOpcode::kAllReduce:
        case HloOpcode::kReduceScatter: {
          std::vector<Value> sums;
          for (size_t j = 0; j < n_ops; ++j) {
            Value acc = *contrib[static_cast<size_t>(members[0])][j];
            for (int64_t k = 1; k < gsize; ++k) {
              auto next = ApplyBinaryComputation(in->to_apply(), acc,
                                                 *contrib[static_cast<size_t>(members[static_cast<size_t>(k)])][j]);
              if (!next.ok()) return next.status();
              acc = std::move(*next);
            }
            sums.push_back(std::move(acc));
          }
          for (int64_t pos = 0; pos < gsize; ++pos) {
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              if (kind == HloOpcode::kAllReduce) {
                Value v = sums[j];
                v.shape = leaf_shape(j);
                leaves.push_back(std::move(v));
              } else {
                if (in->dimensions.size() != 1) return InvalidArgumentError("reduce-scatter needs dimensions={d}");
                const int64_t dim = in->dimensions[0];
                const Shape& ls = leaf_shape(j);
                std::vector<SliceDim> sl(ls.dims.size());
                for (size_t q = 0; q < ls.dims.size(); ++q) {
                  sl[q].start = 0;
                  sl[q].limit = ls.dims[q];
                }
                sl[static_cast<size_t>(dim)].start = pos * ls.dims[static_cast<size_t>(dim)];
                sl[static_cast<size_t>(dim)].limit = (pos + 1) * ls.dims[static_cast<size_t>(dim)];
                if (sl[static_cast<size_t>(dim)].limit > sums[j].shape.dims[static_cast<size_t>(dim)]) {
                  return InvalidArgumentError("reduce-scatter result does not tile its operand");
                }
                leaves.push_back(ops::Slice(sums[j], ls, sl));
              }
            }
            results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
          }
          break;
        }
        case HloOpcode::kAllToAll: {
          if (!in->dimensions.empty()) {
            if (n_ops != 1) return InvalidArgumentError("array all-to-all takes one operand");
            const int64_t dim = in->dimensions[0];
            const Shape& os = contrib[static_cast<size_t>(members[0])][0]->shape;
            const int64_t extent = os.dims[static_cast<size_t>(dim)];
            if (extent % gsize != 0) return InvalidArgumentError("all-to-all split dimension is not divisible by the group size");
            const int64_t chunk = extent / gsize;
            for (int64_t pos = 0; pos < gsize; ++pos) {
              std::vector<Value> pieces;
              Shape cs = os;
              cs.layout.reset();
              cs.dims[static_cast<size_t>(dim)] = chunk;
              for (int64_t m : members) {
                std::vector<SliceDim> sl(os.dims.size());
                for (size_t q = 0; q < os.dims.size(); ++q) sl[q].limit = os.dims[q];
                sl[static_cast<size_t>(dim)].start = pos * chunk;
                sl[static_cast<size_t>(dim)].limit = (pos + 1) * chunk;
                pieces.push_back(ops::Slice(*contrib[static_cast<size_t>(m)][0], cs, sl));
              }
              std::vector<const Value*> parts;
              for (const Value& p : pieces) parts.push_back(&p);
              std::vector<Value> leaves;
              leaves.push_back(ops::Concatenate(parts, leaf_shape(0), dim));
              results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
            }
          } else {
            if (static_cast<int64_t>(n_ops) != gsize) {
              return InvalidArgumentError("tuple all-to-all needs one operand per group member");
            }
            for (int64_t pos = 0; pos < gsize; ++pos) {
              std::vector<Value> leaves;
              for (int64_t k = 0; k < gsize; ++k) {
                Value v = *contrib[static_cast<size_t>(members[static_cast<size_t>(k)])][static_cast<size_t>(pos)];
                v.shape = leaf_shape(static_cast<size_t>(k));
                leaves.push_back(std::move(v));
              }
              results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
            }
          }
          break;
        }
        case HloOpcode::kCollectiveBroadcast: {
          for (int64_t pos = 0; pos < gsize; ++pos) {
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              Value v = *contrib[static_cast<size_t>(members[0])][j];
              v.shape = leaf_shape(j);
              leaves.push_back(std::move(v));
            }
            results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
          }
          break;
        }
        default:
          return InvalidArgumentError(absl::StrCat("collective ", OpName(kind), " is not supported"));
      }
    }
    return results;
  };
  return coord_->Exchange(device_, instr, count, std::move(contribution), fn);
}

// The base collective of a native -start opcode.
std::optional<HloOpcode> StartBase(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAllGatherStart: return HloOpcode::kAllGather;
    case HloOpcode::kAllReduceStart: return HloOpcode::kAllReduce;
    case HloOpcode::kCollectivePermuteStart: return HloOpcode::kCollectivePermute;
    default: return std::nullopt;
  }
}

bool IsPlainCollective(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAllGather: case HloOpcode::kAllReduce: case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll: case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectiveBroadcast:
      return true;
    default: return false;
  }
}

// Value of an async "start" tuple: ((operands) or operand, result, zero-filled context...).
ValuePtr WrapStart(const Shape& shape, const std::vector<ValuePtr>& ops, const ValuePtr& result) {
  Value t;
  t.shape = shape;
  for (size_t k = 0; k < shape.tuple_shapes.size(); ++k) {
    const Shape& es = shape.tuple_shapes[k];
    if (k == 1) {
      t.elements.push_back(result);
    } else if (k == 0 && ops.size() == 1 && !es.IsTuple()) {
      t.elements.push_back(ops[0]);
    } else if (k == 0 && es.IsTuple() && es.tuple_shapes.size() == ops.size()) {
      Value o;
      o.shape = es;
      o.elements = ops;
      t.elements.push_back(Share(std::move(o)));
    } else {
      t.elements.push_back(Share(Value::Zeros(es)));
    }
  }
  return Share(std::move(t));
}

absl::StatusOr<std::vector<int64_t>> StartIndices(const std::vector<ValuePtr>& ops, size_t first) {
  std::vector<int64_t> starts;
  for (size_t k = first; k < ops.size(); ++k) {
    if (ops[k]->size() != 1) return InvalidArgumentError("start indices must be scalars");
    starts.push_back(ops[k]->GetInt(0));
  }
  return starts;
}

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalInstruction(const HloInstruction* instr,
                                                          const std::vector<ValuePtr>& ops,
                                                          const std::vector<ValuePtr>& args) {
  const HloOpcode op = instr->opcode();
  const Shape& shape = instr->shape();
  auto fail = [&](const absl::Status& s) -> absl::Status {
    return absl::Status(s.code(), absl::StrCat(Describe(instr), ": ", s.message()));
  };
  auto done = [&](absl::StatusOr<Value> v) -> absl::StatusOr<ValuePtr> {
    if (!v.ok()) return fail(v.status());
    return Share(std::move(*v));
  };
  if (shape.IsArray() && StorageFor(shape.element_type) == Storage::kNone &&
      op != HloOpcode::kBitcastConvert) {
    return fail(InvalidArgumentError(absl::StrCat("element type ",
                                                  std::string(PrimitiveTypeName(shape.element_type)),
                                                  " is not supported by the evaluator")));
  }
  if (IsElementwiseBinary(op) && op != HloOpcode::kCompare && ops.size() == 2) {
    return done(ops::Binary(op, *ops[0], *ops[1], shape));
  }
  switch (op) {
    case HloOpcode::kParameter:
      if (instr->parameter_number < 0 ||
          instr->parameter_number >= static_cast<int64_t>(args.size())) {
        return fail(InvalidArgumentError("parameter number out of range"));
      }
      return args[static_cast<size_t>(instr->parameter_number)];
    case HloOpcode::kConstant:
      if (!instr->literal.has_value()) return fail(InvalidArgumentError("constant without literal"));
      if (shape.IsTuple()) return fail(InvalidArgumentError("tuple constants are not supported"));
      return done(ops::FromLiteral(*instr->literal, shape));
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId: {
      Value v = Value::Zeros(shape);
      v.SetInt(0, op == HloOpcode::kPartitionId ? device_ % n_ : device_ / n_);
      return Share(std::move(v));
    }
    case HloOpcode::kTuple: {
      Value t;
      t.shape = shape;
      t.elements = ops;
      return Share(std::move(t));
    }
    case HloOpcode::kGetTupleElement: {
      const Value& t = *ops[0];
      if (!t.shape.IsTuple() || instr->tuple_index < 0 ||
          instr->tuple_index >= static_cast<int64_t>(t.elements.size())) {
        return fail(InvalidArgumentError("tuple index out of range"));
      }
      return t.elements[static_cast<size_t>(instr->tuple_index)];
    }
    case HloOpcode::kCopy:
    case HloOpcode::kOptimizationBarrier:
    case HloOpcode::kDomain:
    case HloOpcode::kAddDependency:
    case HloOpcode::kAsyncUpdate:
      if (ops.empty()) return fail(InvalidArgumentError("missing operand"));
      return ops[0];
    case HloOpcode::kCopyStart: {
      Value t;
      t.shape = shape;
      for (size_t k = 0; k < shape.tuple_shapes.size(); ++k) {
        t.elements.push_back(k < 2 ? ops[0] : Share(Value::Zeros(shape.tuple_shapes[k])));
      }
      return Share(std::move(t));
    }
    case HloOpcode::kCopyDone:
      if (ops[0]->shape.IsTuple()) return ops[0]->elements.at(0);
      return ops[0];
    case HloOpcode::kAfterAll: {
      Value v;
      v.shape = shape;
      return Share(std::move(v));
    }
    case HloOpcode::kGetDimensionSize: {
      Value v = Value::Zeros(shape);
      if (instr->dimensions.size() != 1) return fail(InvalidArgumentError("needs dimensions={d}"));
      v.SetInt(0, ops[0]->shape.dims.at(static_cast<size_t>(instr->dimensions[0])));
      return Share(std::move(v));
    }
    case HloOpcode::kCompare:
      return done(ops::Compare(instr->comparison_direction.value_or(ComparisonDirection::kEq),
                               instr->comparison_type == "TOTALORDER", *ops[0], *ops[1], shape));
    case HloOpcode::kConvert: return done(ops::Convert(*ops[0], shape));
    case HloOpcode::kBitcastConvert: return done(ops::BitcastConvert(*ops[0], shape));
    case HloOpcode::kSelect: return done(ops::Select(*ops[0], *ops[1], *ops[2], shape));
    case HloOpcode::kClamp: return done(ops::Clamp(*ops[0], *ops[1], *ops[2], shape));
    case HloOpcode::kBroadcast:
      return Share(ops::Broadcast(*ops[0], shape, instr->dimensions));
    case HloOpcode::kTranspose:
      return Share(ops::Transpose(*ops[0], shape, instr->dimensions));
    case HloOpcode::kReshape:
      if (ops[0]->size() != shape.ElementCount()) return fail(InvalidArgumentError("reshape changes the element count"));
      return Share(ops::Reshape(*ops[0], shape));
    case HloOpcode::kBitcast:
      if (ops[0]->size() != shape.ElementCount() ||
          ops[0]->shape.element_type != shape.element_type) {
        return fail(InvalidArgumentError("bitcast must keep the element type and count"));
      }
      return Share(ops::Bitcast(*ops[0], instr->operand(0)->shape(), shape));
    case HloOpcode::kSlice:
      if (instr->slice.size() != ops[0]->shape.dims.size()) return fail(InvalidArgumentError("slice rank mismatch"));
      return Share(ops::Slice(*ops[0], shape, instr->slice));
    case HloOpcode::kDynamicSlice: {
      auto starts = StartIndices(ops, 1);
      if (!starts.ok()) return fail(starts.status());
      if (starts->size() != ops[0]->shape.dims.size()) return fail(InvalidArgumentError("wrong number of start indices"));
      return Share(ops::DynamicSlice(*ops[0], shape, *starts));
    }
    case HloOpcode::kDynamicUpdateSlice: {
      auto starts = StartIndices(ops, 2);
      if (!starts.ok()) return fail(starts.status());
      if (starts->size() != ops[0]->shape.dims.size()) return fail(InvalidArgumentError("wrong number of start indices"));
      if (ops[1]->shape.element_type != ops[0]->shape.element_type) return fail(InvalidArgumentError("update element type differs"));
      return Share(ops::DynamicUpdateSlice(*ops[0], *ops[1], *starts));
    }
    case HloOpcode::kPad:
      if (instr->padding.size() != ops[0]->shape.dims.size()) return fail(InvalidArgumentError("padding rank mismatch"));
      return Share(ops::Pad(*ops[0], *ops[1], shape, instr->padding));
    case HloOpcode::kConcatenate: {
      std::vector<const Value*> parts;
      for (const ValuePtr& v : ops) parts.push_back(v.get());
      if (instr->dimensions.size() != 1) return fail(InvalidArgumentError("needs dimensions={d}"));
      return Share(ops::Concatenate(parts, shape, instr->dimensions[0]));
    }
    case HloOpcode::kReverse: {
      Value v = ops::Reverse(*ops[0], instr->dimensions);
      return Share(std::move(v));
    }
    case HloOpcode::kIota:
      return Share(ops::Iota(shape, instr->iota_dimension));
    case HloOpcode::kDot:
      return done(ops::Dot(*ops[0], *ops[1], shape, instr->dot_dims));
    case HloOpcode::kGather:
      return done(Gather(*instr, *ops[0], *ops[1]));
    case HloOpcode::kScatter:
      return done(Scatter(*instr, ops));
    case HloOpcode::kReduce: {
      auto r = EvalReduce(instr, ops);
      if (!r.ok()) return fail(r.status());
      return r;
    }
    case HloOpcode::kReduceWindow: {
      auto r = EvalReduceWindow(instr, ops);
      if (!r.ok()) return fail(r.status());
      return r;
    }
    case HloOpcode::kSort: {
      auto r = EvalSort(instr, ops);
      if (!r.ok()) return fail(r.status());
      return r;
    }
    case HloOpcode::kMap: {
      const int64_t n = shape.ElementCount();
      Value out = Value::Zeros(shape);
      for (int64_t k = 0; k < n; ++k) {
        std::vector<ValuePtr> a;
        for (const ValuePtr& v : ops) a.push_back(ScalarAt(*v, k));
        auto r = CallScalar(instr->to_apply(), a);
        if (!r.ok()) return r.status();
        StoreScalar(**r, &out, k);
      }
      return Share(std::move(out));
    }
    case HloOpcode::kCall:
    case HloOpcode::kFusion:
      if (instr->called_computations().empty()) return fail(InvalidArgumentError("no called computation"));
      return EvalComputation(instr->called_computations()[0], ops);
    case HloOpcode::kWhile: {
      ValuePtr state = ops.at(0);
      for (int64_t iter = 0;; ++iter) {
        auto cond = EvalComputation(instr->while_condition(), {state});
        if (!cond.ok()) return cond.status();
        if ((*cond)->storage() != Storage::kInt || (*cond)->i.empty()) {
          return fail(InvalidArgumentError("while condition must return pred[]"));
        }
        if ((*cond)->i[0] == 0) break;
        auto next = EvalComputation(instr->while_body(), {state});
        if (!next.ok()) return next.status();
        state = std::move(*next);
        if ((iter & 255) == 255 && coord_->failed()) {
          return absl::AbortedError("aborted because another device failed");
        }
      }
      return state;
    }
    case HloOpcode::kConditional: {
      const auto& branches = instr->called_computations();
      int64_t index;
      if (ops[0]->shape.element_type == PrimitiveType::PRED) {
        index = ops[0]->i.at(0) ? 0 : 1;
      } else {
        index = ops[0]->GetInt(0);
        if (index < 0 || index >= static_cast<int64_t>(branches.size())) {
          index = static_cast<int64_t>(branches.size()) - 1;  // XLA: out of range -> last
        }
      }
      if (index >= static_cast<int64_t>(branches.size()) || index + 1 >= static_cast<int64_t>(ops.size())) {
        return fail(InvalidArgumentError("conditional branch/operand count mismatch"));
      }
      return EvalComputation(branches[static_cast<size_t>(index)], {ops[static_cast<size_t>(index + 1)]});
    }
    case HloOpcode::kCustomCall: {
      const CustomCallEvaluator* fn = FindCustomCallEvaluator(instr->custom_call_target);
      if (fn == nullptr) {
        return fail(InvalidArgumentError(absl::StrCat("custom-call target \"",
                                                      instr->custom_call_target,
                                                      "\" is not supported by the evaluator")));
      }
      auto v = (*fn)(*instr, ops);
      if (!v.ok()) return fail(v.status());
      return Share(std::move(*v));
    }
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllReduceStart:
    case HloOpcode::kCollectivePermuteStart: {
      const HloOpcode base = *StartBase(op);
      const bool tuple_wrapped = op != HloOpcode::kAllReduceStart && shape.IsTuple() &&
                                 shape.tuple_shapes.size() >= 2;
      const Shape& rs = tuple_wrapped ? shape.tuple_shapes[1] : shape;
      auto r = EvalCollective(instr, base, rs, ops);
      if (!r.ok()) return r.status();
      if (!tuple_wrapped) return r;
      return WrapStart(shape, ops, *r);
    }
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAllReduceDone:
    case HloOpcode::kCollectivePermuteDone:
      if (op != HloOpcode::kAllReduceDone && ops[0]->shape.IsTuple() &&
          ops[0]->elements.size() >= 2) {
        return ops[0]->elements[1];
      }
      return ops[0];
    case HloOpcode::kAsyncStart: {
      if (!shape.IsTuple() || shape.tuple_shapes.size() < 2) {
        return fail(InvalidArgumentError("async-start must have a tuple shape ((operands), result, ...)"));
      }
      ValuePtr result;
      if (!instr->async_sugar.empty()) {
        auto base = ParseHloOpcode(instr->async_sugar);
        if (!base) return fail(InvalidArgumentError("unknown async wrapped opcode"));
        if (IsPlainCollective(*base)) {
          auto r = EvalCollective(instr, *base, shape.tuple_shapes[1], ops);
          if (!r.ok()) return r.status();
          result = *r;
        } else {
          return fail(InvalidArgumentError(absl::StrCat("async ", instr->async_sugar,
                                                        " is not supported by the evaluator")));
        }
      } else {
        if (instr->called_computations().empty()) return fail(InvalidArgumentError("async-start without calls="));
        auto r = EvalComputation(instr->called_computations()[0], ops);
        if (!r.ok()) return r.status();
        result = *r;
      }
      return WrapStart(shape, ops, result);
    }
    case HloOpcode::kAsyncDone:
      if (!ops[0]->shape.IsTuple() || ops[0]->elements.size() < 2) {
        return fail(InvalidArgumentError("async-done operand is not an async-start tuple"));
      }
      return ops[0]->elements[1];
    default:
      break;
  }
  if (IsPlainCollective(op)) return EvalCollective(instr, op, shape, ops);
  if (IsElementwiseUnary(op) || op == HloOpcode::kIsFinite || op == HloOpcode::kNot) {
    return done(ops::Unary(op, *ops[0], shape));
  }
  return fail(InvalidArgumentError(absl::StrCat("opcode ", OpName(op),
                                                " is not supported by the evaluator")));
}

// ---------------------------------------------------------------------------------------------
// Inputs.

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A random array: floats uniform in [-1, 1) rounded to the type, integers in [0, 8), pred 0/1.
Value RandomArray(const Shape& s, uint64_t stream) {
  Value v = Value::Zeros(s);
  uint64_t state = Mix(stream);
  const int64_t n = s.ElementCount();
  const PrimitiveType t = s.element_type;
  for (int64_t k = 0; k < n; ++k) {
    state = Mix(state);
    switch (v.storage()) {
      case Storage::kFloat: {
        const double u = static_cast<double>(state >> 40) * 0x1.0p-24 * 2.0 - 1.0;
        v.f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(u, t));
        break;
      }
      case Storage::kDouble:
        v.d[static_cast<size_t>(k)] = static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        break;
      case Storage::kInt:
        v.i[static_cast<size_t>(k)] = t == PrimitiveType::PRED ? static_cast<int64_t>(state & 1)
                                                                : static_cast<int64_t>(state % 8);
        break;
      default: break;
    }
  }
  return v;
}

bool IsTiled(const std::optional<HloSharding>& sh) {
  return sh.has_value() && sh->kind == HloSharding::Kind::kTiled && sh->DataRank() > 0;
}

bool IsReplicatedLike(const std::optional<HloSharding>& sh) {
  if (!sh.has_value()) return false;
  if (sh->kind == HloSharding::Kind::kReplicated || sh->kind == HloSharding::Kind::kMaximal) return true;
  if (sh->kind == HloSharding::Kind::kTiled) {
    // All data tile dims 1: replicated (e.g. devices=[1,1,4]last_tile_dim_replicate).
    for (int64_t j = 0; j < sh->DataRank(); ++j) {
      if (sh->tile_dims[static_cast<size_t>(j)] != 1) return false;
    }
    return true;
  }
  return false;
}

// The global shape of a tiled parameter with local shape `local`.
Shape GlobalShape(const Shape& local, const HloSharding& sh) {
  Shape g = local;
  g.layout.reset();
  for (int64_t j = 0; j < sh.DataRank() && j < local.rank(); ++j) {
    g.dims[static_cast<size_t>(j)] *= sh.tile_dims[static_cast<size_t>(j)];
  }
  return g;
}

absl::StatusOr<Value> TileOf(const Value& global, const Shape& local, const HloSharding& sh,
                             int64_t partition) {
  auto idx = sh.TileIndexForDevice(partition);
  if (!idx.has_value()) {
    return InvalidArgumentError(absl::StrCat("partition ", partition,
                                             " is not in the tile assignment ", sh.ToString()));
  }
  std::vector<SliceDim> sl(local.dims.size());
  for (size_t j = 0; j < local.dims.size(); ++j) {
    const int64_t t = j < idx->size() ? (*idx)[j] : 0;
    sl[j].start = t * local.dims[j];
    sl[j].limit = sl[j].start + local.dims[j];
  }
  return ops::Slice(global, local, sl);
}

}  // namespace

int64_t ResolvedNumPartitions(const HloModule& module, const EvalOptions& options) {
  if (options.num_partitions > 0) return options.num_partitions;
  return std::max<int64_t>(1, module.num_partitions);
}

int64_t ResolvedReplicaCount(const HloModule& module, const EvalOptions& options) {
  if (options.replica_count > 0) return options.replica_count;
  return std::max<int64_t>(1, module.replica_count);
}

namespace {
// Bytes the evaluator stores for a value of shape `s` (f32 storage for floats up to 32 bits, 8
// bytes per element otherwise); nullopt when that overflows int64.
std::optional<int64_t> CheckedStorageBytes(const Shape& s) {
  if (s.IsTuple()) {
    int64_t b = 0;
    for (const Shape& e : s.tuple_shapes) {
      std::optional<int64_t> eb = CheckedStorageBytes(e);
      if (!eb || __builtin_add_overflow(b, *eb, &b)) return std::nullopt;
    }
    return b;
  }
  if (!s.IsArray()) return 0;
  const int64_t per = StorageFor(s.element_type) == Storage::kFloat ? 4 : 8;
  std::optional<int64_t> n = s.CheckedElementCount();
  int64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, per, &bytes)) return std::nullopt;
  return bytes;
}

int64_t StorageBytes(const Shape& s) {
  return CheckedStorageBytes(s).value_or(int64_t{1} << 60);
}

// The largest single value the evaluator allocates (all devices together are bounded separately
// by EvalOptions::max_memory_bytes, which --force lifts; this bound is not lifted).
constexpr int64_t kMaxValueBytes = int64_t{64} << 30;

// ResourceExhausted naming the first instruction whose result (or one tuple element of it) is
// larger than kMaxValueBytes or whose size overflows int64; OK otherwise.
absl::Status CheckValueSizes(const HloModule& module) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      std::vector<const Shape*> leaves = {&instr->shape()};
      while (!leaves.empty()) {
        const Shape* sh = leaves.back();
        leaves.pop_back();
        if (sh->IsTuple()) {
          for (const Shape& e : sh->tuple_shapes) leaves.push_back(&e);
          continue;
        }
        std::optional<int64_t> b = CheckedStorageBytes(*sh);
        if (!b) {
          return absl::ResourceExhaustedError(absl::StrCat(
              Describe(instr), ": a value of shape ", sh->ToString(false),
              " has a size that overflows int64: refused"));
        }
        if (*b > kMaxValueBytes) {
          return absl::ResourceExhaustedError(absl::StrFormat(
              "%s: a value of shape %s needs %.2f GiB, over the evaluator's limit of %d GiB for "
              "one value: refused",
              Describe(instr), sh->ToString(false), static_cast<double>(*b) / (1 << 30),
              kMaxValueBytes >> 30));
        }
      }
    }
  }
  return absl::OkStatus();
}
}  // namespace

int64_t EstimateMemoryBytes(const HloModule& module, int64_t num_devices) {
  int64_t total = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      // Tuples, get-tuple-element and parameters of callees share storage with other values.
      if (instr->shape().IsTuple() || instr->opcode() == HloOpcode::kGetTupleElement) continue;
      if (instr->opcode() == HloOpcode::kParameter && c != module.entry()) continue;
      const int64_t b = StorageBytes(instr->shape());
      if (total > (int64_t{1} << 60) - b) return int64_t{1} << 60;
      total += b;
    }
  }
  if (num_devices > 0 && total > (int64_t{1} << 60) / num_devices) return int64_t{1} << 60;
  return total * std::max<int64_t>(1, num_devices);
}

absl::StatusOr<Inputs> MakeInputs(const HloModule& module, const EvalOptions& options,
                                  const std::vector<InputOverride>& overrides) {
  const HloComputation* entry = module.entry();
  if (entry == nullptr) return InvalidArgumentError("module has no entry computation");
  if (absl::Status sizes = CheckValueSizes(module); !sizes.ok()) return sizes;
  const int64_t n = ResolvedNumPartitions(module, options);
  const int64_t r = ResolvedReplicaCount(module, options);
  const int64_t devices = n * r;
  const int64_t num_params = entry->num_parameters();
  Inputs in;
  in.per_device.assign(static_cast<size_t>(devices), std::vector<ValuePtr>(static_cast<size_t>(num_params)));
  for (const InputOverride& o : overrides) {
    if (o.parameter < 0 || o.parameter >= num_params) {
      return InvalidArgumentError(absl::StrCat("input for parameter ", o.parameter,
                                               " but the entry has ", num_params,
                                               " parameters"));
    }
    if (o.device >= devices) {
      return InvalidArgumentError(absl::StrCat("input for partition ", o.device, " but only ",
                                               devices, " devices run"));
    }
  }
  for (int64_t i = 0; i < num_params; ++i) {
    const HloInstruction* p = entry->parameter(i);
    if (p == nullptr) return InvalidArgumentError(absl::StrCat("entry parameter ", i, " is missing"));
    const Shape& local = p->shape();
    const std::optional<HloSharding>& sh = p->sharding;
    const uint64_t base = Mix(options.seed * 0x100000001b3ull + static_cast<uint64_t>(i) + 1);
    // Overrides for this parameter.
    const InputOverride* global_override = nullptr;
    std::vector<const InputOverride*> device_override(static_cast<size_t>(devices), nullptr);
    for (const InputOverride& o : overrides) {
      if (o.parameter != i) continue;
      if (o.device < 0) global_override = &o;
      else device_override[static_cast<size_t>(o.device)] = &o;
    }
    if (local.IsTuple()) {
      if (global_override != nullptr) {
        return InvalidArgumentError(absl::StrCat("parameter ", i, " is a tuple: give it per leaf is not supported"));
      }
      for (int64_t d = 0; d < devices; ++d) {
        // Only parameters without any sharding follow replicate_unsharded ({manual} differs).
        const bool same = (options.replicate_unsharded && !sh.has_value()) || IsReplicatedLike(sh);
        std::function<Value(const Shape&, uint64_t)> gen = [&](const Shape& s, uint64_t st) {
          if (!s.IsTuple()) return RandomArray(s, st);
          Value t;
          t.shape = s;
          for (size_t k = 0; k < s.tuple_shapes.size(); ++k) {
            t.elements.push_back(Share(gen(s.tuple_shapes[k], Mix(st + k + 1))));
          }
          return t;
        };
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] =
            Share(gen(local, same ? base : Mix(base + static_cast<uint64_t>(d) + 1)));
      }
      continue;
    }
    if (!local.IsArray() || StorageFor(local.element_type) == Storage::kNone) {
      return InvalidArgumentError(absl::StrCat("parameter ", i, " has unsupported type ",
                                               local.ToString(false)));
    }
    auto check = [&](const Value& v, const Shape& want, const char* what) -> absl::Status {
      if (v.shape.element_type != want.element_type || v.shape.dims != want.dims) {
        return InvalidArgumentError(absl::StrCat("input for parameter ", i, " (", what,
                                                 ") has shape ", v.shape.ToString(false),
                                                 ", expected ", want.ToString(false)));
      }
      return absl::OkStatus();
    };
    const bool tiled = IsTiled(sh) && !IsReplicatedLike(sh);
    if (tiled) {
      const Shape global = GlobalShape(local, *sh);
      Value g;
      if (global_override != nullptr) {
        absl::Status s = check(*global_override->value, global, "global array of a sharded parameter");
        if (!s.ok()) return s;
        g = *global_override->value;
      } else {
        g = RandomArray(global, base);
      }
      for (int64_t d = 0; d < devices; ++d) {
        auto tile = TileOf(g, local, *sh, d % n);
        if (!tile.ok()) return InvalidArgumentError(absl::StrCat("parameter ", i, ": ", tile.status().message()));
        tile->shape = local;
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] = Share(std::move(*tile));
      }
    } else {
      const bool same = (options.replicate_unsharded && !sh.has_value()) ||
                        IsReplicatedLike(sh) || global_override != nullptr;
      ValuePtr shared;
      if (global_override != nullptr) {
        absl::Status s = check(*global_override->value, local, "local array");
        if (!s.ok()) return s;
        Value v = *global_override->value;
        v.shape = local;
        shared = Share(std::move(v));
      } else if (same) {
        shared = Share(RandomArray(local, base));
      }
      for (int64_t d = 0; d < devices; ++d) {
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] =
            same ? shared : Share(RandomArray(local, Mix(base + static_cast<uint64_t>(d) + 1)));
      }
    }
    for (int64_t d = 0; d < devices; ++d) {
      if (const InputOverride* o = device_override[static_cast<size_t>(d)]) {
        absl::Status s = check(*o->value, local, "one partition's local array");
        if (!s.ok()) return s;
        Value v = *o->value;
        v.shape = local;
        in.per_device[static_cast<size_t>(d)][static_cast<size_t>(i)] = Share(std::move(v));
      }
    }
  }
  return in;
}

absl::StatusOr<EvalResult> RunModule(const HloModule& module, const EvalOptions& options,
                                     const Inputs* given) {
  const HloComputation* entry = module.entry();
  if (entry == nullptr) return InvalidArgumentError("module has no entry computation");
  const int64_t n = ResolvedNumPartitions(module, options);
  const int64_t r = ResolvedReplicaCount(module, options);
  const int64_t devices = n * r;
  if (devices > 4096) {
    return InvalidArgumentError(absl::StrCat(devices, " devices is too many to simulate"));
  }
  if (absl::Status sizes = CheckValueSizes(module); !sizes.ok()) return sizes;
  const int64_t bytes = EstimateMemoryBytes(module, devices);
  if (bytes > options.max_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "module '%s' needs an estimated %.2f GiB to run on %d device%s (limit %.2f GiB): refused",
        module.name(), static_cast<double>(bytes) / (1 << 30), devices, devices == 1 ? "" : "s",
        static_cast<double>(options.max_memory_bytes) / (1 << 30)));
  }
  // Large arrays are allocated and freed for every instruction: keep freed memory in the heap
  // instead of returning it to the OS (mmap/munmap per array made page faults dominate).
  static std::once_flag malloc_once;
  std::call_once(malloc_once, [] {
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  });
  Program program;
  program.module = &module;
  for (const HloComputation* c : module.computations()) {
    program.plans.emplace(c, BuildPlan(c));
    program.simple_binary.emplace(c, SimpleBinary(c));
  }
  EvalResult result;
  result.num_partitions = n;
  result.replica_count = r;
  if (given != nullptr) {
    result.inputs = *given;
  } else {
    absl::StatusOr<Inputs> in = absl::UnknownError("inputs not made");
    try {
      in = MakeInputs(module, options);
    } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating the inputs of module '", module.name(), "' failed: ", e.what()));
    }
    if (!in.ok()) return in.status();
    result.inputs = std::move(*in);
  }
  if (static_cast<int64_t>(result.inputs.per_device.size()) != devices) {
    return InvalidArgumentError(absl::StrCat("inputs are given for ", result.inputs.per_device.size(),
                                             " devices, the run has ", devices));
  }
  for (int64_t d = 0; d < devices; ++d) {
    const auto& args = result.inputs.per_device[static_cast<size_t>(d)];
    if (static_cast<int64_t>(args.size()) != entry->num_parameters()) {
      return InvalidArgumentError(absl::StrCat("device ", d, " has ", args.size(),
                                               " inputs, the entry has ",
                                               entry->num_parameters(), " parameters"));
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == nullptr || !args[i]->shape.Compatible(entry->parameter(static_cast<int64_t>(i))->shape())) {
        return InvalidArgumentError(absl::StrCat(
            "input ", i, " of device ", d, " has shape ",
            args[i] ? args[i]->shape.ToString(false) : std::string("<none>"), ", parameter ", i,
            " has ", entry->parameter(static_cast<int64_t>(i))->shape().ToString(false)));
      }
    }
  }
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == HloOpcode::kConstant && instr->literal.has_value() &&
          instr->literal->elided) {
        result.warnings.push_back(absl::StrCat("constant '", instr->name(),
                                               "' has an elided literal {...}: evaluated as zeros"));
      }
    }
  }
  Coordinator coord(n, r);
  result.outputs.assign(static_cast<size_t>(devices), {});
  auto run_device = [&](int64_t d) {
    DeviceEvaluator ev(program, &coord, d, n, r);
    absl::StatusOr<ValuePtr> out = absl::UnknownError("not run");
    try {
      out = ev.EvalComputation(entry, result.inputs.per_device[static_cast<size_t>(d)]);
    } catch (const std::exception& e) {  // std::bad_alloc, std::length_error: refuse, not abort
      out = absl::ResourceExhaustedError(absl::StrCat("evaluating module '", module.name(),
                                                      "' on device ", d, " failed: ", e.what()));
    }
    if (!out.ok()) {
      coord.Fail(d, out.status());
      return;
    }
    FlattenLeaves(*out, &result.outputs[static_cast<size_t>(d)]);
    coord.Finish(d);
  };
  if (devices == 1) {
    run_device(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(devices));
    for (int64_t d = 0; d < devices; ++d) threads.emplace_back(run_device, d);
    for (std::thread& t : threads) t.join();
  }
  if (coord.failed()) return coord.failure();
  return result;
}

}  // namespace weave::eval
