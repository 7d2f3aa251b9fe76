// Queries on async chains (async-start → async-update* → async-done) and execution threads.
//
// An async chain either wraps a computation (the plain `async-start(...), calls=c` form and the
// `call-start` / `fusion-start` sugar) or is a sugared op that calls something else
// (`all-reduce-start`, `reduce-scatter-start`, ... call their reducer). A link after the start
// may leave out `calls=`; it then wraps the computation of the nearest earlier link that names
// one (XLA's HloAsyncInstruction::async_wrapped_computation, which every link shares).
#pragma once

#include <string>
#include <string_view>

#include "hlo/ir.h"

namespace weave {

// True when async link `h` wraps the computation it calls: the plain form, `call-*` or
// `fusion-*`. False for a sugared op on its own operands (its calls= is a reducer or none).
bool AsyncWrapsComputation(const HloInstruction& h);

// The computation the chain through `h` wraps: `h`'s own calls=, else that of the nearest earlier
// async-start / async-update that names one. nullptr when a link on the way is sugared (see
// AsyncWrapsComputation), when the walk leaves the chain (an async value carried through a loop
// parameter, say) or when no link names a computation. O(chain length).
const HloComputation* AsyncChainComputation(const HloInstruction& h);

// An execution thread's name: `written` without its quotes (an `execution_thread=` or
// `async_execution_thread=` value as parsed), "main" when empty (XLA's kMainExecutionThread).
std::string ExecutionThreadName(std::string_view written);

}  // namespace weave
