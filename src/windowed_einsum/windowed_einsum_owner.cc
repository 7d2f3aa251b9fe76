// Which dot owns an all-gather loop, and which dots are left for the handler's activation cache
// (windowed_einsum_plan.h: FindCirculatingLoop, ChooseLoopOwner).
//
// XLA's GPU partitioner gives the first dot of a gathered activation the loop and leaves the
// others as all-gather + dot for the GPU WindowedEinsumHandler's cache
// (../shared/specs/spmd-windowed-einsum.md §1 "Several dots on one gathered operand"). Weave keeps
// that split, with three differences:
//  - a dot is left for the cache only when the handler's cache step can serve it (same gathered
//    value, same dim, same ring, no cache yet, the dot does not feed the loop); otherwise it gets
//    its own loop, so that no all-gather + dot stays serial (issue 14, known bug 1);
//  - the owner is the consumer that keeps FP8 and overlap best: an FP8 dot (both operands derive
//    from FP8, so the handler moves the dequantization in and the cache stays FP8) before a wide
//    one, then the one with most FLOPs, then the first in post order;
//  - whether an FP8 or a wide consumer owns the loop (FP8 or wide partial GEMMs in the ring; the
//    handler shifts the activation's dequantization into either loop, so the ring and the cache
//    carry FP8 both ways) is a cost question: ChooseLoopOwner also names the best consumer of the
//    other kind, and the decomposer asks the cost gate about both (windowed-einsum-loop-owner,
//    windowed_einsum_decomposer.h).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "analysis/user_attributes.h"
#include "hlo/dot_dims.h"
#include "passes/fp8_operand.h"
#include "windowed_einsum/windowed_einsum_plan.h"

