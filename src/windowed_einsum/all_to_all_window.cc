#include "windowed_einsum/all_to_all_window.h"

#include <string>
#include <utility>
#include <vector>

#include "passes/fp8_operand.h"

namespace weave {
namespace {

bool IsGemmLike(const HloInstruction* i) {
  if (i->opcode() == HloOpcode::kDot) return true;
  if (i->opcode() != HloOpcode::kCustomCall) return false;
  const std::string& t = i->custom_call_target();
  return t == "__cublas$lt$matmul$f8" || t == "__cublas$lt$matmul" || t == "__cublas$gemm";
}

// The GEMM `x` is the (possibly unpadded / reshaped) result of, or null.
const HloInstruction* GemmOfResult(const HloInstruction* x) {
  for (int step = 0; step < 6 && x != nullptr; ++step) {
    if (IsGemmLike(x)) return x;
    switch (x->opcode()) {
      case HloOpcode::kGetTupleElement:
      case HloOpcode::kSlice:
      case HloOpcode::kReshape:
      case HloOpcode::kBitcast:
      case HloOpcode::kCopy:
        x = x->operand_count() > 0 ? x->operand(0) : nullptr;
        break;
      default:
        return nullptr;
    }
  }
  return nullptr;
}

// An all-to-all a GEMM operand reads through layout / dequantization ops (bounded walk).
const HloInstruction* ExchangeAbove(const HloInstruction* gemm) {
  std::vector<std::pair<const HloInstruction*, int>> stack;
  for (const HloInstruction* o : gemm->operands()) stack.push_back({o, 0});
  while (!stack.empty()) {
    auto [x, depth] = stack.back();
    stack.pop_back();
    if (x->opcode() == HloOpcode::kAllToAll) return x;
    if (depth >= 8) continue;
    switch (x->opcode()) {
      case HloOpcode::kConvert:
      case HloOpcode::kMultiply:
      case HloOpcode::kDivide:
      case HloOpcode::kTranspose:
      case HloOpcode::kReshape:
      case HloOpcode::kCopy:
      case HloOpcode::kBitcast:
      case HloOpcode::kSlice:
      case HloOpcode::kPad:
        for (const HloInstruction* o : x->operands()) stack.push_back({o, depth + 1});
        break;
      default:
        break;
    }
  }
  return nullptr;
}

int64_t GroupSizeOf(const HloInstruction* a) {
  if (a->replica_groups && !a->replica_groups->groups.empty()) {
    return static_cast<int64_t>(a->replica_groups->groups[0].size());
  }
  return 0;
}

}  // namespace

std::vector<AllToAllWindow> FindAllToAllWindows(const HloComputation& computation) {
  std::vector<AllToAllWindow> out;
  for (HloInstruction* z : computation.MakeInstructionPostOrder()) {
    if (!IsBroadcastOfConstant(z, 0.0) || z->opcode() != HloOpcode::kBroadcast) continue;
    for (HloInstruction* first : z->users()) {
      if (first->opcode() != HloOpcode::kAdd || first->operand_count() != 2) continue;
      AllToAllWindow w;
      int kind = -1;  // 1 = A, 0 = B
      const HloInstruction* prev = z;
      const HloInstruction* cur = first;
      while (true) {
        const HloInstruction* x = cur->operand(0) == prev ? cur->operand(1) : cur->operand(0);
        int k = -1;
        const HloInstruction* a2a = nullptr;
        const HloInstruction* gemm = nullptr;
        if (x->opcode() == HloOpcode::kAllToAll && x->operand_count() == 1) {
          gemm = GemmOfResult(x->operand(0));
          if (gemm) {
            k = 0;
            a2a = x;
          }
        } else if ((gemm = GemmOfResult(x)) != nullptr) {
          a2a = ExchangeAbove(gemm);
          if (a2a) k = 1;
        }
        if (k < 0 || (kind >= 0 && k != kind)) break;
        kind = k;
        w.all_to_alls.push_back(a2a);
        w.gemms.push_back(gemm);
        w.result = cur;
        if (cur->user_count() != 1 || cur->IsRoot()) break;
        const HloInstruction* next = cur->users()[0];
        if (next->opcode() != HloOpcode::kAdd || next->operand_count() != 2) break;
        prev = cur;
        cur = next;
      }
      if (w.all_to_alls.size() < 2) continue;
      w.exchange_first = kind == 1;
      w.group_size = GroupSizeOf(w.all_to_alls[0]);
      out.push_back(std::move(w));
    }
  }
  return out;
}

}  // namespace weave
