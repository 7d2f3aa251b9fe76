// Unit tests of dot-merger (pass-level behaviour; numerics are checked by tests/lit/dot-merger.hlo).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"
#include "pass_test_util.h"

namespace weave {
namespace {

using testing_util::Count;
using testing_util::PassRun;
using testing_util::Parse;
using testing_util::RunPass;

constexpr char kMergeModule[] = R"(HloModule dm
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  a = f32[16,4]{1,0} parameter(1)
  b = f32[16,12]{1,0} parameter(2)
  q = f8e4m3fn[16,4]{1,0} parameter(3)
  q.w = f32[16,4]{1,0} convert(q)
  d0 = f32[8,4]{1,0} dot(x, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,12]{1,0} dot(x, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[8,4]{1,0} dot(x, q.w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,4]{1,0}, f32[8,12]{1,0}, f32[8,4]{1,0}) tuple(d0, d1, d2)
}
)";

TEST(DotMerger, MergesPlainDotsButNotFp8) {
  auto m = Parse(kMergeModule);
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_TRUE(r.changed);
  // d0 and d1 -> one dot over concatenate(a, b); d2 (unscaled FP8 rhs) stays.
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
  EXPECT_EQ(Count(*m, HloOpcode::kConcatenate), 1);
  EXPECT_EQ(Count(*m, HloOpcode::kSlice), 2);
  const HloInstruction* root = m->entry()->root();
  EXPECT_EQ(root->operand(2)->name(), "d2");
  ASSERT_EQ(root->operand(0)->opcode(), HloOpcode::kSlice);
  const HloInstruction* merged = root->operand(0)->operand(0);
  EXPECT_EQ(merged->shape().dims, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(root->operand(1)->slice[1].start, 4);
  EXPECT_EQ(root->operand(1)->slice[1].limit, 16);
  bool refused_fp8 = false;
  for (const Remark& rm : r.remarks) {
    refused_fp8 |= rm.location == "d2" && !rm.applied &&
                   rm.message.find("derives from FP8") != std::string::npos;
  }
  EXPECT_TRUE(refused_fp8);
}

TEST(DotMerger, ThresholdOption) {
  auto m = Parse(kMergeModule);
  ASSERT_NE(m, nullptr);
  PassOptions opts;
  opts.Set("dot-merger-threshold-mb", "0");
  EXPECT_FALSE(RunPass(m.get(), "dot-merger", opts).changed);
  PassOptions bad;
  bad.Set("dot-merger-threshold-mb", "-1");
  EXPECT_FALSE(PassRegistry::Get().Create("dot-merger", bad).ok());
}

}  // namespace
}  // namespace weave
