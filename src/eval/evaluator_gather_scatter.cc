// The evaluator's gather and scatter (eval/evaluator_internal.h), with XLA's semantics: start
// indices clamped so each slice fits, batching dims, scatter combining with its computation.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

namespace {

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

}  // namespace

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
  for (size_t d = 0; d < orank; ++d) {
    if ((*sizes)[d] < 0 || (*sizes)[d] > operand.shape.dims[d]) {
      return InvalidArgumentError(absl::StrCat("slice size ", (*sizes)[d], " of dim ", d, " does not fit the operand"));
    }
  }
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
      case Storage::kComplex: out.c[static_cast<size_t>(k)] = operand.c[static_cast<size_t>(src)]; break;
      default: return InvalidArgumentError("gather of an unsupported type");
    }
  }
  return out;
}

namespace {

// A scatter's dimension numbers (XLA's ScatterDimensionNumbers) and what its update walk derives
// from them.
struct ScatterDims {
  std::vector<int64_t> window_dims, inserted, to_operand, in_batch, idx_batch;
  int64_t index_vector_dim = 0;
  std::vector<int64_t> scatter_update_dims;  // update dims that are not window dims, in order
  std::vector<int64_t> window_operand_dims;  // operand dims the window dims map to, in order
  std::vector<int64_t> idx_dims;             // indices dims other than index_vector_dim
  std::vector<int64_t> wsize;                // the update window's extent in each operand dim
  std::vector<int64_t> is, os;               // strides of the indices and of the operand
};

// The dimension numbers of scatter `instr` over operand 0, its indices and updates 0;
// InvalidArgument for a missing or malformed attribute or dims that do not match the shapes.
absl::StatusOr<ScatterDims> ParseScatterDims(const HloInstruction& instr, const Value& operand,
                                             const Value& indices, const Value& updates) {
  ScatterDims sd;
  ASSIGN_OR_RETURN(sd.window_dims, IntListAttr(instr, "update_window_dims", true));
  ASSIGN_OR_RETURN(sd.inserted, IntListAttr(instr, "inserted_window_dims", false));
  ASSIGN_OR_RETURN(sd.to_operand, IntListAttr(instr, "scatter_dims_to_operand_dims", true));
  ASSIGN_OR_RETURN(std::vector<int64_t> ivd, IntListAttr(instr, "index_vector_dim", true));
  ASSIGN_OR_RETURN(sd.in_batch, IntListAttr(instr, "input_batching_dims", false));
  ASSIGN_OR_RETURN(sd.idx_batch, IntListAttr(instr, "scatter_indices_batching_dims", false));
  if (ivd.size() != 1) return InvalidArgumentError("bad index_vector_dim");
  sd.index_vector_dim = ivd[0];
  const size_t orank = operand.shape.dims.size(), urank = updates.shape.dims.size();
  const size_t irank = indices.shape.dims.size();
  std::vector<bool> is_window(urank, false);
  for (int64_t d : sd.window_dims) is_window.at(static_cast<size_t>(d)) = true;
  for (size_t d = 0; d < urank; ++d) {
    if (!is_window[d]) sd.scatter_update_dims.push_back(static_cast<int64_t>(d));
  }
  std::vector<bool> skip(orank, false);
  for (int64_t d : sd.inserted) skip.at(static_cast<size_t>(d)) = true;
  for (int64_t d : sd.in_batch) skip.at(static_cast<size_t>(d)) = true;
  for (size_t d = 0; d < orank; ++d) {
    if (!skip[d]) sd.window_operand_dims.push_back(static_cast<int64_t>(d));
  }
  if (sd.window_operand_dims.size() != sd.window_dims.size()) {
    return InvalidArgumentError("update_window_dims do not match the operand's window dims");
  }
  for (size_t d = 0; d < irank; ++d) {
    if (static_cast<int64_t>(d) != sd.index_vector_dim) {
      sd.idx_dims.push_back(static_cast<int64_t>(d));
    }
  }
  if (sd.idx_dims.size() != sd.scatter_update_dims.size()) {
    return InvalidArgumentError("scatter dims do not match the indices");
  }
  sd.wsize.assign(orank, 1);
  for (size_t j = 0; j < sd.window_operand_dims.size(); ++j) {
    sd.wsize[static_cast<size_t>(sd.window_operand_dims[j])] =
        updates.shape.dims[static_cast<size_t>(sd.window_dims[j])];
  }
  sd.is = ops::Strides(indices.shape.dims);
  sd.os = ops::Strides(operand.shape.dims);
  return sd;
}

// The scatter's results before any update: a copy of each operand with its result's shape.
// InvalidArgument when a variadic scatter does not return a tuple of `count` arrays, or a result or
// an updates array differs from its operand's type (or the result from its dims).
absl::StatusOr<std::vector<Value>> ScatterResults(const HloInstruction& instr,
                                                  const std::vector<ValuePtr>& ops, size_t count) {
  if (count > 1 && (!instr.shape().IsTuple() || instr.shape().tuple_shapes.size() != count)) {
    return InvalidArgumentError(absl::StrCat("a scatter of ", count, " operands returns a tuple of ", count,
                                             " arrays, not ", instr.shape().ToString(false)));
  }
  std::vector<Value> outs;
  for (size_t j = 0; j < count; ++j) {
    const Shape& rs = count == 1 ? instr.shape() : instr.shape().tuple_shapes[j];
    const PrimitiveType tj = ops[j]->shape.element_type;
    if (!rs.IsArray() || rs.element_type != tj || rs.dims != ops[j]->shape.dims ||
        ops[count + 1 + j]->shape.element_type != tj) {
      return InvalidArgumentError(absl::StrCat("scatter result ", j, " (", rs.ToString(false),
                                               ") and updates ", j, " must have operand ", j, "'s type and shape ",
                                               ops[j]->shape.ToString(false)));
    }
    outs.push_back(*ops[j]);
    outs.back().shape = rs;
  }
  return outs;
}

// The flat operand index *dst that the update element at index `uidx` goes to (its start read
// from the indices into `start`, scratch of the operand's rank); false when its update window
// does not fit the operand (XLA's evaluator skips it).
bool ScatterTarget(const ScatterDims& sd, const Value& operand, const Value& indices,
                   const std::vector<int64_t>& uidx, std::vector<int64_t>* start, int64_t* dst) {
  const size_t orank = operand.shape.dims.size();
  const size_t irank = indices.shape.dims.size();
  int64_t ibase = 0;
  for (size_t j = 0; j < sd.scatter_update_dims.size(); ++j) {
    ibase += uidx[static_cast<size_t>(sd.scatter_update_dims[j])] *
             sd.is[static_cast<size_t>(sd.idx_dims[j])];
  }
  std::fill(start->begin(), start->end(), 0);
  for (size_t j = 0; j < sd.to_operand.size(); ++j) {
    int64_t flat = ibase;
    if (sd.index_vector_dim < static_cast<int64_t>(irank)) {
      flat += static_cast<int64_t>(j) * sd.is[static_cast<size_t>(sd.index_vector_dim)];
    }
    start->at(static_cast<size_t>(sd.to_operand[j])) = indices.GetInt(flat);
  }
  for (size_t j = 0; j < sd.in_batch.size() && j < sd.idx_batch.size(); ++j) {
    for (size_t q = 0; q < sd.idx_dims.size(); ++q) {
      if (sd.idx_dims[q] == sd.idx_batch[j]) {
        (*start)[static_cast<size_t>(sd.in_batch[j])] =
            uidx[static_cast<size_t>(sd.scatter_update_dims[q])];
      }
    }
  }
  bool fits = true;
  *dst = 0;
  for (size_t d = 0; d < orank; ++d) {
    if ((*start)[d] < 0 || (*start)[d] + sd.wsize[d] > operand.shape.dims[d]) fits = false;
    *dst += (*start)[d] * sd.os[d];
  }
  if (!fits) return false;
  for (size_t j = 0; j < sd.window_operand_dims.size(); ++j) {
    *dst += uidx[static_cast<size_t>(sd.window_dims[j])] *
            sd.os[static_cast<size_t>(sd.window_operand_dims[j])];
  }
  return true;
}

}  // namespace

