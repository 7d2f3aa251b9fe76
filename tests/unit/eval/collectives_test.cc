// Collective semantics over N = 1, 2, 3, 4, 8 partitions: all-gather, all-reduce, reduce-scatter,
// all-to-all, collective-permute, list and iota replica groups, partial groups, collectives in
// while loops, async forms, replicas, and mismatch detection. Expected values are computed here
// from the definitions.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "eval_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::Arr;
using testing::Doubles;
using testing::RunPer;

constexpr PrimitiveType F32 = PrimitiveType::F32;

class CollectivesN : public ::testing::TestWithParam<int64_t> {};

TEST_P(CollectivesN, AllGather) {
  const int64_t n = GetParam();
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
ENTRY e {
  x = f32[2] parameter(0)
  ROOT g = f32[)", 2 * n, R"(] all-gather(x), channel_id=1, replica_groups={}, dimensions={0}, use_global_device_ids=true
})");
  std::vector<std::vector<ValuePtr>> per;
  std::vector<double> expect;
  for (int64_t p = 0; p < n; ++p) {
    per.push_back({Arr(F32, {2}, {double(p), 10.0 + p})});
    expect.push_back(p);
    expect.push_back(10 + p);
  }
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int64_t p = 0; p < n; ++p) EXPECT_THAT(Doubles(*(*out)[p][0]), ElementsAreArray(expect));
  // One gathered value serves the whole group (the memory estimate counts it once).
  for (int64_t p = 1; p < n; ++p) EXPECT_EQ((*out)[p][0].get(), (*out)[0][0].get());
}

TEST_P(CollectivesN, AllReduceSum) {
  const int64_t n = GetParam();
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=sum
})");
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < n; ++p) per.push_back({Arr(F32, {2}, {double(p + 1), std::ldexp(1.0, p)})});
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const std::vector<double> expect = {double(n * (n + 1) / 2), std::ldexp(1.0, n) - 1};
  for (int64_t p = 0; p < n; ++p) EXPECT_THAT(Doubles(*(*out)[p][0]), ElementsAreArray(expect));
}

TEST_P(CollectivesN, ReduceScatter) {
  const int64_t n = GetParam();
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[)", 2 * n, R"(] parameter(0)
  ROOT r = f32[2] reduce-scatter(x), channel_id=1, replica_groups={}, use_global_device_ids=true, dimensions={0}, to_apply=sum
})");
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < n; ++p) {
    std::vector<double> v;
    for (int64_t k = 0; k < 2 * n; ++k) v.push_back(p * 100.0 + k);
    per.push_back({Arr(F32, {2 * n}, v)});
  }
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int64_t p = 0; p < n; ++p) {
    std::vector<double> expect;
    for (int64_t k = 2 * p; k < 2 * p + 2; ++k) expect.push_back(n * k + 100.0 * n * (n - 1) / 2);
    EXPECT_THAT(Doubles(*(*out)[p][0]), ElementsAreArray(expect));
  }
}

TEST_P(CollectivesN, AllToAll) {
  const int64_t n = GetParam();
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
ENTRY e {
  x = f32[)", n, R"(] parameter(0)
  ROOT r = f32[)", n, R"(] all-to-all(x), channel_id=1, replica_groups={}, dimensions={0}
})");
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < n; ++p) {
    std::vector<double> v;
    for (int64_t k = 0; k < n; ++k) v.push_back(p * 10.0 + k);
    per.push_back({Arr(F32, {n}, v)});
  }
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int64_t p = 0; p < n; ++p) {
    std::vector<double> expect;
    for (int64_t m = 0; m < n; ++m) expect.push_back(m * 10.0 + p);
    EXPECT_THAT(Doubles(*(*out)[p][0]), ElementsAreArray(expect));
  }
}

