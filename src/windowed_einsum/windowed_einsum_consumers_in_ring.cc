// The windowed-einsum-consumers-in-ring pass (see the header).
#include "windowed_einsum/windowed_einsum_consumers_in_ring.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/dequantize.h"
#include "analysis/user_attributes.h"
#include "hlo/builders.h"
#include "windowed_einsum/loop_state.h"
#include "windowed_einsum/windowed_loop.h"
#include "hlo/dot_dims.h"
#include "passes/cost_oracle.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// One cache update of the body: dynamic-update-slice(cache, shard, offsets...).
struct CacheUpdate {
  HloInstruction* dus = nullptr;
  HloInstruction* shard = nullptr;
  std::vector<HloInstruction*> offsets;
};

// A dot after the loop reading the cache (or its dequantization).
struct Consumer {
  HloInstruction* dot = nullptr;
  int side = 0;                     // the cache's operand index
  HloInstruction* other = nullptr;  // the other operand (stays whole)
  std::optional<DequantMatch> dq;   // FP8 cache: the dequantization the dot reads
  // The other operand is a dequantization with a scalar scale: its FP8 value and scale travel
  // into the loop instead, dequantized in the body (so that the partial dots become FP8 GEMMs).
  std::optional<DequantMatch> other_dq;
  int64_t out_dim = -1;             // the dot output dim of the cached dim
};

// The body's cache updates in program order (the dynamic-update-slice chain from
// get-tuple-element(param, c) to root operand c) and the dim they write blocks of.
bool FindCacheUpdates(HloComputation* body, int64_t c, std::vector<CacheUpdate>* out,
                      int64_t* dim, std::string* why) {
  HloInstruction* root = body->root();
  if (root == nullptr || root->opcode() != HloOpcode::kTuple || c >= root->operand_count()) {
    *why = "the body's root is not the loop tuple";
    return false;
  }
  HloInstruction* cur = root->operand(c);
  while (cur->opcode() == HloOpcode::kDynamicUpdateSlice && cur->operand_count() >= 3) {
    CacheUpdate u;
    u.dus = cur;
    u.shard = cur->operand(1);
    for (int64_t i = 2; i < cur->operand_count(); ++i) u.offsets.push_back(cur->operand(i));
    out->push_back(u);
    cur = cur->operand(0);
  }
  if (cur->opcode() != HloOpcode::kGetTupleElement || cur->tuple_index != c ||
      cur->operand(0) != body->parameter(0) || out->empty()) {
    *why = "the cache element is not filled by a chain of dynamic-update-slices";
    return false;
  }
  std::reverse(out->begin(), out->end());
  *dim = -1;
  const Shape& cache = root->operand(c)->shape();
  for (const CacheUpdate& u : *out) {
    const Shape& s = u.shard->shape();
    if (!s.IsArray() || s.rank() != cache.rank() ||
        static_cast<int64_t>(u.offsets.size()) != cache.rank()) {
      *why = "a cache update does not match the cache's rank";
      return false;
    }
    int64_t d = -1;
    for (int64_t i = 0; i < s.rank(); ++i) {
      if (s.dims[static_cast<size_t>(i)] == cache.dims[static_cast<size_t>(i)]) continue;
      if (d >= 0) {
        *why = "the cache updates write blocks along more than one dim";
        return false;
      }
      d = i;
    }
    if (d < 0 || (*dim >= 0 && d != *dim)) {
      *why = "the cache updates do not write blocks along one dim";
      return false;
    }
    *dim = d;
  }
  return true;
}

bool Removable(const HloInstruction* x) { return x->IsRemovableWhenUnused(); }

