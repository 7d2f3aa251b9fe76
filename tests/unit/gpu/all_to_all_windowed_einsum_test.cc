// Unit tests of the all-to-all windowed einsum pass object: reshape split-dim tracking, groups of
// unequal sizes (which do not verify, so no lit test can reach them), the decision by a cost model
// (a stand-in here: the simulator-backed one is tested in lit), option errors, and finding the
// rewritten structure again (FindAllToAllWindows) in our output and in XLA's form.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/all_to_all_windowed_einsum.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

int64_t Count(const HloModule& m, HloOpcode op) {
  int64_t n = 0;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) n += i->opcode() == op;
  }
  return n;
}

TEST(DimKeptByReshape, TracksIntactDims) {
  const Shape a(PrimitiveType::BF16, {1, 4, 64, 1, 32});
  const Shape b(PrimitiveType::BF16, {4, 64, 1, 32});
  EXPECT_EQ(DimKeptByReshape(a, b, 1), 0);  // a leading 1 dropped
  EXPECT_EQ(DimKeptByReshape(a, b, 2), 1);
  EXPECT_EQ(DimKeptByReshape(b, a, 0), 1);
  const Shape merged(PrimitiveType::BF16, {256, 1, 32});
  EXPECT_EQ(DimKeptByReshape(b, merged, 0), std::nullopt);  // 4 merged with 64
  EXPECT_EQ(DimKeptByReshape(b, merged, 3), 2);
  const Shape split(PrimitiveType::BF16, {4, 8, 8, 1, 32});
  EXPECT_EQ(DimKeptByReshape(b, split, 1), std::nullopt);  // 64 split into 8x8
  EXPECT_EQ(DimKeptByReshape(b, split, 0), 0);
  EXPECT_EQ(DimKeptByReshape(b, split, 9), std::nullopt);
}

constexpr char kExchangeThenDot[] = R"(HloModule m, num_partitions=8
ENTRY e {
  w = bf16[64,24]{1,0} parameter(0)
  x = bf16[16,64]{1,0} parameter(1)
  a = bf16[16,64]{1,0} all-to-all(x), channel_id=1, replica_groups=GROUPS, dimensions={0}
  ROOT d = bf16[16,24]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

std::string WithGroups(const std::string& groups) {
  std::string t = kExchangeThenDot;
  t.replace(t.find("GROUPS"), 6, groups);
  return t;
}

TEST(AllToAllWindowedEinsum, RefusesGroupsOfUnequalSizes) {
  auto m = Parse(WithGroups("{{0,1},{2,3,4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsum pass;
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message, HasSubstr("replica groups of unequal sizes (2 and 6)"));
}

// A stand-in cost model: the region's time is `per_a2a` per all-to-all plus `base`.
AllToAllWindowCostModel CountingModel(double base, double per_a2a, int* calls) {
  AllToAllWindowCostModel m;
  m.system = "counting";
  m.estimate_us = [=](const HloModule& region) -> absl::StatusOr<double> {
    ++*calls;
    const double n = static_cast<double>(Count(region, HloOpcode::kAllToAll));
    // One all-to-all before; C after: with per_a2a < 0 more chunks are predicted faster.
    return base + per_a2a * n;
  };
  return m;
}

TEST(AllToAllWindowedEinsum, CostModelPicksTheChunkCount) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsumOptions o;
  o.max_chunks = 8;
  AllToAllWindowedEinsum pass(o);
  int calls = 0;
  pass.set_cost_model(CountingModel(100, -1, &calls));
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  // Before, then C = 2, 4, 8 (the divisors of K = 64 up to 8).
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 8);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].applied);
  EXPECT_THAT(remarks[0].message,
              HasSubstr("8 chunks of 8 along the contraction (G=4, K=64, split dim 0 at the dot)"));
  EXPECT_THAT(remarks[0].message,
              HasSubstr("predicted 92.0 us with 8 chunks vs 99.0 us without on counting"));
}

TEST(AllToAllWindowedEinsum, CostModelSaysNo) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsum pass;
  int calls = 0;
  pass.set_cost_model(CountingModel(10, 1, &calls));
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 1);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].missed());
  EXPECT_THAT(remarks[0].message,
              HasSubstr("not rewritten: predicted no faster on counting (A: 11.0 us without; with "
                        "chunks 2: 12.0, 4: 14.0, 8: 18.0, 16: 26.0, 32: 42.0)"));
}

TEST(AllToAllWindowedEinsum, XlaFlagOverridesTheModel) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  PassOptions po;
  po.Set("xla_gpu_experimental_enable_alltoall_windowed_einsum", "true");
  auto o = ParseAllToAllWindowedEinsumOptions(po);
  ASSERT_TRUE(o.ok());
  AllToAllWindowedEinsum pass(*o);
  int calls = 0;
  pass.set_cost_model(CountingModel(10, 1, &calls));
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 4);  // G chunks
}

TEST(AllToAllWindowedEinsum, OptionErrors) {
  for (const auto& [key, value, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"all-to-all-windowed-einsum-chunks", "1", "needs at least 2 chunks"},
           {"all-to-all-windowed-einsum-chunks", "x", "is not an integer"},
           {"all-to-all-windowed-einsum-max-chunks", "1", "must be in [2, 1024]"},
           {"all-to-all-windowed-einsum-rewrite", "C", "is not one of A, B, any"},
           {"xla-backend-config", "2027", "is not one of 2024, 2025, 2026"},
           {"xla_gpu_experimental_enable_alltoall_windowed_einsum", "maybe", "is not a boolean"}}) {
    PassOptions po;
    po.Set(key, value);
    auto o = ParseAllToAllWindowedEinsumOptions(po);
    ASSERT_FALSE(o.ok()) << key;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(message)) << key;
  }
  auto pass = PassRegistry::Get().Create("all-to-all-windowed-einsum", PassOptions());
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ((*pass)->name(), "all-to-all-windowed-einsum");
}

constexpr char kBoth[] = R"(HloModule m, num_partitions=4
ENTRY e {
  w = bf16[64,24]{1,0} parameter(0)
  x = bf16[16,64]{1,0} parameter(1)
  a = bf16[16,64]{1,0} all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  d = bf16[16,24]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  v = bf16[24,32]{1,0} parameter(2)
  e = bf16[16,32]{1,0} dot(d, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT b = bf16[16,32]{1,0} all-to-all(e), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}
}
)";

TEST(FindAllToAllWindows, FindsBothRewrites) {
  auto m = Parse(kBoth);
  ASSERT_TRUE(m);
  AllToAllWindowedEinsum pass;  // no cost model: every match, C = G = 4
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::vector<AllToAllWindow> w = FindAllToAllWindows(*m->entry());
  ASSERT_EQ(w.size(), 2u);
  int a = 0, b = 0;
  for (const AllToAllWindow& x : w) {
    EXPECT_EQ(x.all_to_alls.size(), 4u);
    EXPECT_EQ(x.gemms.size(), 4u);
    EXPECT_EQ(x.group_size, 4);
    (x.exchange_first ? a : b)++;
  }
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  // The pass is done: a second run finds no candidate (each chunk's exchange reads a slice or
  // feeds an add).
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  auto again = pass.Run(m.get());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  for (const Remark& r : remarks) EXPECT_TRUE(r.missed()) << r.ToString();
}

// The plain module has no window; a single chunk is not one.
TEST(FindAllToAllWindows, NothingInPlainModules) {
  auto m = Parse(kBoth);
  ASSERT_TRUE(m);
  EXPECT_TRUE(FindAllToAllWindows(*m->entry()).empty());
}

}  // namespace
}  // namespace weave
