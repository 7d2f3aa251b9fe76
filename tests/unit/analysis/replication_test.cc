#include "analysis/replication.h"

#include "gtest/gtest.h"
#include "test_util.h"
#include "shared_files.h"

namespace weave {
namespace {

using testing::Find;
using testing::ParseOrDie;

constexpr char kModule[] = R"(
HloModule rep, num_partitions=4

body {
  st = (f32[], f32[], u32[], f32[]) parameter(0)
  s_inv = f32[] get-tuple-element(st), index=0
  s_var = f32[] get-tuple-element(st), index=1
  k = u32[] get-tuple-element(st), index=2
  acc = f32[] get-tuple-element(st), index=3
  one = u32[] constant(1)
  k1 = u32[] add(k, one)
  bpid = u32[] partition-id()
  bpidf = f32[] convert(bpid)
  s_next = f32[] add(s_var, bpidf)
  acc1 = f32[] add(acc, s_inv)
  ROOT next = (f32[], f32[], u32[], f32[]) tuple(s_inv, s_next, k1, acc1)
}

cond {
  cs = (f32[], f32[], u32[], f32[]) parameter(0)
  ck = u32[] get-tuple-element(cs), index=2
  n = u32[] constant(4)
  ROOT lt = pred[] compare(ck, n), direction=LT
}

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT z = f32[] add(x, y)
}

ENTRY main {
  rep = f32[] parameter(0), sharding={replicated}
  tiled = f32[8] parameter(1), sharding={devices=[4]<=[4]}
  nosh = f32[] parameter(2)
  tup = (f32[], f32[8]) parameter(3), sharding={{replicated}, {devices=[4]<=[4]}}
  c = f32[] constant(2)
  scaled = f32[] multiply(rep, c)
  io = s32[8] iota(), iota_dimension=0
  pid = u32[] partition-id()
  pidf = f32[] convert(pid)
  mixed = f32[] add(rep, pidf)
  t0 = f32[] get-tuple-element(tup), index=0
  t1 = f32[8] get-tuple-element(tup), index=1
  ar = f32[8] all-reduce(tiled), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=sum
  ar_half = f32[8] all-reduce(tiled), channel_id=2, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=sum
  cp = f32[] collective-permute(rep), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  k0 = u32[] constant(0)
  z = f32[] constant(0)
  init = (f32[], f32[], u32[], f32[]) tuple(rep, rep, k0, z)
  loop = (f32[], f32[], u32[], f32[]) while(init), condition=cond, body=body
  l_inv = f32[] get-tuple-element(loop), index=0
  l_var = f32[] get-tuple-element(loop), index=1
  l_k = u32[] get-tuple-element(loop), index=2
  l_acc = f32[] get-tuple-element(loop), index=3
  ROOT r = (f32[], f32[], s32[8], f32[], f32[], f32[8], f32[8], f32[8], f32[], f32[], f32[], u32[], f32[], f32[]) tuple(scaled, nosh, io, mixed, t0, t1, ar, ar_half, cp, l_inv, l_var, l_k, l_acc, pidf)
}
)";

bool Same(const HloModule& m, const char* name, std::string* why = nullptr) {
  return IsSameOnAllPartitions(Find(m, name), why);
}

TEST(Replication, LeavesAndParameters) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(Same(*m, "c"));
  EXPECT_TRUE(Same(*m, "io"));
  EXPECT_TRUE(Same(*m, "rep"));
  EXPECT_TRUE(Same(*m, "scaled"));
  std::string why;
  EXPECT_FALSE(Same(*m, "tiled", &why));
  EXPECT_NE(why.find("tiled"), std::string::npos) << why;
  // No sharding: replicated, as XLA's SpmdPartitioner treats unannotated instructions; the proof
  // lists the parameter so that passes can say so.
  EXPECT_TRUE(Same(*m, "nosh"));
  ReplicationProof p = ProveSameWithinGroups(Find(*m, "nosh"), {});
  EXPECT_TRUE(p.proven);
  ASSERT_EQ(p.unannotated_parameters.size(), 1u);
  EXPECT_EQ(p.unannotated_parameters[0]->name(), "nosh");
  EXPECT_TRUE(ProveSameWithinGroups(Find(*m, "scaled"), {}).unannotated_parameters.empty());
}

