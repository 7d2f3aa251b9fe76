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
    std::vector<Consumer> consumers;
    std::vector<std::string> left;
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
              left.push_back(absl::StrCat("'", m->name(), "' (not a scalar dequantization)"));
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
            left.push_back(absl::StrCat("'", r->name(), "' (not a dot)"));
            continue;
          }
          if (UserDisablesCollectiveMatmul(*r)) {
            left.push_back(absl::StrCat("'", r->name(), "' (the user's _xla_collective_matmul=\"none\")"));
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
            left.push_back(absl::StrCat("'", r->name(), "' (reads the cached dim ", dim,
                                        " as a contracting or batch dim)"));
            continue;
          }
          consumers.push_back(k);
        }
      }
    }
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
    const Shape old_state = w->shape();
    if (!old_state.IsTuple()) continue;
    Shape state = old_state;
    struct Slots {
      int64_t other = -1, other_scale = -1, scale = -1, out = -1;
    };
    std::vector<Slots> slots(consumers.size());
    std::vector<HloInstruction*> init_extra;
    for (size_t k = 0; k < consumers.size(); ++k) {
      const Consumer& con = consumers[k];
      slots[k].other = static_cast<int64_t>(state.tuple_shapes.size());
      HloInstruction* carried = con.other_dq ? con.other_dq->q : con.other;
      state.tuple_shapes.push_back(carried->shape());
      init_extra.push_back(carried);
      if (con.other_dq) {
        slots[k].other_scale = static_cast<int64_t>(state.tuple_shapes.size());
        state.tuple_shapes.push_back(con.other_dq->scale->shape());
        init_extra.push_back(con.other_dq->scale);
      }
      if (con.dq) {
        slots[k].scale = static_cast<int64_t>(state.tuple_shapes.size());
        state.tuple_shapes.push_back(con.dq->scale->shape());
        init_extra.push_back(con.dq->scale);
      }
      slots[k].out = static_cast<int64_t>(state.tuple_shapes.size());
      state.tuple_shapes.push_back(con.dot->shape());
      // Every block of the output is written in the body (one per cache update): XLA's
      // AllocateBuffer, not a zero fill.
      HloInstruction* init = comp->AddInstruction(HloOpcode::kCustomCall, con.dot->shape(), {},
                                                  absl::StrCat(con.dot->name(), ".ring_init"));
      init->set_custom_call_target("AllocateBuffer");
      init_extra.push_back(init);
    }
    RETURN_IF_ERROR(AppendLoopState(w, init_extra, ".in_ring"));
    HloInstruction* param = body->parameter(0);
    // The body: every consumer's partial dot next to every cache update.
    HloInstruction* root = body->root();
    std::vector<HloInstruction*> other_gte, other_value, other_scale_gte, scale_gte, out_cur;
    for (size_t k = 0; k < consumers.size(); ++k) {
      const std::string base = consumers[k].dot->name();
      other_gte.push_back(AddGetTupleElement(body, param, slots[k].other, base + ".ring_w"));
      other_scale_gte.push_back(slots[k].other_scale >= 0
                                    ? AddGetTupleElement(body, param, slots[k].other_scale,
                                             base + ".ring_w_scale")
                                    : nullptr);
      const Consumer& con = consumers[k];
      other_value.push_back(con.other_dq
                                ? BuildDequantize(body, other_gte[k], other_scale_gte[k],
                                                  con.other_dq->is_divide,
                                                  con.other_dq->wide_type, con.other->shape())
                                : other_gte[k]);
      scale_gte.push_back(slots[k].scale >= 0
                              ? AddGetTupleElement(body, param, slots[k].scale, base + ".ring_scale")
                              : nullptr);
      out_cur.push_back(AddGetTupleElement(body, param, slots[k].out, base + ".ring_out"));
    }
    for (size_t s = 0; s < updates.size(); ++s) {
      const CacheUpdate& u = updates[s];
      for (size_t k = 0; k < consumers.size(); ++k) {
        const Consumer& con = consumers[k];
        const std::string base = absl::StrCat(con.dot->name(), ".ring", s);
        HloInstruction* a = u.shard;
        if (con.dq) {
          Shape wide = u.shard->shape();
          wide.element_type = con.dq->wide_type;
          a = BuildDequantize(body, u.shard, scale_gte[k], con.dq->is_divide,
                              con.dq->wide_type, wide);
        }
        Shape part_shape = con.dot->shape();
        part_shape.dims[static_cast<size_t>(con.out_dim)] =
            u.shard->shape().dims[static_cast<size_t>(dim)];
        std::vector<HloInstruction*> ops =
            con.side == 0 ? std::vector<HloInstruction*>{a, other_value[k]}
                          : std::vector<HloInstruction*>{other_value[k], a};
        std::unique_ptr<HloInstruction> clone = con.dot->CloneWithNewOperands(part_shape, ops);
        clone->set_name(base);
        clone->sharding.reset();
        clone->backend_config.clear();
        clone->metadata.clear();
        HloInstruction* part = body->AddInstruction(std::move(clone));
        GpuBackendConfigEditor pcfg(version_);
        const int64_t queue = next_queue++;
        pcfg.set_operation_queue_id(queue);
        pcfg.ApplyTo(part);
        // The block offset on the output dim is the cache update's on the cached dim.
        HloInstruction* offset = u.offsets[static_cast<size_t>(dim)];
        HloInstruction* zero = AddScalarConstant(body, offset->shape().element_type, 0, base + ".zero");
        std::vector<HloInstruction*> dus_ops = {out_cur[k], part};
        for (int64_t i = 0; i < con.dot->shape().rank(); ++i) {
          dus_ops.push_back(i == con.out_dim ? offset : zero);
        }
        HloInstruction* dus = body->AddInstruction(HloOpcode::kDynamicUpdateSlice,
                                                   con.dot->shape(), dus_ops, base + ".out");
        GpuBackendConfigEditor dcfg(version_);
        dcfg.AddWaitOnOperationQueue(queue);
        dcfg.ApplyTo(dus);
        out_cur[k] = dus;
      }
    }
    for (size_t k = 0; k < consumers.size(); ++k) {
      root->AppendOperand(other_gte[k]);
      if (other_scale_gte[k] != nullptr) root->AppendOperand(other_scale_gte[k]);
      if (scale_gte[k] != nullptr) root->AppendOperand(scale_gte[k]);
      root->AppendOperand(out_cur[k]);
    }
    root->set_shape(state);
    root->sharding.reset();
    // The consumers read the loop's outputs.
    for (size_t k = 0; k < consumers.size(); ++k) {
      HloInstruction* dot = consumers[k].dot;
      HloInstruction* result = AddGetTupleElement(comp, w, slots[k].out, dot->name() + ".in_ring");
      if (dot->sharding) result->sharding = dot->sharding;
      if (absl::Status s = dot->ReplaceAllUsesWith(result); !s.ok()) return s;
      if (absl::Status s = comp->RemoveUnusedChains({dot}, Removable); !s.ok()) return s;
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