namespace weave::windowed_einsum {
namespace {

bool IsGteOf(const HloInstruction* v, const HloInstruction* param, int64_t index) {
  return v->opcode() == HloOpcode::kGetTupleElement && v->operand_count() == 1 &&
         v->operand(0) == param && v->tuple_index == index;
}

// Walks back from `v` over collective-permutes and guarded permutes (a pred conditional whose true
// branch permutes its parameter) to get-tuple-element(param, index); returns the first permute on
// the way out of the get-tuple-element (nullptr if `v` is not such a chain or has no permute).
const HloInstruction* FirstRingPermute(const HloInstruction* v, const HloInstruction* param,
                                       int64_t index) {
  const HloInstruction* first = nullptr;
  for (int guard = 0; guard < 4096 && v != nullptr; ++guard) {
    if (IsGteOf(v, param, index)) return first;
    if (v->opcode() == HloOpcode::kCollectivePermute && v->operand_count() == 1) {
      first = v;
      v = v->operand(0);
      continue;
    }
    if (v->opcode() == HloOpcode::kConditional && v->operand_count() == 3 &&
        v->called_computations().size() == 2 && v->operand(1) == v->operand(2)) {
      const HloComputation* t = v->called_computations()[0];
      if (t->root() == nullptr || t->root()->opcode() != HloOpcode::kCollectivePermute) {
        return nullptr;
      }
      first = t->root();
      v = v->operand(1);
      continue;
    }
    return nullptr;
  }
  return nullptr;
}

// The windowed operand's dim a body dot places at a block offset: the dim of a
// dynamic-update-slice merge whose offset is not the constant 0 (non-contracting, batch), or the
// contracting partner of the stationary operand's dynamic-sliced dim. -1 if not found.
int64_t PlacedDim(const HloInstruction* dot, int64_t wi) {
  auto non_zero = [](const HloInstruction* off) {
    if (off->opcode() != HloOpcode::kConstant || !off->literal || off->literal->elided) return true;
    return off->literal->GetAsInt(0) != 0;
  };
  const DotDims& dd = dot->dot_dims();
  const auto& wc = wi == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const auto& oc = wi == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  const HloInstruction* other = dot->operand(1 - wi);
  if (other->opcode() == HloOpcode::kDynamicSlice) {
    for (size_t i = 0; i < oc.size(); ++i) {
      const int64_t slot = 1 + oc[i];
      if (slot < other->operand_count() && non_zero(other->operand(slot))) return wc[i];
    }
  }
  if (dot->user_count() != 1) return -1;
  const HloInstruction* dus = dot->users()[0];
  if (dus->opcode() != HloOpcode::kDynamicUpdateSlice || dus->operand(1) != dot) return -1;
  int64_t od = -1;
  for (int64_t i = 2; i < dus->operand_count(); ++i) {
    if (non_zero(dus->operand(i))) od = i - 2;
  }
  if (od < 0) return -1;
  return DotOperandDimOf(dot, static_cast<int>(wi), od);
}

HloInstruction* StripDequantize(HloInstruction* v) {
  if (auto m = MatchDequantize(v)) return m->q;
  return v;
}

// True when `a` is `b` or one of its (transitive) operands. The walk stops at instructions
// below `b` in the sweep's topological index (they cannot depend on it), so it costs the
// instructions between the two, not the whole upstream of `a`.
bool DependsOn(const DecomposerContext& ctx, HloInstruction* a, const HloInstruction* b) {
  const int64_t floor = ctx.PositionOf(b);
  absl::flat_hash_set<const HloInstruction*> seen;
  std::vector<HloInstruction*> work{a};
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (x == b) return true;
    if (!seen.insert(x).second) continue;
    if (floor >= 0) {
      const int64_t px = ctx.PositionOf(x);
      if (px >= 0 && px < floor) continue;
    }
    for (HloInstruction* o : x->operands()) work.push_back(o);
  }
  return false;
}

// The loop state must be the one XLA's partitioner writes: (lhs, rhs, out, extra, counter, ...).
bool HasCache(const HloInstruction* w) {
  const HloInstruction* root = w->while_body()->root();
  const HloInstruction* p = w->while_body()->parameter(0);
  if (root == nullptr || root->opcode() != HloOpcode::kTuple) return false;
  for (int64_t i = 5; i < root->operand_count(); ++i) {
    const HloInstruction* v = root->operand(i);
    if (v->opcode() != HloOpcode::kDynamicUpdateSlice) continue;
    while (v->opcode() == HloOpcode::kDynamicUpdateSlice) v = v->operand(0);
    if (IsGteOf(v, p, i)) return true;
  }
  return false;
}

// The in-group position of every partition that the body of loop `w` uses for its block
// offsets: the values of the one u32/s32[P] constant the body looks up at partition-id
// (dynamic-slice(table, partition-id), the position table of the decomposer's and XLA's loops),
// or 0..P-1 when the body reads partition-id only directly. Empty when it cannot be read.
std::vector<int64_t> LoopRingPositions(const HloComputation* body, int64_t num_partitions) {
  std::vector<int64_t> positions;
  bool reads_pid_directly = false, found = false;
  for (const HloInstruction* i : body->instructions()) {
    if (i->opcode() != HloOpcode::kPartitionId) continue;
    for (const HloInstruction* u : i->users()) {
      const HloInstruction* tbl = u->operand_count() == 2 ? u->operand(0) : nullptr;
      if (u->opcode() == HloOpcode::kDynamicSlice && u->operand(1) == i && tbl != nullptr &&
          tbl->opcode() == HloOpcode::kConstant && tbl->literal && !tbl->literal->elided &&
          tbl->shape().rank() == 1 && tbl->shape().dims[0] == num_partitions) {
        std::vector<int64_t> v;
        for (int64_t p = 0; p < num_partitions; ++p) v.push_back(tbl->literal->GetAsInt(p));
        if (found && v != positions) return {};  // two different tables: unknown
        positions = std::move(v);
        found = true;
      } else {
        reads_pid_directly = true;
      }
    }
  }
  if (found) return reads_pid_directly ? std::vector<int64_t>{} : positions;
  if (!reads_pid_directly) return {};
  positions.resize(static_cast<size_t>(num_partitions));
  for (int64_t p = 0; p < num_partitions; ++p) positions[static_cast<size_t>(p)] = p;
  return positions;
}

// Checks that loop `w`, whose state element `wi` is `value`, circulates it the way all-gather
// `ag` gathers `value` (or its FP8 value): same dim, the ring s -> s-1 of the all-gather's groups,
// no cache yet, and `dot` does not feed the loop. "" when it does, else the reason.
std::string CheckServes(DecomposerContext& ctx, HloInstruction* w, int64_t wi, HloInstruction* ag,
                        HloInstruction* dot) {
  HloComputation* body = w->while_body();
  const HloInstruction* p = body->parameter(0);
  const HloInstruction* root = body->root();
  const HloInstruction* cp = FirstRingPermute(root->operand(wi), p, wi);
  if (cp == nullptr) {
    return absl::StrCat("loop '", w->name(), "' does not pass its element ", wi,
                        " through a ring of collective-permutes");
  }
  if (HasCache(w)) return absl::StrCat("loop '", w->name(), "' already has an activation cache");
  const HloInstruction* attrs = CollectiveAttributes(ag);
  auto ring = AnalyzePartitionRing(*attrs, ctx.num_partitions, ctx.module->replica_count);
  if (!ring.ok()) return std::string(ring.status().message());
  std::vector<std::pair<int64_t, int64_t>> want = ring->ShiftPairs(-1);
  std::vector<std::pair<int64_t, int64_t>> have = cp->source_target_pairs();
  std::sort(have.begin(), have.end());
  if (have != want) {
    return absl::StrCat("loop '", w->name(),
                        "' rotates its shards over other partitions than the "
                        "all-gather's replica_groups=",
                        ring->groups_text);
  }
  // The same neighbours do not make the same order: a group listed rotated or reversed
  // ({{1,0}} against {{0,1}}) has the ring's pairs but puts each shard at another block, and the
  // handler's cache (which checks every block offset) does not serve it (issue 14).
  if (LoopRingPositions(body, ctx.num_partitions) != ring->index_in_group) {
    return absl::StrCat("loop '", w->name(),
                        "' places the shards in another order than the all-gather's "
                        "replica_groups=",
                        ring->groups_text);
  }
  int64_t dim = -1;
  for (HloInstruction* i : body->instructions()) {
    if (i->opcode() != HloOpcode::kDot || i->operand_count() != 2) continue;
    if (!IsGteOf(StripDequantize(i->operand(wi)), p, wi)) continue;
    dim = PlacedDim(i, wi);
    if (dim >= 0) break;
  }
  if (dim < 0) {
    return absl::StrCat("the dim loop '", w->name(), "' circulates cannot be read from its body");
  }
  if (attrs->dimensions.size() != 1 || attrs->dimensions[0] != dim) {
    return absl::StrCat("loop '", w->name(), "' circulates the shards along dim ", dim,
                        ", the all-gather gathers dim ",
                        attrs->dimensions.empty() ? -1 : attrs->dimensions[0]);
  }
  if (DependsOn(ctx, w, dot)) {
    return absl::StrCat("loop '", w->name(), "' depends on the dot '", dot->name(),
                        "' (it cannot read the loop's cache)");
  }
  return "";
}

// Why the handler's FP8 shift would not make loop `w` (init tuple `t`) carry FP8, so that its
// cache could not serve an FP8 all-gather; "" when it will. A conservative copy of the shift's
// conditions (windowed_einsum/windowed_einsum_handler_fp8_shift.cc; XLA's windowed einsum handler): both
// operands plain scalar-scaled dequantizations of a supported FP8 pair into bf16/f16/f32, scales
// the same on every partition, the init read only by the loop and the loop only by
// get-tuple-elements. Dequantizations seen through views are not taken (the dot then gets its
// own loop rather than waiting for a cache that might not come).
std::string WhyNoFp8Shift(HloInstruction* t, const HloInstruction* w) {
  std::optional<DequantMatch> m[2];
  for (int j = 0; j < 2; ++j) {
    m[j] = MatchDequantize(t->operand(j));
    if (!m[j] || !IsScalarScale(*m[j]) || !IsDequantWideType(m[j]->wide_type) ||
        !IsSameOnAllPartitions(m[j]->scale)) {
      return absl::StrCat("loop '", w->name(), "' operand ", j, " ('", t->operand(j)->name(),
                          "') is not a dequantization the handler moves into the loop, so the "
                          "loop stays wide and its cache cannot serve an FP8 all-gather");
    }
  }
  if (!IsWindowedEinsumFp8Pair(m[0]->fp8_type, m[1]->fp8_type)) {
    return absl::StrCat("loop '", w->name(), "' multiplies an FP8 pair the handler does not "
                        "carry in FP8, so its cache cannot serve an FP8 all-gather");
  }
  bool only_gtes = t->user_count() == 1;
  for (const HloInstruction* u : w->users()) only_gtes &= u->opcode() == HloOpcode::kGetTupleElement;
  if (!only_gtes) {
    return absl::StrCat("loop '", w->name(), "' or its init is read by other instructions, so "
                        "the handler does not carry it in FP8 and its cache cannot serve an FP8 "
                        "all-gather");
  }
  return "";
}

// A dot reading an all-gather of the gathered value (a candidate owner of its loop).
struct Consumer {
  HloInstruction* dot;
  int side;
  GatheredChain chain;
};

// Every dot of the computation reading an all-gather of `ag`'s operand with the same dims and
// groups (and shape), directly or through the ops an AG loop carries (views, convert, scaling),
// at most 8 ops down; dots the decomposer removed are skipped. In the operand's users' order.
std::vector<Consumer> FindConsumers(DecomposerContext& ctx, HloInstruction* ag) {
  HloInstruction* x = CollectiveInput(ag);
  const HloInstruction* attrs = CollectiveAttributes(ag);
  std::vector<Consumer> consumers;
  absl::flat_hash_set<const HloInstruction*> seen_dots;
  for (HloInstruction* gu : x->users()) {
    // The all-gather's result: the all-gather, or the -done of an all-gather-start.
    HloInstruction* g = gu;
    if (gu->opcode() == HloOpcode::kAllGatherStart && gu->user_count() == 1) g = gu->users()[0];
    const HloInstruction* ga = CollectiveAttributes(g);
    if (CollectiveKind(g) != HloOpcode::kAllGather || ga == nullptr || CollectiveInput(g) != x ||
        ga->dimensions != attrs->dimensions || g->shape() != ag->shape()) {
      continue;
    }
    if (g != ag && (!ga->replica_groups.has_value() || !attrs->replica_groups.has_value() ||
                    ga->replica_groups->ToString() != attrs->replica_groups->ToString())) {
      continue;
    }
    std::vector<std::pair<HloInstruction*, int>> work{{g, 0}};
    absl::flat_hash_set<const HloInstruction*> visited;
    while (!work.empty()) {
      auto [v, depth] = work.back();
      work.pop_back();
      if (!visited.insert(v).second) continue;
      for (HloInstruction* u : v->users()) {
        if (u->opcode() == HloOpcode::kDot) {
          if (ctx.removed.contains(u) || u->operand_count() != 2 || !seen_dots.insert(u).second) {
            continue;
          }
          for (int s = 0; s < 2; ++s) {
            std::string why;
            std::optional<GatheredChain> c = TraceGatheredOperand(u, s, &why);
            if (c && c->ag == g) {
              consumers.push_back({u, s, *c});
              break;
            }
          }
        } else if (depth < 8) {
          work.push_back({u, depth + 1});
        }
      }
    }
  }
  return consumers;
}

// A consumer that may own the loop, with what ranks it.
struct Rank {
  const Consumer* c;
  bool fp8;       // both of its operands derive from FP8
  double flops;   // half its FLOPs: output elements x contracted size
  int64_t order;  // its post-order position
};

// The consumers that may own the loop, in `consumers`' order: not one that depends on another
// consumer, nor one the user keeps out of collective matmul (it reads the loop's cache).
std::vector<Rank> RankOwners(DecomposerContext& ctx, const std::vector<Consumer>& consumers) {
  std::vector<Rank> ranks;
  for (const Consumer& c : consumers) {
    HloInstruction* u = c.dot;
    // A consumer that depends on another consumer cannot own the loop the other one would read.
    bool depends = false;
    for (const Consumer& o : consumers) depends = depends || (o.dot != u && DependsOn(ctx, u, o.dot));
    if (depends) continue;
    // A dot the user keeps out of collective matmul reads the loop's cache, never owns the loop.
    if (UserDisablesCollectiveMatmul(*u)) continue;
    Rank r{&c, ReachesFp8(u->operand(1 - c.side)) && ReachesFp8(u->operand(c.side)),
           static_cast<double>(u->shape().ElementCount()), std::max<int64_t>(ctx.PositionOf(u), 0)};
    // FLOPs: 2 x output elements x contracted size.
    for (int64_t c : u->dot_dims().lhs_contracting) {
      r.flops *= static_cast<double>(u->operand(0)->shape().dims[static_cast<size_t>(c)]);
    }
    ranks.push_back(r);
  }
  return ranks;
}

// Most FLOPs first, then post order.
bool MoreFlops(const Rank& a, const Rank& b) {
  if (a.flops != b.flops) return a.flops > b.flops;
  return a.order < b.order;
}

// The note of the remark when `r` owns the loop over all-gather `ag` (`dot`: the dot the
// decomposer asked about; `mixed`: FP8 and wide consumers both, so the owner's kind decides).
std::string OwnerNote(const Rank& r, const HloInstruction* dot, const HloInstruction* ag,
                      size_t num_consumers, bool mixed) {
  const bool kind_decided = mixed;
  std::string why;
  if (r.fp8 && kind_decided) {
    why = "both of its operands derive from FP8 (its partial dots become FP8 GEMMs)";
  } else if (!r.fp8 && kind_decided) {
    why = absl::StrCat("a wide consumer (wide partial GEMMs in the ring), with the most FLOPs "
                       "of them (",
                       r.flops * 2, ")");
  } else {
    why = absl::StrCat("it has the most FLOPs (", r.flops * 2, ")");
  }
  if (r.c->dot == dot && !kind_decided) {
    return absl::StrCat("owner of the loop over all-gather '", ag->name(), "' (",
                        num_consumers, " consumers)");
  }
  return absl::StrCat("owner of the loop over all-gather '", ag->name(), "' (",
                      num_consumers, " consumers): ", why);
}

}  // namespace

