// HLO opcodes with the names XLA's text format uses (`hlo_opcode.h`).
#pragma once

#include <optional>
#include <string_view>

namespace weave {

#define WEAVE_HLO_OPCODES(V)                                   \
  V(kAbs, "abs")                                               \
  V(kAdd, "add")                                               \
  V(kAddDependency, "add-dependency")                          \
  V(kAfterAll, "after-all")                                    \
  V(kAllGather, "all-gather")                                  \
  V(kAllGatherStart, "all-gather-start")                       \
  V(kAllGatherDone, "all-gather-done")                         \
  V(kAllReduce, "all-reduce")                                  \
  V(kAllReduceStart, "all-reduce-start")                       \
  V(kAllReduceDone, "all-reduce-done")                         \
  V(kAllToAll, "all-to-all")                                   \
  V(kAnd, "and")                                               \
  V(kAsyncStart, "async-start")                                \
  V(kAsyncUpdate, "async-update")                              \
  V(kAsyncDone, "async-done")                                  \
  V(kAtan2, "atan2")                                           \
  V(kBatchNormGrad, "batch-norm-grad")                         \
  V(kBatchNormInference, "batch-norm-inference")               \
  V(kBatchNormTraining, "batch-norm-training")                 \
  V(kBitcast, "bitcast")                                       \
  V(kBitcastConvert, "bitcast-convert")                        \
  V(kBroadcast, "broadcast")                                   \
  V(kCall, "call")                                             \
  V(kCbrt, "cbrt")                                             \
  V(kCeil, "ceil")                                             \
  V(kCholesky, "cholesky")                                     \
  V(kClamp, "clamp")                                           \
  V(kClz, "count-leading-zeros")                               \
  V(kCollectiveBroadcast, "collective-broadcast")              \
  V(kCollectivePermute, "collective-permute")                  \
  V(kCollectivePermuteStart, "collective-permute-start")       \
  V(kCollectivePermuteDone, "collective-permute-done")         \
  V(kCompare, "compare")                                       \
  V(kComplex, "complex")                                       \
  V(kConcatenate, "concatenate")                               \
  V(kConditional, "conditional")                               \
  V(kConstant, "constant")                                     \
  V(kConvert, "convert")                                       \
  V(kConvolution, "convolution")                               \
  V(kCopy, "copy")                                             \
  V(kCollectiveReduce, "collective-reduce")                    \
  V(kCopyStart, "copy-start")                                  \
  V(kCopyDone, "copy-done")                                    \
  V(kCos, "cosine")                                            \
  V(kCustomCall, "custom-call")                                \
  V(kDivide, "divide")                                         \
  V(kDomain, "domain")                                         \
  V(kDot, "dot")                                               \
  V(kDynamicReshape, "dynamic-reshape")                        \
  V(kDynamicSlice, "dynamic-slice")                            \
  V(kDynamicUpdateSlice, "dynamic-update-slice")               \
  V(kErf, "erf")                                               \
  V(kExp, "exponential")                                       \
  V(kExpm1, "exponential-minus-one")                           \
  V(kFft, "fft")                                               \
  V(kFloor, "floor")                                           \
  V(kFusion, "fusion")                                         \
  V(kGather, "gather")                                         \
  V(kGetDimensionSize, "get-dimension-size")                   \
  V(kGetTupleElement, "get-tuple-element")                     \
  V(kImag, "imag")                                             \
  V(kInfeed, "infeed")                                         \
  V(kIota, "iota")                                             \
  V(kIsFinite, "is-finite")                                    \
  V(kLog, "log")                                               \
  V(kLog1p, "log-plus-one")                                    \
  V(kLogistic, "logistic")                                     \
  V(kMap, "map")                                               \
  V(kMaximum, "maximum")                                       \
  V(kMinimum, "minimum")                                       \
  V(kMultiply, "multiply")                                     \
  V(kNegate, "negate")                                         \
  V(kNot, "not")                                               \
  V(kOptimizationBarrier, "opt-barrier")                       \
  V(kOr, "or")                                                 \
  V(kOutfeed, "outfeed")                                       \
  V(kPad, "pad")                                               \
  V(kParameter, "parameter")                                   \
  V(kPartitionId, "partition-id")                              \
  V(kPopulationCount, "popcnt")                                \
  V(kPower, "power")                                           \
  V(kRaggedAllToAll, "ragged-all-to-all")                      \
  V(kRaggedDot, "ragged-dot")                                  \
  V(kReal, "real")                                             \
  V(kRecv, "recv")                                             \
  V(kRecvDone, "recv-done")                                    \
  V(kReduce, "reduce")                                         \
  V(kReducePrecision, "reduce-precision")                      \
  V(kReduceScatter, "reduce-scatter")                          \
  V(kReduceWindow, "reduce-window")                            \
  V(kRemainder, "remainder")                                   \
  V(kReplicaId, "replica-id")                                  \
  V(kReshape, "reshape")                                       \
  V(kReverse, "reverse")                                       \
  V(kRng, "rng")                                               \
  V(kRngBitGenerator, "rng-bit-generator")                     \
  V(kRngGetAndUpdateState, "rng-get-and-update-state")         \
  V(kRoundNearestAfz, "round-nearest-afz")                     \
  V(kRoundNearestEven, "round-nearest-even")                   \
  V(kRsqrt, "rsqrt")                                           \
  V(kScan, "scan")                                             \
  V(kScatter, "scatter")                                       \
  V(kSelect, "select")                                         \
  V(kSelectAndScatter, "select-and-scatter")                   \
  V(kSend, "send")                                             \
  V(kSendDone, "send-done")                                    \
  V(kSetDimensionSize, "set-dimension-size")                   \
  V(kShiftLeft, "shift-left")                                  \
  V(kShiftRightArithmetic, "shift-right-arithmetic")           \
  V(kShiftRightLogical, "shift-right-logical")                 \
  V(kSign, "sign")                                             \
  V(kSin, "sine")                                              \
  V(kSlice, "slice")                                           \
  V(kSort, "sort")                                             \
  V(kSqrt, "sqrt")                                             \
  V(kStochasticConvert, "stochastic-convert")                  \
  V(kSubtract, "subtract")                                     \
  V(kTan, "tan")                                               \
  V(kTanh, "tanh")                                             \
  V(kTopK, "topk")                                             \
  V(kTranspose, "transpose")                                   \
  V(kTriangularSolve, "triangular-solve")                      \
  V(kTuple, "tuple")                                           \
  V(kWhile, "while")                                           \
  V(kXor, "xor")

enum class HloOpcode {
#define WEAVE_OPCODE_ENUM(e, s) e,
  WEAVE_HLO_OPCODES(WEAVE_OPCODE_ENUM)
#undef WEAVE_OPCODE_ENUM
};

std::string_view HloOpcodeString(HloOpcode op);
// Parses an opcode name. Besides the names above it accepts `optimization-barrier` and
// `clz`. Sugared async names (`reduce-scatter-start`, `all-to-all-done`, ...) are handled by
// the parser, not here. nullopt if unknown.
std::optional<HloOpcode> ParseHloOpcode(std::string_view name);

bool IsElementwiseUnary(HloOpcode op);   // abs, negate, exp, convert, copy, ... (one operand)
bool IsElementwiseBinary(HloOpcode op);  // add, multiply, compare, ... (two operands)
bool IsElementwise(HloOpcode op);        // unary, binary, select, clamp
// all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, collective-broadcast,
// ragged-all-to-all and their -start forms.
bool IsCollective(HloOpcode op);

}  // namespace weave
