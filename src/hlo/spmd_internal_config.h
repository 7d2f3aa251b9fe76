// The backend_config of XLA's partitioner-internal custom calls (`_SPMDInternalOp_RotateRight`,
// `_MultiSlice`, `_MultiPad`, `_MultiRotate`, `_Wrap`, written by
// xla/service/spmd/custom_call_handler.cc): comma-separated `key=value` pairs whose values are
// integers or bracketed lists `[a,b,..]`, e.g. "dimension=0,amount=3,start_indices=[6]".
// Spaces, newlines and double quotes are ignored.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weave {

struct SpmdInternalConfig {
  std::map<std::string, std::vector<int64_t>> values;
  // The value of `key` when it is one integer.
  std::optional<int64_t> Int(const std::string& key) const;
  // The list under `key` (nullptr if absent).
  const std::vector<int64_t>* Array(const std::string& key) const;
};

// Errors: InvalidArgument naming the problem (not key=value pairs, an unclosed '[', a value that
// is not an integer, or one beyond +-2^40).
absl::StatusOr<SpmdInternalConfig> ParseSpmdInternalConfig(std::string_view text);

}  // namespace weave
