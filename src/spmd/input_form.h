// Input form of a module: global (as JAX emits it before XLA's SPMD partitioning: global shapes
// plus sharding annotations) or partitioned (per-device shapes, explicit collectives), and its
// partition count (../shared/specs/spmd-partitioner.md §0).
//
// Parameter shardings survive XLA's partitioning, so they prove nothing. Evidence:
//  - global: `Sharding`, `SPMDFullToShardShape`/`SPMDShardToFullShape`,
//    `CustomSPMDPartitioning` (replaced by XLA's partitioner) or `xla.sdy.*` custom calls; `xla.sdy.meshes` in the module's frontend attributes; a `sharding=` on an
//    instruction other than a parameter or a computation root; and, weaker, an
//    `allow_spmd_sharding_propagation_to_parameters`/`_to_output` header attribute, which
//    counts only when nothing says partitioned and the module has tiled shardings or more than
//    one partition (XLA prints these after partitioning and for single-device programs too: the
//    post-SPMD llama3 dump in ../shared/real carries them all false, the dlrm one all true).
//  - partitioned: a cross-partition collective (one with a channel_id; cross-replica ones
//    without it do not count) or `partition-id`, outside manual regions (the instructions
//    between SPMDFullToShardShape and SPMDShardToFullShape, and Shardy manual computation
//    bodies).
// Neither, with tiled or maximal shardings (on parameters or roots): ambiguous (tools exit 2
// asking for `--input-form=global|partitioned`); neither and no such sharding: kSingleDevice
// ("unsharded": both readings agree, every partition runs the same program). Both: ambiguous.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave::spmd {

enum class InputForm { kGlobal, kPartitioned, kSingleDevice, kAmbiguous };
std::string_view InputFormName(InputForm f);  // "global", "partitioned", "unsharded", ...

struct InputFormReport {
  InputForm form = InputForm::kAmbiguous;
  std::vector<std::string> global_evidence;       // e.g. "12 `Sharding` custom calls"
  std::vector<std::string> partitioned_evidence;  // e.g. "all-reduce 'ar.1' (channel_id=3)"
  // Partition count: num_partitions when the header has it, else the device set of the
  // shardings (0..N-1, the same in every tiled sharding), else 0 (unknown).
  int64_t num_partitions = 0;
  std::string num_partitions_source;  // "num_partitions=4 in the header", "the shardings' ..."
  // One paragraph saying what was found and, when ambiguous, how to decide.
  std::string Describe() const;
};

InputFormReport DetectInputForm(const HloModule& module);

// Parses `global|partitioned`; false otherwise.
bool ParseInputForm(std::string_view text, InputForm* out);

}  // namespace weave::spmd
