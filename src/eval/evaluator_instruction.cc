// The evaluator's instruction dispatch (eval/evaluator_internal.h): one instruction on one device
// from its operands' values: elementwise ops, data movement (slices, pads, concatenation...),
// dots, control flow (call, while, conditional), custom calls, async and -start/-done forms;
// the op families with more to them are in the other evaluator_*.cc files.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/async_chain.h"
#include "eval/custom_calls.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

namespace {

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
// Opcodes the evaluator runs with no operand; any other with none is an error, not a read past
// the operand list.
bool TakesNoOperand(HloOpcode op) {
  switch (op) {
    case HloOpcode::kParameter:
    case HloOpcode::kConstant:
    case HloOpcode::kIota:
    case HloOpcode::kAfterAll:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kCustomCall:
    case HloOpcode::kTuple:
    case HloOpcode::kCall:
    case HloOpcode::kFusion:
    case HloOpcode::kAsyncStart:
    case HloOpcode::kRngGetAndUpdateState:
    case HloOpcode::kRng:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

// The result of an async computation whose operands are not all bound yet (an empty tuple).
ValuePtr PendingResult() {
  Value v;
  v.shape = Shape::Tuple({});
  return Share(std::move(v));
}
bool IsPending(const Value& v) { return v.shape.IsTuple() && v.elements.empty(); }

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

// The start indices of a dynamic-(update-)slice from operand `first` on: one scalar per dim, or
// XLA's older packed form, one rank-1 operand holding them all.
absl::StatusOr<std::vector<int64_t>> StartIndices(const std::vector<ValuePtr>& ops, size_t first) {
  std::vector<int64_t> starts;
  if (ops.size() == first + 1 && ops[first]->shape.rank() == 1) {
    for (int64_t k = 0; k < ops[first]->size(); ++k) starts.push_back(ops[first]->GetInt(k));
    return starts;
  }
  for (size_t k = first; k < ops.size(); ++k) {
    if (ops[k]->size() != 1) return InvalidArgumentError("start indices must be scalars");
    starts.push_back(ops[k]->GetInt(0));
  }
  return starts;
}

// The status with the instruction named first.
absl::Status Fail(const HloInstruction* instr, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(Describe(instr), ": ", s.message()));
}

// The value shared, or the status with the instruction named first.
absl::StatusOr<ValuePtr> Done(const HloInstruction* instr, absl::StatusOr<Value> v) {
  if (!v.ok()) return Fail(instr, v.status());
  return Share(std::move(*v));
}

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::BindLate(const HloInstruction* instr, const std::vector<ValuePtr>& ops) {
  const Value& prev = *ops[0];
  const Shape& shape = instr->shape();
  if (!prev.shape.IsTuple() || prev.elements.size() < 2 || !prev.elements[0]->shape.IsTuple() ||
      !shape.IsTuple() || shape.tuple_shapes.size() < 2) {
    return InvalidArgumentError("async-update: its operand is not an async value ((operands...), result, ...)");
  }
  const HloComputation* c = AsyncChainComputation(*instr);
  if (c == nullptr) return InvalidArgumentError("async-update: no computation in its async chain");
  std::vector<ValuePtr> bound = prev.elements[0]->elements;
  bound.insert(bound.end(), ops.begin() + 1, ops.end());
  if (static_cast<int64_t>(bound.size()) > c->num_parameters()) {
    return InvalidArgumentError(absl::StrCat("async-update binds ", bound.size(), " operands of a computation taking ",
                                             c->num_parameters()));
  }
  ValuePtr result = prev.elements[1];
  if (static_cast<int64_t>(bound.size()) == c->num_parameters() && IsPending(*result)) {
    ASSIGN_OR_RETURN(auto r, EvalComputation(c, bound));
    result = r;
  }
  Value operands;
  operands.shape = shape.tuple_shapes[0];
  operands.elements = std::move(bound);
  Value t;
  t.shape = shape;
  t.elements.push_back(Share(std::move(operands)));
  t.elements.push_back(result);
  for (size_t k = 2; k < shape.tuple_shapes.size(); ++k) {
    t.elements.push_back(k < prev.elements.size() ? prev.elements[k] : Share(Value::Zeros(shape.tuple_shapes[k])));
  }
  return Share(std::move(t));
}

// Values not computed from array data: parameters, constants, ids, tuples, pass-through ops,
// copy-start/done, tokens, dimension sizes.
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalStructural(const HloInstruction* instr,
                                                            const std::vector<ValuePtr>& ops,
                                                            const std::vector<ValuePtr>& args) {
  const HloOpcode op = instr->opcode();
  const Shape& shape = instr->shape();
  switch (instr->opcode()) {
    case HloOpcode::kParameter:
      if (instr->parameter_number < 0 ||
          instr->parameter_number >= static_cast<int64_t>(args.size())) {
        return Fail(instr, InvalidArgumentError("parameter number out of range"));
      }
    {
      const ValuePtr& arg = args[static_cast<size_t>(instr->parameter_number)];
      // A value of another storage (an s32 element into an f32 reducer, f64 into f32: XLA's
      // mixed precision, or a caller the verifier let through) is converted to the parameter's
      // type, never read through the wrong storage.
      if (shape.IsArray() && arg->shape.IsArray() && arg->storage() != StorageFor(shape.element_type)) {
        if (arg->size() != shape.ElementCount()) {
          return Fail(instr, InvalidArgumentError(absl::StrCat("argument ", arg->shape.ToString(false),
                                                        " does not fit the parameter")));
        }
        ASSIGN_OR_RETURN(auto converted, ops::Convert(*arg, shape));
        return Done(instr, std::move(converted));
      }
      if (shape.IsArray() != arg->shape.IsArray()) {
        return Fail(instr, InvalidArgumentError(absl::StrCat("argument ", arg->shape.ToString(false),
                                                      " does not fit the parameter")));
      }
      return arg;
    }
    case HloOpcode::kConstant:
      if (!instr->literal.has_value()) return Fail(instr, InvalidArgumentError("constant without literal"));
      if (shape.IsTuple()) return Fail(instr, InvalidArgumentError("tuple constants are not supported"));
      return Done(instr, ops::FromLiteral(*instr->literal, shape));
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
        return Fail(instr, InvalidArgumentError("tuple index out of range"));
      }
      return t.elements[static_cast<size_t>(instr->tuple_index)];
    }
    case HloOpcode::kAsyncUpdate:
      if (ops.size() > 1) return BindLate(instr, ops);
      [[fallthrough]];
    case HloOpcode::kCopy:
    case HloOpcode::kOptimizationBarrier:
    case HloOpcode::kDomain:
    case HloOpcode::kAddDependency:
      if (ops.empty()) return Fail(instr, InvalidArgumentError("missing operand"));
      return ops[0];
    case HloOpcode::kCopyStart: {
      if (!shape.IsTuple() || shape.tuple_shapes.size() < 2) {
        return Fail(instr, InvalidArgumentError("copy-start must have a tuple shape (destination, source, context)"));
      }
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
      if (instr->dimensions.size() != 1) return Fail(instr, InvalidArgumentError("needs dimensions={d}"));
      v.SetInt(0, ops[0]->shape.dims.at(static_cast<size_t>(instr->dimensions[0])));
      return Share(std::move(v));
    }
    default:
      return std::nullopt;
  }
}

