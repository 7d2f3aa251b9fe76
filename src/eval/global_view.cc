// The global-view reference of manual regions (see global_view.h).
#include "eval/global_view.h"

#include <algorithm>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/pass.h"
#include "spmd/reshard.h"
#include "spmd/sharding.h"
#include "spmd/spmd_builder.h"

namespace weave::eval {
namespace {

bool IsCall(const HloInstruction* h, std::string_view target) {
  return h->opcode() == HloOpcode::kCustomCall && h->custom_call_target() == target;
}

// The sharding a conversion call refers to: FullToShard -> its operand's (the `Sharding` call
// JAX puts before it), else its own if tiled; ShardToFull -> its own.
absl::StatusOr<spmd::Sharding> ConversionSharding(const HloInstruction* h, bool to_shard) {
  // The call's own sharding (to_shard) or its operand's (ShardToFull) says how manual the region
  // is: a manual subgroup beside tiled or replicated devices is a partially manual region.
  const HloInstruction* region = to_shard ? h : h->operand(0);
  if (region->sharding && region->sharding->kind == HloSharding::Kind::kTiled &&
      std::find(region->sharding->last_tile_dims.begin(), region->sharding->last_tile_dims.end(),
                "manual") != region->sharding->last_tile_dims.end()) {
    return absl::UnimplementedError(absl::StrCat(
        "'", h->name(), "' (", h->custom_call_target(), ") bounds a partially manual region (",
        region->sharding->ToString(), "): the global-view reference covers fully manual regions only"));
  }
  const HloInstruction* holder = h;
  if (to_shard) {
    holder = h->operand(0);
    if (!holder->sharding) holder = h;
  }
  if (!holder->sharding) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", h->name(), "' (", h->custom_call_target(), "): no sharding says how the value is ",
        to_shard ? "split into shards" : "assembled from its shards"));
  }
  const Shape& global = to_shard ? h->operand(0)->shape() : h->shape();
  absl::StatusOr<spmd::Sharding> s = spmd::Sharding::FromHlo(*holder->sharding, global);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", h->name(), "': ", s.status().message()));
  }
  if (s->HasManualSubgroup() || s->IsManual()) {
    return absl::UnimplementedError(absl::StrCat(
        "'", h->name(), "' (", h->custom_call_target(), ") converts a partially manual value (",
        s->ToString(), "): the global-view reference covers fully manual regions only"));
  }
  return *s;
}

}  // namespace

bool HasManualRegions(const HloModule& module) {
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if ((h->sharding && h->sharding->kind == HloSharding::Kind::kManual) ||
          IsCall(h, "SPMDFullToShardShape") || IsCall(h, "SPMDShardToFullShape") ||
          IsCall(h, "xla.sdy.GlobalToLocalShape") || IsCall(h, "xla.sdy.LocalToGlobalShape")) {
        return true;
      }
    }
  }
  return false;
}

std::string GlobalViewReason(const HloModule& module) {
  if (HasManualRegions(module)) return "it has manual values";
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (IsCollective(h->opcode()) && h->channel_id.has_value()) return "it calls cross-partition collectives";
    }
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HloModule>> BuildGlobalViewModule(const HloModule& global,
                                                                 int64_t num_partitions) {
  std::unique_ptr<HloModule> m = global.Clone();
  bool sdy_manual = false;
  for (const HloComputation* c : m->computations()) {
    for (const HloInstruction* h : c->instructions()) {
      sdy_manual |= IsCall(h, "xla.sdy.GlobalToLocalShape");
    }
  }
  if (sdy_manual) {
    absl::StatusOr<std::unique_ptr<HloPass>> import =
        PassRegistry::Get().Create("sharding-import", PassOptions());
    if (!import.ok()) return import.status();
    if (absl::StatusOr<bool> r = (*import)->Run(m.get()); !r.ok()) return r.status();
  }
  m->num_partitions = num_partitions;
  m->has_num_partitions = true;
  spmd::SpmdContext ctx;
  ctx.module = m.get();
  ctx.num_partitions = num_partitions;
  ctx.replica_count = 1;
  ctx.next_channel_id = m->NextChannelId();
  for (HloComputation* c : m->MakeComputationPostOrder()) {
    std::vector<HloInstruction*> calls;
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (IsCall(h, "SPMDFullToShardShape") || IsCall(h, "SPMDShardToFullShape")) {
        calls.push_back(h);
      }
    }
    if (calls.empty()) continue;
    spmd::SpmdBuilder b(c, &ctx);
    for (HloInstruction* h : calls) {
      const bool to_shard = IsCall(h, "SPMDFullToShardShape");
      absl::StatusOr<spmd::Sharding> s = ConversionSharding(h, to_shard);
      if (!s.ok()) return s.status();
      HloInstruction* x = h->operand(0);
      absl::StatusOr<HloInstruction*> r =
          to_shard ? spmd::Reshard(b, spmd::PValue{x, spmd::Sharding::Replicated(), x->shape()},
                                   *s)
                   : spmd::Reshard(b, spmd::PValue{x, *s, h->shape()},
                                   spmd::Sharding::Replicated());
      if (!r.ok()) {
        return absl::Status(r.status().code(), absl::StrCat("'", h->name(), "': ",
                                                            r.status().message()));
      }
      if ((*r)->shape().dims != h->shape().dims) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", h->name(), "' (", h->custom_call_target(), ") is ", h->shape().ToString(false),
            ", but the ", to_shard ? "tile" : "gathered value", " under ", s->ToString(), " is ",
            (*r)->shape().ToString(false)));
      }
      if (absl::Status st = h->ReplaceAllUsesWith(*r); !st.ok()) return st;
      if (absl::Status st = c->RemoveInstruction(h); !st.ok()) return st;
    }
  }
  for (HloInstruction* p : m->entry()->parameters()) p->sharding.reset();
  return m;
}

}  // namespace weave::eval
