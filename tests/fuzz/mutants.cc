#include "mutants.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "analysis/dequantize.h"
#include "hlo/ir.h"
#include "passes/pass.h"

namespace weave::fuzz {
namespace {

// The bodies of the module's while loops (a body called by two loops is listed twice).
std::vector<HloComputation*> WhileBodies(HloModule* module) {
  std::vector<HloComputation*> out;
  for (HloComputation* comp : module->computations()) {
    for (HloInstruction* w : comp->instructions()) {
      if (w->opcode() == HloOpcode::kWhile) out.push_back(w->while_body());
    }
  }
  return out;
}

bool IsDataCollective(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
      return i->operand_count() == 1 && i->shape().IsArray() && i->async_sugar().empty();
    default:
      return false;
  }
}

class DequantUnproven : public HloPass {
 public:
  std::string_view name() const override { return "mutant-dequant-unproven"; }
  absl::StatusOr<bool> Run(HloModule* module) override {
    bool changed = false;
    for (HloComputation* comp : module->MakeComputationPostOrder()) {
      for (HloInstruction* coll : comp->MakeInstructionPostOrder()) {
        if (!IsDataCollective(coll)) continue;
        std::optional<DequantMatch> dq = MatchDequantize(coll->operand(0));
        if (!dq || !IsScalarScale(*dq)) continue;
        // The missing check: IsSameOnAllPartitions(dq->scale).
        HloInstruction* moved = comp->AddInstruction(coll->CloneWithNewOperands(
            coll->shape().WithElementType(dq->fp8_type), {dq->q}, ".mutant"));
        HloInstruction* deq = BuildDequantize(comp, moved, dq->scale, dq->is_divide,
                                              dq->wide_type, coll->shape());
        if (absl::Status s = comp->ReplaceInstruction(coll, deq); !s.ok()) return s;
        changed = true;
      }
    }
    return changed;
  }
};

class RingReversed : public HloPass {
 public:
  std::string_view name() const override { return "mutant-ring-reversed"; }
  absl::StatusOr<bool> Run(HloModule* module) override {
    bool changed = false;
    for (HloComputation* body : WhileBodies(module)) {
      for (HloInstruction* i : body->instructions()) {
        if (i->opcode() != HloOpcode::kCollectivePermute) continue;
        for (auto& [s, t] : *i->mutable_source_target_pairs()) std::swap(s, t);
        changed = true;
      }
    }
    return changed;
  }
};

class DropLastStep : public HloPass {
 public:
  std::string_view name() const override { return "mutant-drop-last-step"; }
  absl::StatusOr<bool> Run(HloModule* module) override {
    bool changed = false;
    for (HloComputation* body : WhileBodies(module)) {
      HloInstruction* last = nullptr;
      for (HloInstruction* i : body->MakeInstructionPostOrder()) {
        if (i->opcode() == HloOpcode::kDot || i->opcode() == HloOpcode::kCustomCall) last = i;
      }
      if (last == nullptr || !last->shape().IsArray() || last->user_count() == 0) continue;
      HloInstruction* zero = body->AddInstruction(HloOpcode::kConstant,
                                                  Shape::Scalar(last->shape().element_type), {},
                                                  "mutant.zero");
      zero->literal = Literal::Scalar(last->shape().element_type, 0.0);
      HloInstruction* zeros = body->AddInstruction(HloOpcode::kBroadcast, last->shape(), {zero},
                                                   "mutant.zeros");
      zeros->has_dimensions_attr = true;
      if (absl::Status s = last->ReplaceAllUsesWith(zeros); !s.ok()) return s;
      changed = true;
    }
    return changed;
  }
};

class WideCacheUnscaled : public HloPass {
 public:
  std::string_view name() const override { return "mutant-wide-cache-unscaled"; }
  absl::StatusOr<bool> Run(HloModule* module) override {
    bool changed = false;
    for (HloComputation* body : WhileBodies(module)) {
      for (HloInstruction* i : body->instructions()) {
        if (i->opcode() != HloOpcode::kDynamicUpdateSlice || i->operand_count() < 2) continue;
        std::optional<DequantMatch> d = MatchDequantize(i->operand(1));
        if (!d) continue;
        if (absl::Status s = i->ReplaceOperandWith(1, d->convert); !s.ok()) return s;
        changed = true;
      }
    }
    return changed;
  }
};

}  // namespace

const std::vector<MutantInfo>& Mutants() {
  static const std::vector<MutantInfo> kMutants = {
      {"dequant-unproven", "collective-quantizer", ""},
      {"ring-reversed", "", "windowed-einsum-handler"},
      {"drop-last-step", "", "windowed-einsum-handler"},
      {"wide-cache-unscaled", "", "windowed-einsum-handler"},
  };
  return kMutants;
}

void RegisterMutants() {
  static bool done = false;
  if (done) return;
  done = true;
  auto reg = [](const std::string& name, std::function<std::unique_ptr<HloPass>()> make) {
    PassRegistry::Get().Register(absl::StrCat("mutant-", name),
                                 [make](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                                   return make();
                                 });
  };
  reg("dequant-unproven", [] { return std::make_unique<DequantUnproven>(); });
  reg("ring-reversed", [] { return std::make_unique<RingReversed>(); });
  reg("drop-last-step", [] { return std::make_unique<DropLastStep>(); });
  reg("wide-cache-unscaled", [] { return std::make_unique<WideCacheUnscaled>(); });
}

std::vector<std::string> PipelineWithMutant(const std::vector<std::string>& names,
                                            const std::string& name) {
  for (const MutantInfo& m : Mutants()) {
    if (m.name != name) continue;
    std::vector<std::string> out;
    bool placed = false;
    for (const std::string& n : names) {
      if (!m.replaces.empty() && n == m.replaces) {
        out.push_back(absl::StrCat("mutant-", m.name));
        placed = true;
        continue;
      }
      out.push_back(n);
      if (!m.after.empty() && n == m.after) {
        out.push_back(absl::StrCat("mutant-", m.name));
        placed = true;
      }
    }
    if (!placed) out.push_back(absl::StrCat("mutant-", m.name));
    return out;
  }
  return {};
}

}  // namespace weave::fuzz