std::optional<CirculatingLoop> FindCirculatingLoop(DecomposerContext& ctx, HloInstruction* ag,
                                                   HloInstruction* dot) {
  HloInstruction* x = CollectiveInput(ag);
  if (x == nullptr || CollectiveAttributes(ag) == nullptr) return std::nullopt;
  // The loop's element is `x`, or (after the handler's FP8 shift) the FP8 value `x` dequantizes,
  // or, when the all-gather already carries FP8 `x` (collective-quantizer ran first), a
  // dequantization of `x` that the handler's FP8 shift will turn back into `x` (its scale a
  // replicated scalar of a wide type, as the shift requires): the FP8 cache then serves the
  // all-gather as it is.
  std::vector<HloInstruction*> values{x};
  absl::flat_hash_set<const HloInstruction*> shifted_dequant;
  std::optional<DequantMatch> dq = MatchDequantize(x);
  if (dq) values.push_back(dq->q);
  if (!dq && IsDequantizableFp8(x->shape().element_type)) {
    for (HloInstruction* cvt : x->users()) {
      if (cvt->opcode() != HloOpcode::kConvert) continue;
      for (HloInstruction* u : cvt->users()) {
        std::optional<DequantMatch> m = MatchDequantize(u);
        if (m && m->q == x && IsScalarScale(*m) && IsDequantWideType(m->wide_type) &&
            IsSameOnAllPartitions(m->scale)) {
          values.push_back(u);
          shifted_dequant.insert(u);
        }
      }
    }
  }
  for (HloInstruction* v : values) {
    for (HloInstruction* t : v->users()) {
      if (t->opcode() != HloOpcode::kTuple || t->operand_count() < 5) continue;
      for (HloInstruction* w : t->users()) {
        if (w->opcode() != HloOpcode::kWhile || w->called_computations().size() != 2 ||
            w->operand(0) != t || w->parent() != ag->parent()) {
          continue;
        }
        const HloInstruction* root = w->while_body()->root();
        const HloInstruction* p = w->while_body()->parameter(0);
        if (root == nullptr || root->opcode() != HloOpcode::kTuple ||
            root->operand_count() != t->operand_count()) {
          continue;
        }
        for (int64_t wi = 0; wi < 2; ++wi) {
          if (t->operand(wi) != v || !IsGteOf(root->operand(1 - wi), p, 1 - wi)) continue;
          if (FirstRingPermute(root->operand(wi), p, wi) == nullptr) continue;
          CirculatingLoop c;
          c.loop = w;
          c.why_not = CheckServes(ctx, w, wi, ag, dot);
          if (c.why_not.empty() && shifted_dequant.contains(v)) {
            c.why_not = WhyNoFp8Shift(t, w);
          }
          if (c.why_not.empty() && dq && v != x) {
            // The handler dequantizes its FP8 cache with the all-gather's scale.
            std::string why;
            if (!IsScalarScale(*dq) || !IsDequantWideType(dq->wide_type)) {
              c.why_not = "the gathered dequantization has no scalar scale of type bf16/f16/f32";
            } else if (!IsSameOnAllPartitions(dq->scale, &why)) {
              c.why_not = absl::StrCat("the scale '", dq->scale->name(),
                                       "' of the gathered dequantization is not proven the same "
                                       "on every partition (",
                                       why, ")");
            }
          }
          return c;
        }
      }
    }
  }
  return std::nullopt;
}

