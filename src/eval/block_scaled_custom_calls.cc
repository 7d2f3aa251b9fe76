// The evaluator's meaning for XLA's block-scaling custom calls (hlo/block_scaled_call.h), computed
// exactly as XLA's BlockScalingRewriter expands them (block_scaling_rewriter.cc), op by op in the
// evaluator's own kernels so that a module and its expansion give bit-identical values:
//
//  - "__op$quantize"(x: T[..., K]) -> (Q[..., K], S[..., K/B]): per block of B elements along the
//    last dim, amax = max |x| (in T); scale = convert<S>(amax / emax(Q)) (divide in T; emax from
//    QuantizeEmax); q = convert<Q>(x / convert<T>(scale)) (divide in T). A block of zeros has
//    amax 0 and an f8e8m0fnu scale of NaN (E8M0 has no zero), so its q is NaN too, as in XLA.
//  - "__op$dequantize"(q, s) -> T: convert<T>(q) * convert<T>(s) broadcast over each block.
//  - "__op$block_scaled_dot"(lhs, rhs, lhs_scale[, rhs_scale[, global_scale]]) -> T[B?, M, N]:
//    each operand with a scale is dequantized to T (its scale first sliced to the operand's rows
//    and to ceil(K/B) blocks when padded), then a dot with the contracting dim last and batch
//    dim 0 for rank 3, result type T; then times global_scale (in T).
//  - "__cudnn$blockScaledDot"(lhs, rhs, lhs_scale, rhs_scale[, global_scale]) ->
//    (T[B?, M, N], u8[0]): the rewriter's cuDNN form. The scales are un-swizzled (the inverse of
//    the rewriter's reshape [B, R/128, 4, 32, C/4, 4] -> transpose {0,1,4,3,2,5}), B comes from
//    the type pair (CudnnBlockSize) and only the first K/B scale columns are read; otherwise as
//    above. The scratch result is an empty u8[0].
// Errors: InvalidArgument naming the instruction for an operand count, rank, shape or type that
// does not fit (the checks XLA's expansion makes).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/custom_calls.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/block_scaled_call.h"
#include "hlo/ir.h"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace {

using ops::Binary;
using ops::Convert;
using ops::Dot;
using ops::Strides;

absl::Status Bad(const HloInstruction& instr, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("custom-call ", instr.name(), " (target \"",
                                                 instr.custom_call_target(), "\"): ", what));
}

Shape WithType(Shape s, PrimitiveType t) {
  s.element_type = t;
  return s;
}

// `s` (dims [..., C], C >= ceil(K/B)) expanded to the data's dims [..., K]: element k of a row
// takes the row's block k / B. The leading dims of s must be at least the data's (padded scales:
// the extra rows are never read).
absl::StatusOr<Value> ExpandScale(const HloInstruction& instr, const Value& s,
                                  const std::vector<int64_t>& data_dims, int64_t block) {
  const size_t rank = data_dims.size();
  if (s.shape.rank() != static_cast<int64_t>(rank) || rank == 0) {
    return Bad(instr, absl::StrCat("scale ", s.shape.ToString(false), " and data rank ", rank, " differ"));
  }
  const int64_t k = data_dims.back();
  const int64_t blocks = (k + block - 1) / block;
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (s.shape.dims[d] < data_dims[d]) {
      return Bad(instr, absl::StrCat("scale ", s.shape.ToString(false), " is smaller than its data in dim ", d));
    }
  }
  if (s.shape.dims.back() < blocks) {
    return Bad(instr, absl::StrCat("scale ", s.shape.ToString(false), " has fewer than the ", blocks,
                                   " blocks of ", block, " its data needs"));
  }
  Value out = Value::Zeros(Shape(s.shape.element_type, data_dims));
  const std::vector<int64_t> ss = Strides(s.shape.dims);
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < rank; ++d) rows *= data_dims[d];
  std::vector<int64_t> idx(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, base = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      base += (rem % data_dims[d]) * ss[d];
      rem /= data_dims[d];
    }
    for (int64_t j = 0; j < k; ++j) out.SetDouble(r * k + j, s.GetDouble(base + j / block));
  }
  return out;
}

// convert<T>(q) * convert<T>(scale broadcast per block), the rewriter's BuildDequantize.
absl::StatusOr<Value> Dequantize(const HloInstruction& instr, const Value& q, const Value& scale,
                                 int64_t block, PrimitiveType t) {
  ASSIGN_OR_RETURN(Value s, ExpandScale(instr, scale, q.shape.dims, block));
  const Shape out = WithType(q.shape, t);
  ASSIGN_OR_RETURN(Value qc, Convert(q, out));
  ASSIGN_OR_RETURN(Value sc, Convert(s, out));
  return Binary(HloOpcode::kMultiply, qc, sc, out);
}

