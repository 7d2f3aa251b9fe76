// windowed-einsum-handler, step 2: the activation cache (../shared/specs/windowed-einsum-handler.md
// §3). Three parts: PlanAndAddCaches finds, for each all-gather of a computation, the loop that
// already circulates the gathered value; MatchAllGather proves that the loop visits every gathered
// block at the offset the all-gather puts it (by simulating the ring on every partition);
// AddCache appends the cache element (FP8, or wide: windowed_einsum_handler_cache_type.cc), fills
// it in the body and rewires the all-gathers' readers.
#include "windowed_einsum/windowed_einsum_handler_internal.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/replication.h"
#include "hlo/status_macros.h"

namespace weave::handler_internal {

// The scalar offset the loop uses for the block of windowed-operand dim `dim` read by `d`: from
// the dynamic-update-slice that merges the dot (batch / non-contracting dims), or from the
// dynamic-slice of the stationary operand (contracting dim). nullptr if not found.
HloInstruction* Handler::BlockOffset(const WindowedDot& d, int64_t w, int64_t dim) {
  const DotDims& dd = d.dot->dot_dims();
  const auto& wb = w == 0 ? dd.lhs_batch : dd.rhs_batch;
  const auto& wc = w == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const auto& oc = w == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  for (size_t i = 0; i < wc.size(); ++i) {
    if (wc[i] != dim) continue;
    HloInstruction* other = d.dot->operand(1 - w);
    if (other->opcode() != HloOpcode::kDynamicSlice) return nullptr;
    if (1 + oc[i] >= other->operand_count()) return nullptr;
    return other->operand(1 + oc[i]);
  }
  int64_t od = -1;
  for (size_t i = 0; i < wb.size(); ++i) {
    if (wb[i] == dim) od = static_cast<int64_t>(i);
  }
  if (od < 0) {
    auto is_in = [](const std::vector<int64_t>& v, int64_t x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    int64_t r = 0;
    for (int64_t x = 0; x < dim; ++x) {
      if (!is_in(wb, x) && !is_in(wc, x)) ++r;
    }
    const int64_t nb = static_cast<int64_t>(dd.lhs_batch.size());
    if (w == 0) {
      od = nb + r;
    } else {
      const int64_t lhs_rank = d.dot->operand(0)->shape().rank();
      od = nb + (lhs_rank - nb - static_cast<int64_t>(dd.lhs_contracting.size())) + r;
    }
  }
  HloInstruction* dus = d.merge;
  if (dus == nullptr || dus->opcode() != HloOpcode::kDynamicUpdateSlice) return nullptr;
  if (2 + od >= dus->operand_count()) return nullptr;
  return dus->operand(2 + od);
}

namespace {

// For each of the `np` partitions, the index of its replica group in `groups` (*group_of) and its
// position in that group (*pos_of; both sized np, -1 on entry). "" when every partition is in
// exactly one group, else the reason.
std::string LocateInGroups(const std::vector<std::vector<int64_t>>& groups, int64_t np,
                           std::vector<int64_t>* group_of, std::vector<int64_t>* pos_of) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      int64_t p = groups[g][i];
      if (p < 0 || p >= np || (*group_of)[p] >= 0) {
        return "replica groups are not a partition of the devices";
      }
      (*group_of)[p] = static_cast<int64_t>(g);
      (*pos_of)[p] = static_cast<int64_t>(i);
    }
  }
  for (int64_t p = 0; p < np; ++p) {
    if ((*group_of)[p] < 0) return absl::StrCat("partition ", p, " is in no replica group");
  }
  return "";
}

}  // namespace

