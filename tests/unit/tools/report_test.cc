// Tests of the compile report's accounting (tools/report.h). Expected values are computed here by
// hand from the shapes, never taken from the code under test.
#include "tools/report.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shared_files.h"
#include "hlo/parser.h"
#include "nlohmann/json.hpp"

namespace weave::tools {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "<test>");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<HloModule> ParseFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModuleFile(path);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

const HloInstruction* Find(const HloModule& m, const std::string& name) {
  for (const HloComputation* c : m.computations()) {
    if (const HloInstruction* i = c->GetInstruction(name)) return i;
  }
  return nullptr;
}

// One collective of each kind, groups of 4 (list and iota form) and of 2.
constexpr char kCollectives[] = R"(
HloModule coll_bytes, num_partitions=8

add_s {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  x = bf16[6,10]{1,0} parameter(0)
  y = f32[12,5]{1,0} parameter(1)
  ag = bf16[24,10]{1,0} all-gather(x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  ar = f32[12,5]{1,0} all-reduce(y), channel_id=2, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=add_s
  rs = f32[3,5]{1,0} reduce-scatter(y), channel_id=3, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, use_global_device_ids=true, to_apply=add_s
  a2a = f32[12,5]{1,0} all-to-all(y), channel_id=4, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}
  cp = bf16[6,10]{1,0} collective-permute(x), channel_id=5, source_target_pairs={{0,1},{1,0}}
  ROOT t = (bf16[24,10]{1,0}, f32[12,5]{1,0}, f32[3,5]{1,0}, f32[12,5]{1,0}, bf16[6,10]{1,0}) tuple(ag, ar, rs, a2a, cp)
}
)";

TEST(CollectiveBytes, EachKindByHand) {
  auto m = Parse(kCollectives);
  ASSERT_NE(m, nullptr);
  const int64_t x_bytes = 6 * 10 * 2;  // bf16[6,10]
  const int64_t y_bytes = 12 * 5 * 4;  // f32[12,5]
  // all-gather over 4: three shards forwarded.
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "ag"), 8), 3 * x_bytes);
  // all-reduce over 4 (iota groups [2,4]): 2 * 3/4 of the data.
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "ar"), 8), 2 * 3 * y_bytes / 4);
  // reduce-scatter over 4: 3/4 of the unreduced operand.
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "rs"), 8), 3 * y_bytes / 4);
  // all-to-all over 2: half of the operand leaves.
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "a2a"), 8), y_bytes / 2);
  // collective-permute: one transfer of the operand.
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "cp"), 8), x_bytes);
  EXPECT_EQ(CollectiveBytesSent(*Find(*m, "x"), 8), 0);

  ModuleSummary s = SummarizeModule(*m);
  const int64_t total = 3 * x_bytes + 2 * 3 * y_bytes / 4 + 3 * y_bytes / 4 + y_bytes / 2 + x_bytes;
  EXPECT_EQ(s.bytes_sent, total);
  EXPECT_EQ(s.bytes_by_collective["all-gather"], 3 * x_bytes);
  EXPECT_EQ(s.bytes_by_collective["collective-permute"], x_bytes);
  EXPECT_EQ(s.bytes_by_type["bf16"], 4 * x_bytes);
  EXPECT_EQ(s.bytes_by_type["f32"], total - 4 * x_bytes);
  EXPECT_EQ(s.collectives["all-reduce"], 1);
  EXPECT_EQ(s.dots, 0);
}

// A loop with a known trip count (3) holding one permute and one dot: counted 3 times.
constexpr char kLoop[] = R"(
HloModule loop_bytes, num_partitions=2

body {
  st = (f32[4,8]{1,0}, f32[8,8]{1,0}, s32[]) parameter(0)
  a = f32[4,8]{1,0} get-tuple-element(st), index=0
  w = f32[8,8]{1,0} get-tuple-element(st), index=1
  i = s32[] get-tuple-element(st), index=2
  d = f32[4,8]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  p = f32[4,8]{1,0} collective-permute(d), channel_id=1, source_target_pairs={{0,1},{1,0}}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT r = (f32[4,8]{1,0}, f32[8,8]{1,0}, s32[]) tuple(p, w, i1)
}

cond {
  cs = (f32[4,8]{1,0}, f32[8,8]{1,0}, s32[]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=2
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ci, three), direction=LT
}

ENTRY main {
  a0 = f32[4,8]{1,0} parameter(0)
  w0 = f32[8,8]{1,0} parameter(1)
  z = s32[] constant(0)
  init = (f32[4,8]{1,0}, f32[8,8]{1,0}, s32[]) tuple(a0, w0, z)
  loop = (f32[4,8]{1,0}, f32[8,8]{1,0}, s32[]) while(init), condition=cond, body=body
  ROOT out = f32[4,8]{1,0} get-tuple-element(loop), index=0
}
)";

