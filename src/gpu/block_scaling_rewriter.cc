// block-scaling-rewriter (contract in the header).
#include "gpu/block_scaling_rewriter.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpu/fp8_gemm_rewriter.h"
#include "hlo/builders.h"
#include "hlo/block_scaled_call.h"
#include "hlo/ir.h"
#include "hlo/status_macros.h"

namespace weave {

// Builds one call's replacement in its computation, instructions named after the call.
class BlockScalingLowering {
 public:
  // Builds into `into` (the call's computation, or a fusion computation whose parameters stand
  // for the call's operands: `operands`).
  BlockScalingLowering(const BlockScalingRewriter& pass, HloInstruction* call, HloComputation* into,
                       std::vector<HloInstruction*> operands)
      : pass_(pass), call_(call), comp_(into), base_(call->name()), ops_(std::move(operands)) {}

  // The replacement, or nullopt with *why when the call does not fit XLA's checks.
  std::optional<HloInstruction*> Quantize(std::string* why);
  std::optional<HloInstruction*> Dequantize(std::string* why);
  std::optional<HloInstruction*> Dot(std::string* why, std::string* form);

 private:
  HloInstruction* Add(HloOpcode op, Shape s, std::vector<HloInstruction*> ops, const std::string& suffix) {
    return comp_->AddInstruction(op, std::move(s), std::move(ops), base_ + "." + suffix);
  }
  HloInstruction* Scalar(PrimitiveType t, double v, const std::string& suffix) {
    HloInstruction* c = Add(HloOpcode::kConstant, Shape(t, {}), {}, suffix);
    c->literal = Literal::Scalar(t, v);
    return c;
  }
  HloInstruction* Convert(HloInstruction* x, PrimitiveType t, const std::string& suffix) {
    return Add(HloOpcode::kConvert, Shape(t, x->shape().dims), {x}, suffix);
  }
  HloInstruction* Broadcast(HloInstruction* x, std::vector<int64_t> dims, std::vector<int64_t> map,
                            const std::string& suffix) {
    return AddBroadcast(comp_, x, Shape(x->shape().element_type, std::move(dims)), std::move(map),
                        base_ + "." + suffix);
  }
  HloInstruction* Reshape(HloInstruction* x, std::vector<int64_t> dims, const std::string& suffix) {
    return Add(HloOpcode::kReshape, Shape(x->shape().element_type, std::move(dims)), {x}, suffix);
  }
  HloInstruction* SliceTo(HloInstruction* x, const std::vector<int64_t>& limits, const std::string& suffix) {
    HloInstruction* s = Add(HloOpcode::kSlice, Shape(x->shape().element_type, limits), {x}, suffix);
    for (int64_t l : limits) s->mutable_slice()->push_back(SliceDim{0, l, 1});
    return s;
  }
  HloInstruction* PadTo(HloInstruction* x, const std::vector<int64_t>& dims, const std::string& suffix) {
    const PrimitiveType t = x->shape().element_type;
    // E8M0 has no zero: pad with its smallest code, 2^-127 (what JAX pads scales with).
    HloInstruction* v = Scalar(t, t == PrimitiveType::F8E8M0FNU ? std::ldexp(1.0, -127) : 0.0, suffix + "_value");
    HloInstruction* p = Add(HloOpcode::kPad, Shape(t, dims), {x, v}, suffix);
    for (size_t d = 0; d < dims.size(); ++d) {
      p->mutable_padding()->push_back(PadDim{0, dims[d] - x->shape().dims[d], 0});
    }
    return p;
  }
  // convert<T>(q) * reshape(broadcast(convert<T>(s))): XLA's BuildDequantize.
  HloInstruction* DequantizeOf(HloInstruction* q, HloInstruction* s, int64_t block, PrimitiveType t,
                               const std::string& side) {
    HloInstruction* qc = Convert(q, t, side + "cvt");
    HloInstruction* sc = Convert(s, t, side + "scale_cvt");
    std::vector<int64_t> blocks = s->shape().dims;
    blocks.push_back(block);
    std::vector<int64_t> map(s->shape().dims.size());
    for (size_t d = 0; d < map.size(); ++d) map[d] = static_cast<int64_t>(d);
    HloInstruction* bc = Broadcast(sc, blocks, map, side + "scale_bc");
    HloInstruction* rs = Reshape(bc, q->shape().dims, side + "scale_rs");
    return Add(HloOpcode::kMultiply, Shape(t, q->shape().dims), {qc, rs}, side + "dequantized");
  }
  HloComputation* AmaxComputation(PrimitiveType t);
  // One side of the cuDNN call: the data padded to rows % 128 == 0, and its scale padded or
  // cropped to [those rows, a multiple of 4 blocks] and swizzled.
  struct CudnnInput { HloInstruction* data; HloInstruction* scale; };
  CudnnInput CudnnSide(HloInstruction* data, HloInstruction* scale, const std::string& side);

