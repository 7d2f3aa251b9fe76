// Registry of custom-call evaluators for the reference evaluator.
//
// A custom call is evaluated by the function registered for its `custom_call_target`. Built-in
// targets (registered on first use):
//  - "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape": identities (operand 0), which is
//    their meaning on an already partitioned module where the shapes agree; when the result shape
//    differs from the operand shape an error is returned. Likewise "xla.sdy.FuncResultSharding",
//    "xla.sdy.PropagationBarrier", "annotate_device_placement", "MoveToHost", "MoveToDevice".
//  - "AllocateBuffer": XLA's uninitialized buffer of the result shape (no operands); zeros here.
//  - "__cublas$lt$matmul$f8": registered by RegisterFp8GemmCustomCall(), defined in
//    src/eval/fp8_gemm_custom_call.cc (FP8 GEMM owner).
//  - XLA's own targets found in global modules ("LayoutConstraint", "xla.debug.Log",
//    "GetRngSeed", "TopK", "_SPMDInternalOp_RotateRight/MultiSlice/MultiPad/MultiRotate/Wrap"):
//    registered by RegisterXlaCustomCalls(), src/eval/custom_calls_xla.cc, which states each
//    meaning.
//  - XLA's block-scaling calls ("__op$quantize", "__op$dequantize", "__op$block_scaled_dot",
//    "__cudnn$blockScaledDot"): registered by RegisterBlockScaledCustomCalls(),
//    src/eval/block_scaled_custom_calls.cc, as XLA's BlockScalingRewriter expands them.
// Any other target fails with an error naming the target and the instruction.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval {

// Computes the result of `instr` (a custom-call; its shape() is the expected result shape,
// possibly a tuple) from its operand values (in operand order). Must be thread-safe: partitions
// evaluate concurrently. Return errors with the instruction name in the message.
using CustomCallEvaluator = std::function<absl::StatusOr<Value>(
    const HloInstruction& instr, const std::vector<ValuePtr>& operands)>;

// Registers (or replaces) the evaluator for `target`. Thread-safe.
void RegisterCustomCallEvaluator(const std::string& target, CustomCallEvaluator fn);
// The evaluator for `target`, or nullptr if none. Triggers the lazy registration of built-ins
// (including RegisterFp8GemmCustomCall) on first call.
const CustomCallEvaluator* FindCustomCallEvaluator(const std::string& target);

// Defined by src/eval/fp8_gemm_custom_call.cc: registers "__cublas$lt$matmul$f8" via
// RegisterCustomCallEvaluator. Called once from the registry's lazy initialisation.
void RegisterFp8GemmCustomCall();

// Defined by src/eval/custom_calls_xla.cc: registers the XLA-defined targets listed above.
void RegisterXlaCustomCalls();

// Defined by src/eval/block_scaled_custom_calls.cc: registers the block-scaling targets above.
void RegisterBlockScaledCustomCalls();

}  // namespace weave::eval
