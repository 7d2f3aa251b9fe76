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
  ASSERT_EQ(names, (std::vector<std::string>{"a100x8", "a800x8", "b200x8", "h100x8", "h200x8", "h800x8"}));
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

namespace weave::sim {
namespace {

// Every constant of a built-in system names its source: each numeric field (and the engine) of
// the file has an entry in "sources" (matmul_tflops, contention and the GEMM tile as one entry
// each).
TEST(SystemTest, EveryBuiltinConstantNamesItsSource) {
  for (const std::string& name : BuiltinSystemNames()) {
    absl::StatusOr<SystemSpec> s = LoadSystem(name);
    ASSERT_TRUE(s.ok()) << s.status();
    for (const char* key : {"num_gpus", "sm_count", "matmul_tflops", "hbm_gbps",
                            "hbm_efficiency", "link_gbps", "link_efficiency", "latency_us",
                            "collective_engine", "contention", "gemm.efficiency", "gemm.tile",
                            "gemm.overhead_us"}) {
      auto it = s->sources.find(key);
      ASSERT_NE(it, s->sources.end()) << name << ": no source for " << key;
      EXPECT_GT(it->second.size(), 20u) << name << ": " << key;
    }
  }
}

TEST(SystemTest, CalibrationHardware) {
  absl::StatusOr<SystemSpec> h800 = LoadSystem("h800x8");
  absl::StatusOr<SystemSpec> h100 = LoadSystem("h100x8");
  absl::StatusOr<SystemSpec> a800 = LoadSystem("a800x8");
  absl::StatusOr<SystemSpec> a100 = LoadSystem("a100x8");
  ASSERT_TRUE(h800.ok() && h100.ok() && a800.ok() && a100.ok());
  // NVLink 200 GB/s per direction; compute and HBM as H100 / A100.
  EXPECT_DOUBLE_EQ(h800->link_gbps, 200);
  EXPECT_DOUBLE_EQ(a800->link_gbps, 200);
  EXPECT_DOUBLE_EQ(h800->bf16_tflops, h100->bf16_tflops);
  EXPECT_DOUBLE_EQ(h800->fp8_tflops, h100->fp8_tflops);
  EXPECT_DOUBLE_EQ(h800->hbm_gbps, h100->hbm_gbps);
  EXPECT_EQ(h800->sm_count, h100->sm_count);
  EXPECT_DOUBLE_EQ(a800->bf16_tflops, a100->bf16_tflops);
  EXPECT_DOUBLE_EQ(a800->hbm_gbps, a100->hbm_gbps);
  EXPECT_EQ(a800->sm_count, a100->sm_count);
  EXPECT_DOUBLE_EQ(a800->fp8_tflops, 0);
}

TEST(SystemTest, ContentionDependsOnTheCollectiveEngine) {
  absl::StatusOr<SystemSpec> h100 = LoadSystem("h100x8");
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->collective_engine, "sm");  // XLA's collectives are NCCL kernels
  EXPECT_DOUBLE_EQ(h100->contention, h100->contention_sm);
  EXPECT_GT(h100->contention_sm, h100->contention_copy_engine);
  absl::StatusOr<SystemSpec> ce = OverrideSystemValue(*h100, "collective_engine=copy_engine");
  ASSERT_TRUE(ce.ok()) << ce.status();
  EXPECT_DOUBLE_EQ(ce->contention, h100->contention_copy_engine);
  absl::StatusOr<SystemSpec> sm = OverrideSystemValue(*h100, "contention.sm=0.25");
  ASSERT_TRUE(sm.ok()) << sm.status();
  EXPECT_DOUBLE_EQ(sm->contention, 0.25);
  EXPECT_FALSE(OverrideSystemValue(*h100, "collective_engine=dma").ok());
  // One number for both engines (older files).
  absl::StatusOr<SystemSpec> one = ParseSystemJson(
      R"({"name": "x", "source": "test", "sm_count": 1, "matmul_tflops": {"bf16": 1},
          "hbm_gbps": 1, "link_gbps": 1, "contention": 0.4, "collective_engine": "copy_engine"})",
      "test");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(one->contention, 0.4);
  EXPECT_FALSE(ParseSystemJson(
      R"({"name": "x", "source": "test", "sm_count": 1, "matmul_tflops": {"bf16": 1},
          "hbm_gbps": 1, "link_gbps": 1, "contention": {"nvlink": 0.4}})", "test").ok());
}

}  // namespace
}  // namespace weave::sim
