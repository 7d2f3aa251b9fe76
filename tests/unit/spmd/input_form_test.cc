// Input-form detection: every shared example and real dump gets the right form; the forms of
// small modules that tell (or do not tell) which they are; the partition count.
#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "spmd/input_form.h"
#include "spmd/partition_pipeline.h"
#include "shared_files.h"

namespace weave::spmd {
namespace {

namespace fs = std::filesystem;

InputFormReport Detect(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? DetectInputForm(**m) : InputFormReport();
}

TEST(InputFormTest, SharedModulesGetTheRightForm) {
  WEAVE_SKIP_WITHOUT_SHARED("real");
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  const std::map<std::string, InputForm> expected = {
      {"real/dlrm_keras_jax_f32_test_step.hlo", InputForm::kSingleDevice},
      {"real/hlo_llama31_70b_fp8_16x8.hlo", InputForm::kPartitioned},
      {"real/hlo_llama3_8b_cp_bf16_1x4.hlo", InputForm::kPartitioned},
      {"real/layer_norm_1x4096x768_bf16.hlo", InputForm::kSingleDevice},
      {"real/mha_block_1x12x128x64_bf16.hlo", InputForm::kSingleDevice},
      {"real/nv_maxtext_deepseek_1n4g_jit_train_step_before_optimization.hlo", InputForm::kGlobal},
  };
  const fs::path shared(weave::testfiles::SharedDir());
  int checked = 0;
  for (const char* dir : {"real", "examples"}) {
    for (const auto& e : fs::directory_iterator(shared / dir)) {
      if (e.path().extension() != ".hlo") continue;
      const std::string key = std::string(dir) + "/" + e.path().filename().string();
      auto m = ParseHloModuleFile(e.path().string());
      ASSERT_TRUE(m.ok()) << key << ": " << m.status().message();
      const InputFormReport r = DetectInputForm(**m);
      // Every shared example is a partitioned module (windowed loops or plain collectives).
      const InputForm want = std::string(dir) == "examples" ? InputForm::kPartitioned
                             : expected.count(key)          ? expected.at(key)
                                                            : InputForm::kAmbiguous;
      EXPECT_EQ(r.form, want) << key << ": " << r.Describe();
      ++checked;
    }
  }
  EXPECT_GE(checked, 13);
}

// The project's calibration modules are partitioned: plain collectives + dots (*_base) and
// windowed loops (*_decomposed), in every clone.
TEST(InputFormTest, CalibrationModulesArePartitioned) {
  int checked = 0;
  for (const auto& e : fs::directory_iterator(weave::testfiles::SourcePath("tests/calibration"))) {
    if (e.path().extension() != ".hlo") continue;
    auto m = ParseHloModuleFile(e.path().string());
    ASSERT_TRUE(m.ok()) << e.path() << ": " << m.status().message();
    const InputFormReport r = DetectInputForm(**m);
    EXPECT_EQ(r.form, InputForm::kPartitioned) << e.path() << ": " << r.Describe();
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

TEST(InputFormTest, DeepSeekPartitionCount) {
  const std::string rel = "real/nv_maxtext_deepseek_1n4g_jit_train_step_before_optimization.hlo";
  WEAVE_SKIP_WITHOUT_SHARED(rel);
  auto m = ParseHloModuleFile(weave::testfiles::SharedPath(rel));
  ASSERT_TRUE(m.ok());
  const InputFormReport r = DetectInputForm(**m);
  EXPECT_EQ(r.num_partitions, 4);
  EXPECT_NE(r.Describe().find("`Sharding` custom call"), std::string::npos) << r.Describe();
}

TEST(InputFormTest, ParameterShardingsProveNothing) {
  const std::string params_only = R"(HloModule m, num_partitions=4
ENTRY e {
  x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT y = f32[8,8] negate(x)
})";
  const InputFormReport r = Detect(params_only);
  EXPECT_EQ(r.form, InputForm::kAmbiguous);
  EXPECT_NE(r.Describe().find("--input-form=global|partitioned"), std::string::npos);
  // With allow_spmd_sharding_propagation_to_parameters the module is global.
  const std::string allowed = R"(HloModule m, allow_spmd_sharding_propagation_to_parameters={true}, num_partitions=4
ENTRY e {
  x = f32[8,8] parameter(0), sharding={devices=[4,1]<=[4]}
  ROOT y = f32[8,8] negate(x)
})";
  EXPECT_EQ(Detect(allowed).form, InputForm::kGlobal);
}

TEST(InputFormTest, EvidenceBothWaysAndManualRegions) {
  // An annotation on an intermediate: global. A cross-partition all-reduce too: both.
  const std::string both = R"(HloModule m, num_partitions=2
add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[8] parameter(0)
  n = f32[8] negate(x), sharding={devices=[2]<=[2]}
  ROOT r = f32[8] all-reduce(n), channel_id=1, replica_groups={{0,1}}, to_apply=add
})";
  EXPECT_EQ(Detect(both).form, InputForm::kAmbiguous);
  // A cross-replica all-reduce (no channel_id) is no partitioning evidence.
  const std::string cross_replica = R"(HloModule m, num_partitions=2
add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[8] parameter(0)
  n = f32[8] negate(x), sharding={devices=[2]<=[2]}
  ROOT r = f32[8] all-reduce(n), replica_groups={}, to_apply=add
})";
  EXPECT_EQ(Detect(cross_replica).form, InputForm::kGlobal);
  // The user's collective inside a manual region (E8b) does not count.
  const std::string manual = R"(HloModule m, num_partitions=4