// Checks that `ag` gathers, on every partition, exactly the shards the loop visits, at the block
// offsets the loop uses. Returns "" when it does, else the reason.
std::string Handler::MatchAllGather(HloInstruction* result, const WindowedLoop& L,
                                    CacheUse* use) {
  const int64_t w = L.windowed_operand;
  const Shape& shard = L.while_instr->shape().tuple_shapes[w];
  const HloInstruction* ag = GatherAttributes(result);  // all-gather, or all-gather-start
  if (ag == nullptr || ag->operand_count() != 1 || ag->dimensions.size() != 1) {
    return "not a single-operand all-gather with one dimension";
  }
  const int64_t dim = ag->dimensions[0];
  const Shape& out = result->shape();
  if (!out.IsArray() || out.rank() != shard.rank() || dim < 0 || dim >= shard.rank()) {
    return "gathered shape does not match the loop's windowed operand";
  }
  if (!ag->channel_id && !ag->use_global_device_ids) {
    return "cross-replica all-gather (no channel_id): it does not gather across partitions";
  }
  const int64_t np = std::max<int64_t>(module_->num_partitions, 1);
  std::vector<std::vector<int64_t>> groups;
  if (ag->replica_groups && !ag->replica_groups->groups.empty()) {
    groups = ag->replica_groups->groups;
  } else {
    groups.push_back({});
    for (int64_t p = 0; p < np; ++p) groups.back().push_back(p);
  }
  std::vector<int64_t> group_of(np, -1), pos_of(np, -1);
  if (std::string why = LocateInGroups(groups, np, &group_of, &pos_of); !why.empty()) return why;
  const int64_t gsize = static_cast<int64_t>(groups[0].size());
  for (const auto& g : groups) {
    if (static_cast<int64_t>(g.size()) != gsize) return "replica groups of different sizes";
  }
  for (int64_t i = 0; i < shard.rank(); ++i) {
    const int64_t want = i == dim ? shard.dims[i] * gsize : shard.dims[i];
    if (out.dims[i] != want) {
      return absl::StrFormat("gathered shape %s is not the windowed shard %s gathered %d-way on "
                             "dim %d",
                             out.ToString(false), shard.ToString(false), gsize, dim);
    }
  }
  if (L.ring_size != gsize) {
    return absl::StrFormat("the all-gather groups %d partitions, the loop's ring visits %d blocks",
                           gsize, L.ring_size);
  }
  const int64_t len = shard.dims[dim];
  std::vector<HloInstruction*> offsets;
  for (const WindowedDot& d : L.dots) {
    HloInstruction* off = BlockOffset(d, w, dim);
    if (off == nullptr) {
      return absl::StrFormat("dot '%s' does not place its block of dim %d at a block offset (no "
                             "dynamic-update-slice / dynamic-slice on that dim)",
                             d.dot->name(), dim);
    }
    offsets.push_back(off);
  }
  // Simulate the ring on every partition.
  std::vector<int64_t> ks = CounterSequence(L);
  std::vector<int64_t> holder(np);
  for (int64_t p = 0; p < np; ++p) holder[p] = p;
  std::vector<std::set<int64_t>> seen(np);
  HloInstruction* P = L.body->parameter(0);
  for (int64_t t = 0; t < L.trip_count; ++t) {
    ScalarEnv env{P, L.counter_index, ks[t], 0};
    for (size_t di = 0; di < L.dots.size(); ++di) {
      auto src = ApplyRingSteps(L.dots[di].ring, holder, env);
      if (!src) return "a guarded permute's predicate cannot be evaluated";
      for (int64_t p = 0; p < np; ++p) {
        const int64_t s = (*src)[p];
        if (s < 0) {
          return absl::StrFormat("partition %d receives no shard for dot '%s'", p,
                                 L.dots[di].dot->name());
        }
        if (group_of[s] != group_of[p]) {
          return absl::StrFormat("the ring brings partition %d's shard to partition %d, outside "
                                 "its all-gather replica group",
                                 s, p);
        }
        env.partition = p;
        auto off = EvaluateScalar(offsets[di], env);
        if (!off) {
          return absl::StrFormat("block offset '%s' of dot '%s' cannot be evaluated",
                                 offsets[di]->name(), L.dots[di].dot->name());
        }
        if (*off != pos_of[s] * len) {
          return absl::StrFormat(
              "ring order does not match the all-gather: at trip %d dot '%s' on partition %d puts "
              "partition %d's shard at offset %d, the all-gather at %d",
              t, L.dots[di].dot->name(), p, s, *off, pos_of[s] * len);
        }
        seen[p].insert(s);
      }
    }
    auto next = ApplyRingSteps(L.root_ring, holder, env);
    if (!next) return "a guarded permute's predicate cannot be evaluated";
    holder = *next;
  }
  for (int64_t p = 0; p < np; ++p) {
    if (static_cast<int64_t>(seen[p].size()) != gsize) {
      return absl::StrFormat("partition %d sees %d of the %d shards in the loop", p,
                             seen[p].size(), gsize);
    }
  }
  use->all_gather = result;
  use->dim = dim;
  return "";
}

