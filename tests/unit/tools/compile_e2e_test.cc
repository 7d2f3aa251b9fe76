// End-to-end tests of `weave compile` and `weave demo`, running the built CLI (WEAVE_BINARY).
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gpu/compile_pipeline.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "shared_files.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct CmdResult {
  int code = -1;
  std::string out;  // stdout + stderr
};

// Runs a shell command, capturing both streams.
CmdResult Sh(const std::string& cmd) {
  CmdResult r;
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Weave() { return std::string("'") + WEAVE_BINARY + "'"; }
std::string Shared(const std::string& rel) { return weave::testfiles::SharedPath(rel); }

// A module of the project's own, in every clone: a plain bf16 all-gather over 4 partitions
// feeding two column-sharded dots (what the decomposer windows and the handler caches).
constexpr char kPlainAllGatherTwoDots[] = R"(HloModule own_plain_ag_two_dots, num_partitions=4

ENTRY main {
  act = bf16[4,8,32]{2,1,0} parameter(0), sharding={devices=[1,4,1]<=[4]}
  gathered = bf16[4,32,32]{2,1,0} all-gather(act), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  wa = bf16[32,24]{1,0} parameter(1), sharding={devices=[1,4]<=[4]}
  ya = bf16[4,32,24]{2,1,0} dot(gathered, wa), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  wb = bf16[32,40]{1,0} parameter(2), sharding={devices=[1,4]<=[4]}
  yb = bf16[4,32,40]{2,1,0} dot(gathered, wb), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT out = (bf16[4,32,24]{2,1,0}, bf16[4,32,40]{2,1,0}) tuple(ya, yb)
}
)";

// A module without any collective, in every clone: nothing for the pipeline to window.
constexpr char kNoCollective[] = R"(HloModule own_no_collective, num_partitions=4

