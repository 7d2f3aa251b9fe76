// Shape checks of dot, reduce and reduce-window, and of their reducer computations
// (analysis/verifier_checker.h), after XLA's ShapeInference.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "analysis/verifier_checker.h"
#include "hlo/conv_dims.h"
#include "hlo/dot_dims.h"
#include "hlo/raw_dims_attribute.h"
#include "hlo/window.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {

absl::Status Checker::DotDimensions(const Shape& lhs, const Shape& rhs) const {
  const DotDims& dn = h_.dot_dims();
  if (dn.lhs_batch.size() != dn.rhs_batch.size()) {
    return Err(absl::StrCat("lhs_batch_dims=", Dims(dn.lhs_batch), " and rhs_batch_dims=",
                            Dims(dn.rhs_batch), " have different lengths"));
  }
  if (dn.lhs_contracting.size() != dn.rhs_contracting.size()) {
    return Err(absl::StrCat("lhs_contracting_dims=", Dims(dn.lhs_contracting),
                            " and rhs_contracting_dims=", Dims(dn.rhs_contracting),
                            " have different lengths"));
  }
  auto check_side = [&](const char* side, const Shape& s, const std::vector<int64_t>& batch,
                        const std::vector<int64_t>& contracting) -> absl::Status {
    std::set<int64_t> seen;
    for (const std::vector<int64_t>* v : {&batch, &contracting}) {
      for (int64_t d : *v) {
        if (d < 0 || d >= s.rank()) {
          return Err(absl::StrCat(side, " dimension ", d, " (in ",
                                  v == &batch ? "batch" : "contracting",
                                  " dims) is out of range for ", side, " shape ", ShapeText(s)));
        }
        if (!seen.insert(d).second) {
          return Err(absl::StrCat(side, " dimension ", d,
                                  " appears more than once in the batch and contracting dims"));
        }
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_side("lhs", lhs, dn.lhs_batch, dn.lhs_contracting));
  RETURN_IF_ERROR(check_side("rhs", rhs, dn.rhs_batch, dn.rhs_contracting));
  auto size = [](const Shape& s, int64_t d) { return s.dims[static_cast<size_t>(d)]; };
  for (size_t i = 0; i < dn.lhs_batch.size(); ++i) {
    const int64_t a = size(lhs, dn.lhs_batch[i]), b = size(rhs, dn.rhs_batch[i]);
    if (a != b && a >= 0 && b >= 0) {
      return Err(absl::StrCat("lhs batch dimension ", dn.lhs_batch[i], " has size ", a,
                              " but rhs batch dimension ", dn.rhs_batch[i], " has size ", b));
    }
  }
  for (size_t i = 0; i < dn.lhs_contracting.size(); ++i) {
    const int64_t a = size(lhs, dn.lhs_contracting[i]), b = size(rhs, dn.rhs_contracting[i]);
    if (a != b && a >= 0 && b >= 0) {
      return Err(absl::StrCat("lhs contracting dimension ", dn.lhs_contracting[i], " has size ",
                              a, " but rhs contracting dimension ", dn.rhs_contracting[i],
                              " has size ", b));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::Dot() {
  RETURN_IF_ERROR(OperandCount(2));
  RETURN_IF_ERROR(ArrayOperand(0));
  RETURN_IF_ERROR(ArrayOperand(1));
  RETURN_IF_ERROR(ArrayResult());
  const Shape &lhs = Op(0), &rhs = Op(1);
  const DotDims& dn = h_.dot_dims();
  RETURN_IF_ERROR(DotDimensions(lhs, rhs));
  auto size = [](const Shape& s, int64_t d) { return s.dims[static_cast<size_t>(d)]; };
  std::vector<int64_t> dims;
  for (int64_t d : dn.lhs_batch) dims.push_back(size(lhs, d));
  for (int64_t d : DotFreeDims(lhs.rank(), dn.lhs_batch, dn.lhs_contracting)) {
    dims.push_back(size(lhs, d));
  }
  for (int64_t d : DotFreeDims(rhs.rank(), dn.rhs_batch, dn.rhs_contracting)) {
    dims.push_back(size(rhs, d));
  }
  if (!DimsEqual(h_.shape().dims, dims)) {
    return Err(absl::StrCat("result dims ", Dims(h_.shape().dims),
                            " differ from the dims implied by the operands ", ShapeText(lhs),
                            ", ", ShapeText(rhs), " and dimension numbers: ", Dims(dims),
                            " (batch, lhs free, rhs free)"));
  }
  return absl::OkStatus();
}

absl::Status Checker::RaggedDot() {
  RETURN_IF_ERROR(OperandCount(3));
  for (int64_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
  }
  RETURN_IF_ERROR(ArrayResult());
  const Shape &lhs = Op(0), &rhs = Op(1), &groups = Op(2);
  if (!IsInteger(groups.element_type) || groups.rank() < 1) {
    return Err(absl::StrCat("group sizes ", ShapeText(groups),
                            " must be an integer array of rank >= 1"));
  }
  RETURN_IF_ERROR(DotDimensions(lhs, rhs));
  const DotDims& dn = h_.dot_dims();
  absl::StatusOr<std::vector<int64_t>> ragged = RawDimsAttribute(h_, "lhs_ragged_dims");
  if (!ragged.ok()) return Err(std::string(ragged.status().message()));
  absl::StatusOr<std::vector<int64_t>> group_dims = RawDimsAttribute(h_, "rhs_group_dims");
  if (!group_dims.ok()) return Err(std::string(group_dims.status().message()));
  if (ragged->size() != 1) {
    return Err(absl::StrCat("lhs_ragged_dims=", Dims(*ragged),
                            " must name exactly one lhs dimension"));
  }
  const int64_t r = (*ragged)[0];
  if (r < 0 || r >= lhs.rank()) {
    return Err(absl::StrCat("lhs ragged dimension ", r, " is out of range for lhs shape ",
                            ShapeText(lhs)));
  }
  auto has = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  const bool batch = has(dn.lhs_batch, r), contracting = has(dn.lhs_contracting, r);
  const std::vector<int64_t> lhs_free = DotFreeDims(lhs.rank(), dn.lhs_batch, dn.lhs_contracting);
  // The group sizes' leading dims: the batch dims, then (by the ragged dim's kind) the
  // contracting or free dims before it; in the batch mode only the batch dims before it.
  std::vector<int64_t> prefix_dims;
  if (batch) {
    prefix_dims.assign(dn.lhs_batch.begin(), std::find(dn.lhs_batch.begin(), dn.lhs_batch.end(), r));
  } else {
    prefix_dims = dn.lhs_batch;
    const std::vector<int64_t>& kind = contracting ? dn.lhs_contracting : lhs_free;
    prefix_dims.insert(prefix_dims.end(), kind.begin(), std::find(kind.begin(), kind.end(), r));
  }
  std::vector<int64_t> prefix;
  for (int64_t d : prefix_dims) prefix.push_back(lhs.dims[static_cast<size_t>(d)]);
  if (groups.rank() != 1) {
    const std::vector<int64_t> leading(groups.dims.begin(), groups.dims.end() - 1);
    if (leading != prefix) {
      std::vector<int64_t> want = prefix;
      want.push_back(groups.dims.back());
      return Err(absl::StrCat("group sizes ", ShapeText(groups), " should have dims ", Dims(want),
                              " or be [", groups.dims.back(), "]"));
    }
  }
  const int64_t num_groups = groups.dims.back();
  for (int64_t g : *group_dims) {
    if (g < 0 || g >= rhs.rank() || has(dn.rhs_batch, g) || has(dn.rhs_contracting, g)) {
      return Err(absl::StrCat("rhs group dimension ", g,
                              " must be an rhs dimension that is neither batch nor contracting"));
    }
  }
  if ((batch || contracting) && !group_dims->empty()) {
    return Err("rhs_group_dims must be empty when the lhs ragged dimension is batch or contracting");
  }
  if (!batch && !contracting) {
    if (group_dims->size() != 1) {
      return Err("a ragged non-contracting lhs dimension needs exactly one rhs_group_dims entry");
    }
    const int64_t g_size = rhs.dims[static_cast<size_t>((*group_dims)[0])];
    if (g_size != num_groups) {
      return Err(absl::StrCat("rhs group dimension ", (*group_dims)[0], " has size ", g_size,
                              " but there are ", num_groups, " groups"));
    }
  }
  const std::vector<int64_t> dims =
      RaggedDotResultDims(lhs, rhs, dn, contracting, num_groups, *group_dims);
  if (!DimsEqual(h_.shape().dims, dims)) {
    return Err(absl::StrCat("result dims ", Dims(h_.shape().dims),
                            " differ from the dims implied by the operands ", ShapeText(lhs), ", ",
                            ShapeText(rhs), ", ", ShapeText(groups),
                            " and dimension numbers: ", Dims(dims),
                            contracting ? " (groups, batch, lhs free, rhs free)"
                                        : " (batch, lhs free, rhs free)"));
  }
  return absl::OkStatus();
}

// XLA's ShapeInference::InferConvolveShape: operands and result of one rank (>= 2), dim_labels
// naming each dim once, feature_group_count G and batch_group_count B (not both > 1) dividing
// the lhs features (= G x kernel input features) / batch and the kernel output features, a
// window of the kernel's spatial sizes, and result dims: batch / B, the kernel's output features,
// and per spatial dim floor((dilated input + padding - dilated window) / stride) + 1.
absl::Status Checker::Convolution() {
  RETURN_IF_ERROR(OperandCount(2));
  for (int64_t i = 0; i < 2; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
  }
  RETURN_IF_ERROR(ArrayResult());
  const Shape& l = Op(0);
  const Shape& k = Op(1);
  const Shape& o = h_.shape();
  if (l.rank() < 2 || k.rank() != l.rank() || o.rank() != l.rank()) {
    return Err(absl::StrCat("lhs ", ShapeText(l), ", kernel ", ShapeText(k), " and result ",
                            ShapeText(o), " must have one rank, at least 2"));
  }
  absl::StatusOr<ConvDims> cd = ParseConvDims(h_, l.rank());
  if (!cd.ok()) return Err(std::string(cd.status().message()));
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(h_, cd->lhs.spatial.size());
  if (!w.ok()) return Err(std::string(w.status().message()));
  auto dim = [](const Shape& s, int64_t d) { return s.dims[static_cast<size_t>(d)]; };
  const int64_t g = cd->feature_group_count, b = cd->batch_group_count;
  const int64_t batch = dim(l, cd->lhs.a), features = dim(l, cd->lhs.b);
  const int64_t kin = dim(k, cd->kernel.a), kout = dim(k, cd->kernel.b);
  if (g > 1 && b > 1) return Err("feature_group_count and batch_group_count cannot both exceed 1");
  if (features != kin * g || kout % g != 0 || kout % b != 0 || batch % b != 0) {
    return Err(absl::StrCat("feature_group_count=", g, " batch_group_count=", b, " do not fit lhs ",
                            ShapeText(l), " (", features, " features, batch ", batch, ") and kernel ",
                            ShapeText(k), " (", kin, " input, ", kout, " output features)"));
  }
  std::vector<int64_t> want(static_cast<size_t>(o.rank()), 0);
  want[static_cast<size_t>(cd->out.a)] = batch / b;
  want[static_cast<size_t>(cd->out.b)] = kout;
  for (size_t j = 0; j < w->size(); ++j) {
    const WindowDim& wd = (*w)[j];
    const int64_t ks = dim(k, cd->kernel.spatial[j]);
    if (wd.size != ks || wd.size < 1 || wd.stride < 1 || wd.lhs_dilate < 1 || wd.rhs_dilate < 1) {
      return Err(absl::StrCat("window dim ", j, " (size ", wd.size, ", stride ", wd.stride,
                              ") does not fit the kernel's spatial size ", ks));
    }
    const int64_t in = dim(l, cd->lhs.spatial[j]);
    const int64_t padded = (in > 0 ? (in - 1) * wd.lhs_dilate + 1 : 0) + wd.lo + wd.hi;
    const int64_t extent = (wd.size - 1) * wd.rhs_dilate + 1;
    want[static_cast<size_t>(cd->out.spatial[j])] = padded < extent ? 0 : (padded - extent) / wd.stride + 1;
  }
  return ResultIs(Shape(o.element_type, want), "shape its dims and window give");
}

// to_apply of reduce/reduce-window/all-reduce/reduce-scatter: (acc..., x...) -> acc scalars.
absl::Status Checker::Reducer(const std::vector<PrimitiveType>& acc_types,
                              const std::vector<PrimitiveType>& input_types) const {
  if (h_.called_computations().size() != 1 || h_.called_computations()[0] == nullptr) {
    return Err("needs exactly one to_apply computation");
  }
  const HloComputation* f = h_.called_computations()[0];
  const size_t n = acc_types.size();
  const std::string name = absl::StrCat("to_apply computation '", f->name(), "'");
  if (static_cast<size_t>(f->num_parameters()) != 2 * n) {
    return Err(absl::StrCat(name, " has ", f->num_parameters(), " parameters, expected ", 2 * n));
  }
  for (size_t i = 0; i < 2 * n; ++i) {
    const Shape& p = f->parameter(static_cast<int64_t>(i))->shape();
    if (!p.IsArray() || p.rank() != 0) {
      return Err(absl::StrCat(name, ": parameter ", i, " has shape ", ShapeText(p),
                              ", expected a scalar"));
    }
    if (i < n && !TypesCompatible(p.element_type, acc_types[i])) {
      return Err(absl::StrCat(name, ": parameter ", i, " has type ", ShapeText(p),
                              ", expected ", std::string(PrimitiveTypeName(acc_types[i]))));
    }
    // The inputs' elements pass as the other parameters: the same type, or both floating
    // point (XLA's VerifyReducerShape: compatible ignoring fp precision).
    if (i >= n && i - n < input_types.size()) {
      const PrimitiveType in = input_types[i - n];
      if (p.element_type != in && !(IsFloatingPoint(p.element_type) && IsFloatingPoint(in))) {
        return Err(absl::StrCat(name, ": parameter ", i, " has type ", ShapeText(p), ", but input ", i - n,
                                "'s elements are ", std::string(PrimitiveTypeName(in))));
      }
    }
  }
  if (f->root() == nullptr) return Err(absl::StrCat(name, " has no root"));
  const Shape& r = f->root()->shape();
  Shape expected;
  if (n == 1) {
    expected = Shape::Scalar(acc_types[0]);
  } else {
    std::vector<Shape> elems;
    for (PrimitiveType t : acc_types) elems.push_back(Shape::Scalar(t));
    expected = Shape::Tuple(elems);
  }
  if (!SameShape(r, expected)) {
    return Err(absl::StrCat(name, " returns ", ShapeText(r), ", expected ",
                            ShapeText(expected)));
  }
  return absl::OkStatus();
}

absl::Status Checker::Reduce() {
  const int64_t n2 = h_.operand_count();
  if (n2 < 2 || n2 % 2 != 0) {
    return Err(absl::StrCat("expects inputs followed by as many init values, got ", n2,
                            " operands"));
  }
  const int64_t n = n2 / 2;
  const Shape& in0 = Op(0);
  std::vector<PrimitiveType> acc;
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
    if (!DimsEqual(Op(i).dims, in0.dims)) {
      return Err(absl::StrCat("input ", i, " ", ShapeText(Op(i)), " differs in dims from input 0 ",
                              ShapeText(in0)));
    }
    const Shape& init = Op(n + i);
    if (!init.IsArray() || init.rank() != 0) {
      return Err(absl::StrCat("init value ", i, " ('", h_.operand(n + i)->name(),
                              "') must be a scalar, got ", ShapeText(init)));
    }
    acc.push_back(init.element_type);
  }
  std::set<int64_t> reduced;
  for (int64_t d : h_.dimensions) {
    if (d < 0 || d >= in0.rank()) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), ": ", d,
                              " is out of range for input ", ShapeText(in0)));
    }
    if (!reduced.insert(d).second) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " repeats ", d));
    }
  }
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in0.rank(); ++d) {
    if (!reduced.count(d)) kept.push_back(in0.dims[static_cast<size_t>(d)]);
  }
  Shape expected;
  if (n == 1) {
    expected = Shape(acc[0], kept);
  } else {
    std::vector<Shape> elems;
    for (PrimitiveType t : acc) elems.push_back(Shape(t, kept));
    expected = Shape::Tuple(elems);
  }
  RETURN_IF_ERROR(ResultIs(expected, "reduced shape"));
  std::vector<PrimitiveType> inputs;
  for (int64_t i = 0; i < n; ++i) inputs.push_back(Op(i).element_type);
  return Reducer(acc, inputs);
}