bool Handler::IsAncestorOfWhile(const HloInstruction* u, const HloInstruction* w) {
  auto pu = position_.find(u), pw = position_.find(w);
  if (!order_stale_ && pu != position_.end() && pw != position_.end() &&
      pu->second > pw->second) {
    return false;
  }
  // An instruction below `u` in the topological index cannot have `u` among its ancestors.
  const int64_t floor = TopoOf(u);
  absl::flat_hash_set<HloInstruction*> seen;
  std::vector<HloInstruction*> work(w->operands().begin(), w->operands().end());
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (x == u) return true;
    if (!seen.insert(x).second) continue;
    if (floor >= 0) {
      const int64_t px = TopoOf(x);
      if (px >= 0 && px < floor) continue;
    }
    for (HloInstruction* o : x->operands()) work.push_back(o);
  }
  return false;
}

int64_t Handler::TopoOf(const HloInstruction* h) const {
  if (!topo_valid_) return -1;
  auto it = topo_.find(h->unique_id());
  return it == topo_.end() ? -1 : it->second;
}

void Handler::RepairTopo(HloInstruction* w, HloInstruction* r) {
  if (!topo_valid_) return;
  const int64_t ub = TopoOf(w);
  if (ub < 0) {
    topo_valid_ = false;  // no bound to repair against: stop pruning (walks stay exact)
    return;
  }
  // Forward from r: the indexed instructions r reaches below w (they must move after w).
  std::vector<HloInstruction*> fwd, bwd;
  absl::flat_hash_set<const HloInstruction*> seen;
  std::vector<HloInstruction*> work{r};
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (!seen.insert(x).second) continue;
    if (x == w) {
      topo_valid_ = false;  // a cycle; the caller never makes one
      return;
    }
    const int64_t px = TopoOf(x);
    if (px >= ub) continue;
    if (px >= 0) fwd.push_back(x);
    for (HloInstruction* y : x->users()) work.push_back(y);
  }
  if (fwd.empty()) return;
  int64_t lb = ub;
  for (const HloInstruction* x : fwd) lb = std::min(lb, TopoOf(x));
  // Backward from w: the indexed instructions reaching w above lb (they must stay before).
  seen.clear();
  work = {w};
  while (!work.empty()) {
    HloInstruction* x = work.back();
    work.pop_back();
    if (!seen.insert(x).second) continue;
    const int64_t px = TopoOf(x);
    if (px >= 0 && px <= lb) continue;
    if (px >= 0) bwd.push_back(x);
    for (HloInstruction* o : x->operands()) work.push_back(o);
  }
  auto by_index = [&](const HloInstruction* a, const HloInstruction* b) {
    return TopoOf(a) < TopoOf(b);
  };
  std::sort(fwd.begin(), fwd.end(), by_index);
  std::sort(bwd.begin(), bwd.end(), by_index);
  std::vector<int64_t> pool;
  pool.reserve(fwd.size() + bwd.size());
  for (const HloInstruction* x : bwd) pool.push_back(TopoOf(x));
  for (const HloInstruction* x : fwd) pool.push_back(TopoOf(x));
  std::sort(pool.begin(), pool.end());
  size_t k = 0;
  for (const HloInstruction* x : bwd) topo_[x->unique_id()] = pool[k++];
  for (const HloInstruction* x : fwd) topo_[x->unique_id()] = pool[k++];
}

std::vector<HloInstruction*> Handler::RewirableReaders(HloInstruction* v, HloInstruction* w,
                                                       std::vector<std::string>* kept) {
  std::vector<HloInstruction*> readers;
  for (HloInstruction* r : v->users()) {
    if (IsAncestorOfWhile(r, w)) {
      kept->push_back(r->name());
    } else {
      readers.push_back(r);
    }
  }
  return readers;
}

