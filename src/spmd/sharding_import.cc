// sharding-import (see sharding_import.h).
#include "spmd/sharding_import.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/mesh.h"
#include "spmd/inline_call.h"
#include "spmd/sdy_text.h"
#include "spmd/sharding.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

constexpr char kSdySharding[] = "xla.sdy.sharding";

bool IsCall(const HloInstruction* h, std::string_view target) {
  return h->opcode() == HloOpcode::kCustomCall && h->custom_call_target() == target;
}

absl::Status Error(const HloInstruction* h, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("sharding-import: '", h->name(), "': ", what));
}

// GSPMD canonical form of an IR sharding for `shape` (named forms rewritten).
absl::StatusOr<HloSharding> Canonical(const HloSharding& h, const Shape& shape) {
  ASSIGN_OR_RETURN(Sharding s, Sharding::FromHlo(h, shape));
  return s.ToHlo();
}

// The shardings of a Shardy attribute value for a value of `shape`; open dims collected.
absl::StatusOr<HloSharding> SdyToHlo(std::string_view text, const Shape& shape,
                                     const SdyMeshes& meshes, std::vector<int64_t>* open_dims,
                                     int64_t* priority) {
  std::vector<MeshSharding> values;
  const std::string t = UnescapeSdy(text);
  if (absl::StartsWith(t, "#sdy.sharding_per_value")) {
    ASSIGN_OR_RETURN(std::vector<MeshSharding> v, ParseSdyShardingPerValue(t, meshes));
    values = std::move(v);
  } else {
    ASSIGN_OR_RETURN(MeshSharding v, ParseSdySharding(t, meshes));
    values.push_back(std::move(v));
  }
  std::vector<const Shape*> shapes;
  if (shape.IsTuple() && (values.size() != 1 || shape.tuple_shapes.size() == 1)) {
    for (const Shape& e : shape.tuple_shapes) shapes.push_back(&e);
  } else {
    shapes.push_back(&shape);
  }
  if (shapes.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Shardy gives ", values.size(),
                                                   " shardings for ", shapes.size(), " results"));
  }
  HloSharding out;
  out.kind = HloSharding::Kind::kTuple;
  for (size_t k = 0; k < values.size(); ++k) {
    ASSIGN_OR_RETURN(HloSharding h, MeshShardingToHlo(values[k], "", shapes[k]->rank()));
    if (values.size() == 1) {
      for (size_t d = 0; d < values[k].dims.size(); ++d) {
        if (!values[k].dims[d].closed) open_dims->push_back(static_cast<int64_t>(d));
        if (values[k].dims[d].priority >= 0) {
          *priority = *priority < 0 ? values[k].dims[d].priority
                                    : std::min(*priority, values[k].dims[d].priority);
        }
      }
    }
    if (shapes.size() == 1 && shapes[0] == &shape) return Canonical(h, shape);
    ASSIGN_OR_RETURN(HloSharding c, Canonical(h, *shapes[k]));
    if (c.kind == HloSharding::Kind::kTuple) {
      out.tuple.insert(out.tuple.end(), c.tuple.begin(), c.tuple.end());
    } else {
      for (int64_t l = 0; l < Sharding::LeafCount(*shapes[k]); ++l) out.tuple.push_back(c);
    }
  }
  return Canonical(out, shape);
}

// Removes every xla.sdy.* frontend attribute of `h`.
void DropSdyAttributes(HloInstruction* h) {
  for (auto it = h->frontend_attributes.begin(); it != h->frontend_attributes.end();) {
    if (absl::StartsWith(it->first, "xla.sdy.")) {
      it = h->frontend_attributes.erase(it);
    } else {
      ++it;
    }
  }
}

HloInstruction* AddCustomCall(HloComputation* c, const Shape& shape, HloInstruction* operand,
                              const std::string& target, const HloSharding& sharding,
                              const std::string& name) {
  HloInstruction* h = c->AddInstruction(HloOpcode::kCustomCall, shape, {operand}, name);
  h->set_custom_call_target(target);
  h->sharding = sharding;
  return h;
}

