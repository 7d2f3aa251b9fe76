// Outputs that depend on `rng`, for the global-vs-partitioned check (global_compare.h).
//
// A random op draws different values on one device and on P devices (XLA gives each device its
// own generator; eval/evaluator_random.cc does the same), so an output that depends on one
// cannot be compared with the global program's value for value. The check compares it on
//   - its shape (the reassembled output against the reference's);
//   - the agreement of its copies: every device holding the same tile holds the same bits
//     (step 4 of the check, as for every output; XLA's partitioner makes replicas agree);
//   - its range, when the output is the draw itself (through copy, reshape, transpose, slice,
//     reverse or broadcast, and tuple / get-tuple-element) and the rng's bounds are entry
//     parameters or constants of the global module: rng_uniform values in [a, b) (a when
//     b <= a for integers); rng_normal has no range.
// rng-bit-generator is deterministic in its state and is compared as any other op.
#pragma once

#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval {

struct RandomOutput {
  const HloInstruction* rng = nullptr;  // an rng the output depends on; nullptr: not random
  bool direct = false;                  // the output is rng's draw moved, not computed on
};

// One entry per leaf of the entry root of `global` (tuple leaves in order). Linear in the
// module's instructions.
std::vector<RandomOutput> RandomOutputs(const HloModule& global);

// The comparison of a random output `assembled` (the partitioned module's, reassembled) with
// the reference `reference` (the global program's draw): pass when the shapes agree and, for a
// direct rng_uniform output with known bounds (`global_inputs`: the global module's parameters),
// every element lies in [a, b). `path` says what the output was compared on.
OutputComparison CompareRandomOutput(const RandomOutput& r, const Value& reference,
                                     const Value& assembled,
                                     const std::vector<ValuePtr>& global_inputs);

}  // namespace weave::eval
