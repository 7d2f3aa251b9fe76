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

// An operand as the ring loop carries it: a plain scalar-scale dequantization travels as FP8 with
// its scale (`dq` set, `value` its FP8 operand).
struct Carried {
  HloInstruction* value = nullptr;
  std::optional<DequantMatch> dq;
};

// The ring loop's state: lhs, rhs, result, u32 k, the dequantization scales of the operands
// carried as FP8, then the carry scales of FP8-carried operands (per-row / per-channel: the
// decomposer's carry).
struct RingLayout {
  Carried carried[2];
  int64_t dq_scale_index[2] = {-1, -1};  // state index of side s's dequantization scale, or -1
  std::vector<HloInstruction*> scales;   // the carry scales, in state order
  std::vector<int64_t> scale_index[2];   // per step of side s's carry: its scale's index, or -1
  int64_t first_scale = 0;               // state index of scales[0]
  Shape tuple_shape;
};

// The carried operands of `p` (their views built in `comp`, lhs first) and the state layout of
// its ring loop, whose result element has `acc_shape`.
RingLayout PlanRingLayout(HloComputation* comp, const RsPlan& p, const Shape& acc_shape) {
  RingLayout layout;
  Carried* carried = layout.carried;
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
  // State: lhs, rhs, result, u32 k, dequantization scales, carry scales.
  std::vector<Shape> elems = {carried[0].value->shape(), carried[1].value->shape(), acc_shape,
                              Shape::Scalar(PrimitiveType::U32)};
  for (int s = 0; s < 2; ++s) {
    if (!carried[s].dq) continue;
    layout.dq_scale_index[s] = static_cast<int64_t>(elems.size());
    elems.push_back(carried[s].dq->scale->shape());
  }
  layout.first_scale = static_cast<int64_t>(elems.size());
  for (int s = 0; s < 2; ++s) {
    for (const ElementwiseStep& st : (s == 0 ? p.lhs : p.rhs).steps) {
      if (st.kind != ElementwiseStep::Kind::kScale) {
        layout.scale_index[s].push_back(-1);
        continue;
      }
      layout.scale_index[s].push_back(layout.first_scale +
                                      static_cast<int64_t>(layout.scales.size()));
      layout.scales.push_back(st.scale);
      elems.push_back(st.scale->shape());
    }
  }
  layout.tuple_shape = Shape::Tuple(elems);
  return layout;
}

// The ring loop's body as it is built: the plan, the state layout, what the body reads from its
// parameter and the ring values. Build() emits the whole body, in the order of the loop
// described in the header.
struct RingBody {
  RingBody(DecomposerContext& ctx, const RsPlan& p, const RingLayout& layout,
           const Shape& acc_shape, HloComputation* body)
      : ctx(ctx), p(p), layout(layout), acc_shape(acc_shape), body(body), b(body) {}

  // Emits the body: the state read, the N partial blocks, their sum and the next state (root).
  void Build();
  // The parameter and its elements (lhs, rhs, k, the dequantization and carry scales), then the
  // ring values.
  void ReadState();
  // Operand `s` of a partial dot from `value` (the carried lhs or rhs): sliced at `off` when it
  // is the sliced side, dequantized when carried as FP8, then rebuilt from its carry.
  HloInstruction* Operand(int s, HloInstruction* value, HloInstruction* off,
                          const std::string& tag);
  // The partial dot of each block t = 1 .. N-1, then 0 (each on its own operation queue), each
  // foreign one permuted straight to its owner into *received; returns the own block's (t = 0).
  HloInstruction* EmitPartialBlocks(std::vector<HloInstruction*>* received);
  // `own` plus the `received` blocks, as one loop fusion (`own` alone when nothing is received).
  HloInstruction* SumBlocks(HloInstruction* own, const std::vector<HloInstruction*>& received);