  // The operands of a block-scaled dot: data [B?, M, K] and [B?, N, K] (`rank` 2 or 3), their
  // scales (the rhs's may be null) and the global scale (or null).
  struct DotOperands {
    HloInstruction* lhs;
    HloInstruction* rhs;
    HloInstruction* ls;
    HloInstruction* rs;
    HloInstruction* global;
    int64_t rank;
  };
  // Steps of Dot. The operands, when their shapes and the result's fit XLA's checks; else nullopt
  // with *why.
  std::optional<DotOperands> DotShapes(std::string* why);
  // The block size, when K divides into blocks and each scale covers its data's blocks; else
  // nullopt with *why.
  std::optional<int64_t> DotBlockSize(const DotOperands& o, std::string* why);
  // Why cuDNN's block-scaled GEMM cannot take the dot (target, cuDNN version, types, block size,
  // layouts), or "".
  std::string NoCudnnReason(const DotOperands& o, int64_t block) const;
  // The cuDNN block-scaled GEMM call and the value read from it (global scale, crop to the
  // result); *form describes it.
  HloInstruction* CudnnDot(const DotOperands& o, int64_t block, std::string* form);
  // The expansion: each scaled operand dequantized, a dot in the result type, the global scale.
  HloInstruction* DequantizedDot(const DotOperands& o, int64_t block);

