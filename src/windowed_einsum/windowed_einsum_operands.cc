// The operands of a windowed einsum loop: what the decomposer finds between a collective and its
// dot, and how each dot operand is carried in the loop state and rebuilt in the body
// (windowed_einsum_plan.h: TraceGatheredOperand, PlanAgOperands, MapView*).
//
// Views. A reshape, transpose, copy or bitcast between an all-gather and its dot (or between a
// dot and its reduce-scatter, vLLM's `bmm` + `view`) is moved across the collective onto the
// shard when the collective's dim stays whole through it: each block of the gathered dim maps to
// a whole number of rows of one dim of the view's result. Otherwise the remark names the view and
// the dim it breaks.
//
// FP8. The ring carries the narrowest value there is: for `all-gather(dequant(q, s))`,
// `dequant(all-gather(q), s)` (what XLA's collective quantizer emits) and `convert(all-gather(q))`
// alike, the loop carries q and every step's dot reads the dequantization of its shard:
//  - a scale applied before the all-gather belongs to its shard: a scalar proven the same on every
//    partition stays in the loop state; otherwise (partition-dependent, per-row, per-channel) it
//    travels round the ring with its shard;
//  - a scale applied after the all-gather belongs to the partition that applies it: it stays in
//    the state, dynamic-sliced at each step's block when it spans the gathered dim; when it is
//    itself the all-gather of a scale sharded with the data (same dim, same groups), the shard's
//    scale travels with it;
//  - the stationary operand's dequantization moves into the body as well (its scale stays, sliced
//    with the operand in contracting and batch loops), so the body's dots read scaled FP8 on both
//    sides, as the FP8 GEMM rewriter needs.
// Where the windowed einsum handler would move the dequantization in itself (both operands
// dequantized with scalar scales, the window's scale proven equal on every partition: XLA's
// layout), the decomposer leaves the dequantizations in the init tuple, as XLA's partitioner does.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "windowed_einsum/windowed_einsum_plan.h"

namespace weave::windowed_einsum {
namespace {

bool IsViewOp(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kCopy:
      return i->operand_count() == 1;
    case HloOpcode::kBitcast:
      return i->operand_count() == 1 &&
             i->shape().element_type == i->operand(0)->shape().element_type;
    default:
      return false;
  }
}

// multiply/divide whose operand `1 - *chain` is a broadcast (the scale): sets *chain to the
// operand that continues the data path.
bool IsScaling(const HloInstruction* i, int* chain) {
  if (i->operand_count() != 2 || !i->shape().IsArray()) return false;
  if (i->opcode() == HloOpcode::kDivide) {
    if (i->operand(1)->opcode() != HloOpcode::kBroadcast) return false;
    *chain = 0;
    return true;
  }
  if (i->opcode() != HloOpcode::kMultiply) return false;
  for (int c = 0; c < 2; ++c) {
    if (i->operand(1 - c)->opcode() == HloOpcode::kBroadcast &&
        i->operand(1 - c)->operand_count() == 1 &&
        i->operand(c)->opcode() != HloOpcode::kBroadcast) {
      *chain = c;
      return true;
    }
  }
  return false;
}

bool IsConvertOp(const HloInstruction* i) {
  return i->opcode() == HloOpcode::kConvert && i->operand_count() == 1 && i->shape().IsArray();
}

std::string OpText(const HloInstruction* i) {
  return absl::StrCat(std::string(HloOpcodeString(i->opcode())), " '", i->name(), "'");
}

// Consecutive dim groups of equal element count between a reshape's operand and result:
// {in_begin, in_end, out_begin, out_end} (half-open). Size-1 dims join the group before them.
struct DimGroup {
  int64_t in_begin, in_end, out_begin, out_end;
};
std::vector<DimGroup> ReshapeGroups(const std::vector<int64_t>& in,
                                    const std::vector<int64_t>& out) {
  std::vector<DimGroup> groups;
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    DimGroup g{static_cast<int64_t>(i), static_cast<int64_t>(i), static_cast<int64_t>(j),
               static_cast<int64_t>(j)};
    int64_t pi = 1, po = 1;
    if (i < in.size()) pi = in[i++];
    if (j < out.size()) po = out[j++];
    while (pi != po && (i < in.size() || j < out.size())) {
      if ((pi < po && i < in.size()) || j >= out.size()) {
        pi *= in[i++];
      } else {
        po *= out[j++];
      }
    }
    // Trailing size-1 dims belong to this group.
    while (i < in.size() && in[i] == 1 && (j >= out.size() || out[j] != 1)) ++i;
    while (j < out.size() && out[j] == 1 && (i >= in.size() || in[i] != 1)) ++j;
    g.in_end = static_cast<int64_t>(i);
    g.out_end = static_cast<int64_t>(j);
    groups.push_back(g);
  }
  return groups;
}

