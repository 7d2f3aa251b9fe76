// Unit tests of fp8-gemm-rewriter and of the evaluator's `__cublas$lt$matmul$f8`.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/numerics.h"
#include "gmock/gmock.h"
#include "gpu/fp8_gemm_rewriter.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<Remark> RunPass(HloModule* m, const std::string& name, PassOptions opts = {}) {
  std::vector<Remark> remarks;
  auto pass = PassRegistry::Get().Create(name, opts);
  EXPECT_TRUE(pass.ok()) << pass.status();
  (*pass)->set_remarks(&remarks);
  auto changed = (*pass)->Run(m);
  EXPECT_TRUE(changed.ok()) << changed.status();
  return remarks;
}

std::vector<const HloInstruction*> Find(const HloModule& m, HloOpcode op) {
  std::vector<const HloInstruction*> out;
  for (HloComputation* c : m.computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->opcode() == op) out.push_back(i);
    }
  }
  return out;
}

// ---------------------------------------------------------------- evaluator of the custom call

// a = f8e4m3fn[2,3], b = f8e5m2[2,3] given as [N,K]: D[m,n] = alpha*sa*sb*sum_k a[m,k]*b[n,k].
// The expected values are computed here from the same literals, independently of the evaluator.
constexpr double kA[2][3] = {{1, 2, 0.5}, {-1, 0.25, 4}};
constexpr double kB[2][3] = {{3, -0.5, 2}, {0.125, 1, -1}};

std::string GemmModule(const std::string& d_type, const std::string& extra_operand,
                       const std::string& result, double alpha, bool damax) {
  return R"(HloModule gemm
ENTRY main {
  a = f8e4m3fn[2,3]{1,0} constant({ { 1, 2, 0.5 }, { -1, 0.25, 4 } })
  b = f8e5m2[2,3]{1,0} constant({ { 3, -0.5, 2 }, { 0.125, 1, -1 } })
  sa = f32[] constant(2)
  sb = f32[] constant(0.5)
  ds = f32[] constant(40)
  call = )" + result + R"( custom-call(a, b, sa, sb)" + extra_operand +
         R"(), custom_call_target="__cublas$lt$matmul$f8", backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":)" +
         std::to_string(alpha) +
         R"(,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"alpha_imag":0,"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},"epilogue":"DEFAULT","lhs_stride":"6","rhs_stride":"6","grad_x":false,"grad_y":false,"damax_output":)" +
         (damax ? "true" : "false") + R"(},"force_earliest_schedule":false}
  ROOT d = )" + d_type + R"([2,2]{1,0} get-tuple-element(call), index=0
}
)";
}

double Expected(int m, int n, double scale) {
  double acc = 0;
  for (int k = 0; k < 3; ++k) acc += kA[m][k] * kB[n][k];
  return scale * acc;
}

TEST(Fp8GemmCustomCall, F32OutputWithScalesAndAlpha) {
  auto m = Parse(GemmModule("f32", "", "(f32[2,2]{1,0}, s8[33554432]{0})", 0.5, false));
  ASSERT_NE(m, nullptr);
  auto r = eval::RunModule(*m, eval::EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const eval::Value& d = *r->outputs[0][0];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_DOUBLE_EQ(d.GetDouble(i * 2 + j), Expected(i, j, 0.5 * 2 * 0.5)) << i << "," << j;
    }
  }
}

TEST(Fp8GemmCustomCall, Fp8OutputSaturatesAndReportsAmax) {
  // D = f8e4m3fn: t * d_scale(40) is clamped to +-448 (cuBLASLt saturates; no NaN), amax is the
  // max |t| before d_scale.
  std::string text = GemmModule("f8e4m3fn", ", ds", "(f8e4m3fn[2,2]{1,0}, f32[], s8[33554432]{0})",
                                1.0, true);
  text.replace(text.find("ROOT d = "), 9, "d = ");
  text.replace(text.rfind("}"), 1,
               "  amax = f32[] get-tuple-element(call), index=1\n  ROOT out = (f8e4m3fn[2,2]{1,0}, "
               "f32[]) tuple(d, amax)\n}");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  auto r = eval::RunModule(*m, eval::EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const eval::Value& d = *r->outputs[0][0];
  double amax = 0;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      const double t = Expected(i, j, 2 * 0.5);
      amax = std::max(amax, std::fabs(t));
      const double want =
          eval::RoundToType(std::min(448.0, std::max(-448.0, t * 40)), PrimitiveType::F8E4M3FN);
      EXPECT_EQ(d.GetDouble(i * 2 + j), want) << i << "," << j;
    }
  }
  // Element (0,0) = 3 - 1 + 1 = 3 -> 120; (1,1) = -0.125 + 0.25 - 4 = -3.875 -> -155 -> -160;
  // (1,0) = -3 - 0.125 + 8 = 4.875 -> 195 -> 192; (0,1) = 0.125 + 2 - 0.5 = 1.625 -> 65 -> 64.
  EXPECT_EQ(d.GetDouble(0), 120);
  EXPECT_EQ(r->outputs[0][1]->GetDouble(0), amax);
  EXPECT_EQ(amax, 4.875);
}

