// The all-gather loop builder of the windowed einsum decomposer (spmd-windowed-einsum.md §2).
//
// State: (lhs, rhs, out, extra, u32 k, scale...) where lhs/rhs are the carried operands
// (OperandCarry: the FP8 value when the decomposer carries FP8, views already applied on the
// shard) and the scales the body's dequantizations read follow the counter. Each step rebuilds
// both dot operands from what it holds (the window shard and, for contracting/batch dims, the
// stationary block) and merges its dot into `out` (dynamic-update-slice, or add in f32 for
// contracting dims). Scales that travel with their shard are rotated with the window.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "windowed_einsum/windowed_einsum_emitter.h"
#include "windowed_einsum/windowed_einsum_plan.h"
#include "hlo/status_macros.h"

namespace weave::windowed_einsum {

HloInstruction* BuildCarriedValue(HloComputation* comp, const OperandCarry& c) {
  HloInstruction* v = c.base;
  for (const ViewStep& s : c.views) {
    v = comp->AddInstruction(s.instr->CloneWithNewOperands(
        s.shape.WithElementType(v->shape().element_type), {v}, ".shard"));
  }
  return v;
}

HloInstruction* RebuildOperand(Emitter& b, const OperandCarry& c, HloInstruction* v,
                               const std::vector<HloInstruction*>& scales, HloInstruction* off,
                               const RingValues& ring, int64_t block, const std::string& tag) {
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const ElementwiseStep& s = c.steps[i];
    const std::string name = absl::StrCat(s.instr->name(), tag);
    if (s.kind == ElementwiseStep::Kind::kConvert) {
      v = b.Add(HloOpcode::kConvert, v->shape().WithElementType(s.type), {v}, name);
      continue;
    }
    HloInstruction* sc = scales[i];
    if (s.mode == ElementwiseStep::ScaleMode::kSliced) {
      std::vector<int64_t> sizes = sc->shape().dims;
      sizes[static_cast<size_t>(s.slice_dim)] = block;
      sc = b.DynamicSlice(sc, OffsetsAt(ring, sc->shape().rank(), s.slice_dim, off), sizes,
                          absl::StrCat(name, ".scale"));
    }
    HloInstruction* bc = b.Add(HloOpcode::kBroadcast, v->shape().WithElementType(s.type), {sc},
                               absl::StrCat(name, ".bcast"));
    bc->dimensions = s.scale_dims;
    if (v->shape().element_type != s.type) {
      v = b.Add(HloOpcode::kConvert, v->shape().WithElementType(s.type), {v},
                absl::StrCat(name, ".cvt"));
    }
    if (s.divide) {
      v = b.Add(HloOpcode::kDivide, bc->shape(), {v, bc}, name);
    } else if (s.scale_first) {
      v = b.Add(HloOpcode::kMultiply, bc->shape(), {bc, v}, name);
    } else {
      v = b.Add(HloOpcode::kMultiply, bc->shape(), {v, bc}, name);
    }
  }
  return v;
}

namespace {

// Scale state elements of one carry (from kStateFirstScale, after the 5 elements of XLA's
// layout): for each step, the tuple index of its scale (-1: none).
std::vector<int64_t> AppendScales(const OperandCarry& c, std::vector<HloInstruction*>* init) {
  std::vector<int64_t> idx;
  for (const ElementwiseStep& s : c.steps) {
    if (s.kind != ElementwiseStep::Kind::kScale) {
      idx.push_back(-1);
      continue;
    }
    idx.push_back(kStateFirstScale + static_cast<int64_t>(init->size()));
    init->push_back(s.scale);
  }
  return idx;
}

// The AG loop's state after its counter: the scales of the window's and the stationary operand's
// steps (`extra_init`, their init values), with each step's tuple index.
struct AgScales {
  std::vector<HloInstruction*> extra_init;
  std::vector<int64_t> wscale;  // per step of the window's carry: its scale's index, or -1
  std::vector<int64_t> sscale;  // per step of the stationary operand's carry
};

// The state a body's step ends with: the next window, out and k, and the scales that travelled
// with the window (by state index).
struct AgNextState {
  HloInstruction* window = nullptr;
  HloInstruction* out = nullptr;
  HloInstruction* k = nullptr;
  std::map<int64_t, HloInstruction*> travelled;
};

// The AG loop's body as it is built: the plan, the state layout, what the body reads from its
// parameter and the ring values. Build() emits the whole body (module header comment).
struct AgBody {
  AgBody(DecomposerContext& ctx, const AgPlan& p, const AgScales& scales, const Shape& acc_shape,
         const Shape& tuple_shape, HloComputation* body)
      : ctx(ctx), p(p), scales(scales), acc_shape(acc_shape), tuple_shape(tuple_shape),
        body(body), b(body) {}

