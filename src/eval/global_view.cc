// The global-view reference of manual regions (see global_view.h).
#include "eval/global_view.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/pass.h"
#include "spmd/reshard.h"
#include "spmd/sharding.h"
#include "spmd/spmd_builder.h"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace {

bool IsCall(const HloInstruction* h, std::string_view target) {
  return h->opcode() == HloOpcode::kCustomCall && h->custom_call_target() == target;
}

// The sharding a conversion call of a fully manual region refers to: FullToShard -> its
// operand's (the `Sharding` call JAX puts before it), else its own if tiled; ShardToFull -> its
// own. (Calls with a manual subgroup on either side go to ConvertPartiallyManual.)
absl::StatusOr<spmd::Sharding> ConversionSharding(const HloInstruction* h, bool to_shard) {
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
  if (s->IsManual() || s->HasManualSubgroup()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", h->name(), "' (", h->custom_call_target(), ") refers to a manual sharding (",
        s->ToString(), "), not the tiling of its full value"));
  }
  return *s;
}

// The manual subgroup index of `device` under `s` (0 when `s` has no manual subgroup).
int64_t ManualIndex(const spmd::Sharding& s, int64_t device) {
  if (!s.HasManualSubgroup()) return 0;
  std::optional<std::vector<int64_t>> idx = s.ArrayIndex(device);
  if (!idx) return 0;
  return (*idx)[static_cast<size_t>(s.SubgroupArrayDim(spmd::SubgroupType::kManual))];
}

bool HasManualSubgroup(const HloInstruction* h) {
  return h->sharding && h->sharding->kind == HloSharding::Kind::kTiled &&
         std::find(h->sharding->last_tile_dims.begin(), h->sharding->last_tile_dims.end(), "manual") !=
             h->sharding->last_tile_dims.end();
}

