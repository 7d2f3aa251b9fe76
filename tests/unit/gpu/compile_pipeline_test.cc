// The compile pipeline as one pass (gpu/compile_pipeline.h).
#include "gpu/compile_pipeline.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

TEST(CompilePipeline, MakesOnePassWithEveryStageInOrder) {
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> p =
      MakeCompilePipeline(CompilePipelinePassNames(), PassOptions());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name(), "compile-pipeline");
  EXPECT_EQ((*p)->pass_names(), CompilePipelinePassNames());
  // Switched off stages are left out, the rest keep their order.
  absl::StatusOr<std::vector<std::string>> some =
      CompilePipelinePassNames({"cleanup", "quantize"}, {"dot-merger"});
  ASSERT_TRUE(some.ok());
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> q = MakeCompilePipeline(*some, PassOptions());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ((*q)->pass_names(), *some);
  EXPECT_EQ((*q)->pass_names().front(), "windowed-einsum-decomposer");
  EXPECT_EQ((*q)->pass_names().back(), "fp8-gemm-rewriter");
}

TEST(CompilePipeline, AnUnknownPassIsNotFoundOrListedAsUnavailable) {
  const std::vector<std::string> names = {"dce", "no-such-pass", "cse"};
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> strict = MakeCompilePipeline(names, {});
  ASSERT_FALSE(strict.ok());
  EXPECT_TRUE(absl::IsNotFound(strict.status())) << strict.status();
  EXPECT_THAT(std::string(strict.status().message()), HasSubstr("no-such-pass: unknown pass"));
  std::vector<std::string> unavailable;
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> lenient =
      MakeCompilePipeline(names, {}, &unavailable);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ((*lenient)->pass_names(), (std::vector<std::string>{"dce", "cse"}));
  EXPECT_EQ(unavailable, (std::vector<std::string>{"no-such-pass"}));
}

TEST(CompilePipeline, AFactoryErrorNamesThePass) {
  PassOptions bad;
  bad.Set("dot-merger-threshold-mb", "lots");
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> p =
      MakeCompilePipeline({"dce", "dot-merger"}, bad);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("dot-merger: "));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("lots"));
}

}  // namespace
}  // namespace weave