// The dots after loop `w` that read its cache element `c` (or a scalar dequantization of it),
// each reading the cached dim `dim` as a free dim; the other readers are named in *left.
std::vector<Consumer> FindConsumers(HloInstruction* w, int64_t c, int64_t dim,
                                    std::vector<std::string>* left) {
  std::vector<Consumer> consumers;
  for (HloInstruction* g : w->users()) {
    if (g->opcode() != HloOpcode::kGetTupleElement || g->tuple_index != c) continue;
    for (HloInstruction* u : g->users()) {
      std::optional<DequantMatch> dq;
      std::vector<HloInstruction*> readers = {u};
      HloInstruction* value = g;
      if (u->opcode() == HloOpcode::kConvert) {
        // convert(cache) is the start of a dequantization: its multiply/divide is the value.
        readers.clear();
        for (HloInstruction* m : u->users()) {
          std::optional<DequantMatch> d = MatchDequantize(m);
          if (!d || d->q != g || !IsScalarScale(*d)) {
            left->push_back(absl::StrCat("'", m->name(), "' (not a scalar dequantization)"));
            continue;
          }
          dq = d;
          value = d->root;
          for (HloInstruction* r : d->root->users()) readers.push_back(r);
        }
      }
      for (HloInstruction* r : readers) {
        if (r->opcode() != HloOpcode::kDot || r->operand_count() != 2 ||
            r->operand(0) == r->operand(1)) {
          left->push_back(absl::StrCat("'", r->name(), "' (not a dot)"));
          continue;
        }
        if (UserDisablesCollectiveMatmul(*r)) {
          left->push_back(absl::StrCat("'", r->name(), "' (the user's _xla_collective_matmul=\"none\")"));
          continue;
        }
        Consumer k;
        k.dot = r;
        k.side = r->operand(0) == value ? 0 : 1;
        k.other = r->operand(1 - k.side);
        k.dq = dq;
        if (std::optional<DequantMatch> od = MatchDequantize(k.other); od && IsScalarScale(*od)) {
          k.other_dq = od;
        }
        k.out_dim = DotOutputDimOfFree(r, k.side, dim);
        if (k.out_dim < 0) {
          left->push_back(absl::StrCat("'", r->name(), "' (reads the cached dim ", dim,
                                      " as a contracting or batch dim)"));
          continue;
        }
        consumers.push_back(k);
      }
    }
  }
  return consumers;
}

// Where a consumer's values travel in the extended loop state: its other operand (or that
// operand's FP8 value and scale), the FP8 cache's scale, and its output.
struct Slots {
  int64_t other = -1, other_scale = -1, scale = -1, out = -1;
};

// Appends to loop `w`'s state, per consumer, the values the body needs and its output buffer
// (XLA's AllocateBuffer: every block is written in the body); returns where each went.
absl::StatusOr<std::vector<Slots>> ExtendLoopState(HloInstruction* w,
                                                   const std::vector<Consumer>& consumers,
                                                   Shape* state) {
  HloComputation* comp = w->parent();
  std::vector<Slots> slots(consumers.size());
  std::vector<HloInstruction*> init_extra;
  for (size_t k = 0; k < consumers.size(); ++k) {
    const Consumer& con = consumers[k];
    slots[k].other = static_cast<int64_t>(state->tuple_shapes.size());
    HloInstruction* carried = con.other_dq ? con.other_dq->q : con.other;
    state->tuple_shapes.push_back(carried->shape());
    init_extra.push_back(carried);
    if (con.other_dq) {
      slots[k].other_scale = static_cast<int64_t>(state->tuple_shapes.size());
      state->tuple_shapes.push_back(con.other_dq->scale->shape());
      init_extra.push_back(con.other_dq->scale);
    }
    if (con.dq) {
      slots[k].scale = static_cast<int64_t>(state->tuple_shapes.size());
      state->tuple_shapes.push_back(con.dq->scale->shape());
      init_extra.push_back(con.dq->scale);
    }
    slots[k].out = static_cast<int64_t>(state->tuple_shapes.size());
    state->tuple_shapes.push_back(con.dot->shape());
    HloInstruction* init = comp->AddInstruction(HloOpcode::kCustomCall, con.dot->shape(), {},
                                                absl::StrCat(con.dot->name(), ".ring_init"));
    init->set_custom_call_target("AllocateBuffer");
    init_extra.push_back(init);
  }
  RETURN_IF_ERROR(AppendLoopState(w, init_extra, ".in_ring"));
  return slots;
}

// A consumer's values in the body, read from the loop state.
struct RingValues {
  HloInstruction* other_gte = nullptr;
  HloInstruction* other_value = nullptr;      // dequantized when the other operand travels FP8
  HloInstruction* other_scale_gte = nullptr;  // null unless it does
  HloInstruction* scale_gte = nullptr;        // the FP8 cache's scale, or null
  HloInstruction* out = nullptr;              // the output as the body's updates leave it
};

