// spmd-prepare (see spmd_prepare.h).
#include "spmd/spmd_prepare.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hlo/builders.h"
#include "spmd/inline_call.h"
#include "spmd/sharding_import.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

bool IsManualBody(const HloComputation* c) {
  return absl::StartsWith(c->name(), "xla.sdy.manual_computation_body") ||
         absl::StartsWith(c->name(), "xla.sdy.inlinable_manual_computation_body");
}

bool IsIdentityCall(const HloInstruction* h) {
  if (h->opcode() != HloOpcode::kCustomCall || h->operand_count() != 1) return false;
  const std::string& t = h->custom_call_target();
  return (t == "annotate_device_placement" || t == "MoveToHost" || t == "MoveToDevice" ||
          t == "xla.sdy.PropagationBarrier") &&
         h->shape().Compatible(h->operand(0)->shape());
}

// `unspecified_dims=[0,2]` in a Sharding call's backend config -> "[0,2]".
std::string UnspecifiedDims(const HloInstruction* h) {
  if (auto a = h->GetFrontendAttribute(kUnspecifiedDimsAttr)) return *a;
  const std::string& bc = h->backend_config;
  const size_t p = bc.find("unspecified_dims=");
  if (p == std::string::npos) return "";
  const size_t b = bc.find('[', p), e = bc.find(']', p);
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return bc.substr(b, e - b + 1);
}

// A copy of `x` in `c`: `copy` of an array; of a tuple, the tuple of its elements' copies (an
// HLO `copy` takes arrays only); a token as it is.
HloInstruction* DeepCopy(HloComputation* c, HloInstruction* x) {
  const Shape& s = x->shape();
  if (s.IsArray()) return c->AddInstruction(HloOpcode::kCopy, s, {x}, "copy");
  if (!s.IsTuple()) return x;
  std::vector<HloInstruction*> elements;
  for (size_t k = 0; k < s.tuple_shapes.size(); ++k) {
    HloInstruction* g = AddGetTupleElement(c, x, static_cast<int64_t>(k), "get-tuple-element");
    elements.push_back(DeepCopy(c, g));
  }
  return c->AddInstruction(HloOpcode::kTuple, s, elements, "copy");
}

}  // namespace

absl::StatusOr<bool> SpmdPrepare::Run(HloModule* module) {
  int64_t inlined = 0, copies = 0, identities = 0;
  // 1. Inline calls, callees first.
  for (HloComputation* c : module->MakeComputationPostOrder()) {
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (h->opcode() != HloOpcode::kCall || h->called_computations().size() != 1 ||
          IsManualBody(h->called_computations()[0])) {
        continue;
      }
      RETURN_IF_ERROR(InlineCall(h));
      ++inlined;
    }
  }
  if (inlined > 0) module->RemoveUnusedComputations();
  // 2. One computation per loop body/condition/branch.
  const bool flattened = FlattenCallGraph(module);
  // 3./4. Sharding calls and identities.
  HloComputation* entry = module->entry();
  for (HloComputation* c : module->computations()) {
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (IsIdentityCall(h)) {
        HloInstruction* op = h->operand(0);
        const bool root = h->IsRoot();
        RETURN_IF_ERROR(h->ReplaceAllUsesWith(op));
        if (root) c->set_root(op);
        if (!op->sharding && h->sharding) op->sharding = h->sharding;
        RETURN_IF_ERROR(c->RemoveInstruction(h));
        ++identities;
        continue;
      }
      if (h->opcode() != HloOpcode::kCustomCall || h->custom_call_target() != "Sharding" ||
          h->operand_count() != 1) {
        continue;
      }
      HloInstruction* op = h->operand(0);
      HloInstruction* copy = c->AddInstruction(HloOpcode::kCopy, h->shape(), {op}, h->name());
      copy->sharding = h->sharding;
      copy->metadata = h->metadata;
      const std::string dims = UnspecifiedDims(h);
      if (!dims.empty() && dims != "[]") copy->SetFrontendAttribute(kUnspecifiedDimsAttr, dims);
      for (const char* a : {kShardingPriorityAttr, kShardAsAttr}) {
        if (auto v = h->GetFrontendAttribute(a)) copy->SetFrontendAttribute(a, *v);
      }
      if (op->opcode() == HloOpcode::kParameter && c == entry && !op->sharding && h->sharding &&
          dims.empty()) {
        op->sharding = h->sharding;
      }
      const bool root = h->IsRoot();
      const std::string name = h->name();
      RETURN_IF_ERROR(h->ReplaceAllUsesWith(copy));
      if (root) c->set_root(copy);
      RETURN_IF_ERROR(c->RemoveInstruction(h));
      copy->set_name(name);
      ++copies;
    }
  }
  // 5. A while or conditional at the entry root gets a copy root (a tuple-shaped one: a tuple
  // of copies of its array leaves, tokens passed through), as XLA's sharding propagation gives a
  // while root one when the output's sharding is the host's: the copy keeps the root's sharding
  // and the loop (the conditional) takes its computations'. For a conditional this is Weave's
  // own: its branch roots must agree with it (the verifier checks that), which a pinned root
  // would break.
  std::string copied_root;
  if (entry != nullptr && entry->root() != nullptr &&
      (entry->root()->opcode() == HloOpcode::kWhile ||
       entry->root()->opcode() == HloOpcode::kConditional)) {
    HloInstruction* w = entry->root();
    HloInstruction* copy = DeepCopy(entry, w);
    copy->sharding = w->sharding;
    entry->set_root(copy);
    copied_root = std::string(HloOpcodeString(w->opcode()));
  }
  if (inlined > 0) AddRemark(module->name(), true, absl::StrCat("inlined ", inlined, " calls"));
  if (copies > 0) {
    AddRemark(module->name(), true,
              absl::StrCat(copies, " `Sharding` calls became copies with provided shardings"));
  }
  if (identities > 0) {
    AddRemark(module->name(), true,
              absl::StrCat(identities, " placement/barrier calls replaced by their operand"));
  }
  if (flattened) AddRemark(module->name(), true, "cloned shared loop bodies/branches");
  if (!copied_root.empty()) {
    AddRemark(module->name(), true,
              absl::StrCat("added a copy root after the entry's ", copied_root));
  }
  return inlined > 0 || copies > 0 || identities > 0 || flattened || !copied_root.empty();
}

WEAVE_REGISTER_PASS("spmd-prepare",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::make_unique<SpmdPrepare>();
                    });

}  // namespace weave::spmd
