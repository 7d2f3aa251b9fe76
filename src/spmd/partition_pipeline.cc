// The SPMD pipeline (see partition_pipeline.h).
#include "spmd/partition_pipeline.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spmd/spmd_partitioner.h"
#include "hlo/status_macros.h"

namespace weave::spmd {

std::vector<std::string> PartitionPassNames(bool propagate_only) {
  if (propagate_only) return {"sharding-import", "spmd-prepare", "sharding-propagation"};
  return {"sharding-import", "spmd-prepare", "sharding-propagation", "spmd-partitioner",
          "reduce-scatter-creator", "dce",
          "tuple-simplifier"};
}

absl::Status PartitionModule(HloModule* module, const PartitionOptions& options,
                             std::vector<Remark>* remarks, std::vector<PassTiming>* timings) {
  if (!options.propagate_only) {
    RETURN_IF_ERROR(CheckDeclinedCalls(*module));
  }
  module->num_partitions = std::max<int64_t>(1, options.num_partitions);
  HloPassPipeline pipeline;
  PassOptions pass_options;
  if (options.enzyme_comms_opt) pass_options.Set("xla_enable_enzyme_comms_opt", "true");
  if (absl::Status st = pipeline.AddPassesByName(
          absl::StrJoin(PartitionPassNames(options.propagate_only), ","), pass_options);
      !st.ok()) {
    return st;
  }
  pipeline.set_verify_each(options.verify_each);
  pipeline.set_remarks(remarks);
  absl::StatusOr<bool> r = pipeline.Run(module, timings);
  return r.status();
}

absl::StatusOr<int64_t> ResolvePartitionCount(const HloModule& module,
                                              const InputFormReport& form, int64_t requested) {
  if (module.has_num_partitions) {
    if (requested > 0 && requested != module.num_partitions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--num-partitions ", requested, " contradicts num_partitions=", module.num_partitions,
          " in the module's header"));
    }
    return module.num_partitions;
  }
  if (requested > 0) return requested;
  if (form.num_partitions > 0) return form.num_partitions;
  bool tiled = false;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      tiled |= h->sharding.has_value() && h->sharding->kind == HloSharding::Kind::kTiled;
    }
  }
  if (tiled) {
    return absl::InvalidArgumentError(
        "the module has no num_partitions and its shardings do not name one device set 0..N-1: "
        "give --num-partitions");
  }
  return 1;
}

}  // namespace weave::spmd
