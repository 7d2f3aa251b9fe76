// Every shared example runs (twice, with identical results); the small real modules run; windowed
// examples agree numerically with their plain (non-windowed) counterparts; inputs respect
// shardings.
#include <filesystem>
#include <limits>

#include "eval_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shared_files.h"

namespace weave::eval {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Load(const std::string& rel) {
  auto m = ParseHloModuleFile(weave::testfiles::SharedPath(rel));
  EXPECT_TRUE(m.ok()) << rel << ": " << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(Modules, EveryExampleRunsTwiceIdentically) {
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(weave::testfiles::SharedPath("examples"))) {
    if (entry.path().extension() != ".hlo") continue;
    ++count;
    auto m = Load("examples/" + entry.path().filename().string());
    ASSERT_NE(m, nullptr);
    EvalOptions o;
    o.seed = 7;
    auto r1 = RunModule(*m, o);
    ASSERT_TRUE(r1.ok()) << entry.path() << ": " << r1.status().message();
    auto r2 = RunModule(*m, o);
    ASSERT_TRUE(r2.ok()) << r2.status().message();
    ASSERT_EQ(r1->outputs.size(), static_cast<size_t>(m->num_partitions));
    for (size_t d = 0; d < r1->outputs.size(); ++d) {
      ASSERT_EQ(r1->outputs[d].size(), r2->outputs[d].size());
      for (size_t j = 0; j < r1->outputs[d].size(); ++j) {
        EXPECT_TRUE(BitwiseEqual(*r1->outputs[d][j], *r2->outputs[d][j])) << entry.path();
      }
    }
  }
  EXPECT_GE(count, 7);
}

// The windowed loops in ag_*/rs_* compute the same values as the plain all-gather/reduce-scatter
// + dot modules (same parameters), up to the accumulation order.
TEST(Modules, WindowedExamplesMatchPlainCounterparts) {
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  for (auto [windowed, plain] : {std::pair{"ag_bf16_two_consumers.hlo", "plain_ag_bf16_two_consumers.hlo"},
                                 std::pair{"rs_fp8.hlo", "plain_rs_fp8.hlo"}}) {
    auto a = Load(std::string("examples/") + plain);
    auto b = Load(std::string("examples/") + windowed);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    CompareOptions co;
    co.eval.seed = 3;
    auto rep = CompareModules(*a, *b, co);
    ASSERT_TRUE(rep.ok()) << windowed << ": " << rep.status().message();
    EXPECT_TRUE(rep->pass) << windowed << "\n" << rep->ToString();
  }
}

TEST(Modules, CompareDetectsADifference) {
  const char* a = R"(
HloModule a, num_partitions=2
ENTRY e {
  x = f32[4] parameter(0)
  ROOT y = f32[4] add(x, x)
})";
  const char* b = R"(
HloModule b, num_partitions=2
ENTRY e {
  x = f32[4] parameter(0)
  c = f32[] constant(2.001)
  cb = f32[4] broadcast(c), dimensions={}
  ROOT y = f32[4] multiply(x, cb)
})";
  auto ma = testing::ParseOrDie(a);
  auto mb = testing::ParseOrDie(b);
  CompareOptions co;
  auto rep = CompareModules(*ma, *mb, co);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_FALSE(rep->pass);
  EXPECT_GT(rep->outputs[0].mismatches, 0);
  co.rtol = 1e-3;  // 2.001/2 - 1 = 5e-4 relative: passes with a looser tolerance
  auto rep2 = CompareModules(*ma, *mb, co);
  ASSERT_TRUE(rep2.ok());
  EXPECT_TRUE(rep2->pass) << rep2->ToString();
}

