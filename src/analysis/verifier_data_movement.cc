// Shape checks of the data-movement ops: broadcast, reshape, transpose, slice, dynamic-slice,
// dynamic-update-slice, pad, concatenate (analysis/verifier_checker.h), after XLA's ShapeInference.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/raw_dims_attribute.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {

absl::Status Checker::Broadcast() {
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  const Shape& in = Op(0);
  const Shape& out = h_.shape();
  if (in.element_type != out.element_type) {
    return Err(absl::StrCat("operand ", ShapeText(in), " and result ", ShapeText(out),
                            " have different element types"));
  }
  if (static_cast<int64_t>(h_.dimensions.size()) != in.rank()) {
    return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " has ", h_.dimensions.size(),
                            " entries but the operand ", ShapeText(in), " has rank ", in.rank()));
  }
  std::set<int64_t> seen;
  for (size_t i = 0; i < h_.dimensions.size(); ++i) {
    const int64_t d = h_.dimensions[i];
    if (d < 0 || d >= out.rank()) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), ": ", d,
                              " is out of range for result ", ShapeText(out)));
    }
    if (!seen.insert(d).second) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " repeats ", d));
    }
    const int64_t a = in.dims[i], b = out.dims[static_cast<size_t>(d)];
    if (a != b && a >= 0 && b >= 0) {
      return Err(absl::StrCat("operand dimension ", i, " has size ", a,
                              " but result dimension ", d, " has size ", b));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::Reshape() {
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  if (Op(0).element_type != h_.shape().element_type) {
    return Err(absl::StrCat("operand ", ShapeText(Op(0)), " and result ", ShapeText(h_.shape()),
                            " have different element types"));
  }
  if (!HasDynamicDim(Op(0)) && !HasDynamicDim(h_.shape()) &&
      Op(0).ElementCount() != h_.shape().ElementCount()) {
    return Err(absl::StrCat("operand ", ShapeText(Op(0)), " has ", Op(0).ElementCount(),
                            " elements but result ", ShapeText(h_.shape()), " has ",
                            h_.shape().ElementCount()));
  }
  return absl::OkStatus();
}

absl::Status Checker::Transpose() {
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  const Shape& in = Op(0);
  const int64_t rank = in.rank();
  std::vector<int64_t> perm = h_.dimensions;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool is_perm = static_cast<int64_t>(perm.size()) == rank;
  for (int64_t i = 0; is_perm && i < rank; ++i) is_perm = sorted[static_cast<size_t>(i)] == i;
  if (!is_perm) {
    return Err(absl::StrCat("dimensions=", Dims(perm), " is not a permutation of the operand's ",
                            rank, " dimensions"));
  }
  Shape expected(in.element_type, {});
  for (int64_t p : perm) expected.dims.push_back(in.dims[static_cast<size_t>(p)]);
  return ResultIs(expected, "transposed operand shape");
}

absl::Status Checker::SameElementType(int64_t operand) const {
  if (Op(operand).element_type != h_.shape().element_type) {
    return Err(absl::StrCat("result ", ShapeText(h_.shape()), " and operand ", operand, " ",
                            ShapeText(Op(operand)), " have different element types"));
  }
  return absl::OkStatus();
}

absl::Status Checker::Slice() {
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  RETURN_IF_ERROR(SameElementType(0));
  const Shape& in = Op(0);
  if (static_cast<int64_t>(h_.slice().size()) != in.rank()) {
    return Err(absl::StrCat("slice has ", h_.slice().size(), " ranges but the operand ",
                            ShapeText(in), " has rank ", in.rank()));
  }
  Shape expected(in.element_type, {});
  for (size_t i = 0; i < h_.slice().size(); ++i) {
    const SliceDim& s = h_.slice()[i];
    if (s.stride < 1 || s.start < 0 || s.start > s.limit ||
        (in.dims[i] >= 0 && s.limit > in.dims[i])) {
      return Err(absl::StrCat("slice range [", s.start, ":", s.limit, ":", s.stride,
                              "] of dimension ", i, " is invalid for operand ", ShapeText(in)));
    }
    expected.dims.push_back((s.limit - s.start + s.stride - 1) / s.stride);
  }
  return ResultIs(expected, "sliced shape");
}

absl::Status Checker::ScalarIndices(int64_t first, int64_t rank) const {
  if (h_.operand_count() == first + 1 && Op(first).IsArray() && Op(first).rank() == 1 &&
      rank != 1) {
    // Old single-vector index form.
    if (!IsInteger(Op(first).element_type) || Op(first).dims[0] != rank) {
      return Err(absl::StrCat("index vector ", ShapeText(Op(first)), " must be an integer vector of ",
                              rank, " elements"));
    }
    return absl::OkStatus();
  }
  if (h_.operand_count() != first + rank) {
    return Err(absl::StrCat("expects ", rank, " start indices (one per dimension), got ",
                            h_.operand_count() - first));
  }
  for (int64_t i = first; i < h_.operand_count(); ++i) {
    if (!Op(i).IsArray() || Op(i).rank() != 0 || !IsInteger(Op(i).element_type)) {
      return Err(absl::StrCat("start index operand ", i, " ('", h_.operand(i)->name(),
                              "') must be an integer scalar, got ", ShapeText(Op(i))));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::DynamicSlice() {
  if (h_.operand_count() < 1) return Err("expects an operand");
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  RETURN_IF_ERROR(SameElementType(0));
  const Shape& in = Op(0);
  RETURN_IF_ERROR(ScalarIndices(1, in.rank()));
  if (static_cast<int64_t>(h_.dynamic_slice_sizes().size()) != in.rank()) {
    return Err(absl::StrCat("dynamic_slice_sizes=", Dims(h_.dynamic_slice_sizes()), " has ",
                            h_.dynamic_slice_sizes().size(), " entries but the operand ",
                            ShapeText(in), " has rank ", in.rank()));
  }
  for (size_t i = 0; i < h_.dynamic_slice_sizes().size(); ++i) {
    const int64_t s = h_.dynamic_slice_sizes()[i];
    if (s < 0 || (in.dims[i] >= 0 && s > in.dims[i])) {
      return Err(absl::StrCat("dynamic_slice_sizes=", Dims(h_.dynamic_slice_sizes()),
                              ": size ", s, " of dimension ", i, " exceeds operand ",
                              ShapeText(in)));
    }
  }
  return ResultIs(Shape(in.element_type, h_.dynamic_slice_sizes()), "slice shape");
}

absl::Status Checker::DynamicUpdateSlice() {
  if (h_.operand_count() < 2) return Err("expects an operand and an update");
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayOperand(1));
  const Shape &in = Op(0), &upd = Op(1);
  if (upd.rank() != in.rank()) {
    return Err(absl::StrCat("update ", ShapeText(upd), " and operand ", ShapeText(in),
                            " have different ranks"));
  }
  if (upd.element_type != in.element_type) {
    return Err(absl::StrCat("update ", ShapeText(upd), " and operand ", ShapeText(in),
                            " have different element types"));
  }
  for (int64_t i = 0; i < in.rank(); ++i) {
    const int64_t u = upd.dims[static_cast<size_t>(i)], o = in.dims[static_cast<size_t>(i)];
    if (u >= 0 && o >= 0 && u > o) {
      return Err(absl::StrCat("update ", ShapeText(upd), " is larger than operand ",
                              ShapeText(in), " in dimension ", i));
    }
  }
  RETURN_IF_ERROR(ScalarIndices(2, in.rank()));
  return ResultIs(in, "operand shape");
}

absl::Status Checker::Pad() {
  RETURN_IF_ERROR(OperandCount(2));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayResult());
  const Shape &in = Op(0), &pv = Op(1);
  if (!pv.IsArray() || pv.rank() != 0 || pv.element_type != in.element_type) {
    return Err(absl::StrCat("padding value ", ShapeText(pv), " must be a scalar of type ",
                            std::string(PrimitiveTypeName(in.element_type))));
  }
  if (static_cast<int64_t>(h_.padding().size()) != in.rank()) {
    return Err(absl::StrCat("padding has ", h_.padding().size(), " dimensions but the operand ",
                            ShapeText(in), " has rank ", in.rank()));
  }
  Shape expected(in.element_type, {});
  for (size_t i = 0; i < h_.padding().size(); ++i) {
    const PadDim& p = h_.padding()[i];
    const int64_t d = in.dims[i];
    if (p.interior < 0) return Err(absl::StrCat("negative interior padding in dimension ", i));
    const int64_t out = d + p.lo + p.hi + std::max<int64_t>(d - 1, 0) * p.interior;
    if (out < 0) return Err(absl::StrCat("padding makes dimension ", i, " negative"));
    expected.dims.push_back(out);
  }
  return ResultIs(expected, "padded shape");
}

absl::Status Checker::Concatenate() {
  if (h_.operand_count() < 1) return Err("expects at least one operand");
  RETURN_IF_ERROR(ArrayResult());
  if (h_.dimensions.size() != 1) {
    return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
  }
  const int64_t d = h_.dimensions[0];
  const Shape& first = Op(0);
  for (int64_t i = 0; i < h_.operand_count(); ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
  }
  if (d < 0 || d >= first.rank()) {
    return Err(absl::StrCat("dimension ", d, " is out of range for ", ShapeText(first)));
  }
  Shape expected = Shape(first.element_type, first.dims);
  for (int64_t i = 1; i < h_.operand_count(); ++i) {
    const Shape& s = Op(i);
    if (s.rank() != first.rank() || s.element_type != first.element_type) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(s), " does not match operand 0 ",
                              ShapeText(first), " in rank or element type"));
    }
    for (int64_t k = 0; k < s.rank(); ++k) {
      const size_t kk = static_cast<size_t>(k);
      if (k == d) {
        expected.dims[kk] += s.dims[kk];
      } else if (s.dims[kk] != first.dims[kk]) {
        return Err(absl::StrCat("operand ", i, " ", ShapeText(s), " differs from operand 0 ",
                                ShapeText(first), " in dimension ", k,
                                " (only dimension ", d, " may differ)"));
      }
    }
  }
  return ResultIs(expected, "concatenated shape");
}

