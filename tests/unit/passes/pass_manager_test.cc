#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/cost_oracle.h"
#include "passes/pass.h"

namespace weave {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

std::unique_ptr<HloModule> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "test.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

constexpr char kModule[] = R"(
HloModule pm
ENTRY main {
  a = f32[4] parameter(0)
  dead = f32[4] negate(a)
  ROOT n = f32[4] add(a, a)
}
)";

TEST(PassOptions, UnreadListsKeysNoLookupTouched) {
  PassOptions o;
  o.Set("alpha", "1");
  o.Set("beta", "x");
  o.Set("gamma", "true");
  o.Set("delta", "2.5");
  o.Set("zeta", "z");
  EXPECT_EQ(o.Unread(), (std::vector<std::string>{"alpha", "beta", "delta", "gamma", "zeta"}));
  EXPECT_TRUE(o.GetInt("alpha", 0).ok());
  EXPECT_EQ(o.GetString("beta", ""), "x");
  EXPECT_TRUE(o.GetBool("gamma", false).ok());
  EXPECT_EQ(o.Unread(), (std::vector<std::string>{"delta", "zeta"}));
  EXPECT_TRUE(o.Has("zeta"));
  EXPECT_TRUE(o.GetDouble("delta", 0).ok());
  EXPECT_TRUE(o.Unread().empty());
  // Looking up a key that was never set does not add anything to Unread.
  EXPECT_FALSE(o.Has("never-set"));
  EXPECT_TRUE(o.Unread().empty());
}

TEST(PassOptions, FactoriesMarkTheirOptionsRead) {
  PassOptions o;
  o.Set("dot-merger-threshold-mb", "8");
  o.Set("dot-merger-treshold-mb", "8");  // misspelled: no pass reads it
  HloPassPipeline p;
  ASSERT_TRUE(p.AddPassesByName("dot-merger", o).ok());
  EXPECT_EQ(o.Unread(), (std::vector<std::string>{"dot-merger-treshold-mb"}));
}

TEST(PassOptions, TypedGetters) {
  PassOptions o;
  o.Set("n", "42");
  o.Set("x", "0.5");
  o.Set("on", "true");
  o.Set("off", "0");
  o.Set("bad", "forty");
  EXPECT_EQ(*o.GetInt("n", 1), 42);
  EXPECT_EQ(*o.GetInt("absent", 7), 7);
  EXPECT_DOUBLE_EQ(*o.GetDouble("x", 1), 0.5);
  EXPECT_TRUE(*o.GetBool("on", false));
  EXPECT_FALSE(*o.GetBool("off", true));
  EXPECT_TRUE(*o.GetBool("absent", true));
  EXPECT_EQ(o.GetString("n", ""), "42");
  EXPECT_EQ(o.GetString("absent", "d"), "d");
  absl::StatusOr<int64_t> bad = o.GetInt("bad", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--bad"));
  EXPECT_FALSE(o.GetBool("bad", false).ok());
  EXPECT_FALSE(o.GetDouble("bad", 0).ok());
}

TEST(Remark, Format) {
  Remark applied{"dce", "main", true, "removed 1 dead instruction"};
  EXPECT_EQ(applied.ToString(), "dce: main: [applied] removed 1 dead instruction");
  Remark missed{"cse", "loop", false, "nothing to do"};
  EXPECT_EQ(missed.ToString(), "cse: loop: [missed] nothing to do");
  EXPECT_TRUE(missed.missed());
  Remark note{"windowed-einsum-handler", "loop", false, "recognised: all-gather loop", true};
  EXPECT_EQ(note.ToString(), "windowed-einsum-handler: loop: [analysis] recognised: all-gather loop");
  EXPECT_FALSE(note.missed());
}

TEST(PassRegistry, KnowsTheGenericPasses) {
  std::vector<std::string> names = PassRegistry::Get().Names();
  for (const char* n : {"dce", "cse", "tuple-simplifier", "while-loop-dead-tuple-elements"}) {
    EXPECT_THAT(names, Contains(std::string(n)));
  }
  absl::StatusOr<std::unique_ptr<HloPass>> unknown =
      PassRegistry::Get().Create("no-such-pass", PassOptions());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("dce"));
}

// A pass that breaks the module (changes a shape), to exercise verify-each.
class BreakShapes : public HloPass {
 public:
  std::string_view name() const override { return "break-shapes"; }
  absl::StatusOr<bool> Run(HloModule* module) override {
    module->entry()->root()->set_shape(Shape(PrimitiveType::F32, {5}));
    AddRemark("main", true, "broke it");
    return true;
  }
};

