// The reduce-scatter loop builder of the windowed einsum decomposer (spmd-windowed-einsum.md §3).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "windowed_einsum/windowed_einsum_emitter.h"
#include "windowed_einsum/windowed_einsum_plan.h"
#include "hlo/status_macros.h"

namespace weave::windowed_einsum {
namespace {

// The RS loop's state after its counter: the scales of the FP8-carried operands' steps.
struct RsScales {
  std::vector<HloInstruction*> scales;  // their init values, in state order from kStateFirstScale
  std::vector<int64_t> scale_index[2];  // per step of side s's carry: its scale's index, or -1
};

// The scales of `p`'s carried operands (lhs steps first), which follow the counter in the state.
RsScales PlanRsScales(const RsPlan& p) {
  RsScales layout;
  std::vector<HloInstruction*>& scales = layout.scales;
  for (int s = 0; s < 2; ++s) {
    for (const ElementwiseStep& st : (s == 0 ? p.lhs : p.rhs).steps) {
      if (st.kind != ElementwiseStep::Kind::kScale) {
        layout.scale_index[s].push_back(-1);
        continue;
      }
      layout.scale_index[s].push_back(kStateFirstScale + static_cast<int64_t>(scales.size()));
      scales.push_back(st.scale);
    }
  }
  return layout;
}

// The RS loop's body as it is built: the plan, the state layout, what the body reads from its
// parameter and the ring values. Build() emits the whole body (spmd-windowed-einsum.md §3).
struct RsBody {
  RsBody(DecomposerContext& ctx, const RsPlan& p, const RsScales& layout, const Shape& acc_shape,
         const Shape& tuple_shape, HloComputation* body)
      : ctx(ctx), p(p), layout(layout), acc_shape(acc_shape), tuple_shape(tuple_shape),
        body(body), b(body) {}

  // Emits the body: the state read, then the unrolled-by-2 steps or the rolled step, whose next
  // state is the root.
  void Build(bool unrolled);
  // The parameter and its elements (lhs, rhs, acc, extra, k, the scales), then the ring values.
  void ReadState();
  // `operand` dynamic-sliced at `off` on `dim` (one block).
  HloInstruction* Slice(HloInstruction* operand, int64_t dim, HloInstruction* off,
                        const std::string& name);
  // Operand s of the step's dot: its slice (if sliced) of the carried value, rebuilt.
  HloInstruction* Operand(int s, HloInstruction* value, HloInstruction* off,
                          const std::string& tag);
  // The partial dot of block (kk + i) % N.
  HloInstruction* Partial(HloInstruction* kk, const std::string& tag);
  // Even rings (N > 2): two accumulators, each sent s -> s-2 after its add; the next state.
  HloInstruction* UnrolledSteps();
  // Odd rings and N = 2: one step, the accumulator permuted unless it is the last trip.
  HloInstruction* RolledStep();