  // Emits the body: the state read, the step(s) (unrolled by 2 on even rings, else one step
  // and a guarded permute), and the next state (root).
  void Build(bool unrolled);
  // The parameter and its elements (lhs, rhs, out, extra, k, the scales), then the ring values.
  void ReadState();
  // The scales of carry `c`'s steps (`idx`: their state indices): each step's travelled scale
  // when it has one, else its state element; nullptr for a convert.
  std::vector<HloInstruction*> ScalesOf(const OperandCarry& c, const std::vector<int64_t>& idx,
                                        const std::map<int64_t, HloInstruction*>& travelled);
  // One step: both operands rebuilt at block (kk + i) % N (the stationary one sliced on
  // contracting and batch dims), their dot merged into `acc`; returns the new accumulator.
  HloInstruction* Step(HloInstruction* window, const std::map<int64_t, HloInstruction*>& travelled,
                       HloInstruction* kk, HloInstruction* acc, const std::string& tag);
  // Even rings: two steps, the window (and its travelling scales `t0`) permuted twice.
  AgNextState UnrolledSteps(const std::map<int64_t, HloInstruction*>& t0);
  // Odd rings: one step, the window permuted unless it is the last trip.
  AgNextState RolledStep(const std::map<int64_t, HloInstruction*>& t0);