void Handler::NoteScaleEdge(const HloInstruction* scale, const HloInstruction* w) {
  // A new edge scale -> loop. Where the scale comes after the loop in the orders the
  // ancestor walks trust (position_, topo_), those orders are no longer topological: stop
  // trusting them for the rest of this computation (walks stay exact, only longer).
  auto pos = [this](const HloInstruction* h) {
    auto it = position_.find(h);
    return it == position_.end() ? int64_t{-1} : it->second;
  };
  const int64_t ps = pos(scale), pw = pos(w);
  const int64_t ts = TopoOf(scale), tw = TopoOf(w);
  if (ps < 0 || pw < 0 || ps > pw || (topo_valid_ && (ts < 0 || tw < 0 || ts > tw))) {
    order_stale_ = true;
    topo_valid_ = false;
  }
}

absl::StatusOr<int64_t> Handler::AppendCacheToState(HloInstruction* w, const WindowedLoop& L,
                                                    const Shape& cache_shape,
                                                    const WideForm* wide, Shape* new_state) {
  HloComputation* comp = w->parent();
  HloInstruction* P = L.body->parameter(0);
  HloInstruction* R = L.body->root();
  const WideForm* dq = wide;
  const Shape old_state = w->shape();
  const int64_t n = static_cast<int64_t>(old_state.tuple_shapes.size());
  std::vector<Shape> elems = old_state.tuple_shapes;
  elems.push_back(cache_shape);
  Shape state = Shape::Tuple(elems);
  HloInstruction* init = L.init;
  HloInstruction* zeros = AddZeros(comp, cache_shape, "cache_init");
  std::vector<HloInstruction*> ops = init->operands();
  ops.push_back(zeros);
  // The wide cache's scale in the body: an element the loop already passes through with it as
  // init (the FP8 shift's), else a new pass-through element after the cache.
  int64_t scale_slot = -1;
  if (wide) {
    for (int64_t i = 0; i < n; ++i) {
      const HloInstruction* r = R->operand(i);
      if (init->operand(i) == dq->scale && r->opcode() == HloOpcode::kGetTupleElement &&
          r->operand(0) == P && r->tuple_index == i) {
        scale_slot = i;
        break;
      }
    }
    if (scale_slot < 0) {
      scale_slot = n + 1;
      elems.push_back(dq->scale->shape());
      state = Shape::Tuple(elems);
      ops.push_back(dq->scale);
      NoteScaleEdge(dq->scale, w);
    }
  }
  RETURN_IF_ERROR(ReplaceInit(w, state, ops, &rename_));
  P->set_shape(state);
  L.condition->parameter(0)->set_shape(state);
  *new_state = state;
  return scale_slot;
}

void Handler::FillCache(const WindowedLoop& L, const std::vector<HloInstruction*>& offsets,
                        const Shape& cache_shape, int64_t dim, int64_t n, int64_t scale_slot,
                        const WideForm* wide, const Shape& state) {
  HloComputation* body = L.body;
  HloInstruction* P = body->parameter(0);
  HloInstruction* R = body->root();
  const WideForm* dq = wide;
  HloInstruction* cur = AddGetTupleElement(body, P, n, "cache");
  HloInstruction* zero = nullptr;
  HloInstruction* scale = wide ? AddGetTupleElement(body, P, scale_slot, "cache_scale") : nullptr;
  absl::flat_hash_map<const HloInstruction*, HloInstruction*> dequantized;  // by window
  for (size_t i = 0; i < L.dots.size(); ++i) {
    HloInstruction* off = offsets[i];
    HloInstruction* block = L.dots[i].window;
    if (wide) {
      HloInstruction*& d = dequantized[block];
      if (d == nullptr) {
        d = BuildDequantize(body, block, scale, dq->is_divide, dq->wide,
                            block->shape().WithElementType(dq->wide));
      }
      block = d;
    }
    std::vector<HloInstruction*> dus_ops = {cur, block};
    for (int64_t d = 0; d < cache_shape.rank(); ++d) {
      if (d == dim) {
        dus_ops.push_back(off);
      } else {
        if (zero == nullptr) zero = AddScalarConstant(body, off->shape().element_type, 0, "cache_zero");
        dus_ops.push_back(zero);
      }
    }
    cur = body->AddInstruction(HloOpcode::kDynamicUpdateSlice, cache_shape, dus_ops,
                               "cache_update");
  }
  R->AppendOperand(cur);
  if (wide && scale_slot == n + 1) R->AppendOperand(scale);
  R->set_shape(state);
}

