// Recognising and building FP8 dequantizations, the pattern the windowed einsum handler, the
// decomposer and the FP8 GEMM rewriter all look for (../shared/specs/windowed-einsum-handler.md,
// "Notation"; XLA's GemmRewriter calls the same shape a "scaled FP8 operand"):
//
//   dequant(q, s) := multiply(convert(q), broadcast(s))   (either operand order)
//                  | divide(convert(q), broadcast(s))     (convert must be the dividend)
//
// where q is f8e4m3fn or f8e5m2 (or, for ROCm, f8e4m3fnuz or f8e5m2fnuz) and
// convert/broadcast/multiply all have the wide type.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave {

// What MatchDequantize found. All pointers are non-null.
struct DequantMatch {
  HloInstruction* root = nullptr;       // the multiply or divide (wide type, shape of q)
  HloInstruction* q = nullptr;          // the FP8 operand of the convert
  HloInstruction* convert = nullptr;    // convert(q): wide type, dims of q
  HloInstruction* broadcast = nullptr;  // broadcast(scale): wide type, dims of q
  HloInstruction* scale = nullptr;      // the broadcast's operand (usually a scalar)
  bool is_divide = false;               // divide(convert, broadcast) rather than multiply
  PrimitiveType fp8_type = PrimitiveType::kInvalid;   // element type of q
  PrimitiveType wide_type = PrimitiveType::kInvalid;  // element type of root/convert/broadcast
};

// True for the FP8 types a dequantization may start from: f8e4m3fn and f8e5m2, and the FNUZ
// types f8e4m3fnuz and f8e5m2fnuz (AMD MI300; the types XLA's windowed einsum handler and GEMM
// rewriter accept).
bool IsDequantizableFp8(PrimitiveType t);
// True for the wide types XLA's handler accepts for a dequantization: bf16, f16, f32.
bool IsDequantWideType(PrimitiveType t);
// XLA's AreValidF8InputTypes (windowed_einsum_handler.cc): the (lhs, rhs) FP8 pairs whose
// dequantizations the handler moves into a windowed loop: at most one E5M2 operand, OCP
// (f8e4m3fn/f8e5m2) and FNUZ (f8e4m3fnuz/f8e5m2fnuz, ROCm) types not mixed.
bool IsWindowedEinsumFp8Pair(PrimitiveType a, PrimitiveType b);

// Matches `instr` against dequant(q, s) (see the file comment). Checks: opcode multiply (either
// operand order) or divide (convert first); convert's operand's element type passes
// IsDequantizableFp8; convert, broadcast and root are arrays of one element type and of the root's dims.
// Does not require the scale to be a scalar or the wide type to be bf16/f16/f32: callers check
// that with IsScalarScale / IsDequantWideType so that they can give a precise remark. Use counts
// are not checked either. nullopt when the pattern does not match (or instr is null).
std::optional<DequantMatch> MatchDequantize(HloInstruction* instr);

// True when the match's scale is a scalar (rank 0) of the wide type and the broadcast is the
// scalar broadcast (`dimensions={}`), which is what the FP8 rewrites require.
bool IsScalarScale(const DequantMatch& m);

// Builds dequant(q, scale) in `comp`: convert(q) to `wide`, broadcast(scale) and a multiply (or,
// with `divide`, divide(convert, broadcast)). `shape` gives the result dims and layout (its element
// type is replaced by `wide`); q must have those dims. `scale` must be a scalar of type `wide`
// unless `broadcast_dims` names, for each scale dim, the result dim it maps to (XLA broadcast
// `dimensions=`). Instruction names derive from q's name (`<q>.dq.cvt`, `.dq.bcast`, `.dq`).
// Returns the multiply/divide; the new instructions have no users yet.
HloInstruction* BuildDequantize(HloComputation* comp, HloInstruction* q, HloInstruction* scale,
                                bool divide, PrimitiveType wide, const Shape& shape,
                                const std::vector<int64_t>& broadcast_dims = {});

// Follows `v` back to the value a GEMM operand is computed from: through dequantizations (to
// their FP8 value) and convert, reshape, bitcast, transpose and copy; with `through_pad` also
// through pad (fp8-gemm-rewriter pads GEMM operands to multiples of 16). Returns the first
// instruction that is none of these, after at most 64 steps; null for null.
HloInstruction* StripDequantizeAndViews(HloInstruction* v, bool through_pad);

}  // namespace weave
