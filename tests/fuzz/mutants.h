// Deliberately wrong rewrites ("mutants") for the mutation check of issue 14: the differential
// driver must catch each of them on the CI seed set (make test runs
// `weave-fuzz run --mutant=NAME --expect-failure`). Each mutant is a pass registered under
// `mutant-<name>` that replaces one stage of the compile pipeline:
//  - dequant-unproven (replaces collective-quantizer): moves a dequantization past a collective
//    (collective(dequant(q, s)) -> dequant(collective(q), s)) without proving that the scale is
//    the same on every partition; with a partition-dependent scale each partition then
//    dequantizes its neighbours' data with its own scale. The bug the handler's and the
//    quantizer's replication proof exists for.
//  - ring-reversed (after windowed-einsum-handler): reverses the source_target_pairs of every
//    collective-permute inside a while body, so the ring visits the blocks in the wrong order.
//  - drop-last-step (after windowed-einsum-handler): in the fully unrolled body of a windowed
//    loop, the last dot's contribution is replaced by zeros (an off-by-one in the unrolling).
//  - wide-cache-unscaled (after windowed-einsum-handler): a wide activation cache is filled with
//    the shards converted but not scaled (the dequantization's multiply or divide dropped). Run
//    with `--pass-option windowed-einsum-cache-type=wide`, where the handler builds such caches.
#pragma once

#include <string>
#include <vector>

namespace weave::fuzz {

// Registers the mutant passes (idempotent).
void RegisterMutants();

struct MutantInfo {
  std::string name;       // e.g. "dequant-unproven"
  std::string replaces;   // the pipeline stage it replaces ("" = inserted)
  std::string after;      // the stage it follows when inserted
};
const std::vector<MutantInfo>& Mutants();

// The compile pipeline `names` with mutant `name` put in its place; empty if unknown.
std::vector<std::string> PipelineWithMutant(const std::vector<std::string>& names,
                                            const std::string& name);

}  // namespace weave::fuzz
