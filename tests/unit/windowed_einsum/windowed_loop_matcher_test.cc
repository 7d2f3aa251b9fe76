// Unit tests of the windowed loop matcher's additions for compiled modules and decomposer layouts
// (windowed_einsum/windowed_loop.h): loops whose dots became FP8 GEMM custom calls (opt-in), reduce-scatter
// loops over a batch dim (both operands sliced), and XLA's unrolled reduce-scatter loop on a ring
// of 2 (identity permutes).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "windowed_einsum/windowed_loop.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "shared_files.h"
#include "passes/pass.h"

namespace weave {
namespace {

std::unique_ptr<HloModule> Load(const std::string& example) {
  auto m = ParseHloModuleFile(weave::testfiles::SharedPath("examples/" + example));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

void RunPasses(HloModule* m, const std::string& names) {
  HloPassPipeline p;
  PassOptions o;
  ASSERT_TRUE(p.AddPassesByName(names, o).ok());
  auto r = p.Run(m);
  ASSERT_TRUE(r.ok()) << r.status();
}

std::vector<HloInstruction*> Whiles(HloModule* m) {
  std::vector<HloInstruction*> out;
  for (HloComputation* c : m->computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->opcode() == HloOpcode::kWhile) out.push_back(i);
    }
  }
  return out;
}

TEST(WindowedLoopMatcher, GemmCustomCallsAreDotsWhenAsked) {
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  for (const char* example : {"plain_ag_fp8_two_consumers.hlo", "plain_rs_fp8.hlo"}) {
    SCOPED_TRACE(example);
    auto m = Load(example);
    ASSERT_NE(m, nullptr);
    RunPasses(m.get(), "windowed-einsum-decomposer,windowed-einsum-handler,fp8-gemm-rewriter");
    std::vector<HloInstruction*> loops = Whiles(m.get());
    ASSERT_EQ(loops.size(), 1u);
    std::string why;
    // Default: the handler's view, dots only (the body has none left).
    EXPECT_FALSE(MatchWindowedLoop(loops[0], &why).has_value());
    EXPECT_THAT(why, ::testing::HasSubstr("no dot"));
    auto L = MatchWindowedLoop(loops[0], &why, WindowedLoopMatchOptions{true});
    ASSERT_TRUE(L.has_value()) << why;
    EXPECT_EQ(L->layout, WindowedLoopLayout::kFullyUnrolled);
    EXPECT_EQ(L->ring_size, 4);
    ASSERT_EQ(L->dots.size(), 4u);
    for (const WindowedDot& d : L->dots) {
      EXPECT_EQ(d.dot->opcode(), HloOpcode::kCustomCall);
      ASSERT_NE(d.merge, nullptr);
      // A reduce-scatter step's accumulate is folded into its GEMM as C (beta = 1), so the
      // call itself merges; an all-gather step still writes through dynamic-update-slice.
      EXPECT_TRUE(d.merge->opcode() == HloOpcode::kDynamicUpdateSlice ||
                  d.merge->opcode() == HloOpcode::kAdd || d.merge == d.dot);
    }
  }
}

constexpr char kRsBatch[] = R"(HloModule rsb, num_partitions=2

sum {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}

ENTRY main {
  x = bf16[4,3,2]{2,1,0} parameter(0)
  w = bf16[4,2,5]{2,1,0} parameter(1)
  partial = bf16[4,3,5]{2,1,0} dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT y = bf16[2,3,5]{2,1,0} reduce-scatter(partial), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true, to_apply=sum
})";

TEST(WindowedLoopMatcher, ReduceScatterOverBatchDimSlicesBothOperands) {
  auto m = ParseHloModule(kRsBatch);
  ASSERT_TRUE(m.ok()) << m.status();
  RunPasses(m->get(), "windowed-einsum-decomposer");
  std::vector<HloInstruction*> loops = Whiles(m->get());
  ASSERT_EQ(loops.size(), 1u);
  std::string why;
  auto L = MatchWindowedLoop(loops[0], &why);
  ASSERT_TRUE(L.has_value()) << why;
  EXPECT_EQ(L->kind, WindowedLoopKind::kReduceScatter);
  EXPECT_TRUE(L->rs_both_sliced);
  EXPECT_FALSE(L->identity_permutes);
  EXPECT_EQ(L->ring_size, 2);
  for (const WindowedDot& d : L->dots) EXPECT_NE(d.other_slice, nullptr);
}

}  // namespace
}  // namespace weave