absl::StatusOr<int64_t> Handler::RewireToCache(HloInstruction* w, const std::vector<CacheUse>& uses,
                                               const WideForm* wide, HloInstruction* cache,
                                               int64_t n, PrimitiveType cache_type,
                                               std::vector<std::string>* kept) {
  HloComputation* comp = w->parent();
  int64_t rewired = 0;
  for (size_t k = 0; k < uses.size(); ++k) {
    const CacheUse& u = uses[k];
    if (wide && !u.dequant) {
      // An FP8 all-gather: the roots of its dequantizations (found by WhyNoWideCache) read the
      // wide cache instead.
      for (const DequantMatch& d : wide->readers[k]) {
        std::vector<HloInstruction*> readers = RewirableReaders(d.root, w, kept);
        rewired += static_cast<int64_t>(readers.size());
        const bool was_root = d.root->IsRoot();
        RETURN_IF_ERROR(d.root->ReplaceUsesWith(readers, cache));
        for (HloInstruction* r : readers) RepairTopo(w, r);
        if (was_root) comp->set_root(cache);
      }
      remark_(u.all_gather->name(), true,
              absl::StrFormat("the all-gather's dequantizations replaced by the activation "
                              "cache (tuple index %d, %s, dequantized in the ring) of loop '%s'",
                              n, PrimitiveTypeName(cache_type), w->name()));
      continue;
    }
    std::vector<HloInstruction*> readers = RewirableReaders(u.all_gather, w, kept);
    rewired += static_cast<int64_t>(readers.size());
    const bool was_root = u.all_gather->IsRoot();
    // FP8: each reader gets its own dequantization of the cache, as XLA gives each consumer, so
    // that the FP8 GEMM rewriter folds it into that reader's GEMM.
    auto value_for = [&]() {
      if (!u.dequant || wide) return cache;
      return BuildDequantize(comp, cache, u.dequant->scale, u.dequant->is_divide,
                             u.dequant->wide_type, u.all_gather->shape(),
                             u.dequant->broadcast->dimensions);
    };
    for (HloInstruction* r : readers) {
      if (auto s = u.all_gather->ReplaceUsesWith({r}, value_for()); !s.ok()) return s;
      RepairTopo(w, r);
    }
    if (was_root) comp->set_root(value_for());
    const std::string& ag_name = u.all_gather->name();
    remark_(ag_name, true,
            absl::StrFormat("all-gather replaced by the activation cache (tuple index %d, %s%s) "
                            "of loop '%s'",
                            n, PrimitiveTypeName(cache_type),
                            wide        ? ", dequantized in the ring"
                            : u.dequant ? ", dequantized after the loop"
                                        : "",
                            w->name()));
  }
  return rewired;
}

absl::StatusOr<bool> Handler::AddCache(HloInstruction* w, const WindowedLoop& L,
                                       std::vector<CacheUse>& uses, const WideForm* wide,
                                       std::string* msg) {
  HloComputation* comp = w->parent();
  const int64_t wi = L.windowed_operand;
  const int64_t dim = uses[0].dim;
  const PrimitiveType et = w->shape().tuple_shapes[wi].element_type;
  for (const CacheUse& u : uses) {
    if (u.dim != dim || !u.all_gather->shape().WithElementType(et).Compatible(
                            uses[0].all_gather->shape().WithElementType(et))) {
      return absl::InternalError("cache uses disagree");
    }
  }
  // A wide cache stores the shards dequantized (the dequantization every use shares).
  const WideForm* dq = wide;
  const PrimitiveType cache_type = wide ? dq->wide : et;
  const Shape cache_shape = uses[0].all_gather->shape().WithElementType(cache_type);
  // Offsets first (before any change).
  std::vector<HloInstruction*> offsets;
  for (const WindowedDot& d : L.dots) offsets.push_back(BlockOffset(d, wi, dim));

  // Loop state: append the cache.
  const int64_t n = static_cast<int64_t>(w->shape().tuple_shapes.size());
  Shape state;
  ASSIGN_OR_RETURN(const int64_t scale_slot,
                   AppendCacheToState(w, L, cache_shape, wide, &state));

  // Body: one dynamic-update-slice per dot, at the dot's block offset (of the shard dequantized
  // with the carried scale, for a wide cache).
  FillCache(L, offsets, cache_shape, dim, n, scale_slot, wide, state);

  // After the loop: the cache (an FP8 one dequantized per reader) replaces the all-gathers.
  HloInstruction* cache = AddGetTupleElement(comp, w, n, "cache_out");
  std::vector<std::string> kept;
  ASSIGN_OR_RETURN(const int64_t rewired,
                   RewireToCache(w, uses, wide, cache, n, cache_type, &kept));
  *msg = absl::StrFormat(
      "%sactivation cache added at tuple index %d (%s), filled by %d dynamic-update-slice%s, "
      "shared by %d all-gather%s and %d consumer%s",
      wide ? "wide " : "", n, cache_shape.ToString(false), L.dots.size(),
      L.dots.size() == 1 ? "" : "s", uses.size(), uses.size() == 1 ? "" : "s", rewired,
      rewired == 1 ? "" : "s");
  if (wide) {
    absl::StrAppend(msg, "; each shard dequantized in the body with '", dq->scale->name(), "'",
                    scale_slot == n + 1 ? absl::StrCat(" (carried at tuple index ", n + 1, ")")
                                        : absl::StrCat(" (tuple index ", scale_slot, ")"));
  }
  if (!kept.empty()) {
    absl::StrAppend(msg, "; not rewired (the loop depends on them): ", absl::StrJoin(kept, ", "));
  }
  return true;
}

