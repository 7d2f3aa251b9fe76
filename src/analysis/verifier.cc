#include "analysis/verifier.h"

#include <algorithm>
#include <set>
#include <unordered_set>
#include <utility>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "analysis/cost.h"

namespace weave {
namespace {

std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("{", absl::StrJoin(v, ","), "}"); }

std::string ShapeText(const Shape& s) { return s.ToString(false); }

// Equal dims, where an unbounded dynamic dimension (-1) matches anything.
bool DimsEqual(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] >= 0 && b[i] >= 0) return false;
  }
  return true;
}

// Compatible shapes (element types and dims, recursively), with dynamic dims as wildcards.
bool ShapesMatch(const Shape& a, const Shape& b) {
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

bool HasDynamicDim(const Shape& s) {
  return std::any_of(s.dims.begin(), s.dims.end(), [](int64_t d) { return d < 0; });
}

class Checker {
 public:
  explicit Checker(const HloInstruction& h) : h_(h) {}

  absl::Status Check() {
    switch (h_.opcode()) {
      case HloOpcode::kParameter:
      case HloOpcode::kAfterAll:
      case HloOpcode::kAddDependency:
        return absl::OkStatus();
      case HloOpcode::kConstant:
        return Constant();
      case HloOpcode::kIota:
        return Iota();
      case HloOpcode::kPartitionId:
      case HloOpcode::kReplicaId:
        return IdOp();
      case HloOpcode::kBroadcast:
        return Broadcast();
      case HloOpcode::kReshape:
        return Reshape();
      case HloOpcode::kTranspose:
        return Transpose();
      case HloOpcode::kDot:
        return Dot();
      case HloOpcode::kSlice:
        return Slice();
      case HloOpcode::kDynamicSlice:
        return DynamicSlice();
      case HloOpcode::kDynamicUpdateSlice:
        return DynamicUpdateSlice();
      case HloOpcode::kPad:
        return Pad();
      case HloOpcode::kConcatenate:
        return Concatenate();
      case HloOpcode::kReduce:
        return Reduce();
      case HloOpcode::kReduceWindow:
        return ReduceWindow();
      case HloOpcode::kSelect:
        return Select();
      case HloOpcode::kClamp:
        return Clamp();
      case HloOpcode::kWhile:
        return While();
      case HloOpcode::kConditional:
        return Conditional();
      case HloOpcode::kCall:
        return Call();
      case HloOpcode::kTuple:
        return Tuple();
      case HloOpcode::kGetTupleElement:
        return GetTupleElement();
      case HloOpcode::kAllGather:
        return AllGather();
      case HloOpcode::kAllReduce:
        return AllReduce();
      case HloOpcode::kReduceScatter:
        return ReduceScatter();
      case HloOpcode::kAllToAll:
        return AllToAll();
      case HloOpcode::kCollectivePermute:
      case HloOpcode::kCollectivePermuteStart:
        return CollectivePermute();
      case HloOpcode::kCustomCall:
        return CustomCall();
      default:
        break;
    }
    if (IsUnaryModelled(h_.opcode())) return Unary();
    if (IsBinaryModelled(h_.opcode())) return Binary();
    return absl::OkStatus();  // not modelled: checked elsewhere (evaluator, later stages)
  }

 private:
  static bool IsUnaryModelled(HloOpcode op) {
    switch (op) {
      case HloOpcode::kBitcastConvert:
      case HloOpcode::kStochasticConvert:
        return false;
      default:
        return IsElementwiseUnary(op);
    }
  }
  static bool IsBinaryModelled(HloOpcode op) {
    return IsElementwiseBinary(op) && op != HloOpcode::kStochasticConvert;
  }

  absl::Status Err(const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "instruction '", h_.name(), "' in computation '",
        h_.parent() ? h_.parent()->name() : std::string("<none>"), "': ",
        std::string(HloOpcodeString(h_.opcode())), ": ", msg));
  }

  absl::Status OperandCount(int64_t n) const {
    if (h_.operand_count() != n) {
      return Err(absl::StrCat("expects ", n, " operand", n == 1 ? "" : "s", ", got ",
                              h_.operand_count()));
    }
    return absl::OkStatus();
  }

  absl::Status ArrayResult() const {
    if (!h_.shape().IsArray()) {
      return Err(absl::StrCat("result shape ", ShapeText(h_.shape()), " is not an array"));
    }
    return absl::OkStatus();
  }

  absl::Status ArrayOperand(int64_t i) const {
    const Shape& s = h_.operand(i)->shape();
    if (!s.IsArray()) {
      return Err(absl::StrCat("operand ", i, " ('", h_.operand(i)->name(), "') has shape ",
                              ShapeText(s), ", expected an array"));
    }
    return absl::OkStatus();
  }

  absl::Status ResultIs(const Shape& expected, const std::string& what = "") const {
    if (!ShapesMatch(h_.shape(), expected)) {
      return Err(absl::StrCat("result shape ", ShapeText(h_.shape()), " does not match the ",
                              what.empty() ? "expected shape " : what + " ", ShapeText(expected)));
    }
    return absl::OkStatus();
  }

  const Shape& Op(int64_t i) const { return h_.operand(i)->shape(); }

  absl::Status Constant() {
    if (!h_.literal.has_value()) return Err("has no literal");
    const Literal& lit = *h_.literal;
    if (!lit.shape.Compatible(h_.shape()) && !ShapesMatch(lit.shape, h_.shape())) {
      return Err(absl::StrCat("literal shape ", ShapeText(lit.shape), " differs from result ",
                              ShapeText(h_.shape())));
    }
    if (!lit.elided && h_.shape().IsArray() && !HasDynamicDim(h_.shape())) {
      const int64_t n = h_.shape().ElementCount();
      const int64_t have = static_cast<int64_t>(IsComplex(h_.shape().element_type)
                                                    ? lit.f.size() / 2
                                                    : lit.f.size() + lit.i.size());
      if (have != n) {
        return Err(absl::StrCat("literal has ", have, " values but shape ",
                                ShapeText(h_.shape()), " has ", n, " elements"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Iota() {
    if (auto st = OperandCount(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    if (h_.iota_dimension < 0 || h_.iota_dimension >= std::max<int64_t>(h_.shape().rank(), 1)) {
      return Err(absl::StrCat("iota_dimension=", h_.iota_dimension, " is out of range for ",
                              ShapeText(h_.shape())));
    }
    if (h_.shape().rank() == 0) return Err("iota needs a result of rank at least 1");
    return absl::OkStatus();
  }

  absl::Status IdOp() {
    if (auto st = OperandCount(0); !st.ok()) return st;
    if (!ShapesMatch(h_.shape(), Shape::Scalar(PrimitiveType::U32))) {
      return Err(absl::StrCat("result must be u32[], got ", ShapeText(h_.shape())));
    }
    return absl::OkStatus();
  }

  absl::Status Unary() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    if (!DimsEqual(h_.shape().dims, Op(0).dims)) {
      return Err(absl::StrCat("result dims ", Dims(h_.shape().dims), " differ from operand dims ",
                              Dims(Op(0).dims)));
    }
    const HloOpcode op = h_.opcode();
    const PrimitiveType in = Op(0).element_type, out = h_.shape().element_type;
    if (op == HloOpcode::kConvert) return absl::OkStatus();
    if (op == HloOpcode::kIsFinite) {
      if (out != PrimitiveType::PRED) return Err("result must have element type pred");
      return absl::OkStatus();
    }
    if (IsComplex(in) && (op == HloOpcode::kAbs || op == HloOpcode::kReal ||
                          op == HloOpcode::kImag)) {
      return absl::OkStatus();
    }
    if (in != out) {
      return Err(absl::StrCat("result element type ", std::string(PrimitiveTypeName(out)),
                              " differs from operand element type ",
                              std::string(PrimitiveTypeName(in))));
    }
    return absl::OkStatus();
  }

  absl::Status Binary() {
    if (auto st = OperandCount(2); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayOperand(1); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    const Shape &a = Op(0), &b = Op(1);
    if (!DimsEqual(a.dims, b.dims)) {
      return Err(absl::StrCat("operand shapes ", ShapeText(a), " and ", ShapeText(b),
                              " have different dimensions"));
    }
    if (!DimsEqual(h_.shape().dims, a.dims)) {
      return Err(absl::StrCat("result dims ", Dims(h_.shape().dims), " differ from operand dims ",
                              Dims(a.dims)));
    }
    if (a.element_type != b.element_type) {
      return Err(absl::StrCat("operand element types differ: ", ShapeText(a), " vs ",
                              ShapeText(b)));
    }
    const PrimitiveType out = h_.shape().element_type;
    switch (h_.opcode()) {
      case HloOpcode::kCompare:
        if (out != PrimitiveType::PRED) {
          return Err(absl::StrCat("result must be pred, got ", ShapeText(h_.shape())));
        }
        if (!h_.comparison_direction.has_value()) return Err("missing direction=");
        return absl::OkStatus();
      case HloOpcode::kComplex:
        return absl::OkStatus();
      default:
        if (out != a.element_type) {
          return Err(absl::StrCat("result element type ", std::string(PrimitiveTypeName(out)),
                                  " differs from operand element type ",
                                  std::string(PrimitiveTypeName(a.element_type))));
        }
        return absl::OkStatus();
    }
  }

  absl::Status Broadcast() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
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

  absl::Status Reshape() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
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

  absl::Status Transpose() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
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

  absl::Status Dot() {
    if (auto st = OperandCount(2); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayOperand(1); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    const Shape &lhs = Op(0), &rhs = Op(1);
    const DotDims& dn = h_.dot_dims;
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
    if (auto st = check_side("lhs", lhs, dn.lhs_batch, dn.lhs_contracting); !st.ok()) return st;
    if (auto st = check_side("rhs", rhs, dn.rhs_batch, dn.rhs_contracting); !st.ok()) return st;
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
    std::vector<int64_t> dims;
    for (int64_t d : dn.lhs_batch) dims.push_back(size(lhs, d));
    auto free_dims = [&](const Shape& s, const std::vector<int64_t>& batch,
                         const std::vector<int64_t>& contracting) {
      for (int64_t d = 0; d < s.rank(); ++d) {
        if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
            std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
          dims.push_back(size(s, d));
        }
      }
    };
    free_dims(lhs, dn.lhs_batch, dn.lhs_contracting);
    free_dims(rhs, dn.rhs_batch, dn.rhs_contracting);
    if (!DimsEqual(h_.shape().dims, dims)) {
      return Err(absl::StrCat("result dims ", Dims(h_.shape().dims),
                              " differ from the dims implied by the operands ", ShapeText(lhs),
                              ", ", ShapeText(rhs), " and dimension numbers: ", Dims(dims),
                              " (batch, lhs free, rhs free)"));
    }
    return absl::OkStatus();
  }

  absl::Status SameElementType(int64_t operand) const {
    if (Op(operand).element_type != h_.shape().element_type) {
      return Err(absl::StrCat("result ", ShapeText(h_.shape()), " and operand ", operand, " ",
                              ShapeText(Op(operand)), " have different element types"));
    }
    return absl::OkStatus();
  }

  absl::Status Slice() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    if (auto st = SameElementType(0); !st.ok()) return st;
    const Shape& in = Op(0);
    if (static_cast<int64_t>(h_.slice.size()) != in.rank()) {
      return Err(absl::StrCat("slice has ", h_.slice.size(), " ranges but the operand ",
                              ShapeText(in), " has rank ", in.rank()));
    }
    Shape expected(in.element_type, {});
    for (size_t i = 0; i < h_.slice.size(); ++i) {
      const SliceDim& s = h_.slice[i];
      if (s.stride < 1 || s.start < 0 || s.start > s.limit ||
          (in.dims[i] >= 0 && s.limit > in.dims[i])) {
        return Err(absl::StrCat("slice range [", s.start, ":", s.limit, ":", s.stride,
                                "] of dimension ", i, " is invalid for operand ", ShapeText(in)));
      }
      expected.dims.push_back((s.limit - s.start + s.stride - 1) / s.stride);
    }
    return ResultIs(expected, "sliced shape");
  }

  absl::Status ScalarIndices(int64_t first, int64_t rank) const {
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

  absl::Status DynamicSlice() {
    if (h_.operand_count() < 1) return Err("expects an operand");
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    if (auto st = SameElementType(0); !st.ok()) return st;
    const Shape& in = Op(0);
    if (auto st = ScalarIndices(1, in.rank()); !st.ok()) return st;
    if (static_cast<int64_t>(h_.dynamic_slice_sizes.size()) != in.rank()) {
      return Err(absl::StrCat("dynamic_slice_sizes=", Dims(h_.dynamic_slice_sizes), " has ",
                              h_.dynamic_slice_sizes.size(), " entries but the operand ",
                              ShapeText(in), " has rank ", in.rank()));
    }
    for (size_t i = 0; i < h_.dynamic_slice_sizes.size(); ++i) {
      const int64_t s = h_.dynamic_slice_sizes[i];
      if (s < 0 || (in.dims[i] >= 0 && s > in.dims[i])) {
        return Err(absl::StrCat("dynamic_slice_sizes=", Dims(h_.dynamic_slice_sizes),
                                ": size ", s, " of dimension ", i, " exceeds operand ",
                                ShapeText(in)));
      }
    }
    return ResultIs(Shape(in.element_type, h_.dynamic_slice_sizes), "slice shape");
  }

  absl::Status DynamicUpdateSlice() {
    if (h_.operand_count() < 2) return Err("expects an operand and an update");
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayOperand(1); !st.ok()) return st;
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
    if (auto st = ScalarIndices(2, in.rank()); !st.ok()) return st;
    return ResultIs(in, "operand shape");
  }

  absl::Status Pad() {
    if (auto st = OperandCount(2); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    if (auto st = ArrayResult(); !st.ok()) return st;
    const Shape &in = Op(0), &pv = Op(1);
    if (!pv.IsArray() || pv.rank() != 0 || pv.element_type != in.element_type) {
      return Err(absl::StrCat("padding value ", ShapeText(pv), " must be a scalar of type ",
                              std::string(PrimitiveTypeName(in.element_type))));
    }
    if (static_cast<int64_t>(h_.padding.size()) != in.rank()) {
      return Err(absl::StrCat("padding has ", h_.padding.size(), " dimensions but the operand ",
                              ShapeText(in), " has rank ", in.rank()));
    }
    Shape expected(in.element_type, {});
    for (size_t i = 0; i < h_.padding.size(); ++i) {
      const PadDim& p = h_.padding[i];
      const int64_t d = in.dims[i];
      if (p.interior < 0) return Err(absl::StrCat("negative interior padding in dimension ", i));
      const int64_t out = d + p.lo + p.hi + std::max<int64_t>(d - 1, 0) * p.interior;
      if (out < 0) return Err(absl::StrCat("padding makes dimension ", i, " negative"));
      expected.dims.push_back(out);
    }
    return ResultIs(expected, "padded shape");
  }

  absl::Status Concatenate() {
    if (h_.operand_count() < 1) return Err("expects at least one operand");
    if (auto st = ArrayResult(); !st.ok()) return st;
    if (h_.dimensions.size() != 1) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
    }
    const int64_t d = h_.dimensions[0];
    const Shape& first = Op(0);
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      if (auto st = ArrayOperand(i); !st.ok()) return st;
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

  // to_apply of reduce/reduce-window/all-reduce/reduce-scatter: (acc..., x...) -> acc scalars.
  absl::Status Reducer(const std::vector<PrimitiveType>& acc_types) const {
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
      if (i < n && p.element_type != acc_types[i]) {
        return Err(absl::StrCat(name, ": parameter ", i, " has type ", ShapeText(p),
                                ", expected ", std::string(PrimitiveTypeName(acc_types[i]))));
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
    if (!ShapesMatch(r, expected)) {
      return Err(absl::StrCat(name, " returns ", ShapeText(r), ", expected ",
                              ShapeText(expected)));
    }
    return absl::OkStatus();
  }

  absl::Status Reduce() {
    const int64_t n2 = h_.operand_count();
    if (n2 < 2 || n2 % 2 != 0) {
      return Err(absl::StrCat("expects inputs followed by as many init values, got ", n2,
                              " operands"));
    }
    const int64_t n = n2 / 2;
    const Shape& in0 = Op(0);
    std::vector<PrimitiveType> acc;
    for (int64_t i = 0; i < n; ++i) {
      if (auto st = ArrayOperand(i); !st.ok()) return st;
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
    if (auto st = ResultIs(expected, "reduced shape"); !st.ok()) return st;
    return Reducer(acc);
  }

  absl::Status ReduceWindow() {
    const int64_t n2 = h_.operand_count();
    if (n2 < 2 || n2 % 2 != 0) {
      return Err(absl::StrCat("expects inputs followed by as many init values, got ", n2,
                              " operands"));
    }
    const int64_t n = n2 / 2;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    const Shape& in0 = Op(0);
    std::vector<PrimitiveType> acc;
    for (int64_t i = 0; i < n; ++i) {
      if (auto st = ArrayOperand(i); !st.ok()) return st;
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
    if (auto st = ResultIs(expected, "windowed shape"); !st.ok()) return st;
    return Reducer(acc);
  }

  absl::Status Select() {
    if (auto st = OperandCount(3); !st.ok()) return st;
    const Shape &p = Op(0), &t = Op(1), &f = Op(2);
    if (!p.IsArray() || p.element_type != PrimitiveType::PRED) {
      return Err(absl::StrCat("predicate ", ShapeText(p), " must have element type pred"));
    }
    if (!ShapesMatch(t, f)) {
      return Err(absl::StrCat("on_true ", ShapeText(t), " and on_false ", ShapeText(f),
                              " have different shapes"));
    }
    if (t.IsArray() && p.rank() != 0 && !DimsEqual(p.dims, t.dims)) {
      return Err(absl::StrCat("predicate ", ShapeText(p), " must be a scalar or have the dims of ",
                              ShapeText(t)));
    }
    return ResultIs(t, "operand shape");
  }

  absl::Status Clamp() {
    if (auto st = OperandCount(3); !st.ok()) return st;
    for (int64_t i = 0; i < 3; ++i) {
      if (auto st = ArrayOperand(i); !st.ok()) return st;
    }
    const Shape &lo = Op(0), &x = Op(1), &hi = Op(2);
    for (const Shape* b : {&lo, &hi}) {
      if (b->element_type != x.element_type || (b->rank() != 0 && !DimsEqual(b->dims, x.dims))) {
        return Err(absl::StrCat("bound ", ShapeText(*b),
                                " must be a scalar or match the operand ", ShapeText(x)));
      }
    }
    return ResultIs(x, "operand shape");
  }

  absl::Status OneParamComputation(const HloComputation* c, const char* role) const {
    if (c == nullptr) return Err(absl::StrCat("missing ", role, " computation"));
    if (c->num_parameters() != 1) {
      return Err(absl::StrCat(role, " computation '", c->name(), "' has ", c->num_parameters(),
                              " parameters, expected 1"));
    }
    if (c->root() == nullptr) return Err(absl::StrCat(role, " computation '", c->name(), "' has no root"));
    return absl::OkStatus();
  }

  absl::Status While() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (h_.called_computations().size() != 2) return Err("needs condition= and body=");
    const HloComputation* cond = h_.while_condition();
    const HloComputation* body = h_.while_body();
    if (auto st = OneParamComputation(cond, "condition"); !st.ok()) return st;
    if (auto st = OneParamComputation(body, "body"); !st.ok()) return st;
    const Shape& init = Op(0);
    if (!ShapesMatch(cond->root()->shape(), Shape::Scalar(PrimitiveType::PRED))) {
      return Err(absl::StrCat("condition '", cond->name(), "' returns ",
                              ShapeText(cond->root()->shape()), ", expected pred[]"));
    }
    if (!ShapesMatch(cond->parameter(0)->shape(), init)) {
      return Err(absl::StrCat("condition '", cond->name(), "' parameter ",
                              ShapeText(cond->parameter(0)->shape()), " differs from init ",
                              ShapeText(init)));
    }
    if (!ShapesMatch(body->parameter(0)->shape(), init)) {
      return Err(absl::StrCat("body '", body->name(), "' parameter ",
                              ShapeText(body->parameter(0)->shape()), " differs from init ",
                              ShapeText(init)));
    }
    if (!ShapesMatch(body->root()->shape(), init)) {
      return Err(absl::StrCat("body '", body->name(), "' root ", ShapeText(body->root()->shape()),
                              " differs from init ", ShapeText(init)));
    }
    return ResultIs(init, "init shape");
  }

  absl::Status Conditional() {
    const auto& branches = h_.called_computations();
    if (branches.empty()) return Err("has no branch computations");
    if (h_.operand_count() != static_cast<int64_t>(branches.size()) + 1) {
      return Err(absl::StrCat("has ", branches.size(), " branches but ", h_.operand_count(),
                              " operands (expected the selector plus one per branch)"));
    }
    const Shape& sel = Op(0);
    const bool pred_ok = ShapesMatch(sel, Shape::Scalar(PrimitiveType::PRED)) && branches.size() == 2;
    const bool index_ok = ShapesMatch(sel, Shape::Scalar(PrimitiveType::S32));
    if (!pred_ok && !index_ok) {
      return Err(absl::StrCat("selector ", ShapeText(sel),
                              " must be pred[] (two branches) or s32[]"));
    }
    for (size_t b = 0; b < branches.size(); ++b) {
      const HloComputation* c = branches[b];
      if (auto st = OneParamComputation(c, "branch"); !st.ok()) return st;
      const Shape& arg = Op(static_cast<int64_t>(b) + 1);
      if (!ShapesMatch(c->parameter(0)->shape(), arg)) {
        return Err(absl::StrCat("branch ", b, " '", c->name(), "' parameter ",
                                ShapeText(c->parameter(0)->shape()), " differs from operand ",
                                b + 1, " ", ShapeText(arg)));
      }
      if (!ShapesMatch(c->root()->shape(), h_.shape())) {
        return Err(absl::StrCat("branch ", b, " '", c->name(), "' returns ",
                                ShapeText(c->root()->shape()), " but the result is ",
                                ShapeText(h_.shape())));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Call() {
    if (h_.called_computations().size() != 1 || h_.called_computations()[0] == nullptr) {
      return Err("needs one to_apply computation");
    }
    const HloComputation* c = h_.called_computations()[0];
    if (c->num_parameters() != h_.operand_count()) {
      return Err(absl::StrCat("computation '", c->name(), "' has ", c->num_parameters(),
                              " parameters but the call has ", h_.operand_count(), " operands"));
    }
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      if (!ShapesMatch(c->parameter(i)->shape(), Op(i))) {
        return Err(absl::StrCat("operand ", i, " ", ShapeText(Op(i)), " differs from parameter ",
                                i, " of '", c->name(), "' ",
                                ShapeText(c->parameter(i)->shape())));
      }
    }
    if (c->root() == nullptr) return Err(absl::StrCat("computation '", c->name(), "' has no root"));
    return ResultIs(c->root()->shape(), absl::StrCat("root shape of '", c->name(), "'"));
  }

  absl::Status Tuple() {
    std::vector<Shape> elems;
    for (const HloInstruction* o : h_.operands()) elems.push_back(o->shape());
    return ResultIs(Shape::Tuple(elems), "tuple of the operand shapes");
  }

  absl::Status GetTupleElement() {
    if (auto st = OperandCount(1); !st.ok()) return st;
    const Shape& t = Op(0);
    if (!t.IsTuple()) {
      return Err(absl::StrCat("operand '", h_.operand(0)->name(), "' has non-tuple shape ",
                              ShapeText(t)));
    }
    const int64_t n = static_cast<int64_t>(t.tuple_shapes.size());
    if (h_.tuple_index < 0 || h_.tuple_index >= n) {
      return Err(absl::StrCat("index=", h_.tuple_index, " is out of range for operand '",
                              h_.operand(0)->name(), "' with ", n, " elements ", ShapeText(t)));
    }
    return ResultIs(t.tuple_shapes[static_cast<size_t>(h_.tuple_index)], "tuple element shape");
  }

  // Replica groups: every id at most once over all groups, groups of one size.
  absl::Status Groups() const {
    if (!h_.replica_groups.has_value()) return absl::OkStatus();
    std::set<int64_t> seen;
    size_t size = 0;
    for (const auto& g : h_.replica_groups->groups) {
      if (size == 0) size = g.size();
      if (g.size() != size) {
        return Err(absl::StrCat("replica_groups=", h_.replica_groups->ToString(),
                                " has groups of different sizes"));
      }
      for (int64_t id : g) {
        if (id < 0 || !seen.insert(id).second) {
          return Err(absl::StrCat("replica_groups=", h_.replica_groups->ToString(), ": id ", id,
                                  id < 0 ? " is negative" : " appears more than once"));
        }
      }
    }
    return absl::OkStatus();
  }

  // Group size when known from explicit groups, else 0.
  int64_t KnownGroupSize() const {
    if (h_.replica_groups.has_value() && !h_.replica_groups->groups.empty()) {
      return static_cast<int64_t>(h_.replica_groups->groups[0].size());
    }
    return 0;
  }

  // Shapes of the result leaves (one per operand for multi-operand collectives).
  absl::Status PerOperandResults(std::vector<const Shape*>* out) const {
    if (h_.operand_count() == 1 && !h_.shape().IsTuple()) {
      out->push_back(&h_.shape());
      return absl::OkStatus();
    }
    if (!h_.shape().IsTuple() ||
        static_cast<int64_t>(h_.shape().tuple_shapes.size()) != h_.operand_count()) {
      return Err(absl::StrCat("result ", ShapeText(h_.shape()), " must be a tuple of ",
                              h_.operand_count(), " arrays, one per operand"));
    }
    for (const Shape& s : h_.shape().tuple_shapes) out->push_back(&s);
    return absl::OkStatus();
  }

  absl::Status ScatterGather(bool gather) {
    if (h_.operand_count() < 1) return Err("expects at least one operand");
    if (auto st = Groups(); !st.ok()) return st;
    if (h_.dimensions.size() != 1) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
    }
    const int64_t d = h_.dimensions[0];
    std::vector<const Shape*> results;
    if (auto st = PerOperandResults(&results); !st.ok()) return st;
    const int64_t n = KnownGroupSize();
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      if (auto st = ArrayOperand(i); !st.ok()) return st;
      const Shape& in = Op(i);
      const Shape& out = *results[static_cast<size_t>(i)];
      if (d < 0 || d >= in.rank()) {
        return Err(absl::StrCat("dimension ", d, " is out of range for operand ", ShapeText(in)));
      }
      if (out.element_type != in.element_type || out.rank() != in.rank()) {
        return Err(absl::StrCat("result ", ShapeText(out), " does not match operand ",
                                ShapeText(in), " in element type or rank"));
      }
      for (int64_t k = 0; k < in.rank(); ++k) {
        const int64_t a = in.dims[static_cast<size_t>(k)], b = out.dims[static_cast<size_t>(k)];
        if (a < 0 || b < 0) continue;
        if (k != d) {
          if (a != b) {
            return Err(absl::StrCat("result ", ShapeText(out), " differs from operand ",
                                    ShapeText(in), " in dimension ", k));
          }
          continue;
        }
        if (gather) {
          if (n > 0 ? b != a * n : (a == 0 ? b != 0 : b % a != 0)) {
            return Err(absl::StrCat("result dimension ", d, " has size ", b, ", expected ", a,
                                    " x group size", n > 0 ? absl::StrCat(" ", n) : "", ""));
          }
        } else {
          if (n > 0 ? (a != b * n) : (b == 0 ? a != 0 : a % b != 0)) {
            return Err(absl::StrCat("operand dimension ", d, " has size ", a,
                                    ", expected result size ", b, " x group size",
                                    n > 0 ? absl::StrCat(" ", n) : ""));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllGather() { return ScatterGather(true); }

  absl::Status ReduceScatter() {
    if (auto st = ScatterGather(false); !st.ok()) return st;
    std::vector<PrimitiveType> acc;
    for (const HloInstruction* o : h_.operands()) acc.push_back(o->shape().element_type);
    return Reducer({acc.empty() ? PrimitiveType::kInvalid : acc[0]});
  }

  absl::Status AllReduce() {
    if (h_.operand_count() < 1) return Err("expects at least one operand");
    if (auto st = Groups(); !st.ok()) return st;
    std::vector<const Shape*> results;
    if (auto st = PerOperandResults(&results); !st.ok()) return st;
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      if (!ShapesMatch(*results[static_cast<size_t>(i)], Op(i))) {
        return Err(absl::StrCat("result ", ShapeText(*results[static_cast<size_t>(i)]),
                                " differs from operand ", i, " ", ShapeText(Op(i))));
      }
    }
    return Reducer({Op(0).element_type});
  }

  absl::Status AllToAll() {
    if (h_.operand_count() < 1) return Err("expects at least one operand");
    if (auto st = Groups(); !st.ok()) return st;
    if (h_.dimensions.empty()) {
      std::vector<const Shape*> results;
      if (auto st = PerOperandResults(&results); !st.ok()) return st;
      for (int64_t i = 0; i < h_.operand_count(); ++i) {
        if (!ShapesMatch(*results[static_cast<size_t>(i)], Op(i))) {
          return Err(absl::StrCat("result ", ShapeText(*results[static_cast<size_t>(i)]),
                                  " differs from operand ", i, " ", ShapeText(Op(i))));
        }
      }
      return absl::OkStatus();
    }
    if (h_.dimensions.size() != 1) {
      return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
    }
    if (auto st = OperandCount(1); !st.ok()) return st;
    if (auto st = ArrayOperand(0); !st.ok()) return st;
    const int64_t d = h_.dimensions[0];
    if (d < 0 || d >= Op(0).rank()) {
      return Err(absl::StrCat("split dimension ", d, " is out of range for ", ShapeText(Op(0))));
    }
    const int64_t n = KnownGroupSize();
    const int64_t size = Op(0).dims[static_cast<size_t>(d)];
    if (n > 0 && size >= 0 && size % n != 0) {
      return Err(absl::StrCat("split dimension ", d, " of size ", size,
                              " is not divisible by the group size ", n));
    }
    return ResultIs(Op(0), "operand shape");
  }

  absl::Status CollectivePermute() {
    if (h_.operand_count() != 1 && h_.operand_count() != 4) {
      return Err(absl::StrCat("expects 1 operand (or 4 in the in-place form), got ",
                              h_.operand_count()));
    }
    std::set<int64_t> sources, targets;
    for (const auto& [s, t] : h_.source_target_pairs) {
      if (s < 0 || t < 0) {
        return Err(absl::StrCat("source_target_pairs has a negative id in {", s, ",", t, "}"));
      }
      if (!sources.insert(s).second) {
        return Err(absl::StrCat("source_target_pairs: source ", s, " appears more than once"));
      }
      if (!targets.insert(t).second) {
        return Err(absl::StrCat("source_target_pairs: target ", t, " appears more than once"));
      }
    }
    if (h_.opcode() == HloOpcode::kCollectivePermute && h_.operand_count() == 1) {
      return ResultIs(Op(0), "operand shape");
    }
    return absl::OkStatus();
  }

  absl::Status CustomCall() {
    const std::string& t = h_.custom_call_target;
    if (t == "Sharding" || t == "SPMDFullToShardShape" || t == "SPMDShardToFullShape" ||
        t == "MoveToHost" || t == "MoveToDevice") {
      if (auto st = OperandCount(1); !st.ok()) return st;
      if (t == "Sharding" || t == "MoveToHost" || t == "MoveToDevice") {
        return ResultIs(Op(0), "operand shape");
      }
      if (Op(0).element_type != h_.shape().element_type || Op(0).rank() != h_.shape().rank()) {
        return Err(absl::StrCat("custom_call_target=\"", t, "\": result ", ShapeText(h_.shape()),
                                " must keep the operand's element type and rank ",
                                ShapeText(Op(0))));
      }
      return absl::OkStatus();
    }
    if (t.rfind("__cublas$", 0) == 0 && h_.operand_count() < 2) {
      return Err(absl::StrCat("custom_call_target=\"", t, "\" needs at least 2 operands, got ",
                              h_.operand_count()));
    }
    return absl::OkStatus();
  }

  const HloInstruction& h_;
};

struct PairHash {
  size_t operator()(const std::pair<const HloInstruction*, const HloInstruction*>& p) const {
    return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
  }
};

absl::Status StructErr(const HloComputation* c, const HloInstruction* h, const std::string& msg) {
  if (h == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("computation '", c->name(), "': ", msg));
  }
  return absl::InvalidArgumentError(absl::StrCat("instruction '", h->name(), "' in computation '",
                                                 c->name(), "': ", msg));
}

}  // namespace

absl::Status VerifyInstruction(const HloInstruction& instr) { return Checker(instr).Check(); }

absl::Status VerifyModule(const HloModule& module) {
  const std::vector<HloComputation*> comps = module.computations();
  const std::set<const HloComputation*> in_module(comps.begin(), comps.end());
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("module '", module.name(), "' has no entry"));
  }
  if (!in_module.count(module.entry())) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", module.name(), "': the entry is not one of its computations"));
  }
  for (const HloComputation* c : comps) {
    if (c->root() == nullptr) return StructErr(c, nullptr, "has no root instruction");
    if (c->root()->parent() != c) {
      return StructErr(c, c->root(), "is the root but belongs to another computation");
    }
    for (int64_t i = 0; i < c->num_parameters(); ++i) {
      const HloInstruction* p = c->parameter(i);
      if (p == nullptr || p->opcode() != HloOpcode::kParameter || p->parameter_number != i) {
        return StructErr(c, p, absl::StrCat("parameter list entry ", i,
                                            " is not parameter(", i, ")"));
      }
    }
    const std::vector<HloInstruction*> instrs = c->instructions();
    const std::unordered_set<const HloInstruction*> own(instrs.begin(), instrs.end());
    // (user, operand) pairs from the user lists, to check them against operand lists in O(edges).
    std::unordered_set<std::pair<const HloInstruction*, const HloInstruction*>, PairHash> use_edges;
    for (const HloInstruction* h : instrs) {
      for (const HloInstruction* u : h->users()) use_edges.insert({u, h});
    }
    for (const HloInstruction* h : instrs) {
      if (h->parent() != c) return StructErr(c, h, "has a wrong parent computation");
      if (h->opcode() == HloOpcode::kParameter &&
          (h->parameter_number < 0 || h->parameter_number >= c->num_parameters() ||
           c->parameter(h->parameter_number) != h)) {
        return StructErr(c, h, absl::StrCat("parameter(", h->parameter_number,
                                            ") is not registered as that parameter"));
      }
      for (int64_t i = 0; i < h->operand_count(); ++i) {
        const HloInstruction* o = h->operand(i);
        if (o == nullptr) return StructErr(c, h, absl::StrCat("operand ", i, " is null"));
        if (!own.count(o)) {
          return StructErr(c, h, absl::StrCat("operand ", i, " ('", o->name(),
                                              "') is not in the same computation"));
        }
        if (!use_edges.count({h, o})) {
          return StructErr(c, h, absl::StrCat("is missing from the users of operand ", i, " ('",
                                              o->name(), "')"));
        }
      }
      for (const HloComputation* called : h->called_computations()) {
        if (called == nullptr || !in_module.count(called)) {
          return StructErr(c, h, "calls a computation that is not in the module");
        }
        if (called == c) return StructErr(c, h, "calls its own computation");
      }
      if (absl::Status st = Checker(*h).Check(); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace weave