// dynamic-reshape(operand, sizes...): one scalar size per result dim, the element type kept
// (XLA's InferDynamicReshapeShape; the sizes are only known at run time).
absl::Status Checker::DynamicReshape() {
  if (h_.operand_count() < 1) return Err("needs an operand (the array to reshape)");
  RETURN_IF_ERROR(ArrayOperand(0));
  if (h_.operand_count() != 1 + h_.shape().rank()) {
    return Err(absl::StrCat("takes one size operand per result dim: ", h_.shape().rank(), " for ",
                            ShapeText(h_.shape()), ", got ", h_.operand_count() - 1));
  }
  for (int64_t i = 1; i < h_.operand_count(); ++i) {
    if (!Op(i).IsArray() || Op(i).rank() != 0 || !IsInteger(Op(i).element_type)) {
      return Err(absl::StrCat("size operand ", i, " ", ShapeText(Op(i)), " is not an integer scalar"));
    }
  }
  if (Op(0).element_type != h_.shape().element_type) {
    return Err(absl::StrCat("result ", ShapeText(h_.shape()), " changes the element type of ", ShapeText(Op(0))));
  }
  // The bounds hold the same number of elements (a dynamic dim counts at its bound).
  if (Op(0).ElementCount() != h_.shape().ElementCount()) {
    return Err(absl::StrCat("result ", ShapeText(h_.shape()), " holds ", h_.shape().ElementCount(),
                            " elements at its bounds, the operand ", ShapeText(Op(0)), " ", Op(0).ElementCount()));
  }
  return absl::OkStatus();
}

