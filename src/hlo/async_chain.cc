#include "hlo/async_chain.h"

namespace weave {

bool AsyncWrapsComputation(const HloInstruction& h) {
  const std::string& sugar = h.async_sugar();
  return sugar.empty() || sugar == "call" || sugar == "fusion";
}

const HloComputation* AsyncChainComputation(const HloInstruction& h) {
  const HloInstruction* link = &h;
  while (AsyncWrapsComputation(*link)) {
    if (!link->called_computations().empty()) return link->called_computations()[0];
    if (link->opcode() == HloOpcode::kAsyncStart || link->operand_count() == 0) return nullptr;
    link = link->operand(0);
    if (link->opcode() != HloOpcode::kAsyncStart && link->opcode() != HloOpcode::kAsyncUpdate) return nullptr;
  }
  return nullptr;
}

std::string ExecutionThreadName(std::string_view written) {
  if (written.size() >= 2 && written.front() == '"' && written.back() == '"') {
    written = written.substr(1, written.size() - 2);
  }
  return written.empty() ? std::string("main") : std::string(written);
}

}  // namespace weave