ENTRY main {
  a = f32[16,8]{1,0} parameter(0)
  b = f32[8,12]{1,0} parameter(1)
  ROOT y = f32[16,12]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

class CompileE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weave_compile_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Tmp(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` to a file of this test's folder; returns its path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = Tmp(name);
    std::ofstream(path) << text;
    return path;
  }
  fs::path dir_;
};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

// Compiles `in` with its numerics verified on the evaluator; the output verifies.
void CompileWithVerifiedNumerics(const std::string& in, const std::string& out) {
  SCOPED_TRACE(in);
  // Default tolerances: the FP8 all-gather examples (bf16 outputs) differ from their input by
  // 1-2 bf16 ulps where the FP8 GEMM rounds once and the input rounds each dequantized operand;
  // the comparison's norm-wise term (4 ulps at each output's largest magnitude) allows that.
  CmdResult r = Sh(Weave() + " compile '" + in + "' -o '" + out + "' --verify-numerics=3 --report '" +
                   out + ".json'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Numerics: PASS"));
  ASSERT_TRUE(fs::exists(out));
  CmdResult v = Sh(Weave() + " verify '" + out + "'");
  EXPECT_EQ(v.code, 0) << v.out;
  nlohmann::json j = ReadJson(out + ".json");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["numerics"]["pass"], true);
}

// The project's own modules: a plain all-gather with two dots, an FP8 windowed loop.
TEST_F(CompileE2E, OwnModulesCompileWithVerifiedNumerics) {
  CompileWithVerifiedNumerics(Write("plain.hlo", kPlainAllGatherTwoDots), Tmp("plain.out.hlo"));
  CompileWithVerifiedNumerics(
      weave::testfiles::SourcePath("tests/lit/windowed-einsum-handler-convert-after-scale.hlo"),
      Tmp("loop.out.hlo"));
}

// Every shared example.
TEST_F(CompileE2E, ExamplesCompileWithVerifiedNumerics) {
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  for (const auto& entry : fs::directory_iterator(Shared("examples"))) {
    if (entry.path().extension() != ".hlo") continue;
    CompileWithVerifiedNumerics(entry.path().string(), Tmp(entry.path().filename().string()));
  }
}

// The report's byte counts against values computed here from the shapes of
// plain_ag_fp8_two_consumers.hlo: x is f8e4m3fn[2,16,64] dequantized to bf16 and all-gathered
// over 4 partitions; after the pipeline the ring carries the FP8 shard.
TEST_F(CompileE2E, ReportBytesMatchHandComputedValues) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/plain_ag_fp8_two_consumers.hlo");
  std::string out = Tmp("out.hlo"), rep = Tmp("report.json");
  // --cost-gate=off: the figures below are about the rewrite itself, not whether it pays at this
  // tiny size.
  CmdResult r = Sh(Weave() + " compile '" + Shared("examples/plain_ag_fp8_two_consumers.hlo") +
             "' -o '" + out + "' --report '" + rep + "' --cost-gate=off");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = ReadJson(rep);
  ASSERT_FALSE(j.is_discarded());
  const int64_t shard_elems = 2 * 16 * 64;
  const int64_t n = 4;
  // Before: one all-gather of bf16 shards: (N-1) shards of 2 bytes per element.
  EXPECT_EQ(j["before"]["bytes_sent_per_partition"], (n - 1) * shard_elems * 2);
  EXPECT_EQ(j["before"]["bytes_by_collective"]["all-gather"], (n - 1) * shard_elems * 2);
  EXPECT_EQ(j["before"]["bytes_by_type"]["bf16"], (n - 1) * shard_elems * 2);
  // After: no all-gather is left; collective-permutes carry FP8 shards (1 byte per element).
  EXPECT_FALSE(j["after"]["bytes_by_collective"].contains("all-gather"));
  const int64_t permuted = j["after"]["bytes_by_collective"]["collective-permute"];
  EXPECT_EQ(permuted % shard_elems, 0);
  const int64_t transfers = permuted / shard_elems;
  // N-1 transfers in the fully unrolled ring (N with XLA's unrolled-by-2 layout).
  EXPECT_GE(transfers, n - 1);
  EXPECT_LE(transfers, n);
  EXPECT_EQ(j["after"]["bytes_by_type"]["f8e4m3fn"], permuted);
  ASSERT_EQ(j["windowed_loops"].size(), 1u);
  EXPECT_EQ(j["windowed_loops"][0]["ring_size"], n);
  EXPECT_EQ(j["windowed_loops"][0]["wire_type"], "f8e4m3fn");
  EXPECT_EQ(j["windowed_loops"][0]["cache_consumers"], 1);
  // FLOPs: two dots [2,64,64] x [64,96] -> 2 * 2*64*96*64 each.
  EXPECT_DOUBLE_EQ(j["before"]["flops_per_partition"].get<double>(), 2 * 2.0 * 2 * 64 * 96 * 64);
  EXPECT_EQ(j["fired"]["windowed"], true);
  EXPECT_EQ(j["fired"]["fp8-wire"], true);
  EXPECT_EQ(j["fired"]["cache"], true);
}

// --require fails with exit 4 when nothing fires, and no output is written.
// `weave compile` runs the library's compile pipeline (gpu/compile_pipeline.h), every stage or
// the stages its switches leave on, and no list of its own.
TEST_F(CompileE2E, RunsTheLibraryPipeline) {
  const std::string in = Write("plain.hlo", kPlainAllGatherTwoDots);
  CmdResult all = Sh(Weave() + " compile '" + in + "' -q --cost-gate=off --report '" +
                     Tmp("all.json") + "'");
  ASSERT_EQ(all.code, 0) << all.out;
  nlohmann::json j = ReadJson(Tmp("all.json"));
  ASSERT_TRUE(j.contains("pipeline")) << j.dump();
  EXPECT_EQ(j["pipeline"].get<std::vector<std::string>>(), weave::CompilePipelinePassNames());
  CmdResult some = Sh(Weave() + " compile '" + in + "' -q --cost-gate=off --no-cleanup "
                      "--disable-passes=dot-merger --report '" + Tmp("some.json") + "'");
  ASSERT_EQ(some.code, 0) << some.out;
  absl::StatusOr<std::vector<std::string>> expected =
      weave::CompilePipelinePassNames({"cleanup"}, {"dot-merger"});
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(ReadJson(Tmp("some.json"))["pipeline"].get<std::vector<std::string>>(), *expected);
  // The help text names the same passes.
  CmdResult help = Sh(Weave() + " compile --help");
  EXPECT_THAT(help.out, HasSubstr(weave::CompilePipelineSummary()));
  CmdResult bad = Sh(Weave() + " compile '" + in + "' --disable-passes=no-such-pass");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("'no-such-pass' is not a pass of the compile pipeline"));
}

TEST_F(CompileE2E, RequireFailsWhenNothingFires) {
  std::string out = Tmp("ln.hlo");
  CmdResult r = Sh(Weave() + " compile '" + Write("none.hlo", kNoCollective) + "' -o '" + out +
                   "' --require=windowed");
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("windowed did not fire"));
  EXPECT_FALSE(fs::exists(out));
  // Disabling the decomposer on a plain all-gather: nothing windowed.
  const std::string plain = Write("plain.hlo", kPlainAllGatherTwoDots);
  r = Sh(Weave() + " compile '" + plain + "' -o '" + out + "' --no-decompose --require=windowed,fp8-gemm");
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_FALSE(fs::exists(out));
  // An unknown rewrite name is a usage error.
  r = Sh(Weave() + " compile '" + plain + "' --require=sparkle");
  EXPECT_EQ(r.code, 2) << r.out;
  // The same module with the decomposer on (every match: --cost-gate=off): the rewrite fires,
  // the output is written.
  r = Sh(Weave() + " compile '" + plain + "' -o '" + out + "' --require=windowed,cache --cost-gate=off");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out));
}

// Every real dump compiles or is declined with a clear reason; every output verifies. Numerics
// are off here (the big dumps would not fit), so this stays fast.
TEST_F(CompileE2E, RealDumpsCompileOrDecline) {
  WEAVE_SKIP_WITHOUT_SHARED("real");
  int compiled = 0;
  for (const auto& entry : fs::directory_iterator(Shared("real"))) {
    if (entry.path().extension() != ".hlo") continue;
    SCOPED_TRACE(entry.path().string());
    std::string out = Tmp(entry.path().filename().string());
    CmdResult r = Sh(Weave() + " compile -q '" + entry.path().string() + "' -o '" + out + "'");
    if (r.code == 1) {
      EXPECT_THAT(r.out, HasSubstr("CustomSPMDPartitioning calls"));
      EXPECT_FALSE(fs::exists(out));
      continue;
    }
    ASSERT_EQ(r.code, 0) << r.out;
    CmdResult v = Sh(Weave() + " verify '" + out + "'");
    EXPECT_EQ(v.code, 0) << v.out;
    ++compiled;
  }
  EXPECT_GE(compiled, 5);
}

// The DeepSeek dump is global (it would be partitioned first) but has 9 CustomSPMDPartitioning
// calls: exit 1 listing each by name, target and op_name, with the dump to take instead.
TEST_F(CompileE2E, DeclinesCustomSpmdPartitioning) {
  WEAVE_SKIP_WITHOUT_SHARED("real/nv_maxtext_deepseek_1n4g_jit_train_step_before_optimization.hlo");
  std::string out = Tmp("ds.hlo");
  CmdResult r = Sh(Weave() + " compile -q '" +
             Shared("real/nv_maxtext_deepseek_1n4g_jit_train_step_before_optimization.hlo") +
             "' -o '" + out + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("has 9 CustomSPMDPartitioning calls"));
  size_t listed = 0;
  for (size_t p = r.out.find("custom_call_target=\"CustomSPMDPartitioning\", op_name=\"");
       p != std::string::npos;
       p = r.out.find("custom_call_target=\"CustomSPMDPartitioning\", op_name=\"", p + 1)) {
    ++listed;
  }
  EXPECT_EQ(listed, 9u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("op_name=\"moe_layers/DeepSeekMoeBlock_0/custom_partitioning\""));
  EXPECT_THAT(r.out, HasSubstr("after XLA's `spmd-partitioning` pass"));
  EXPECT_FALSE(fs::exists(out));
}

// A module too large for the evaluator is skipped with the estimate unless --force.
TEST_F(CompileE2E, NumericsSkippedForHugeModules) {
  std::string in = Tmp("huge.hlo");
  {
    std::ofstream f(in);
    f << "HloModule huge, num_partitions=4\n\nENTRY main {\n"
         "  x = f32[16384,16384]{1,0} parameter(0)\n"
         "  ROOT y = f32[16384,16384]{1,0} negate(x)\n}\n";
  }
  CmdResult r = Sh(Weave() + " compile '" + in + "' -o '" + Tmp("huge.out.hlo") + "' --verify-numerics");
  // Asked for and not run: exit 5 (numerics not verified), no output.
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Numerics: skipped"));
  EXPECT_THAT(r.out, HasSubstr("--force"));
  EXPECT_THAT(r.out, HasSubstr("the numerics could not be verified"));
  EXPECT_FALSE(fs::exists(Tmp("huge.out.hlo")));
  // Without --verify-numerics the same module compiles.
  CmdResult plain = Sh(Weave() + " compile '" + in + "' -o '" + Tmp("huge.out.hlo") + "' -q");
  EXPECT_EQ(plain.code, 0) << plain.out;
  EXPECT_TRUE(fs::exists(Tmp("huge.out.hlo")));
}

TEST_F(CompileE2E, OutputThroughSymlinkKeepsTheLink) {
  const std::string target = Tmp("real.hlo");
  { std::ofstream(target) << "stale\n"; }
  fs::create_symlink(target, Tmp("link.hlo"));
  fs::create_symlink(Tmp("report.real.json"), Tmp("report.json"));  // dangling: created
  CmdResult r = Sh(Weave() + " compile '" + Write("plain.hlo", kPlainAllGatherTwoDots) + "' -o '" +
                   Tmp("link.hlo") + "' --report '" + Tmp("report.json") + "' -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(Tmp("link.hlo"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(Tmp("report.json"))));
  std::ifstream in(target);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_THAT(ss.str(), HasSubstr("HloModule"));
  EXPECT_TRUE(ReadJson(Tmp("report.real.json")).is_object());
}

TEST_F(CompileE2E, DemoCompilesVerifiesAndWritesItsFiles) {
  std::string d = Tmp("demo");
  CmdResult r = Sh(Weave() + " demo --out-dir '" + d + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Numerics: PASS"));
  EXPECT_THAT(r.out, HasSubstr("on a scaled copy"));
  for (const char* f : {"input.hlo", "partitioned.hlo", "output.hlo", "scaled_input.hlo",
                        "scaled_output.hlo"}) {
    EXPECT_TRUE(fs::exists(d + "/" + f)) << f;
  }
  nlohmann::json j = ReadJson(d + "/report.json");
  ASSERT_FALSE(j.is_discarded());
  // The demo starts from the global module: partitioned first, verified against it.
  EXPECT_EQ(j["input_form"], "global");
  EXPECT_EQ(j["partitioned_from_global"], true);
  EXPECT_EQ(j["numerics"]["reference"], "the global module on 1 device");
  EXPECT_EQ(j["fired"]["windowed"], true);
  EXPECT_EQ(j["fired"]["fp8-gemm"], true);
  EXPECT_EQ(j["fired"]["fp8-wire"], true);
  EXPECT_EQ(j["fired"]["windowed-in-ring"], true);
  EXPECT_EQ(j["fired"]["windowed-ring-rs"], true);
  EXPECT_EQ(j["numerics"]["pass"], true);
  EXPECT_TRUE(j["numerics"].contains("scaled_copy"));
  // The cost gate decided the two all-gathers (Q/K/V, gate/up), the two reduce-scatters (output
  // and down projections) and, for each all-gather loop, the consumers in the ring; each with its
  // estimates. The loops are the decomposer's rewritten candidates.
  ASSERT_EQ(j["cost_gate"]["mode"], "model");
  EXPECT_EQ(j["cost_gate"]["system"], "h100x8");
  int decomposed = 0, decisions = 0;
  for (const auto& dec : j["cost_gate"]["decisions"]) {
    ++decisions;
    EXPECT_TRUE(dec.contains("with_us")) << dec.dump();
    EXPECT_TRUE(dec.contains("without_us")) << dec.dump();
    if (dec["rewritten"] == true) {
      EXPECT_LT(dec["with_us"].get<double>(), dec["without_us"].get<double>()) << dec.dump();
      if (dec["pass"] == "windowed-einsum-decomposer") ++decomposed;
    }
  }
  EXPECT_GE(decisions, 4);
  EXPECT_EQ(static_cast<int>(j["windowed_loops"].size()), decomposed);
  // At least the gate/up all-gather loop (with its cache user); the Q/K/V loop is decided by the
  // model (left at this size on h100x8).
  int ag = 0;
  for (const auto& l : j["windowed_loops"]) ag += l["kind"] == "all-gather" ? 1 : 0;
  EXPECT_GE(ag, 1);
  CmdResult v = Sh(Weave() + " verify '" + d + "/output.hlo'");
  EXPECT_EQ(v.code, 0) << v.out;
  // The scaled copy took the same decisions and verifies against its input.
  CmdResult c = Sh(Weave() + " compare '" + d + "/scaled_input.hlo' '" + d +
                   "/scaled_output.hlo' --num-partitions 4");
  EXPECT_EQ(c.code, 0) << c.out;
}

}  // namespace

namespace weave::tools {
namespace {

// The cost gate's estimate with the loop is the simulated time of what weave compile emits: for a
// module that is nothing but the candidate, `weave simulate` of the output gives the same figure.
TEST_F(CompileE2E, CostGateEstimateIsTheSimulatedOutput) {
  const std::string in = std::string(WEAVE_SOURCE_DIR) + "/tests/calibration/c1_ag_gemm_base.hlo";
  const std::string out = Tmp("c1.out.hlo"), rep = Tmp("c1.json");
  CmdResult r = Sh(Weave() + " compile '" + in + "' -o '" + out + "' --report '" + rep +
                   "' -q --system h800x8");
  ASSERT_EQ(r.code, 0) << r.out;
  nlohmann::json j = ReadJson(rep);
  ASSERT_EQ(j["cost_gate"]["decisions"].size(), 1u);
  const auto& d = j["cost_gate"]["decisions"][0];
  ASSERT_EQ(d["rewritten"], true) << d.dump();
  CmdResult after = Sh(Weave() + " simulate '" + out + "' --system h800x8 --json");
  ASSERT_EQ(after.code, 0) << after.out;
  nlohmann::json sa = nlohmann::json::parse(after.out, nullptr, false);
  ASSERT_FALSE(sa.is_discarded()) << after.out;
  EXPECT_NEAR(d["with_us"].get<double>(), sa["total_us"].get<double>(),
              1e-6 * sa["total_us"].get<double>());
  CmdResult before = Sh(Weave() + " simulate '" + in + "' --system h800x8 --json");
  nlohmann::json sb = nlohmann::json::parse(before.out, nullptr, false);
  ASSERT_FALSE(sb.is_discarded()) << before.out;
  EXPECT_NEAR(d["without_us"].get<double>(), sb["total_us"].get<double>(),
              1e-6 * sb["total_us"].get<double>());
}

}  // namespace
}  // namespace weave::tools
