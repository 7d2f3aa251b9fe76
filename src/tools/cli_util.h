// Helpers shared by the `weave` subcommands.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace weave::tools {

// Writes `text` to `path` ("-" or empty: stdout) atomically: a temporary file beside `path`,
// then rename, so a failed run never leaves a half-written output. Errors: NotFound (cannot
// open), Internal (write or rename failed); the temporary file is removed on failure.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace weave::tools
