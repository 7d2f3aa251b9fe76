#include "windowed_einsum/all_to_all_window.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hlo/gemm_call.h"
#include "passes/fp8_operand.h"

namespace weave {
namespace {

// The GEMM `x` is the (possibly unpadded / reshaped) result of, or null.
const HloInstruction* GemmOfResult(const HloInstruction* x) {
  for (int step = 0; step < 6 && x != nullptr; ++step) {
    if (IsDotOrGemmCall(*x)) return x;
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

// One accumulate of the chain after `prev`: add(prev, X), or a GEMM call that reads `prev` as its
// C operand (through reshape / pad / bitcast / copy) with beta != 0, the fp8-gemm-rewriter's (and
// XLA GemmRewriter's) fold of add(gemm, prev).
struct Accumulate {
  const HloInstruction* result = nullptr;  // the add, or the call's D as the program reads it
  const HloInstruction* x = nullptr;       // what is added (an all-to-all or a GEMM's result)
  const HloInstruction* gemm = nullptr;    // set for the folded form
};

std::optional<Accumulate> NextAccumulate(const HloInstruction* prev) {
  if (prev->user_count() != 1 || prev->IsRoot()) return std::nullopt;
  const HloInstruction* u = prev->users()[0];
  if (u->opcode() == HloOpcode::kAdd && u->operand_count() == 2) {
    Accumulate a;
    a.result = u;
    a.x = u->operand(0) == prev ? u->operand(1) : u->operand(0);
    return a;
  }
  const HloInstruction* v = prev;
  for (int step = 0; step < 4; ++step) {
    if (IsCublasGemmCall(*u) && u->operand_count() > 2 &&
        u->operand(2) == v && AccumulatesThroughC(*u)) {
      Accumulate a;
      a.gemm = u;
      const HloInstruction* d = nullptr;
      for (const HloInstruction* g : u->users()) {
        if (g->opcode() == HloOpcode::kGetTupleElement && g->tuple_index == 0) d = g;
      }
      if (d == nullptr) return std::nullopt;
      while (d->user_count() == 1 && !d->IsRoot() &&
             (d->users()[0]->opcode() == HloOpcode::kSlice ||
              d->users()[0]->opcode() == HloOpcode::kReshape ||
              d->users()[0]->opcode() == HloOpcode::kBitcast)) {
        d = d->users()[0];
      }
      a.result = d;
      return a;
    }
    switch (u->opcode()) {
      case HloOpcode::kReshape:
      case HloOpcode::kPad:
      case HloOpcode::kBitcast:
      case HloOpcode::kCopy:
        if (u->user_count() != 1) return std::nullopt;
        v = u;
        u = u->users()[0];
        continue;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace

bool AccumulatesThroughC(const HloInstruction& call) {
  if (call.opcode() != HloOpcode::kCustomCall) return false;
  const std::string& cfg = call.backend_config;
  const size_t k = cfg.find("\"beta\":");
  if (k == std::string::npos) return false;
  return std::strtod(cfg.c_str() + k + 7, nullptr) != 0;
}

std::vector<AllToAllWindow> FindAllToAllWindows(const HloComputation& computation) {
  std::vector<AllToAllWindow> out;
  for (HloInstruction* z : computation.MakeInstructionPostOrder()) {
    if (!IsBroadcastOfConstant(z, 0.0) || z->opcode() != HloOpcode::kBroadcast) continue;
    AllToAllWindow w;
    int kind = -1;  // 1 = A, 0 = B
    const HloInstruction* prev = z;
    while (std::optional<Accumulate> acc = NextAccumulate(prev)) {
      const HloInstruction* x = acc->x;
      int k = -1;
      const HloInstruction* a2a = nullptr;
      const HloInstruction* gemm = acc->gemm;
      if (gemm != nullptr) {
        a2a = ExchangeAbove(gemm);
        if (a2a) k = 1;
      } else if (x->opcode() == HloOpcode::kAllToAll && x->operand_count() == 1) {
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
      w.result = acc->result;
      prev = acc->result;
    }
    if (w.all_to_alls.size() < 2) continue;
    w.exchange_first = kind == 1;
    w.group_size = GroupSizeOf(w.all_to_alls[0]);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace weave
