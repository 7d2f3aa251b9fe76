// Shape and type checks on an HLO module, in the spirit of XLA's HloVerifier / ShapeVerifier.
//
// Checks the structure (operands in the same computation, roots, parameter numbering, called
// computations, GTE indices in range) and, for the op set of ../shared/specs/hlo-text-format.md §6,
// that each result shape is the one XLA's shape inference gives for the operands and attributes:
// elementwise ops, broadcast, reshape, transpose, convert, dot, slice, dynamic-slice,
// dynamic-update-slice, pad, concatenate, reduce, reduce-window, select, compare, clamp, iota,
// while, conditional, call, tuple, get-tuple-element, all-gather, all-reduce, reduce-scatter,
// all-to-all, collective-permute, partition-id, replica-id and custom-call (operand-count sanity
// only). Layouts are ignored (Shape::Compatible). Opcodes the verifier does not model pass.
#pragma once

#include "absl/status/status.h"
#include "hlo/ir.h"

namespace weave {

// Options of the verifier (XLA's HloVerifierOpts that Weave follows).
struct VerifyOptions {
  // XLA's allow_mixed_precision: float operands and results may differ in precision where the
  // shape inference would give one float type (select's branches, rng's bounds, map's and a
  // reducer's parameters, any result against its inferred shape).
  bool allow_mixed_precision = false;
};

// OK, or InvalidArgument with a message naming the instruction and its computation, e.g.
// "instruction 'd' in computation 'main': dot: lhs contracting dimension 1 has size 64 but rhs
// contracting dimension 0 has size 32". Returns the first error found.
absl::Status VerifyModule(const HloModule& module, const VerifyOptions& options = {});

// Checks one instruction's shape against its operands and attributes (no structural checks).
// Same message format as VerifyModule.
absl::Status VerifyInstruction(const HloInstruction& instr, const VerifyOptions& options = {});

}  // namespace weave
