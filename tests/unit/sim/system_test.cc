// System files: built-ins match systems/*.json, datasheet values, overrides, errors.
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "sim/simulator.h"

namespace weave::sim {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SystemTest, BuiltinsAreByteIdenticalToSystemFiles) {
  std::vector<std::string> names = BuiltinSystemNames();
  ASSERT_EQ(names.size(), 3u);
  for (const std::string& name : names) {
    std::optional<std::string_view> embedded = BuiltinSystemJson(name);
    ASSERT_TRUE(embedded.has_value()) << name;
    std::string file = ReadFile(std::string(WEAVE_SOURCE_DIR) + "/systems/" + name + ".json");
    ASSERT_FALSE(file.empty()) << "systems/" << name << ".json missing";
    EXPECT_EQ(std::string(*embedded), file)
        << "src/sim/builtin_systems.cc and systems/" << name << ".json differ";
  }
}

TEST(SystemTest, DatasheetValues) {
  absl::StatusOr<SystemSpec> h100 = LoadSystem("h100x8");
  ASSERT_TRUE(h100.ok()) << h100.status();
  EXPECT_EQ(h100->name, "h100x8");
  EXPECT_DOUBLE_EQ(h100->bf16_tflops, 989);
  EXPECT_DOUBLE_EQ(h100->fp8_tflops, 1979);
  EXPECT_DOUBLE_EQ(h100->hbm_gbps, 3350);
  EXPECT_DOUBLE_EQ(h100->link_gbps, 450);
  EXPECT_EQ(h100->sm_count, 132);
  EXPECT_FALSE(h100->source.empty());
  EXPECT_NE(h100->origin.find("systems/h100x8.json"), std::string::npos);
  // FP8 types run at the fp8 rate, bf16 at the bf16 rate.
  EXPECT_DOUBLE_EQ(h100->MatmulTflops(PrimitiveType::F8E4M3FN), 1979);
  EXPECT_DOUBLE_EQ(h100->MatmulTflops(PrimitiveType::BF16), 989);

  absl::StatusOr<SystemSpec> h200 = LoadSystem("h200x8");
  ASSERT_TRUE(h200.ok()) << h200.status();
  EXPECT_DOUBLE_EQ(h200->hbm_gbps, 4800);
  EXPECT_DOUBLE_EQ(h200->bf16_tflops, h100->bf16_tflops);

  absl::StatusOr<SystemSpec> a100 = LoadSystem("a100x8");
  ASSERT_TRUE(a100.ok()) << a100.status();
  EXPECT_DOUBLE_EQ(a100->bf16_tflops, 312);
  EXPECT_DOUBLE_EQ(a100->link_gbps, 300);
  EXPECT_EQ(a100->sm_count, 108);
  EXPECT_DOUBLE_EQ(a100->fp8_tflops, 0);
  // No FP8 tensor cores: FP8 GEMMs fall back to the f16 rate.
  EXPECT_DOUBLE_EQ(a100->MatmulTflops(PrimitiveType::F8E5M2), a100->f16_tflops);
}

TEST(SystemTest, LoadsFromFileAndReportsErrors) {
  std::string path = ::testing::TempDir() + "/custom_system.json";
  {
    std::ofstream out(path);
    out << R"({"name": "toy", "source": "made up", "sm_count": 10,
               "matmul_tflops": {"bf16": 100}, "hbm_gbps": 1000, "link_gbps": 50})";
  }
  absl::StatusOr<SystemSpec> s = LoadSystem(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "toy");
  EXPECT_EQ(s->origin, path);
  EXPECT_DOUBLE_EQ(s->f16_tflops, 100);  // defaults to bf16
  EXPECT_DOUBLE_EQ(s->link_efficiency, 1);

  EXPECT_EQ(LoadSystem("no_such_system").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseSystemJson("{not json", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status missing = ParseSystemJson(
      R"({"name": "t", "source": "s", "sm_count": 1, "matmul_tflops": {"bf16": 1},
          "link_gbps": 1})", "t.json").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("hbm_gbps"), std::string_view::npos) << missing;
  absl::Status negative = ParseSystemJson(
      R"({"name": "t", "source": "s", "sm_count": 1, "matmul_tflops": {"bf16": -1},
          "hbm_gbps": 1, "link_gbps": 1})", "t.json").status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
}

TEST(SystemTest, OverridesAndOptions) {
  absl::StatusOr<SystemSpec> h100 = LoadSystem("h100x8");
  ASSERT_TRUE(h100.ok());
  absl::StatusOr<SystemSpec> o = OverrideSystemValue(*h100, "matmul_tflops.bf16=900");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->bf16_tflops, 900);
  EXPECT_DOUBLE_EQ(o->fp8_tflops, 1979);
  o = OverrideSystemValue(*o, "gemm.tiled=false");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->gemm.tiled);
  EXPECT_FALSE(OverrideSystemValue(*h100, "no_such_key=1").ok());
  EXPECT_FALSE(OverrideSystemValue(*h100, "hbm_gbps=fast").ok());
  EXPECT_FALSE(OverrideSystemValue(*h100, "hbm_gbps").ok());

  SimOptions opts;
  opts.gemm_efficiency = 0.5;
  opts.latency_us = 0;
  opts.contention = 0.25;
  absl::StatusOr<SystemSpec> applied = ApplySimOptions(*h100, opts);
  ASSERT_TRUE(applied.ok());
  EXPECT_DOUBLE_EQ(applied->gemm.efficiency, 0.5);
  EXPECT_DOUBLE_EQ(applied->latency_us, 0);
  EXPECT_DOUBLE_EQ(applied->contention, 0.25);
  EXPECT_DOUBLE_EQ(applied->link_efficiency, h100->link_efficiency);
  opts.gemm_efficiency = 1.5;
  EXPECT_FALSE(ApplySimOptions(*h100, opts).ok());
  opts.gemm_efficiency.reset();
  opts.latency_us = -1;
  EXPECT_FALSE(ApplySimOptions(*h100, opts).ok());
}

}  // namespace
}  // namespace weave::sim
