// The FP8 GEMM call's backend config (gpu/fp8_gemm_internal.h BackendConfig) is kept per thread
// by everything it is made of: every input that changes the text must change the key. Each
// config is checked against one built on a fresh thread, whose table starts empty.
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "gpu/fp8_gemm_internal.h"
#include "hlo/ir.h"

namespace weave::fp8_gemm_internal {
namespace {

TEST(Fp8GemmBackendConfigTest, KeptTextsAreTheBuiltOnes) {
  auto dot = HloInstruction::Create(HloOpcode::kDot, Shape(PrimitiveType::F32, {8, 8}));
  auto amax = HloInstruction::Create(HloOpcode::kReduce, Shape(PrimitiveType::F32, {}));
  const std::vector<std::string> configs = {
      "", R"({"operation_queue_id":"3","wait_on_operation_queues":["1"]})",
      R"({"operation_queue_id":"4","force_earliest_schedule":true})", "not json"};
  const std::vector<std::vector<std::string>> precisions = {{}, {"highest", "default"}, {"high"}};
  struct Case {
    std::string config, algorithm, grad_x;
    std::vector<std::string> precision;
    double alpha;
    bool amax;
    int64_t nb, lhs_k, rhs_k, lhs_stride, rhs_stride;
    XlaBackendConfigVersion v;
  };
  // Random cases, each followed by copies that differ from it in one input alone: a key that
  // missed that input would give the copy the first one's text.
  std::mt19937 rng(5);
  std::vector<Case> cases;
  for (int k = 0; k < 40; ++k) {
    Case c;
    c.config = configs[rng() % configs.size()];
    c.algorithm = rng() % 2 ? "dot_bf16_bf16_f32" : "";
    c.grad_x = rng() % 3 == 0 ? "true" : rng() % 2 ? "false" : "";
    c.precision = precisions[rng() % precisions.size()];
    c.alpha = rng() % 2 ? 1.0 : 0.5 * static_cast<double>(rng() % 4);
    c.amax = rng() % 2;
    c.nb = rng() % 2;
    c.lhs_k = static_cast<int64_t>(rng() % 2 + c.nb);
    c.rhs_k = static_cast<int64_t>(rng() % 2 + c.nb);
    c.lhs_stride = 64 * static_cast<int64_t>(rng() % 2);
    c.rhs_stride = 32 * static_cast<int64_t>(rng() % 2);
    c.v = rng() % 2 ? XlaBackendConfigVersion::k2026 : XlaBackendConfigVersion::k2024;
    cases.push_back(c);
    std::vector<Case> one_off(13, c);
    one_off[0].config = c.config == configs[1] ? configs[2] : configs[1];
    one_off[1].algorithm = c.algorithm == "dot_tf32_tf32_f32" ? "dot_f32_f32_f32" : "dot_tf32_tf32_f32";
    one_off[2].grad_x = c.grad_x == "true" ? "false" : "true";
    one_off[3].precision = c.precision.size() == 2 && c.precision[0] == "high"
                               ? std::vector<std::string>{"highest", "high"}
                               : std::vector<std::string>{"high", "highest"};
    one_off[4].alpha = c.alpha + 0.25;
    one_off[5].amax = !c.amax;
    one_off[6].nb = 1 - c.nb;
    one_off[7].lhs_k = c.lhs_k + 1;
    one_off[8].rhs_k = c.rhs_k + 1;
    one_off[9].lhs_stride = c.lhs_stride + 8;
    one_off[10].rhs_stride = c.rhs_stride + 8;
    one_off[11].v = c.v == XlaBackendConfigVersion::k2026 ? XlaBackendConfigVersion::k2024
                                                          : XlaBackendConfigVersion::k2026;
    one_off[12].algorithm = c.algorithm.empty() ? "dot_bf16_bf16_f32" : "";
    cases.insert(cases.end(), one_off.begin(), one_off.end());
  }
  auto build = [&](const Case& c) {
    dot->backend_config = c.config;
    dot->set_raw_attributes({});
    if (!c.algorithm.empty()) dot->mutable_raw_attributes()->push_back({"algorithm", c.algorithm});
    dot->frontend_attributes.clear();
    if (!c.grad_x.empty()) dot->SetFrontendAttribute("grad_x", c.grad_x);
    dot->set_operand_precision(c.precision);
    OutputPlan plan;
    plan.alpha = c.alpha;
    plan.amax_reduce = c.amax ? amax.get() : nullptr;
    return BackendConfig(dot.get(), plan, c.nb, c.lhs_k, c.rhs_k, c.lhs_stride, c.rhs_stride,
                         c.v);
  };
  std::vector<std::string> fresh(cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    std::thread([&, k] { fresh[k] = build(cases[k]); }).join();
  }
  int distinct = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < cases.size(); ++k) {
      ASSERT_EQ(build(cases[k]), fresh[k]) << "case " << k << " round " << round;
      if (round == 0 && (k == 0 || fresh[k] != fresh[k - 1])) ++distinct;
    }
  }
  EXPECT_GT(distinct, 400);
}

}  // namespace
}  // namespace weave::fp8_gemm_internal