TEST(HloPassPipeline, RunsInOrderWithTimingsAndRemarks) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  HloPassPipeline p;
  ASSERT_TRUE(p.AddPassesByName(" dce , tuple-simplifier,,", PassOptions()).ok());
  EXPECT_EQ(p.pass_count(), 2);
  std::vector<Remark> remarks;
  std::vector<PassTiming> timings;
  p.set_remarks(&remarks);
  p.set_verify_each(true);
  absl::StatusOr<bool> changed = p.Run(m.get(), &timings);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(timings.size(), 2u);
  EXPECT_EQ(timings[0].pass, "dce");
  EXPECT_TRUE(timings[0].changed);
  EXPECT_EQ(timings[1].pass, "tuple-simplifier");
  EXPECT_FALSE(timings[1].changed);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_EQ(remarks[0].pass, "dce");
  EXPECT_EQ(m->entry()->GetInstruction("dead"), nullptr);
  EXPECT_FALSE(p.AddPassesByName("dce,bogus", PassOptions()).ok());
}

TEST(HloPassPipeline, VerifyEachNamesThePass) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  HloPassPipeline p;
  p.AddPass(std::make_unique<BreakShapes>());
  p.set_verify_each(true);
  absl::StatusOr<bool> r = p.Run(m.get());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("after pass break-shapes"));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("instruction 'n'"));

  // Without verify-each the pipeline reports success.
  auto m2 = Parse(kModule);
  HloPassPipeline q;
  q.AddPass(std::make_unique<BreakShapes>());
  EXPECT_TRUE(q.Run(m2.get()).ok());
}

// Records the cost gate it was given when it runs.
class SeesOracle : public HloPass {
 public:
  explicit SeesOracle(CostOracle** seen) : seen_(seen) {}
  std::string_view name() const override { return "sees-oracle"; }
  absl::StatusOr<bool> Run(HloModule*) override {
    *seen_ = cost_oracle();
    AddRemark("main", false, "looked");
    return false;
  }

 private:
  CostOracle** seen_;
};

TEST(HloPassPipeline, IsItselfAPassThatNestsInAnother) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  CostOracle* seen_early = nullptr;
  CostOracle* seen_late = nullptr;
  auto inner = std::make_unique<HloPassPipeline>("inner");
  ASSERT_TRUE(inner->AddPassesByName("dce", PassOptions()).ok());
  inner->AddPass(std::make_unique<SeesOracle>(&seen_early));
  EXPECT_EQ(inner->name(), "inner");
  EXPECT_EQ(inner->pass_names(), (std::vector<std::string>{"dce", "sees-oracle"}));

  HloPassPipeline outer("outer");
  outer.AddPass(std::move(inner));
  FunctionCostOracle oracle([](const CostQuery&) { return std::vector<double>{1, 2}; });
  outer.set_cost_oracle(&oracle);
  // A pass added after the gate was set gets it too.
  outer.AddPass(std::make_unique<SeesOracle>(&seen_late));
  EXPECT_EQ(outer.pass_names(), (std::vector<std::string>{"inner", "sees-oracle"}));

  std::vector<Remark> remarks;
  std::vector<PassTiming> timings;
  outer.set_remarks(&remarks);
  HloPass& as_pass = outer;
  absl::StatusOr<bool> changed = outer.Run(m.get(), &timings);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);  // dce, inside the inner pipeline, removed `dead`
  EXPECT_EQ(m->entry()->GetInstruction("dead"), nullptr);
  EXPECT_EQ(seen_early, &oracle);
  EXPECT_EQ(seen_late, &oracle);
  // The inner pipeline's passes write to the outer pipeline's sink.
  ASSERT_EQ(remarks.size(), 3u);
  EXPECT_EQ(remarks[0].pass, "dce");
  EXPECT_EQ(remarks[1].pass, "sees-oracle");
  EXPECT_EQ(remarks[2].pass, "sees-oracle");
  ASSERT_EQ(timings.size(), 2u);
  EXPECT_EQ(timings[0].pass, "inner");
  EXPECT_TRUE(timings[0].changed);
  // Run through the HloPass interface: nothing left to change.
  absl::StatusOr<bool> again = as_pass.Run(m.get());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(HloPassPipeline, AnInnerPassErrorNamesBothPipelineLevels) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  auto inner = std::make_unique<HloPassPipeline>("inner");
  inner->AddPass(std::make_unique<BreakShapes>());
  inner->set_verify_each(true);
  HloPassPipeline outer("outer");
  outer.AddPass(std::move(inner));
  absl::StatusOr<bool> r = outer.Run(m.get());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("pass inner: verifier failed after pass break-shapes"));
}

}  // namespace
}  // namespace weave
