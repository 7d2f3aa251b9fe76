// Path-aware tolerances (eval/output_precision.h): the narrowest rounding type on each output's
// path, the rounding counts, and CompareModules judging outputs with them (issue 14, known
// bug 5).
#include "eval/output_precision.h"

#include "eval/evaluator.h"
#include "eval_test_util.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

// An f32 dot of bf16-dequantized FP8 operands: the dequantizations round to bf16.
constexpr char kFp8DotF32[] = R"(
HloModule m, num_partitions=2
ENTRY e {
  q = f8e4m3fn[4,8] parameter(0)
  s = bf16[] parameter(1), sharding={replicated}
  c = bf16[4,8] convert(q)
  b = bf16[4,8] broadcast(s), dimensions={}
  d = bf16[4,8] multiply(c, b)
  w = bf16[8,2] parameter(2)
  dot = f32[4,2] dot(d, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  wide = f32[8,2] convert(w)
  exact = f32[8,2] negate(wide)
  ROOT t = (f32[4,2], f32[8,2], bf16[8,2]) tuple(dot, exact, w)
})";

TEST(OutputPrecision, NarrowestRoundingTypeOnThePath) {
  auto m = testing::ParseOrDie(kFp8DotF32);
  ASSERT_NE(m, nullptr);
  std::vector<PathPrecision> p = OutputPathPrecisions(*m, 2);
  ASSERT_EQ(p.size(), 3u);
  // The dot: rounded to bf16 at the dequantization, then once more at f32 (not narrower).
  EXPECT_EQ(p[0].type, PrimitiveType::BF16);
  EXPECT_EQ(p[0].roundings, 1);
  EXPECT_EQ(p[0].where, "'d' (multiply)");
  // A widening convert and a negate are exact: nothing on that path rounds.
  EXPECT_EQ(p[1].type, PrimitiveType::kInvalid);
  EXPECT_EQ(p[2].type, PrimitiveType::kInvalid);
}

TEST(OutputPrecision, RingReductionsAndAsyncForms) {
  auto m = testing::ParseOrDie(R"(
HloModule m, num_partitions=4
sum {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[8,4] parameter(0)
  y = bf16[8,4] parameter(1)
  p = bf16[8,4] multiply(x, y)
  st = ((bf16[8,4]), bf16[2,4]) reduce-scatter-start(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=sum
  rs = bf16[2,4] reduce-scatter-done(st)
  ar = bf16[8,4] all-reduce(p), channel_id=2, replica_groups={{0,1},{2,3}}, to_apply=sum
  f = f32[2,4] convert(rs)
  ROOT t = (f32[2,4], bf16[8,4]) tuple(f, ar)
})");
  ASSERT_NE(m, nullptr);
  std::vector<PathPrecision> p = OutputPathPrecisions(*m, 4);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].type, PrimitiveType::BF16);
  EXPECT_EQ(p[0].ring, 4);  // the sugared async reduce-scatter over 4 partitions
  EXPECT_EQ(p[0].roundings, 2);
  EXPECT_EQ(p[1].ring, 2);
  EXPECT_DOUBLE_EQ(MagnitudeUlpsFactor(p[0]), 3.5);
  EXPECT_DOUBLE_EQ(MagnitudeUlpsFactor(p[1]), 2.5);
  EXPECT_DOUBLE_EQ(NormUlpsFactor(p[0]), 1);
}

TEST(OutputPrecision, CalleesRoundToo) {
  auto m = testing::ParseOrDie(R"(
HloModule m
body {
  p = (f32[4], s32[]) parameter(0)
  v = f32[4] get-tuple-element(p), index=0
  h = f16[4] convert(v)
  back = f32[4] convert(h)
  i = s32[] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (f32[4], s32[]) tuple(back, j)
}
cond {
  p = (f32[4], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=1
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[4] parameter(0)
  z = s32[] constant(0)
  init = (f32[4], s32[]) tuple(x, z)
  w = (f32[4], s32[]) while(init), condition=cond, body=body
  ROOT g = f32[4] get-tuple-element(w), index=0
})");
  ASSERT_NE(m, nullptr);
  std::vector<PathPrecision> p = OutputPathPrecisions(*m, 1);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].type, PrimitiveType::F16);
  EXPECT_EQ(p[0].where, "'h' (convert)");
}