// Maps a blocked dim through a reshape from `in` to `out` dims: `dim` of `in`, split in n blocks,
// must be the first non-1 dim of its group, and the group's first non-1 dim of `out` must split
// in n blocks too (then block i of `dim` is block i of that dim). Sets *mapped, or *why.
bool MapReshapeDim(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int64_t dim,
                   int64_t n, int64_t* mapped, std::string* why, const char* in_word,
                   const char* out_word) {
  for (const DimGroup& g : ReshapeGroups(in, out)) {
    if (dim < g.in_begin || dim >= g.in_end) continue;
    for (int64_t i = g.in_begin; i < dim; ++i) {
      if (in[static_cast<size_t>(i)] != 1) {
        *why = absl::StrCat("merges ", in_word, " dim ", dim, " (split in ", n,
                            " blocks) under the more major dim ", i, " (size ",
                            in[static_cast<size_t>(i)], "): the blocks interleave in ", out_word,
                            " dim ", g.out_begin);
        return false;
      }
    }
    int64_t o = g.out_begin;
    while (o < g.out_end && out[static_cast<size_t>(o)] == 1) ++o;
    if (o >= g.out_end) {
      *why = absl::StrCat("maps ", in_word, " dim ", dim, " to size-1 dims");
      return false;
    }
    if (out[static_cast<size_t>(o)] % n != 0) {
      std::vector<std::string> sizes;
      for (int64_t k = g.out_begin; k < g.out_end; ++k) {
        sizes.push_back(absl::StrCat(out[static_cast<size_t>(k)]));
      }
      *why = absl::StrCat("splits ", in_word, " dim ", dim, " (", n, " blocks of ",
                          in[static_cast<size_t>(dim)] / n, ") into ", out_word, " dims [",
                          absl::StrJoin(sizes, ","), "]: ", out_word, " dim ", o, " (size ",
                          out[static_cast<size_t>(o)], ") is not a whole number of blocks");
      return false;
    }
    *mapped = o;
    return true;
  }
  *why = absl::StrCat("has no dim ", dim);
  return false;
}

}  // namespace

std::string NonWindowedReader(HloInstruction* result) {
  std::vector<std::pair<HloInstruction*, int>> work{{result, 0}};
  absl::flat_hash_set<const HloInstruction*> seen;
  while (!work.empty()) {
    auto [v, depth] = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    if (v->IsRoot()) return absl::StrCat("the root of '", v->parent()->name(), "'");
    for (HloInstruction* u : v->users()) {
      int chain = 0;
      if (u->opcode() == HloOpcode::kDot) continue;
      if (depth < 8 &&
          (IsViewOp(u) || IsConvertOp(u) || (IsScaling(u, &chain) && u->operand(chain) == v))) {
        work.push_back({u, depth + 1});
        continue;
      }
      return OpText(u);
    }
  }
  return "";
}

bool OperandCarry::fp8() const {
  return base != nullptr && IsFp8(base->shape().element_type) && !steps.empty();
}

