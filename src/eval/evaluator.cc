// The reference evaluator (eval/evaluator.h): evaluation plans, the interpretation of one
// computation on one device, memory bounds, and the run (one thread per device, meeting at
// collectives). The op families live in evaluator_*.cc (see eval/evaluator_internal.h).
#include "eval/evaluator.h"

#include <malloc.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "eval/evaluator_internal.h"
#include "eval/evaluator_rendezvous.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace internal {

using absl::InvalidArgumentError;

namespace {

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

CompPlan BuildPlan(const HloComputation* c) {
  CompPlan plan;
  std::vector<HloInstruction*> post = c->MakeInstructionPostOrder();
  // Reachable from the root (and parameters, which are always bound), or from an infeed or
  // outfeed: side effects run whether or not the root reads them, as in XLA.
  std::set<const HloInstruction*> live;
  std::vector<const HloInstruction*> stack;
  if (c->root() != nullptr) stack.push_back(c->root());
  for (const HloInstruction* x : post) {
    if (x->opcode() == HloOpcode::kOutfeed || x->opcode() == HloOpcode::kInfeed) stack.push_back(x);
  }
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
  const Storage st = StorageFor(s.element_type);
  const int64_t per = st == Storage::kFloat ? 4 : st == Storage::kComplex ? 16 : 8;
  std::optional<int64_t> n = s.CheckedElementCount();
  int64_t bytes = 0;
  if (!n || __builtin_mul_overflow(*n, per, &bytes)) return std::nullopt;
  return bytes;
}


// The largest single value the evaluator allocates (all devices together are bounded separately
// by EvalOptions::max_memory_bytes, which --force lifts; this bound is not lifted).
constexpr int64_t kMaxValueBytes = int64_t{64} << 30;

}  // namespace

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
    ASSIGN_OR_RETURN(auto v, EvalInstruction(instr, ops, args));
    // An array value holds as many elements as its instruction's shape, in that shape's storage:
    // a value that does not (an op the verifier let through with the wrong result shape) is an
    // error here, before any reader indexes past it.
    if (instr->shape().IsArray() && v != nullptr && !HoldsShape(*v, instr->shape())) {
      return InvalidArgumentError(absl::StrCat(Describe(instr), ": the value computed does not hold its shape ",
                                               instr->shape().ToString(false), " (",
                                               v->shape.IsArray() ? "a different element count or storage" : "not an array",
                                               ")"));
    }
    slots[k] = std::move(v);
    for (int32_t s : plan.release[k]) slots[static_cast<size_t>(s)].reset();
  }
  return slots[static_cast<size_t>(plan.root)];
}

absl::StatusOr<Value> DeviceEvaluator::ApplyBinaryComputation(const HloComputation* c,
                                                             const Value& a, const Value& b) {
  auto simple = program_.simple_binary.find(c);
  const Shape& s = a.shape;
  if (simple != program_.simple_binary.end() && simple->second.has_value()) {
    if (program_.exact_sums && *simple->second == HloOpcode::kAdd && a.storage() == Storage::kFloat &&
        b.storage() == Storage::kFloat) {
      // EvalOptions::exact_sums: the sum at f32, not rounded to the narrow result type.
      absl::StatusOr<Value> r = ops::Binary(HloOpcode::kAdd, a, b, Shape(PrimitiveType::F32, s.dims));
      if (r.ok()) r->shape = s;
      return r;
    }
    return ops::Binary(*simple->second, a, b, s);
  }
  Value r = Value::Zeros(s);
  const int64_t n = s.ElementCount();
  Shape scalar = Shape::Scalar(s.element_type);
  for (int64_t k = 0; k < n; ++k) {
    Value x = Value::Zeros(scalar), y = Value::Zeros(scalar);
    if (x.storage() == Storage::kInt && a.storage() == Storage::kInt && b.storage() == Storage::kInt) {
      x.i[0] = a.i[static_cast<size_t>(k)];
      y.i[0] = b.i[static_cast<size_t>(k)];
    } else {
      x.SetDouble(0, a.GetDouble(k));
      y.SetDouble(0, b.GetDouble(k));
    }
    auto res = CallScalar(c, {Share(std::move(x)), Share(std::move(y))});
    if (!res.ok()) return res.status();
    // The computation's result is converted to `a`'s element type where their storages differ.
    if ((*res)->storage() == Storage::kInt && r.storage() == Storage::kInt) {
      r.i[static_cast<size_t>(k)] = (*res)->i[0];
    } else {
      r.SetDouble(k, (*res)->GetDouble(0));
    }
  }
  return r;
}