TEST_P(CollectivesN, CollectivePermuteRingAndPartial) {
  const int64_t n = GetParam();
  std::string ring;
  for (int64_t p = 0; p < n; ++p) absl::StrAppend(&ring, p ? "," : "", "{", p, ",", (p + 1) % n, "}");
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
ENTRY e {
  x = f32[1] parameter(0)
  r = f32[1] collective-permute(x), channel_id=1, source_target_pairs={)", ring, R"(}
  q = f32[1] collective-permute(x), channel_id=2, source_target_pairs={{0,)", n - 1, R"(}}
  ROOT t = (f32[1], f32[1]) tuple(r, q)
})");
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < n; ++p) per.push_back({Arr(F32, {1}, {100.0 + p})});
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int64_t p = 0; p < n; ++p) {
    EXPECT_EQ((*out)[p][0]->GetDouble(0), 100.0 + (p + n - 1) % n) << p;
    // Only partition n-1 is targeted by the second permute; the others receive zeros.
    EXPECT_EQ((*out)[p][1]->GetDouble(0), p == n - 1 ? 100.0 : 0.0) << p;
  }
}

TEST_P(CollectivesN, AllReduceInsideWhileLoop) {
  const int64_t n = GetParam();
  const std::string text = absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  s = (s32[], f32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[] get-tuple-element(s), index=1
  r = f32[] all-reduce(x), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=sum
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[]) tuple(i1, r)
}
ENTRY e {
  x = f32[] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[]) tuple(z, x)
  w = (s32[], f32[]) while(init), condition=cond, body=body
  ROOT o = f32[] get-tuple-element(w), index=1
})");
  std::vector<std::vector<ValuePtr>> per(static_cast<size_t>(n), {Arr(F32, {}, {1})});
  auto out = RunPer(text, per, n);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (int64_t p = 0; p < n; ++p) EXPECT_EQ((*out)[p][0]->GetDouble(0), double(n * n * n));
}

INSTANTIATE_TEST_SUITE_P(Partitions, CollectivesN, ::testing::Values(1, 2, 3, 4, 8));

std::string AllReduceModule(int64_t n, const std::string& groups) {
  return absl::StrCat(R"(
HloModule m, num_partitions=)", n, R"(
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  ROOT r = f32[] all-reduce(x), channel_id=1, replica_groups=)", groups, R"(, use_global_device_ids=true, to_apply=sum
})");
}

std::vector<double> AllReduceResults(int64_t n, const std::string& groups) {
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < n; ++p) per.push_back({Arr(F32, {}, {double(p + 1)})});
  auto out = RunPer(AllReduceModule(n, groups), per, n);
  EXPECT_TRUE(out.ok()) << out.status().message();
  std::vector<double> r;
  if (!out.ok()) return r;
  for (int64_t p = 0; p < n; ++p) r.push_back((*out)[p][0]->GetDouble(0));
  return r;
}

TEST(Collectives, ListAndIotaGroups) {
  // Values are p+1.
  EXPECT_THAT(AllReduceResults(4, "{{0,1},{2,3}}"), ElementsAreArray({3.0, 3.0, 7.0, 7.0}));
  EXPECT_THAT(AllReduceResults(4, "[2,2]<=[4]"), ElementsAreArray({3.0, 3.0, 7.0, 7.0}));
  // [2,2]<=[2,2]T(1,0): groups {0,2},{1,3}.
  EXPECT_THAT(AllReduceResults(4, "[2,2]<=[2,2]T(1,0)"), ElementsAreArray({4.0, 6.0, 4.0, 6.0}));
  EXPECT_THAT(AllReduceResults(4, "{{0,2},{1,3}}"), ElementsAreArray({4.0, 6.0, 4.0, 6.0}));
  // 8 partitions in 4 groups of 2 by iota: {0,1},{2,3},{4,5},{6,7}.
  EXPECT_THAT(AllReduceResults(8, "[4,2]<=[8]"),
              ElementsAreArray({3.0, 3.0, 7.0, 7.0, 11.0, 11.0, 15.0, 15.0}));
  // Partial (uneven) groups: {0}, {1,2} on 3 partitions.
  EXPECT_THAT(AllReduceResults(3, "{{0},{1,2}}"), ElementsAreArray({1.0, 5.0, 5.0}));
}