  const BlockScalingRewriter& pass_;
  HloInstruction* operand(int64_t i) const { return ops_[static_cast<size_t>(i)]; }
  HloInstruction* call_;
  HloComputation* comp_;
  std::string base_;
  std::vector<HloInstruction*> ops_;
};

HloComputation* BlockScalingLowering::AmaxComputation(PrimitiveType t) {
  auto c = std::make_unique<HloComputation>(absl::StrCat("amax.", std::string(PrimitiveTypeName(t))));
  const Shape s(t, {});
  HloInstruction* a = c->AddParameter(s, "a");
  HloInstruction* b = c->AddParameter(s, "b");
  HloComputation* raw = call_->parent()->parent()->AddComputation(std::move(c));
  HloInstruction* aa = raw->AddInstruction(HloOpcode::kAbs, s, {a}, "abs_a");
  HloInstruction* ab = raw->AddInstruction(HloOpcode::kAbs, s, {b}, "abs_b");
  raw->set_root(raw->AddInstruction(HloOpcode::kMaximum, s, {aa, ab}, "max"));
  return raw;
}

std::optional<HloInstruction*> BlockScalingLowering::Quantize(std::string* why) {
  const Shape& out = call_->shape();
  if (static_cast<int64_t>(ops_.size()) != 1 || !out.IsTuple() || out.tuple_shapes.size() != 2 ||
      operand(0)->shape().dims != out.tuple_shapes[0].dims) {
    *why = "not a quantize of one array into (data of its dims, scales)";
    return std::nullopt;
  }
  const Shape& qs = out.tuple_shapes[0];
  const Shape& ss = out.tuple_shapes[1];
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(qs, ss);
  if (!block.ok()) {
    *why = std::string(block.status().message());
    return std::nullopt;
  }
  for (size_t d = 0; d + 1 < qs.dims.size(); ++d) {
    if (qs.dims[d] != ss.dims[d]) {
      *why = "data and scale dims differ before the last";
      return std::nullopt;
    }
  }
  HloInstruction* x = operand(0);
  const PrimitiveType t = x->shape().element_type;
  std::vector<int64_t> blocks = ss.dims;
  blocks.push_back(*block);
  HloInstruction* xb = Reshape(x, blocks, "blocks");
  HloInstruction* zero = Scalar(t, 0, "zero");
  HloInstruction* amax = Add(HloOpcode::kReduce, Shape(t, ss.dims), {xb, zero}, "amax");
  amax->dimensions = {static_cast<int64_t>(ss.dims.size())};
  *amax->mutable_called_computations() = {AmaxComputation(t)};
  HloInstruction* emax = Broadcast(Scalar(t, QuantizeEmax(qs.element_type), "emax"), ss.dims, {}, "emax_bc");
  HloInstruction* norm = Add(HloOpcode::kDivide, Shape(t, ss.dims), {amax, emax}, "amax_norm");
  HloInstruction* scale = Convert(norm, ss.element_type, "scale");
  HloInstruction* scale_t = Convert(scale, t, "scale_cvt");
  std::vector<int64_t> map(ss.dims.size());
  for (size_t d = 0; d < map.size(); ++d) map[d] = static_cast<int64_t>(d);
  HloInstruction* bc = Broadcast(scale_t, blocks, map, "scale_bc");
  HloInstruction* wide = Reshape(bc, x->shape().dims, "scale_rs");
  HloInstruction* div = Add(HloOpcode::kDivide, x->shape(), {x, wide}, "scaled");
  HloInstruction* q = Convert(div, qs.element_type, "quantized");
  return Add(HloOpcode::kTuple, out, {q, scale}, "tuple");
}

std::optional<HloInstruction*> BlockScalingLowering::Dequantize(std::string* why) {
  if (static_cast<int64_t>(ops_.size()) != 2 || !call_->shape().IsArray() ||
      call_->shape().dims != operand(0)->shape().dims) {
    *why = "not a dequantize of (data, scale) to the data's dims";
    return std::nullopt;
  }
  absl::StatusOr<int64_t> block = BlockSizeFromShapes(operand(0)->shape(), operand(1)->shape());
  if (!block.ok()) {
    *why = std::string(block.status().message());
    return std::nullopt;
  }
  for (size_t d = 0; d + 1 < call_->shape().dims.size(); ++d) {
    if (operand(1)->shape().dims[d] != call_->shape().dims[d]) {
      *why = "data and scale dims differ before the last";
      return std::nullopt;
    }
  }
  return DequantizeOf(operand(0), operand(1), *block, call_->shape().element_type, "");
}

BlockScalingLowering::CudnnInput BlockScalingLowering::CudnnSide(HloInstruction* data, HloInstruction* scale,
                                                                 const std::string& side) {
  const int64_t rank = data->shape().rank();
  const int64_t batch = rank == 3 ? data->shape().dims[0] : 1;
  const int64_t rows = data->shape().dims[static_cast<size_t>(rank - 2)];
  const int64_t srows = scale->shape().dims[static_cast<size_t>(rank - 2)];
  const int64_t scols = scale->shape().dims[static_cast<size_t>(rank - 1)];
  auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  const int64_t prow = round_up(rows, 128), pcol = round_up(scols, 4);
  if (rows != prow) {
    std::vector<int64_t> dims = data->shape().dims;
    dims[static_cast<size_t>(rank - 2)] = prow;
    data = PadTo(data, dims, side + "pad");
  }
  // The scale to exactly [prow, pcol]: XLA pads it by prow - srows, cropping a scale padded
  // beyond the data's padded rows (those rows are never read).
  if (srows > prow) {
    std::vector<int64_t> dims = scale->shape().dims;
    dims[static_cast<size_t>(rank - 2)] = prow;
    scale = SliceTo(scale, dims, side + "scale_rows");
  }
  if (std::min(srows, prow) != prow || scols != pcol) {
    std::vector<int64_t> dims = scale->shape().dims;
    dims[static_cast<size_t>(rank - 2)] = prow;
    dims[static_cast<size_t>(rank - 1)] = pcol;
    scale = PadTo(scale, dims, side + "scale_pad");
  }
  const std::vector<int64_t> sdims = scale->shape().dims;
  const int64_t r = sdims[static_cast<size_t>(rank - 2)], c = sdims[static_cast<size_t>(rank - 1)];
  HloInstruction* s6 = Reshape(scale, {batch, r / 128, 4, 32, c / 4, 4}, side + "scale_rs");
  HloInstruction* tr = Add(HloOpcode::kTranspose,
                           Shape(scale->shape().element_type, {batch, r / 128, c / 4, 32, 4, 4}), {s6},
                           side + "scale_tr");
  tr->dimensions = {0, 1, 4, 3, 2, 5};
  return {data, Reshape(tr, sdims, side + "scale_swizzle")};
}

std::optional<BlockScalingLowering::DotOperands> BlockScalingLowering::DotShapes(std::string* why) {
  const int64_t n = static_cast<int64_t>(ops_.size());
  const Shape& out = call_->shape();
  if (n < 3 || n > 5 || !out.IsArray()) {
    *why = "a block-scaled dot takes 3 to 5 operands and gives an array";
    return std::nullopt;
  }
  HloInstruction* lhs = operand(0);
  HloInstruction* rhs = operand(1);
  HloInstruction* ls = operand(2);
  HloInstruction* rs = n >= 4 ? operand(3) : nullptr;
  HloInstruction* global = n == 5 ? operand(4) : nullptr;
  const int64_t rank = lhs->shape().rank();
  const PrimitiveType t = out.element_type;
  std::vector<int64_t> want;
  if (rank == 3) want.push_back(lhs->shape().dims[0]);
  if ((rank != 2 && rank != 3) || rhs->shape().rank() != rank || ls->shape().rank() != rank ||
      (rs != nullptr && rs->shape().rank() != rank) || lhs->shape().dims.back() != rhs->shape().dims.back() ||
      (rank == 3 && rhs->shape().dims[0] != lhs->shape().dims[0])) {
    *why = "lhs, rhs and scales must be [B?, M, K], [B?, N, K] and their scales";
    return std::nullopt;
  }
  want.push_back(lhs->shape().dims[static_cast<size_t>(rank - 2)]);
  want.push_back(rhs->shape().dims[static_cast<size_t>(rank - 2)]);
  if (out.dims != want) {
    *why = "the result shape is not [B?, M, N]";
    return std::nullopt;
  }
  if (global != nullptr && (global->shape().rank() != 0 || global->shape().element_type != t)) {
    *why = "the global scale must be a scalar of the result type";
    return std::nullopt;
  }
  return DotOperands{lhs, rhs, ls, rs, global, rank};
}

std::optional<int64_t> BlockScalingLowering::DotBlockSize(const DotOperands& o, std::string* why) {
  HloInstruction* lhs = o.lhs;
  HloInstruction* rhs = o.rhs;
  HloInstruction* ls = o.ls;
  HloInstruction* rs = o.rs;
  const int64_t rank = o.rank;
  const std::optional<int64_t> configured = ConfiguredBlockSize(*call_);
  absl::StatusOr<int64_t> block = BlockScaledDotBlockSize(*call_);
  if (!block.ok()) {
    *why = std::string(block.status().message());
    return std::nullopt;
  }
  const int64_t k = lhs->shape().dims.back();
  if (k % *block != 0) {
    *why = absl::StrCat("the contracting dim ", k, " is not a multiple of the block size ", *block);
    return std::nullopt;
  }
  for (HloInstruction* s : {ls, rs}) {
    if (s == nullptr) continue;
    HloInstruction* d = s == ls ? lhs : rhs;
    if (s->shape().dims[static_cast<size_t>(rank - 2)] < d->shape().dims[static_cast<size_t>(rank - 2)] ||
        s->shape().dims.back() < k / *block || (rank == 3 && s->shape().dims[0] != d->shape().dims[0])) {
      *why = absl::StrCat("the scale '", s->name(), "' is smaller than its data's ", k / *block, " blocks");
      return std::nullopt;
    }
    if (!configured && s->shape().dims.back() * *block != k) {
      *why = absl::StrCat("the scale '", s->name(), "' does not divide the contracting dim into blocks");
      return std::nullopt;
    }
  }
  return *block;
}

std::string BlockScalingLowering::NoCudnnReason(const DotOperands& o, int64_t block) const {
  HloInstruction* lhs = o.lhs;
  HloInstruction* rhs = o.rhs;
  HloInstruction* ls = o.ls;
  HloInstruction* rs = o.rs;
  std::string no_cudnn;
  const std::optional<int64_t> lb = CudnnBlockSize(lhs->shape().element_type, ls->shape().element_type);
  const std::optional<int64_t> rb = rs ? CudnnBlockSize(rhs->shape().element_type, rs->shape().element_type) : std::nullopt;
  if (pass_.cc_ < 10.0) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", pass_.cc_);
    no_cudnn = absl::StrCat("compute capability ", buf, " < 10.0 has no cuDNN block-scaled GEMM");
  } else if (!pass_.CudnnAtLeast(9, 10)) {
    no_cudnn = absl::StrCat("cuDNN ", pass_.cudnn_major_, ".", pass_.cudnn_minor_, " < 9.10");
  } else if (rs == nullptr) {
    no_cudnn = "the rhs has no scale";
  } else if (!lb || !rb || *lb != *rb ||
             (lhs->shape().element_type == PrimitiveType::F8E5M2 &&
              rhs->shape().element_type == PrimitiveType::F8E5M2)) {
    no_cudnn = "the operand and scale types are not an MXFP8 pair (not e5m2 x e5m2) or an NVFP4 pair";
  } else if (block != *lb) {
    no_cudnn = absl::StrCat("block size ", block, " is not the ", *lb, " cuDNN's kernel uses");
  } else {
    for (HloInstruction* x : {lhs, rhs, ls, rs}) {
      if (!x->shape().HasDefaultLayout()) no_cudnn = absl::StrCat("'", x->name(), "' has a non-default layout");
    }
  }
  return no_cudnn;
}