TEST(OutputPrecision, MantissaBits) {
  EXPECT_EQ(MantissaBits(PrimitiveType::F32), 23);
  EXPECT_EQ(MantissaBits(PrimitiveType::BF16), 7);
  EXPECT_EQ(MantissaBits(PrimitiveType::F16), 10);
  EXPECT_EQ(MantissaBits(PrimitiveType::F8E4M3FN), 3);
  EXPECT_EQ(MantissaBits(PrimitiveType::F8E5M2), 2);
  EXPECT_EQ(MantissaBits(PrimitiveType::S32), -1);
}

// Known bug 5 of issue 14: the FP8 GEMM form of an f32 dot of bf16-dequantized operands applies
// the scale in f32 and skips the bf16 rounding of the dequantized values. Judged at f32 that
// fails; judged at bf16 (the narrowest type on the input's path) it passes, and a real error
// (the scale applied twice) still fails.
TEST(OutputPrecision, CompareJudgesAtThePathType) {
  auto a = testing::ParseOrDie(kFp8DotF32);
  // B: the scale applied to the f32 result, no bf16 rounding of q*s.
  auto b = testing::ParseOrDie(R"(
HloModule m, num_partitions=2
ENTRY e {
  q = f8e4m3fn[4,8] parameter(0)
  s = bf16[] parameter(1), sharding={replicated}
  c = f32[4,8] convert(q)
  w = bf16[8,2] parameter(2)
  wf = f32[8,2] convert(w)
  raw = f32[4,2] dot(c, wf), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  sf = f32[] convert(s)
  sb = f32[4,2] broadcast(sf), dimensions={}
  dot = f32[4,2] multiply(raw, sb)
  wide = f32[8,2] convert(w)
  exact = f32[8,2] negate(wide)
  ROOT t = (f32[4,2], f32[8,2], bf16[8,2]) tuple(dot, exact, w)
})");
  auto wrong = testing::ParseOrDie(R"(
HloModule m, num_partitions=2
ENTRY e {
  q = f8e4m3fn[4,8] parameter(0)
  s = bf16[] parameter(1), sharding={replicated}
  c = f32[4,8] convert(q)
  w = bf16[8,2] parameter(2)
  wf = f32[8,2] convert(w)
  raw = f32[4,2] dot(c, wf), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  sf = f32[] convert(s)
  ss = f32[] multiply(sf, sf)
  sb = f32[4,2] broadcast(ss), dimensions={}
  dot = f32[4,2] multiply(raw, sb)
  wide = f32[8,2] convert(w)
  exact = f32[8,2] negate(wide)
  ROOT t = (f32[4,2], f32[8,2], bf16[8,2]) tuple(dot, exact, w)
})");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(wrong, nullptr);
  bool some_seed_needs_the_path = false;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    CompareOptions co;
    co.eval.seed = seed;
    auto rep = CompareModules(*a, *b, co);
    ASSERT_TRUE(rep.ok()) << rep.status().message();
    EXPECT_TRUE(rep->pass) << rep->ToString();
    EXPECT_EQ(rep->outputs[0].judged_as, PrimitiveType::BF16);
    EXPECT_NE(rep->outputs[0].path.find("judged as bf16"), std::string::npos);
    EXPECT_EQ(rep->outputs[1].judged_as, PrimitiveType::F32);  // exact path: its own type
    co.path_aware = false;
    auto plain = CompareModules(*a, *b, co);
    ASSERT_TRUE(plain.ok());
    some_seed_needs_the_path |= !plain->pass;
    co.path_aware = true;
    auto bad = CompareModules(*a, *wrong, co);
    ASSERT_TRUE(bad.ok());
    EXPECT_FALSE(bad->pass) << bad->ToString();
  }
  EXPECT_TRUE(some_seed_needs_the_path);
}