ValuePtr ScalarAt(const Value& v, int64_t k) {
  Value s = Value::Zeros(Shape::Scalar(v.shape.element_type));
  switch (v.storage()) {
    case Storage::kFloat: s.f[0] = v.f[static_cast<size_t>(k)]; break;
    case Storage::kDouble: s.d[0] = v.d[static_cast<size_t>(k)]; break;
    case Storage::kInt: s.i[0] = v.i[static_cast<size_t>(k)]; break;
    case Storage::kComplex: s.c[0] = v.c[static_cast<size_t>(k)]; break;
    default: break;
  }
  return Share(std::move(s));
}

void StoreScalar(const Value& s, Value* dst, int64_t k) {
  switch (dst->storage()) {
    case Storage::kFloat: dst->f[static_cast<size_t>(k)] = s.f[0]; break;
    case Storage::kDouble: dst->d[static_cast<size_t>(k)] = s.d[0]; break;
    case Storage::kInt: dst->i[static_cast<size_t>(k)] = s.i[0]; break;
    case Storage::kComplex: dst->c[static_cast<size_t>(k)] = s.c[0]; break;
    default: break;
  }
}

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

}  // namespace internal

using absl::InvalidArgumentError;

int64_t ResolvedNumPartitions(const HloModule& module, const EvalOptions& options) {
  if (options.num_partitions > 0) return options.num_partitions;
  return std::max<int64_t>(1, module.num_partitions);
}

int64_t ResolvedReplicaCount(const HloModule& module, const EvalOptions& options) {
  if (options.replica_count > 0) return options.replica_count;
  return std::max<int64_t>(1, module.replica_count);
}

namespace {

constexpr int64_t kMemoryCap = int64_t{1} << 60;

int64_t CappedAdd(int64_t a, int64_t b) { return a > kMemoryCap - b ? kMemoryCap : a + b; }

// Whether the evaluator returns `h`'s operand itself as `h`'s value (EvalInstruction): the two
// share one storage.
bool ReturnsItsOperand(const HloInstruction* h) {
  switch (h->opcode()) {
    case HloOpcode::kCopy:
    case HloOpcode::kOptimizationBarrier:
    case HloOpcode::kDomain:
    case HloOpcode::kAddDependency:
    case HloOpcode::kAsyncUpdate:
      return h->operand_count() > 0;
    default:
      return false;
  }
}

// The peak of `c`'s live storage in the evaluator (see EstimateMemoryBytes), memoized. Entry
// parameters in `shared` (by number) hold storage counted outside, once for every device.
int64_t PeakBytes(const HloComputation* c, bool entry, const std::vector<bool>& shared,
                  int64_t devices, absl::flat_hash_map<const HloComputation*, int64_t>* memo) {
  if (auto it = memo->find(c); it != memo->end()) return it->second;
  (*memo)[c] = 0;  // a computation reached again while being measured adds nothing more
  const internal::CompPlan plan = internal::BuildPlan(c);
  // A tuple and a get-tuple-element share their elements' storage; any other tuple-shaped result
  // (a loop's, a sort's, a collective's) holds its leaves. Entry parameters (the inputs) are
  // counted once up front, all of them, and stay.
  auto own = [&](const HloInstruction* h) -> int64_t {
    if (h->opcode() == HloOpcode::kTuple || h->opcode() == HloOpcode::kGetTupleElement) return 0;
    if (h->opcode() == HloOpcode::kParameter) return 0;
    const Shape& s = h->shape();
    if (h->opcode() == HloOpcode::kCustomCall && s.IsTuple() && !s.tuple_shapes.empty() &&
        s.tuple_shapes.back().element_type == PrimitiveType::S8) {
      // A GEMM's trailing s8 workspace is given no storage (fp8_gemm_custom_call.cc).
      int64_t bytes = 0;
      for (size_t i = 0; i + 1 < s.tuple_shapes.size(); ++i) {
        bytes = CappedAdd(bytes, StorageBytes(s.tuple_shapes[i]));
      }
      return bytes;
    }
    if (h->opcode() == HloOpcode::kAllGather || h->opcode() == HloOpcode::kAllReduce) {
      // One result shared by the group's devices (evaluator_collectives.cc): each device's part.
      int64_t group = devices;
      if (h->replica_groups && !h->replica_groups->groups.empty()) {
        group = static_cast<int64_t>(h->replica_groups->groups[0].size());
      }
      return StorageBytes(s) / std::max<int64_t>(1, group);
    }
    return StorageBytes(s);
  };
  // A value that a tuple takes stays reachable through it: never released (an over-estimate).
  auto kept_by_tuple = [&](const HloInstruction* h) {
    for (const HloInstruction* u : h->users()) {
      if (u->opcode() == HloOpcode::kTuple) return true;
    }
    return false;
  };
  // Each step's storage: its own, or (an op returning its operand) its operand's step's. A
  // storage is released when the last step holding it is.
  const size_t steps = plan.order.size();
  std::vector<size_t> storage(steps);
  std::vector<int32_t> holders(steps, 0);
  std::vector<bool> pinned(steps, false);
  int64_t live = 0, peak = 0;
  if (entry) {
    for (const HloInstruction* p : c->parameters()) {
      const size_t num = static_cast<size_t>(p->parameter_number);
      if (num < shared.size() && shared[num]) continue;
      live = CappedAdd(live, StorageBytes(p->shape()));
    }
    peak = live;
  }
  for (size_t k = 0; k < steps; ++k) {
    const HloInstruction* h = plan.order[k];
    int64_t callee = 0;
    for (const HloComputation* called : h->called_computations()) {
      if (called != nullptr) callee = std::max(callee, PeakBytes(called, false, {}, devices, memo));
    }
    const bool alias = ReturnsItsOperand(h) && !plan.operands[k].empty() && plan.operands[k][0] >= 0;
    storage[k] = alias ? storage[static_cast<size_t>(plan.operands[k][0])] : k;
    const int64_t mine = alias ? 0 : own(h);
    peak = std::max(peak, CappedAdd(CappedAdd(live, mine), callee));
    live = CappedAdd(live, mine);
    ++holders[storage[k]];
    if (kept_by_tuple(h)) pinned[storage[k]] = true;
    for (int32_t s : plan.release[k]) {
      const size_t held = storage[static_cast<size_t>(s)];
      if (--holders[held] == 0 && !pinned[held]) live -= own(plan.order[held]);
    }
  }
  (*memo)[c] = peak;
  return peak;
}

}  // namespace

