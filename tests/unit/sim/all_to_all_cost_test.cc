// The all-to-all time of the performance model (sim/all_to_all_cost.h): one step of latency plus
// (G-1)/G of the operand over the link, whatever the group size; so splitting one exchange into C
// chunks costs C-1 extra latencies and nothing else.
#include "gtest/gtest.h"
#include "hlo/opcodes.h"
#include "sim/all_to_all_cost.h"
#include "sim/simulator.h"

namespace weave::sim {
namespace {

SystemSpec Spec() {
  SystemSpec s;
  s.link_gbps = 400;  // 400e3 bytes per microsecond
  s.link_efficiency = 0.5;
  s.latency_us = 3;
  return s;
}

TEST(AllToAllCost, OneStepOfLatency) {
  const SystemSpec s = Spec();
  // 8 devices, 16 MB each: 7/8 of it leaves at 200e3 bytes/us.
  EXPECT_DOUBLE_EQ(AllToAllTimeUs(s, 16e6, 8), 3 + 7.0 / 8 * 16e6 / 200e3);
  EXPECT_DOUBLE_EQ(AllToAllTimeUs(s, 16e6, 2), 3 + 0.5 * 16e6 / 200e3);
  EXPECT_EQ(AllToAllTimeUs(s, 16e6, 1), 0);
  EXPECT_EQ(AllToAllTimeUs(s, 0, 8), 0);
  // The simulator's collective time uses it for all-to-all (and ragged-all-to-all).
  EXPECT_DOUBLE_EQ(CollectiveTimeUs(s, HloOpcode::kAllToAll, 16e6, 8), AllToAllTimeUs(s, 16e6, 8));
  EXPECT_DOUBLE_EQ(CollectiveTimeUs(s, HloOpcode::kRaggedAllToAll, 16e6, 4),
                   AllToAllTimeUs(s, 16e6, 4));
}

TEST(AllToAllCost, ChunksCostOnlyTheirLatency) {
  const SystemSpec s = Spec();
  const double whole = AllToAllTimeUs(s, 16e6, 4);
  double chunks = 0;
  for (int i = 0; i < 4; ++i) chunks += AllToAllTimeUs(s, 16e6 / 4, 4);
  EXPECT_NEAR(chunks - whole, 3 * s.latency_us, 1e-9);
}

}  // namespace
}  // namespace weave::sim