// The sharding of a manual region's values: `ms` with the manual axes moved out of the dims.
absl::StatusOr<HloSharding> ManualSharding(MeshSharding ms, const std::vector<std::string>& axes,
                                           const Shape& shape) {
  std::vector<int64_t> manual;
  for (const std::string& a : axes) {
    const int64_t i = ms.mesh.AxisIndex(a);
    if (i < 0) return absl::InvalidArgumentError(absl::StrCat("manual axis '", a, "' is not in the mesh"));
    manual.push_back(i);
  }
  bool all_manual = true;
  for (size_t a = 0; a < ms.mesh.axis_sizes.size(); ++a) {
    if (ms.mesh.axis_sizes[a] > 1 &&
        std::find(manual.begin(), manual.end(), static_cast<int64_t>(a)) == manual.end()) {
      all_manual = false;
    }
  }
  if (all_manual) {
    HloSharding h;
    h.kind = HloSharding::Kind::kManual;
    h.text = "manual";
    return h;
  }
  auto is_manual = [&](const AxisRef& r) {
    return std::find(manual.begin(), manual.end(), r.axis) != manual.end();
  };
  for (DimAxes& d : ms.dims) d.axes.erase(std::remove_if(d.axes.begin(), d.axes.end(), is_manual), d.axes.end());
  ms.manual.clear();
  for (int64_t a : manual) ms.manual.push_back(AxisRef{a});
  ASSIGN_OR_RETURN(HloSharding h, MeshShardingToHlo(ms, "", shape.rank()));
  return Canonical(h, shape);
}

// Reports an analysis remark (location, message): the pass's AddAnalysisRemark.
using AnalysisRemarkFn = absl::FunctionRef<void(std::string, std::string)>;

// The meshes of the module's `xla.sdy.meshes` frontend attribute (none when it has none); the
// xla.sdy.* entries are then dropped from that attribute, setting `changed`. InvalidArgument when
// the meshes do not parse.
absl::StatusOr<SdyMeshes> ImportModuleMeshes(HloModule* module, bool& changed) {
  SdyMeshes meshes;
  for (auto it = module->header_attributes.begin(); it != module->header_attributes.end(); ++it) {
    if (it->first != "frontend_attributes") continue;
    std::map<std::string, std::string> attrs = SplitFrontendAttributes(it->second);
    auto m = attrs.find("xla.sdy.meshes");
    if (m != attrs.end()) {
      absl::StatusOr<SdyMeshes> parsed = ParseSdyMeshes(m->second);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharding-import: xla.sdy.meshes: ", parsed.status().message()));
      }
      meshes = *std::move(parsed);
    }
    std::vector<std::string> kept;
    for (const auto& [k, v] : attrs) {
      if (!absl::StartsWith(k, "xla.sdy.")) kept.push_back(absl::StrCat(k, "=", v));
    }
    if (kept.size() != attrs.size()) {
      changed = true;
      if (kept.empty()) {
        module->header_attributes.erase(it);
      } else {
        it->second = absl::StrCat("{", absl::StrJoin(kept, ","), "}");
      }
      break;
    }
  }
  return meshes;
}