int64_t EstimateMemoryBytes(const HloModule& module, int64_t num_devices,
                            const std::vector<bool>& shared_parameters) {
  if (module.entry() == nullptr) return 0;
  absl::flat_hash_map<const HloComputation*, int64_t> memo;
  const int64_t total = PeakBytes(module.entry(), true, shared_parameters, std::max<int64_t>(1, num_devices), &memo);
  if (num_devices > 0 && total > kMemoryCap / num_devices) return kMemoryCap;
  return total * std::max<int64_t>(1, num_devices);
}

namespace {

// Which entry parameters `given` holds as one value for every device (a replicated parameter in
// the global check): those are held once, outside the run. Empty unless `given` has an input
// list for each of several devices.
std::vector<bool> SharedGivenInputs(const Inputs* given, int64_t devices) {
  std::vector<bool> shared;
  if (given != nullptr && devices > 1 && static_cast<int64_t>(given->per_device.size()) == devices) {
    const std::vector<ValuePtr>& first = given->per_device[0];
    shared.assign(first.size(), true);
    for (const std::vector<ValuePtr>& args : given->per_device) {
      for (size_t i = 0; i < shared.size(); ++i) {
        shared[i] = shared[i] && i < args.size() && args[i] == first[i];
      }
    }
  }
  return shared;
}

// The run's inputs: a copy of `given`, or, when null, those MakeInputs makes for the options;
// ResourceExhausted when allocating them throws, MakeInputs's errors.
absl::StatusOr<Inputs> RunInputs(const HloModule& module, const EvalOptions& options,
                                 const Inputs* given) {
  if (given != nullptr) return *given;
  absl::StatusOr<Inputs> in = absl::UnknownError("inputs not made");
  try {
    in = MakeInputs(module, options);
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
    return absl::ResourceExhaustedError(
        absl::StrCat("allocating the inputs of module '", module.name(), "' failed: ", e.what()));
  }
  return in;
}

// OK when `inputs` holds, for each of `devices` devices, one value of each entry parameter's
// shape; InvalidArgument naming the first device count, input count or shape that differs.
absl::Status CheckRunInputs(const HloComputation* entry, const Inputs& inputs, int64_t devices) {
  if (static_cast<int64_t>(inputs.per_device.size()) != devices) {
    return InvalidArgumentError(absl::StrCat("inputs are given for ", inputs.per_device.size(),
                                             " devices, the run has ", devices));
  }
  for (int64_t d = 0; d < devices; ++d) {
    const auto& args = inputs.per_device[static_cast<size_t>(d)];
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
  return absl::OkStatus();
}

// Appends a warning to *warnings for each constant of `module` whose literal the text elides
// ({...}): it is evaluated as zeros.
void WarnElidedConstants(const HloModule& module, std::vector<std::string>* warnings) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      if (instr->opcode() == HloOpcode::kConstant && instr->literal.has_value() &&
          instr->literal->elided) {
        warnings->push_back(absl::StrCat("constant '", instr->name(),
                                         "' has an elided literal {...}: evaluated as zeros"));
      }
    }
  }
}

