// The ring layout of the reduce-scatter windowed einsum (see the header).
#include "windowed_einsum/windowed_einsum_rs_ring.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/dequantize.h"
#include "passes/gpu_backend_config.h"
#include "windowed_einsum/windowed_einsum_emitter.h"
#include "hlo/status_macros.h"

namespace weave::windowed_einsum {
namespace {

constexpr char kBodyRsRing[] = "windowed_dot_general_body_rs_ring";
constexpr char kCondRsRing[] = "windowed_dot_general_cond_rs_ring";

}  // namespace

bool CanBuildRsRingLoop(const RsPlan& p, std::string* why) {
  if (p.sliced_side == 2) {
    *why = "the ring layout does not slice both operands (reduce-scatter over a batch dim)";
    return false;
  }
  if (p.ring.size() < 2) {
    *why = "a ring of one partition";
    return false;
  }
  return true;
}

absl::Status BuildRsRingLoop(DecomposerContext& ctx, const RsPlan& p) {
  HloInstruction* dot = p.dot;
  HloComputation* comp = p.result->parent();
  const int64_t n = p.ring.size();
  const Shape acc_shape = WithDim(dot->shape(), p.out_dim, p.block);
  // Carried operands: a plain scalar-scale dequantization travels as FP8 with its scale.
  struct Carried {
    HloInstruction* value = nullptr;
    std::optional<DequantMatch> dq;
  };
  Carried carried[2];
  for (int s = 0; s < 2; ++s) {
    const OperandCarry& c = s == 0 ? p.lhs : p.rhs;
    HloInstruction* v = BuildCarriedValue(comp, c);
    if (c.steps.empty()) {
      if (std::optional<DequantMatch> d = MatchDequantize(v); d && IsScalarScale(*d)) {
        carried[s].dq = d;
        v = d->q;
      }
    }
    carried[s].value = v;
  }
  // Scales of FP8-carried operands (per-row / per-channel: the decomposer's carry).
  std::vector<HloInstruction*> scales;
  std::vector<int64_t> scale_index[2];
  // State: lhs, rhs, result, u32 k, dequantization scales, carry scales.
  std::vector<Shape> elems = {carried[0].value->shape(), carried[1].value->shape(), acc_shape,
                              Shape::Scalar(PrimitiveType::U32)};
  int64_t dq_scale_index[2] = {-1, -1};
  for (int s = 0; s < 2; ++s) {
    if (!carried[s].dq) continue;
    dq_scale_index[s] = static_cast<int64_t>(elems.size());
    elems.push_back(carried[s].dq->scale->shape());
  }
  const int64_t first_scale = static_cast<int64_t>(elems.size());
  for (int s = 0; s < 2; ++s) {
    for (const ElementwiseStep& st : (s == 0 ? p.lhs : p.rhs).steps) {
      if (st.kind != ElementwiseStep::Kind::kScale) {
        scale_index[s].push_back(-1);
        continue;
      }
      scale_index[s].push_back(first_scale + static_cast<int64_t>(scales.size()));
      scales.push_back(st.scale);
      elems.push_back(st.scale->shape());
    }
  }
  const Shape tuple_shape = Shape::Tuple(elems);

  HloComputation* body = NewComputation(ctx.module, kBodyRsRing);
  Emitter b(body);
  HloInstruction* param = b.Param(tuple_shape, "param");
  HloInstruction* l = b.Gte(param, 0, "lhs");
  HloInstruction* r = b.Gte(param, 1, "rhs");
  HloInstruction* k = b.Gte(param, 3, "k");
  HloInstruction* dq_scale[2] = {nullptr, nullptr};
  for (int s = 0; s < 2; ++s) {
    if (dq_scale_index[s] >= 0) dq_scale[s] = b.Gte(param, dq_scale_index[s], "dq_scale");
  }
  std::vector<HloInstruction*> scale_gte;
  for (size_t i = 0; i < scales.size(); ++i) {
    scale_gte.push_back(
        b.Gte(param, first_scale + static_cast<int64_t>(i), scales[i]->name() + ".gte"));
  }
  RingValues v = EmitRingValues(b, p.ring, p.block);
  auto operand = [&](int s, HloInstruction* value, HloInstruction* off, const std::string& tag) {
    const OperandCarry& c = s == 0 ? p.lhs : p.rhs;
    if (p.sliced_side == s) {
      std::vector<int64_t> sizes = value->shape().dims;
      sizes[static_cast<size_t>(p.sliced_dim)] = p.block;
      value = b.DynamicSlice(value, OffsetsAt(v, value->shape().rank(), p.sliced_dim, off), sizes,
                             absl::StrCat("slice", tag));
    }
    if (carried[s].dq) {
      Shape wide = value->shape();
      wide.element_type = carried[s].dq->wide_type;
      value = BuildDequantize(body, value, dq_scale[s], carried[s].dq->is_divide,
                              carried[s].dq->wide_type, wide);
    }
    std::vector<HloInstruction*> sc;
    for (int64_t i : scale_index[s]) {
      sc.push_back(i < 0 ? nullptr : scale_gte[static_cast<size_t>(i - first_scale)]);
    }
    return RebuildOperand(b, c, value, sc, off, v, p.block, tag);
  };
  if (ctx.max_queue_id < 0) {
    ctx.max_queue_id = MaxOperationQueueId(*ctx.module);
  }
  int64_t& queue = ctx.max_queue_id;
  HloInstruction* own = nullptr;
  std::vector<HloInstruction*> received;
  for (int64_t step = 1; step <= n; ++step) {
    const int64_t t = step % n;  // the foreign blocks first, the partition's own block last
    const std::string tag = absl::StrCat(t);
    HloInstruction* kk = b.ConstInt(PrimitiveType::U32, t, absl::StrCat("blockshift", t));
    HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
    HloInstruction* part = b.DotLike(*dot, operand(0, l, off, tag), operand(1, r, off, tag),
                                     acc_shape, absl::StrCat("part", tag));
    GpuBackendConfigEditor cfg(kDefaultXlaBackendConfig);
    cfg.set_operation_queue_id(++queue);
    cfg.ApplyTo(part);
    if (t == 0) {
      own = part;
      continue;
    }
    HloInstruction* recv = b.Permute(part, p.ring.ShiftPairs(t), ctx.NextChannel(),
                                     absl::StrCat("to_owner", t));
    GpuBackendConfigEditor pcfg(kDefaultXlaBackendConfig);
    pcfg.set_force_earliest_schedule(true);
    pcfg.ApplyTo(recv);
    received.push_back(recv);
  }
  // The N blocks are summed by one loop fusion (read N blocks, write one), as XLA's fusion would
  // make of an add chain: separate adds would each read and write the whole block again.
  HloInstruction* sum = own;
  if (!received.empty()) {
    HloComputation* adder = NewComputation(ctx.module, "windowed_rs_ring_sum");
    Emitter a(adder);
    HloInstruction* total = a.Param(acc_shape, "block0");
    for (size_t j = 0; j < received.size(); ++j) {
      HloInstruction* next = a.Param(acc_shape, absl::StrCat("block", j + 1));
      total = a.Binary(HloOpcode::kAdd, total, next, absl::StrCat("total", j + 1));
    }
    adder->set_root(total);
    std::vector<HloInstruction*> blocks = {own};
    blocks.insert(blocks.end(), received.begin(), received.end());
    sum = b.Add(HloOpcode::kFusion, acc_shape, blocks, "sum_blocks");
    sum->set_fusion_kind("kLoop");
    sum->mutable_called_computations()->push_back(adder);
  }
  HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
  std::vector<HloInstruction*> ops = {l, r, sum, k1};
  for (int s = 0; s < 2; ++s) {
    if (dq_scale[s] != nullptr) ops.push_back(dq_scale[s]);
  }
  ops.insert(ops.end(), scale_gte.begin(), scale_gte.end());
  body->set_root(b.Tuple(ops, "next_state"));

  HloComputation* cond = NewComputation(ctx.module, kCondRsRing);
  {
    Emitter e(cond);
    HloInstruction* cp = e.Param(tuple_shape, "param");
    HloInstruction* ck = e.Gte(cp, 3, "k");
    HloInstruction* trips = e.ConstInt(PrimitiveType::U32, 1, "trips");
    cond->set_root(e.Compare(ck, trips, ComparisonDirection::kLt, "more"));
  }

  Emitter e(comp);
  HloInstruction* buffer = e.Add(HloOpcode::kCustomCall, acc_shape, {}, "windowed_result_buffer");
  buffer->set_custom_call_target("AllocateBuffer");
  HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
  std::vector<HloInstruction*> init_ops = {carried[0].value, carried[1].value, buffer, k0};
  for (int s = 0; s < 2; ++s) {
    if (carried[s].dq) init_ops.push_back(carried[s].dq->scale);
  }
  init_ops.insert(init_ops.end(), scales.begin(), scales.end());
  HloInstruction* init = e.Tuple(init_ops, "windowed_init");
  HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {init}, "windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  loop->backend_config = "{\"known_trip_count\":{\"n\":\"1\"}}";
  HloInstruction* res = e.Gte(loop, 2, absl::StrCat(p.result->name(), ".windowed"));
  for (const ViewStep& s : p.result_views) {
    res = comp->AddInstruction(s.instr->CloneWithNewOperands(
        s.shape.WithElementType(res->shape().element_type), {res}, ".shard"));
  }

  std::string msg = absl::StrCat(
      CollectiveKind(p.reduce) == HloOpcode::kReduceScatter
          ? (AsyncStartOf(p.reduce) != nullptr ? CollectiveText(p.reduce) : "reduce-scatter")
          : absl::StrCat(CollectiveText(p.reduce), " + dynamic-slice"),
      " of dot '", dot->name(), "' (dim ", p.out_dim, ") -> RS ring loop '", loop->name(),
      "' (body '", body->name(), "'), ", p.sliced_side == 0 ? "lhs" : "rhs", " sliced on dim ",
      p.sliced_dim, ", over ", RingText(p.ring), ": ", n - 1,
      " partial blocks sent straight to their owners and summed there (", n - 1,
      " transfers of one block, where XLA's layout moves ", n % 2 == 0 && n > 2 ? n + 1 : n - 1,
      ")");
  for (int s = 0; s < 2; ++s) {
    if (carried[s].dq) {
      absl::StrAppend(&msg, s == 0 ? "; lhs" : "; rhs", " carried as ",
                      std::string(PrimitiveTypeName(carried[s].dq->fp8_type)),
                      " and dequantized after its slice");
    }
  }
  absl::StrAppend(&msg, p.note);
  ctx.remark(p.result->name(), true, msg);

  std::vector<HloInstruction*> seeds(p.result->operands().begin(), p.result->operands().end());
  RETURN_IF_ERROR(FinishReplace(ctx, p.result, res));
  return RemoveDeadChains(ctx, seeds);
}

}  // namespace weave::windowed_einsum
