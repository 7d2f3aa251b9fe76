// Every backend_config Weave writes is one the chosen XLA version loads: `weave compile` on the
// shared examples, the demo block and generated windowed loops, for --xla-backend-config=2024,
// 2025, 2026 and the default, each output's configs checked field by field against that
// version's schema (passes/gpu_backend_config.h, field lists with their XLA commits).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shared_files.h"
#include "hlo/parser.h"
#include "passes/gpu_backend_config.h"

namespace weave {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

int Sh(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Unit checks of the schema tables and the checker itself.
TEST(GpuBackendConfigSchema, FlagsFieldsTheVersionLacks) {
  auto m = ParseHloModule(R"(HloModule s
ENTRY main {
  a = f32[4]{0} parameter(0)
  b = f32[4]{0} negate(a), backend_config={"operation_queue_id":"1","wait_on_operation_queues":["2"],"force_earliest_schedule":false}
  c = f32[4]{0} abs(b), backend_config={"operation_queue_id":"0","reification_cost":[],"force_earliest_schedule":false}
  d = (f32[4]{0}, s8[8]{0}) custom-call(c), custom_call_target="x", backend_config={"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"is_fp8":true}}
  ROOT e = f32[4]{0} get-tuple-element(d), index=0
}
)", "s");
  ASSERT_TRUE(m.ok()) << m.status();
  const HloComputation* c = (*m)->entry();
  auto check = [&](const char* name, XlaBackendConfigVersion v) {
    return CheckBackendConfig(*c->GetInstruction(name), v);
  };
  EXPECT_THAT(check("b", XlaBackendConfigVersion::k2024), IsEmpty());
  EXPECT_THAT(check("b", XlaBackendConfigVersion::k2025), IsEmpty());
  EXPECT_THAT(check("b", XlaBackendConfigVersion::k2026),
              testing::ElementsAre(HasSubstr("has no field 'wait_on_operation_queues'")));
  EXPECT_THAT(check("c", XlaBackendConfigVersion::k2024),
              testing::ElementsAre(HasSubstr("has no field 'reification_cost'")));
  EXPECT_THAT(check("c", XlaBackendConfigVersion::k2026), IsEmpty());
  // GemmBackendConfig never had is_fp8.
  for (auto v : {XlaBackendConfigVersion::k2024, XlaBackendConfigVersion::k2025,
                 XlaBackendConfigVersion::k2026}) {
    EXPECT_THAT(check("d", v),
                testing::ElementsAre(HasSubstr("GemmBackendConfig (XLA " +
                                               XlaBackendConfigVersionName(v) +
                                               ") has no field 'is_fp8'")));
  }

  // The editor writes each version's form, dropping the stream fields the version lacks.
  HloInstruction* b = c->GetInstruction("b");
  auto e26 = GpuBackendConfigEditor::Of(*b, XlaBackendConfigVersion::k2026);
  ASSERT_TRUE(e26.ok());
  EXPECT_EQ(e26->operation_queue_id(), 1);
  EXPECT_FALSE(e26->AddWaitOnOperationQueue(5));
  EXPECT_EQ(e26->ToString(), R"({"operation_queue_id":"1","force_earliest_schedule":false})");
  auto e24 = GpuBackendConfigEditor::Of(*c->GetInstruction("c"), XlaBackendConfigVersion::k2024);
  ASSERT_TRUE(e24.ok());
  EXPECT_TRUE(e24->AddWaitOnOperationQueue(3));
  EXPECT_FALSE(e24->AddWaitOnOperationQueue(3));
  e24->set_force_earliest_schedule(true);
  EXPECT_EQ(e24->ToString(),
            R"({"operation_queue_id":"0","wait_on_operation_queues":["3"],"force_earliest_schedule":true})");
  // Known fields in the version's order, then the others in the config's order; keys and values
  // escaped as JSON writes them; the stream fields at their defaults when absent.
  auto cfg = ParseHloModule(R"(HloModule t
ENTRY main {
  a = f32[4]{0} parameter(0)
  ROOT b = f32[4]{0} negate(a), backend_config={"zz_later":{"k":[1,2.5,"s"]},"force_earliest_schedule":true,"odd\"key":"v\u00e9","gemm_backend_config":{"alpha_real":1},"device_type":"x"}
}
)", "t");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto written = GpuBackendConfigEditor::Of(*(*cfg)->entry()->root(),
                                            XlaBackendConfigVersion::k2024);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(written->ToString(),
            R"({"operation_queue_id":"0","wait_on_operation_queues":[],)"
            R"("gemm_backend_config":{"alpha_real":1},"force_earliest_schedule":true,)"
            R"("zz_later":{"k":[1,2.5,"s"]},"odd\"key":"vé"})");
  EXPECT_EQ(GpuBackendConfigEditor(XlaBackendConfigVersion::k2026).ToString(),
            R"({"operation_queue_id":"0","force_earliest_schedule":false})");
  EXPECT_FALSE(ParseXlaBackendConfigVersion("2023").ok());
  EXPECT_EQ(*ParseXlaBackendConfigVersion("2025"), XlaBackendConfigVersion::k2025);
}

class BackendConfigOutput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weave_schema_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

// Inputs: the shared examples, the demo block, and generated AG/RS loops (FP8 and wide).
std::vector<std::string> Inputs(const fs::path& dir) {
  std::vector<std::string> in;
  if (weave::testfiles::HasShared("examples")) {
    for (const auto& e : fs::directory_iterator(weave::testfiles::SharedPath("examples"))) {
      if (e.path().extension() == ".hlo") in.push_back(e.path().string());
    }
  }
  const std::string gen = std::string(WEAVE_SOURCE_DIR) + "/tests/gen/windowed_loops.py";
  const std::vector<std::string> variants = {
      "--kind ag -n 4 --fp8 e4m3fn,e4m3fn --consumers 2", "--kind ag -n 5 --consumers 1",
      "--kind rs -n 4 --fp8 e4m3fn,e5m2", "--kind rs -n 3"};
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::string path = (dir / ("gen" + std::to_string(i) + ".hlo")).string();
    std::string out;
    EXPECT_EQ(Sh("python3 '" + gen + "' " + variants[i] + " -o '" + path + "'", &out), 0) << out;
    in.push_back(path);
  }
  std::string out;
  EXPECT_EQ(Sh(std::string("'") + WEAVE_BINARY + "' demo --out-dir '" + (dir / "demo").string() +
                   "'",
               &out),
            0)
      << out;
  in.push_back((dir / "demo" / "input.hlo").string());
  return in;
}