absl::StatusOr<Value> QuantizeCall(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  const Shape& rs = instr.shape();
  if (ops.size() != 1) return Bad(instr, "expects 1 operand");
  if (!rs.IsTuple() || rs.tuple_shapes.size() != 2 || !rs.tuple_shapes[0].IsArray() ||
      !rs.tuple_shapes[1].IsArray() || ops[0]->shape.dims != rs.tuple_shapes[0].dims) {
    return Bad(instr, "the result must be (quantized data of the operand's dims, scales)");
  }
  const Value& x = *ops[0];
  const Shape& qs = rs.tuple_shapes[0];
  const Shape& ss = rs.tuple_shapes[1];
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(qs, ss);
  if (!block.ok()) return Bad(instr, std::string(block.status().message()));
  for (size_t d = 0; d + 1 < qs.dims.size(); ++d) {
    if (qs.dims[d] != ss.dims[d]) return Bad(instr, "data and scale dims differ before the last");
  }
  const PrimitiveType t = x.shape.element_type;
  if (!IsFloatingPoint(t)) return Bad(instr, "the operand must be a float array");
  // amax per block, in T (a maximum of representable values is exact).
  const Shape amax_shape = WithType(ss, t);
  Value amax = Value::Zeros(amax_shape);
  const int64_t blocks = amax.size();
  for (int64_t b = 0; b < blocks; ++b) {
    double m = 0;
    for (int64_t j = 0; j < *block; ++j) {
      const double v = std::fabs(x.GetDouble(b * *block + j));
      m = std::isnan(v) || std::isnan(m) ? std::nan("") : std::max(m, v);
    }
    amax.SetDouble(b, m);
  }
  Value emax = Value::Zeros(amax_shape);
  for (int64_t b = 0; b < blocks; ++b) emax.SetDouble(b, QuantizeEmax(qs.element_type));
  ASSIGN_OR_RETURN(Value norm, Binary(HloOpcode::kDivide, amax, emax, amax_shape));
  ASSIGN_OR_RETURN(Value scale, Convert(norm, ss));
  ASSIGN_OR_RETURN(Value scale_t, Convert(scale, amax_shape));
  ASSIGN_OR_RETURN(Value wide, ExpandScale(instr, scale_t, x.shape.dims, *block));
  ASSIGN_OR_RETURN(Value div, Binary(HloOpcode::kDivide, x, wide, x.shape));
  ASSIGN_OR_RETURN(Value q, Convert(div, qs));
  Value r;
  r.shape = rs;
  r.elements = {Share(std::move(q)), Share(std::move(scale))};
  return r;
}

absl::StatusOr<Value> DequantizeCall(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 2) return Bad(instr, "expects 2 operands (data, scale)");
  const Shape& rs = instr.shape();
  if (!rs.IsArray() || rs.dims != ops[0]->shape.dims) {
    return Bad(instr, "the result must have the data's dims");
  }
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(ops[0]->shape, ops[1]->shape);
  if (!block.ok()) return Bad(instr, std::string(block.status().message()));
  for (size_t d = 0; d + 1 < rs.dims.size(); ++d) {
    if (ops[1]->shape.dims[d] != rs.dims[d]) return Bad(instr, "data and scale dims differ before the last");
  }
  return Dequantize(instr, *ops[0], *ops[1], *block, rs.element_type);
}

// The dot of the (dequantized) operands and the global scale, shared by both dot forms. `lhs_rows`
// and `rhs_rows` are the rows the result keeps (the cuDNN form computes on padded operands).
absl::StatusOr<Value> ScaledDot(const HloInstruction& instr, const Value& lhs, const Value& rhs,
                                const Value* lhs_scale, const Value* rhs_scale,
                                const Value* global_scale, int64_t block, const Shape& out) {
  const int64_t rank = lhs.shape.rank();
  if ((rank != 2 && rank != 3) || rhs.shape.rank() != rank) {
    return Bad(instr, "lhs and rhs must both be rank 2 or both rank 3");
  }
  const PrimitiveType t = out.element_type;
  absl::StatusOr<Value> a = lhs_scale ? Dequantize(instr, lhs, *lhs_scale, block, t)
                                      : Convert(lhs, WithType(lhs.shape, t));
  if (!a.ok()) return a.status();
  ASSIGN_OR_RETURN(Value b, rhs_scale ? Dequantize(instr, rhs, *rhs_scale, block, t)
                                      : Convert(rhs, WithType(rhs.shape, t)));
  absl::StatusOr<Value> r = Dot(*a, b, out, BlockScaledDotDims(rank));
  if (!r.ok()) return r.status();
  if (global_scale == nullptr) return r;
  if (global_scale->shape.rank() != 0 || global_scale->shape.element_type != t) {
    return Bad(instr, "the global scale must be a scalar of the result type");
  }
  Value g = Value::Zeros(out);
  for (int64_t k = 0; k < g.size(); ++k) g.SetDouble(k, global_scale->GetDouble(0));
  return Binary(HloOpcode::kMultiply, *r, g, out);
}