// `h`'s Shardy sharding `text` as its sharding= (a contradicting sharding= JAX wrote is
// remarked through `remark`: Shardy wins), its open dims and priority recorded as Weave's
// frontend attributes. InvalidArgument naming `h` when `text` does not fit its shape.
absl::Status ImportSdySharding(HloInstruction* h, std::string_view text, const SdyMeshes& meshes,
                               AnalysisRemarkFn remark) {
  std::vector<int64_t> open;
  int64_t priority = -1;
  absl::StatusOr<HloSharding> s = SdyToHlo(text, h->shape(), meshes, &open, &priority);
  if (!s.ok()) return Error(h, s.status().message());
  if (h->sharding) {
    absl::StatusOr<Sharding> mine = Sharding::FromHlo(*h->sharding, h->shape());
    absl::StatusOr<Sharding> theirs = Sharding::FromHlo(*s, h->shape());
    if (!mine.ok() || !theirs.ok() || *mine != *theirs) {
      remark(h->name(), absl::StrCat("warning: sharding=", h->sharding->ToString(),
                                     " contradicts the Shardy sharding ", s->ToString(),
                                     ": Shardy wins"));
    }
  }
  h->sharding = *std::move(s);
  if (!open.empty()) {
    h->SetFrontendAttribute(kUnspecifiedDimsAttr, absl::StrCat("[", absl::StrJoin(open, ","), "]"));
  }
  if (priority >= 0) h->SetFrontendAttribute(kShardingPriorityAttr, absl::StrCat(priority));
  return absl::OkStatus();
}

// `h`'s own sharding= (it has one) in GSPMD canonical text (an outfeed's token entry dropped),
// setting `changed` when it changes. InvalidArgument naming `h` when it does not fit h's shape.
absl::Status CanonicalizeSharding(HloInstruction* h, bool& changed) {
  // An outfeed's tuple sharding may also name its token, after the data's leaves (XLA
  // prints {{data..}, {token}}): the token's entry carries nothing and goes.
  if (h->opcode() == HloOpcode::kOutfeed && h->sharding->kind == HloSharding::Kind::kTuple &&
      static_cast<int64_t>(h->sharding->tuple.size()) == Sharding::LeafCount(ShapeOfSharding(*h)) + 1) {
    HloSharding data = *h->sharding;
    data.tuple.pop_back();
    data.text.clear();
    h->sharding = std::move(data);
    changed = true;
  }
  // GSPMD canonical text (named forms included).
  absl::StatusOr<HloSharding> s = Canonical(*h->sharding, ShapeOfSharding(*h));
  if (!s.ok()) return Error(h, s.status().message());
  if (s->text != h->sharding->text) changed = true;
  h->sharding = *std::move(s);
  return absl::OkStatus();
}

// One instruction's shardings imported: its Shardy sharding (counted in `imported`) or its own
// canonicalized, a sharding group's id put on its operand, its xla.sdy.* attributes dropped (but
// on manual computation boundaries); sets `changed`. The helpers' errors, naming `h`.
absl::Status ImportInstructionSharding(HloInstruction* h, const SdyMeshes& meshes,
                                       AnalysisRemarkFn remark, int64_t& imported, bool& changed) {
  auto attr = h->frontend_attributes.find(kSdySharding);
  if (attr != h->frontend_attributes.end()) {
    RETURN_IF_ERROR(ImportSdySharding(h, attr->second, meshes, remark));
    ++imported;
    changed = true;
  } else if (h->sharding) {
    RETURN_IF_ERROR(CanonicalizeSharding(h, changed));
  }
  if (h->opcode() == HloOpcode::kCustomCall && IsCall(h, "xla.sdy.ShardingGroup")) {
    if (auto id = h->GetFrontendAttribute("xla.sdy.sharding_group_id"); id && h->operand_count() == 1) {
      h->operand(0)->SetFrontendAttribute(kShardAsAttr, *id);
    }
  }
  const size_t before = h->frontend_attributes.size();
  if (!IsCall(h, "xla.sdy.GlobalToLocalShape") && !IsCall(h, "xla.sdy.LocalToGlobalShape")) {
    DropSdyAttributes(h);
  }
  changed |= before != h->frontend_attributes.size();
  return absl::OkStatus();
}

