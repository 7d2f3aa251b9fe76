// Internals of the dot-merger pass (dot_merger.h), shared by its two files:
//   dot_merger_guards.cc  the refusals Weave adds to XLA's merger (windowed einsum steps, FP8
//                         operands, stream annotations, hand-written rings) and XLA's sub-byte
//                         upcast rule;
//   dot_merger.cc         XLA's merge itself (equivalence classes, grouping, the merged dot).
// Not a public interface: only those files include it.
#ifndef WEAVE_PASSES_DOT_MERGER_INTERNAL_H_
#define WEAVE_PASSES_DOT_MERGER_INTERNAL_H_

#include <map>
#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave {
namespace dot_merger_internal {

// Why `dot` must not be merged by Weave's guards (empty: it may be): a stream annotation, a step
// of a windowed einsum loop body (`ring_body`: the while body whose computations hold a
// collective-permute when the dot's computation is one of them, else null), an operand deriving
// from FP8 (left for fp8-gemm-rewriter) or reading a windowed loop's cache.
std::string GuardReason(HloInstruction* dot, const HloComputation* ring_body);

// For dots sharing operand `side` (0 lhs, 1 rhs): the ones that are steps of a hand-written
// collective matmul (XLA issues 10640, 19555), with the reason for the remark.
std::map<const HloInstruction*, std::string> HandWrittenRingSteps(
    const std::vector<HloInstruction*>& dots, int64_t side);

// Every computation of a while body that (with what it calls) holds a collective-permute, mapped
// to that body: the steps of a windowed einsum ring.
std::map<const HloComputation*, const HloComputation*> RingBodies(HloModule* module);

// The sub-byte type an operand is upcast from through transposes, reshapes, bitcasts and
// converts (XLA's HasSubByteUpcast), or "".
std::string SubByteUpcast(const HloInstruction* x);

}  // namespace dot_merger_internal
}  // namespace weave

#endif  // WEAVE_PASSES_DOT_MERGER_INTERNAL_H_
