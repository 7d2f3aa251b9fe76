#include "sim/all_to_all_cost.h"

namespace weave::sim {

double AllToAllTimeUs(const SystemSpec& s, double bytes, int64_t group_size) {
  if (group_size <= 1 || !(bytes > 0)) return 0;
  const double bw = s.link_gbps * 1e3 * s.link_efficiency;  // bytes per microsecond
  if (!(bw > 0)) return 0;
  const double g = static_cast<double>(group_size);
  return s.latency_us + (g - 1) / g * bytes / bw;
}

}  // namespace weave::sim