bool MapViewForward(const HloInstruction* view, int64_t dim, int64_t n, int64_t* out_dim,
                    std::string* why) {
  const Shape& in = view->operand(0)->shape();
  const Shape& out = view->shape();
  std::string w;
  switch (view->opcode()) {
    case HloOpcode::kCopy:
      *out_dim = dim;
      return true;
    case HloOpcode::kTranspose:
      for (size_t i = 0; i < view->dimensions.size(); ++i) {
        if (view->dimensions[i] == dim) {
          *out_dim = static_cast<int64_t>(i);
          return true;
        }
      }
      w = absl::StrCat("has no dim ", dim);
      break;
    case HloOpcode::kReshape:
    case HloOpcode::kBitcast:
      if (MapReshapeDim(in.dims, out.dims, dim, n, out_dim, &w, "gathered", "result")) return true;
      break;
    default:
      w = "is not a view";
      break;
  }
  *why = absl::StrCat(OpText(view), " ", in.ToString(false), " -> ", out.ToString(false), " ", w);
  return false;
}

bool MapViewBackward(const HloInstruction* view, int64_t dim, int64_t n, int64_t* in_dim,
                     std::string* why) {
  const Shape& in = view->operand(0)->shape();
  const Shape& out = view->shape();
  std::string w;
  switch (view->opcode()) {
    case HloOpcode::kCopy:
      *in_dim = dim;
      return true;
    case HloOpcode::kTranspose:
      if (dim >= 0 && dim < static_cast<int64_t>(view->dimensions.size())) {
        *in_dim = view->dimensions[static_cast<size_t>(dim)];
        return true;
      }
      w = absl::StrCat("has no dim ", dim);
      break;
    case HloOpcode::kReshape:
    case HloOpcode::kBitcast:
      if (MapReshapeDim(out.dims, in.dims, dim, n, in_dim, &w, "scattered", "dot output")) {
        return true;
      }
      break;
    default:
      w = "is not a view";
      break;
  }
  *why = absl::StrCat(OpText(view), " ", in.ToString(false), " -> ", out.ToString(false), " ", w);
  return false;
}

std::optional<GatheredChain> TraceGatheredOperand(HloInstruction* dot, int side, std::string* why,
                                                  HloInstruction** stuck) {
  GatheredChain c;
  HloInstruction* v = dot->operand(side);
  std::vector<HloInstruction*> ops;
  for (int depth = 0; depth < 16; ++depth) {
    if (CollectiveKind(v) == HloOpcode::kAllGather) {
      c.ag = v;
      c.ops.assign(ops.rbegin(), ops.rend());
      return c;
    }
    int chain = 0;
    if (IsViewOp(v) || IsConvertOp(v)) {
      ops.push_back(v);
      v = v->operand(0);
      continue;
    }
    if (IsScaling(v, &chain)) {
      ops.push_back(v);
      v = v->operand(chain);
      continue;
    }
    break;
  }
  // Not a chain this pass follows: say so only when an all-gather sits right below.
  for (HloInstruction* o : v->operands()) {
    if (CollectiveKind(o) == HloOpcode::kAllGather && v != dot) {
      if (stuck != nullptr) *stuck = o;
      *why = absl::StrCat("all-gather '", o->name(), "' reaches the dot through ", OpText(v),
                          ": only reshape, transpose, copy, bitcast, convert and a scaling by a "
                          "broadcast scale are moved into the loop; the all-gather stays");
      return std::nullopt;
    }
  }
  return std::nullopt;
}