// Folds `h`, an xla.sdy.FuncResultSharding in computation `c` read by the entry's root tuple
// `root`, into the root's tuple sharding (the leaves of h's operand slots), then removes `h`.
// InvalidArgument naming the root when its sharding does not fit its shape.
absl::Status FoldFuncResultIntoRoot(HloComputation* c, HloInstruction* h, HloInstruction* root) {
  absl::StatusOr<Sharding> root_sharding =
      root->sharding ? Sharding::FromHlo(*root->sharding, root->shape())
                     : absl::StatusOr<Sharding>(Sharding::Broadcast(Sharding::Unknown(), root->shape()));
  if (!root_sharding.ok()) return Error(root, root_sharding.status().message());
  Sharding leaf = h->sharding ? *Sharding::FromHlo(*h->sharding, h->shape()) : Sharding::Unknown();
  std::vector<Sharding> leaves = root_sharding->IsTuple()
                                     ? root_sharding->leaves()
                                     : std::vector<Sharding>{*root_sharding};
  int64_t first = 0;
  for (int64_t i = 0; i < root->operand_count(); ++i) {
    const int64_t n = Sharding::LeafCount(root->operand(i)->shape());
    if (root->operand(i) == h) {
      for (int64_t k = 0; k < n; ++k) {
        leaves[static_cast<size_t>(first + k)] = leaf.IsTuple() ? leaf.leaves()[static_cast<size_t>(k)] : leaf;
      }
    }
    first += n;
  }
  root->sharding = Sharding::Tuple(std::move(leaves)).ToHlo();
  RETURN_IF_ERROR(h->ReplaceAllUsesWith(h->operand(0)));
  RETURN_IF_ERROR(c->RemoveInstruction(h));
  return absl::OkStatus();
}