TEST_F(BackendConfigOutput, EveryConfigWeaveWritesLoadsInTheChosenXla) {
  const std::vector<std::string> inputs = Inputs(dir_);
  struct Mode {
    std::string flag;
    XlaBackendConfigVersion version;
  };
  const std::vector<Mode> modes = {{"", XlaBackendConfigVersion::k2026},
                                   {"--xla-backend-config=2025", XlaBackendConfigVersion::k2025},
                                   {"--xla-backend-config=2024", XlaBackendConfigVersion::k2024}};
  for (const Mode& mode : modes) {
    int with_waits = 0, configs = 0;
    for (const std::string& in : inputs) {
      SCOPED_TRACE(in + " " + mode.flag);
      const std::string out = (dir_ / "out.hlo").string();
      std::string log;
      // Every match rewritten (--cost-gate=off): the configs of every loop form are checked,
      // whatever the gate would decide for these small modules.
      ASSERT_EQ(Sh(std::string("'") + WEAVE_BINARY + "' compile -q --cost-gate=off '" + in +
                       "' -o '" + out + "' " + mode.flag,
                   &log),
                0)
          << log;
      const std::string text = ReadFile(out);
      auto m = ParseHloModule(text, out);
      ASSERT_TRUE(m.ok()) << m.status();
      for (const HloComputation* c : (*m)->computations()) {
        for (const HloInstruction* i : c->instructions()) {
          configs += !i->backend_config.empty();
          EXPECT_THAT(CheckBackendConfig(*i, mode.version), IsEmpty());
        }
      }
      with_waits += text.find("wait_on_operation_queues") != std::string::npos;
    }
    EXPECT_GT(configs, 0);
    if (mode.version == XlaBackendConfigVersion::k2026) {
      EXPECT_EQ(with_waits, 0) << mode.flag;
    } else {
      EXPECT_EQ(with_waits, static_cast<int>(inputs.size())) << mode.flag;
    }
  }
}

}  // namespace
}  // namespace weave
