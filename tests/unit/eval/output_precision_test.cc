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
  EXPECT_DOUBLE_EQ(NormUlpsFactor(p[0]), 2.5);
  EXPECT_DOUBLE_EQ(NormUlpsFactor(p[1]), 1.5);
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

}  // namespace
}  // namespace weave::eval
