// Frontend attributes by which a user steers the passes (see user_attributes.h).
#include "analysis/user_attributes.h"

namespace weave {

bool UserDisablesCollectiveMatmul(const HloInstruction& dot) {
  const std::optional<std::string> v = dot.GetFrontendAttribute("_xla_collective_matmul");
  return v.has_value() && *v == "none";
}

}  // namespace weave
