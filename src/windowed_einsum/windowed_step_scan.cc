// The windowed einsum step test (windowed_step_scan.h).
#include "windowed_einsum/windowed_step_scan.h"

#include "hlo/block_scaled_call.h"
#include "hlo/gemm_call.h"

namespace weave {
namespace {

bool IsGemm(const HloInstruction& i) {
  if (IsDotOrGemmCall(i)) return true;
  const BlockScaledKind k = BlockScaledKindOf(i);
  return k == BlockScaledKind::kDot || k == BlockScaledKind::kCudnnDot;
}

bool IsPermute(const HloInstruction& i) {
  return i.opcode() == HloOpcode::kCollectivePermute ||
         i.opcode() == HloOpcode::kCollectivePermuteStart;
}

}  // namespace

const WindowedStepScan::Contents& WindowedStepScan::Of(const HloComputation* comp) {
  if (auto it = memo_.find(comp); it != memo_.end()) return it->second;
  // Entered before the callees are read: a call cycle (which the verifier rejects) ends here.
  memo_.emplace(comp, Contents{});
  Contents c;
  for (const HloInstruction* i : comp->instructions()) {
    c.gemm |= IsGemm(*i);
    c.permute |= IsPermute(*i);
    for (const HloComputation* callee : i->called_computations()) {
      if (callee == nullptr) continue;
      const Contents& inner = Of(callee);
      c.gemm |= inner.gemm;
      c.permute |= inner.permute;
    }
  }
  // The recursion may have rehashed the map: store by key, not through an earlier iterator.
  Contents& slot = memo_[comp];
  slot = c;
  return slot;
}

bool WindowedStepScan::HoldsWindowedStep(const HloComputation* body) {
  if (body == nullptr) return false;
  const Contents& c = Of(body);
  return c.gemm && c.permute;
}

bool WindowedStepScan::HoldsPermute(const HloComputation* comp) {
  return comp != nullptr && Of(comp).permute;
}

bool WindowedStepScan::IsWindowedEinsumLoop(const HloInstruction& w) {
  return w.opcode() == HloOpcode::kWhile && w.called_computations().size() >= 2 &&
         HoldsWindowedStep(w.while_body());
}

}  // namespace weave