HloInstruction* ChooseLoopOwner(DecomposerContext& ctx, HloInstruction* dot, int side,
                                const GatheredChain& chain,
                                const std::vector<HloInstruction*>& /*post_order*/,
                                int* owner_side, GatheredChain* owner_chain, std::string* note,
                                OwnerAlternative* alt) {
  *owner_side = side;
  *owner_chain = chain;
  if (alt != nullptr) *alt = OwnerAlternative{};
  HloInstruction* ag = chain.ag;
  // Every dot of this computation reading an all-gather of the same value with the same dims
  // and groups, directly or through the ops an AG loop carries (views, convert, scaling).
  const std::vector<Consumer> consumers = FindConsumers(ctx, ag);
  if (consumers.size() < 2) return dot;
  std::vector<Rank> ranks = RankOwners(ctx, consumers);
  if (ranks.empty()) return dot;
  using LoopOwner = WindowedEinsumDecomposerOptions::LoopOwner;
  // FP8 first (auto, fp8) or wide first (wide), then most FLOPs, then post order.
  const bool fp8_first = ctx.options.loop_owner != LoopOwner::kWide;
  std::stable_sort(ranks.begin(), ranks.end(), [&](const Rank& a, const Rank& b) {
    if (a.fp8 != b.fp8) return fp8_first ? a.fp8 : b.fp8;
    return MoreFlops(a, b);
  });
  // Both kinds of consumer: the owner's kind decides the ring's and the cache's type.
  const bool mixed = ranks.front().fp8 != ranks.back().fp8;
  const Rank& best = ranks[0];
  *owner_side = best.c->side;
  *owner_chain = best.c->chain;
  *note = OwnerNote(best, dot, ag, consumers.size(), mixed);
  if (alt != nullptr) {
    // The best consumer of the other kind (FP8 or wide partial GEMMs in the ring).
    const Rank* other = nullptr;
    for (const Rank& r : ranks) {
      if (r.fp8 != best.fp8 && (other == nullptr || MoreFlops(r, *other))) other = &r;
    }
    if (other != nullptr) {
      alt->dot = other->c->dot;
      alt->side = other->c->side;
      alt->chain = other->c->chain;
      alt->fp8 = other->fp8;
      alt->note = OwnerNote(*other, dot, ag, consumers.size(), mixed);
    }
  }
  return best.c->dot;
}

}  // namespace weave::windowed_einsum