HloInstruction* BlockScalingLowering::CudnnDot(const DotOperands& o, int64_t block,
                                               std::string* form) {
  const Shape& out = call_->shape();
  const PrimitiveType t = out.element_type;
  const int64_t rank = o.rank;
  HloInstruction* global = o.global;
  CudnnInput l = CudnnSide(o.lhs, o.ls, "lhs_");
  CudnnInput r = CudnnSide(o.rhs, o.rs, "rhs_");
  std::vector<int64_t> dims;
  if (rank == 3) dims.push_back(out.dims[0]);
  dims.push_back(l.data->shape().dims[static_cast<size_t>(rank - 2)]);
  dims.push_back(r.data->shape().dims[static_cast<size_t>(rank - 2)]);
  std::vector<HloInstruction*> ops = {l.data, r.data, l.scale, r.scale};
  const bool global_inside = global != nullptr && pass_.CudnnAtLeast(9, 13);
  if (global_inside) ops.push_back(global);
  const Shape result(t, dims);
  HloInstruction* cc = Add(HloOpcode::kCustomCall, Shape::Tuple({result, Shape(PrimitiveType::U8, {0})}), ops, "cudnn");
  cc->set_custom_call_target(std::string(kCudnnBlockScaledDotTarget));
  HloInstruction* d = Add(HloOpcode::kGetTupleElement, result, {cc}, "result");
  d->tuple_index = 0;
  if (global != nullptr && !global_inside) {
    d = Add(HloOpcode::kMultiply, result, {d, Broadcast(global, dims, {}, "global_bc")}, "global_scaled");
  }
  if (dims != out.dims) d = SliceTo(d, out.dims, "sliced");
  *form = absl::StrCat("cuDNN block-scaled GEMM (", std::string(kCudnnBlockScaledDotTarget), ", block ", block,
                       global == nullptr ? "" : global_inside ? ", global scale in the call" : ", global scale after it",
                       ")");
  return d;
}