TEST(Collectives, AllGatherInPartialGroupsOrdersByGroup) {
  const char* text = R"(
HloModule m, num_partitions=4
ENTRY e {
  x = f32[1] parameter(0)
  ROOT g = f32[2] all-gather(x), channel_id=1, replica_groups={{3,1},{0,2}}, dimensions={0}, use_global_device_ids=true
})";
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < 4; ++p) per.push_back({Arr(F32, {1}, {double(p)})});
  auto out = RunPer(text, per, 4);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_THAT(Doubles(*(*out)[1][0]), ElementsAreArray({3.0, 1.0}));
  EXPECT_THAT(Doubles(*(*out)[3][0]), ElementsAreArray({3.0, 1.0}));
  EXPECT_THAT(Doubles(*(*out)[0][0]), ElementsAreArray({0.0, 2.0}));
}

TEST(Collectives, AsyncStartDoneForms) {
  const char* text = R"(
HloModule m, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ags = (f32[2], f32[4]) all-gather-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  agd = f32[4] all-gather-done(ags)
  ars = f32[2] all-reduce-start(x), channel_id=2, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=sum
  ard = f32[2] all-reduce-done(ars)
  cps = (f32[2], f32[2], u32[], u32[]) collective-permute-start(x), channel_id=3, source_target_pairs={{0,1},{1,0}}
  cpd = f32[2] collective-permute-done(cps)
  ROOT t = (f32[4], f32[2], f32[2]) tuple(agd, ard, cpd)
})";
  std::vector<std::vector<ValuePtr>> per = {{Arr(F32, {2}, {1, 2})}, {Arr(F32, {2}, {3, 4})}};
  auto out = RunPer(text, per, 2);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_THAT(Doubles(*(*out)[0][0]), ElementsAreArray({1.0, 2.0, 3.0, 4.0}));
  EXPECT_THAT(Doubles(*(*out)[1][1]), ElementsAreArray({4.0, 6.0}));
  EXPECT_THAT(Doubles(*(*out)[0][2]), ElementsAreArray({3.0, 4.0}));
  EXPECT_THAT(Doubles(*(*out)[1][2]), ElementsAreArray({1.0, 2.0}));
}

TEST(Collectives, PartitionIdAndCrossReplicaWithReplicas) {
  // 2 replicas x 2 partitions; device d = replica*2 + partition holds d+1.
  const char* text = R"(
HloModule m, num_partitions=2, replica_count=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  cr = f32[] all-reduce(x), replica_groups={}, to_apply=sum
  cp = f32[] all-reduce(x), channel_id=1, replica_groups={}, to_apply=sum
  pid = u32[] partition-id()
  rid = u32[] replica-id()
  ROOT t = (f32[], f32[], u32[], u32[]) tuple(cr, cp, pid, rid)
})";
  auto m = ParseHloModule(text, "test");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EvalOptions o;
  Inputs in;
  for (int d = 0; d < 4; ++d) in.per_device.push_back({Arr(F32, {}, {double(d + 1)})});
  auto r = RunModule(**m, o, &in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Cross-replica (no channel_id): partition p sums devices p and 2+p.
  EXPECT_EQ(r->outputs[0][0]->GetDouble(0), 1 + 3);
  EXPECT_EQ(r->outputs[1][0]->GetDouble(0), 2 + 4);
  // channel_id without use_global_device_ids, replica group {all replicas}: all devices.
  EXPECT_EQ(r->outputs[3][1]->GetDouble(0), 10);
  EXPECT_EQ(r->outputs[3][2]->GetInt(0), 1);
  EXPECT_EQ(r->outputs[3][3]->GetInt(0), 1);
  EXPECT_EQ(r->outputs[2][2]->GetInt(0), 0);
}

