// The verifier's per-instruction shape checker (analysis/verifier.h), shared by its pieces, one
// per op group:
//   verifier.cc                the dispatch by opcode, the shared checks and error text, and the
//                              module's structure (VerifyModule)
//   verifier_elementwise.cc    constant, iota, partition-id/replica-id, elementwise unary and
//                              binary ops, select, clamp
//   verifier_data_movement.cc  broadcast, reshape, transpose, slice, dynamic-slice,
//                              dynamic-update-slice, pad, concatenate
//   verifier_dot_reduce.cc     dot, convolution, reduce, reduce-window and their reducer
//                              computations
//   verifier_control_flow.cc   while, conditional, call, tuple, get-tuple-element, custom-call
//   verifier_collectives.cc    replica groups, all-gather, reduce-scatter, all-reduce, all-to-all,
//                              collective-permute
//   verifier_async.cc          async-start / -update / -done, output_to_operand_aliasing,
//                              all-gather-start / -done
//   verifier_buffers.cc        buffer shapes b(...): Pin, Unpin, CreateBuffer, aliasing, writers
// Only these files include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/verifier.h"
#include "hlo/ir.h"

namespace weave::verifier_internal {

inline std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("{", absl::StrJoin(v, ","), "}"); }

inline std::string ShapeText(const Shape& s) { return s.ToString(false); }

// Equal dims, where an unbounded dynamic dimension (-1) matches anything.
inline bool DimsEqual(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] >= 0 && b[i] >= 0) return false;
  }
  return true;
}

// Compatible shapes (element types and dims, recursively), with dynamic dims as wildcards.
inline bool ShapesMatch(const Shape& a, const Shape& b) {
  if (a.element_type != b.element_type) return false;
  if (a.IsTuple()) {
    if (a.tuple_shapes.size() != b.tuple_shapes.size()) return false;
    for (size_t i = 0; i < a.tuple_shapes.size(); ++i) {
      if (!ShapesMatch(a.tuple_shapes[i], b.tuple_shapes[i])) return false;
    }
    return true;
  }
  return DimsEqual(a.dims, b.dims);
}

inline bool HasDynamicDim(const Shape& s) {
  return std::any_of(s.dims.begin(), s.dims.end(), [](int64_t d) { return d < 0; });
}

// Checks one instruction's result shape against its operands and attributes (XLA's shape
// inference); errors name the instruction and its computation (Err).
// One `{output index}: (operand, {operand index}[, kind])` entry of output_to_operand_aliasing.
struct AliasEntry {
  std::vector<int64_t> output;
  int64_t operand = 0;
  std::vector<int64_t> operand_index;
};
// verifier_async.cc: the entries of an output_to_operand_aliasing value `{...}`; nullopt when the
// text is not of that form.
std::optional<std::vector<AliasEntry>> ReadAliasing(std::string_view text);

// verifier_buffers.cc: XLA's VerifyBuffers over the whole module (a module without buffer shapes
// costs one scan). Errors name the instruction.
absl::Status VerifyModuleBuffers(const HloModule& module);

class Checker {
 public:
  explicit Checker(const HloInstruction& h, const VerifyOptions& options = {}) : h_(h), options_(options) {}
  absl::Status Check();

 private:
  // verifier.cc: which opcodes the generic checks model, and the shared checks.
  static bool IsUnaryModelled(HloOpcode op);
  static bool IsBinaryModelled(HloOpcode op);
  absl::Status Err(const std::string& msg) const;
  // Check's dispatch: the check of an array op (the elementwise, data-movement, dot/convolution
  // and reduce groups, parameters), or nullopt for another opcode.
  std::optional<absl::Status> CheckArrayOp();
  // The check of a control-flow, call, custom-call, collective or async op, or nullopt.
  std::optional<absl::Status> CheckCallOrCollectiveOp();
  absl::Status OperandCount(int64_t n) const;
  absl::Status ArrayResult() const;
  absl::Status ArrayOperand(int64_t i) const;
  absl::Status ResultIs(const Shape& expected, const std::string& what = "") const;
  const Shape& Op(int64_t i) const { return h_.operand(i)->shape(); }
  // Element types that may stand for each other: equal, or both floating point under
  // allow_mixed_precision.
  bool TypesCompatible(PrimitiveType a, PrimitiveType b) const {
    return a == b || (options_.allow_mixed_precision && IsFloatingPoint(a) && IsFloatingPoint(b));
  }
  // ShapesMatch, with element types compared by TypesCompatible.
  bool SameShape(const Shape& a, const Shape& b) const;

  // verifier_elementwise.cc
  absl::Status Constant();
  absl::Status Iota();
  absl::Status Rng();
  absl::Status IdOp();
  absl::Status Unary();
  absl::Status BitcastConvert();
  absl::Status Binary();
  absl::Status ComparisonType(PrimitiveType operand_type) const;
  absl::Status Select();
  absl::Status RngBitGenerator();
  absl::Status Recv();
  absl::Status CollectiveReduce();
  absl::Status DynamicReshape();
  absl::Status IndexedDims();
  absl::Status Gather();   // after IndexedDims
  absl::Status Scatter();  // after IndexedDims
  absl::Status Scan();
  absl::Status Clamp();
  // infeed: (token) -> (data, token) (XLA's HandleInfeed).
  absl::Status Infeed();
  // outfeed: (data, token) -> token[] (XLA's HandleOutfeed).
  absl::Status Outfeed();

