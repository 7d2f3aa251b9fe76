// OperationQueueId (passes/gpu_backend_config.h) reads a config without building its JSON
// document: on every kind of config it must give what the editor's full parse gives.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/ir.h"
#include "passes/gpu_backend_config.h"

namespace weave {
namespace {

// What GpuBackendConfigEditor reads, the reference the SAX reader must match.
int64_t ByEditor(const HloInstruction& i, XlaBackendConfigVersion v) {
  absl::StatusOr<GpuBackendConfigEditor> e = GpuBackendConfigEditor::Of(i, v);
  return e.ok() ? e->operation_queue_id() : 0;
}

TEST(OperationQueueIdTest, MatchesTheEditorOnEveryKindOfConfig) {
  const std::vector<std::pair<std::string, int64_t>> cases = {
      {"", 0},
      {R"({"operation_queue_id":"7","wait_on_operation_queues":[]})", 7},
      {R"({"operation_queue_id":12})", 12},
      {R"({"operation_queue_id":-3})", -3},
      {R"({"operation_queue_id":18446744073709551615})", -1},  // unsigned, as get<int64_t>
      {R"({"operation_queue_id":2.5})", 0},
      {R"({"operation_queue_id":"12abc"})", 0},
      {R"({"operation_queue_id":"-4"})", 0},
      {R"({"operation_queue_id":"99999999999999999999"})", 0},  // overflows: 0
      {R"({"operation_queue_id":true})", 0},
      {R"({"operation_queue_id":null})", 0},
      {R"({"operation_queue_id":{"operation_queue_id":"5"}})", 0},  // an object reads as 0
      {R"({"operation_queue_id":["6"]})", 0},
      {R"({"operation_queue_id":"2","operation_queue_id":"9"})", 9},  // the last key wins
      {R"({"operation_queue_id":"9","operation_queue_id":[1]})", 0},
      {R"({"x":{"operation_queue_id":"5"},"y":[{"operation_queue_id":"6"}]})", 0},  // nested
      {R"({"x":{"operation_queue_id":"5"},"operation_queue_id":"4"})", 4},
      {R"({"s":"operation_queue_id","operation_queue_id":"3"})", 3},  // the name as a value
      {R"(  {"operation_queue_id" : "8" }  )", 8},                      // whitespace
      {R"(["operation_queue_id","5"])", 0},                              // not an object
      {R"("operation_queue_id")", 0},
      {R"({"operation_queue_id":"5")", 0},   // truncated: not JSON
      {R"({"operation_queue_id":"5"} x)", 0},  // trailing text: not JSON
      {R"({"operation_queue_id":"5",})", 0},   // trailing comma: not JSON
      {"{\"operation_queue_id\":\"\\u0035\"}", 5},  // an escaped digit is a digit
      {"{\"operation\\u005fqueue_id\":\"6\"}", 6},  // an escaped key is the same key
      {"{\"operation\\u005fqueue_id\":\"6\",\"operation_queue_id\":\"2\"}", 2},
  };
  auto instr = HloInstruction::Create(HloOpcode::kCustomCall, Shape());
  for (const auto& [config, expected] : cases) {
    instr->backend_config = config;
    EXPECT_EQ(OperationQueueId(*instr), expected) << config;
    for (XlaBackendConfigVersion v : {XlaBackendConfigVersion::k2024, XlaBackendConfigVersion::k2025,
                                      XlaBackendConfigVersion::k2026}) {
      EXPECT_EQ(OperationQueueId(*instr), ByEditor(*instr, v)) << config;
    }
  }
}

// The per-thread table of texts already read: answers stay right across its emptying (more
// distinct configs than it keeps) and follow a config that changes.
TEST(OperationQueueIdTest, KeptAnswersFollowTheText) {
  auto instr = HloInstruction::Create(HloOpcode::kCustomCall, Shape());
  for (int round = 0; round < 2; ++round) {
    for (int64_t q = 0; q < 20000; ++q) {
      instr->backend_config = "{\"operation_queue_id\":\"" + std::to_string(q) + "\"}";
      ASSERT_EQ(OperationQueueId(*instr), q);
    }
  }
  instr->backend_config = R"({"operation_queue_id":"3"})";
  EXPECT_EQ(OperationQueueId(*instr), 3);
  instr->backend_config = R"({"operation_queue_id":"4"})";
  EXPECT_EQ(OperationQueueId(*instr), 4);
}

}  // namespace
}  // namespace weave