absl::StatusOr<Value> BlockScaledDotCall(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() < 3 || ops.size() > 5) return Bad(instr, "expects 3 to 5 operands");
  const Shape& out = instr.shape();
  const Value& lhs = *ops[0];
  const Value& rhs = *ops[1];
  const int64_t rank = lhs.shape.rank();
  if (!out.IsArray() || (rank != 2 && rank != 3) || rhs.shape.rank() != rank ||
      lhs.shape.dims.back() != rhs.shape.dims.back() ||
      (rank == 3 && lhs.shape.dims[0] != rhs.shape.dims[0])) {
    return Bad(instr, "lhs and rhs must be [B?, M, K] and [B?, N, K]");
  }
  std::vector<int64_t> want;
  if (rank == 3) want.push_back(lhs.shape.dims[0]);
  want.push_back(lhs.shape.dims[static_cast<size_t>(rank - 2)]);
  want.push_back(rhs.shape.dims[static_cast<size_t>(rank - 2)]);
  if (out.dims != want) return Bad(instr, "the result shape is not [B?, M, N]");
  absl::StatusOr<int64_t> block = BlockScaledDotBlockSize(instr);
  if (!block.ok()) return Bad(instr, std::string(block.status().message()));
  const Value* rhs_scale = ops.size() >= 4 ? ops[3].get() : nullptr;
  const Value* global = ops.size() == 5 ? ops[4].get() : nullptr;
  if (!ConfiguredBlockSize(instr) && rhs_scale != nullptr &&
      (rhs_scale->shape.rank() < 1 || rhs_scale->shape.dims.back() * *block != lhs.shape.dims.back())) {
    return Bad(instr, "without a block size in the backend config, the rhs scale must divide the contracting dim "
                      "into the lhs scale's blocks");
  }
  if (lhs.shape.dims.back() % *block != 0) {
    return Bad(instr, absl::StrCat("the contracting dim ", lhs.shape.dims.back(),
                                   " is not a multiple of the block size ", *block));
  }
  return ScaledDot(instr, lhs, rhs, ops[2].get(), rhs_scale, global, *block, out);
}

// The inverse of the rewriter's scale swizzle on a [B?, R, C] scale (R % 128 == 0, C % 4 == 0).
absl::StatusOr<Value> Unswizzle(const HloInstruction& instr, const Value& s) {
  const int64_t rank = s.shape.rank();
  if (rank != 2 && rank != 3) return Bad(instr, "a scale must be rank 2 or 3");
  const int64_t batch = rank == 3 ? s.shape.dims[0] : 1;
  const int64_t rows = s.shape.dims[static_cast<size_t>(rank - 2)];
  const int64_t cols = s.shape.dims[static_cast<size_t>(rank - 1)];
  if (rows % 128 != 0 || cols % 4 != 0) {
    return Bad(instr, absl::StrCat("a cuDNN scale must be padded to [128k, 4j], got ", s.shape.ToString(false)));
  }
  Value out = Value::Zeros(s.shape);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t r1 = r / 128, r2 = (r % 128) / 32, r3 = r % 32;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t c1 = c / 4, c2 = c % 4;
        const int64_t from = ((((b * (rows / 128) + r1) * (cols / 4) + c1) * 32 + r3) * 4 + r2) * 4 + c2;
        out.SetDouble((b * rows + r) * cols + c, s.GetDouble(from));
      }
    }
  }
  return out;
}

absl::StatusOr<Value> CudnnBlockScaledDotCall(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 4 && ops.size() != 5) return Bad(instr, "expects 4 or 5 operands");
  const Shape& rs = instr.shape();
  if (!rs.IsTuple() || rs.tuple_shapes.size() != 2 || !rs.tuple_shapes[0].IsArray()) {
    return Bad(instr, "the result must be (result, u8[0] scratch)");
  }
  const Value& lhs = *ops[0];
  const Value& rhs = *ops[1];
  std::optional<int64_t> lb = CudnnBlockSize(lhs.shape.element_type, ops[2]->shape.element_type);
  std::optional<int64_t> rb = CudnnBlockSize(rhs.shape.element_type, ops[3]->shape.element_type);
  if (!lb || !rb || *lb != *rb) return Bad(instr, "the operand and scale types are not an MXFP8 or NVFP4 pair");
  if (lhs.shape.rank() < 2 || lhs.shape.dims.back() % *lb != 0) {
    return Bad(instr, "the contracting dim is not a multiple of the block size");
  }
  ASSIGN_OR_RETURN(Value ls, Unswizzle(instr, *ops[2]));
  ASSIGN_OR_RETURN(Value rsc, Unswizzle(instr, *ops[3]));
  ASSIGN_OR_RETURN(Value d, ScaledDot(instr, lhs, rhs, &ls, &rsc, ops.size() == 5 ? ops[4].get() : nullptr,
                                      *lb, rs.tuple_shapes[0]));
  Value r;
  r.shape = rs;
  r.elements = {Share(std::move(d)), Share(Value::Zeros(rs.tuple_shapes[1]))};
  return r;
}

}  // namespace

void RegisterBlockScaledCustomCalls() {
  RegisterCustomCallEvaluator(std::string(kQuantizeTarget), QuantizeCall);
  RegisterCustomCallEvaluator(std::string(kDequantizeTarget), DequantizeCall);
  RegisterCustomCallEvaluator(std::string(kBlockScaledDotTarget), BlockScaledDotCall);
  RegisterCustomCallEvaluator(std::string(kCudnnBlockScaledDotTarget), CudnnBlockScaledDotCall);
}

}  // namespace weave::eval
