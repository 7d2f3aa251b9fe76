#include "spmd/partition_ring.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// A module with one all-gather whose attributes come from `attrs`.
std::unique_ptr<HloModule> AgModule(const std::string& attrs, int partitions, int replicas = 1) {
  std::string text = "HloModule m, num_partitions=" + std::to_string(partitions) +
                     ", replica_count=" + std::to_string(replicas) +
                     "\n\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
                     "  ROOT g = f32[2,12] all-gather(x), dimensions={1}, " + attrs + "\n}\n";
  auto m = ParseHloModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(PartitionRingTest, SingleIdentityGroup) {
  auto m = AgModule("channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true", 4);
  ASSERT_NE(m, nullptr);
  auto ring = AnalyzePartitionRing(*m->entry()->root(), 4, 1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->size(), 4);
  EXPECT_TRUE(ring->IsIdentity());
  // s -> s-1, XLA's AG ring.
  EXPECT_THAT(ring->ShiftPairs(-1), ElementsAre(Pair(0, 3), Pair(1, 0), Pair(2, 1), Pair(3, 2)));
  EXPECT_THAT(ring->ShiftPairs(-2), ElementsAre(Pair(0, 2), Pair(1, 3), Pair(2, 0), Pair(3, 1)));
  EXPECT_THAT(ring->ShiftPairs(1), ElementsAre(Pair(0, 1), Pair(1, 2), Pair(2, 3), Pair(3, 0)));
}

TEST(PartitionRingTest, IotaTransposedGroupsUseGlobalIds) {
  auto m = AgModule("channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true",
                    8);
  ASSERT_NE(m, nullptr);
  auto ring = AnalyzePartitionRing(*m->entry()->root(), 8, 1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->size(), 2);
  EXPECT_FALSE(ring->IsIdentity());
  // Groups {0,4},{1,5},{2,6},{3,7}.
  EXPECT_THAT(ring->index_in_group, ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT(ring->ShiftPairs(-1), ElementsAre(Pair(0, 4), Pair(1, 5), Pair(2, 6), Pair(3, 7),
                                                Pair(4, 0), Pair(5, 1), Pair(6, 2), Pair(7, 3)));
}

TEST(PartitionRingTest, PermutedSingleGroupIsNotIdentity) {
  auto m = AgModule("channel_id=1, replica_groups={{2,0,3,1}}", 4);
  ASSERT_NE(m, nullptr);
  auto ring = AnalyzePartitionRing(*m->entry()->root(), 4, 1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_FALSE(ring->IsIdentity());
  EXPECT_THAT(ring->index_in_group, ElementsAre(1, 3, 0, 2));
  // Position i sends to position i-1: 2->1 (pos0->pos3), 0->2, 3->0, 1->3.
  EXPECT_THAT(ring->ShiftPairs(-1), ElementsAre(Pair(0, 2), Pair(1, 3), Pair(2, 1), Pair(3, 0)));
}

TEST(PartitionRingTest, EmptyGroupsMeanAllPartitions) {
  auto m = AgModule("channel_id=1, replica_groups={}", 4);
  ASSERT_NE(m, nullptr);
  auto ring = AnalyzePartitionRing(*m->entry()->root(), 4, 1);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_TRUE(ring->IsIdentity());
}

TEST(PartitionRingTest, Rejections) {
  auto m = AgModule("replica_groups={{0,1,2,3}}", 4);
  ASSERT_NE(m, nullptr);
  auto r = AnalyzePartitionRing(*m->entry()->root(), 4, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no channel_id"));

  EXPECT_THAT(std::string(AnalyzePartitionRing(*m->entry()->root(), 1, 1).status().message()),
              HasSubstr("not partitioned"));
  EXPECT_THAT(std::string(AnalyzePartitionRing(*m->entry()->root(), 4, 2).status().message()),
              HasSubstr("replica_count=2"));

  auto uneven = AgModule("channel_id=1, replica_groups={{0,1,2},{3}}", 4);
  ASSERT_NE(uneven, nullptr);
  EXPECT_THAT(std::string(AnalyzePartitionRing(*uneven->entry()->root(), 4, 1).status().message()),
              HasSubstr("different sizes"));
  auto missing = AgModule("channel_id=1, replica_groups={{0,1}}", 4);
  ASSERT_NE(missing, nullptr);
  EXPECT_THAT(std::string(AnalyzePartitionRing(*missing->entry()->root(), 4, 1).status().message()),
              HasSubstr("leave out partition 2"));
}

TEST(PartitionRingTest, EvaluateOffsetsFromPartitionId) {
  const char* text = R"(HloModule m, num_partitions=4

ENTRY e {
  pid = u32[] partition-id()
  tbl = s32[4]{0} constant({0, 6, 12, 18})
  ds = s32[1]{0} dynamic-slice(tbl, pid), dynamic_slice_sizes={1}
  off = s32[] reshape(ds)
  c = s32[] convert(pid)
  three = s32[] constant(3)
  prod = s32[] multiply(c, three)
  two = s32[] constant(2)
  rem = s32[] remainder(prod, two)
  sum = s32[] add(off, rem)
  p = s32[] parameter(0)
  ROOT bad = s32[] add(sum, p)
})";
  auto m = ParseHloModule(text);
  ASSERT_TRUE(m.ok()) << m.status();
  HloComputation* e = (*m)->entry();
  for (int64_t pid = 0; pid < 4; ++pid) {
    EXPECT_EQ(EvaluateForPartition(e->GetInstruction("off"), pid), pid * 6);
    EXPECT_EQ(EvaluateForPartition(e->GetInstruction("prod"), pid), pid * 3);
    EXPECT_EQ(EvaluateForPartition(e->GetInstruction("sum"), pid), pid * 6 + (pid * 3) % 2);
    EXPECT_EQ(EvaluateForPartition(e->GetInstruction("bad"), pid), std::nullopt);
  }
}

}  // namespace
}  // namespace weave