  DecomposerContext& ctx;
  const AgPlan& p;
  const AgScales& scales;
  const Shape& acc_shape;
  const Shape& tuple_shape;
  HloComputation* body;
  Emitter b;
  HloInstruction* l = nullptr;
  HloInstruction* r = nullptr;
  HloInstruction* out = nullptr;
  HloInstruction* extra = nullptr;
  HloInstruction* k = nullptr;
  std::vector<HloInstruction*> scale_gte;
  HloInstruction* win = nullptr;   // the window (l or r)
  HloInstruction* stat = nullptr;  // the stationary operand
  RingValues v;
};

void AgBody::Build(bool unrolled) {
  ReadState();
  // Window scales that rotate with the shard.
  std::vector<int64_t> travelling;
  for (size_t i = 0; i < p.window.steps.size(); ++i) {
    if (scales.wscale[i] >= 0 &&
        p.window.steps[i].mode == ElementwiseStep::ScaleMode::kTravels) {
      travelling.push_back(scales.wscale[i]);
    }
  }
  std::map<int64_t, HloInstruction*> t0;
  for (int64_t i : travelling) t0[i] = scale_gte[static_cast<size_t>(i - kStateFirstScale)];
  const AgNextState next = unrolled ? UnrolledSteps(t0) : RolledStep(t0);
  std::vector<HloInstruction*> root = {p.side == 0 ? next.window : l,
                                       p.side == 1 ? next.window : r, next.out, extra, next.k};
  for (size_t i = 0; i < scales.extra_init.size(); ++i) {
    auto it = next.travelled.find(kStateFirstScale + static_cast<int64_t>(i));
    root.push_back(it != next.travelled.end() ? it->second : scale_gte[i]);
  }
  body->set_root(b.Tuple(root, "next_state"));
}

void AgBody::ReadState() {
  WindowedLoopStateReads s = ReadWindowedLoopState(b, tuple_shape, "out", scales.extra_init);
  l = s.lhs;
  r = s.rhs;
  out = s.acc;
  extra = s.extra;
  k = s.k;
  scale_gte = std::move(s.scales);
  win = p.side == 0 ? l : r;
  stat = p.side == 0 ? r : l;
  v = EmitRingValues(b, p.ring, p.block);
}

std::vector<HloInstruction*> AgBody::ScalesOf(
    const OperandCarry& c, const std::vector<int64_t>& idx,
    const std::map<int64_t, HloInstruction*>& travelled) {
  std::vector<HloInstruction*> sc;
  for (size_t i = 0; i < c.steps.size(); ++i) {
    if (idx[i] < 0) {
      sc.push_back(nullptr);
      continue;
    }
    auto it = travelled.find(idx[i]);
    sc.push_back(it != travelled.end() ? it->second
                                       : scale_gte[static_cast<size_t>(idx[i] - 5)]);
  }
  return sc;
}

HloInstruction* AgBody::Step(HloInstruction* window,
                             const std::map<int64_t, HloInstruction*>& travelled,
                             HloInstruction* kk, HloInstruction* acc, const std::string& tag) {
  HloInstruction* dot = p.dot;
  HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
  HloInstruction* wop = RebuildOperand(
      b, p.window, window, ScalesOf(p.window, scales.wscale, travelled), off, v, p.block, tag);
  // The stationary operand: rebuilt whole, then sliced (contracting and batch dims).
  HloInstruction* sop = RebuildOperand(b, p.stationary, stat,
                                       ScalesOf(p.stationary, scales.sscale, {}), off, v,
                                       p.block, tag);
  if (p.batch || p.contracting) {
    std::vector<int64_t> sizes = sop->shape().dims;
    sizes[static_cast<size_t>(p.stat_dim)] = p.block;
    sop = b.DynamicSlice(sop, OffsetsAt(v, sop->shape().rank(), p.stat_dim, off), sizes,
                         absl::StrCat("stationary", tag));
  }
  HloInstruction* lo = p.side == 0 ? wop : sop;
  HloInstruction* ro = p.side == 0 ? sop : wop;
  if (p.contracting) {
    HloInstruction* part =
        b.DotLike(*dot, lo, ro, acc_shape.element_type, absl::StrCat("part", tag));
    return b.Binary(HloOpcode::kAdd, acc, part, absl::StrCat("acc", tag));
  }
  HloInstruction* part =
      b.DotLike(*dot, lo, ro, acc_shape.element_type, absl::StrCat("part", tag));
  return b.Dus(acc, part, OffsetsAt(v, acc_shape.rank(), p.out_dim, off),
               absl::StrCat("acc", tag));
}

AgNextState AgBody::UnrolledSteps(const std::map<int64_t, HloInstruction*>& t0) {
  AgNextState next;
  std::map<int64_t, HloInstruction*> t1;
  std::map<int64_t, HloInstruction*>& t2 = next.travelled;
  auto pairs = p.ring.ShiftPairs(-1);
  HloInstruction* s1 = b.Permute(win, pairs, ctx.NextChannel(), "shard1");
  for (auto& [i, s] : t0) t1[i] = b.Permute(s, pairs, ctx.NextChannel(), "shard_scale1");
  HloInstruction* out1 = Step(win, t0, k, out, "0");
  HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
  HloInstruction* s2 = b.Permute(s1, pairs, ctx.NextChannel(), "shard2");
  for (auto& [i, s] : t1) t2[i] = b.Permute(s, pairs, ctx.NextChannel(), "shard_scale2");
  next.out = Step(s1, t1, k1, out1, "1");
  next.k = b.Binary(HloOpcode::kAdd, k1, v.one, "k2");
  next.window = s2;
  return next;
}

AgNextState AgBody::RolledStep(const std::map<int64_t, HloInstruction*>& t0) {
  AgNextState next;
  std::map<int64_t, HloInstruction*>& t2 = next.travelled;
  next.out = Step(win, t0, k, out, "0");
  next.k = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
  HloInstruction* more = b.Compare(next.k, v.n, ComparisonDirection::kLt, "more");
  next.window = EmitGuardedPermute(ctx.module, b, more, win, p.ring.ShiftPairs(-1),
                                   ctx.NextChannel(), "shard1");
  for (auto& [i, s] : t0) {
    t2[i] = EmitGuardedPermute(ctx.module, b, more, s, p.ring.ShiftPairs(-1), ctx.NextChannel(),
                               "shard_scale1");
  }
  return next;
}

// The applied remark of the AG loop `loop` (body `body`) built for `p`.
std::string AgRemark(const AgPlan& p, const HloInstruction* loop, const HloComputation* body,
                     bool unrolled) {
  const Shape& out_shape = p.dot->shape();
  std::string msg = absl::StrCat(
      CollectiveText(p.ag), " (dim ", CollectiveAttributes(p.ag)->dimensions[0], ") on the ",
      p.side == 0 ? "lhs" : "rhs", " -> AG loop '", loop->name(), "' (body '", body->name(), "'), ",
      p.batch
          ? absl::StrCat("batch: stationary operand sliced on batch dim ", p.stat_dim,
                         ", blocks written to output dim ", p.out_dim, " with dynamic-update-slice")
      : p.contracting
          ? absl::StrCat("contracting: stationary operand sliced on dim ", p.stat_dim,
                         ", partial dots accumulated with add",
                         p.acc_type != out_shape.element_type
                             ? absl::StrCat(" in ", std::string(PrimitiveTypeName(p.acc_type)),
                                            " (converted to ",
                                            std::string(PrimitiveTypeName(out_shape.element_type)),
                                            " once after the loop)")
                             : "")
          : absl::StrCat("non-contracting: blocks written to output dim ", p.out_dim,
                         " with dynamic-update-slice"),
      ", over ", RingText(p.ring), ", ", unrolled ? "unrolled by 2" : "rolled (odd ring)");
  if (!p.window.views.empty()) {
    std::vector<std::string> names;
    for (const ViewStep& s : p.window.views) names.push_back(s.instr->name());
    absl::StrAppend(&msg, "; views moved onto the shard: ", absl::StrJoin(names, ", "));
  }
  if (!p.window.text.empty()) {
    absl::StrAppend(&msg, "; ", p.window.text);
    if (!p.stationary.text.empty()) absl::StrAppend(&msg, "; ", p.stationary.text);
  } else {
    std::string carried = CarriedText(p.window.base);
    if (!carried.empty()) absl::StrAppend(&msg, "; windowed ", carried);
    std::string carried_stat = CarriedText(p.stationary.base);
    if (!carried_stat.empty()) absl::StrAppend(&msg, "; stationary ", carried_stat);
  }
  absl::StrAppend(&msg, p.note);
  return msg;
}

}  // namespace

