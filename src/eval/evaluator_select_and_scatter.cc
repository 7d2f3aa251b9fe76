// The evaluator's select-and-scatter (eval/evaluator_internal.h), XLA's SelectAndScatter
// (https://openxla.org/xla/operation_semantics#selectandscatter; the reference evaluator's
// HandleSelectAndScatter): operands (operand, source, init_value), computations {select,
// scatter}, a `window=` over the operand as for reduce-window; the source has the window
// positions' shape. The result, of the operand's shape, starts as init_value everywhere. For each
// source element in row-major order, the window's elements inside the operand (padding is never
// chosen) are visited in row-major window order: the first is chosen, and a later element e
// replaces the chosen c whenever select(c, e) is false. The chosen position then becomes
// scatter(result[chosen], source element): the order of XLA's SelectAndScatterExpander and its
// backends' lowering (XLA's reference evaluator passes the two the other way round; only a
// scatter that is not commutative tells them apart). A window with no element inside the operand
// scatters nothing.
// Errors: operands of other types or shapes than these (the source and init_value of the
// operand's element type, init_value a scalar), a select that does not return pred, or a scatter
// that does not return a scalar of the operand's type.
// Fast paths: a select that is compare(p0, p1) (ops::MatchParamCompare; any direction, IEEE or
// TOTALORDER, compared without building values) and a scatter that is a plain binary op of its
// two parameters (add, max, ...); anything else runs through the interpreter per element.
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"
#include "eval/ops.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalSelectAndScatter(const HloInstruction* instr,
                                                               const std::vector<ValuePtr>& ops) {
  if (ops.size() != 3 || instr->called_computations().size() != 2 || instr->shape().IsTuple()) {
    return InvalidArgumentError("select-and-scatter takes (operand, source, init_value) and {select, scatter}");
  }
  const Value& in = *ops[0];
  const Value& src = *ops[1];
  const size_t rank = in.shape.dims.size();
  if (!in.shape.Compatible(instr->shape()) || src.shape.dims.size() != rank) {
    return InvalidArgumentError("select-and-scatter: the result must have the operand's shape, the source its rank");
  }
  const PrimitiveType t = in.shape.element_type;
  if (src.shape.element_type != t || ops[2]->shape.element_type != t || !ops[2]->shape.IsArray() ||
      ops[2]->size() != 1 || !ops[2]->shape.dims.empty()) {
    return InvalidArgumentError(absl::StrCat(
        "select-and-scatter: the source and init_value must be of the operand's type ", std::string(PrimitiveTypeName(t)),
        ", init_value a scalar"));
  }
  ASSIGN_OR_RETURN(auto w, ParseWindow(*instr, rank));
  for (const WindowDim& wd : w) {
    if (wd.reversal || wd.lhs_dilate != 1 || wd.rhs_dilate != 1 || wd.stride < 1 || wd.size < 1) {
      return InvalidArgumentError("select-and-scatter takes a window without dilation or reversal");
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    const WindowDim& wd = w[d];
    const int64_t padded = in.shape.dims[d] + wd.lo + wd.hi;
    const int64_t positions = padded < wd.size ? 0 : (padded - wd.size) / wd.stride + 1;
    if (src.shape.dims[d] != positions) {
      return InvalidArgumentError(absl::StrCat("select-and-scatter: the source has ", src.shape.dims[d],
                                               " positions in dim ", d, ", the window gives ", positions));
    }
  }
  const HloComputation* select = instr->called_computations()[0];
  const HloComputation* scatter = instr->called_computations()[1];
  // The select's fast form: compare(p0, p1), any direction.
  const std::optional<ops::ParamCompare> fast_select = ops::MatchParamCompare(*select);
  auto simple = program_.simple_binary.find(scatter);
  const bool has_combine = simple != program_.simple_binary.end() && simple->second.has_value();
  const HloOpcode combine = has_combine ? *simple->second : HloOpcode::kAdd;
  Value out = Value::Zeros(instr->shape());
  for (int64_t k = 0; k < out.size(); ++k) {
    if (out.storage() == Storage::kInt) out.SetInt(k, ops[2]->GetInt(0));
    else out.SetDouble(k, ops[2]->GetDouble(0));
  }
  const std::vector<int64_t> is = ops::Strides(in.shape.dims);
  int64_t wcount = 1;
  for (const WindowDim& wd : w) wcount *= wd.size;
  std::vector<int64_t> sidx(rank), widx(rank);
  auto selects = [&](int64_t cur, int64_t cand) -> absl::StatusOr<bool> {
    if (fast_select) {
      return in.storage() == Storage::kInt
                 ? ops::CompareInts(fast_select->dir, in.i[static_cast<size_t>(cur)], in.i[static_cast<size_t>(cand)],
                                    in.shape.element_type == PrimitiveType::U64)
                 : ops::CompareFloats(fast_select->dir, in.GetDouble(cur), in.GetDouble(cand),
                                      fast_select->total_order);
    }
    auto r = CallScalar(select, {ScalarAt(in, cur), ScalarAt(in, cand)});
    if (!r.ok()) return r.status();
    if ((*r)->shape.element_type != PrimitiveType::PRED || (*r)->i.size() != 1) {
      return InvalidArgumentError("select-and-scatter: select must return pred[]");
    }
    return (*r)->i[0] != 0;
  };
  for (int64_t s = 0; s < src.size(); ++s) {
    int64_t rem = s;
    for (size_t d = rank; d-- > 0;) {
      sidx[d] = rem % src.shape.dims[d];
      rem /= src.shape.dims[d];
    }
    int64_t chosen = -1;
    for (int64_t q = 0; q < wcount; ++q) {
      const int64_t flat = WindowSource(w, sidx, q, in.shape.dims, is, &widx);
      if (flat < 0) continue;  // padding is never chosen
      if (chosen < 0) {
        chosen = flat;
        continue;
      }
      ASSIGN_OR_RETURN(auto keep, selects(chosen, flat));
      if (!keep) chosen = flat;
    }
    if (chosen < 0) continue;
    if (has_combine) {
      if (out.storage() == Storage::kInt) {
        out.i[static_cast<size_t>(chosen)] =
            ops::CombineInt(combine, out.i[static_cast<size_t>(chosen)], src.GetInt(s), t);
      } else {
        out.SetDouble(chosen, ops::CombineFloat(combine, out.GetDouble(chosen), src.GetDouble(s),
                                                t));
      }
    } else {
      auto r = CallScalar(scatter, {ScalarAt(out, chosen), ScalarAt(src, s)});
      if (!r.ok()) return r.status();
      if ((*r)->shape.element_type != t || (*r)->size() != 1 || (*r)->shape.IsTuple()) {
        return InvalidArgumentError(absl::StrCat("select-and-scatter: scatter must return ",
                                                 std::string(PrimitiveTypeName(t)), "[]"));
      }
      StoreScalar(**r, &out, chosen);
    }
  }
  return Share(std::move(out));
}

}  // namespace weave::eval::internal