// Evaluates the entry of `program` on each of n * r devices (one thread each when several,
// meeting at collectives through *coord) on result->inputs, filling result->outputs and
// ->outfeeds. A device's error, or a thread that cannot start, fails *coord.
void RunDevices(const HloModule& module, const internal::Program& program, int64_t n, int64_t r,
                internal::Coordinator* coord, EvalResult* result) {
  const HloComputation* entry = module.entry();
  const int64_t devices = n * r;
  auto run_device = [&](int64_t d) {
    internal::DeviceEvaluator ev(program, coord, d, n, r);
    absl::StatusOr<ValuePtr> out = absl::UnknownError("not run");
    try {
      out = ev.EvalComputation(entry, result->inputs.per_device[static_cast<size_t>(d)]);
    } catch (const std::exception& e) {  // std::bad_alloc, std::length_error: refuse, not abort
      out = absl::ResourceExhaustedError(absl::StrCat("evaluating module '", module.name(),
                                                      "' on device ", d, " failed: ", e.what()));
    }
    if (!out.ok()) {
      coord->Fail(d, out.status());
      return;
    }
    FlattenLeaves(*out, &result->outputs[static_cast<size_t>(d)]);
    result->outfeeds[static_cast<size_t>(d)] = ev.TakeOutfeeds();
    coord->Finish(d);
  };
  if (devices == 1) {
    run_device(0);
  } else {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(devices));
    for (int64_t d = 0; d < devices; ++d) {
      try {
        threads.emplace_back(run_device, d);
      } catch (const std::system_error& e) {
        // No thread for device d (a process or address-space limit): the devices already running
        // are told to stop at their next collective, and the run fails with the reason.
        coord->Fail(d, absl::ResourceExhaustedError(absl::StrCat(
                           "evaluating module '", module.name(), "': could not start a thread for device ",
                           d, " of ", devices, ": ", e.what())));
        break;
      }
    }
    for (std::thread& t : threads) t.join();
  }
}

}  // namespace

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
  RETURN_IF_ERROR(internal::CheckValueSizes(module));
  // Inputs given as one value for every device (a replicated parameter in the global check)
  // are held once, outside the run.
  const std::vector<bool> shared = SharedGivenInputs(given, devices);
  const int64_t bytes = EstimateMemoryBytes(module, devices, shared);
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
  internal::Program program;
  program.module = &module;
  program.exact_sums = options.exact_sums;
  program.max_while_trips = options.max_while_trips;
  program.seed = options.seed;
  for (const HloComputation* c : module.computations()) {
    program.plans.emplace(c, internal::BuildPlan(c));
    program.simple_binary.emplace(c, internal::SimpleBinary(c));
  }
  EvalResult result;
  result.num_partitions = n;
  result.replica_count = r;
  ASSIGN_OR_RETURN(result.inputs, RunInputs(module, options, given));
  RETURN_IF_ERROR(CheckRunInputs(entry, result.inputs, devices));
  WarnElidedConstants(module, &result.warnings);
  internal::Coordinator coord(n, r);
  result.outputs.assign(static_cast<size_t>(devices), {});
  result.outfeeds.assign(static_cast<size_t>(devices), {});
  RunDevices(module, program, n, r, &coord, &result);
  if (coord.failed()) return coord.failure();
  return result;
}

int64_t StorageBytes(const Shape& s) {
  return internal::CheckedStorageBytes(s).value_or(int64_t{1} << 60);
}

}  // namespace weave::eval