// Equal within each group is enough when the value only travels inside its group.
TEST(Replication, GroupWise) {
  auto m = ParseOrDie(R"(
HloModule groups, num_partitions=8

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT z = f32[] add(x, y)
}

ENTRY main {
  local = f32[] parameter(0), sharding={devices=[8]<=[8]}
  amax = f32[] all-reduce(local), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=sum
  amax_iota = f32[] all-reduce(local), channel_id=2, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=sum
  scale = f32[] multiply(amax, amax_iota)
  manual = f32[] parameter(1), sharding={devices=[2,4]<=[8] last_tile_dims={manual, replicated}}
  halves = f32[2]{0} parameter(2), sharding={devices=[2,4]<=[8] last_tile_dim_replicate}
  pid = u32[] partition-id()
  pidf = f32[] convert(pid)
  mixed = f32[] add(scale, pidf)
  ROOT r = (f32[], f32[], f32[2]{0}, f32[]) tuple(scale, manual, halves, mixed)
}
)");
  ASSERT_NE(m, nullptr);
  const std::vector<std::vector<int64_t>> rings = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const std::vector<std::vector<int64_t>> across = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  for (const char* name : {"amax", "amax_iota", "scale", "manual", "halves"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(ProveSameWithinGroups(Find(*m, name), rings).proven);
    ReplicationProof across_groups = ProveSameWithinGroups(Find(*m, name), across);
    EXPECT_FALSE(across_groups.proven);
    EXPECT_FALSE(IsSameOnAllPartitions(Find(*m, name)));
  }
  ReplicationProof p = ProveSameWithinGroups(Find(*m, "amax"), across);
  EXPECT_NE(p.why.find("'amax' in computation 'main' is an all-reduce over replica groups"),
            std::string::npos)
      << p.why;
  // Tiles differ within a group of 4 here: the local parameter itself.
  EXPECT_FALSE(ProveSameWithinGroups(Find(*m, "local"), rings).proven);
  // Values from partition-id stay refused, whatever the groups.
  ReplicationProof mixed = ProveSameWithinGroups(Find(*m, "mixed"), rings);
  EXPECT_FALSE(mixed.proven);
  EXPECT_NE(mixed.why.find("partition-id"), std::string::npos) << mixed.why;
}

TEST(Replication, PartitionIdTaints) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  std::string why;
  EXPECT_FALSE(Same(*m, "mixed", &why));
  EXPECT_NE(why.find("partition-id"), std::string::npos) << why;
  EXPECT_FALSE(Same(*m, "cp"));
}

TEST(Replication, TupleShardingPerElement) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(Same(*m, "t0"));
  EXPECT_FALSE(Same(*m, "t1"));
  EXPECT_FALSE(Same(*m, "tup"));
}

TEST(Replication, AllReduceOverEveryPartition) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(Same(*m, "ar"));
  EXPECT_FALSE(Same(*m, "ar_half"));
}

TEST(Replication, WhileLoopElements) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  // Passed through unchanged with a replicated init.
  EXPECT_TRUE(Same(*m, "l_inv"));
  EXPECT_TRUE(Same(*m, "s_inv"));
  // A counter: constant init, incremented by a constant, trip count proven.
  EXPECT_TRUE(Same(*m, "l_k"));
  EXPECT_TRUE(Same(*m, "k"));
  // Accumulates a loop-invariant replicated value: proven by induction.
  EXPECT_TRUE(Same(*m, "l_acc"));
  // Adds partition-id each iteration.
  std::string why;
  EXPECT_FALSE(Same(*m, "l_var", &why));
  EXPECT_NE(why.find("partition-id"), std::string::npos) << why;
  EXPECT_FALSE(Same(*m, "s_var"));
  EXPECT_FALSE(Same(*m, "r"));
}

// A windowed FP8 all-gather loop of the project's own: its scales are replicated parameters,
// the FP8 shard and the partition id are not.
TEST(Replication, LoopScalesAreReplicated) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModuleFile(
      weave::testfiles::SourcePath("tests/lit/windowed-einsum-handler-convert-after-scale.hlo"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(IsSameOnAllPartitions(Find(**m, "xs")));
  EXPECT_TRUE(IsSameOnAllPartitions(Find(**m, "ws")));
  EXPECT_TRUE(IsSameOnAllPartitions(Find(**m, "wd")));
  EXPECT_FALSE(IsSameOnAllPartitions(Find(**m, "xq")));
  EXPECT_FALSE(IsSameOnAllPartitions(Find(**m, "xd")));
  EXPECT_FALSE(IsSameOnAllPartitions(Find(**m, "pid")));
}

TEST(Replication, ExampleScalesAreReplicated) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_fp8_two_consumers.hlo");
  absl::StatusOr<std::unique_ptr<HloModule>> m =
      ParseHloModuleFile(weave::testfiles::SharedPath("examples/ag_fp8_two_consumers.hlo"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(IsSameOnAllPartitions(Find(**m, "sx")));
  EXPECT_TRUE(IsSameOnAllPartitions(Find(**m, "sw")));
  EXPECT_FALSE(IsSameOnAllPartitions(Find(**m, "xq")));
  EXPECT_FALSE(IsSameOnAllPartitions(Find(**m, "pid")));
}

}  // namespace
}  // namespace weave