namespace {

// A dequantization-like scaling found on the way: the step, with the scale's broadcast.
bool ScaleStep(HloInstruction* op, int chain, ElementwiseStep* s) {
  HloInstruction* bc = op->operand(1 - chain);
  s->kind = ElementwiseStep::Kind::kScale;
  s->type = op->shape().element_type;
  s->instr = op;
  s->divide = op->opcode() == HloOpcode::kDivide;
  s->scale_first = chain == 1;
  s->scale = bc->operand(0);
  s->scale_dims = bc->dimensions;
  return bc->shape().element_type == s->type;
}

bool IsScalarStep(const ElementwiseStep& s) {
  return s.kind == ElementwiseStep::Kind::kConvert ||
         (s.scale->shape().IsArray() && s.scale->shape().ElementCount() == 1 &&
          s.scale_dims.empty());
}

std::string TypeName(PrimitiveType t) { return std::string(PrimitiveTypeName(t)); }

// The value below views and one dequantization / convert: what a loop could carry instead.
struct Narrowing {
  HloInstruction* q = nullptr;         // FP8 value (null: no FP8 below)
  std::vector<HloInstruction*> views;  // views between the dequantization and the top, in order
  std::vector<ElementwiseStep> steps;  // convert (+ scaling)
};

Narrowing FindNarrowing(HloInstruction* top) {
  Narrowing n;
  std::vector<HloInstruction*> views;
  HloInstruction* v = top;
  while (IsViewOp(v) && views.size() < 8) {
    views.push_back(v);
    v = v->operand(0);
  }
  std::reverse(views.begin(), views.end());
  ElementwiseStep scale;
  int chain = 0;
  bool scaled = false;
  if (IsScaling(v, &chain) && IsConvertOp(v->operand(chain)) && ScaleStep(v, chain, &scale)) {
    scaled = true;
    v = v->operand(chain);
  }
  if (IsConvertOp(v) && IsFp8(v->operand(0)->shape().element_type) &&
      IsDequantizableFp8(v->operand(0)->shape().element_type)) {
    ElementwiseStep cvt;
    cvt.kind = ElementwiseStep::Kind::kConvert;
    cvt.type = v->shape().element_type;
    cvt.instr = v;
    n.q = v->operand(0);
    n.steps.push_back(cvt);
    if (scaled) n.steps.push_back(scale);
    n.views = std::move(views);
  }
  return n;
}

bool AllowedFp8Pair(PrimitiveType a, PrimitiveType b) {
  return IsDequantizableFp8(a) && IsDequantizableFp8(b) &&
         !(a == PrimitiveType::F8E5M2 && b == PrimitiveType::F8E5M2);
}

// Shapes of `views` re-created on a value of `base_shape` (the views' own shapes when they are
// already on the shard).
std::vector<ViewStep> ShardViews(const std::vector<HloInstruction*>& views) {
  std::vector<ViewStep> out;
  for (HloInstruction* v : views) out.push_back({v, v->shape()});
  return out;
}

// The stationary operand's carry when the window carries FP8: its dequantization moves into the
// body as well. Leaves `carry` plain (the operand as is) when it is not a dequantization.
void PlanStationary(HloInstruction* stat, OperandCarry* carry) {
  carry->base = stat;
  carry->text.clear();
  Narrowing n = FindNarrowing(stat);
  if (n.q == nullptr) return;
  for (const ElementwiseStep& s : n.steps) {
    if (!n.views.empty() && !IsScalarStep(s)) return;  // views and vector scales: keep wide
  }
  carry->base = n.q;
  carry->views = ShardViews(n.views);
  carry->steps = n.steps;
  // The body dequantizes the whole stationary operand and then slices it (contracting and batch
  // dims), as XLA's reduce-scatter loops do; the FP8 GEMM rewriter moves the slice up.
  for (ElementwiseStep& s : carry->steps) s.mode = ElementwiseStep::ScaleMode::kStays;
  carry->text = absl::StrCat("stationary '", stat->name(), "' carried as ",
                             TypeName(n.q->shape().element_type), " '", n.q->name(),
                             "', dequantized in the body");
}

// The ops between the all-gather `chain.ag` and the dot (ring of `n`), in order: each view, moved
// onto the shard, into *post_views (with its shard shape; *dim, the gathered dim, mapped through
// it), each convert or scaling into *post_steps (slice_dim: the scale dim spanning the gathered
// dim). False with *why when a view breaks the gathered dim, an op is neither, or a vector scale
// follows a view.
bool PlanPostGatherOps(const GatheredChain& chain, int64_t n, int64_t* dim,
                       std::vector<ViewStep>* post_views, std::vector<ElementwiseStep>* post_steps,
                       std::string* why) {
  HloInstruction* ag = chain.ag;
  HloInstruction* first_view = nullptr;
  HloInstruction* vector_scale = nullptr;
  for (HloInstruction* op : chain.ops) {
    if (IsViewOp(op)) {
      int64_t mapped = -1;
      std::string w;
      if (!MapViewForward(op, *dim, n, &mapped, &w)) {
        *why = absl::StrCat("all-gather '", ag->name(),
                            "' reaches the dot through a view that "
                            "breaks the gathered dim: ",
                            w, "; the all-gather stays");
        return false;
      }
      Shape s = op->shape();
      s.dims[static_cast<size_t>(mapped)] /= n;
      post_views->push_back({op, s});
      *dim = mapped;
      if (first_view == nullptr) first_view = op;
      continue;
    }
    ElementwiseStep s;
    int c = 0;
    if (IsConvertOp(op)) {
      s.kind = ElementwiseStep::Kind::kConvert;
      s.type = op->shape().element_type;
      s.instr = op;
    } else if (IsScaling(op, &c) && ScaleStep(op, c, &s)) {
      if (!IsScalarStep(s)) vector_scale = op;
      // Which scale dim spans the gathered dim (only without views: checked below).
      for (size_t j = 0; j < s.scale_dims.size(); ++j) {
        if (s.scale_dims[j] == *dim) s.slice_dim = static_cast<int64_t>(j);
      }
    } else {
      *why = absl::StrCat("all-gather '", ag->name(), "' reaches the dot through ", OpText(op),
                          ", which is not a convert or a scaling by a broadcast scale");
      return false;
    }
    post_steps->push_back(s);
  }
  if (vector_scale != nullptr && first_view != nullptr) {
    *why = absl::StrCat("all-gather '", ag->name(), "' reaches the dot through the view ",
                        OpText(first_view), " and the per-row/per-channel scaling ",
                        OpText(vector_scale), ": a vector scale is not moved across a view");
    return false;
  }
  return true;
}

// Where each post-gather scale of *post_steps comes from in the body: kStays when constant along
// the gathered dim; kTravels (the shard's scale) when it is itself an all-gather sharded like the
// data of `ag` (same dim, same groups as p.ring); else kSliced. False with *why when a gathered
// scale is not sharded with the data.
bool PlacePostGatherScales(DecomposerContext& ctx, const AgPlan& p, HloInstruction* ag,
                           std::vector<ElementwiseStep>* post_steps, std::string* why) {
  for (ElementwiseStep& s : *post_steps) {
    if (s.kind != ElementwiseStep::Kind::kScale) continue;
    s.mode = ElementwiseStep::ScaleMode::kStays;
    if (s.slice_dim < 0) continue;  // constant along the gathered dim (scalar, per-column)
    HloInstruction* sg = s.scale;
    if (CollectiveKind(sg) == HloOpcode::kAllGather && CollectiveInput(sg) != nullptr) {
      // The scale is gathered too: it travels with the data when it is sharded like it.
      const HloInstruction* sa = CollectiveAttributes(sg);
      const bool same_dim = sa->dimensions.size() == 1 && sa->dimensions[0] == s.slice_dim;
      auto sring = AnalyzePartitionRing(*sa, ctx.num_partitions, ctx.module->replica_count);
      const bool same_groups = sring.ok() && sring->groups == p.ring.groups;
      if (!same_dim || !same_groups) {
        *why = absl::StrCat("the scale of ", OpText(s.instr), " is all-gather '", sg->name(),
                            "' (dim ", sa->dimensions.empty() ? -1 : sa->dimensions[0],
                            ", replica_groups=", sring.ok() ? sring->groups_text : std::string("?"),
                            "), the data's all-gather '", ag->name(), "' gathers dim ",
                            CollectiveAttributes(ag)->dimensions[0],
                            " over replica_groups=", p.ring.groups_text,
                            ": the scale is not sharded with the data, so its shards cannot "
                            "travel with the data's; the all-gather stays");
        return false;
      }
      s.mode = ElementwiseStep::ScaleMode::kTravels;
      s.scale = CollectiveInput(sg);
      continue;
    }
    s.mode = ElementwiseStep::ScaleMode::kSliced;
  }
  return true;
}

// Whether the window is carried as FP8: `pre`'s FP8 value below the all-gather of `x` (unless the
// windowed einsum handler will move the dequantizations of the window and of `stat` itself:
// XLA's layout), or `x` itself when it is FP8 and converted or dequantized after the all-gather.
bool CarriesFp8(const Narrowing& pre, bool pre_vector, HloInstruction* x, HloInstruction* stat,
                const std::vector<ViewStep>& post_views,
                const std::vector<ElementwiseStep>& post_steps) {
  bool carry_fp8 = false;
  if (pre.q != nullptr) {
    const bool scalar_pre = pre.steps.size() == 2 && !pre_vector;
    carry_fp8 = true;
    // (Only without views: the handler does not look through views between the dequantization
    // and the loop, so with views the decomposer carries the FP8 value itself.)
    if (scalar_pre && post_steps.empty() && pre.views.empty() && post_views.empty()) {
      // XLA's layout, which the handler shifts itself: leave it to the handler when it will.
      std::optional<DequantMatch> wm = MatchDequantize(pre.steps[1].instr);
      HloInstruction* sv = stat;
      while (IsViewOp(sv)) sv = sv->operand(0);
      std::optional<DequantMatch> sm = MatchDequantize(sv);
      std::string w;
      if (wm && sm && IsScalarScale(*wm) && IsScalarScale(*sm) &&
          IsDequantWideType(wm->wide_type) && IsDequantWideType(sm->wide_type) &&
          AllowedFp8Pair(wm->fp8_type, sm->fp8_type) && IsSameOnAllPartitions(wm->scale, &w)) {
        carry_fp8 = false;
      }
    }
  } else if (!post_steps.empty() && IsFp8(x->shape().element_type)) {
    carry_fp8 = true;  // convert/dequantize after an FP8 all-gather
  }
  return carry_fp8;
}

// The window's carry when it is carried as FP8: `pre`'s FP8 value (or the all-gather's operand
// `x`) on the ring, the views moved onto the shard, the dequantization steps (`pre`'s, a scale
// staying when proven the same on every partition, else travelling; then `post_steps`) per step.
void PlanFp8Window(HloInstruction* x, const Narrowing& pre,
                   const std::vector<ViewStep>& post_views,
                   const std::vector<ElementwiseStep>& post_steps, OperandCarry* wc_out) {
  OperandCarry& wc = *wc_out;
  wc.base = pre.q != nullptr ? pre.q : x;
  std::vector<ViewStep> views =
      ShardViews(pre.q != nullptr ? pre.views : std::vector<HloInstruction*>{});
  views.insert(views.end(), post_views.begin(), post_views.end());
  wc.views = views;
  wc.steps.clear();
  if (pre.q != nullptr) {
    for (ElementwiseStep s : pre.steps) {
      if (s.kind == ElementwiseStep::Kind::kScale) {
        std::string w;
        const bool same = IsScalarStep(s) && IsSameOnAllPartitions(s.scale, &w);
        s.mode = same ? ElementwiseStep::ScaleMode::kStays : ElementwiseStep::ScaleMode::kTravels;
      }
      wc.steps.push_back(s);
    }
  }
  wc.steps.insert(wc.steps.end(), post_steps.begin(), post_steps.end());
  bool travels = false;
  for (const ElementwiseStep& s : wc.steps) {
    travels |=
        s.kind == ElementwiseStep::Kind::kScale && s.mode == ElementwiseStep::ScaleMode::kTravels;
  }
  wc.text = absl::StrCat("windowed '", wc.base->name(), "' carried as ",
                         TypeName(wc.base->shape().element_type), " on the ring",
                         travels ? " with its shard's scale" : "",
                         ", dequantized per step in the body");
}

}  // namespace