namespace {

// Reads each `{d,...}` attribute named in `lists` into its vector (absent: empty); the first
// malformed one's message, or "".
std::string ReadDimLists(const HloInstruction& h,
                         std::initializer_list<std::pair<const char*, std::vector<int64_t>*>> lists) {
  for (auto [key, out] : lists) {
    absl::StatusOr<std::vector<int64_t>> v = RawDimsAttribute(h, key);
    if (!v.ok()) return std::string(v.status().message());
    *out = *std::move(v);
  }
  return "";
}

// A gather's or scatter's index_vector_dim (in [0, rank of `indices`]) and its index vector's
// length (1 for the implicit trailing dim), which must equal `map`'s (the attribute `map_key`).
std::string ReadIndexVector(const HloInstruction& h, const Shape& indices, const std::vector<int64_t>& map,
                            const char* map_key, int64_t* ivd) {
  const std::string* text = h.GetRawAttribute("index_vector_dim");
  if (text == nullptr || !absl::SimpleAtoi(*text, ivd)) return "needs index_vector_dim=N";
  if (*ivd < 0 || *ivd > indices.rank()) {
    return absl::StrCat("index_vector_dim=", *ivd, " is out of range for the start indices ", ShapeText(indices));
  }
  const int64_t vector = *ivd < indices.rank() ? indices.dims[static_cast<size_t>(*ivd)] : 1;
  if (vector != static_cast<int64_t>(map.size())) {
    return absl::StrCat(map_key, " has ", map.size(), " entries, but the index vector has ", vector);
  }
  return "";
}

// Marks the dims `a` and then `b` of a rank-`rank` operand in `mask`; false when one is out of
// range or named twice.
bool MarkDistinctDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t rank,
                      std::vector<bool>* mask) {
  mask->assign(static_cast<size_t>(rank), false);
  for (const std::vector<int64_t>* dims : {&a, &b}) {
    for (int64_t d : *dims) {
      if (d < 0 || d >= rank || (*mask)[static_cast<size_t>(d)]) return false;
      (*mask)[static_cast<size_t>(d)] = true;
    }
  }
  return true;
}

}  // namespace