absl::Status BuildAgLoop(DecomposerContext& ctx, const AgPlan& p) {
  HloInstruction* dot = p.dot;
  HloComputation* comp = dot->parent();
  HloInstruction* win0 = BuildCarriedValue(comp, p.window);
  HloInstruction* stat0 = BuildCarriedValue(comp, p.stationary);
  HloInstruction* lhs0 = p.side == 0 ? win0 : stat0;
  HloInstruction* rhs0 = p.side == 1 ? win0 : stat0;
  const Shape& out_shape = dot->shape();
  const Shape acc_shape = out_shape.WithElementType(p.acc_type);
  const int64_t n = p.ring.size();
  const bool unrolled = n % 2 == 0;
  AgScales scales;
  std::vector<HloInstruction*>& extra_init = scales.extra_init;
  scales.wscale = AppendScales(p.window, &extra_init);
  scales.sscale = AppendScales(p.stationary, &extra_init);
  const Shape tuple_shape = WindowedLoopStateShape(lhs0, rhs0, acc_shape, extra_init);

  // Body.
  HloComputation* body = NewComputation(ctx.module, kBodyAg);
  AgBody(ctx, p, scales, acc_shape, tuple_shape, body).Build(unrolled);
  HloComputation* cond = EmitCondition(ctx.module, kCondAg, tuple_shape, n);

  // Loop in the dot's computation.
  Emitter e(comp);
  HloInstruction* loop = EmitWindowedLoop(e, lhs0, rhs0, acc_shape, "windowed_out_init",
                                          extra_init, tuple_shape, cond, body);
  HloInstruction* res;
  if (p.acc_type != out_shape.element_type) {
    HloInstruction* acc = e.Gte(loop, kStateAcc, absl::StrCat(dot->name(), ".windowed.acc"));
    res = e.Add(HloOpcode::kConvert, out_shape, {acc}, absl::StrCat(dot->name(), ".windowed"));
  } else {
    res = e.Gte(loop, kStateAcc, absl::StrCat(dot->name(), ".windowed"));
  }
  ctx.remark(dot->name(), true, AgRemark(p, loop, body, unrolled), CollectiveNames(p.ag));

  std::vector<HloInstruction*> seeds(dot->operands().begin(), dot->operands().end());
  RETURN_IF_ERROR(FinishReplace(ctx, dot, res));
  return RemoveDeadChains(ctx, seeds);
}

}  // namespace weave::windowed_einsum