bool PlanAgOperands(DecomposerContext& ctx, const GatheredChain& chain, AgPlan& p,
                    std::string* why) {
  HloInstruction* ag = chain.ag;
  const int64_t n = p.ring.size();
  // 1. Views after the all-gather: map the gathered dim; elementwise steps in order.
  int64_t dim = CollectiveAttributes(ag)->dimensions[0];
  std::vector<ViewStep> post_views;
  std::vector<ElementwiseStep> post_steps;
  if (!PlanPostGatherOps(chain, n, &dim, &post_views, &post_steps, why)) return false;
  p.gathered_dim = dim;
  const Shape& operand_shape = p.dot->operand(p.side)->shape();
  if (operand_shape.dims[static_cast<size_t>(dim)] % n != 0) {
    *why = absl::StrCat("gathered dim ", dim, " of the dot operand is not split in ", n, " blocks");
    return false;
  }
  p.block = operand_shape.dims[static_cast<size_t>(dim)] / n;
  if (!ClassifyGatheredDim(p, why)) return false;

  // 2. Post-gather scales: where each one comes from in the body.
  if (!PlacePostGatherScales(ctx, p, ag, &post_steps, why)) return false;

  // 3. Below the all-gather: an FP8 value the ring can carry instead.
  HloInstruction* x = CollectiveInput(ag);
  Narrowing pre = FindNarrowing(x);
  bool pre_vector = false;
  for (const ElementwiseStep& s : pre.steps) pre_vector |= !IsScalarStep(s);
  if (pre.q != nullptr && pre_vector && (!pre.views.empty() || !post_views.empty())) {
    pre.q = nullptr;  // a per-row scale under a view: carried wide (the handler cannot move it)
  }
  HloInstruction* stat = p.dot->operand(1 - p.side);
  p.stationary.base = stat;
  const bool carry_fp8 = CarriesFp8(pre, pre_vector, x, stat, post_views, post_steps);

  OperandCarry& wc = p.window;
  if (carry_fp8) {
    PlanFp8Window(x, pre, post_views, post_steps, &wc);
    PlanStationary(stat, &p.stationary);
  } else {
    wc.base = x;
    wc.views = post_views;
    wc.steps = post_steps;
    wc.text.clear();
  }
  return true;
}

}  // namespace weave::windowed_einsum