// gather: XLA's ShapeInference::InferGatherShape. The slice sizes fit the operand (collapsed and
// batching dims take 1), start_index_map matches the index vector, and the result is the indices'
// batch dims with the uncollapsed slice sizes at offset_dims.
absl::Status Checker::Gather() {
  if (h_.operand_count() != 2 || !Op(0).IsArray() || !Op(1).IsArray()) {
    return Err("expects an operand and start indices, both arrays");
  }
  const Shape& operand = Op(0);
  const Shape& indices = Op(1);
  if (!IsInteger(indices.element_type)) {
    return Err(absl::StrCat("start indices ", ShapeText(indices), " are not integers"));
  }
  std::vector<int64_t> offset, collapsed, start_map, sizes, op_batch, idx_batch;
  std::string why = ReadDimLists(h_, {{"offset_dims", &offset}, {"collapsed_slice_dims", &collapsed},
                                      {"start_index_map", &start_map}, {"slice_sizes", &sizes},
                                      {"operand_batching_dims", &op_batch},
                                      {"start_indices_batching_dims", &idx_batch}});
  int64_t ivd = 0;
  if (why.empty()) why = ReadIndexVector(h_, indices, start_map, "start_index_map", &ivd);
  if (!why.empty()) return Err(why);
  const int64_t irank = indices.rank(), orank = operand.rank();
  if (static_cast<int64_t>(sizes.size()) != orank) {
    return Err(absl::StrCat("slice_sizes=", Dims(sizes), " has ", sizes.size(), " entries for the operand ",
                            ShapeText(operand)));
  }
  for (int64_t d = 0; d < orank; ++d) {
    const int64_t sz = sizes[static_cast<size_t>(d)];
    if (sz < 0 || sz > operand.dims[static_cast<size_t>(d)]) {
      return Err(absl::StrCat("slice_sizes=", Dims(sizes), ": slice size ", sz, " of dim ", d,
                              " does not fit the operand ", ShapeText(operand)));
    }
  }
  std::vector<bool> not_window;
  if (!MarkDistinctDims(collapsed, op_batch, orank, &not_window)) {
    return Err(absl::StrCat("collapsed_slice_dims=", Dims(collapsed), " and operand_batching_dims=", Dims(op_batch),
                            " must name distinct operand dims"));
  }
  for (int64_t d = 0; d < orank; ++d) {
    if (not_window[static_cast<size_t>(d)] && sizes[static_cast<size_t>(d)] > 1) {
      return Err(absl::StrCat("operand dim ", d, " is collapsed or a batching dim, but its slice size is ",
                              sizes[static_cast<size_t>(d)], " (at most 1)"));
    }
  }
  for (int64_t d : idx_batch) {
    if (d < 0 || d >= irank || d == ivd) {
      return Err(absl::StrCat("start_indices_batching_dims=", Dims(idx_batch), " names a dim that is not a batch "
                              "dim of the start indices ", ShapeText(indices)));
    }
  }
  if (op_batch.size() != idx_batch.size()) {
    return Err("operand_batching_dims and start_indices_batching_dims differ in length");
  }
  std::vector<int64_t> window;  // slice sizes of the window dims, in operand order
  for (int64_t d = 0; d < orank; ++d) {
    if (!not_window[static_cast<size_t>(d)]) window.push_back(sizes[static_cast<size_t>(d)]);
  }
  if (window.size() != offset.size()) {
    return Err(absl::StrCat("offset_dims=", Dims(offset), " has ", offset.size(), " entries, but the slice has ",
                            window.size(), " uncollapsed dims"));
  }
  const int64_t out_rank = static_cast<int64_t>(offset.size()) + irank - (ivd < irank ? 1 : 0);
  std::vector<int64_t> want(static_cast<size_t>(out_rank), -1);
  for (size_t j = 0; j < offset.size(); ++j) {
    const int64_t d = offset[j];
    if (d < 0 || d >= out_rank || (j > 0 && d <= offset[j - 1])) {
      return Err(absl::StrCat("offset_dims=", Dims(offset), " must be increasing dims of the ", out_rank,
                              "-dim result"));
    }
    want[static_cast<size_t>(d)] = window[j];
  }
  size_t next = 0;
  for (int64_t d = 0; d < irank; ++d) {
    if (d == ivd) continue;
    while (next < want.size() && want[next] >= 0) ++next;
    if (next < want.size()) want[next++] = indices.dims[static_cast<size_t>(d)];
  }
  return ResultIs(Shape(operand.element_type, want), "gather shape its operand, indices and slice sizes give");
}

