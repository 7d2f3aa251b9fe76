// The evaluator's reductions and sort (eval/evaluator_internal.h): reduce (K operands, a
// reducer computation applied per element, XLA's order), reduce-window (window, strides,
// padding, dilations), sort (a comparator computation, stable when asked), scan (a body
// computation stepped along one dim, carries passed on).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "eval/evaluator_internal.h"
#include "eval/scalar_program.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

namespace {

// Reduces each row o of `in` (outer rows of inner elements, the reduced dims last) from `init`
// (rank 0) with the binary op `op` of type t into element o of `out`, of in's storage: f32 sums
// (and with exact_sums any float sum) accumulated in f32, other floats in double, each step
// rounded to t. InvalidArgument for a complex reduce other than add or multiply, or a type of
// another storage.
absl::Status ReduceRows(HloOpcode op, PrimitiveType t, bool exact_sums, const Value& in,
                        const Value& init_value, int64_t outer, int64_t inner, Value* result) {
  Value& out = *result;
  switch (in.storage()) {
    case Storage::kFloat: {
      const float init = init_value.f[0];
      // EvalOptions::exact_sums: a narrow sum accumulated and kept at f32.
      const bool f32_add = op == HloOpcode::kAdd && (t == PrimitiveType::F32 || exact_sums);
      for (int64_t o = 0; o < outer; ++o) {
        const float* row = in.f.data() + o * inner;
        if (f32_add) {
          float acc = init;
          for (int64_t q = 0; q < inner; ++q) acc += row[q];
          out.f[static_cast<size_t>(o)] = acc;
        } else {
          double acc = init;
          for (int64_t q = 0; q < inner; ++q) acc = ops::CombineFloat(op, acc, row[q], t);
          out.f[static_cast<size_t>(o)] = static_cast<float>(acc);
        }
      }
      break;
    }
    case Storage::kDouble: {
      const double init = init_value.d[0];
      for (int64_t o = 0; o < outer; ++o) {
        double acc = init;
        for (int64_t q = 0; q < inner; ++q) {
          acc = ops::CombineFloat(op, acc, in.d[static_cast<size_t>(o * inner + q)], t);
        }
        out.d[static_cast<size_t>(o)] = acc;
      }
      break;
    }
    case Storage::kInt: {
      const int64_t init = init_value.i[0];
      for (int64_t o = 0; o < outer; ++o) {
        int64_t acc = init;
        for (int64_t q = 0; q < inner; ++q) {
          acc = ops::CombineInt(op, acc, in.i[static_cast<size_t>(o * inner + q)], t);
        }
        out.i[static_cast<size_t>(o)] = acc;
      }
      break;
    }
    case Storage::kComplex: {
      // add and multiply (complex numbers have no order), each step rounded to the type.
      if (op != HloOpcode::kAdd && op != HloOpcode::kMultiply) {
        return InvalidArgumentError("reduce of a complex type takes add or multiply");
      }
      for (int64_t o = 0; o < outer; ++o) {
        std::complex<double> acc = init_value.c[0];
        for (int64_t q = 0; q < inner; ++q) {
          const std::complex<double> x = in.c[static_cast<size_t>(o * inner + q)];
          acc = RoundComplex(op == HloOpcode::kAdd ? acc + x : acc * x, t);
        }
        out.c[static_cast<size_t>(o)] = acc;
      }
      break;
    }
    default: return InvalidArgumentError("reduce of an unsupported element type");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalReduce(const HloInstruction* instr,
                                                     const std::vector<ValuePtr>& ops) {
  const size_t k_ops = ops.size() / 2;
  if (k_ops == 0 || ops.size() != 2 * k_ops) return InvalidArgumentError("reduce needs 2K operands");
  const HloComputation* c = instr->to_apply();
  std::vector<Value> moved(k_ops);
  int64_t outer = 1, inner = 1;
  for (size_t j = 0; j < k_ops; ++j) {
    moved[j] = ops::MoveReducedDimsLast(*ops[j], instr->dimensions, &outer, &inner);
  }
  std::vector<Shape> out_shapes;
  if (instr->shape().IsTuple()) {
    out_shapes = instr->shape().tuple_shapes;
  } else {
    out_shapes = {instr->shape()};
  }
  if (out_shapes.size() != k_ops) return InvalidArgumentError("reduce result count mismatch");
  std::vector<Value> outs;
  for (const Shape& s : out_shapes) outs.push_back(Value::Zeros(s));
  auto simple = program_.simple_binary.find(c);
  if (k_ops == 1 && simple != program_.simple_binary.end() && simple->second.has_value() &&
      outs[0].storage() == moved[0].storage()) {
    RETURN_IF_ERROR(ReduceRows(*simple->second, out_shapes[0].element_type, program_.exact_sums,
                               moved[0], *ops[1], outer, inner, &outs[0]));
    return Share(std::move(outs[0]));
  }
  // General path: call the computation per element.
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<ValuePtr> acc(k_ops);
    for (size_t j = 0; j < k_ops; ++j) acc[j] = ops[k_ops + j];
    for (int64_t q = 0; q < inner; ++q) {
      std::vector<ValuePtr> args = acc;
      for (size_t j = 0; j < k_ops; ++j) args.push_back(ScalarAt(moved[j], o * inner + q));
      ASSIGN_OR_RETURN(auto res, CallScalar(c, args));
      if (k_ops == 1) {
        acc[0] = res;
      } else {
        for (size_t j = 0; j < k_ops; ++j) acc[j] = res->elements.at(j);
      }
    }
    for (size_t j = 0; j < k_ops; ++j) StoreScalar(*acc[j], &outs[j], o);
  }
  if (k_ops == 1) return Share(std::move(outs[0]));
  Value t;
  t.shape = instr->shape();
  for (Value& v : outs) t.elements.push_back(Share(std::move(v)));
  return Share(std::move(t));
}

int64_t WindowSource(const std::vector<WindowDim>& w, const std::vector<int64_t>& oidx, int64_t q,
                     const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                     std::vector<int64_t>* widx) {
  const size_t rank = w.size();
  for (size_t d = rank; d-- > 0;) {
    (*widx)[d] = q % w[d].size;
    q /= w[d].size;
  }
  int64_t flat = 0;
  for (size_t d = 0; d < rank; ++d) {
    const WindowDim& wd = w[d];
    int64_t pos = oidx[d] * wd.stride + (*widx)[d] * wd.rhs_dilate - wd.lo;
    if (pos < 0 || pos % wd.lhs_dilate != 0) return -1;
    pos /= wd.lhs_dilate;
    if (pos >= dims[d]) return -1;
    flat += pos * strides[d];
  }
  return flat;
}

namespace {

// For each dim d and output index o along it, the flat offsets (pos * strides[d]) of the operand
// elements (dims `dims`) that window w reads, in window order; padding and lhs-dilation holes
// left out (WindowSource's rule).
std::vector<std::vector<std::vector<int64_t>>> WindowSourceOffsets(
    const std::vector<WindowDim>& w, const Shape& out_shape, const std::vector<int64_t>& dims,
    const std::vector<int64_t>& strides) {
  const size_t rank = w.size();
  std::vector<std::vector<std::vector<int64_t>>> src(rank);
  for (size_t d = 0; d < rank; ++d) {
    const WindowDim& wd = w[d];
    src[d].resize(static_cast<size_t>(out_shape.dims[d]));
    for (int64_t o = 0; o < out_shape.dims[d]; ++o) {
      for (int64_t k = 0; k < wd.size; ++k) {
        int64_t pos = o * wd.stride + k * wd.rhs_dilate - wd.lo;
        if (pos < 0 || pos % wd.lhs_dilate != 0) continue;
        pos /= wd.lhs_dilate;
        if (pos >= dims[d]) continue;
        src[d][static_cast<size_t>(o)].push_back(pos * strides[d]);
      }
    }
  }
  return src;
}

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalReduceWindow(const HloInstruction* instr,
                                                           const std::vector<ValuePtr>& ops) {
  if (ops.size() != 2 || instr->shape().IsTuple()) {
    return InvalidArgumentError("only single-operand reduce-window is supported");
  }
  const Value& in = *ops[0];
  const size_t rank = in.shape.dims.size();
  ASSIGN_OR_RETURN(auto w, ParseWindow(*instr, rank));
  for (const WindowDim& wd : w) {
    if (wd.reversal) return InvalidArgumentError("reduce-window takes no window reversal");
  }
  const Shape& out_shape = instr->shape();
  Value out = Value::Zeros(out_shape);
  const std::vector<int64_t> is = ops::Strides(in.shape.dims);
  const int64_t n_out = out_shape.ElementCount();
  std::vector<int64_t> oidx(rank, 0), widx(rank, 0);
  const HloComputation* c = instr->to_apply();
  auto simple = program_.simple_binary.find(c);
  const bool fast = simple != program_.simple_binary.end() && simple->second.has_value();
  const PrimitiveType t = out_shape.element_type;
  int64_t wcount = 1;
  for (const WindowDim& wd : w) wcount *= wd.size;
  if (fast) {
    // The source offsets each output index reads along each dim, in window order (WindowSource's
    // rule: padding and lhs-dilation holes left out). An output then walks the product of its
    // dims' lists in row-major window order, the order the generic walk combines in, so the
    // results are the same bits, and only the elements it reads cost anything.
    const std::vector<std::vector<std::vector<int64_t>>> src =
        WindowSourceOffsets(w, out_shape, in.shape.dims, is);
    const HloOpcode op = *simple->second;
    const bool is_int = in.storage() == Storage::kInt;
    std::vector<size_t> pick(rank, 0);
    for (int64_t o = 0; o < n_out; ++o) {
      int64_t rem = o;
      for (size_t d = rank; d-- > 0;) {
        oidx[d] = rem % out_shape.dims[d];
        rem /= out_shape.dims[d];
      }
      double facc = ops[1]->GetDouble(0);
      int64_t iacc = ops[1]->storage() == Storage::kInt ? ops[1]->i[0] : 0;
      bool empty = false;
      for (size_t d = 0; d < rank; ++d) empty |= src[d][static_cast<size_t>(oidx[d])].empty();
      if (!empty) {
        std::fill(pick.begin(), pick.end(), 0);
        while (true) {
          int64_t flat = 0;
          for (size_t d = 0; d < rank; ++d) flat += src[d][static_cast<size_t>(oidx[d])][pick[d]];
          if (is_int) {
            iacc = ops::CombineInt(op, iacc, in.i[static_cast<size_t>(flat)], t);
          } else {
            facc = ops::CombineFloat(op, facc, in.GetDouble(flat), t);
          }
          size_t d = rank;
          while (d > 0 && ++pick[d - 1] == src[d - 1][static_cast<size_t>(oidx[d - 1])].size()) pick[--d] = 0;
          if (d == 0) break;
        }
      }
      if (out.storage() == Storage::kInt) {
        out.i[static_cast<size_t>(o)] = iacc;
      } else {
        out.SetDouble(o, facc);
      }
    }
    return Share(std::move(out));
  }
  for (int64_t o = 0; o < n_out; ++o) {
    // Decode o into oidx.
    int64_t rem = o;
    for (size_t d = rank; d-- > 0;) {
      oidx[d] = rem % out_shape.dims[d];
      rem /= out_shape.dims[d];
    }
    ValuePtr acc = ops[1];
    double facc = ops[1]->GetDouble(0);
    int64_t iacc = ops[1]->storage() == Storage::kInt ? ops[1]->i[0] : 0;
    for (int64_t q = 0; q < wcount; ++q) {
      const int64_t flat = WindowSource(w, oidx, q, in.shape.dims, is, &widx);
      if (flat < 0) continue;  // padding holds the init value: combining with it is a no-op
      if (fast) {
        if (in.storage() == Storage::kInt) {
          iacc = ops::CombineInt(*simple->second, iacc, in.i[static_cast<size_t>(flat)], t);
        } else {
          facc = ops::CombineFloat(*simple->second, facc, in.GetDouble(flat), t);
        }
      } else {
        auto res = CallScalar(c, {acc, ScalarAt(in, flat)});
        if (!res.ok()) return res.status();
        acc = *res;
      }
    }
    if (fast) {
      if (out.storage() == Storage::kInt) out.i[static_cast<size_t>(o)] = iacc;
      else out.SetDouble(o, facc);
    } else {
      StoreScalar(*acc, &out, o);
    }
  }
  return Share(std::move(out));
}

namespace {

// OK when sort `instr` has one dimension, within the rank of its operands, which are arrays of one
// dims, and a comparator of two parameters per operand; InvalidArgument otherwise.
absl::Status CheckSortOperands(const HloInstruction* instr, const std::vector<ValuePtr>& ops) {
  if (ops.empty() || instr->dimensions.size() != 1) return InvalidArgumentError("sort needs one dimension");
  for (const ValuePtr& v : ops) {
    if (!v->shape.IsArray() || v->shape.dims != ops[0]->shape.dims) {
      return InvalidArgumentError(absl::StrCat("sort operands must share their dims: ", v->shape.ToString(false),
                                               " vs ", ops[0]->shape.ToString(false)));
    }
  }
  if (instr->to_apply()->num_parameters() != 2 * static_cast<int64_t>(ops.size())) {
    return InvalidArgumentError("sort's comparator must take two parameters per operand");
  }
  if (instr->dimensions[0] < 0 || instr->dimensions[0] >= static_cast<int64_t>(ops[0]->shape.dims.size())) {
    return InvalidArgumentError("sort dimension out of range");
  }
  return absl::OkStatus();
}

// Whether comparator parameters 2j and 2j+1 both have operand j's element type, for every j.
bool ComparatorParamsMatch(const HloComputation* c, const std::vector<ValuePtr>& ops) {
  bool param_types_match = true;
  for (size_t j = 0; j < ops.size(); ++j) {
    for (int64_t side = 0; side < 2; ++side) {
      param_types_match &= c->parameter(static_cast<int64_t>(2 * j) + side)->shape().element_type ==
                           ops[j]->shape.element_type;
    }
  }
  return param_types_match;
}

// Writes the sorted line of every operand into `outs`: element q of the line (flat index
// base + q * stride) takes the operand's element perm[q] of the line.
void PermuteLine(const std::vector<ValuePtr>& ops, const std::vector<int64_t>& perm, int64_t base,
                 int64_t stride, std::vector<Value>* outs) {
  const int64_t extent = static_cast<int64_t>(perm.size());
  auto at = [&](int64_t q) { return base + q * stride; };
  for (size_t j = 0; j < ops.size(); ++j) {
    for (int64_t q = 0; q < extent; ++q) {
      const int64_t src = at(perm[static_cast<size_t>(q)]), dst = at(q);
      switch ((*outs)[j].storage()) {
        case Storage::kFloat: (*outs)[j].f[dst] = ops[j]->f[src]; break;
        case Storage::kDouble: (*outs)[j].d[dst] = ops[j]->d[src]; break;
        case Storage::kInt: (*outs)[j].i[dst] = ops[j]->i[src]; break;
        case Storage::kComplex: (*outs)[j].c[dst] = ops[j]->c[src]; break;
        default: break;
      }
    }
  }
}

}  // namespace

absl::StatusOr<ValuePtr> DeviceEvaluator::EvalSort(const HloInstruction* instr,
                                                   const std::vector<ValuePtr>& ops) {
  RETURN_IF_ERROR(CheckSortOperands(instr, ops));
  const Shape& s = ops[0]->shape;
  const int64_t dim = instr->dimensions[0];
  const int64_t extent = s.dims[static_cast<size_t>(dim)];
  const std::vector<int64_t> st = ops::Strides(s.dims);
  const int64_t stride = st[static_cast<size_t>(dim)];
  const int64_t n = s.ElementCount();
  std::vector<Value> outs;
  for (const ValuePtr& v : ops) outs.push_back(*v);
  const HloComputation* c = instr->to_apply();
  // Fast comparator: compare(p0, p1) LT/GT on the first operand's pair (the other operands
  // ride along, as in a sort of values with their iota indices), in IEEE or total order.
  std::optional<ComparisonDirection> fast_dir;
  bool total_order = false;
  if (std::optional<ops::ParamCompare> pc = ops::MatchParamCompare(*c);
      pc && (pc->dir == ComparisonDirection::kLt || pc->dir == ComparisonDirection::kGt)) {
    fast_dir = pc->dir;
    total_order = pc->total_order;
  }
  const bool float_keys = IsFloatingPoint(ops[0]->shape.element_type);
  absl::Status error;
  // Other comparators run compiled (scalar_program.h) when every instruction allows it; the
  // first comparisons are replayed through the interpreter and any difference keeps the
  // interpreter for the whole sort.
  std::optional<ScalarProgram> program;
  std::vector<const Value*> prog_vals;
  const bool param_types_match = ComparatorParamsMatch(c, ops);
  if (!fast_dir && param_types_match) {
    program = ScalarProgram::Compile(*c);
    for (const ValuePtr& v : ops) prog_vals.push_back(v.get());
  }
  auto interpret = [&](int64_t ex, int64_t ey) -> absl::StatusOr<bool> {
    std::vector<ValuePtr> args;
    for (const ValuePtr& v : ops) {
      args.push_back(ScalarAt(*v, ex));
      args.push_back(ScalarAt(*v, ey));
    }
    ASSIGN_OR_RETURN(auto res, CallScalar(c, args));
    return res->i.at(0) != 0;
  };
  bool replayed = false;
  std::vector<int64_t> line_at(static_cast<size_t>(extent));
  for (int64_t base = 0; base < n; ++base) {
    if ((base / stride) % extent != 0) continue;  // visit each line once (its first element)
    std::vector<int64_t> perm(static_cast<size_t>(extent));
    for (int64_t q = 0; q < extent; ++q) perm[static_cast<size_t>(q)] = q;
    auto at = [&](int64_t q) { return base + q * stride; };
    if (program) {
      for (int64_t q = 0; q < extent; ++q) line_at[static_cast<size_t>(q)] = at(q);
      program->CacheLine(prog_vals.data(), line_at);
      if (!replayed) {
        // Replay on the first line: neighbouring elements, both ways round.
        replayed = true;
        for (int64_t q = 0; q + 1 < std::min<int64_t>(extent, 33) && program; ++q) {
          for (int flip = 0; flip < 2 && program; ++flip) {
            const int64_t x = flip ? q + 1 : q, y = flip ? q : q + 1;
            ASSIGN_OR_RETURN(auto want, interpret(at(x), at(y)));
            if (want != (program->Compare(x, y) != 0)) program.reset();
          }
        }
      }
    }
    auto less = [&](int64_t x, int64_t y) -> bool {
      if (!error.ok()) return false;
      if (fast_dir && ops[0]->storage() == Storage::kInt) {
        // Integer keys as integers (s64/u64 keys past 2^53 are not exact as doubles).
        return ops::CompareInts(*fast_dir, ops[0]->i[static_cast<size_t>(at(x))], ops[0]->i[static_cast<size_t>(at(y))],
                                IsUnsignedInteger(ops[0]->shape.element_type));
      }
      if (fast_dir) {
        return ops::CompareFloats(*fast_dir, ops[0]->GetDouble(at(x)), ops[0]->GetDouble(at(y)),
                                  total_order && float_keys);
      }
      if (program) return program->Compare(x, y) != 0;
      auto res = interpret(at(x), at(y));
      if (!res.ok()) {
        error = res.status();
        return false;
      }
      return *res;
    };
    std::stable_sort(perm.begin(), perm.end(), less);
    if (!error.ok()) return error;
    PermuteLine(ops, perm, base, stride, &outs);
  }
  if (ops.size() == 1) return Share(std::move(outs[0]));
  Value t;
  t.shape = instr->shape();
  for (Value& v : outs) t.elements.push_back(Share(std::move(v)));
  return Share(std::move(t));
}

namespace {

// Writes `piece`, body output o of a scan step (the output with scan dim d removed), at index k
// along d of `out`; InvalidArgument when out has no dim d or piece is not such a slice of it.
absl::Status WriteScanOutput(int64_t o, const Value& piece, int64_t d, int64_t k, Value* result) {
  Value& out = *result;
  if (d >= out.shape.rank()) return InvalidArgumentError("scan output has no scan dimension");
  // The piece is the output with the scan dim removed: written row-major at step k.
  std::vector<int64_t> slice_dims = out.shape.dims;
  slice_dims.erase(slice_dims.begin() + d);
  if (piece.shape.element_type != out.shape.element_type || piece.shape.dims != slice_dims ||
      piece.storage() != out.storage()) {
    return InvalidArgumentError(absl::StrCat("scan body output ", o, " is ", piece.shape.ToString(false),
                                             ", not a slice of ", out.shape.ToString(false)));
  }
  const std::vector<int64_t> os = ops::Strides(out.shape.dims);
  const int64_t inner = os[static_cast<size_t>(d)], dim = out.shape.dims[static_cast<size_t>(d)];
  const int64_t outer = inner == 0 ? 0 : out.size() / (inner * dim);
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t q = 0; q < inner; ++q) {
      const int64_t dst = (a * dim + k) * inner + q, src = a * inner + q;
      switch (out.storage()) {
        case Storage::kFloat: out.f[static_cast<size_t>(dst)] = piece.f[static_cast<size_t>(src)]; break;
        case Storage::kDouble: out.d[static_cast<size_t>(dst)] = piece.d[static_cast<size_t>(src)]; break;
        case Storage::kInt: out.i[static_cast<size_t>(dst)] = piece.i[static_cast<size_t>(src)]; break;
        case Storage::kComplex: out.c[static_cast<size_t>(dst)] = piece.c[static_cast<size_t>(src)]; break;
        default: break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// XLA's scan (HloScanInstruction; the loop of xla/service/scan_expander.cc): operands are the
// inputs, then `num_carries` initial carries; along the scan dim d (`dimensions={d}`), step k
// (k = 0..L-1, or L-1..0 with is_reverse=true) calls to_apply(input slices at k (dim d
// removed)..., carries...) -> (outputs..., new carries...), writes each output slice at k along
// d of its result array, and passes the carries on. Result: (output arrays..., final carries...),
// or the one value when the shape is not a tuple. is_associative does not change the values.
absl::StatusOr<ValuePtr> DeviceEvaluator::EvalScan(const HloInstruction* instr,
                                                   const std::vector<ValuePtr>& ops) {
  const HloComputation* body = instr->to_apply();
  if (body == nullptr || instr->dimensions.size() != 1) {
    return InvalidArgumentError("scan needs to_apply= and dimensions={d}");
  }
  int64_t carries = 0;
  if (const std::string* v = instr->GetRawAttribute("num_carries")) {
    if (!absl::SimpleAtoi(*v, &carries)) return InvalidArgumentError("bad num_carries");
  }
  const std::string* rev = instr->GetRawAttribute("is_reverse");
  const bool reverse = rev != nullptr && *rev == "true";
  const int64_t n_inputs = static_cast<int64_t>(ops.size()) - carries;
  if (carries < 0 || n_inputs < 1) return InvalidArgumentError("scan needs an input and num_carries <= operands");
  const int64_t d = instr->dimensions[0];
  const Shape& in0 = ops[0]->shape;
  if (d < 0 || d >= in0.rank()) return InvalidArgumentError("scan dimension out of range");
  const int64_t length = in0.dims[static_cast<size_t>(d)];
  const std::vector<Shape> results =
      instr->shape().IsTuple() ? instr->shape().tuple_shapes : std::vector<Shape>{instr->shape()};
  const int64_t n_outputs = static_cast<int64_t>(results.size()) - carries;
  if (n_outputs < 0) return InvalidArgumentError("scan has fewer results than carries");
  std::vector<Value> outputs;
  for (int64_t o = 0; o < n_outputs; ++o) {
    const Shape& r = results[static_cast<size_t>(o)];
    if (!r.IsArray() || d >= r.rank() || r.dims[static_cast<size_t>(d)] != length) {
      return InvalidArgumentError(absl::StrCat("scan output ", o, " ", r.ToString(false), " does not stack ", length,
                                               " steps along dim ", d));
    }
    outputs.push_back(Value::Zeros(r));
  }
  std::vector<ValuePtr> state(ops.begin() + n_inputs, ops.end());
  for (int64_t step = 0; step < length; ++step) {
    const int64_t k = reverse ? length - 1 - step : step;
    std::vector<ValuePtr> args;
    for (int64_t i = 0; i < n_inputs; ++i) {
      const Value& in = *ops[static_cast<size_t>(i)];
      if (in.shape.rank() != in0.rank() || in.shape.dims[static_cast<size_t>(d)] != length) {
        return InvalidArgumentError("scan inputs differ along the scan dimension");
      }
      Shape one = in.shape;
      one.dims[static_cast<size_t>(d)] = 1;
      std::vector<SliceDim> sl;
      for (int64_t q = 0; q < in.shape.rank(); ++q) {
        const int64_t lo = q == d ? k : 0;
        sl.push_back(SliceDim{lo, lo + one.dims[static_cast<size_t>(q)], 1});
      }
      Value slice = ops::Slice(in, one, sl);
      Shape squeezed = in.shape;
      squeezed.dims.erase(squeezed.dims.begin() + d);
      slice.shape = squeezed;
      args.push_back(Share(std::move(slice)));
    }
    args.insert(args.end(), state.begin(), state.end());
    ASSIGN_OR_RETURN(ValuePtr r, EvalComputation(body, args));
    std::vector<ValuePtr> parts = r->shape.IsTuple() ? r->elements : std::vector<ValuePtr>{r};
    if (static_cast<int64_t>(parts.size()) != n_outputs + carries) {
      return InvalidArgumentError("scan body's result count is not outputs + carries");
    }
    for (int64_t o = 0; o < n_outputs; ++o) {
      RETURN_IF_ERROR(WriteScanOutput(o, *parts[static_cast<size_t>(o)], d, k,
                                      &outputs[static_cast<size_t>(o)]));
    }
    for (int64_t c = 0; c < carries; ++c) {
      const Shape& got = parts[static_cast<size_t>(n_outputs + c)]->shape;
      const Shape& want = ops[static_cast<size_t>(n_inputs + c)]->shape;
      if (!got.Compatible(want)) {
        return InvalidArgumentError(absl::StrCat("scan body carry ", c, " is ", got.ToString(false),
                                                 ", its init ", want.ToString(false)));
      }
    }
    state.assign(parts.begin() + n_outputs, parts.end());
    if ((step & 255) == 255 && coord_->failed()) return absl::AbortedError("aborted because another device failed");
  }
  if (!instr->shape().IsTuple()) {
    return n_outputs == 1 ? Share(std::move(outputs[0])) : state.at(0);
  }
  Value t;
  t.shape = instr->shape();
  for (Value& o : outputs) t.elements.push_back(Share(std::move(o)));
  for (const ValuePtr& c : state) t.elements.push_back(c);
  return Share(std::move(t));
}

}  // namespace weave::eval::internal