namespace weave::windowed_einsum {

void PlanRsOperands(RsPlan& p) {
  for (int s = 0; s < 2; ++s) {
    OperandCarry& c = s == 0 ? p.lhs : p.rhs;
    HloInstruction* op = p.dot->operand(s);
    c = OperandCarry();
    c.base = op;
    Narrowing n = FindNarrowing(op);
    if (n.q == nullptr || !n.views.empty()) continue;
    bool vector = false;
    for (const ElementwiseStep& st : n.steps) vector |= !IsScalarStep(st);
    if (!vector) continue;  // scalar scales: left in the init tuple for the handler
    const bool sliced = p.sliced_side == 2 || p.sliced_side == s;
    const int64_t dim = p.sliced_side == 2 && s == 1 ? p.sliced_dim2 : p.sliced_dim;
    c.base = n.q;
    c.steps = n.steps;
    bool slices_scale = false;
    for (ElementwiseStep& st : c.steps) {
      if (st.kind != ElementwiseStep::Kind::kScale) continue;
      st.mode = ElementwiseStep::ScaleMode::kStays;
      for (size_t j = 0; sliced && j < st.scale_dims.size(); ++j) {
        if (st.scale_dims[j] == dim) {
          st.mode = ElementwiseStep::ScaleMode::kSliced;
          st.slice_dim = static_cast<int64_t>(j);
          slices_scale = true;
        }
      }
    }
    c.text = absl::StrCat(s == 0 ? "lhs '" : "rhs '", op->name(), "' carried as ",
                          TypeName(n.q->shape().element_type), " '", n.q->name(),
                          "' with its per-row/per-channel scale, dequantized per step",
                          slices_scale ? " after the slice (the scale sliced with it)" : "");
  }
}

}  // namespace weave::windowed_einsum
