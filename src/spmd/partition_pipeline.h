// The SPMD pipeline from a global module to a partitioned one (../shared/specs/spmd-partitioner.md
// §0): the passes PartitionPassNames lists, from sharding-import through the partitioner to its
// cleanup. `weave partition` runs it, and `weave compile` runs it first on a global module.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "passes/pass.h"
#include "spmd/input_form.h"

namespace weave::spmd {

struct PartitionOptions {
  int64_t num_partitions = 0;  // the partition count to use (> 0)
  bool verify_each = false;    // run the verifier after every pass
  bool propagate_only = false; // stop after sharding-propagation (shardings annotated)
  bool enzyme_comms_opt = false;  // XLA's xla_enable_enzyme_comms_opt (spmd_partitioner.h)
};

// The pass names in pipeline order.
std::vector<std::string> PartitionPassNames(bool propagate_only = false);

// Runs the pipeline on `module` in place (sets num_partitions first). Errors from a pass are
// returned as is (the module may then be half rewritten: run on a clone for atomicity).
absl::Status PartitionModule(HloModule* module, const PartitionOptions& options,
                             std::vector<Remark>* remarks = nullptr,
                             std::vector<PassTiming>* timings = nullptr);

// The partition count for a module: the header's num_partitions, else `requested`, else the
// shardings' device set. InvalidArgument when `requested` contradicts the header, or when none
// is known but the module has tiled shardings.
absl::StatusOr<int64_t> ResolvePartitionCount(const HloModule& module,
                                              const InputFormReport& form, int64_t requested);

}  // namespace weave::spmd
