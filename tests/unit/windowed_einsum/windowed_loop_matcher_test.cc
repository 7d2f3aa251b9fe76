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

// A loop whose lhs circulates through a ring but whose dot reads it through a negate: not the
// all-gather form (the dot does not read the window), and not the reduce-scatter form either (the
// lhs is not passed through). The reason names the all-gather attempt that got furthest.
constexpr char kAlmostAg[] = R"(HloModule almost_ag, num_partitions=2

body {
  state = (f32[2,3], f32[3,4], f32[4,4], f32[4,4], s32[]) parameter(0)
  lhs = f32[2,3] get-tuple-element(state), index=0
  rhs = f32[3,4] get-tuple-element(state), index=1
  out = f32[4,4] get-tuple-element(state), index=2
  extra = f32[4,4] get-tuple-element(state), index=3
  k = s32[] get-tuple-element(state), index=4
  flipped = f32[2,3] negate(lhs)
  part = f32[2,4] dot(flipped, rhs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  zero = s32[] constant(0)
  row = s32[] multiply(k, zero)
  updated = f32[4,4] dynamic-update-slice(out, part, row, zero)
  next = f32[2,3] collective-permute(lhs), channel_id=1, source_target_pairs={{0,1},{1,0}}
  one = s32[] constant(1)
  k1 = s32[] add(k, one)
  ROOT s = (f32[2,3], f32[3,4], f32[4,4], f32[4,4], s32[]) tuple(next, rhs, updated, extra, k1)
}

cond {
  state = (f32[2,3], f32[3,4], f32[4,4], f32[4,4], s32[]) parameter(0)
  k = s32[] get-tuple-element(state), index=4
  two = s32[] constant(2)
  ROOT more = pred[] compare(k, two), direction=LT
}

ENTRY main {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  z = f32[] constant(0)
  o = f32[4,4] broadcast(z), dimensions={}
  k0 = s32[] constant(0)
  init = (f32[2,3], f32[3,4], f32[4,4], f32[4,4], s32[]) tuple(a, b, o, o, k0)
  loop = (f32[2,3], f32[3,4], f32[4,4], f32[4,4], s32[]) while(init), condition=cond, body=body
  ROOT r = f32[4,4] get-tuple-element(loop), index=2
})";

TEST(WindowedLoopMatcher, ReasonIsTheAllGatherAttemptThatGotFurthest) {
  auto m = ParseHloModule(kAlmostAg);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<HloInstruction*> loops = Whiles(m->get());
  ASSERT_EQ(loops.size(), 1u);
  std::string why;
  EXPECT_FALSE(MatchWindowedLoop(loops[0], &why).has_value());
  EXPECT_EQ(why, "dot 'part' does not read the windowed operand 0 through the collective-permute ring");
  // Reading the window directly makes it the all-gather form.
  HloInstruction* part = nullptr;
  for (HloInstruction* i : loops[0]->while_body()->instructions()) {
    if (i->name() == "part") part = i;
  }
  ASSERT_NE(part, nullptr);
  ASSERT_TRUE(part->ReplaceOperandWith(0, part->operand(0)->operand(0)).ok());
  auto L = MatchWindowedLoop(loops[0], &why);
  ASSERT_TRUE(L.has_value()) << why;
  EXPECT_EQ(L->kind, WindowedLoopKind::kAllGather);
  EXPECT_EQ(L->windowed_operand, 0);
  EXPECT_EQ(L->trip_count, 2);
  EXPECT_EQ(L->ring_size, 2);
}

}  // namespace
}  // namespace weave