  DecomposerContext& ctx;
  const RsPlan& p;
  const RingLayout& layout;
  const Shape& acc_shape;
  HloComputation* body;
  Emitter b;
  HloInstruction* l = nullptr;
  HloInstruction* r = nullptr;
  HloInstruction* k = nullptr;
  HloInstruction* dq_scale[2] = {nullptr, nullptr};
  std::vector<HloInstruction*> scale_gte;
  RingValues v;
};

void RingBody::Build() {
  ReadState();
  std::vector<HloInstruction*> received;
  HloInstruction* own = EmitPartialBlocks(&received);
  HloInstruction* sum = SumBlocks(own, received);
  HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
  std::vector<HloInstruction*> ops = {l, r, sum, k1};
  for (int s = 0; s < 2; ++s) {
    if (dq_scale[s] != nullptr) ops.push_back(dq_scale[s]);
  }
  ops.insert(ops.end(), scale_gte.begin(), scale_gte.end());
  body->set_root(b.Tuple(ops, "next_state"));
}

void RingBody::ReadState() {
  HloInstruction* param = b.Param(layout.tuple_shape, "param");
  l = b.Gte(param, 0, "lhs");
  r = b.Gte(param, 1, "rhs");
  k = b.Gte(param, 3, "k");
  for (int s = 0; s < 2; ++s) {
    if (layout.dq_scale_index[s] >= 0) {
      dq_scale[s] = b.Gte(param, layout.dq_scale_index[s], "dq_scale");
    }
  }
  for (size_t i = 0; i < layout.scales.size(); ++i) {
    scale_gte.push_back(b.Gte(param, layout.first_scale + static_cast<int64_t>(i),
                              layout.scales[i]->name() + ".gte"));
  }
  v = EmitRingValues(b, p.ring, p.block);
}

HloInstruction* RingBody::Operand(int s, HloInstruction* value, HloInstruction* off,
                                  const std::string& tag) {
  const OperandCarry& c = s == 0 ? p.lhs : p.rhs;
  const Carried& carried = layout.carried[s];
  if (p.sliced_side == s) {
    std::vector<int64_t> sizes = value->shape().dims;
    sizes[static_cast<size_t>(p.sliced_dim)] = p.block;
    value = b.DynamicSlice(value, OffsetsAt(v, value->shape().rank(), p.sliced_dim, off), sizes,
                           absl::StrCat("slice", tag));
  }
  if (carried.dq) {
    Shape wide = value->shape();
    wide.element_type = carried.dq->wide_type;
    value = BuildDequantize(body, value, dq_scale[s], carried.dq->is_divide,
                            carried.dq->wide_type, wide);
  }
  std::vector<HloInstruction*> sc;
  for (int64_t i : layout.scale_index[s]) {
    sc.push_back(i < 0 ? nullptr : scale_gte[static_cast<size_t>(i - layout.first_scale)]);
  }
  return RebuildOperand(b, c, value, sc, off, v, p.block, tag);
}

HloInstruction* RingBody::EmitPartialBlocks(std::vector<HloInstruction*>* received) {
  const int64_t n = p.ring.size();
  if (ctx.max_queue_id < 0) {
    ctx.max_queue_id = MaxOperationQueueId(*ctx.module);
  }
  int64_t& queue = ctx.max_queue_id;
  HloInstruction* own = nullptr;
  for (int64_t step = 1; step <= n; ++step) {
    const int64_t t = step % n;  // the foreign blocks first, the partition's own block last
    const std::string tag = absl::StrCat(t);
    HloInstruction* kk = b.ConstInt(PrimitiveType::U32, t, absl::StrCat("blockshift", t));
    HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
    HloInstruction* part = b.DotLike(*p.dot, Operand(0, l, off, tag), Operand(1, r, off, tag),
                                     acc_shape.element_type, absl::StrCat("part", tag));
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
    received->push_back(recv);
  }
  return own;
}

HloInstruction* RingBody::SumBlocks(HloInstruction* own,
                                    const std::vector<HloInstruction*>& received) {
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
  return sum;
}

