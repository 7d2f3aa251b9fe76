// reduce-scatter-creator (see reduce_scatter_creator.h).
#include "spmd/reduce_scatter_creator.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "spmd/partition_ring.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

struct Match {
  HloInstruction* ar = nullptr;
  HloInstruction* pad = nullptr;  // optional high-side pad between the all-reduce and the slice
  HloInstruction* ds = nullptr;
  int64_t dim = -1;
};

// Checks `ds` as the slice of an all-reduce; nullopt with `why` set (empty when `ds` is not
// a dynamic-slice of an all-reduce at all: no remark).
std::optional<Match> MatchSlice(HloInstruction* ds, const HloModule& module, std::string* why) {
  why->clear();
  Match m;
  m.ds = ds;
  HloInstruction* src = ds->operand(0);
  if (src->opcode() == HloOpcode::kPad && src->operand(0)->opcode() == HloOpcode::kAllReduce) {
    m.pad = src;
    src = src->operand(0);
  }
  if (src->opcode() != HloOpcode::kAllReduce) return std::nullopt;
  m.ar = src;
  const Shape& full = m.pad ? m.pad->shape() : m.ar->shape();
  const Shape& part = ds->shape();
  if (!full.IsArray() || m.ar->operand_count() != 1 || ds->operand_count() != 1 + full.rank()) {
    *why = "not an array all-reduce of one operand";
    return std::nullopt;
  }
  if (m.ar->user_count() != 1 || (m.pad && m.pad->user_count() != 1)) {
    *why = absl::StrCat("all-reduce '", m.ar->name(), "' has users besides '", ds->name(), "'");
    return std::nullopt;
  }
  for (int64_t d = 0; d < full.rank(); ++d) {
    if (part.dims[static_cast<size_t>(d)] == full.dims[static_cast<size_t>(d)]) continue;
    if (m.dim >= 0) {
      *why = "the dynamic-slice cuts several dims";
      return std::nullopt;
    }
    m.dim = d;
  }
  if (m.dim < 0) {
    *why = "the dynamic-slice takes the whole value";
    return std::nullopt;
  }
  if (m.pad) {
    for (size_t d = 0; d < m.pad->padding().size(); ++d) {
      const PadDim& p = m.pad->padding()[d];
      if (p.lo != 0 || p.interior != 0 || p.hi < 0 ||
          (p.hi != 0 && static_cast<int64_t>(d) != m.dim)) {
        *why = absl::StrCat("pad '", m.pad->name(), "' is not a high-side pad of the sliced dim");
        return std::nullopt;
      }
    }
  }
  absl::StatusOr<PartitionRing> ring =
      AnalyzePartitionRing(*m.ar, module.num_partitions, module.replica_count);
  if (!ring.ok()) {
    *why = std::string(ring.status().message());
    return std::nullopt;
  }
  const int64_t g = ring->size();
  const int64_t block = part.dims[static_cast<size_t>(m.dim)];
  if (block * g != full.dims[static_cast<size_t>(m.dim)]) {
    *why = absl::StrCat("the slice takes ", block, " of ", full.dims[static_cast<size_t>(m.dim)],
                        " on dim ", m.dim, ", not one block per member of ", ring->groups_text);
    return std::nullopt;
  }
  for (int64_t pid = 0; pid < module.num_partitions; ++pid) {
    for (int64_t d = 0; d < full.rank(); ++d) {
      const HloInstruction* off = ds->operand(1 + d);
      std::optional<int64_t> v = EvaluateForPartition(off, pid);
      if (!v) {
        *why = absl::StrCat("offset '", off->name(), "' is not a function of partition-id");
        return std::nullopt;
      }
      const int64_t limit = full.dims[static_cast<size_t>(d)] - part.dims[static_cast<size_t>(d)];
      const int64_t got = std::clamp<int64_t>(*v, 0, limit);
      const int64_t want = d == m.dim ? ring->index_in_group[static_cast<size_t>(pid)] * block : 0;
      if (got != want) {
        *why = absl::StrCat("offset on dim ", d, " is ", got, " on partition ", pid, ", not ",
                            want, " (its block in ", ring->groups_text, ")");
        return std::nullopt;
      }
    }
  }
  return m;
}

}  // namespace

absl::StatusOr<bool> ReduceScatterCreator::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->computations()) {
    std::vector<HloInstruction*> slices;
    for (HloInstruction* h : comp->instructions()) {
      if (h->opcode() == HloOpcode::kDynamicSlice) slices.push_back(h);
    }
    for (HloInstruction* ds : slices) {
      std::string why;
      std::optional<Match> m = MatchSlice(ds, *module, &why);
      if (!m) {
        if (!why.empty() && remarks_) {
          remarks_->push_back({std::string(name()), ds->name(), false,
                               absl::StrCat("all-reduce + dynamic-slice kept: ", why)});
        }
        continue;
      }
      HloInstruction* x = m->ar->operand(0);
      if (m->pad) {
        Shape ps = x->shape();
        ps.dims[static_cast<size_t>(m->dim)] = m->pad->shape().dims[static_cast<size_t>(m->dim)];
        ps.layout.reset();
        HloInstruction* p =
            comp->AddInstruction(m->pad->CloneWithNewOperands(ps, {x, m->pad->operand(1)}));
        x = p;
      }
      Shape rs_shape = ds->shape();
      // The reduce-scatter takes the all-reduce's channel_id, replica_groups,
      // use_global_device_ids and to_apply.
      auto r = HloInstruction::Create(HloOpcode::kReduceScatter, rs_shape, {x});
      r->channel_id = m->ar->channel_id;
      r->replica_groups = m->ar->replica_groups;
      r->use_global_device_ids = m->ar->use_global_device_ids;
      *r->mutable_called_computations() = m->ar->called_computations();
      r->dimensions = {m->dim};
      r->metadata = m->ar->metadata;
      r->sharding = ds->sharding;
      r->set_name("reduce-scatter");
      HloInstruction* added = comp->AddInstruction(std::move(r));
      const std::string ar_name = m->ar->name(), ds_name = ds->name();
      // ReplaceInstruction's steps, watching whether the all-reduce goes with the slice's dead
      // operands (pad, all-reduce) or stays because it counts as side-effecting; then it is
      // removed here (no users left). Watched, not looked up by name: a name lookup is a scan
      // of the computation, per candidate.
      HloInstruction* ar = m->ar;
      bool ar_removed = false;
      RETURN_IF_ERROR(ds->ReplaceAllUsesWith(added));
      if (absl::Status st = comp->RemoveUnusedChains(
              {ds},
              [ar, &ar_removed](const HloInstruction* i) {
                const bool removable = !i->HasSideEffect();
                if (removable && i == ar) ar_removed = true;
                return removable;
              });
          !st.ok()) {
        return st;
      }
      if (!ar_removed && ar->user_count() == 0 && ar != comp->root()) {
        if (absl::Status st = comp->RemoveUnusedChains(
                {ar}, [](const HloInstruction*) { return true; });
            !st.ok()) {
          return st;
        }
        ar_removed = true;
      }
      if (ar_removed) added->set_name(ar_name);
      if (remarks_) {
        remarks_->push_back({std::string(name()), added->name(), true,
                             absl::StrCat("all-reduce '", ar_name, "' + dynamic-slice '", ds_name,
                                          "' became a reduce-scatter on dim ", m->dim)});
      }
      changed = true;
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("reduce-scatter-creator",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::make_unique<ReduceScatterCreator>();
                    });

}  // namespace weave::spmd