namespace {

bool IsViewOp(const HloInstruction* v) {
  return v->operand_count() == 1 &&
         (v->opcode() == HloOpcode::kReshape || v->opcode() == HloOpcode::kTranspose ||
          v->opcode() == HloOpcode::kBitcast || v->opcode() == HloOpcode::kCopy);
}

// The views (reshape, transpose, bitcast, copy) on top of `v`, outermost first; *base gets the
// value under them.
std::vector<const HloInstruction*> StripViews(HloInstruction* v, HloInstruction** base) {
  std::vector<const HloInstruction*> views;
  while (IsViewOp(v) && views.size() < 8) {
    views.push_back(v);
    v = v->operand(0);
  }
  *base = v;
  return views;
}

// The same views with the same dims, ignoring element types (one chain on FP8, one on its
// dequantized wide value).
bool SameViews(const std::vector<const HloInstruction*>& a,
               const std::vector<const HloInstruction*>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i]->opcode() != b[i]->opcode() || a[i]->shape().dims != b[i]->shape().dims ||
        a[i]->dimensions != b[i]->dimensions) {
      return false;
    }
  }
  return true;
}

// Loops that carry views of an FP8 value (the decomposer moves the views in front of an
// all-gather onto the FP8 shard), with the views.
struct CirculatedView {
  HloInstruction* loop = nullptr;
  std::vector<const HloInstruction*> views;
};

// The values the all-gather loops of a computation circulate.
struct CirculatedValues {
  // By value; also the wide values the FP8 shift replaced (an all-gather of those is served by
  // the FP8 cache, dequantized after the loop). A value may circulate in several loops (e.g.
  // gathered on two dims): all are candidates.
  absl::flat_hash_map<HloInstruction*, std::vector<CacheCandidate>> by_value;
  // By the FP8 value under the views.
  absl::flat_hash_map<HloInstruction*, std::vector<CirculatedView>> by_viewed_value;
  // Every loop MatchWindowedLoop matched, with what it found.
  LoopsByWhile matched;
};

// The values circulated by the all-gather loops among `loops` (`shifted`: what the FP8 shift
// replaced in each loop it rewrote).
CirculatedValues FindCirculatedValues(
    const std::vector<HloInstruction*>& loops,
    const absl::flat_hash_map<const HloInstruction*, ShiftedOperands>& shifted) {
  CirculatedValues values;
  for (HloInstruction* w : loops) {
    auto L = MatchWindowedLoop(w);
    if (!L) continue;  // the driver says so when it matches the loop again
    if (L->kind == WindowedLoopKind::kAllGather) {
      HloInstruction* carried = L->init->operand(L->windowed_operand);
      values.by_value[carried].push_back(CacheCandidate{w, std::nullopt});
      HloInstruction* base = nullptr;
      std::vector<const HloInstruction*> views = StripViews(carried, &base);
      if (!views.empty() && IsFp8(base->shape().element_type)) {
        values.by_viewed_value[base].push_back(CirculatedView{w, std::move(views)});
      }
      if (auto it = shifted.find(w); it != shifted.end()) {
        const int64_t j = L->windowed_operand;
        values.by_value[it->second.wide[j]].push_back(CacheCandidate{w, it->second.dq[j]});
      }
    }
    values.matched.emplace(w, std::move(*L));
  }
  return values;
}

