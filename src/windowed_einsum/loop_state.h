// Growing the state of a while loop, for the windowed einsum passes that move work into a loop
// (windowed-einsum-consumers-in-ring, windowed-einsum-epilogue) and read its elements.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/builders.h"
#include "hlo/ir.h"

namespace weave {

// Every while instruction of `module`, computations in post order, each in post order.
std::vector<HloInstruction*> CollectWhiles(HloModule* module);

// Appends `values` (computed in the while's computation) to the state of `w`: its init becomes
// a tuple of the old elements and `values` (named after the old init plus `suffix`; an old init
// left unread is removed), and the while, its body's and its condition's parameters take the new
// tuple shape. The body root is the caller's to extend (its operands must match the new shape
// before the module is verified). Returns the index of the first appended element.
// Errors: `w` is not a while with a tuple state (InvalidArgument), or the IR refuses an edit.
absl::StatusOr<int64_t> AppendLoopState(HloInstruction* w, const std::vector<HloInstruction*>& values,
                                        std::string_view suffix);

}  // namespace weave