// The ring loop's condition: k < 1 (one trip).
HloComputation* EmitRingCondition(HloModule* m, const Shape& tuple_shape) {
  HloComputation* cond = NewComputation(m, kCondRsRing);
  Emitter e(cond);
  HloInstruction* cp = e.Param(tuple_shape, "param");
  HloInstruction* ck = e.Gte(cp, 3, "k");
  HloInstruction* trips = e.ConstInt(PrimitiveType::U32, 1, "trips");
  cond->set_root(e.Compare(ck, trips, ComparisonDirection::kLt, "more"));
  return cond;
}

// The applied remark of the ring loop `loop` (body `body`) built for `p`.
std::string RingRemark(const RsPlan& p, const RingLayout& layout, const HloInstruction* loop,
                       const HloComputation* body) {
  const int64_t n = p.ring.size();
  std::string msg = absl::StrCat(
      CollectiveKind(p.reduce) == HloOpcode::kReduceScatter
          ? (AsyncStartOf(p.reduce) != nullptr ? CollectiveText(p.reduce) : "reduce-scatter")
          : absl::StrCat(CollectiveText(p.reduce), " + dynamic-slice"),
      " of dot '", p.dot->name(), "' (dim ", p.out_dim, ") -> RS ring loop '", loop->name(),
      "' (body '", body->name(), "'), ", p.sliced_side == 0 ? "lhs" : "rhs", " sliced on dim ",
      p.sliced_dim, ", over ", RingText(p.ring), ": ", n - 1,
      " partial blocks sent straight to their owners and summed there (", n - 1,
      " transfers of one block, where XLA's layout moves ", n % 2 == 0 && n > 2 ? n + 1 : n - 1,
      ")");
  for (int s = 0; s < 2; ++s) {
    if (layout.carried[s].dq) {
      absl::StrAppend(&msg, s == 0 ? "; lhs" : "; rhs", " carried as ",
                      std::string(PrimitiveTypeName(layout.carried[s].dq->fp8_type)),
                      " and dequantized after its slice");
    }
  }
  absl::StrAppend(&msg, p.note);
  return msg;
}

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
  const Shape acc_shape = WithDim(dot->shape(), p.out_dim, p.block);
  // Carried operands: a plain scalar-scale dequantization travels as FP8 with its scale.
  const RingLayout layout = PlanRingLayout(comp, p, acc_shape);
  const Carried* carried = layout.carried;

  HloComputation* body = NewComputation(ctx.module, kBodyRsRing);
  RingBody(ctx, p, layout, acc_shape, body).Build();
  HloComputation* cond = EmitRingCondition(ctx.module, layout.tuple_shape);

  Emitter e(comp);
  HloInstruction* buffer = e.Add(HloOpcode::kCustomCall, acc_shape, {}, "windowed_result_buffer");
  buffer->set_custom_call_target("AllocateBuffer");
  HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
  std::vector<HloInstruction*> init_ops = {carried[0].value, carried[1].value, buffer, k0};
  for (int s = 0; s < 2; ++s) {
    if (carried[s].dq) init_ops.push_back(carried[s].dq->scale);
  }
  init_ops.insert(init_ops.end(), layout.scales.begin(), layout.scales.end());
  HloInstruction* init = e.Tuple(init_ops, "windowed_init");
  HloInstruction* loop = e.Add(HloOpcode::kWhile, layout.tuple_shape, {init}, "windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  loop->backend_config = "{\"known_trip_count\":{\"n\":\"1\"}}";
  HloInstruction* res = e.Gte(loop, 2, absl::StrCat(p.result->name(), ".windowed"));
  for (const ViewStep& s : p.result_views) {
    res = comp->AddInstruction(s.instr->CloneWithNewOperands(
        s.shape.WithElementType(res->shape().element_type), {res}, ".shard"));
  }
  ctx.remark(p.result->name(), true, RingRemark(p, layout, loop, body));

  std::vector<HloInstruction*> seeds(p.result->operands().begin(), p.result->operands().end());
  RETURN_IF_ERROR(FinishReplace(ctx, p.result, res));
  return RemoveDeadChains(ctx, seeds);
}

}  // namespace weave::windowed_einsum