// The loops that circulate value `x` an all-gather gathers, with the dequantization the
// all-gather reads if any: loops of `x` itself, FP8 loops of the value `x` dequantizes, and FP8
// loops of the same views of the value under views(dequant(q)). *reasons gets why a loop of the
// value is not a candidate.
std::vector<CacheCandidate> CandidateLoops(HloInstruction* x, const CirculatedValues& values,
                                           std::vector<std::string>* reasons) {
  std::vector<CacheCandidate> candidates;
  if (auto it = values.by_value.find(x); it != values.by_value.end()) candidates = it->second;
  if (auto m = MatchDequantize(x)) {
    if (auto it2 = values.by_value.find(m->q); it2 != values.by_value.end()) {
      for (const CacheCandidate& c : it2->second) {
        if (c.dequant) continue;
        const WindowedLoop& L = values.matched.at(c.loop);
        if (!IsFp8(L.while_instr->shape().tuple_shapes[L.windowed_operand].element_type)) {
          reasons->push_back("not cached: gathers a dequantization of the loop's FP8 operand, "
                             "but the loop circulates it wide");
          continue;
        }
        if (!IsScalarScale(*m) || !IsDequantWideType(m->wide_type)) {
          reasons->push_back("not cached: its dequantization has no scalar scale or no "
                             "bf16/f16/f32 wide type");
          continue;
        }
        candidates.push_back(CacheCandidate{c.loop, *m});
      }
    }
  }
  // views(dequant(q)) gathered while a loop carries the same views of q in FP8: the scalar
  // scale commutes with the views, so the FP8 cache dequantized after the loop is the
  // all-gather.
  HloInstruction* base = nullptr;
  std::vector<const HloInstruction*> views = StripViews(x, &base);
  std::optional<DequantMatch> m = views.empty() ? std::nullopt : MatchDequantize(base);
  if (m) {
    if (auto it3 = values.by_viewed_value.find(m->q); it3 != values.by_viewed_value.end()) {
      for (const CirculatedView& c : it3->second) {
        if (!SameViews(c.views, views)) continue;
        if (!IsScalarScale(*m) || !IsDequantWideType(m->wide_type)) {
          reasons->push_back("not cached: the dequantization under its views has no scalar "
                             "scale or no bf16/f16/f32 wide type");
          continue;
        }
        candidates.push_back(CacheCandidate{c.loop, *m});
      }
    }
  }
  return candidates;
}

}  // namespace

void Handler::IndexTopologically(HloComputation* comp) {
  topo_.clear();
  {
    const std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
    topo_.reserve(order.size());
    for (size_t i = 0; i < order.size(); ++i) topo_[order[i]->unique_id()] = static_cast<int64_t>(i);
  }
  topo_valid_ = true;
  order_stale_ = false;
}

HloInstruction* Handler::ChooseCacheLoop(HloInstruction* ag, const HloInstruction* attrs,
                                         const std::vector<CacheCandidate>& candidates,
                                         const LoopsByWhile& matched, const PlannedCaches& caches,
                                         CacheUse* use, std::vector<std::string>* reasons) {
  for (const CacheCandidate& c : candidates) {
    const WindowedLoop& L = matched.at(c.loop);
    CacheUse trial;
    trial.dequant = c.dequant;
    if (L.cache_index) {
      reasons->push_back(absl::StrCat("not cached: loop '", c.loop->name(),
                                      "' already has a cache (tuple index ", *L.cache_index, ")"));
      continue;
    }
    if (std::string why = MatchAllGather(ag, L, &trial); !why.empty()) {
      reasons->push_back(absl::StrCat("not cached in loop '", c.loop->name(), "': ", why));
      continue;
    }
    auto planned = caches.find(position_.at(c.loop));
    if (planned != caches.end() && !planned->second.second.empty() &&
        planned->second.second[0].dim != trial.dim) {
      reasons->push_back(absl::StrCat("not cached: loop '", c.loop->name(),
                                      "' already serves an all-gather on another dim"));
      continue;
    }
    if (trial.dequant) {
      // Each partition gathered its neighbours' shards dequantized with their own scales;
      // the cache is dequantized after the loop with the local one: they must agree within
      // each group of the all-gather (the ring's groups, checked above).
      ReplicationProof proof = ProveSameWithinGroups(trial.dequant->scale, GatherGroups(attrs));
      if (!proof.proven) {
        reasons->push_back(absl::StrCat("not cached: the scale '", trial.dequant->scale->name(),
                                        "' of the gathered dequantization is not proven the "
                                        "same on every partition of the all-gather's groups (",
                                        proof.why, ")"));
        continue;
      }
      if (std::string note = UnannotatedNote(proof); !note.empty()) {
        analysis_(ag->name(), absl::StrCat("the scale '", trial.dequant->scale->name(),
                                           "' of the gathered dequantization agrees within "
                                           "each all-gather group: ",
                                           note));
      }
    }
    *use = trial;
    return c.loop;
  }
  return nullptr;
}