// A windowed reduce-scatter adds the partial sums in another order: where they cancel, the
// difference is a few ulps of the partials, not of the (small) result. The ring magnitude run
// measures the partials; a wrong block still fails.
TEST(OutputPrecision, RingTermFollowsThePartialSums) {
  const std::string a_text = R"(
HloModule m, num_partitions=4
sum {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
ENTRY e {
  p = bf16[8] parameter(0)
  ROOT rs = bf16[2] reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=sum
})";
  auto a = testing::ParseOrDie(a_text);
  ASSERT_NE(a, nullptr);
  auto mag = MagnitudeModule(*a);
  ASSERT_NE(mag, nullptr);
  EXPECT_NE(mag->ToString().find("abs("), std::string::npos);
  // Partials 100, -100, 0.5, 0.25 on the four partitions (block 0): the sum is 0.75; a ring
  // that adds (0.5 + 100) first rounds to 100.5 in bf16, then -100 gives 0.5: 1 ulp of 100
  // (0.5) off, 4 ulps' worth at 0.75 would be 0.016.
  EvalOptions eo;
  eo.num_partitions = 4;
  Inputs in;
  for (double v : {100.0, -100.0, 0.5, 0.25}) {
    in.per_device.push_back({testing::Arr(PrimitiveType::BF16, {8}, {v, v, v, v, v, v, v, v})});
  }
  auto ra = RunModule(*a, eo, &in);
  ASSERT_TRUE(ra.ok());
  EvalResult rb = *ra;
  rb.outputs[0][0] = testing::Arr(PrimitiveType::BF16, {2}, {0.5, 0.5});
  CompareOptions co;
  co.eval = eo;
  auto no_ring = CompareResults(*a, *ra, *a, rb, co);
  ASSERT_TRUE(no_ring.ok());
  EXPECT_FALSE(no_ring->pass);
  auto m = RingMagnitudes(*a, eo, in, co);
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto with_ring = CompareResults(*a, *ra, *a, rb, co, &*m);
  ASSERT_TRUE(with_ring.ok());
  EXPECT_TRUE(with_ring->pass) << with_ring->ToString();
  EXPECT_DOUBLE_EQ(with_ring->outputs[0].ring_magnitude, 200);  // 200.75 rounded to bf16
  // A missing partial (-100 dropped: 100.75) still fails.
  rb.outputs[0][0] = testing::Arr(PrimitiveType::BF16, {2}, {100.75, 100.75});
  auto wrong = CompareResults(*a, *ra, *a, rb, co, &*m);
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(wrong->pass);
}


// tanh after a ring reduction: the magnitude run passes the partial sums' magnitude through the
// tanh (|tanh'| <= 1 does not grow their rounding error), instead of tanh of it (<= 1).
TEST(OutputPrecision, MagnitudePassesThroughTanh) {
  const std::string text = R"(
HloModule m, num_partitions=4
sum {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
ENTRY e {
  p = bf16[8] parameter(0)
  rs = bf16[2] reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=sum
  ROOT t = bf16[2] tanh(rs)
})";
  auto a = testing::ParseOrDie(text);
  ASSERT_NE(a, nullptr);
  EvalOptions eo;
  eo.num_partitions = 4;
  Inputs in;
  for (double v : {100.0, -100.0, 0.5, 0.25}) {
    in.per_device.push_back({testing::Arr(PrimitiveType::BF16, {8}, {v, v, v, v, v, v, v, v})});
  }
  CompareOptions co;
  co.eval = eo;
  auto m = RingMagnitudes(*a, eo, in, co);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_FALSE(m->outputs.empty());
  // 200.75 in bf16 (the sum of |partials|), not tanh(200.75) = 1.
  EXPECT_DOUBLE_EQ(m->outputs[0][0]->GetDouble(0), 200);
  // A module without sums has no magnitude module, tanh or not.
  auto plain = testing::ParseOrDie(R"(
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT t = f32[4] tanh(p)
})");
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(MagnitudeModule(*plain), nullptr);
}

}  // namespace
}  // namespace weave::eval

