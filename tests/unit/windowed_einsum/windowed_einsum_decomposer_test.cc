#include "windowed_einsum/windowed_einsum_decomposer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

constexpr char kAg[] = R"(HloModule ag, num_partitions=4

ENTRY main {
  x = bf16[2,8]{1,0} parameter(0)
  xg = bf16[8,8]{1,0} all-gather(x), channel_id=9, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  w = bf16[8,3]{1,0} parameter(1)
  ROOT y = bf16[8,3]{1,0} dot(xg, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";

std::vector<HloInstruction*> OfOpcode(const HloModule& m, HloOpcode op) {
  std::vector<HloInstruction*> out;
  for (HloComputation* c : m.computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->opcode() == op) out.push_back(i);
    }
  }
  return out;
}

TEST(WindowedEinsumDecomposerTest, OptionsParseAndReject) {
  PassOptions o;
  auto d = ParseWindowedEinsumDecomposerOptions(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->threshold_mib, 0);
  EXPECT_EQ(d->max_ring, 32);
  EXPECT_FALSE(d->duplicate_loops);
  o.Set("windowed-einsum-threshold-mib", "-1");
  EXPECT_FALSE(ParseWindowedEinsumDecomposerOptions(o).ok());
  o.Set("windowed-einsum-threshold-mib", "abc");
  EXPECT_FALSE(ParseWindowedEinsumDecomposerOptions(o).ok());
  o.Set("windowed-einsum-threshold-mib", "2");
  o.Set("windowed-einsum-max-ring", "64");
  o.Set("windowed-einsum-duplicate-loops", "true");
  d = ParseWindowedEinsumDecomposerOptions(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->threshold_mib, 2);
  EXPECT_EQ(d->max_ring, 64);
  EXPECT_TRUE(d->duplicate_loops);
}

TEST(WindowedEinsumDecomposerTest, RegisteredUnderItsName) {
  auto p = PassRegistry::Get().Create("windowed-einsum-decomposer", PassOptions());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name(), "windowed-einsum-decomposer");
}

TEST(WindowedEinsumDecomposerTest, AgLoopUsesFreshChannelsAndIsIdempotent) {
  auto m = ParseHloModule(kAg);
  ASSERT_TRUE(m.ok()) << m.status();
  WindowedEinsumDecomposer pass;
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m->get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(OfOpcode(**m, HloOpcode::kAllGather).empty());
  auto whiles = OfOpcode(**m, HloOpcode::kWhile);
  ASSERT_EQ(whiles.size(), 1u);
  EXPECT_EQ(whiles[0]->while_body()->name(), "windowed_dot_general_body_ag");
  EXPECT_EQ(whiles[0]->while_condition()->name(), "windowed_dot_general_cond_ag");
  // Tuple (lhs, rhs, out, extra, u32 k).
  const Shape& t = whiles[0]->shape();
  ASSERT_EQ(t.tuple_shapes.size(), 5u);
  EXPECT_EQ(t.tuple_shapes[2].ToString(false), "bf16[8,3]");
  EXPECT_EQ(t.tuple_shapes[3].ToString(false), "bf16[8,3]");
  EXPECT_EQ(t.tuple_shapes[4].ToString(false), "u32[]");
  // Two permutes (unrolled by 2), channel ids above the module's existing 9, all distinct.
  auto permutes = OfOpcode(**m, HloOpcode::kCollectivePermute);
  ASSERT_EQ(permutes.size(), 2u);
  EXPECT_EQ(*permutes[0]->channel_id, 10);
  EXPECT_EQ(*permutes[1]->channel_id, 11);
  EXPECT_EQ(OfOpcode(**m, HloOpcode::kDot).size(), 2u);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].applied);
  EXPECT_EQ(remarks[0].location, "y");

  std::string once = (*m)->ToString();
  remarks.clear();
  auto again = pass.Run(m->get());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ((*m)->ToString(), once);
}

TEST(WindowedEinsumDecomposerTest, ThresholdKeepsSmallGathers) {
  auto m = ParseHloModule(kAg);
  ASSERT_TRUE(m.ok());
  WindowedEinsumDecomposerOptions o;
  o.threshold_mib = 1;
  WindowedEinsumDecomposer pass(o);
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m->get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_FALSE(remarks[0].applied);
  // bf16[8,8] = 128 bytes < 1 MiB.
  EXPECT_THAT(remarks[0].message, HasSubstr("is 128 bytes, below windowed-einsum-threshold-mib=1"));
}

TEST(WindowedEinsumDecomposerTest, OddRingIsRolledWithConditional) {
  const char* text = R"(HloModule ag3, num_partitions=3

ENTRY main {
  x = f32[2,4]{1,0} parameter(0)
  xg = f32[6,4]{1,0} all-gather(x), channel_id=1, replica_groups={{0,1,2}}, dimensions={0}, use_global_device_ids=true
  w = f32[4,5]{1,0} parameter(1)
  ROOT y = f32[6,5]{1,0} dot(xg, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";
  auto m = ParseHloModule(text);
  ASSERT_TRUE(m.ok()) << m.status();
  WindowedEinsumDecomposer pass;
  auto changed = pass.Run(m->get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  auto conds = OfOpcode(**m, HloOpcode::kConditional);
  ASSERT_EQ(conds.size(), 1u);
  EXPECT_TRUE(conds[0]->conditional_is_pred);
  ASSERT_EQ(conds[0]->called_computations().size(), 2u);
  // True branch permutes, false branch passes the window through.
  EXPECT_EQ(conds[0]->called_computations()[0]->root()->opcode(), HloOpcode::kCollectivePermute);
  EXPECT_EQ(conds[0]->called_computations()[1]->root()->opcode(), HloOpcode::kParameter);
  EXPECT_EQ(OfOpcode(**m, HloOpcode::kDot).size(), 1u);
}

constexpr char kBrokenView[] = R"(HloModule views, num_partitions=4

ENTRY main {
  x = bf16[2,3,16]{2,1,0} parameter(0)
  xs = (bf16[2,3,16]{2,1,0}, bf16[2,12,16]{2,1,0}) all-gather-start(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  xg = bf16[2,12,16]{2,1,0} all-gather-done(xs)
  xr = bf16[24,16]{1,0} reshape(xg)
  w = bf16[16,8]{1,0} parameter(1)
  ROOT y = bf16[24,8]{1,0} dot(xr, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})";

// A remark at the dot names the collective it decided on (both halves of an async pair), so that
// the compile report can give the collective that reason and no other pass's.
TEST(WindowedEinsumDecomposerTest, RemarksNameTheCollectiveTheyAreAbout) {
  auto m = ParseHloModule(kBrokenView);
  ASSERT_TRUE(m.ok()) << m.status();
  WindowedEinsumDecomposer pass;
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m->get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].missed());
  EXPECT_EQ(remarks[0].location, "y");
  EXPECT_THAT(remarks[0].about, ::testing::UnorderedElementsAre("xg", "xs"));
  EXPECT_THAT(remarks[0].message, HasSubstr("merges gathered dim 1 (split in 4 blocks) under the "
                                            "more major dim 0 (size 2)"));
}

}  // namespace
}  // namespace weave
