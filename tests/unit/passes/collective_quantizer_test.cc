// Unit tests of collective-quantizer (pass-level behaviour; numerics are checked by
// tests/lit/collective-quantizer.hlo with `weave compare`).
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

// `scale` is the text of the scale instruction(s), ending with one named `s`.
std::string AllGatherModule(const std::string& scale) {
  return R"(HloModule cq, num_partitions=2
ENTRY main {
  x8 = f8e5m2[4,8]{1,0} parameter(0)
)" + scale + R"(
  x.w = f32[4,8]{1,0} convert(x8)
  x.s = f32[4,8]{1,0} broadcast(s), dimensions={}
  x.dq = f32[4,8]{1,0} divide(x.w, x.s)
  x.bc = f32[4,8]{1,0} bitcast(x.dq)
  ROOT ag = f32[8,8]{1,0} all-gather(x.bc), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
}
)";
}

TEST(CollectiveQuantizer, MovesDequantizationPastAllGather) {
  auto m = Parse(AllGatherModule("  s = f32[] constant(0.25)"));
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "collective-quantizer");
  EXPECT_TRUE(r.changed);
  const HloInstruction* root = m->entry()->root();
  ASSERT_EQ(root->opcode(), HloOpcode::kDivide);
  const HloInstruction* cvt = root->operand(0);
  ASSERT_EQ(cvt->opcode(), HloOpcode::kConvert);
  const HloInstruction* ag = cvt->operand(0);
  ASSERT_EQ(ag->opcode(), HloOpcode::kAllGather);
  EXPECT_EQ(ag->shape().element_type, PrimitiveType::F8E5M2);
  EXPECT_EQ(ag->shape().dims, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(ag->channel_id, std::optional<int64_t>(1));
  ASSERT_EQ(ag->operand(0)->opcode(), HloOpcode::kBitcast);
  EXPECT_EQ(ag->operand(0)->shape().element_type, PrimitiveType::F8E5M2);
  // Exactly one all-gather is left, and a second run changes nothing.
  EXPECT_EQ(Count(*m, HloOpcode::kAllGather), 1);
  EXPECT_FALSE(RunPass(m.get(), "collective-quantizer").changed);
}

TEST(CollectiveQuantizer, ScaleFromPartitionIdStays) {
  auto m = Parse(AllGatherModule(R"(  pid = u32[] partition-id()
  s = f32[] convert(pid))"));
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "collective-quantizer");
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(m->entry()->root()->shape().element_type, PrimitiveType::F32);
  ASSERT_EQ(r.remarks.size(), 1u);
  EXPECT_FALSE(r.remarks[0].applied);
  EXPECT_THAT(r.remarks[0].message, testing::HasSubstr("not proven the same on every partition"));
}

}  // namespace
}  // namespace weave
