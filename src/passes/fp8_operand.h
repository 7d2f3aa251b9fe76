// Matching one operand of a dot against the FP8 operand patterns of XLA's GPU GemmRewriter
// (../shared/specs/fp8-gemm-rewrite.md §1). Shared by fp8-gemm-rewriter (which rewrites the
// match into an FP8 cuBLASLt GEMM) and dot-merger (which refuses to merge such dots, so that it
// cannot stop the FP8 GEMM from forming).
//
// Walk: from the dot operand upward until the first FP8-typed instruction. One-operand ops,
// divide, dynamic-slice and pad follow operand 0; multiply tries operand 0, then 1; select tries
// operand 1, then 2; anything else ends the walk without a match. Each node is visited once.
// The path P = [fp8, n1, n2, ..., operand] is then classified:
//   - direct:   P has length 1 (the dot reads FP8 itself; no scale);
//   - scaled:   n1 = convert(fp8) and n2 = dequant(fp8, s) (analysis/dequantize.h);
//   - unscaled: n1 = convert(fp8);
// and every node after the dequantization must be one of the movable ops: bitcast (element type
// unchanged), broadcast, copy, dynamic-slice, pad (with a zero pad value), reshape, select (other
// data operand a broadcast of constant 0), slice, transpose. Collectives are not movable: the
// collective-quantizer pass moves dequantizations past them first.
#pragma once

#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave {

struct Fp8OperandMatch {
  enum class Kind { kDirect, kScaled, kUnscaled };
  Kind kind = Kind::kDirect;
  HloInstruction* fp8 = nullptr;    // the FP8 value (f8e4m3fn or f8e5m2 array)
  HloInstruction* scale = nullptr;  // kScaled: the broadcast's operand (any shape); else null
  bool scale_is_divide = false;     // kScaled: divide(convert, broadcast(s)) rather than multiply
  HloInstruction* dequant = nullptr;  // kScaled: the multiply/divide; kUnscaled: the convert
  // Movable ops between the dequantization (or the FP8 value) and the dot, in operand-to-user
  // order; the last one is the dot operand itself. Empty when the dequantization is the operand.
  std::vector<HloInstruction*> ops;
};

// Returns true and fills *match when `operand` (a dot operand) is an FP8 operand as described in
// the file comment; otherwise false with a one-line reason in *why (if non-null), e.g.
// "'t' (add) between the FP8 value and the dot is not a movable op". The FP8 type must be
// f8e4m3fn or f8e5m2; the scale's shape is NOT checked (callers reject non-scalar scales with
// their own remark).
bool MatchFp8Operand(HloInstruction* operand, Fp8OperandMatch* match, std::string* why = nullptr);

// True when `operand` reaches an FP8 value through the walk above, whether or not the rest of the
// pattern matches (used by dot-merger: any FP8-derived operand is left for the GEMM rewriter).
bool ReachesFp8(HloInstruction* operand);

// True for the opcodes that may sit between a dequantization and a dot (see the file comment);
// the operand-specific conditions (bitcast type, pad value, select zero) are checked by
// MatchFp8Operand.
bool IsMovableFp8Op(HloOpcode op);

// True when `instr` is a broadcast (of any rank) of a scalar constant equal to `value`, or that
// constant itself.
bool IsBroadcastOfConstant(const HloInstruction* instr, double value);

}  // namespace weave
