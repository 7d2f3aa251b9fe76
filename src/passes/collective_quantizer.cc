#include "passes/collective_quantizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "passes/fp8_operand.h"

namespace weave {
namespace {

bool IsQuantizableCollective(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
      return i->operand_count() == 1 && i->shape().IsArray() && i->async_sugar().empty();
    default:
      return false;
  }
}

bool IsPassThroughUnary(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kBitcast:
      return i->operand_count() == 1 &&
             i->shape().element_type == i->operand(0)->shape().element_type;
    case HloOpcode::kCopy:
    case HloOpcode::kReshape:
    case HloOpcode::kSlice:
      return i->operand_count() == 1;
    default:
      return false;
  }
}

}  // namespace

absl::StatusOr<bool> CollectiveQuantizer::Run(HloModule* module) {
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    for (HloInstruction* coll : comp->MakeInstructionPostOrder()) {
      if (!IsQuantizableCollective(coll)) continue;
      // Unary ops between the dequantization and the collective, user first.
      std::vector<HloInstruction*> chain;
      HloInstruction* cur = coll->operand(0);
      while (IsPassThroughUnary(cur)) {
        chain.push_back(cur);
        cur = cur->operand(0);
      }
      std::optional<DequantMatch> dq = MatchDequantize(cur);
      if (!dq.has_value()) {
        if (ReachesFp8(coll->operand(0)) && !IsFp8(coll->shape().element_type)) {
          AddRemark(coll->name(), false,
                    absl::StrCat("operand derives from FP8 but '", cur->name(), "' (",
                                 std::string(HloOpcodeString(cur->opcode())),
                                 ") is not a dequantization reached through bitcast, copy, "
                                 "reshape or slice"));
        }
        continue;
      }
      if (!IsScalarScale(*dq)) {
        AddRemark(coll->name(), false,
                  absl::StrCat("scale '", dq->scale->name(), "' is not a scalar of the wide type"));
        continue;
      }
      std::string why;
      if (!IsSameOnAllPartitions(dq->scale, &why)) {
        AddRemark(coll->name(), false,
                  absl::StrCat("scale '", dq->scale->name(),
                               "' is not proven the same on every partition: ", why));
        continue;
      }
      const PrimitiveType t = dq->fp8_type;
      HloInstruction* v = dq->q;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        v = comp->AddInstruction(
            (*it)->CloneWithNewOperands((*it)->shape().WithElementType(t), {v}, ".fp8"));
      }
      HloInstruction* moved =
          comp->AddInstruction(coll->CloneWithNewOperands(coll->shape().WithElementType(t), {v},
                                                          ".fp8"));
      HloInstruction* deq = BuildDequantize(comp, moved, dq->scale, dq->is_divide, dq->wide_type,
                                            coll->shape());
      // ReplaceInstruction frees `coll` (and the old dequantization): keep what the remark needs.
      const std::string coll_name = coll->name();
      const HloOpcode coll_opcode = coll->opcode();
      absl::Status s = comp->ReplaceInstruction(coll, deq);
      if (!s.ok()) return s;
      AddRemark(coll_name, true,
                absl::StrCat(std::string(HloOpcodeString(coll_opcode)), " now carries ",
                             std::string(PrimitiveTypeName(t)), " ('", moved->name(), "'), dequantized after by '",
                             dq->scale->name(), "'",
                             chain.empty() ? "" : absl::StrCat("; ", chain.size(), " op(s) moved")));
      changed = true;
    }
  }
  return changed;
}

WEAVE_REGISTER_PASS("collective-quantizer",
                    [](const PassOptions&) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      return std::unique_ptr<HloPass>(new CollectiveQuantizer());
                    });

}  // namespace weave
