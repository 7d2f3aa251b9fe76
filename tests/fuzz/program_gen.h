// A generator of random, valid, partitioned HLO modules for differential testing of Weave's
// pipeline (issue 14), in the spirit of Csmith/YARPGen: every decision comes from a
// ChoiceSource (a seed, a recorded trace, or libFuzzer's bytes), and the programs are built so
// that the pipeline's rewrites fire on most of them while every corner around them is visited.
//
// A program is 1-3 motifs on P partitions (P in {2,3,4,5,6,8}; rings N = P or a divisor of P
// in {2,3,4,5,8}), each adding outputs to a tuple (or single) root:
//  - all-gather matmul: an activation (wide, or FP8 dequantized in any form) all-gathered on any
//    dim (batch, contracting or free of the dot) over full or sub-group replica groups (explicit
//    lists, shuffled lists, iota forms), sync or async (all-gather-start/-done), feeding 1-3 dots
//    as lhs or rhs, each with its own weight (or an earlier activation: the "stationary operand"
//    case); sometimes a second all-gather of the same shard on another dim or other groups;
//  - matmul reduce-scatter: a dot whose output is reduce-scattered on any dim (sync, sugared
//    async `reduce-scatter-start`, or an `async-start` wrapper), or all-reduced then
//    dynamic-sliced at the partition's block (the pre-reduce-scatter form XLA's partitioner
//    emits);
//  - all-reduce, all-to-all (before or after a dot, through a layout chain), collective-permute,
//    each sync or async; elementwise-only values;
//  - windowed einsum loops as XLA's SPMD partitioner writes them (motif_xla_loops.cc):
//    all-gather loops (non-contracting, contracting, batch; unrolled by 2 or rolled with a
//    guarded permute) and reduce-scatter loops (unrolled with the shift-and-add after the loop,
//    or rolled), over full and sub-group rings, with FP8 dequantized operands in the init tuple,
//    a second all-gather of the windowed operand for the handler's cache, and sometimes no
//    reader of the loop's result;
// with views (reshape, transpose, bitcast, broadcast, slice, copy, convert) before collectives
// and, rarely, between a collective and its dot; epilogues after dots (bias, ReLU, alpha,
// converts, FP8 output with clamp and amax). Dequantizations: multiply(convert(q),
// broadcast(s)) in either operand order or divide(convert(q), broadcast(s)), scalar or row-wise
// scales, scales replicated (sharding={replicated}, constants) or partition-dependent
// (sharding={manual} parameters, which the evaluator draws per partition, or values computed
// from partition-id). Data parameters are mostly per-partition ({manual} or tiled): an
// unannotated parameter is replicated, as in XLA's SPMD modules.
//
// Every generated module must pass `weave verify`; the driver classifies one that does not as
// INVALID (a generator bug). Shapes are small (at most `max_elements` per array) so that the
// evaluator checks a program in milliseconds.
//
// Modes: kPartitioned (above); kGlobal: global modules with random GSPMD / Shardy shardings for
// the SPMD partitioner (motif_global.cc), which the driver partitions and compares against the
// global program before the checks above run on the partitioned module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "choice_source.h"

namespace weave::fuzz {

struct GenOptions {
  enum class Mode { kPartitioned, kGlobal };
  Mode mode = Mode::kPartitioned;
  int max_motifs = 3;
  int64_t max_elements = 2048;  // per array, global shapes included
  // false: only synchronous collectives (to look past a known bug in the async forms; the
  // decisions drawn stay the same, so seeds keep their other choices).
  bool async_forms = true;
  // Windowed einsum loops as XLA's SPMD partitioner emits them (the handler's input).
  bool xla_loops = true;
  // Validation of the loop motif: emit each loop's plain equivalent (all-gather + dot, dot +
  // reduce-scatter) instead, from the same decisions; `weave compare` of the two programs of a
  // seed checks the generator's loops.
  bool xla_loops_as_plain = false;
};

struct GeneratedProgram {
  std::string name;
  std::string text;                 // the HLO module
  int64_t num_partitions = 1;
  std::vector<std::string> motifs;  // one line per motif, e.g. "ag N=4 dim=contracting dots=2"
};

// Generates one program from `choices`; `name` becomes the module name.
GeneratedProgram GenerateProgram(ChoiceSource& choices, const GenOptions& options,
                                 const std::string& name);

// The program of seed `seed` (SeededChoices), named "fuzz_<seed>".
GeneratedProgram GenerateFromSeed(uint64_t seed, const GenOptions& options = {});

}  // namespace weave::fuzz