absl::Status Checker::ReduceWindow() {
  const int64_t n2 = h_.operand_count();
  if (n2 < 2 || n2 % 2 != 0) {
    return Err(absl::StrCat("expects inputs followed by as many init values, got ", n2,
                            " operands"));
  }
  const int64_t n = n2 / 2;
  RETURN_IF_ERROR(ArrayOperand(0));
  const Shape& in0 = Op(0);
  std::vector<PrimitiveType> acc;
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
    const Shape& init = Op(n + i);
    if (!init.IsArray() || init.rank() != 0) {
      return Err(absl::StrCat("init value ", i, " must be a scalar, got ", ShapeText(init)));
    }
    acc.push_back(init.element_type);
  }
  // window={size=AxB stride=.. pad=lo_hixlo_hi lhs_dilate=.. rhs_dilate=..}
  const size_t rank = static_cast<size_t>(in0.rank());
  std::vector<int64_t> size(rank, 1), stride(rank, 1), lo(rank, 0), hi(rank, 0),
      base_dil(rank, 1), win_dil(rank, 1);
  if (const std::string* w = h_.GetRawAttribute("window")) {
    std::string text = *w;
    if (!text.empty() && text.front() == '{') text = text.substr(1);
    if (!text.empty() && text.back() == '}') text.pop_back();
    for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
      const size_t eq = field.find('=');
      if (eq == absl::string_view::npos) continue;
      const std::string key(field.substr(0, eq));
      const std::vector<std::string> parts = absl::StrSplit(field.substr(eq + 1), 'x');
      if (parts.size() != rank) {
        return Err(absl::StrCat("window ", key, " has ", parts.size(),
                                " dimensions but the input has rank ", rank));
      }
      for (size_t i = 0; i < rank; ++i) {
        if (key == "pad") {
          const std::vector<std::string> lh = absl::StrSplit(parts[i], '_');
          if (lh.size() != 2 || !absl::SimpleAtoi(lh[0], &lo[i]) ||
              !absl::SimpleAtoi(lh[1], &hi[i])) {
            return Err(absl::StrCat("cannot read window pad '", parts[i], "'"));
          }
          continue;
        }
        std::vector<int64_t>* target = key == "size"          ? &size
                                       : key == "stride"      ? &stride
                                       : key == "lhs_dilate"  ? &base_dil
                                       : key == "rhs_dilate"  ? &win_dil
                                                              : nullptr;
        if (target == nullptr) break;  // rhs_reversal etc.
        if (!absl::SimpleAtoi(parts[i], &(*target)[i]) || (*target)[i] < 1) {
          return Err(absl::StrCat("bad window ", key, " value '", parts[i], "'"));
        }
      }
    }
  } else if (rank != 0) {
    return Err("missing window=");
  }
  std::vector<int64_t> out_dims;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t d = in0.dims[i];
    const int64_t base = d <= 0 ? 0 : (d - 1) * base_dil[i] + 1;
    const int64_t padded = base + lo[i] + hi[i];
    const int64_t win = (size[i] - 1) * win_dil[i] + 1;
    out_dims.push_back(padded < win ? 0 : (padded - win) / stride[i] + 1);
  }
  Shape expected;
  if (n == 1) {
    expected = Shape(acc[0], out_dims);
  } else {
    std::vector<Shape> elems;
    for (PrimitiveType t : acc) elems.push_back(Shape(t, out_dims));
    expected = Shape::Tuple(elems);
  }
  RETURN_IF_ERROR(ResultIs(expected, "windowed shape"));
  std::vector<PrimitiveType> inputs;
  for (size_t i = 0; i < acc.size(); ++i) inputs.push_back(Op(static_cast<int64_t>(i)).element_type);
  return Reducer(acc, inputs);
}

