// The cost gate's oracle on the simulator (sim/cost_gate.h): region extraction, estimates of the
// variants through the real passes, caching.
#include "sim/cost_gate.h"

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"

namespace weave::sim {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// A dequantized FP8 activation all-gathered for two dots, plus unrelated work.
constexpr char kTwoConsumers[] = R"(HloModule two, num_partitions=8

ENTRY main {
  xq = f8e4m3fn[512,4096] parameter(0)
  sx = bf16[] parameter(1)
  xd.cvt = bf16[512,4096] convert(xq)
  xd.sbc = bf16[512,4096] broadcast(sx), dimensions={}
  xd = bf16[512,4096] multiply(xd.cvt, xd.sbc)
  xg = bf16[4096,4096] all-gather(xd), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  w0 = bf16[4096,2048] parameter(2)
  w1 = bf16[4096,2048] parameter(3)
  y0 = bf16[4096,2048] dot(xg, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y1 = bf16[4096,2048] dot(xg, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  other = bf16[4096,2048] exponential(y1)
  ROOT result = (bf16[4096,2048], bf16[4096,2048], bf16[4096,2048]) tuple(y0, y1, other)
}
)";

std::vector<const HloInstruction*> Seeds(const HloModule& m, std::vector<std::string> names) {
  std::vector<const HloInstruction*> out;
  for (const std::string& n : names) {
    const HloInstruction* i = m.entry()->GetInstruction(n);
    EXPECT_NE(i, nullptr) << n;
    out.push_back(i);
  }
  return out;
}

TEST(ExtractCostRegion, KeepsTheDequantizationAndParameterizesTheRest) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  auto region = ExtractCostRegion(Seeds(*m, {"xg", "y0", "y1"}));
  ASSERT_TRUE(region.ok()) << region.status();
  const HloModule& r = **region;
  EXPECT_EQ(r.num_partitions, 8);
  const HloComputation* e = r.entry();
  // The dequantization chain came along; its FP8 input and scale are parameters.
  EXPECT_NE(e->GetInstruction("xd.cvt"), nullptr);
  EXPECT_NE(e->GetInstruction("xd"), nullptr);
  ASSERT_NE(e->GetInstruction("xq"), nullptr);
  EXPECT_EQ(e->GetInstruction("xq")->opcode(), HloOpcode::kParameter);
  EXPECT_EQ(e->GetInstruction("xq")->shape().element_type, PrimitiveType::F8E4M3FN);
  EXPECT_EQ(e->GetInstruction("w0")->opcode(), HloOpcode::kParameter);
  // Work outside the candidate is not in the region.
  EXPECT_EQ(e->GetInstruction("other"), nullptr);
  EXPECT_EQ(e->GetInstruction("result"), nullptr);
  ASSERT_EQ(e->root()->opcode(), HloOpcode::kTuple);
  EXPECT_EQ(e->root()->operand_count(), 2);
  EXPECT_EQ(e->num_parameters(), 4);  // xq, sx, w0, w1
}

TEST(ExtractCostRegion, Errors) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(ExtractCostRegion({}).ok());
  auto other = Parse(R"(HloModule o
ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
})");
  auto mixed = ExtractCostRegion({m->entry()->GetInstruction("xg"),
                                  other->entry()->GetInstruction("n")});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("one computation"), std::string::npos);
}

TEST(CanonicalRegionText, IgnoresNames) {
  auto a = Parse(kTwoConsumers);
  std::string renamed = kTwoConsumers;
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"y0", "q_proj"}, {"xg", "gathered"}}) {
    size_t p;
    while ((p = renamed.find(from + " ")) != std::string::npos ||
           (p = renamed.find(from + ",")) != std::string::npos ||
           (p = renamed.find(from + ")")) != std::string::npos) {
      renamed.replace(p, from.size(), to);
    }
  }
  auto b = Parse(renamed);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ra = ExtractCostRegion(Seeds(*a, {"xg", "y0", "y1"}));
  auto rb = ExtractCostRegion(Seeds(*b, {"gathered", "q_proj", "y1"}));
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(CanonicalRegionText(**ra), CanonicalRegionText(**rb));
}

CostGateConfig Config(const std::string& system) {
  CostGateConfig c;
  auto s = LoadSystem(system);
  EXPECT_TRUE(s.ok());
  c.system = *s;
  c.pipeline = {"windowed-einsum-decomposer", "windowed-einsum-handler", "collective-quantizer",
                "fp8-gemm-rewriter", "dce"};
  return c;
}

TEST(SimCostOracle, EstimatesBothVariantsThroughThePipeline) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  SimCostOracle oracle(Config("h100x8"));
  CostQuery q = CostQuery::WithOrWithout("windowed-einsum-decomposer", "y0", "all-gather 'xg'",
                                         Seeds(*m, {"xg", "y0", "y1"}));
  CostEstimate e = oracle.Decide(q);
  ASSERT_TRUE(e.ok()) << e.error;
  ASSERT_EQ(e.us.size(), 2u);
  EXPECT_GT(e.us[0], 0);
  EXPECT_GT(e.us[1], 0);
  // The rewrite changes the estimate (a loop is simulated, not the plain all-gather).
  EXPECT_NE(e.us[0], e.us[1]);
  EXPECT_EQ(e.system, "h100x8");
  EXPECT_EQ(oracle.decisions().size(), 1u);
  // The same region again is answered from the cache with the same figures.
  CostEstimate again = oracle.Decide(q);
  EXPECT_EQ(again.us, e.us);
  // The "without" figure is the plain region's simulated time after the later passes (the
  // collective-quantizer moves the unannotated, hence replicated, scale after the all-gather).
  auto region = ExtractCostRegion(q.seeds);
  ASSERT_TRUE(region.ok());
  HloPassPipeline later;
  ASSERT_TRUE(later
                  .AddPassesByName("windowed-einsum-handler,collective-quantizer,"
                                   "fp8-gemm-rewriter,dce",
                                   PassOptions())
                  .ok());
  ASSERT_TRUE(later.Run(region->get()).ok());
  auto plain = SimulateModule(**region, Config("h100x8").system, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_NEAR(e.us[0], plain->total_us, 1e-9 + 1e-6 * plain->total_us);
}

TEST(SimCostOracle, AnUnknownPassIsAnErrorNotACrash) {
  auto m = Parse(kTwoConsumers);
  SimCostOracle oracle(Config("h100x8"));
  CostQuery q = CostQuery::WithOrWithout("no-such-pass", "y0", "", Seeds(*m, {"xg", "y0"}));
  CostEstimate e = oracle.Decide(q);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.chosen, 1);
}

}  // namespace
}  // namespace weave::sim
