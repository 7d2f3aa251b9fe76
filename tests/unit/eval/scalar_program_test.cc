// ScalarProgram (src/eval/scalar_program.h): compiled comparators give the answers worked out by
// hand, element by element, so that a broken step is seen here and not only hidden behind the
// sort's replay against the interpreter.
#include "eval/scalar_program.h"

#include <cmath>
#include <limits>
#include <string>

#include "eval_test_util.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

using testing::Arr;
using testing::ParseOrDie;

// JAX's descending top-k comparator: a total-order integer key of each bf16 value (negative
// floats mapped by 0x7fffffff - bits), greater key first, ties by the smaller index.
constexpr char kJaxTopK[] = R"(HloModule m
desc {
  va = bf16[] parameter(0)
  vb = bf16[] parameter(1)
  ia = s32[] parameter(2)
  ib = s32[] parameter(3)
  fa = f32[] convert(va)
  sa = s32[] bitcast-convert(fa)
  zero = s32[] constant(0)
  nega = pred[] compare(sa, zero), direction=LT
  big = u32[] constant(2147483647)
  ua = u32[] bitcast-convert(fa)
  da = u32[] subtract(big, ua)
  ka0 = s32[] bitcast-convert(da)
  ka = s32[] select(nega, ka0, sa)
  fb = f32[] convert(vb)
  sb = s32[] bitcast-convert(fb)
  negb = pred[] compare(sb, zero), direction=LT
  ub = u32[] bitcast-convert(fb)
  db = u32[] subtract(big, ub)
  kb0 = s32[] bitcast-convert(db)
  kb = s32[] select(negb, kb0, sb)
  gt = pred[] compare(ka, kb), direction=GT
  lt = pred[] compare(kb, ka), direction=GT
  tie = pred[] compare(gt, lt), direction=EQ
  first = pred[] compare(ia, ib), direction=LT
  ROOT r = pred[] select(tie, first, gt)
}
ENTRY e {
  p = bf16[4] parameter(0)
  ROOT n = bf16[4] negate(p)
}
)";

TEST(ScalarProgram, JaxTopKComparatorByHand) {
  auto m = ParseOrDie(kJaxTopK);
  ASSERT_NE(m, nullptr);
  auto prog = ScalarProgram::Compile(*m->GetComputation("desc"));
  ASSERT_TRUE(prog.has_value());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Values and their rank in the comparator's order (0 first): NaN, 7, 1.5 (index 0), 1.5
  // (index 2), +0, -0, -2, -inf.
  auto keys = Arr(PrimitiveType::BF16, {8}, {1.5, -2, 1.5, nan, -0.0, 0.0, 7, -inf});
  auto index = Arr(PrimitiveType::S32, {8}, {0, 1, 2, 3, 4, 5, 6, 7});
  const int rank[8] = {2, 6, 3, 0, 5, 4, 1, 7};
  const Value* vals[2] = {keys.get(), index.get()};
  prog->CacheLine(vals, {0, 1, 2, 3, 4, 5, 6, 7});
  for (int x = 0; x < 8; ++x) {
    for (int y = 0; y < 8; ++y) {
      EXPECT_EQ(prog->Compare(x, y) != 0, rank[x] < rank[y]) << "x=" << x << " y=" << y;
    }
  }
}