// XLA scatter (one operand): every update element goes to operand position start + window index,
// combined with the current value by `to_apply`; update windows that do not fit the operand are
// skipped (as XLA's evaluator does).
absl::StatusOr<Value> DeviceEvaluator::Scatter(const HloInstruction& instr,
                                               const std::vector<ValuePtr>& ops) {
  // Variadic scatter (XLA: N operands, the indices, N updates; the combiner takes the N current
  // values then the N updates and returns N values as a tuple): the indexing follows operand 0
  // and updates 0, whose shapes the others share.
  if (ops.size() < 3 || ops.size() % 2 == 0) {
    return InvalidArgumentError("scatter takes N operands, the indices and N updates");
  }
  const size_t count = (ops.size() - 1) / 2;
  for (size_t j = 1; j < count; ++j) {
    if (!ops[j]->shape.IsArray() || ops[j]->shape.dims != ops[0]->shape.dims ||
        ops[count + 1 + j]->shape.dims != ops[count + 1]->shape.dims) {
      return InvalidArgumentError("a variadic scatter's operands (and its updates) must share their dims");
    }
  }
  const Value& operand = *ops[0];
  const Value& indices = *ops[count];
  const Value& updates = *ops[count + 1];
  ASSIGN_OR_RETURN(const ScatterDims sd, ParseScatterDims(instr, operand, indices, updates));
  ASSIGN_OR_RETURN(std::vector<Value> outs, ScatterResults(instr, ops, count));
  const size_t orank = operand.shape.dims.size(), urank = updates.shape.dims.size();
  Value& out = outs[0];
  const HloComputation* c = instr.to_apply();
  auto simple = program_.simple_binary.find(c);
  const bool fast = count == 1 && simple != program_.simple_binary.end() && simple->second.has_value();
  const PrimitiveType t = operand.shape.element_type;
  const int64_t n = updates.shape.ElementCount();
  std::vector<int64_t> uidx(urank), start(orank);
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k;
    for (size_t d = urank; d-- > 0;) {
      uidx[d] = rem % updates.shape.dims[d];
      rem /= updates.shape.dims[d];
    }
    int64_t dst;
    if (!ScatterTarget(sd, operand, indices, uidx, &start, &dst)) continue;
    if (fast) {
      if (out.storage() == Storage::kInt) {
        out.i[static_cast<size_t>(dst)] = ops::CombineInt(*simple->second, out.i[static_cast<size_t>(dst)],
                                                          updates.i[static_cast<size_t>(k)], t);
      } else {
        out.SetDouble(dst, ops::CombineFloat(*simple->second, out.GetDouble(dst), updates.GetDouble(k), t));
      }
    } else if (count == 1) {
      auto r = CallScalar(c, {ScalarAt(out, dst), ScalarAt(updates, k)});
      if (!r.ok()) return r.status();
      if ((*r)->shape.IsTuple() || (*r)->size() != 1 || (*r)->shape.element_type != out.shape.element_type) {
        return InvalidArgumentError(absl::StrCat("the scatter's combiner returns ", (*r)->shape.ToString(false),
                                                 ", not a scalar of the operand's type"));
      }
      StoreScalar(**r, &out, dst);
    } else {
      std::vector<ValuePtr> args;
      for (size_t j = 0; j < count; ++j) args.push_back(ScalarAt(outs[j], dst));
      for (size_t j = 0; j < count; ++j) args.push_back(ScalarAt(*ops[count + 1 + j], k));
      ASSIGN_OR_RETURN(auto r, CallScalar(c, args));
      if (r->elements.size() != count) {
        return InvalidArgumentError(absl::StrCat("the scatter's combiner returns ", r->elements.size(),
                                                 " values for ", count, " operands"));
      }
      for (size_t j = 0; j < count; ++j) {
        const Value& e = *r->elements[j];
        if (e.shape.IsTuple() || e.size() != 1 || e.shape.element_type != outs[j].shape.element_type) {
          return InvalidArgumentError(absl::StrCat("the scatter's combiner returns ", e.shape.ToString(false),
                                                   " as value ", j, ", not a scalar of operand ", j, "'s type"));
        }
      }
      for (size_t j = 0; j < count; ++j) StoreScalar(*r->elements[j], &outs[j], dst);
    }
  }
  if (count == 1) return std::move(outs[0]);
  Value tuple;
  tuple.shape = instr.shape();
  for (Value& v : outs) tuple.elements.push_back(Share(std::move(v)));
  return tuple;
}

}  // namespace weave::eval::internal