HloInstruction* BlockScalingLowering::DequantizedDot(const DotOperands& o, int64_t block) {
  const Shape& out = call_->shape();
  const PrimitiveType t = out.element_type;
  const int64_t rank = o.rank;
  const int64_t k = o.lhs->shape().dims.back();
  auto side = [&](HloInstruction* data, HloInstruction* scale, const std::string& name) -> HloInstruction* {
    if (scale == nullptr) return data;
    std::vector<int64_t> limits = scale->shape().dims;
    limits[static_cast<size_t>(rank - 2)] = data->shape().dims[static_cast<size_t>(rank - 2)];
    limits[static_cast<size_t>(rank - 1)] = k / block;
    if (limits != scale->shape().dims) scale = SliceTo(scale, limits, name + "scale_sl");
    return DequantizeOf(data, scale, block, t, name);
  };
  HloInstruction* a = side(o.lhs, o.ls, "lhs_");
  HloInstruction* b = side(o.rhs, o.rs, "rhs_");
  HloInstruction* d =
      AddDot(comp_, a, b, BlockScaledDotDims(rank), out.element_type, base_ + ".dot", out.layout);
  if (o.global != nullptr) {
    d = Add(HloOpcode::kMultiply, out, {d, Broadcast(o.global, out.dims, {}, "global_bc")}, "global_scaled");
  }
  return d;
}

