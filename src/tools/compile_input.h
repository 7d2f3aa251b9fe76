// The front end of `weave compile`: the input form of the module (spmd/input_form.h) and, for a
// global module, the SPMD partitioning that `weave partition` does
// (../shared/specs/spmd-partitioner.md §0), so that the windowed einsum pipeline always starts
// from the partitioned module.
#pragma once

#include <memory>

#include "hlo/ir.h"
#include "spmd/input_form.h"
#include "tools/compile_driver.h"
#include "tools/report.h"

namespace weave::tools {

struct CompileInput {
  spmd::InputForm form = spmd::InputForm::kAmbiguous;  // as decided (detected or --input-form)
  // The global module as given (global input only): the reference of --verify-numerics. Kept
  // only when numerics were requested (o.verify_seed); otherwise the input is partitioned in
  // place and this is null (a 30k-instruction module is about 40 MB).
  std::unique_ptr<HloModule> global;
  // True when the input was global and was partitioned (whether or not `global` was kept).
  bool from_global = false;
  // The module the windowed einsum pipeline compiles: the input itself, or the partitioned
  // global module.
  std::unique_ptr<HloModule> partitioned;
};

// Decides the form and partitions a global input. Records the partitioning passes in
// report->pipeline / passes / remarks and sets report->input_form. On failure prints the message
// on stderr and returns the exit code: 2 when the form is unclear (asks for --input-form) or
// --num-partitions contradicts the header, 1 for a module that does not verify, declined
// constructs (CustomSPMDPartitioning calls, listed by name, target and op_name) and partitioner
// errors. Returns kOk otherwise.
int PrepareCompileInput(const CompileOptions& o, std::unique_ptr<HloModule> input,
                        CompileReport* report, CompileInput* out);

}  // namespace weave::tools