TEST(ScalarProgram, ArithmeticWrapsAndRoundsLikeTheArrayKernels) {
  // u8 add wraps at 256; a bf16 sum rounds to bf16 (256 + 1 stays 256); compare on the results.
  auto m = ParseOrDie(R"(HloModule m
c {
  a = u8[] parameter(0)
  b = u8[] parameter(1)
  x = bf16[] parameter(2)
  y = bf16[] parameter(3)
  s = u8[] add(a, b)
  ten = u8[] constant(10)
  small = pred[] compare(s, ten), direction=LT
  one = bf16[] constant(1)
  xs = bf16[] add(x, one)
  same = pred[] compare(xs, y), direction=EQ
  ROOT both = pred[] and(small, same)
}
ENTRY e {
  ROOT k = u8[] constant(0)
}
)");
  ASSERT_NE(m, nullptr);
  auto prog = ScalarProgram::Compile(*m->GetComputation("c"));
  ASSERT_TRUE(prog.has_value());
  auto a = Arr(PrimitiveType::U8, {2}, {250, 6});
  auto x = Arr(PrimitiveType::BF16, {2}, {256, 3});
  const Value* vals[2] = {a.get(), x.get()};
  prog->CacheLine(vals, {0, 1});
  // (left 0, right 1): 250 + 6 = 256 -> 0 < 10; bf16 256 + 1 = 256, right bf16 is 3: false.
  EXPECT_EQ(prog->Compare(0, 1), 0);
  // (left 1, right 0): 6 + 250 wraps to 0 < 10; 3 + 1 = 4 vs 256: false.
  EXPECT_EQ(prog->Compare(1, 0), 0);
  // (left 0, right 0): 250 + 250 = 500 mod 256 = 244, not < 10.
  EXPECT_EQ(prog->Compare(0, 0), 0);
  // (left 1, right 1): 12 is not < 10.
  EXPECT_EQ(prog->Compare(1, 1), 0);
  auto x2 = Arr(PrimitiveType::BF16, {2}, {256, 256});
  auto a2 = Arr(PrimitiveType::U8, {2}, {250, 7});
  const Value* vals2[2] = {a2.get(), x2.get()};
  prog->CacheLine(vals2, {0, 1});
  // 250 + 7 wraps to 1 < 10, and bf16 256 + 1 rounds to 256 == 256.
  EXPECT_EQ(prog->Compare(0, 1), 1);
  EXPECT_EQ(prog->Compare(1, 0), 1);
}

TEST(ScalarProgram, EveryDirectionOnTiesAndOrder) {
  // s32 and f32 (IEEE: NaN unordered) compares of left against right, all six directions.
  const char* dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  // Expected for (left, right) = (1, 1), (1, 2), (2, 1) per direction, by hand.
  const bool want[6][3] = {{1, 0, 0}, {0, 1, 1}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1}};
  for (const char* type : {"s32", "f32"}) {
    for (int d = 0; d < 6; ++d) {
      auto m = ParseOrDie(std::string("HloModule m\nc {\n  a = ") + type + "[] parameter(0)\n  b = " +
                          type + "[] parameter(1)\n  ROOT r = pred[] compare(a, b), direction=" +
                          dirs[d] + "\n}\nENTRY e {\n  ROOT k = f32[] constant(0)\n}\n");
      ASSERT_NE(m, nullptr);
      auto prog = ScalarProgram::Compile(*m->GetComputation("c"));
      ASSERT_TRUE(prog.has_value());
      auto v = Arr(std::string(type) == "s32" ? PrimitiveType::S32 : PrimitiveType::F32, {3},
                   {1, 2, std::numeric_limits<double>::quiet_NaN()});
      const Value* vals[1] = {v.get()};
      prog->CacheLine(vals, {0, 1, 2});
      EXPECT_EQ(prog->Compare(0, 0) != 0, want[d][0]) << type << " " << dirs[d];
      EXPECT_EQ(prog->Compare(0, 1) != 0, want[d][1]) << type << " " << dirs[d];
      EXPECT_EQ(prog->Compare(1, 0) != 0, want[d][2]) << type << " " << dirs[d];
      if (std::string(type) == "f32") {
        // NaN against 1: only NE holds in IEEE order.
        EXPECT_EQ(prog->Compare(2, 0) != 0, d == 1) << dirs[d];
      }
    }
  }
}

