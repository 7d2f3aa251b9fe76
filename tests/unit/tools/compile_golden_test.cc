// `weave compile`'s output on generated layer stacks (tools/layer_stack_module.h), byte for byte
// against golden files written by the compiler before the speed work of issue 19 (main at
// fca3a0b): making passes faster must not change what they emit.
//
// The pipeline options are pinned (--cost-gate=off: every match is rewritten, so the output does
// not move when the performance model is recalibrated), except in the gated case, which pins the
// gate's decisions on Llama-sized layers and moves with a recalibration. A change that is *meant*
// to alter the output regenerates the files: WEAVE_UPDATE_GOLDEN=1
// build/tests/unit/weave_tools_tests --gtest_filter='CompileGolden*' (then review the diff like
// code; WEAVE_GOLDEN_BINARY=OTHER/weave writes them with another build's compiler).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tools/layer_stack_module.h"

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct GoldenCase {
  const char* name;       // golden file stem under tests/unit/tools/golden/
  int64_t layers;
  int64_t partitions;
  const char* options;    // extra `weave compile` flags
  // Llama 3.1 8B's widths (LayerStackSize::Llama8B) with the cost gate on: the size where the
  // performance model decides each loop, so the case pins the gate's decisions as well.
  bool gated = false;
};

class CompileGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CompileGolden, OutputUnchanged) {
  const GoldenCase& c = GetParam();
  // The small default (16 tokens, width 64, MLP 128), or Llama 3.1 8B's widths for the gate.
  weave::tools::LayerStackSize z =
      c.gated ? weave::tools::LayerStackSize::Llama8B() : weave::tools::LayerStackSize();
  z.partitions = c.partitions;
  const fs::path dir = fs::temp_directory_path() /
                       ("weave_compile_golden_" + std::to_string(::getpid()) + "_" + c.name);
  fs::create_directories(dir);
  const fs::path in = dir / "in.hlo", out = dir / "out.hlo";
  {
    std::ofstream f(in);
    f << weave::tools::LayerStackModuleText(c.layers, z, /*fp8_every=*/2);
  }
  // WEAVE_GOLDEN_BINARY: another build's `weave` (with WEAVE_UPDATE_GOLDEN=1, to write the
  // golden files with the compiler from before a speed change).
  const char* binary = std::getenv("WEAVE_GOLDEN_BINARY");
  const std::string cmd = std::string("'") + (binary ? binary : WEAVE_BINARY) + "' compile '" +
                          in.string() + "' -o '" + out.string() + "' -q " +
                          (c.gated ? "" : "--cost-gate=off ") + c.options + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string log;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) log.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << log;
  const std::string got = ReadFile(out);
  const fs::path golden =
      fs::path(WEAVE_SOURCE_DIR) / "tests/unit/tools/golden" / (std::string(c.name) + ".hlo");
  if (const char* u = std::getenv("WEAVE_UPDATE_GOLDEN"); u != nullptr && std::string(u) == "1") {
    std::ofstream(golden, std::ios::binary) << got;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden;
  const std::string want = ReadFile(golden);
  // Not EXPECT_EQ on the texts (100 KB each): the first differing line says enough.
  if (got != want) {
    std::istringstream a(want), b(got);
    std::string la, lb;
    int line = 1;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
    ADD_FAILURE() << "compiled output differs from " << golden << " at line " << line
                  << "\n  golden: " << la << "\n  now:    " << lb
                  << "\n(sizes " << want.size() << " vs " << got.size() << " bytes)";
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Two layers (one FP8, one bf16) on 4 partitions with the default pipeline (unrolled loops,
// caches, FP8 GEMMs); rolled loops; 8 partitions with one loop per dot; six Llama-sized layers
// through the cost gate.
INSTANTIATE_TEST_SUITE_P(
    LayerStacks, CompileGolden,
    ::testing::Values(GoldenCase{"layer_stack_2l_4p", 2, 4, ""},
                      GoldenCase{"layer_stack_2l_4p_rolled", 2, 4,
                                 "--windowed-einsum-unroll=false"},
                      GoldenCase{"layer_stack_2l_8p_duplicate", 2, 8,
                                 "--windowed-einsum-duplicate-loops"},
                      // Six layers with the cost gate on h100x8, written by 043b23e (before the
                      // gate's queries became local): every loop decided as before.
                      GoldenCase{"layer_stack_6l_4p_llama8b_gated", 6, 4, "--system h100x8",
                                 /*gated=*/true}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) { return std::string(info.param.name); });

}  // namespace