// Compare, convert, select, clamp and data movement (broadcast, transpose, reshape, bitcast,
// slices, pad, concatenate, reverse, iota).
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalArrayOp(const HloInstruction* instr,
                                                         const std::vector<ValuePtr>& ops) {
  const Shape& shape = instr->shape();
  switch (instr->opcode()) {
    case HloOpcode::kCompare:
      return Done(instr, ops::Compare(instr->comparison_direction.value_or(ComparisonDirection::kEq),
                               instr->comparison_type() == "TOTALORDER", *ops[0], *ops[1], shape));
    case HloOpcode::kConvert: return Done(instr, ops::Convert(*ops[0], shape));
    case HloOpcode::kBitcastConvert: return Done(instr, ops::BitcastConvert(*ops[0], shape));
    case HloOpcode::kSelect: return Done(instr, ops::Select(*ops[0], *ops[1], *ops[2], shape));
    case HloOpcode::kClamp: return Done(instr, ops::Clamp(*ops[0], *ops[1], *ops[2], shape));
    case HloOpcode::kBroadcast:
      return Share(ops::Broadcast(*ops[0], shape, instr->dimensions));
    case HloOpcode::kTranspose:
      return Share(ops::Transpose(*ops[0], shape, instr->dimensions));
    case HloOpcode::kReshape:
      if (ops[0]->size() != shape.ElementCount()) return Fail(instr, InvalidArgumentError("reshape changes the element count"));
      return Share(ops::Reshape(*ops[0], shape));
    case HloOpcode::kBitcast:
      if (ops[0]->size() != shape.ElementCount() ||
          ops[0]->shape.element_type != shape.element_type) {
        return Fail(instr, InvalidArgumentError("bitcast must keep the element type and count"));
      }
      return Share(ops::Bitcast(*ops[0], instr->operand(0)->shape(), shape));
    case HloOpcode::kSlice:
      if (instr->slice().size() != ops[0]->shape.dims.size()) {
        return Fail(instr, InvalidArgumentError("slice rank mismatch"));
      }
      return Share(ops::Slice(*ops[0], shape, instr->slice()));
    case HloOpcode::kDynamicSlice: {
      auto starts = StartIndices(ops, 1);
      if (!starts.ok()) return Fail(instr, starts.status());
      if (starts->size() != ops[0]->shape.dims.size()) return Fail(instr, InvalidArgumentError("wrong number of start indices"));
      return Share(ops::DynamicSlice(*ops[0], shape, *starts));
    }
    case HloOpcode::kDynamicUpdateSlice: {
      auto starts = StartIndices(ops, 2);
      if (!starts.ok()) return Fail(instr, starts.status());
      if (starts->size() != ops[0]->shape.dims.size()) return Fail(instr, InvalidArgumentError("wrong number of start indices"));
      if (ops[1]->shape.element_type != ops[0]->shape.element_type) return Fail(instr, InvalidArgumentError("update element type differs"));
      return Share(ops::DynamicUpdateSlice(*ops[0], *ops[1], *starts));
    }
    case HloOpcode::kPad:
      if (instr->padding().size() != ops[0]->shape.dims.size()) {
        return Fail(instr, InvalidArgumentError("padding rank mismatch"));
      }
      return Share(ops::Pad(*ops[0], *ops[1], shape, instr->padding()));
    case HloOpcode::kConcatenate: {
      std::vector<const Value*> parts;
      for (const ValuePtr& v : ops) parts.push_back(v.get());
      if (instr->dimensions.size() != 1) return Fail(instr, InvalidArgumentError("needs dimensions={d}"));
      return Share(ops::Concatenate(parts, shape, instr->dimensions[0]));
    }
    case HloOpcode::kReverse: {
      Value v = ops::Reverse(*ops[0], instr->dimensions);
      return Share(std::move(v));
    }
    case HloOpcode::kIota:
      return Share(ops::Iota(shape, instr->iota_dimension));
    default:
      return std::nullopt;
  }
}