// scan (XLA's kScan): inputs, then num_carries carries; the results are the stacked outputs, then
// the final carries. Every input has the scan dim's length along `dimensions`, every output
// stacks that many steps along it, and each final carry has its carry operand's shape.
absl::Status Checker::Scan() {
  if (h_.dimensions.size() != 1) return Err("needs dimensions={d}, one scan dim");
  int64_t carries = 0;
  if (const std::string* v = h_.GetRawAttribute("num_carries"); v != nullptr && !absl::SimpleAtoi(*v, &carries)) {
    return Err(absl::StrCat("num_carries=", *v, " is not an integer"));
  }
  const int64_t inputs = h_.operand_count() - carries;
  if (carries < 0 || inputs < 1) {
    return Err(absl::StrCat("num_carries=", carries, " leaves no input among its ", h_.operand_count(), " operands"));
  }
  const int64_t d = h_.dimensions[0];
  int64_t length = -1;
  for (int64_t i = 0; i < inputs; ++i) {
    if (!Op(i).IsArray() || d < 0 || d >= Op(i).rank()) {
      return Err(absl::StrCat("input ", i, " ", ShapeText(Op(i)), " has no scan dim ", d));
    }
    const int64_t n = Op(i).dims[static_cast<size_t>(d)];
    if (length >= 0 && n != length) {
      return Err(absl::StrCat("input ", i, " ", ShapeText(Op(i)), " has ", n, " steps along dim ", d, ", input 0 ",
                              length));
    }
    length = n;
  }
  const Shape& s = h_.shape();
  const std::vector<Shape> results = s.IsTuple() ? s.tuple_shapes : std::vector<Shape>{s};
  const int64_t outputs = static_cast<int64_t>(results.size()) - carries;
  if (outputs < 0) return Err(absl::StrCat("result ", ShapeText(s), " has fewer elements than its ", carries, " carries"));
  for (int64_t o = 0; o < outputs; ++o) {
    const Shape& r = results[static_cast<size_t>(o)];
    if (!r.IsArray() || d >= r.rank() || r.dims[static_cast<size_t>(d)] != length) {
      return Err(absl::StrCat("output ", o, " ", ShapeText(r), " does not stack the ", length, " steps along dim ", d));
    }
  }
  for (int64_t c = 0; c < carries; ++c) {
    const Shape& r = results[static_cast<size_t>(outputs + c)];
    if (!SameShape(r, Op(inputs + c))) {
      return Err(absl::StrCat("final carry ", c, " ", ShapeText(r), " is not its carry operand's shape ",
                              ShapeText(Op(inputs + c))));
    }
  }
  return absl::OkStatus();
}

}  // namespace weave::verifier_internal