// A conversion at the edge of a partially manual region (a manual subgroup on either side), in
// the global view, where every device holds the whole value of its region: the value of its
// manual group inside a partially manual region, the whole array outside, every device its own
// value inside a fully manual one.
//   SPMDShardToFullShape(x): the blocks x (shape `local`) of the outer value (shape `full`) held
//     by the devices of each outer manual group (the call's own manual subgroup; all devices
//     when it has none) are gathered: a device's block along dim k is its tile offset under the
//     call's own sharding divided by local_k (the inner region's own tiling inside the group
//     is already whole in the view). One all-gather per set of one holder of every block, then
//     the blocks laid out in place.
//   SPMDFullToShardShape(x): each device takes the block of x its manual group index names
//     (row-major over the blocks, blocks = full / local per dim), the devices of a group alike.
absl::StatusOr<HloInstruction*> ConvertPartiallyManual(spmd::SpmdBuilder& b, HloInstruction* h, bool to_shard,
                                                      int64_t n) {
  HloInstruction* x = h->operand(0);
  const Shape& full = to_shard ? x->shape() : h->shape();
  const Shape& local = to_shard ? h->shape() : x->shape();
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("'", h->name(), "' (", h->custom_call_target(), "): ", what));
  };
  if (!full.IsArray() || !local.IsArray() || full.rank() != local.rank()) {
    return bad("the full and the shard shapes differ in rank");
  }
  std::vector<int64_t> blocks;
  int64_t count = 1;
  for (int64_t k = 0; k < full.rank(); ++k) {
    const int64_t l = local.dims[static_cast<size_t>(k)], f = full.dims[static_cast<size_t>(k)];
    if (l <= 0 || l > f) return bad(absl::StrCat("dim ", k, " is ", l, " inside and ", f, " outside"));
    blocks.push_back((f + l - 1) / l);
    count *= blocks.back();
  }
  if (!h->sharding) return bad("no sharding");
  absl::StatusOr<spmd::Sharding> own = spmd::Sharding::FromHlo(*h->sharding, to_shard ? local : full);
  if (!own.ok()) return bad(std::string(own.status().message()));
  // Block (flat, row-major over `blocks`) and outer group of each device.
  std::vector<int64_t> block(static_cast<size_t>(n)), group(static_cast<size_t>(n));
  if (to_shard) {
    const int64_t m = own->SubgroupSize(spmd::SubgroupType::kManual);
    if (m != count) {
      return bad(absl::StrCat(m, " manual groups for ", count, " blocks of ", local.ToString(false), " in ",
                              full.ToString(false)));
    }
    for (int64_t d = 0; d < n; ++d) block[static_cast<size_t>(d)] = ManualIndex(*own, d);
    // Each device's block: a dynamic-slice at the block's offsets.
    std::vector<HloInstruction*> at;
    for (int64_t k = 0; k < full.rank(); ++k) {
      std::vector<int64_t> offsets(static_cast<size_t>(n));
      for (int64_t d = 0; d < n; ++d) {
        int64_t q = block[static_cast<size_t>(d)];
        for (int64_t j = full.rank() - 1; j > k; --j) q /= blocks[static_cast<size_t>(j)];
        offsets[static_cast<size_t>(d)] = (q % blocks[static_cast<size_t>(k)]) * local.dims[static_cast<size_t>(k)];
      }
      at.push_back(b.TableLookup(offsets));
    }
    std::vector<int64_t> padded;
    for (int64_t k = 0; k < full.rank(); ++k) padded.push_back(blocks[static_cast<size_t>(k)] * local.dims[static_cast<size_t>(k)]);
    HloInstruction* src = padded == full.dims ? x : b.PadHigh(x, padded);
    return b.DynamicSlice(src, at, local.dims);
  }
  for (int64_t d = 0; d < n; ++d) {
    int64_t flat = 0;
    for (int64_t k = 0; k < full.rank(); ++k) {
      const int64_t off = spmd::TileOffset(*own, d, k, full.dims[static_cast<size_t>(k)]);
      flat = flat * blocks[static_cast<size_t>(k)] + std::min(off / local.dims[static_cast<size_t>(k)],
                                                               blocks[static_cast<size_t>(k)] - 1);
    }
    block[static_cast<size_t>(d)] = flat;
    group[static_cast<size_t>(d)] = ManualIndex(*own, d);
  }
  // Per outer group, the holders of each block; sets of one holder per block, in block order.
  std::map<int64_t, std::vector<std::vector<int64_t>>> holders;  // group -> block -> devices
  for (int64_t d = 0; d < n; ++d) {
    std::vector<std::vector<int64_t>>& g = holders[group[static_cast<size_t>(d)]];
    g.resize(static_cast<size_t>(count));
    g[static_cast<size_t>(block[static_cast<size_t>(d)])].push_back(d);
  }
  std::vector<std::vector<int64_t>> sets;
  for (auto& [g, by_block] : holders) {
    const size_t r = by_block[0].size();
    for (const std::vector<int64_t>& devs : by_block) {
      if (devs.size() != r || r == 0) {
        return bad(absl::StrCat("the devices of manual group ", g, " do not hold every block of ",
                                full.ToString(false), " equally often"));
      }
    }
    for (size_t j = 0; j < r; ++j) {
      sets.emplace_back();
      for (const std::vector<int64_t>& devs : by_block) sets.back().push_back(devs[j]);
    }
  }
  // [1, local...] gathered to [count, local...], then [b0.., l0..] interleaved to [b0, l0, b1, l1, ..].
  const int64_t r = full.rank();
  std::vector<int64_t> one = {1};
  one.insert(one.end(), local.dims.begin(), local.dims.end());
  HloInstruction* g = b.AllGather(b.Reshape(x, one), 0, sets);
  std::vector<int64_t> split = blocks;
  split.insert(split.end(), local.dims.begin(), local.dims.end());
  HloInstruction* v = b.Reshape(g, split);
  std::vector<int64_t> perm, merged;
  for (int64_t k = 0; k < r; ++k) {
    perm.push_back(k);
    perm.push_back(r + k);
    merged.push_back(blocks[static_cast<size_t>(k)] * local.dims[static_cast<size_t>(k)]);
  }
  v = b.Reshape(b.Transpose(v, perm), merged);
  return merged == full.dims ? v : b.Slice(v, full.dims);
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
    ASSIGN_OR_RETURN(std::unique_ptr<HloPass> import,
                     PassRegistry::Get().Create("sharding-import", PassOptions()));
    RETURN_IF_ERROR(import->Run(m.get()));
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
      if (HasManualSubgroup(h) || HasManualSubgroup(h->operand(0))) {
        ASSIGN_OR_RETURN(HloInstruction* r, ConvertPartiallyManual(b, h, to_shard, num_partitions));
        RETURN_IF_ERROR(h->ReplaceAllUsesWith(r));
        RETURN_IF_ERROR(c->RemoveInstruction(h));
        continue;
      }
      ASSIGN_OR_RETURN(spmd::Sharding s, ConversionSharding(h, to_shard));
      HloInstruction* x = h->operand(0);
      absl::StatusOr<HloInstruction*> r =
          to_shard ? spmd::Reshard(b, spmd::PValue{x, spmd::Sharding::Replicated(), x->shape()},
                                   s)
                   : spmd::Reshard(b, spmd::PValue{x, s, h->shape()},
                                   spmd::Sharding::Replicated());
      if (!r.ok()) {
        return absl::Status(r.status().code(), absl::StrCat("'", h->name(), "': ",
                                                            r.status().message()));
      }
      if ((*r)->shape().dims != h->shape().dims) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", h->name(), "' (", h->custom_call_target(), ") is ", h->shape().ToString(false),
            ", but the ", to_shard ? "tile" : "gathered value", " under ", s.ToString(), " is ",
            (*r)->shape().ToString(false)));
      }
      RETURN_IF_ERROR(h->ReplaceAllUsesWith(*r));
      RETURN_IF_ERROR(c->RemoveInstruction(h));
    }
  }
  for (HloInstruction* p : m->entry()->parameters()) p->sharding.reset();
  return m;
}

}  // namespace weave::eval