// The norm-wise term: an error that is large for a near-zero element but small against the
// output's largest magnitude (a summation-order effect) passes; the same error without the term,
// or a larger one, fails.
TEST(Modules, CompareNormWiseTolerance) {
  auto module = [](const std::string& values) {
    return testing::ParseOrDie("HloModule m\nENTRY e {\n  ROOT c = bf16[4] constant({" + values +
                               "})\n}\n");
  };
  auto ref = module("32, 0.01, -5, 1");
  auto near = module("32, 0.26, -5, 1");  // 0.25 off: 1 bf16 ulp at 32, 25x the element
  auto far = module("32, 1.26, -5, 1");   // 1.25 off: 5 ulps at 32
  CompareOptions co;                      // default: 4 ulps at max |A| = 4 * 0.25
  auto r1 = CompareModules(*ref, *near, co);
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  EXPECT_TRUE(r1->pass) << r1->ToString();
  EXPECT_EQ(r1->outputs[0].max_abs_value, 32.0);
  EXPECT_EQ(r1->outputs[0].norm_atol, 1.0);
  EXPECT_THAT(r1->ToString(), HasSubstr("4 ulps at max |A| 32 = 1"));
  auto r2 = CompareModules(*ref, *far, co);
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->pass) << r2->ToString();
  EXPECT_EQ(r2->outputs[0].mismatches, 1);
  co.norm_ulps = 0;  // element-wise only
  auto r3 = CompareModules(*ref, *near, co);
  ASSERT_TRUE(r3.ok());
  EXPECT_FALSE(r3->pass) << r3->ToString();
  // Integers stay exact whatever norm_ulps says.
  auto ia = testing::ParseOrDie("HloModule m\nENTRY e {\n  ROOT c = s32[2] constant({1000, 1})\n}\n");
  auto ib = testing::ParseOrDie("HloModule m\nENTRY e {\n  ROOT c = s32[2] constant({1000, 2})\n}\n");
  co.norm_ulps = 1000;
  auto r4 = CompareModules(*ia, *ib, co);
  ASSERT_TRUE(r4.ok());
  EXPECT_FALSE(r4->pass);
}

TEST(Modules, CompareRejectsDifferentParameters) {
  auto ma = testing::ParseOrDie("HloModule a\nENTRY e {\n  ROOT x = f32[4] parameter(0)\n}\n");
  auto mb = testing::ParseOrDie("HloModule b\nENTRY e {\n  ROOT x = f32[5] parameter(0)\n}\n");
  auto rep = CompareModules(*ma, *mb, CompareOptions{});
  ASSERT_FALSE(rep.ok());
  EXPECT_THAT(std::string(rep.status().message()), HasSubstr("parameter 0"));
}

TEST(Modules, SmallRealModulesRun) {
  WEAVE_SKIP_WITHOUT_SHARED("real");
  for (const char* name : {"real/mha_block_1x12x128x64_bf16.hlo", "real/layer_norm_1x4096x768_bf16.hlo",
                           "real/dlrm_keras_jax_f32_test_step.hlo"}) {
    auto m = Load(name);
    ASSERT_NE(m, nullptr);
    EvalOptions o;
    auto r = RunModule(*m, o);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_FALSE(r->outputs[0].empty());
  }
}

TEST(Modules, HugeModulesAreRefusedUpFront) {
  WEAVE_SKIP_WITHOUT_SHARED("real/hlo_llama31_70b_fp8_16x8.hlo");
  auto m = Load("real/hlo_llama31_70b_fp8_16x8.hlo");
  ASSERT_NE(m, nullptr);
  EvalOptions o;
  o.num_partitions = 128;
  auto r = RunModule(*m, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("GiB"));
}

TEST(Modules, OversizedValuesAreRefusedByNameEvenWithoutAMemoryLimit) {
  // 3e11 x 4 f32 fits int64 but is 4.4 TiB: refused (never an allocation that throws), naming the
  // instruction, even with the module-wide limit lifted (what `weave compile --force` does).
  auto m = ParseHloModule(R"(HloModule big
ENTRY e {
  vast = f32[300000000000,4] parameter(0)
  ROOT neg = f32[300000000000,4] negate(vast)
}
)",
                          "big.hlo");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EvalOptions o;
  o.max_memory_bytes = std::numeric_limits<int64_t>::max();
  for (int pass = 0; pass < 2; ++pass) {
    absl::Status st = pass == 0 ? RunModule(**m, o).status() : MakeInputs(**m, o).status();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("parameter 'vast' in computation 'e': a value of shape "
                          "f32[300000000000,4] needs"));
    EXPECT_THAT(std::string(st.message()), HasSubstr("limit of 64 GiB for one value"));
  }
}

