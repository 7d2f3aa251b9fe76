// The pass pipeline of `weave compile`, for tools that run it in-process (the differential fuzz
// driver, tests/fuzz/). Defined next to the pipeline itself in compile_driver.cc, so that a stage
// added there reaches every user.
#pragma once

#include <string>
#include <vector>

namespace weave::tools {

// The passes `weave compile` runs, in order, with every stage switched on.
std::vector<std::string> CompilePipelinePassNames();

}  // namespace weave::tools
