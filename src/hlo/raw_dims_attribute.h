// A `{d,...}` list of dimension numbers kept as a raw attribute (XLA's ragged-dot
// lhs_ragged_dims / rhs_group_dims, which the IR does not model).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// The integers of raw attribute `key` of `h`; empty when `h` has no such attribute.
// InvalidArgument ("KEY=TEXT is not a {d,...} list") when its text is not a braced list of
// integers.
absl::StatusOr<std::vector<int64_t>> RawDimsAttribute(const HloInstruction& h, std::string_view key);

}  // namespace weave
