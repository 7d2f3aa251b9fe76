// The all-gather loop builder of the windowed einsum decomposer (spmd-windowed-einsum.md §2).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spmd/windowed_einsum_emitter.h"
#include "spmd/windowed_einsum_plan.h"

namespace weave::windowed_einsum {

absl::Status BuildAgLoop(DecomposerContext& ctx, const AgPlan& p) {
  HloInstruction* dot = p.dot;
  HloComputation* comp = dot->parent();
  HloInstruction* x = p.ag->operand(0);
  HloInstruction* lhs0 = p.side == 0 ? x : dot->operand(0);
  HloInstruction* rhs0 = p.side == 1 ? x : dot->operand(1);
  const Shape& out_shape = dot->shape();
  const int64_t n = p.ring.size();
  const bool unrolled = n % 2 == 0;
  Shape tuple_shape = Shape::Tuple(
      {lhs0->shape(), rhs0->shape(), out_shape, out_shape, Shape::Scalar(PrimitiveType::U32)});

  // Body.
  HloComputation* body = NewComputation(ctx.module, kBodyAg);
  Emitter b(body);
  HloInstruction* param = b.Param(tuple_shape, "param");
  HloInstruction* l = b.Gte(param, 0, "lhs");
  HloInstruction* r = b.Gte(param, 1, "rhs");
  HloInstruction* out = b.Gte(param, 2, "out");
  HloInstruction* extra = b.Gte(param, 3, "extra");
  HloInstruction* k = b.Gte(param, 4, "k");
  HloInstruction* win = p.side == 0 ? l : r;
  HloInstruction* stat = p.side == 0 ? r : l;
  RingValues v = EmitRingValues(b, p.ring, p.block);
  auto step = [&](HloInstruction* window, HloInstruction* kk, HloInstruction* acc,
                  const std::string& tag) -> HloInstruction* {
    HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
    if (p.batch) {
      std::vector<int64_t> sizes = stat->shape().dims;
      sizes[static_cast<size_t>(p.stat_dim)] = p.block;
      HloInstruction* sl = b.DynamicSlice(stat, OffsetsAt(v, stat->shape().rank(), p.stat_dim, off),
                                          sizes, absl::StrCat("stationary", tag));
      HloInstruction* part =
          b.DotLike(*dot, p.side == 0 ? window : sl, p.side == 0 ? sl : window,
                    WithDim(out_shape, p.out_dim, p.block), absl::StrCat("part", tag));
      return b.Dus(acc, part, OffsetsAt(v, out_shape.rank(), p.out_dim, off),
                   absl::StrCat("acc", tag));
    }
    if (!p.contracting) {
      Shape part_shape = WithDim(out_shape, p.out_dim, p.block);
      HloInstruction* part =
          b.DotLike(*dot, p.side == 0 ? window : stat, p.side == 0 ? stat : window, part_shape,
                    absl::StrCat("part", tag));
      return b.Dus(acc, part, OffsetsAt(v, out_shape.rank(), p.out_dim, off),
                   absl::StrCat("acc", tag));
    }
    std::vector<int64_t> sizes = stat->shape().dims;
    sizes[static_cast<size_t>(p.stat_dim)] = p.block;
    HloInstruction* sl = b.DynamicSlice(stat, OffsetsAt(v, stat->shape().rank(), p.stat_dim, off),
                                        sizes, absl::StrCat("stationary", tag));
    HloInstruction* part = b.DotLike(*dot, p.side == 0 ? window : sl, p.side == 0 ? sl : window,
                                     out_shape, absl::StrCat("part", tag));
    return b.Binary(HloOpcode::kAdd, acc, part, absl::StrCat("acc", tag));
  };
  HloInstruction* next_window;
  HloInstruction* new_out;
  HloInstruction* new_k;
  if (unrolled) {
    auto pairs = p.ring.ShiftPairs(-1);
    HloInstruction* s1 = b.Permute(win, pairs, ctx.NextChannel(), "shard1");
    HloInstruction* out1 = step(win, k, out, "0");
    HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
    HloInstruction* s2 = b.Permute(s1, pairs, ctx.NextChannel(), "shard2");
    new_out = step(s1, k1, out1, "1");
    new_k = b.Binary(HloOpcode::kAdd, k1, v.one, "k2");
    next_window = s2;
  } else {
    new_out = step(win, k, out, "0");
    new_k = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
    HloInstruction* more = b.Compare(new_k, v.n, ComparisonDirection::kLt, "more");
    next_window = EmitGuardedPermute(ctx.module, b, more, win, p.ring.ShiftPairs(-1),
                                     ctx.NextChannel(), "shard1");
  }
  body->set_root(
      b.Tuple({p.side == 0 ? next_window : l, p.side == 1 ? next_window : r, new_out, extra, new_k},
              "next_state"));
  HloComputation* cond = EmitCondition(ctx.module, kCondAg, tuple_shape, n);

  // Loop in the dot's computation.
  Emitter e(comp);
  HloInstruction* z = e.Zeros(out_shape, "windowed_out_init");
  HloInstruction* z2 = e.Zeros(out_shape, "windowed_extra_init");
  HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
  HloInstruction* init = e.Tuple({lhs0, rhs0, z, z2, k0}, "windowed_init");
  HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {init}, "windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  HloInstruction* res = e.Gte(loop, 2, absl::StrCat(dot->name(), ".windowed"));

  std::string msg = absl::StrCat(
      "all-gather '", p.ag->name(), "' (dim ", p.ag->dimensions[0], ") on the ",
      p.side == 0 ? "lhs" : "rhs", " -> AG loop '", loop->name(), "' (body '", body->name(), "'), ",
      p.batch
          ? absl::StrCat("batch: stationary operand sliced on batch dim ", p.stat_dim,
                         ", blocks written to output dim ", p.out_dim, " with dynamic-update-slice")
      : p.contracting ? absl::StrCat("contracting: stationary operand sliced on dim ", p.stat_dim,
                                     ", partial dots accumulated with add")
                      : absl::StrCat("non-contracting: blocks written to output dim ", p.out_dim,
                                     " with dynamic-update-slice"),
      ", over ", RingText(p.ring), ", ", unrolled ? "unrolled by 2" : "rolled (odd ring)");
  std::string carried = CarriedText(x);
  if (!carried.empty()) absl::StrAppend(&msg, "; windowed ", carried);
  std::string carried_stat = CarriedText(p.side == 0 ? rhs0 : lhs0);
  if (!carried_stat.empty()) absl::StrAppend(&msg, "; stationary ", carried_stat);
  absl::StrAppend(&msg, p.note);
  ctx.remark(dot->name(), true, msg);

  HloInstruction* ag = p.ag;
  auto s = FinishReplace(ctx, dot, res);
  if (!s.ok()) return s;
  if (ag->user_count() == 0 && !ag->IsRoot()) {
    ctx.removed.insert(ag);
    s = comp->RemoveInstruction(ag);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weave::windowed_einsum