add { a = f32[] parameter(0) b = f32[] parameter(1) ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[16,64] parameter(0), sharding={devices=[4,1]<=[4]}
  s = f32[16,64] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  f = f32[4,64] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  m = f32[4,64] multiply(f, f), sharding={manual}
  r = f32[4,64] all-reduce(m), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=add, sharding={manual}
  s2 = f32[4,64] custom-call(r), custom_call_target="Sharding", sharding={manual}
  ROOT g = f32[16,64] custom-call(s2), custom_call_target="SPMDShardToFullShape", sharding={devices=[4,1]<=[4]}
})";
  EXPECT_EQ(Detect(manual).form, InputForm::kGlobal);
  const std::string plain = R"(HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  ROOT y = f32[8] negate(x)
})";
  EXPECT_EQ(Detect(plain).form, InputForm::kSingleDevice);
}

TEST(InputFormTest, InfersThePartitionCount) {
  // No num_partitions: the shardings' device set (0..7) gives 8.
  const std::string g = R"(HloModule m
ENTRY e {
  x = f32[16] parameter(0), sharding={devices=[8]<=[8]}
  n = f32[16] negate(x), sharding={devices=[8]<=[8]}
  ROOT y = f32[16] copy(n), sharding={devices=[2,4]<=[8] last_tile_dim_replicate}
})";
  auto m = ParseHloModule(g, "g");
  ASSERT_TRUE(m.ok());
  const InputFormReport r = DetectInputForm(**m);
  EXPECT_EQ(r.form, InputForm::kGlobal);
  EXPECT_EQ(r.num_partitions, 8);
  EXPECT_EQ(*ResolvePartitionCount(**m, r, 0), 8);
  EXPECT_EQ(*ResolvePartitionCount(**m, r, 16), 16);
  // A header count wins; a contradicting request is an error.
  auto h = ParseHloModule("HloModule m, num_partitions=4\nENTRY e { ROOT x = f32[8] parameter(0) }", "h");
  ASSERT_TRUE(h.ok());
  const InputFormReport rh = DetectInputForm(**h);
  EXPECT_EQ(*ResolvePartitionCount(**h, rh, 0), 4);
  EXPECT_FALSE(ResolvePartitionCount(**h, rh, 8).ok());
}

}  // namespace
}  // namespace weave::spmd