// Consumer `con`'s partial dot on cache update `u` (step `step`) of the body, written into its
// output `v.out` at the update's block; returns the new output value.
HloInstruction* PartialDot(HloComputation* body, const CacheUpdate& u, size_t step, int64_t dim,
                           const Consumer& con, const RingValues& v,
                           XlaBackendConfigVersion version, int64_t* next_queue) {
  const std::string base = absl::StrCat(con.dot->name(), ".ring", step);
  HloInstruction* a = u.shard;
  if (con.dq) {
    Shape wide = u.shard->shape();
    wide.element_type = con.dq->wide_type;
    a = BuildDequantize(body, u.shard, v.scale_gte, con.dq->is_divide,
                        con.dq->wide_type, wide);
  }
  Shape part_shape = con.dot->shape();
  part_shape.dims[static_cast<size_t>(con.out_dim)] =
      u.shard->shape().dims[static_cast<size_t>(dim)];
  std::vector<HloInstruction*> ops =
      con.side == 0 ? std::vector<HloInstruction*>{a, v.other_value}
                    : std::vector<HloInstruction*>{v.other_value, a};
  std::unique_ptr<HloInstruction> clone = con.dot->CloneWithNewOperands(part_shape, ops);
  clone->set_name(base);
  clone->sharding.reset();
  clone->backend_config.clear();
  clone->metadata.clear();
  HloInstruction* part = body->AddInstruction(std::move(clone));
  GpuBackendConfigEditor pcfg(version);
  const int64_t queue = (*next_queue)++;
  pcfg.set_operation_queue_id(queue);
  pcfg.ApplyTo(part);
  // The block offset on the output dim is the cache update's on the cached dim.
  HloInstruction* offset = u.offsets[static_cast<size_t>(dim)];
  HloInstruction* zero = AddScalarConstant(body, offset->shape().element_type, 0, base + ".zero");
  std::vector<HloInstruction*> dus_ops = {v.out, part};
  for (int64_t i = 0; i < con.dot->shape().rank(); ++i) {
    dus_ops.push_back(i == con.out_dim ? offset : zero);
  }
  HloInstruction* dus = body->AddInstruction(HloOpcode::kDynamicUpdateSlice,
                                             con.dot->shape(), dus_ops, base + ".out");
  GpuBackendConfigEditor dcfg(version);
  dcfg.AddWaitOnOperationQueue(queue);
  dcfg.ApplyTo(dus);
  return dus;
}

// Every consumer's partial dot next to every cache update of `body`, each with its own
// operation_queue_id (from *next_queue) and written into the consumer's output by a
// dynamic-update-slice that waits on it; the root then carries the values on.
void ComputeInRing(HloComputation* body, const std::vector<CacheUpdate>& updates, int64_t dim,
                   const std::vector<Consumer>& consumers, const std::vector<Slots>& slots,
                   const Shape& state, XlaBackendConfigVersion version, int64_t* next_queue) {
  HloInstruction* param = body->parameter(0);
  HloInstruction* root = body->root();
  std::vector<RingValues> ring(consumers.size());
  for (size_t k = 0; k < consumers.size(); ++k) {
    const std::string base = consumers[k].dot->name();
    const Consumer& con = consumers[k];
    RingValues& v = ring[k];
    v.other_gte = AddGetTupleElement(body, param, slots[k].other, base + ".ring_w");
    v.other_scale_gte = slots[k].other_scale >= 0
                            ? AddGetTupleElement(body, param, slots[k].other_scale,
                                                 base + ".ring_w_scale")
                            : nullptr;
    v.other_value = con.other_dq
                        ? BuildDequantize(body, v.other_gte, v.other_scale_gte,
                                          con.other_dq->is_divide, con.other_dq->wide_type,
                                          con.other->shape())
                        : v.other_gte;
    v.scale_gte = slots[k].scale >= 0
                      ? AddGetTupleElement(body, param, slots[k].scale, base + ".ring_scale")
                      : nullptr;
    v.out = AddGetTupleElement(body, param, slots[k].out, base + ".ring_out");
  }
  for (size_t s = 0; s < updates.size(); ++s) {
    for (size_t k = 0; k < consumers.size(); ++k) {
      ring[k].out = PartialDot(body, updates[s], s, dim, consumers[k], ring[k], version,
                               next_queue);
    }
  }
  for (size_t k = 0; k < consumers.size(); ++k) {
    root->AppendOperand(ring[k].other_gte);
    if (ring[k].other_scale_gte != nullptr) root->AppendOperand(ring[k].other_scale_gte);
    if (ring[k].scale_gte != nullptr) root->AppendOperand(ring[k].scale_gte);
    root->AppendOperand(ring[k].out);
  }
  root->set_shape(state);
  root->sharding.reset();
}

}  // namespace