TEST(Modules, InputsFollowShardings) {
  // p0 tiled along dim 1 over 4 partitions, p1 replicated, p2 unsharded.
  const char* text = R"(
HloModule m, num_partitions=4
ENTRY e {
  a = f32[2,3] parameter(0), sharding={devices=[1,4]<=[4]}
  b = f32[5] parameter(1), sharding={replicated}
  c = f32[5] parameter(2)
  ROOT t = (f32[2,3], f32[5], f32[5]) tuple(a, b, c)
})";
  auto m = testing::ParseOrDie(text);
  EvalOptions o;
  o.seed = 11;
  auto in = MakeInputs(*m, o);
  ASSERT_TRUE(in.ok()) << in.status().message();
  // Global array of a is [2,12]; reassemble it from the tiles and check each tile is distinct.
  // c has no sharding: replicated, as XLA's SPMD partitioner treats it (the default).
  for (int d = 1; d < 4; ++d) {
    EXPECT_TRUE(BitwiseEqual(*in->per_device[0][1], *in->per_device[d][1]));
    EXPECT_FALSE(BitwiseEqual(*in->per_device[0][0], *in->per_device[d][0]));
    EXPECT_TRUE(BitwiseEqual(*in->per_device[0][2], *in->per_device[d][2]));
  }
  // The global array given explicitly: partition p gets columns [3p, 3p+3).
  Value g = Value::Zeros(Shape(PrimitiveType::F32, {2, 12}));
  for (int k = 0; k < 24; ++k) g.SetDouble(k, k);
  auto in2 = MakeInputs(*m, o, {InputOverride{0, -1, Share(g)}});
  ASSERT_TRUE(in2.ok()) << in2.status().message();
  EXPECT_THAT(testing::Doubles(*in2->per_device[2][0]),
              ::testing::ElementsAre(6, 7, 8, 18, 19, 20));
  // A wrongly shaped global array is an error.
  auto bad = MakeInputs(*m, o, {InputOverride{0, -1, Share(Value::Zeros(Shape(PrimitiveType::F32, {2, 3})))}});
  EXPECT_FALSE(bad.ok());
  // --vary-unsharded (replicate_unsharded = false) gives c independent values per partition.
  o.replicate_unsharded = false;
  auto in3 = MakeInputs(*m, o);
  ASSERT_TRUE(in3.ok());
  for (int d = 1; d < 4; ++d) {
    EXPECT_FALSE(BitwiseEqual(*in3->per_device[0][2], *in3->per_device[d][2]));
  }
  o.replicate_unsharded = true;
  // Generated floats are in [-1, 1).
  for (double v : testing::Doubles(*in->per_device[0][0])) {
    EXPECT_GE(v, -1);
    EXPECT_LT(v, 1);
  }
}

}  // namespace
}  // namespace weave::eval

