// The checks `weave compile` adds to its report: --verify-numerics and --system's estimate.
#pragma once

#include <string>

#include "hlo/ir.h"
#include "tools/compile_driver.h"
#include "tools/report.h"

namespace weave::tools {

// --verify-numerics: runs the reference and the compiled module on the reference evaluator with
// the same inputs (seed o.verify_seed) and fills report->numerics.
//  - `global` non-null (the input was a global module): the reference is the global program on
//    one device (eval/global_compare.h: manual regions in their global view), the compiled
//    module runs on its partitions with the tiles of the same inputs, padding poisoned, and its
//    outputs are reassembled from the root sharding: "same as the program you wrote";
//  - otherwise the reference is the (partitioned) input, both on the same partitions
//    (eval::CompareModules).
// Skipped (numerics.skipped, exit 5 later) when the estimated memory is above
// kNumericsMemoryLimit without --force, or when the evaluator cannot run the reference. A
// compiled module that cannot run is a failure (ran, not pass).
void RunNumerics(const CompileOptions& o, const HloModule* global, const HloModule& input,
                 const HloModule& compiled, CompileReport* report);

// --system: the simulator's time before and after (report->sim).
void RunSimulation(const std::string& system, const HloModule& before, const HloModule& after,
                   CompileReport* report);

}  // namespace weave::tools
