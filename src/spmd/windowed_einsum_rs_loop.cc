// The reduce-scatter loop builder of the windowed einsum decomposer (spmd-windowed-einsum.md §3).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spmd/windowed_einsum_emitter.h"
#include "spmd/windowed_einsum_plan.h"

namespace weave::windowed_einsum {

absl::Status BuildRsLoop(DecomposerContext& ctx, const RsPlan& p) {
  HloInstruction* dot = p.dot;
  HloComputation* comp = p.result->parent();
  HloInstruction* lhs0 = dot->operand(0);
  HloInstruction* rhs0 = dot->operand(1);
  Shape acc_shape = p.result->shape();
  acc_shape.element_type = dot->shape().element_type;
  const int64_t n = p.ring.size();
  // Even rings: XLA's unrolled-by-2 layout, whose accumulators travel s -> s-2. On a ring of 2
  // that shift is the identity (a collective-permute sending each value to itself): the rolled
  // layout is used instead, which sends the one block that must travel while the second dot runs.
  const bool unrolled = n % 2 == 0 && n > 2;
  Shape tuple_shape = Shape::Tuple(
      {lhs0->shape(), rhs0->shape(), acc_shape, acc_shape, Shape::Scalar(PrimitiveType::U32)});

  HloComputation* body = NewComputation(ctx.module, kBodyRs);
  Emitter b(body);
  HloInstruction* param = b.Param(tuple_shape, "param");
  HloInstruction* l = b.Gte(param, 0, "lhs");
  HloInstruction* r = b.Gte(param, 1, "rhs");
  HloInstruction* acc = b.Gte(param, 2, "acc");
  HloInstruction* extra = b.Gte(param, 3, "extra");
  HloInstruction* k = b.Gte(param, 4, "k");
  RingValues v = EmitRingValues(b, p.ring, p.block);
  auto slice = [&](HloInstruction* operand, int64_t dim, HloInstruction* off,
                   const std::string& name) {
    std::vector<int64_t> sizes = operand->shape().dims;
    sizes[static_cast<size_t>(dim)] = p.block;
    return b.DynamicSlice(operand, OffsetsAt(v, operand->shape().rank(), dim, off), sizes, name);
  };
  auto partial = [&](HloInstruction* kk, const std::string& tag) -> HloInstruction* {
    HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
    HloInstruction* lo = l;
    HloInstruction* ro = r;
    if (p.sliced_side == 0) {
      lo = slice(l, p.sliced_dim, off, absl::StrCat("slice", tag));
    } else if (p.sliced_side == 1) {
      ro = slice(r, p.sliced_dim, off, absl::StrCat("slice", tag));
    } else {
      lo = slice(l, p.sliced_dim, off, absl::StrCat("slice", tag));
      ro = slice(r, p.sliced_dim2, off, absl::StrCat("slice", tag, ".rhs"));
    }
    return b.DotLike(*dot, lo, ro, acc_shape, absl::StrCat("part", tag));
  };
  HloInstruction* root;
  if (unrolled) {
    auto pairs = p.ring.ShiftPairs(-2);
    HloInstruction* recv_a = b.Permute(acc, pairs, ctx.NextChannel(), "recvA");
    HloInstruction* sum_b = b.Binary(HloOpcode::kAdd, extra, partial(k, "B"), "sumB");
    HloInstruction* send_b = b.Permute(sum_b, pairs, ctx.NextChannel(), "sendB");
    HloInstruction* two = b.ConstInt(PrimitiveType::U32, 2, "two");
    HloInstruction* k2 = b.Binary(HloOpcode::kAdd, k, two, "k2");
    HloInstruction* k3 = b.Binary(HloOpcode::kAdd, k2, v.one, "k3");
    HloInstruction* new_a = b.Binary(HloOpcode::kAdd, recv_a, partial(k3, "A"), "newA");
    root = b.Tuple({l, r, new_a, send_b, k2}, "next_state");
  } else {
    HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
    HloInstruction* acc1 = b.Binary(HloOpcode::kAdd, acc, partial(k1, "0"), "acc1");
    HloInstruction* more = b.Compare(k1, v.n, ComparisonDirection::kLt, "more");
    HloInstruction* next = EmitGuardedPermute(ctx.module, b, more, acc1, p.ring.ShiftPairs(-1),
                                              ctx.NextChannel(), "acc_next");
    root = b.Tuple({l, r, next, extra, k1}, "next_state");
  }
  body->set_root(root);
  HloComputation* cond = EmitCondition(ctx.module, kCondRs, tuple_shape, n);

  Emitter e(comp);
  HloInstruction* z = e.Zeros(acc_shape, "windowed_acc_init");
  HloInstruction* z2 = e.Zeros(acc_shape, "windowed_extra_init");
  HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
  HloInstruction* init = e.Tuple({lhs0, rhs0, z, z2, k0}, "windowed_init");
  HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {init}, "windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  HloInstruction* res;
  if (unrolled) {
    HloInstruction* end_a = e.Gte(loop, 2, "windowed_endA");
    HloInstruction* end_b = e.Gte(loop, 3, "windowed_endB");
    HloInstruction* shifted =
        e.Permute(end_a, p.ring.ShiftPairs(1), ctx.NextChannel(), "windowed_shiftA");
    res = e.Binary(HloOpcode::kAdd, shifted, end_b, absl::StrCat(p.result->name(), ".windowed"));
  } else {
    res = e.Gte(loop, 2, absl::StrCat(p.result->name(), ".windowed"));
  }

  std::string msg = absl::StrCat(
      p.reduce->opcode() == HloOpcode::kReduceScatter
          ? "reduce-scatter"
          : absl::StrCat("all-reduce '", p.reduce->name(), "' + dynamic-slice"),
      " of dot '", dot->name(), "' (dim ", p.out_dim, ") -> RS loop '", loop->name(), "' (body '",
      body->name(), "'), ",
      p.sliced_side == 2
          ? absl::StrCat("lhs and rhs sliced on batch dims ", p.sliced_dim, " and ", p.sliced_dim2)
          : absl::StrCat(p.sliced_side == 0 ? "lhs" : "rhs", " sliced on dim ", p.sliced_dim),
      ", over ", RingText(p.ring), ", ",
      unrolled ? "unrolled by 2 with the shift-and-add after the loop"
      : n == 2 ? "rolled (on a ring of 2 the unrolled layout's s->s-2 shift would be the identity)"
               : "rolled (odd ring)");
  std::string c0 = CarriedText(lhs0), c1 = CarriedText(rhs0);
  if (!c0.empty()) absl::StrAppend(&msg, "; lhs ", c0);
  if (!c1.empty()) absl::StrAppend(&msg, "; rhs ", c1);
  absl::StrAppend(&msg, p.note);
  ctx.remark(p.result->name(), true, msg);

  HloInstruction* reduce = p.reduce;
  HloInstruction* result = p.result;
  auto s = FinishReplace(ctx, result, res);
  if (!s.ok()) return s;
  if (reduce != result) {
    ctx.removed.insert(reduce);
    s = comp->RemoveInstruction(reduce);
    if (!s.ok()) return s;
  }
  ctx.removed.insert(dot);
  return comp->RemoveInstruction(dot);
}

}  // namespace weave::windowed_einsum