std::optional<HloInstruction*> BlockScalingLowering::Dot(std::string* why, std::string* form) {
  const std::optional<DotOperands> o = DotShapes(why);
  if (!o) return std::nullopt;
  const std::optional<int64_t> block = DotBlockSize(*o, why);
  if (!block) return std::nullopt;
  // cuDNN, when the target and both operand types allow it.
  const std::string no_cudnn = NoCudnnReason(*o, *block);
  if (no_cudnn.empty()) return CudnnDot(*o, *block, form);
  // The expansion: dequantize each scaled operand, then a dot in the result type.
  HloInstruction* d = DequantizedDot(*o, *block);
  *form = absl::StrCat("dequantize + dot (", no_cudnn, ")");
  return d;
}

absl::StatusOr<bool> BlockScalingRewriter::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    for (HloInstruction* call : comp->MakeInstructionPostOrder()) {
      const BlockScaledKind kind = BlockScaledKindOf(*call);
      if (kind == BlockScaledKind::kNone || kind == BlockScaledKind::kCudnnDot) continue;
      // A quantize or dequantize expands into a kLoop fusion (XLA expands into a call and its
      // fusion passes fuse the elementwise chain; one fused kernel is what runs), a dot inline.
      const bool fused = kind != BlockScaledKind::kDot;
      HloComputation* into = comp;
      std::vector<HloInstruction*> ops(call->operands().begin(), call->operands().end());
      if (fused) {
        into = module->AddComputation(std::make_unique<HloComputation>(call->name() + ".expanded"));
        for (size_t i = 0; i < ops.size(); ++i) {
          ops[i] = into->AddParameter(call->operand(static_cast<int64_t>(i))->shape(), absl::StrCat("p", i));
        }
      }
      BlockScalingLowering lower(*this, call, into, ops);
      std::string why, form;
      std::optional<HloInstruction*> r = kind == BlockScaledKind::kQuantize     ? lower.Quantize(&why)
                                         : kind == BlockScaledKind::kDequantize ? lower.Dequantize(&why)
                                                                                : lower.Dot(&why, &form);
      if (r && fused) {
        into->set_root(*r);
        HloInstruction* f = comp->AddInstruction(HloOpcode::kFusion, call->shape(),
                                                 std::vector<HloInstruction*>(call->operands().begin(), call->operands().end()),
                                                 call->name() + ".fusion");
        f->set_fusion_kind("kLoop");
        f->mutable_called_computations()->push_back(into);
        r = f;
      }
      if (!r && fused) {
        RETURN_IF_ERROR(module->RemoveComputation(into));
      }
      if (!r) {
        AddRemark(call->name(), false, absl::StrCat(call->custom_call_target(), " left as it is: ", why));
        continue;
      }
      const std::string name = call->name();
      RETURN_IF_ERROR(comp->ReplaceInstruction(call, *r));
      changed = true;
      AddRemark(name, true,
                kind == BlockScaledKind::kQuantize     ? "quantize expanded into a kLoop fusion: per-block amax, E8M0 scale, data divided by it"
                : kind == BlockScaledKind::kDequantize ? "dequantize expanded into a kLoop fusion: convert and multiply by the block scales"
                                                       : absl::StrCat("block-scaled dot lowered to ", form));
    }
  }
  return changed;
}

namespace {

absl::StatusOr<std::unique_ptr<HloPass>> MakeBlockScalingRewriter(const PassOptions& options) {
  // A ROCm target (gfx...) has no cuDNN: compute capability 0 for this pass.
  ASSIGN_OR_RETURN(GpuTarget target, GpuTarget::Parse(options.GetString("gpu-compute-capability", "9.0")));
  const double cc = target.rocm ? 0.0 : target.cuda_cc;
  const std::string v = options.GetString("cudnn-version", "9.13");
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &major, &minor) != 2 || major < 0 || minor < 0) {
    return absl::InvalidArgumentError(absl::StrCat("block-scaling-rewriter: cudnn-version '", v,
                                                   "' is not major.minor (e.g. 9.13)"));
  }
  return std::unique_ptr<HloPass>(new BlockScalingRewriter(cc, major, minor));
}

}  // namespace

WEAVE_REGISTER_PASS("block-scaling-rewriter", MakeBlockScalingRewriter);

}  // namespace weave