TEST(Fp8GemmCustomCall, SaturationAtMax) {
  // d_scale large enough that every |t*d| exceeds 448: results are exactly +-448.
  std::string text = GemmModule("f8e4m3fn", ", ds", "(f8e4m3fn[2,2]{1,0}, s8[33554432]{0})", 1.0,
                                false);
  text.replace(text.find("ds = f32[] constant(40)"), 23, "ds = f32[] constant(1000)");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  auto r = eval::RunModule(*m, eval::EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const eval::Value& d = *r->outputs[0][0];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(d.GetDouble(i * 2 + j), Expected(i, j, 1.0) > 0 ? 448 : -448);
    }
  }
}

TEST(Fp8GemmCustomCall, BetaAddsMatrixBiasAndReluClamps) {
  // beta=2 with c as operand 2 (before the scales), RELU epilogue: D = max(acc + 2*c, 0).
  std::string text = GemmModule("f32", "", "(f32[2,2]{1,0}, s8[33554432]{0})", 1.0, false);
  text.replace(text.find("custom-call(a, b, sa, sb"), 24, "custom-call(a, b, c, sa, sb");
  text.replace(text.find("\"beta\":0"), 8, "\"beta\":2");
  text.replace(text.find("\"epilogue\":\"DEFAULT\""), 20, "\"epilogue\":\"RELU\"");
  text.replace(text.find("  ds = f32[] constant(40)"), 25,
               "  c = f32[2,2]{1,0} constant({ { 1, -5 }, { 0.5, 0.25 } })");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  auto r = eval::RunModule(*m, eval::EvalOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  const double c[2][2] = {{1, -5}, {0.5, 0.25}};
  const eval::Value& d = *r->outputs[0][0];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_DOUBLE_EQ(d.GetDouble(i * 2 + j), std::max(0.0, Expected(i, j, 1.0) + 2 * c[i][j]));
    }
  }
  EXPECT_EQ(d.GetDouble(1), 0.0);  // 1.625 - 10 < 0: the RELU clamps it
}

TEST(Fp8GemmCustomCall, WrongOperandCountIsAnError) {
  auto m = Parse(GemmModule("f32", ", ds", "(f32[2,2]{1,0}, s8[33554432]{0})", 1.0, false));
  ASSERT_NE(m, nullptr);
  auto r = eval::RunModule(*m, eval::EvalOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), testing::HasSubstr("expected 4 operands"));
}

// ---------------------------------------------------------------- the rewrite

constexpr char kFp8OutputModule[] = R"(HloModule fp8_out, num_partitions=1
ENTRY main {
  x8 = f8e4m3fn[16,64]{1,0} parameter(0)
  w8 = f8e4m3fn[64,32]{1,0} parameter(1)
  d = bf16[] parameter(2)
  sx = bf16[] constant(0.5)
  sw = bf16[] constant(2)
  x.w = bf16[16,64]{1,0} convert(x8)
  x.s = bf16[16,64]{1,0} broadcast(sx), dimensions={}
  x.dq = bf16[16,64]{1,0} multiply(x.w, x.s)
  w.w = bf16[64,32]{1,0} convert(w8)
  w.s = bf16[64,32]{1,0} broadcast(sw), dimensions={}
  w.dq = bf16[64,32]{1,0} multiply(w.w, w.s)
  q = bf16[16,32]{1,0} dot(x.dq, w.dq), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d.b = bf16[16,32]{1,0} broadcast(d), dimensions={}
  q.div = bf16[16,32]{1,0} divide(q, d.b)
  lo = bf16[] constant(-448)
  lo.b = bf16[16,32]{1,0} broadcast(lo), dimensions={}
  hi = bf16[] constant(448)
  hi.b = bf16[16,32]{1,0} broadcast(hi), dimensions={}
  q.clamp = bf16[16,32]{1,0} clamp(lo.b, q.div, hi.b)
  ROOT q.out = f8e4m3fn[16,32]{1,0} convert(q.clamp)
}
)";

