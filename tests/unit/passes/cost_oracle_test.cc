// The cost gate's interface (passes/cost_oracle.h): choosing, ties, fallbacks, the remark note.
#include "passes/cost_oracle.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave {
namespace {

std::unique_ptr<HloModule> TinyModule() {
  auto m = ParseHloModule(R"(HloModule t
ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
})");
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

CostQuery Query(const HloModule& m) {
  return CostQuery::WithOrWithout("some-pass", "n", "negate 'n'",
                                  {m.entry()->GetInstruction("n")});
}

TEST(CostOracle, ChoosesTheFasterVariantAndRecordsIt) {
  auto m = TinyModule();
  FunctionCostOracle faster([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{41.25, 33.0};
  }, "h100x8");
  CostEstimate e = faster.Decide(Query(*m));
  EXPECT_TRUE(e.ok());
  EXPECT_EQ(e.chosen, 1);
  EXPECT_EQ(e.Note(), "predicted 33.0 us with the loop vs 41.2 us without on h100x8");
  ASSERT_EQ(faster.decisions().size(), 1u);
  EXPECT_EQ(faster.decisions()[0].pass, "some-pass");
  EXPECT_EQ(faster.decisions()[0].location, "n");
  EXPECT_EQ(faster.decisions()[0].estimate.us.size(), 2u);

  FunctionCostOracle slower([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{33.0, 41.2};
  }, "h100x8");
  e = slower.Decide(Query(*m));
  EXPECT_EQ(e.chosen, 0);
  EXPECT_EQ(e.Note(), "predicted 41.2 us with the loop vs 33.0 us without on h100x8");
}

TEST(CostOracle, TiesKeepTheBaseline) {
  auto m = TinyModule();
  FunctionCostOracle tie([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{10.0, 10.0, 10.0};
  });
  CostQuery q = Query(*m);
  q.variants.push_back({"with 4 chunks", true, {{"chunks", "4"}}});
  CostEstimate e = tie.Decide(q);
  EXPECT_EQ(e.chosen, 0);
  EXPECT_EQ(e.Note(), "predicted 10.0 us with the loop, 10.0 us with 4 chunks vs 10.0 us without on test");
}

// A rewrite replaces the baseline only when it saves max(0.5% of the baseline, 0.5 us): a gain
// inside the margin keeps the baseline and says so; a rewrite that saves the margin is taken.
TEST(CostOracle, MarginKeepsTheBaselineOnSmallGains) {
  auto m = TinyModule();
  for (const auto& [base, with, chosen] : std::vector<std::tuple<double, double, int>>{
           {1000.0, 996.0, 0},   // 0.4% saved, under 0.5%
           {1000.0, 995.0, 1},   // exactly 0.5%
           {20.0, 19.7, 0},      // 1.5% but 0.3 us, under 0.5 us
           {20.0, 19.5, 1},      // 0.5 us
           {20.005, 20.00504, 0},  // a rounding-level difference either way
           {20.00504, 20.005, 0}}) {
    FunctionCostOracle o([base = base, with = with](const CostQuery&)
                             -> absl::StatusOr<std::vector<double>> {
      return std::vector<double>{base, with};
    }, "h100x8");
    CostEstimate e = o.Decide(Query(*m));
    EXPECT_EQ(e.chosen, chosen) << base << " vs " << with;
    if (chosen == 0 && with < base) {
      EXPECT_NE(e.Note().find("; a gain under the gate's margin of"), std::string::npos)
          << e.Note();
    } else {
      EXPECT_EQ(e.Note().find("margin"), std::string::npos) << e.Note();
    }
  }
  FunctionCostOracle exact([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{100.0, 99.9};
  });
  exact.set_margin({0.0, 0.0});
  EXPECT_EQ(exact.Decide(Query(*m)).chosen, 1);
  EXPECT_DOUBLE_EQ(kDefaultDecisionMargin.For(1000.0), 5.0);
  EXPECT_DOUBLE_EQ(kDefaultDecisionMargin.For(10.0), 0.5);
}

TEST(CostOracle, ThreeVariantsPickTheMinimum) {
  auto m = TinyModule();
  FunctionCostOracle o([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{10.0, 9.0, 7.5};
  });
  CostQuery q = Query(*m);
  q.variants.push_back({"with 4 chunks", true, {{"chunks", "4"}}});
  EXPECT_EQ(o.Decide(q).chosen, 2);
}

TEST(CostOracle, ErrorsFallBack) {
  auto m = TinyModule();
  FunctionCostOracle broken([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return absl::InvalidArgumentError("region does not parse");
  });
  CostEstimate e = broken.Decide(Query(*m));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.chosen, 1);  // the default fallback: the last variant (the rewrite)
  EXPECT_TRUE(e.us.empty());
  EXPECT_EQ(e.Note(), "no estimate (region does not parse); applied as without the cost gate");
  CostQuery q = Query(*m);
  q.fallback = 0;
  e = broken.Decide(q);
  EXPECT_EQ(e.chosen, 0);
  EXPECT_EQ(e.Note(), "no estimate (region does not parse); left as without the cost gate");
  EXPECT_EQ(broken.decisions().size(), 2u);

  FunctionCostOracle wrong_count([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return std::vector<double>{1.0};
  });
  e = wrong_count.Decide(Query(*m));
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.chosen, 1);

  CostQuery no_seeds = Query(*m);
  no_seeds.seeds.clear();
  EXPECT_FALSE(wrong_count.Decide(no_seeds).ok());
  CostQuery one_variant = Query(*m);
  one_variant.variants.resize(1);
  e = wrong_count.Decide(one_variant);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.chosen, 0);
}

}  // namespace
}  // namespace weave
