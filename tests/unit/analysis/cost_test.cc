#include "analysis/cost.h"

#include "gtest/gtest.h"
#include "test_util.h"

namespace weave {
namespace {

using testing::Find;
using testing::ParseOrDie;

constexpr char kModule[] = R"(
HloModule cost, num_partitions=8

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  x = bf16[4,16] parameter(0)
  w = bf16[16,32] parameter(1)
  bl = f32[2,3,5] parameter(2)
  br = f32[2,5,7] parameter(3)
  d = f32[4,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bd = f32[2,3,7] dot(bl, br), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ag = bf16[16,16] all-gather(x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  ag_all = bf16[32,16] all-gather(x), channel_id=2, replica_groups={}, dimensions={0}
  rs = f32[1,32] reduce-scatter(d), channel_id=3, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true, to_apply=sum
  ar = f32[4,32] all-reduce(d), channel_id=4, replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=sum
  a2a = f32[4,32] all-to-all(d), channel_id=5, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  cp = bf16[4,16] collective-permute(x), channel_id=6, source_target_pairs={{0,1},{1,0}}
  ROOT t = (f32[4,32], f32[2,3,7], bf16[16,16], bf16[32,16], f32[1,32], f32[4,32], f32[4,32], bf16[4,16]) tuple(d, bd, ag, ag_all, rs, ar, a2a, cp)
}
)";

TEST(Cost, DotFlops) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(DotFlops(*Find(*m, "d")), 2 * 4 * 32 * 16);
  EXPECT_EQ(DotFlops(*Find(*m, "bd")), 2 * 2 * 3 * 7 * 5);
  EXPECT_EQ(DotFlops(*Find(*m, "x")), 0);
}

TEST(Cost, CollectiveBytesPerPartition) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  auto bytes = [&](const char* name) { return CollectiveBytes(*Find(*m, name)); };
  // all-gather: output 16*16*2 = 512 B, N = 4: 512 * 3/4.
  ASSERT_TRUE(bytes("ag").has_value());
  EXPECT_EQ(bytes("ag")->group_size, 4);
  EXPECT_EQ(bytes("ag")->bytes, 384);
  // Empty groups with a channel id: all num_partitions = 8 partitions; 32*16*2 = 1024 * 7/8.
  EXPECT_EQ(bytes("ag_all")->group_size, 8);
  EXPECT_EQ(bytes("ag_all")->bytes, 896);
  // reduce-scatter: input 4*32*4 = 512 B * 3/4.
  EXPECT_EQ(bytes("rs")->bytes, 384);
  // all-reduce: 2 * (N-1)/N * 512 with N = 2.
  EXPECT_EQ(bytes("ar")->group_size, 2);
  EXPECT_EQ(bytes("ar")->bytes, 512);
  // all-to-all: 512 * 3/4.
  EXPECT_EQ(bytes("a2a")->bytes, 384);
  // collective-permute: the operand, 4*16*2.
  EXPECT_EQ(bytes("cp")->bytes, 128);
  EXPECT_FALSE(bytes("d").has_value());
}

}  // namespace
}  // namespace weave