TEST(ScalarProgram, TotalOrderUnsignedUnaryConvertAndMinMaxByHand) {
  // One comparator per step kind the others leave out, each against values worked out by hand:
  //  t: f32 TOTALORDER LT: -0 < +0 and -NaN < -inf, +inf < +NaN (IEEE says false for all three);
  //  u: u64 LT on values past 2^63 (unsigned);
  //  n: negate/abs on s8 wrap (-(-128) = -128, |-128| = -128);
  //  c: f64 -> s32 convert truncates toward zero (-2.7 -> -2) and min/max pick by value.
  auto m = ParseOrDie(R"(HloModule m
t {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
u {
  a = u64[] parameter(0)
  b = u64[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
n {
  a = s8[] parameter(0)
  b = s8[] parameter(1)
  na = s8[] negate(a)
  ab = s8[] abs(b)
  ROOT eq = pred[] compare(na, ab), direction=EQ
}
c {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ia = s32[] convert(a)
  lo = f64[] minimum(a, b)
  hi = f64[] maximum(a, b)
  m2 = s32[] constant(-2)
  trunc = pred[] compare(ia, m2), direction=EQ
  order = pred[] compare(lo, hi), direction=LT
  ROOT both = pred[] and(trunc, order)
}
ENTRY e {
  ROOT k = f32[] constant(0)
}
)");
  ASSERT_NE(m, nullptr);
  const double inf = std::numeric_limits<double>::infinity();
  auto t = ScalarProgram::Compile(*m->GetComputation("t"));
  ASSERT_TRUE(t.has_value());
  auto tv = Arr(PrimitiveType::F32, {6}, {-0.0, 0.0, -std::numeric_limits<double>::quiet_NaN(), -inf, inf,
                                          std::numeric_limits<double>::quiet_NaN()});
  const Value* tvals[1] = {tv.get()};
  t->CacheLine(tvals, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(t->Compare(0, 1), 1);  // -0 < +0
  EXPECT_EQ(t->Compare(1, 0), 0);
  EXPECT_EQ(t->Compare(2, 3), 1);  // -NaN < -inf
  EXPECT_EQ(t->Compare(4, 5), 1);  // +inf < +NaN
  EXPECT_EQ(t->Compare(5, 4), 0);

  auto u = ScalarProgram::Compile(*m->GetComputation("u"));
  ASSERT_TRUE(u.has_value());
  Value uv = Value::Zeros(Shape(PrimitiveType::U64, {2}));
  uv.i = {1, static_cast<int64_t>(uint64_t{1} << 63)};  // 1 and 2^63 (negative as int64)
  const Value* uvals[1] = {&uv};
  u->CacheLine(uvals, {0, 1});
  EXPECT_EQ(u->Compare(0, 1), 1);  // 1 < 2^63 unsigned
  EXPECT_EQ(u->Compare(1, 0), 0);

  auto n = ScalarProgram::Compile(*m->GetComputation("n"));
  ASSERT_TRUE(n.has_value());
  auto nv = Arr(PrimitiveType::S8, {2}, {-128, 5});
  const Value* nvals[1] = {nv.get()};
  n->CacheLine(nvals, {0, 1});
  EXPECT_EQ(n->Compare(0, 0), 1);  // -(-128) wraps to -128 == |-128| wraps to -128
  EXPECT_EQ(n->Compare(1, 1), 0);  // -5 != 5

  auto c = ScalarProgram::Compile(*m->GetComputation("c"));
  ASSERT_TRUE(c.has_value());
  auto cv = Arr(PrimitiveType::F64, {2}, {-2.7, 10.5});
  const Value* cvals[1] = {cv.get()};
  c->CacheLine(cvals, {0, 1});
  EXPECT_EQ(c->Compare(0, 1), 1);  // convert(-2.7) = -2; min -2.7 < max 10.5
  EXPECT_EQ(c->Compare(1, 0), 0);  // convert(10.5) = 10
  EXPECT_EQ(c->Compare(0, 0), 0);  // min == max
}

TEST(ScalarProgram, DeclinesWhatItDoesNotCompile) {
  auto m = ParseOrDie(R"(HloModule m
c {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  e = f32[] exponential(a)
  ROOT lt = pred[] compare(e, b), direction=LT
}
ENTRY e {
  ROOT k = f32[] constant(0)
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(ScalarProgram::Compile(*m->GetComputation("c")).has_value());
}

}  // namespace
}  // namespace weave::eval
