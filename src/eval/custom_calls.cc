// Custom-call evaluator registry and the built-in identity targets.
#include "eval/custom_calls.h"

#include <map>
#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace weave::eval {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, CustomCallEvaluator> fns;
};

Registry& GetRegistry() {
  static Registry* r = new Registry();
  return *r;
}

absl::StatusOr<Value> Identity(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("custom-call ", instr.name(), " (target \"",
                                                   instr.custom_call_target(),
                                                   "\") expects 1 operand, got ", ops.size()));
  }
  if (!ops[0]->shape.Compatible(instr.shape())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call ", instr.name(), " (target \"", instr.custom_call_target(),
        "\") is evaluated as an identity on a partitioned module, but its result shape ",
        instr.shape().ToString(false), " differs from its operand shape ",
        ops[0]->shape.ToString(false)));
  }
  Value v = *ops[0];
  v.shape = instr.shape();
  return v;
}

// "AllocateBuffer": XLA's buffer of the result shape, no operands, contents unspecified (the
// program writes it before reading it); the evaluator gives zeros so that runs are deterministic.
absl::StatusOr<Value> AllocateBuffer(const HloInstruction& instr,
                                     const std::vector<ValuePtr>& ops) {
  if (!ops.empty() || !instr.shape().IsArray()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom-call ", instr.name(),
        " (target \"AllocateBuffer\") takes no operands and returns an array"));
  }
  return Value::Zeros(instr.shape());
}

void RegisterBuiltins() {
  RegisterCustomCallEvaluator("AllocateBuffer", AllocateBuffer);
  RegisterCustomCallEvaluator("Sharding", Identity);
  RegisterCustomCallEvaluator("SPMDFullToShardShape", Identity);
  RegisterCustomCallEvaluator("SPMDShardToFullShape", Identity);
  // Identities of global modules (../shared/specs/spmd-partitioner.md §6): Shardy's root
  // shardings and barriers, host-offloading placement annotations.
  for (const char* t : {"xla.sdy.FuncResultSharding", "xla.sdy.PropagationBarrier",
                        "annotate_device_placement", "MoveToHost", "MoveToDevice"}) {
    RegisterCustomCallEvaluator(t, Identity);
  }
  RegisterFp8GemmCustomCall();
  RegisterXlaCustomCalls();
  RegisterBlockScaledCustomCalls();
}

}  // namespace

void RegisterCustomCallEvaluator(const std::string& target, CustomCallEvaluator fn) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.fns[target] = std::move(fn);
}

const CustomCallEvaluator* FindCustomCallEvaluator(const std::string& target) {
  static std::once_flag once;
  std::call_once(once, RegisterBuiltins);
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(target);
  return it == r.fns.end() ? nullptr : &it->second;
}

}  // namespace weave::eval
