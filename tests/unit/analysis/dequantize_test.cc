#include "analysis/dequantize.h"

#include "gtest/gtest.h"
#include "test_util.h"

namespace weave {
namespace {

using testing::Find;
using testing::ParseOrDie;

constexpr char kModule[] = R"(
HloModule dq

ENTRY main {
  q = f8e4m3fn[4,8] parameter(0)
  s = bf16[] parameter(1)
  qe5 = f8e5m2[4,8] parameter(2)
  wide = bf16[4,8] parameter(3)
  c = bf16[4,8] convert(q)
  b = bf16[4,8] broadcast(s), dimensions={}
  m1 = bf16[4,8] multiply(c, b)
  m2 = bf16[4,8] multiply(b, c)
  d1 = bf16[4,8] divide(c, b)
  d2 = bf16[4,8] divide(b, c)
  c5 = bf16[4,8] convert(qe5)
  m5 = bf16[4,8] multiply(c5, b)
  cw = bf16[4,8] convert(wide)
  mw = bf16[4,8] multiply(cw, b)
  sv = bf16[8] parameter(4)
  bv = bf16[4,8] broadcast(sv), dimensions={1}
  mv = bf16[4,8] multiply(c, bv)
  a1 = bf16[4,8] add(c, b)
  ROOT t = (bf16[4,8], bf16[4,8], bf16[4,8], bf16[4,8], bf16[4,8], bf16[4,8], bf16[4,8], bf16[4,8]) tuple(m1, m2, d1, d2, m5, mw, mv, a1)
}
)";

TEST(Dequantize, MatchesMultiplyEitherOrder) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  for (const char* name : {"m1", "m2"}) {
    std::optional<DequantMatch> d = MatchDequantize(Find(*m, name));
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(d->q, Find(*m, "q"));
    EXPECT_EQ(d->convert, Find(*m, "c"));
    EXPECT_EQ(d->broadcast, Find(*m, "b"));
    EXPECT_EQ(d->scale, Find(*m, "s"));
    EXPECT_FALSE(d->is_divide);
    EXPECT_EQ(d->wide_type, PrimitiveType::BF16);
    EXPECT_EQ(d->fp8_type, PrimitiveType::F8E4M3FN);
    EXPECT_TRUE(IsScalarScale(*d));
  }
}

TEST(Dequantize, DivideOnlyWithConvertAsDividend) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  std::optional<DequantMatch> d = MatchDequantize(Find(*m, "d1"));
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->is_divide);
  EXPECT_FALSE(MatchDequantize(Find(*m, "d2")).has_value());
}

TEST(Dequantize, TypesAndScaleShape) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  std::optional<DequantMatch> e5 = MatchDequantize(Find(*m, "m5"));
  ASSERT_TRUE(e5.has_value());
  EXPECT_EQ(e5->fp8_type, PrimitiveType::F8E5M2);
  EXPECT_FALSE(MatchDequantize(Find(*m, "mw")).has_value());  // convert from bf16, not FP8
  EXPECT_FALSE(MatchDequantize(Find(*m, "a1")).has_value());  // add
  std::optional<DequantMatch> vec = MatchDequantize(Find(*m, "mv"));
  ASSERT_TRUE(vec.has_value());
  EXPECT_FALSE(IsScalarScale(*vec));
  EXPECT_FALSE(MatchDequantize(nullptr).has_value());
}

TEST(Dequantize, BuildRoundTripsThroughMatch) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  HloComputation* entry = m->entry();
  HloInstruction* q = Find(*m, "qe5");
  HloInstruction* s = Find(*m, "s");
  HloInstruction* d = BuildDequantize(entry, q, s, /*divide=*/true, PrimitiveType::BF16,
                                      Shape(PrimitiveType::F32, {4, 8}));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->opcode(), HloOpcode::kDivide);
  EXPECT_TRUE(d->shape().Compatible(Shape(PrimitiveType::BF16, {4, 8})));
  std::optional<DequantMatch> back = MatchDequantize(d);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->q, q);
  EXPECT_EQ(back->scale, s);
  EXPECT_TRUE(back->is_divide);
  EXPECT_TRUE(IsScalarScale(*back));
  EXPECT_EQ(d->parent(), entry);

  HloInstruction* mul = BuildDequantize(entry, Find(*m, "q"), s, false, PrimitiveType::BF16,
                                        Shape(PrimitiveType::BF16, {4, 8}));
  EXPECT_EQ(mul->opcode(), HloOpcode::kMultiply);
  EXPECT_EQ(MatchDequantize(mul)->q, Find(*m, "q"));
}

TEST(Dequantize, TypePredicates) {
  EXPECT_TRUE(IsDequantizableFp8(PrimitiveType::F8E4M3FN));
  EXPECT_TRUE(IsDequantizableFp8(PrimitiveType::F8E5M2));
  // ROCm's FNUZ pair, as XLA's handler and GEMM rewriter accept it; not the other FP8 formats.
  EXPECT_TRUE(IsDequantizableFp8(PrimitiveType::F8E4M3FNUZ));
  EXPECT_TRUE(IsDequantizableFp8(PrimitiveType::F8E5M2FNUZ));
  EXPECT_FALSE(IsDequantizableFp8(PrimitiveType::F8E4M3B11FNUZ));
  EXPECT_FALSE(IsDequantizableFp8(PrimitiveType::F8E4M3));
  EXPECT_FALSE(IsDequantizableFp8(PrimitiveType::BF16));
  EXPECT_TRUE(IsDequantWideType(PrimitiveType::F16));
  EXPECT_FALSE(IsDequantWideType(PrimitiveType::F64));
}

}  // namespace
}  // namespace weave