// The Shardy calls: an unused xla.sdy.ShardingGroup removed; an xla.sdy.FuncResultSharding
// folded into the entry root's tuple sharding when it sits directly under it, else made a
// `Sharding` call. Sets `changed`; InvalidArgument naming the call or root, or a removal's error.
absl::Status ImportSdyCalls(HloModule* module, bool& changed) {
  HloComputation* entry = module->entry();
  for (HloComputation* c : module->MakeComputationPostOrder()) {
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (h->opcode() != HloOpcode::kCustomCall) continue;
      if (IsCall(h, "xla.sdy.ShardingGroup") && h->user_count() == 0 && !h->IsRoot()) {
        RETURN_IF_ERROR(c->RemoveInstruction(h));
        changed = true;
        continue;
      }
      if (!IsCall(h, "xla.sdy.FuncResultSharding")) continue;
      changed = true;
      if (h->operand_count() != 1) return Error(h, "FuncResultSharding needs one operand");
      HloInstruction* root = entry->root();
      const bool under_root = c == entry && h->user_count() == 1 && h->users()[0] == root &&
                              root->opcode() == HloOpcode::kTuple && !h->IsRoot();
      if (!under_root) {
        h->set_custom_call_target("Sharding");
        std::erase_if(*h->mutable_raw_attributes(),
                      [](const auto& a) { return a.first == "custom_call_has_side_effect"; });
        continue;
      }
      // Fold into the root's tuple sharding.
      RETURN_IF_ERROR(FoldFuncResultIntoRoot(c, h, root));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> ShardingImport::Run(HloModule* module) {
  bool changed = false;
  // Module-level meshes.
  ASSIGN_OR_RETURN(const SdyMeshes meshes, ImportModuleMeshes(module, changed));

  // Shardings on values and ops.
  int64_t imported = 0;
  const auto remark = [this](std::string location, std::string message) {
    AddAnalysisRemark(std::move(location), std::move(message));
  };
  for (HloComputation* c : module->computations()) {
    for (HloInstruction* h : c->instructions()) {
      RETURN_IF_ERROR(ImportInstructionSharding(h, meshes, remark, imported, changed));
    }
  }
  if (imported > 0) {
    AddAnalysisRemark(module->name(), absl::StrCat("imported ", imported, " Shardy shardings"));
  }

  // Calls: FuncResultSharding, ShardingGroup, manual computations.
  RETURN_IF_ERROR(ImportSdyCalls(module, changed));
  ASSIGN_OR_RETURN(bool manual, ImportManualComputations(module, meshes));
  return changed || manual;
}

absl::StatusOr<bool> ShardingImport::ImportManualComputations(HloModule* module,
                                                              const SdyMeshes& meshes) {
  bool changed = false;
  for (HloComputation* c : module->MakeComputationPostOrder()) {
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      const bool g2l = IsCall(h, "xla.sdy.GlobalToLocalShape");
      const bool l2g = IsCall(h, "xla.sdy.LocalToGlobalShape");
      if (!g2l && !l2g) continue;
      changed = true;
      auto shardings_text = h->GetFrontendAttribute(g2l ? "xla.sdy.in_shardings" : "xla.sdy.out_shardings");
      auto axes_text = h->GetFrontendAttribute("xla.sdy.manual_axes");
      if (!shardings_text || !axes_text) {
        return Error(h, "a manual computation boundary without in/out_shardings or manual_axes");
      }
      absl::StatusOr<std::vector<MeshSharding>> ms = ParseSdyShardingPerValue(*shardings_text, meshes);
      if (!ms.ok()) return Error(h, ms.status().message());
      absl::StatusOr<std::vector<std::string>> axes = ParseSdyManualAxes(*axes_text);
      if (!axes.ok()) return Error(h, axes.status().message());
      if (static_cast<int64_t>(ms->size()) != h->operand_count()) {
        return Error(h, "the number of shardings differs from the number of operands");
      }
      std::vector<HloInstruction*> outs;
      for (int64_t i = 0; i < h->operand_count(); ++i) {
        HloInstruction* x = h->operand(i);
        const Shape& result = h->shape().IsTuple() ? h->shape().tuple_shapes[static_cast<size_t>(i)]
                                                   : h->shape();
        const Shape& global = g2l ? x->shape() : result;
        const Shape& local = g2l ? result : x->shape();
        absl::StatusOr<HloSharding> full = MeshShardingToHlo((*ms)[static_cast<size_t>(i)], "", global.rank());
        if (!full.ok()) return Error(h, full.status().message());
        absl::StatusOr<HloSharding> full_c = Canonical(*full, global);
        if (!full_c.ok()) return Error(h, full_c.status().message());
        absl::StatusOr<HloSharding> man = ManualSharding((*ms)[static_cast<size_t>(i)], *axes, local);
        if (!man.ok()) return Error(h, man.status().message());
        if (g2l) {
          HloInstruction* sc = AddCustomCall(c, global, x, "Sharding", *full_c, "sharding");
          outs.push_back(AddCustomCall(c, local, sc, "SPMDFullToShardShape", *man, "full_to_shard"));
        } else {
          HloInstruction* sc = AddCustomCall(c, local, x, "Sharding", *man, "sharding");
          outs.push_back(AddCustomCall(c, global, sc, "SPMDShardToFullShape", *full_c, "shard_to_full"));
        }
      }
      HloInstruction* repl = outs.size() == 1 && !h->shape().IsTuple()
                                 ? outs[0]
                                 : c->AddInstruction(HloOpcode::kTuple, h->shape(), outs, "tuple");
      RETURN_IF_ERROR(h->ReplaceAllUsesWith(repl));
      RETURN_IF_ERROR(c->RemoveInstruction(h));
    }
    // Inline the manual bodies.
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (h->opcode() == HloOpcode::kCall && !h->called_computations().empty() &&
          (absl::StartsWith(h->called_computations()[0]->name(), "xla.sdy.manual_computation_body") ||
           absl::StartsWith(h->called_computations()[0]->name(),
                            "xla.sdy.inlinable_manual_computation_body"))) {
        RETURN_IF_ERROR(InlineCall(h));
        changed = true;
      }
    }
  }
  if (changed) module->RemoveUnusedComputations();
  return changed;
}

}  // namespace weave::spmd

namespace weave::spmd {
WEAVE_REGISTER_PASS("sharding-import",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::make_unique<ShardingImport>();
                    });
}  // namespace weave::spmd
