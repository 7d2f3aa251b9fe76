#include "passes/cse.h"

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// A key that is equal for instructions that compute the same value; empty when not eligible.
std::string Key(const HloInstruction* h) {
  if (!h->control_predecessors().empty()) return "";
  // Opcode, shape and sharding: made only for an opcode that has a key, once it is eligible
  // (most instructions have none, and the shape text is not free).
  auto prefix = [h] {
    return absl::StrCat(std::string(HloOpcodeString(h->opcode())), "|", h->shape().ToString(true),
                        "|", h->sharding.has_value() ? h->sharding->ToString() : "", "|");
  };
  switch (h->opcode()) {
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      return prefix();
    case HloOpcode::kTranspose:
    case HloOpcode::kCopy:
    case HloOpcode::kBitcast:
    case HloOpcode::kReshape:
    case HloOpcode::kConvert:
    case HloOpcode::kBroadcast: {
      // The same layout or type change of the same value (e.g. the FP8 GEMM rewriter's
      // transpose of a loop-invariant weight, once per GEMM of an unrolled loop).
      if (h->operand_count() != 1) return "";
      std::string key = prefix();
      absl::StrAppend(&key, "op:", h->operand(0)->unique_id(), "|dims:");
      for (int64_t d : h->dimensions) absl::StrAppend(&key, d, ",");
      return key;
    }
    case HloOpcode::kConstant: {
      if (!h->literal.has_value() || h->literal->elided) return "";
      const Literal& lit = *h->literal;
      std::string key = prefix();
      // Exact bits: 0.0 and -0.0 differ, NaN payloads are kept apart.
      key.append("f:");
      for (double d : lit.f) {
        char bytes[sizeof(double)];
        std::memcpy(bytes, &d, sizeof(d));
        key.append(bytes, sizeof(bytes));
      }
      key.append("|i:");
      for (int64_t v : lit.i) {
        char bytes[sizeof(int64_t)];
        std::memcpy(bytes, &v, sizeof(v));
        key.append(bytes, sizeof(bytes));
      }
      return key;
    }
    default:
      return "";
  }
}

}  // namespace

absl::StatusOr<bool> ConstantAndIdCse::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    std::map<std::string, HloInstruction*> first;
    int64_t constants = 0, ids = 0, layout = 0;
    const std::vector<HloInstruction*> order = comp->MakeInstructionPostOrder();
    std::set<const HloInstruction*> control_sources;  // someone's control predecessor
    for (const HloInstruction* h : order) {
      control_sources.insert(h->control_predecessors().begin(), h->control_predecessors().end());
    }
    for (HloInstruction* h : order) {
      if (control_sources.count(h)) continue;
      const std::string key = Key(h);
      if (key.empty()) continue;
      auto [it, inserted] = first.emplace(key, h);
      if (inserted) continue;
      const bool is_constant = h->opcode() == HloOpcode::kConstant;
      const bool is_id = h->opcode() == HloOpcode::kPartitionId ||
                         h->opcode() == HloOpcode::kReplicaId;
      RETURN_IF_ERROR(h->ReplaceAllUsesWith(it->second));
      RETURN_IF_ERROR(comp->RemoveInstruction(h));
      (is_constant ? constants : is_id ? ids : layout) += 1;
    }
    if (constants + ids + layout > 0) {
      changed = true;
      AddRemark(comp->name(), true,
                absl::StrCat("merged ", constants, " duplicate constant",
                             constants == 1 ? "" : "s", " and ", ids,
                             " duplicate partition-id/replica-id",
                             layout > 0 ? absl::StrCat(" and ", layout,
                                                       " duplicate layout/type changes of one "
                                                       "value (transpose, copy, bitcast, reshape, "
                                                       "convert, broadcast)")
                                        : ""));
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("cse", [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
  return std::make_unique<ConstantAndIdCse>();
});

}  // namespace weave