// Dot, triangular-solve, fft, cholesky, ragged-dot, convolution, gather, scatter.
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalLinalgOrIndexing(const HloInstruction* instr,
                                                                  const std::vector<ValuePtr>& ops) {
  const Shape& shape = instr->shape();
  switch (instr->opcode()) {
    case HloOpcode::kDot:
      return Done(instr, ops::Dot(*ops[0], *ops[1], shape, instr->dot_dims()));
    case HloOpcode::kTriangularSolve:
      if (ops.size() != 2) return Fail(instr, InvalidArgumentError("triangular-solve takes a and b"));
      return Done(instr, TriangularSolve(*instr, *ops[0], *ops[1]));
    case HloOpcode::kFft:
      if (ops.size() != 1) return Fail(instr, InvalidArgumentError("fft takes one operand"));
      return Done(instr, Fft(*instr, *ops[0]));
    case HloOpcode::kCholesky:
      if (ops.size() != 1) return Fail(instr, InvalidArgumentError("cholesky takes one operand"));
      return Done(instr, Cholesky(*instr, *ops[0]));
    case HloOpcode::kRaggedDot:
      if (ops.size() != 3) return Fail(instr, InvalidArgumentError("ragged-dot takes lhs, rhs and group sizes"));
      return Done(instr, RaggedDot(*instr, *ops[0], *ops[1], *ops[2]));
    case HloOpcode::kConvolution:
      return Done(instr, Convolution(*instr, *ops[0], *ops[1]));
    case HloOpcode::kGather:
      return Done(instr, Gather(*instr, *ops[0], *ops[1]));
    case HloOpcode::kScatter:
      return Done(instr, Scatter(*instr, ops));
    default:
      return std::nullopt;
  }
}