// The FP8-output fold rounds once from f32 where the original rounds to bf16 first: the results
// may differ, but by at most one FP8 ulp (adjacent codes). Power-of-two scales keep the
// dequantized inputs exact in bf16, so the only differences come from the output rounding.
TEST(Fp8GemmRewriter, Fp8OutputFoldDiffersByAtMostOneUlp) {
  auto before = Parse(kFp8OutputModule);
  ASSERT_NE(before, nullptr);
  auto after = before->Clone();
  RunPass(after.get(), "fp8-gemm-rewriter");
  ASSERT_EQ(Find(*after, HloOpcode::kDot).size(), 0u) << after->ToString();
  ASSERT_EQ(Find(*after, HloOpcode::kClamp).size(), 0u) << after->ToString();
  int64_t differing = 0, total = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    eval::EvalOptions opts;
    opts.seed = seed;
    auto ra = eval::RunModule(*before, opts);
    ASSERT_TRUE(ra.ok()) << ra.status();
    auto rb = eval::RunModule(*after, opts, &ra->inputs);
    ASSERT_TRUE(rb.ok()) << rb.status();
    const eval::Value& va = *ra->outputs[0][0];
    const eval::Value& vb = *rb->outputs[0][0];
    ASSERT_EQ(va.size(), vb.size());
    for (int64_t k = 0; k < va.size(); ++k) {
      const double a = va.GetDouble(k), b = vb.GetDouble(k);
      ++total;
      if (a == b) continue;
      ++differing;
      ASSERT_FALSE(std::isnan(a) || std::isnan(b)) << k;
      // Adjacent f8e4m3fn values: same sign and codes one apart, or +-smallest around zero.
      const int ca = static_cast<int>(eval::EncodeFloat(a, PrimitiveType::F8E4M3FN) & 0x7F);
      const int cb = static_cast<int>(eval::EncodeFloat(b, PrimitiveType::F8E4M3FN) & 0x7F);
      const bool same_sign = std::signbit(a) == std::signbit(b) || a == 0 || b == 0;
      EXPECT_TRUE(same_sign && std::abs(ca - cb) <= 1)
          << "element " << k << ": " << a << " vs " << b << " (seed " << seed << ")";
    }
  }
  // Most elements agree exactly.
  EXPECT_LT(differing * 10, total) << differing << " of " << total << " differ";
}

TEST(Fp8GemmRewriter, KeepsQueueFieldsOfTheDot) {
  auto m = Parse(R"(HloModule q
ENTRY main {
  a = f8e4m3fn[16,16]{1,0} parameter(0)
  b = f8e4m3fn[16,16]{1,0} parameter(1)
  ROOT d = f32[16,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}, backend_config={"operation_queue_id":"7","wait_on_operation_queues":["3"],"force_earliest_schedule":true}
}
)");
  ASSERT_NE(m, nullptr);
  auto m2024 = m->Clone();
  RunPass(m.get(), "fp8-gemm-rewriter");
  auto calls = Find(*m, HloOpcode::kCustomCall);
  ASSERT_EQ(calls.size(), 1u);
  // XLA 2026 (default): the queue id and the scheduling hint stay, the removed
  // wait_on_operation_queues goes, and GemmBackendConfig has only fields XLA knows.
  const std::string& cfg = calls[0]->backend_config;
  EXPECT_THAT(cfg, testing::StartsWith(R"({"operation_queue_id":"7","gemm_backend_config":{)"));
  EXPECT_THAT(cfg, testing::EndsWith(R"("damax_output":false},"force_earliest_schedule":true})"));
  EXPECT_THAT(CheckBackendConfig(*calls[0], XlaBackendConfigVersion::k2026), testing::IsEmpty());
  // XLA 2024: the waits stay.
  PassOptions opts;
  opts.Set("xla-backend-config", "2024");
  RunPass(m2024.get(), "fp8-gemm-rewriter", opts);
  auto calls2024 = Find(*m2024, HloOpcode::kCustomCall);
  ASSERT_EQ(calls2024.size(), 1u);
  EXPECT_THAT(calls2024[0]->backend_config,
              testing::StartsWith(
                  R"({"operation_queue_id":"7","wait_on_operation_queues":["3"],"gemm_backend_config":{)"));
  EXPECT_THAT(CheckBackendConfig(*calls2024[0], XlaBackendConfigVersion::k2024),
              testing::IsEmpty());
  // Direct FP8 operands: both scales are the shared f32 constant 1.
  EXPECT_EQ(calls[0]->operand(2), calls[0]->operand(3));
  EXPECT_EQ(calls[0]->operand(2)->opcode(), HloOpcode::kConstant);
}

TEST(Fp8GemmRewriter, BadComputeCapabilityOption) {
  PassOptions opts;
  opts.Set("gpu-compute-capability", "fast");
  EXPECT_FALSE(PassRegistry::Get().Create("fp8-gemm-rewriter", opts).ok());
}

}  // namespace
}  // namespace weave