  DecomposerContext& ctx;
  const RsPlan& p;
  const RsScales& layout;
  const Shape& acc_shape;
  const Shape& tuple_shape;
  HloComputation* body;
  Emitter b;
  HloInstruction* l = nullptr;
  HloInstruction* r = nullptr;
  HloInstruction* acc = nullptr;
  HloInstruction* extra = nullptr;
  HloInstruction* k = nullptr;
  std::vector<HloInstruction*> scale_gte;
  RingValues v;
};

void RsBody::Build(bool unrolled) {
  ReadState();
  HloInstruction* root = unrolled ? UnrolledSteps() : RolledStep();
  body->set_root(root);
}

void RsBody::ReadState() {
  WindowedLoopStateReads s = ReadWindowedLoopState(b, tuple_shape, "acc", layout.scales);
  l = s.lhs;
  r = s.rhs;
  acc = s.acc;
  extra = s.extra;
  k = s.k;
  scale_gte = std::move(s.scales);
  v = EmitRingValues(b, p.ring, p.block);
}

HloInstruction* RsBody::Slice(HloInstruction* operand, int64_t dim, HloInstruction* off,
                              const std::string& name) {
  std::vector<int64_t> sizes = operand->shape().dims;
  sizes[static_cast<size_t>(dim)] = p.block;
  return b.DynamicSlice(operand, OffsetsAt(v, operand->shape().rank(), dim, off), sizes, name);
}

HloInstruction* RsBody::Operand(int s, HloInstruction* value, HloInstruction* off,
                                const std::string& tag) {
  const OperandCarry& c = s == 0 ? p.lhs : p.rhs;
  const bool sliced = p.sliced_side == 2 || p.sliced_side == s;
  const int64_t dim = p.sliced_side == 2 && s == 1 ? p.sliced_dim2 : p.sliced_dim;
  if (sliced) {
    value = Slice(value, dim, off,
                  absl::StrCat("slice", tag, s == 1 && p.sliced_side == 2 ? ".rhs" : ""));
  }
  std::vector<HloInstruction*> sc;
  for (int64_t i : layout.scale_index[s])
    sc.push_back(i < 0 ? nullptr : scale_gte[static_cast<size_t>(i - 5)]);
  return RebuildOperand(b, c, value, sc, off, v, p.block, tag);
}

HloInstruction* RsBody::Partial(HloInstruction* kk, const std::string& tag) {
  HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
  return b.DotLike(*p.dot, Operand(0, l, off, tag), Operand(1, r, off, tag),
                   acc_shape.element_type, absl::StrCat("part", tag));
}

HloInstruction* RsBody::UnrolledSteps() {
  auto pairs = p.ring.ShiftPairs(-2);
  HloInstruction* recv_a = b.Permute(acc, pairs, ctx.NextChannel(), "recvA");
  HloInstruction* sum_b = b.Binary(HloOpcode::kAdd, extra, Partial(k, "B"), "sumB");
  HloInstruction* send_b = b.Permute(sum_b, pairs, ctx.NextChannel(), "sendB");
  HloInstruction* two = b.ConstInt(PrimitiveType::U32, 2, "two");
  HloInstruction* k2 = b.Binary(HloOpcode::kAdd, k, two, "k2");
  HloInstruction* k3 = b.Binary(HloOpcode::kAdd, k2, v.one, "k3");
  HloInstruction* new_a = b.Binary(HloOpcode::kAdd, recv_a, Partial(k3, "A"), "newA");
  std::vector<HloInstruction*> ops = {l, r, new_a, send_b, k2};
  ops.insert(ops.end(), scale_gte.begin(), scale_gte.end());
  return b.Tuple(ops, "next_state");
}

HloInstruction* RsBody::RolledStep() {
  HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
  HloInstruction* acc1 = b.Binary(HloOpcode::kAdd, acc, Partial(k1, "0"), "acc1");
  HloInstruction* more = b.Compare(k1, v.n, ComparisonDirection::kLt, "more");
  HloInstruction* next = EmitGuardedPermute(ctx.module, b, more, acc1, p.ring.ShiftPairs(-1),
                                            ctx.NextChannel(), "acc_next");
  std::vector<HloInstruction*> ops = {l, r, next, extra, k1};
  ops.insert(ops.end(), scale_gte.begin(), scale_gte.end());
  return b.Tuple(ops, "next_state");
}

// The applied remark of the RS loop `loop` (body `body`) built for `p`.
std::string RsRemark(const RsPlan& p, const HloInstruction* loop, const HloComputation* body,
                     bool unrolled) {
  const int64_t n = p.ring.size();
  std::string msg = absl::StrCat(
      CollectiveKind(p.reduce) == HloOpcode::kReduceScatter
          ? (AsyncStartOf(p.reduce) != nullptr ? CollectiveText(p.reduce) : "reduce-scatter")
          : absl::StrCat(CollectiveText(p.reduce), " + dynamic-slice"),
      " of dot '", p.dot->name(), "' (dim ", p.out_dim, ") -> RS loop '", loop->name(),
      "' (body '", body->name(), "'), ",
      p.sliced_side == 2
          ? absl::StrCat("lhs and rhs sliced on batch dims ", p.sliced_dim, " and ", p.sliced_dim2)
          : absl::StrCat(p.sliced_side == 0 ? "lhs" : "rhs", " sliced on dim ", p.sliced_dim),
      ", over ", RingText(p.ring), ", ",
      unrolled ? "unrolled by 2 with the shift-and-add after the loop"
      : n == 2 ? "rolled (on a ring of 2 the unrolled layout's s->s-2 shift would be the identity)"
               : "rolled (odd ring)");
  if (!p.result_views.empty()) {
    std::vector<std::string> names;
    for (const ViewStep& s : p.result_views) names.push_back(s.instr->name());
    absl::StrAppend(&msg, "; views moved after the loop onto the scattered block: ",
                    absl::StrJoin(names, ", "));
  }
  for (int s = 0; s < 2; ++s) {
    const OperandCarry& c = s == 0 ? p.lhs : p.rhs;
    if (!c.text.empty()) {
      absl::StrAppend(&msg, "; ", c.text);
      continue;
    }
    std::string carried = CarriedText(c.base);
    if (!carried.empty()) absl::StrAppend(&msg, s == 0 ? "; lhs " : "; rhs ", carried);
  }
  absl::StrAppend(&msg, p.note);
  return msg;
}

}  // namespace

absl::Status BuildRsLoop(DecomposerContext& ctx, const RsPlan& p) {
  HloInstruction* dot = p.dot;
  HloComputation* comp = p.result->parent();
  HloInstruction* lhs0 = BuildCarriedValue(comp, p.lhs);
  HloInstruction* rhs0 = BuildCarriedValue(comp, p.rhs);
  const Shape acc_shape = WithDim(dot->shape(), p.out_dim, p.block);
  const int64_t n = p.ring.size();
  // Even rings: XLA's unrolled-by-2 layout, whose accumulators travel s -> s-2. On a ring of 2
  // that shift is the identity (a collective-permute sending each value to itself): the rolled
  // layout is used instead, which sends the one block that must travel while the second dot runs.
  const bool unrolled = n % 2 == 0 && n > 2;
  // Scales of FP8-carried operands follow the counter.
  const RsScales layout = PlanRsScales(p);
  const std::vector<HloInstruction*>& scales = layout.scales;
  const Shape tuple_shape = WindowedLoopStateShape(lhs0, rhs0, acc_shape, scales);

  HloComputation* body = NewComputation(ctx.module, kBodyRs);
  RsBody(ctx, p, layout, acc_shape, tuple_shape, body).Build(unrolled);
  HloComputation* cond = EmitCondition(ctx.module, kCondRs, tuple_shape, n);

  Emitter e(comp);
  HloInstruction* loop = EmitWindowedLoop(e, lhs0, rhs0, acc_shape, "windowed_acc_init", scales,
                                          tuple_shape, cond, body);
  HloInstruction* res;
  if (unrolled) {
    HloInstruction* end_a = e.Gte(loop, kStateAcc, "windowed_endA");
    HloInstruction* end_b = e.Gte(loop, kStateExtraAcc, "windowed_endB");
    HloInstruction* shifted =
        e.Permute(end_a, p.ring.ShiftPairs(1), ctx.NextChannel(), "windowed_shiftA");
    res = e.Binary(HloOpcode::kAdd, shifted, end_b, absl::StrCat(p.result->name(), ".windowed"));
  } else {
    res = e.Gte(loop, kStateAcc, absl::StrCat(p.result->name(), ".windowed"));
  }
  for (const ViewStep& s : p.result_views) {
    res = comp->AddInstruction(s.instr->CloneWithNewOperands(
        s.shape.WithElementType(res->shape().element_type), {res}, ".shard"));
  }
  ctx.remark(p.result->name(), true, RsRemark(p, loop, body, unrolled),
             CollectiveNames(p.reduce));

  std::vector<HloInstruction*> seeds(p.result->operands().begin(), p.result->operands().end());
  RETURN_IF_ERROR(FinishReplace(ctx, p.result, res));
  return RemoveDeadChains(ctx, seeds);
}

}  // namespace weave::windowed_einsum