// Reduce, reduce-window, sort, select-and-scatter, scan, map, rng, infeed, outfeed.
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalReductionOrIo(const HloInstruction* instr,
                                                               const std::vector<ValuePtr>& ops) {
  const Shape& shape = instr->shape();
  switch (instr->opcode()) {
    case HloOpcode::kReduce: {
      auto r = EvalReduce(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kReduceWindow: {
      auto r = EvalReduceWindow(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kOutfeed: {
      // Records what is sent; the result is the token.
      if (ops.empty()) return Fail(instr, InvalidArgumentError("outfeed needs its data operand"));
      outfeeds_.push_back(EvalResult::Outfeed{instr->name(), ops[0]});
      Value token;
      token.shape = shape;
      return Share(std::move(token));
    }
    case HloOpcode::kInfeed: {
      auto r = EvalInfeed(instr);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kRng: {
      auto r = EvalRng(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kSort: {
      auto r = EvalSort(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kSelectAndScatter: {
      auto r = EvalSelectAndScatter(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kScan: {
      auto r = EvalScan(instr, ops);
      if (!r.ok()) return Fail(instr, r.status());
      return r;
    }
    case HloOpcode::kMap: {
      const int64_t n = shape.ElementCount();
      Value out = Value::Zeros(shape);
      for (int64_t k = 0; k < n; ++k) {
        std::vector<ValuePtr> a;
        for (const ValuePtr& v : ops) a.push_back(ScalarAt(*v, k));
        ASSIGN_OR_RETURN(auto r, CallScalar(instr->to_apply(), a));
        StoreScalar(*r, &out, k);
      }
      return Share(std::move(out));
    }
    default:
      return std::nullopt;
  }
}

// Call, fusion, while, conditional, custom-call.
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalControlFlow(const HloInstruction* instr,
                                                             const std::vector<ValuePtr>& ops) {
  switch (instr->opcode()) {
    case HloOpcode::kCall:
    case HloOpcode::kFusion:
      if (instr->called_computations().empty()) return Fail(instr, InvalidArgumentError("no called computation"));
      return EvalComputation(instr->called_computations()[0], ops);
    case HloOpcode::kWhile: {
      ValuePtr state = ops.at(0);
      for (int64_t iter = 0;; ++iter) {
        auto cond = EvalComputation(instr->while_condition(), {state});
        if (!cond.ok()) return cond.status();
        if ((*cond)->storage() != Storage::kInt || (*cond)->i.empty()) {
          return Fail(instr, InvalidArgumentError("while condition must return pred[]"));
        }
        if ((*cond)->i[0] == 0) break;
        if (iter >= program_.max_while_trips) {
          return Fail(instr, absl::ResourceExhaustedError(absl::StrCat(
              "ran ", iter, " iterations without its condition turning false: not evaluated "
              "further (the evaluator's limit)")));
        }
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
        return Fail(instr, InvalidArgumentError("conditional branch/operand count mismatch"));
      }
      return EvalComputation(branches[static_cast<size_t>(index)], {ops[static_cast<size_t>(index + 1)]});
    }
    case HloOpcode::kCustomCall: {
      const CustomCallEvaluator* fn = FindCustomCallEvaluator(instr->custom_call_target());
      if (fn == nullptr) {
        return Fail(instr, InvalidArgumentError(absl::StrCat("custom-call target \"",
                                                      instr->custom_call_target(),
                                                      "\" is not supported by the evaluator")));
      }
      auto v = (*fn)(*instr, ops);
      if (!v.ok()) return Fail(instr, v.status());
      return Share(std::move(*v));
    }
    default:
      return std::nullopt;
  }
}

// The -start/-done forms of collectives, async-start and async-done.
DeviceEvaluator::MaybeValue DeviceEvaluator::EvalAsync(const HloInstruction* instr,
                                                       const std::vector<ValuePtr>& ops) {
  const HloOpcode op = instr->opcode();
  const Shape& shape = instr->shape();
  switch (instr->opcode()) {
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
        return Fail(instr, InvalidArgumentError("async-start must have a tuple shape ((operands), result, ...)"));
      }
      ValuePtr result;
      // `call-start` / `fusion-start` wrap their computation as the plain form does.
      if (!AsyncWrapsComputation(*instr)) {
        auto base = ParseHloOpcode(instr->async_sugar());
        if (!base) return Fail(instr, InvalidArgumentError("unknown async wrapped opcode"));
        if (IsPlainCollective(*base)) {
          ASSIGN_OR_RETURN(auto r, EvalCollective(instr, *base, shape.tuple_shapes[1], ops));
          result = r;
        } else {
          return Fail(instr, InvalidArgumentError(absl::StrCat("async ", instr->async_sugar(),
                                                        " is not supported by the evaluator")));
        }
      } else {
        if (instr->called_computations().empty()) return Fail(instr, InvalidArgumentError("async-start without calls="));
        const HloComputation* c = instr->called_computations()[0];
        if (static_cast<int64_t>(ops.size()) < c->num_parameters()) {
          // Late binding: async-updates bind the other operands; the computation runs when the
          // last is bound (BindLate).
          result = PendingResult();
        } else {
          ASSIGN_OR_RETURN(auto r, EvalComputation(c, ops));
          result = r;
        }
      }
      return WrapStart(shape, ops, result);
    }
    case HloOpcode::kAsyncDone:
      if (!ops[0]->shape.IsTuple() || ops[0]->elements.size() < 2) {
        return Fail(instr, InvalidArgumentError("async-done operand is not an async-start tuple"));
      }
      if (IsPending(*ops[0]->elements[1])) {
        return Fail(instr, InvalidArgumentError("async-done before its computation's operands are all bound"));
      }
      return ops[0]->elements[1];
    default:
      return std::nullopt;
  }
}

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalInstruction(const HloInstruction* instr,
                                                          const std::vector<ValuePtr>& ops,
                                                          const std::vector<ValuePtr>& args) {
  const HloOpcode op = instr->opcode();
  const Shape& shape = instr->shape();
  if (shape.IsArray() && StorageFor(shape.element_type) == Storage::kNone &&
      op != HloOpcode::kBitcastConvert) {
    return Fail(instr, InvalidArgumentError(absl::StrCat("element type ",
                                                  std::string(PrimitiveTypeName(shape.element_type)),
                                                  " is not supported by the evaluator")));
  }
  if (ops.empty() && !TakesNoOperand(op)) {
    return Fail(instr, InvalidArgumentError(absl::StrCat(std::string(HloOpcodeString(op)), " needs an operand")));
  }
  if (IsElementwiseBinary(op) && op != HloOpcode::kCompare && ops.size() == 2) {
    return Done(instr, ops::Binary(op, *ops[0], *ops[1], shape));
  }
  if (MaybeValue v = EvalStructural(instr, ops, args)) return *std::move(v);
  for (auto family : {&DeviceEvaluator::EvalArrayOp, &DeviceEvaluator::EvalLinalgOrIndexing,
                      &DeviceEvaluator::EvalReductionOrIo, &DeviceEvaluator::EvalControlFlow,
                      &DeviceEvaluator::EvalAsync}) {
    if (MaybeValue v = (this->*family)(instr, ops)) return *std::move(v);
  }
  if (IsPlainCollective(op)) return EvalCollective(instr, op, shape, ops);
  if (IsElementwiseUnary(op) || op == HloOpcode::kIsFinite || op == HloOpcode::kNot) {
    return Done(instr, ops::Unary(op, *ops[0], shape));
  }
  return Fail(instr, InvalidArgumentError(absl::StrCat("opcode ", OpName(op),
                                                " is not supported by the evaluator")));
}

}  // namespace weave::eval::internal