absl::StatusOr<bool> Handler::PlanAndAddCaches(HloComputation* comp,
                                                const std::vector<HloInstruction*>& loops,
                                                const std::vector<HloInstruction*>& gathers) {
  bool changed = false;
  // The topological index the cache phase's ancestor walks stop at (IsAncestorOfWhile).
  IndexTopologically(comp);
  // 1. The values the all-gather loops circulate, and the wide values the FP8 shift replaced
  //    (an all-gather of those is served by the FP8 cache, dequantized after the loop).
  CirculatedValues values = FindCirculatedValues(loops, shifted_);

  // 2. Each all-gather (also the async all-gather-start/-done pair): the loops that circulate its
  //    value, then, for the first that fits, the proof that the loop visits exactly the gathered
  //    blocks (MatchAllGather) and that a dequantization after the loop gives what each
  //    partition gathered.
  PlannedCaches caches;
  for (HloInstruction* ag : gathers) {
    const HloInstruction* attrs = GatherAttributes(ag);
    if (attrs == nullptr || attrs->operand_count() != 1) {
      remark_(ag->name(), false, "not cached: not a single-operand all-gather");
      continue;
    }
    HloInstruction* x = attrs->operand(0);
    // Candidates: (loop, dequantization the all-gather reads, if any).
    std::vector<std::string> reasons;
    std::vector<CacheCandidate> candidates = CandidateLoops(x, values, &reasons);
    if (candidates.empty() && reasons.empty()) {
      remark_(ag->name(), false,
              absl::StrCat("not cached: no windowed einsum loop in '", comp->name(),
                           "' circulates the gathered value '", x->name(), "'"));
      continue;
    }
    CacheUse use;
    HloInstruction* w = ChooseCacheLoop(ag, attrs, candidates, values.matched, caches, &use,
                                         &reasons);
    if (w == nullptr) {
      remark_(ag->name(), false, absl::StrJoin(reasons, "; "));
      continue;
    }
    auto& entry = caches[position_.at(w)];
    entry.first = w;
    entry.second.push_back(use);
  }

  // 3. One cache per loop, shared by its all-gathers.
  const LoopsByWhile& matched = values.matched;
  for (auto& [pos, entry] : caches) {
    HloInstruction* w = entry.first;
    std::string msg, note;
    WideForm form;
    const bool wide = ChooseWideCache(matched.at(w), entry.second, &form, &note);
    ASSIGN_OR_RETURN(auto r, AddCache(w, matched.at(w), entry.second, wide ? &form : nullptr, &msg));
    remark_(w->name(), r, msg + note);
    changed |= r;
  }
  return changed;
}

const HloInstruction* GatherAttributes(const HloInstruction* ag) {
  if (ag->opcode() == HloOpcode::kAllGather) return ag;
  if (ag->opcode() == HloOpcode::kAllGatherDone && ag->operand_count() == 1 &&
      ag->operand(0)->opcode() == HloOpcode::kAllGatherStart &&
      ag->operand(0)->user_count() == 1) {
    return ag->operand(0);
  }
  return nullptr;
}

std::vector<std::vector<int64_t>> Handler::GatherGroups(const HloInstruction* ag) const {
  if (ag->replica_groups && !ag->replica_groups->groups.empty()) return ag->replica_groups->groups;
  return {};  // one group of every partition
}

}  // namespace weave::handler_internal