TEST(Collectives, ReducerOfAnotherTypeIsConvertedNotStoredThroughTheWrongStorage) {
  // The verifier rejects a reducer whose types differ from the all-reduce's; the evaluator,
  // which may be handed an unverified module, converts instead of writing integers into float
  // storage (a run-fuzzer finding: s4 parameters under an f32 reduce-scatter). Here an s32
  // reducer (not a simple add, so it is run per element) under f32: the sums are truncated.
  const char* text = R"(
HloModule m, num_partitions=2
isum {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] add(a, b)
  ROOT d = s32[] add(c, c)
}
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=isum
})";
  std::vector<std::vector<ValuePtr>> per = {{Arr(F32, {2}, {1.5, -3})}, {Arr(F32, {2}, {2.25, 4})}};
  auto out = RunPer(text, per, 2);
  ASSERT_TRUE(out.ok()) << out.status().message();
  // s32 parameters take 1 and 2 (1.5, 2.25 truncated), then -3 and 4: 2 * (1 + 2), 2 * (-3 + 4).
  EXPECT_THAT(Doubles(*(*out)[0][0]), ElementsAreArray({6.0, 2.0}));
  EXPECT_THAT(Doubles(*(*out)[1][0]), ElementsAreArray({6.0, 2.0}));
}

TEST(Collectives, MismatchedCollectivesAreReportedNotHung) {
  // Partition 0 takes the branch with an all-reduce; the others take the branch with an
  // all-gather: they can never meet.
  const char* text = R"(
HloModule m, num_partitions=3
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
br_ar {
  x = f32[1] parameter(0)
  ROOT r = f32[1] all-reduce(x), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=sum
}
br_ag {
  x = f32[1] parameter(0)
  g = f32[3] all-gather(x), channel_id=2, replica_groups={}, dimensions={0}, use_global_device_ids=true
  ROOT s = f32[1] slice(g), slice={[0:1]}
}
ENTRY e {
  x = f32[1] parameter(0)
  pid = u32[] partition-id()
  zero = u32[] constant(0)
  is0 = pred[] compare(pid, zero), direction=EQ
  ROOT c = f32[1] conditional(is0, x, x), true_computation=br_ar, false_computation=br_ag
})";
  std::vector<std::vector<ValuePtr>> per(3, {Arr(F32, {1}, {1})});
  auto out = RunPer(text, per, 3);
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  EXPECT_THAT(msg, HasSubstr("mismatched collectives"));
  EXPECT_THAT(msg, HasSubstr("partition 0 waits at all-reduce 'r'"));
  EXPECT_THAT(msg, HasSubstr("partition 1 waits at all-gather 'g'"));
  EXPECT_THAT(msg, HasSubstr("partition 2 waits at all-gather 'g'"));
}

TEST(Collectives, PartitionFinishingWhileOthersWaitIsReported) {
  const char* text = R"(
HloModule m, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
br_ar {
  x = f32[] parameter(0)
  ROOT r = f32[] all-reduce(x), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=sum
}
br_id {
  ROOT x = f32[] parameter(0)
}
ENTRY e {
  x = f32[] parameter(0)
  pid = u32[] partition-id()
  zero = u32[] constant(0)
  is0 = pred[] compare(pid, zero), direction=EQ
  ROOT c = f32[] conditional(is0, x, x), true_computation=br_ar, false_computation=br_id
})";
  std::vector<std::vector<ValuePtr>> per(2, {Arr(F32, {}, {1})});
  auto out = RunPer(text, per, 2);
  ASSERT_FALSE(out.ok());
  const std::string msg(out.status().message());
  EXPECT_THAT(msg, HasSubstr("partition 0 waits at all-reduce 'r'"));
  EXPECT_THAT(msg, HasSubstr("partition 1 finished"));
}

TEST(Collectives, ErrorOnOnePartitionDoesNotHang) {
  // Partition 1 fails (unsupported op) while partition 0 waits at a collective.
  const char* text = R"(
HloModule m, num_partitions=2
br_ag {
  x = f32[1] parameter(0)
  ROOT g = f32[1] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
br_bad {
  x = f32[1] parameter(0)
  ROOT f = f32[1] fft(x), fft_type=FFT, fft_length={1}
}
ENTRY e {
  x = f32[1] parameter(0)
  pid = u32[] partition-id()
  zero = u32[] constant(0)
  is0 = pred[] compare(pid, zero), direction=EQ
  ROOT c = f32[1] conditional(is0, x, x), true_computation=br_ag, false_computation=br_bad
})";
  std::vector<std::vector<ValuePtr>> per(2, {Arr(F32, {1}, {1})});
  auto out = RunPer(text, per, 2);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("fft"));
}

}  // namespace
}  // namespace weave::eval