namespace weave::eval {
namespace {

// 1,024 ones summed at bf16: each partial sum rounds, and from 256 on adding 1 rounds back to
// the partial sum (256 + 1 is a tie between 256 and 258, to even: 256). With exact sums the
// reduce adds at f32: 1024. An all-reduce of 256 and 1 rounds 257 to 256 at bf16 (a tie, to
// even); with exact sums it keeps 257.
TEST(ExactSums, ReduceAndAllReduceKeepTheirF32Sums) {
  const char* text = R"(
HloModule sums, num_partitions=2
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT c = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[1024] parameter(0)
  y = bf16[] parameter(1)
  zero = bf16[] constant(0)
  total = bf16[] reduce(x, zero), dimensions={0}, to_apply=add
  across = bf16[] all-reduce(y), channel_id=1, replica_groups={{0,1}}, to_apply=add
  ROOT t = (bf16[], bf16[]) tuple(total, across)
})";
  auto m = testing::ParseOrDie(text);
  ASSERT_NE(m, nullptr);
  Inputs in;
  const ValuePtr ones = testing::Arr(PrimitiveType::BF16, {1024}, std::vector<double>(1024, 1.0));
  in.per_device = {{ones, testing::Arr(PrimitiveType::BF16, {}, {256.0})},
                   {ones, testing::Arr(PrimitiveType::BF16, {}, {1.0})}};
  EvalOptions o;
  o.num_partitions = 2;
  absl::StatusOr<EvalResult> xla = RunModule(*m, o, &in);
  ASSERT_TRUE(xla.ok()) << xla.status();
  EXPECT_EQ(xla->outputs[0][0]->GetDouble(0), 256.0);
  EXPECT_EQ(xla->outputs[1][1]->GetDouble(0), 256.0);
  o.exact_sums = true;
  absl::StatusOr<EvalResult> exact = RunModule(*m, o, &in);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->outputs[0][0]->GetDouble(0), 1024.0);
  EXPECT_EQ(exact->outputs[1][1]->GetDouble(0), 257.0);
}

// A sum reduce's terms reach its output's path; a max reduce adds none; the allowance is
// 2 * lambda * sqrt(L) * u * sum|x| at the path's type.
TEST(ExactSums, SumTermsAndTheAllowance) {
  auto m = testing::ParseOrDie(R"(
HloModule terms
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT c = bf16[] add(a, b)
}
max {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT c = bf16[] maximum(a, b)
}
ENTRY e {
  x = bf16[4,25,16] parameter(0)
  zero = bf16[] constant(0)
  s = bf16[25] reduce(x, zero), dimensions={0,2}, to_apply=add
  mx = bf16[25] reduce(x, zero), dimensions={0,2}, to_apply=max
  ROOT t = (bf16[25], bf16[25]) tuple(s, mx)
})");
  ASSERT_NE(m, nullptr);
  const std::vector<PathPrecision> p = OutputPathPrecisions(*m, 1);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].sum_terms, 64);
  EXPECT_EQ(p[1].sum_terms, 0);
  // bf16: u = 2^-8; 2 * 2 * sqrt(64) * 2^-8 * 100 = 12.5.
  EXPECT_DOUBLE_EQ(SumReassociationAtol(p[0], 100), 12.5);
  EXPECT_DOUBLE_EQ(SumReassociationAtol(p[1], 100), 0);
  // The sum-magnitude module takes |.| of the sum's data operand only.
  std::unique_ptr<HloModule> sm = SumMagnitudeModule(*m);
  ASSERT_NE(sm, nullptr);
  EXPECT_EQ(sm->entry()->GetInstruction("s")->operand(0)->opcode(), HloOpcode::kAbs);
  EXPECT_EQ(sm->entry()->GetInstruction("s")->operand(1)->opcode(), HloOpcode::kConstant);
  EXPECT_EQ(sm->entry()->GetInstruction("mx")->operand(0)->opcode(), HloOpcode::kParameter);
}

// A convolution contracts like a dot: its magnitude run takes |lhs| and |kernel|, and its path
// records the contraction length (input features x window positions).
TEST(OutputPrecision, ConvolutionIsAContraction) {
  auto a = testing::ParseOrDie(R"(
HloModule m
ENTRY e {
  x = f32[2,9,6] parameter(0)
  k = f32[3,6,5] parameter(1)
  ROOT c = f32[2,7,5] convolution(x, k), window={size=3}, dim_labels=b0f_0io->b0f
})");
  ASSERT_NE(a, nullptr);
  auto mag = MagnitudeModule(*a);
  ASSERT_NE(mag, nullptr);
  const std::string text = mag->ToString();
  EXPECT_NE(text.find("abs(%x)"), std::string::npos) << text;
  EXPECT_NE(text.find("abs(%k)"), std::string::npos) << text;
  const std::vector<PathPrecision> p = OutputPathPrecisions(*a, 1);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].k, 18);  // 6 input features x 3 window positions
}

}  // namespace
}  // namespace weave::eval