// scatter: XLA's ShapeInference::InferScatterShape. Inputs, start indices and as many updates;
// the index vector as long as scatter_dims_to_operand_dims; the updates' scatter dims are the
// indices' batch dims and their window dims fit the input; the result is the inputs' shape and
// the reducer combines their element types.
absl::Status Checker::Scatter() {
  const int64_t count = h_.operand_count();
  if (count < 3 || count % 2 == 0) {
    return Err(absl::StrCat("expects inputs, start indices and as many updates, got ", count, " operands"));
  }
  const int64_t n = (count - 1) / 2;
  for (int64_t i = 0; i < count; ++i) {
    if (!Op(i).IsArray()) return Err(absl::StrCat("operand ", i, " ", ShapeText(Op(i)), " is not an array"));
  }
  const Shape& operand = Op(0);
  const Shape& indices = Op(n);
  const Shape& updates = Op(n + 1);
  if (!IsInteger(indices.element_type)) {
    return Err(absl::StrCat("start indices ", ShapeText(indices), " are not integers"));
  }
  for (int64_t i = 1; i < n; ++i) {
    if (!DimsEqual(Op(i).dims, operand.dims) || !DimsEqual(Op(n + 1 + i).dims, updates.dims)) {
      return Err("the inputs, and the updates, of a variadic scatter must have the same dims");
    }
  }
  std::vector<int64_t> window_dims, inserted, to_operand, in_batch, idx_batch;
  std::string why = ReadDimLists(h_, {{"update_window_dims", &window_dims}, {"inserted_window_dims", &inserted},
                                      {"scatter_dims_to_operand_dims", &to_operand},
                                      {"input_batching_dims", &in_batch},
                                      {"scatter_indices_batching_dims", &idx_batch}});
  int64_t ivd = 0;
  if (why.empty()) why = ReadIndexVector(h_, indices, to_operand, "scatter_dims_to_operand_dims", &ivd);
  if (!why.empty()) return Err(why);
  const int64_t irank = indices.rank(), orank = operand.rank(), urank = updates.rank();
  std::vector<bool> is_window(static_cast<size_t>(urank), false);
  for (size_t j = 0; j < window_dims.size(); ++j) {
    const int64_t d = window_dims[j];
    if (d < 0 || d >= urank || (j > 0 && d <= window_dims[j - 1])) {
      return Err(absl::StrCat("update_window_dims=", Dims(window_dims), " must be increasing dims of the updates ",
                              ShapeText(updates)));
    }
    is_window[static_cast<size_t>(d)] = true;
  }
  std::vector<bool> not_window;
  if (!MarkDistinctDims(inserted, in_batch, orank, &not_window)) {
    return Err(absl::StrCat("inserted_window_dims=", Dims(inserted), " and input_batching_dims=", Dims(in_batch),
                            " must name distinct input dims"));
  }
  if (static_cast<int64_t>(window_dims.size() + inserted.size() + in_batch.size()) != orank) {
    return Err(absl::StrCat("update_window_dims, inserted_window_dims and input_batching_dims name ",
                            window_dims.size() + inserted.size() + in_batch.size(), " dims, but the input ",
                            ShapeText(operand), " has ", orank));
  }
  if (in_batch.size() != idx_batch.size()) {
    return Err("input_batching_dims and scatter_indices_batching_dims differ in length");
  }
  size_t w = 0;
  for (int64_t d = 0; d < orank; ++d) {
    if (not_window[static_cast<size_t>(d)]) continue;
    const int64_t size = updates.dims[static_cast<size_t>(window_dims[w++])];
    if (size > operand.dims[static_cast<size_t>(d)]) {
      return Err(absl::StrCat("update window dim of size ", size, " does not fit input dim ", d, " of ",
                              ShapeText(operand)));
    }
  }
  std::vector<int64_t> scatter_sizes;  // the updates' non-window dims, in order
  for (int64_t d = 0; d < urank; ++d) {
    if (!is_window[static_cast<size_t>(d)]) scatter_sizes.push_back(updates.dims[static_cast<size_t>(d)]);
  }
  std::vector<int64_t> batch_sizes;  // the indices' dims but the index vector's
  for (int64_t d = 0; d < irank; ++d) {
    if (d != ivd) batch_sizes.push_back(indices.dims[static_cast<size_t>(d)]);
  }
  if (scatter_sizes != batch_sizes) {
    return Err(absl::StrCat("the updates' scatter dims ", Dims(scatter_sizes), " are not the start indices' batch "
                            "dims ", Dims(batch_sizes)));
  }
  std::vector<PrimitiveType> acc, in;
  std::vector<Shape> results;
  for (int64_t i = 0; i < n; ++i) {
    acc.push_back(Op(i).element_type);
    in.push_back(Op(n + 1 + i).element_type);
    results.push_back(Op(i));
  }
  if (absl::Status st = ResultIs(n == 1 ? results[0] : Shape::Tuple(results), "inputs' shape"); !st.ok()) {
    return st;
  }
  return Reducer(acc, in);
}

// scatter / gather: the index-to-operand dim map names operand dims (XLA's
// ValidateScatterDimensionNumbers / ValidateGatherDimensionNumbers).
absl::Status Checker::IndexedDims() {
  const bool scatter = h_.opcode() == HloOpcode::kScatter;
  const char* key = scatter ? "scatter_dims_to_operand_dims" : "start_index_map";
  absl::StatusOr<std::vector<int64_t>> dims = RawDimsAttribute(h_, key);
  if (!dims.ok()) return Err(std::string(dims.status().message()));
  if (h_.operand_count() < 1 || !Op(0).IsArray()) return absl::OkStatus();
  const int64_t rank = Op(0).rank();
  for (int64_t d : *dims) {
    if (d < 0 || d >= rank) {
      return Err(absl::StrCat(key, " names dim ", d, ", out of range for the operand ", ShapeText(Op(0))));
    }
  }
  return absl::OkStatus();
}

}  // namespace weave::verifier_internal