TEST(SummarizeModule, LoopsCountTripCountTimes) {
  auto m = Parse(kLoop);
  ASSERT_NE(m, nullptr);
  ModuleSummary s = SummarizeModule(*m);
  EXPECT_EQ(s.bytes_sent, 3 * 4 * 8 * 4);
  EXPECT_DOUBLE_EQ(s.flops, 3.0 * 2 * 4 * 8 * 8);
  EXPECT_EQ(s.dots, 1);
  EXPECT_TRUE(s.notes.empty());
}

// The shared example with a plain all-gather feeding two dots: the byte and FLOP counts the
// report gives for the input, by hand.
TEST(SummarizeModule, PlainAllGatherExampleByHand) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/plain_ag_bf16_two_consumers.hlo");
  auto m = ParseFile(weave::testfiles::SharedPath("examples/plain_ag_bf16_two_consumers.hlo"));
  ASSERT_NE(m, nullptr);
  ModuleSummary s = SummarizeModule(*m);
  // x: bf16[2,16,64] gathered over 4 partitions: 3 shards of 2*16*64*2 bytes leave each one.
  EXPECT_EQ(s.bytes_sent, 3 * (2 * 16 * 64 * 2));
  EXPECT_EQ(s.bytes_by_type["bf16"], 3 * (2 * 16 * 64 * 2));
  // Two dots [2,64,64] x [64,96]: 2 * (2*64*96) * 64 FLOPs each.
  EXPECT_DOUBLE_EQ(s.flops, 2 * (2.0 * 2 * 64 * 96 * 64));
  EXPECT_EQ(s.fp8_gemms, 0);
  EXPECT_EQ(s.windowed_loops, 0);
}

TEST(WindowedLoops, ExampleLoopIsFound) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_two_consumers.hlo");
  auto m = ParseFile(weave::testfiles::SharedPath("examples/ag_bf16_two_consumers.hlo"));
  ASSERT_NE(m, nullptr);
  std::vector<WindowedLoopInfo> loops = FindWindowedLoops(*m);
  ASSERT_EQ(loops.size(), 1u);
  EXPECT_EQ(loops[0].kind, "all-gather");
  EXPECT_EQ(loops[0].ring_size, 4);
  EXPECT_EQ(loops[0].wire_type, "bf16");
  EXPECT_EQ(loops[0].dots, 2);
  // Unrolled by two: two trips of two permutes of bf16[2,16,64].
  EXPECT_EQ(loops[0].permutes, 4);
  EXPECT_EQ(loops[0].bytes_sent, 4 * (2 * 16 * 64 * 2));
  EXPECT_EQ(loops[0].cache_consumers, 0);
  // The all-gather next to the loop is left alone and says why.
  std::vector<LeftAlone> left = FindCollectivesLeftAlone(*m, {});
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].opcode, "all-gather");
  EXPECT_FALSE(left[0].reason.empty());
  std::vector<Remark> remarks = {
      {"windowed-einsum-handler", left[0].name, false, "the gathered value is not the loop's"}};
  left = FindCollectivesLeftAlone(*m, remarks);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].reason, "windowed-einsum-handler: the gathered value is not the loop's");
}

TEST(Report, JsonAndTableCarryTheFigures) {
  CompileReport r;
  r.input = "in.hlo";
  r.module = "m";
  r.num_partitions = 4;
  r.before.bytes_sent = 12288;
  r.before.bytes_by_collective["all-gather"] = 12288;
  r.after.bytes_sent = 6144;
  r.after.bytes_by_collective["collective-permute"] = 6144;
  r.after.fp8_gemms = 3;
  WindowedLoopInfo l;
  l.name = "loop.1";
  l.kind = "all-gather";
  l.ring_size = 4;
  l.wire_type = "f8e4m3fn";
  l.dots = 4;
  l.cache_consumers = 2;
  r.loops.push_back(l);
  r.remarks.push_back({"dot-merger", "d1", false, "operands are FP8"});
  r.remarks.push_back({"windowed-einsum-handler", "loop.1", false, "recognised: loop", true});
  r.fired["windowed"] = true;
  nlohmann::json j = ReportToJson(r);
  EXPECT_EQ(j["before"]["bytes_sent_per_partition"], 12288);
  EXPECT_EQ(j["after"]["bytes_by_collective"]["collective-permute"], 6144);
  EXPECT_EQ(j["windowed_loops"][0]["wire_type"], "f8e4m3fn");
  EXPECT_EQ(j["windowed_loops"][0]["cache_consumers"], 2);
  EXPECT_EQ(j["remarks"][0]["message"], "operands are FP8");
  EXPECT_EQ(j["remarks"][0]["kind"], "missed");
  EXPECT_EQ(j["remarks"][1]["kind"], "analysis");
  EXPECT_EQ(j["fired"]["windowed"], true);
  std::string table = ReportToTable(r);
  EXPECT_THAT(table, testing::HasSubstr("loop.1"));
  EXPECT_THAT(table, testing::HasSubstr("f8e4m3fn"));
  EXPECT_THAT(table, testing::HasSubstr("12.0 KiB"));
  EXPECT_THAT(table, testing::HasSubstr("-50.0%"));
  EXPECT_THAT(table, testing::HasSubstr("[missed] operands are FP8"));
  EXPECT_THAT(table, testing::HasSubstr("Remarks: 2 (0 applied, 1 missed, 1 analysis)"));
  EXPECT_THAT(table, testing::Not(testing::HasSubstr("[analysis]")));  // lists show only the others
  // A pass whose first remark is an analysis one still gets exactly one count line.
  r.remarks.push_back({"windowed-einsum-handler", "loop.1", true, "cached 1 all-gather"});
  const std::string table2 = ReportToTable(r);
  const size_t first = table2.find("windowed-einsum-handler ");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(table2.find("windowed-einsum-handler ", first + 1), std::string::npos) << table2;
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3 * 1024 * 1024), "3.0 MiB");
}