absl::StatusOr<bool> WindowedEinsumConsumersInRing::Run(HloModule* module) {
  bool changed = false;
  int64_t next_queue = MaxOperationQueueId(*module) + 1;
  const std::vector<HloInstruction*> whiles = CollectWhiles(module);
  for (HloInstruction* w : whiles) {
    std::optional<WindowedLoop> loop = MatchWindowedLoop(w);
    if (!loop || loop->kind != WindowedLoopKind::kAllGather || !loop->cache_index) continue;
    const int64_t c = *loop->cache_index;
    HloComputation* comp = w->parent();
    HloComputation* body = w->while_body();
    std::vector<CacheUpdate> updates;
    int64_t dim = -1;
    std::string why;
    if (!FindCacheUpdates(body, c, &updates, &dim, &why)) {
      AddRemark(w->name(), false, absl::StrCat("consumers not moved into the ring: ", why));
      continue;
    }
    // The cache's readers after the loop.
    std::vector<std::string> left;
    const std::vector<Consumer> consumers = FindConsumers(w, c, dim, &left);
    if (consumers.empty()) continue;
    std::vector<std::string> names;
    for (const Consumer& k : consumers) names.push_back(absl::StrCat("'", k.dot->name(), "'"));
    const std::string listed = absl::StrJoin(names, ", ");
    std::string note;
    if (mode_ == Mode::kNever) {
      AddRemark(w->name(), false,
                absl::StrCat("consumers ", listed, " left after the loop (",
                             std::string(kOption), "=false)"));
      continue;
    }
    if (mode_ == Mode::kAuto) {
      if (cost_oracle() == nullptr) {
        AddRemark(w->name(), false,
                  absl::StrCat("consumers ", listed,
                               " left after the loop, reading the cache as XLA does (no cost "
                               "gate; --", std::string(kOption), "=true moves them into the ring)"));
        continue;
      }
      CostQuery q;
      q.pass = std::string(kName);
      q.location = w->name();
      q.what = absl::StrCat("loop '", w->name(), "' and the consumers of its cache ", listed);
      q.seeds = {w->operand(0), w};
      for (const Consumer& k : consumers) q.seeds.push_back(k.dot);
      q.variants = {{"with the consumers after the loop", false, {}},
                    {"with every consumer in the ring", true, {{std::string(kOption), "true"}}}};
      q.fallback = 0;
      CostEstimate e = cost_oracle()->Decide(q);
      if (e.chosen == 0) {
        AddRemark(w->name(), false,
                  absl::StrCat("consumers ", listed, " left after the loop: ", e.Note()));
        continue;
      }
      note = absl::StrCat("; ", e.Note());
    }

    // The new loop state: per consumer the other operand, the scale (FP8 cache) and the output.
    if (!w->shape().IsTuple()) continue;
    Shape state = w->shape();
    ASSIGN_OR_RETURN(std::vector<Slots> slots, ExtendLoopState(w, consumers, &state));
    ComputeInRing(body, updates, dim, consumers, slots, state, version_, &next_queue);
    // The consumers read the loop's outputs.
    for (size_t k = 0; k < consumers.size(); ++k) {
      HloInstruction* dot = consumers[k].dot;
      HloInstruction* result = AddGetTupleElement(comp, w, slots[k].out, dot->name() + ".in_ring");
      if (dot->sharding) result->sharding = dot->sharding;
      RETURN_IF_ERROR(dot->ReplaceAllUsesWith(result));
      RETURN_IF_ERROR(comp->RemoveUnusedChains({dot}, Removable));
    }
    changed = true;
    AddRemark(w->name(), true,
              absl::StrCat("every consumer in the ring: ", listed, " now compute",
                           consumers.size() == 1 ? "s" : "", " their partial dot on each of the ",
                           updates.size(), " shards the loop's cache receives (",
                           consumers.size() * updates.size(),
                           " dots with their own operation_queue_id), instead of after the loop "
                           "from the cache",
                           left.empty() ? "" : absl::StrCat("; left after the loop: ",
                                                            absl::StrJoin(left, ", ")),
                           note));
  }
  return changed;
}

WEAVE_REGISTER_PASS(
    "windowed-einsum-consumers-in-ring",
    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
      const std::string text = absl::AsciiStrToLower(
          options.GetString(WindowedEinsumConsumersInRing::kOption, "auto"));
      WindowedEinsumConsumersInRing::Mode mode;
      if (text == "auto") {
        mode = WindowedEinsumConsumersInRing::Mode::kAuto;
      } else if (text == "true" || text == "1" || text == "on" || text.empty()) {
        mode = WindowedEinsumConsumersInRing::Mode::kAlways;
      } else if (text == "false" || text == "0" || text == "off") {
        mode = WindowedEinsumConsumersInRing::Mode::kNever;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "option --", std::string(WindowedEinsumConsumersInRing::kOption), ": '", text,
            "' is not auto, true or false"));
      }
      ASSIGN_OR_RETURN(XlaBackendConfigVersion v, XlaBackendConfigVersionFromOptions(options));
      return std::unique_ptr<HloPass>(
          std::make_unique<WindowedEinsumConsumersInRing>(mode, v));
    });

}  // namespace weave