namespace weave::eval {
namespace {

// The memory estimate follows the evaluator's plan: a chain of three negates of f32[1024] (4 KiB
// each) holds the input and two values at most (12 KiB), not all four; a loop body's peak stacks
// on the values live at the loop; the device count multiplies.
TEST(Modules, MemoryEstimateFollowsLiveness) {
  auto chain = testing::ParseOrDie(R"(
HloModule chain
ENTRY e {
  x = f32[1024] parameter(0)
  a = f32[1024] negate(x)
  b = f32[1024] negate(a)
  ROOT c = f32[1024] negate(b)
})");
  EXPECT_EQ(EstimateMemoryBytes(*chain, 1), 3 * 4096);
  EXPECT_EQ(EstimateMemoryBytes(*chain, 4), 4 * 3 * 4096);
  auto loop = testing::ParseOrDie(R"(
HloModule loop
body {
  s = (s32[], f32[1024]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[1024] get-tuple-element(s), index=1
  w = f32[1024] negate(v)
  u = f32[1024] negate(w)
  ROOT t = (s32[], f32[1024]) tuple(i, u)
}
cond {
  s = (s32[], f32[1024]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[1024] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[1024]) tuple(zero, x)
  ROOT w = (s32[], f32[1024]) while(init), condition=cond, body=body
})");
  // At the loop: the input (4 KiB), the constant the init tuple holds (8 bytes), the loop's
  // result counted with its leaves (8 + 4096, an over-estimate: it is the body's last values), and
  // the body's peak of two values.
  EXPECT_EQ(EstimateMemoryBytes(*loop, 1), 4096 + 8 + (8 + 4096) + 2 * 4096);
}

// Values the evaluator shares are counted once: a copy holds its operand's storage (b stays
// live after the copy, so a, b and d are the peak, not four values); a parameter whose input is
// held outside the run for every device counts nothing; an all-gather's result is one value for
// its whole group, so each of the 4 devices counts a quarter of it.
TEST(Modules, MemoryEstimateCountsSharedValuesOnce) {
  auto copied = testing::ParseOrDie(R"(
HloModule copied
ENTRY e {
  a = f32[1024] parameter(0)
  b = f32[1024] negate(a)
  c = f32[1024] copy(b)
  ROOT d = f32[1024] add(b, c)
})");
  EXPECT_EQ(EstimateMemoryBytes(*copied, 1), 3 * 4096);
  EXPECT_EQ(EstimateMemoryBytes(*copied, 2, {true}), 2 * 2 * 4096);
  auto gathered = testing::ParseOrDie(R"(
HloModule gathered, num_partitions=4
ENTRY e {
  x = f32[256] parameter(0)
  ROOT g = f32[1024] all-gather(x), channel_id=1, replica_groups={}, dimensions={0}, use_global_device_ids=true
})");
  EXPECT_EQ(EstimateMemoryBytes(*gathered, 4), 4 * (1024 + 1024));
  auto halves = testing::ParseOrDie(R"(
HloModule halves, num_partitions=4
ENTRY e {
  x = f32[512] parameter(0)
  ROOT g = f32[1024] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}, use_global_device_ids=true
})");
  EXPECT_EQ(EstimateMemoryBytes(*halves, 4), 4 * (2048 + 2048));
}

// The evaluator checks a ragged-dot's shapes itself (a module may reach it unverified): the run
// fuzzer's batch-mode ragged-dot with result f32[3,4,2] for operands giving [3,1,1] is an error,
// not a read past the operands.
TEST(Modules, RaggedDotShapesAreCheckedBeforeReading) {
  const std::string base = R"(HloModule rd
ENTRY main {
  l = f32[3,1,2] parameter(0)
  r = f32[3,2,1] parameter(1)
  g = s32[$G] parameter(2)
  ROOT b = f32[$OUT] ragged-dot(l, r, g), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, lhs_ragged_dims={0}
}
)";
  auto text = [&](const std::string& groups, const std::string& out) {
    std::string t = base;
    t.replace(t.find("$G"), 2, groups);
    t.replace(t.find("$OUT"), 4, out);
    return t;
  };
  const std::vector<ValuePtr> args = {
      testing::Arr(PrimitiveType::F32, {3, 1, 2}, {1, 2, 3, 4, 5, 6}),
      testing::Arr(PrimitiveType::F32, {3, 2, 1}, {1, 1, 1, 2, 1, 1}),
      testing::Arr(PrimitiveType::S32, {1}, {2})};
  auto ok = testing::RunWith(text("1", "3,1,1"), args);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(testing::Doubles(*(*ok)[0][0]), (std::vector<double>{3, 11, 0}));
  auto wrong = testing::RunWith(text("1", "3,4,2"), args);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()),
              ::testing::HasSubstr("ragged-dot result 3,4,2 is not the [3,1,1] its operands give"));
}

}  // namespace
}  // namespace weave::eval