  // verifier_data_movement.cc
  absl::Status Broadcast();
  absl::Status Reshape();
  absl::Status Transpose();
  absl::Status SameElementType(int64_t operand) const;
  absl::Status Slice();
  absl::Status ScalarIndices(int64_t first, int64_t rank) const;
  absl::Status DynamicSlice();
  absl::Status DynamicUpdateSlice();
  absl::Status Pad();
  absl::Status Concatenate();

  // verifier_dot_reduce.cc
  // The batch and contracting dims of a dot or ragged-dot: as many on each side, within its rank,
  // each dim once, of equal sizes on both sides (XLA's ValidateDotDimensionNumbers and
  // CheckDotDimensionConstraints).
  absl::Status DotDimensions(const Shape& lhs, const Shape& rhs) const;
  absl::Status Dot();
  // ragged-dot (XLA's ShapeInference::InferRaggedDotOpShape): lhs_ragged_dims one lhs dim; by
  // its kind (batch, contracting or other) the group sizes [prefix..., G] and rhs_group_dims (one
  // dim of size G, only when the ragged dim is neither), and the result [G if contracting,
  // batch..., lhs free..., rhs free but the group dim...].
  absl::Status RaggedDot();
  absl::Status Convolution();
  // to_apply of reduce/reduce-window/all-reduce/reduce-scatter: (acc..., x...) -> acc scalars.
  // With `input_types`, the element parameters take the inputs' element types (or, floating
  // point, another float type).
  absl::Status Reducer(const std::vector<PrimitiveType>& acc_types,
                       const std::vector<PrimitiveType>& input_types = {}) const;
  absl::Status Reduce();
  absl::Status ReduceWindow();

  // verifier_control_flow.cc
  absl::Status OneParamComputation(const HloComputation* c, const char* role) const;
  absl::Status While();
  absl::Status Conditional();
  absl::Status Call();
  absl::Status Tuple();
  absl::Status GetTupleElement();
  absl::Status CustomCall();
  // The instructions of `group` that have a sharding have the same one (XLA's
  // VerifyConsistentSharding: a while with its body's parameter and root and its condition's
  // parameter; a conditional with its branches' roots).
  absl::Status ConsistentSharding(const std::vector<const HloInstruction*>& group) const;
  // fusion, while, conditional: the called computations run on the caller's execution thread.
  absl::Status CalleesOnCallerThread() const;
  // fusion: the fused computation's parameters are the leading operands, its root the result.
  absl::Status Fusion();
  // copy-start / copy-done (XLA's HloVerifier HandleCopyStart, HandleCopyDone).
  absl::Status AsyncPair();
  // Each native -start with its one -done, each async-start with one async-done.
  absl::Status StartDonePairing() const;
  // The sharding `s` against `shape` and the module's device count (-1: not stated).
  absl::Status ShardingFits(const HloSharding& s, const Shape& shape, int64_t devices) const;
  // map: its computation takes one scalar of each operand's element type and returns a scalar
  // of the result's (XLA's ShapeInference::InferMapShape).
  absl::Status Map();

  // verifier_async.cc
  // async-start / -update / -done: the async shape ((operands...), result, context...) against
  // the wrapped computation, operands bound at the start or by later updates, the done's result,
  // the chain's computation and thread (XLA's ShapeVerifier::CheckAsyncOp).
  absl::Status AsyncOp();
  // Steps of AsyncOp. The async shape's operands and result are prefixes of the chain's
  // computation's parameters and result.
  absl::Status AsyncShapeFitsComputation(const HloComputation& chained) const;
  // The wrapped computation runs on the op's thread, wraps one op on the main thread (an
  // async-start's), and gives an async-done's result.
  absl::Status AsyncWrappedComputation(const HloComputation& wrapped) const;
  // async-start: a sugared reduction's reducer, else the operands are the bound ones; then
  // AliasingConfig.
  absl::Status AsyncStartOperands(bool sugared) const;
  // An -update/-done whose operand is the previous link (not carried through a loop): the same
  // wrapped op, computation and thread as the chain before it.
  absl::Status AsyncChainLink() const;
  // async-done: all operands bound, the result the chain's computation's (or the start's).
  absl::Status AsyncDoneResult(const HloComputation* chained) const;
  // async-update: extends its operand's async value; its extra operands are the next bound ones;
  // then AliasingConfig.
  absl::Status AsyncUpdateOperands() const;
  // output_to_operand_aliasing of fusion, custom-call, async-start and async-update: indices in
  // range and aliased shapes equal (XLA's HandleFusion / HandleCustomCall / CheckAsync*AliasConfig).
  absl::Status AliasingConfig() const;
  // all-gather-start gives (operand, gathered); all-gather-done its gathered part.
  absl::Status AllGatherStartDone();

  // verifier_collectives.cc
  // Replica groups: every id at most once over all groups, groups of one size.
  absl::Status Groups() const;
  // Devices per group, per XLA's group modes (explicit groups, or empty ones with the module's
  // stated counts); 0 when unknown.
  int64_t KnownGroupSize() const;
  // Shapes of the result leaves (one per operand for multi-operand collectives).
  absl::Status PerOperandResults(std::vector<const Shape*>* out) const;
  absl::Status ScatterGather(bool gather);
  absl::Status AllGather() { return ScatterGather(true); }
  absl::Status ReduceScatter();
  absl::Status AllReduce();
  absl::Status AllToAll();
  absl::Status RaggedAllToAll();
  absl::Status CollectivePermute();

  const HloInstruction& h_;
  const VerifyOptions options_;
};

}  // namespace weave::verifier_internal