// GemmFlops reads the contracting dims from a GEMM's backend_config (once per distinct text).
// Its answer must be what the JSON document says: checked against a reading written here, on
// configs with repeated keys, wrong types, nested lists, escapes and broken JSON, each read
// twice (the second time from the reader's cache). lhs is f32[6,10,14] (dims 6, 10, 14), the output f32[6,10,3].
TEST(GemmFlopsTest, ContractingDimsAsTheJsonDocumentSaysOverTrickyConfigs) {
  const std::vector<std::string> configs = {
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"]}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[0,"2"]}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[1.0,[0],{"a":0},true,null,"0"]}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[]}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":"1"}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"],"lhs_contracting_dimensions":["1"]}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]},"dot_dimension_numbers":{}}})",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}},"gemm_backend_config":7})",
      R"({"x":{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}}})",
      R"({"gemm_backend_config":{"x":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}}})",
      R"({"other":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}})",
      R"({"gemm_backend_config":{"zz":{"lhs_contracting_dimensions":["0"]}}})",
      R"({"gemm\u005fbackend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[0]}}})",
      R"([{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}}])",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"]}}} trailing)",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["0"])",
      R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[18446744073709551615]}}})",
      R"({"operation_queue_id":"3","gemm_backend_config":{"alpha_real":1,"dot_dimension_numbers":{"rhs_contracting_dimensions":["0"],"lhs_contracting_dimensions":["0","1"]}}})",
      "", "{}", "not json"};
  const std::vector<int64_t> lhs_dims = {6, 10, 14};
  auto by_document = [&](const std::string& config) {
    std::vector<int64_t> contracting;
    nlohmann::json cfg = nlohmann::json::parse(config, nullptr, false);
    if (!cfg.is_discarded() && cfg.is_object() && cfg.contains("gemm_backend_config")) {
      const nlohmann::json& g = cfg["gemm_backend_config"];
      if (g.is_object() && g.contains("dot_dimension_numbers")) {
        const nlohmann::json& dn = g["dot_dimension_numbers"];
        if (dn.is_object() && dn.contains("lhs_contracting_dimensions") &&
            dn["lhs_contracting_dimensions"].is_array()) {
          for (const auto& v : dn["lhs_contracting_dimensions"]) {
            if (v.is_string()) contracting.push_back(std::atoll(v.get<std::string>().c_str()));
            else if (v.is_number_integer()) contracting.push_back(v.get<int64_t>());
          }
        }
      }
    }
    if (contracting.empty()) contracting.push_back(2);
    double k = 1;
    for (int64_t d : contracting) {
      if (d >= 0 && d < 3) k *= static_cast<double>(lhs_dims[static_cast<size_t>(d)]);
    }
    return 2.0 * 6 * 10 * 3 * k;
  };
  for (const std::string& config : configs) {
    HloModule m("gemm_flops");
    HloComputation* e = m.AddComputation(std::make_unique<HloComputation>("main"));
    m.set_entry(e);
    HloInstruction* a = e->AddParameter(Shape(PrimitiveType::F32, {6, 10, 14}), "a");
    HloInstruction* b = e->AddParameter(Shape(PrimitiveType::F32, {6, 14, 3}), "b");
    HloInstruction* gemm = e->AddInstruction(HloOpcode::kCustomCall,
                                             Shape(PrimitiveType::F32, {6, 10, 3}), {a, b});
    gemm->set_custom_call_target("__cublas$gemm");
    gemm->backend_config = config;
    EXPECT_EQ(GemmFlops(*gemm), by_document(config)) << config;
    EXPECT_EQ(GemmFlops(*gemm), by_document(config)) << config << " (again)";
  }
  // The cases differ: the reading is not a constant.
  EXPECT_NE(by_document(configs[0]), by_document(configs[1]));
}

}  // namespace
}  // namespace weave::tools
