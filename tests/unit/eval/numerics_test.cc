// Element-type numerics: every FP8 code in both directions, rounding boundaries, bf16/f16 ties,
// subnormals, NaN and infinity, integer wrapping. Expected values come from the format
// definitions written out here, not from the code under test.
#include <cmath>
#include <cstring>
#include <limits>

#include "eval/numerics.h"
#include "eval_test_util.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

// Independent decoding of an 8-bit float code: 1 sign bit, e exponent bits, m mantissa bits.
double DecodeRef(uint32_t code, int e_bits, int m_bits, int bias, bool fn_nan_only) {
  const bool neg = (code >> (e_bits + m_bits)) & 1;
  const uint32_t e = (code >> m_bits) & ((1u << e_bits) - 1);
  const uint32_t m = code & ((1u << m_bits) - 1);
  double v;
  if (fn_nan_only) {
    if (e == (1u << e_bits) - 1 && m == (1u << m_bits) - 1) return NAN;
  } else if (e == (1u << e_bits) - 1) {
    if (m != 0) return NAN;
    return neg ? -INFINITY : INFINITY;
  }
  if (e == 0) {
    v = m * std::pow(2.0, 1 - bias - m_bits);
  } else {
    v = (1.0 + m / std::pow(2.0, m_bits)) * std::pow(2.0, static_cast<int>(e) - bias);
  }
  return neg ? -v : v;
}

TEST(Fp8, E4M3FnAllCodes) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double ref = DecodeRef(c, 4, 3, 7, /*fn_nan_only=*/true);
    const double got = DecodeFloat(c, PrimitiveType::F8E4M3FN);
    if (std::isnan(ref)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_TRUE(std::isnan(RoundToType(ref, PrimitiveType::F8E4M3FN)));
      continue;
    }
    EXPECT_EQ(got, ref) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(ref)) << c;
    EXPECT_EQ(RoundToType(ref, PrimitiveType::F8E4M3FN), ref) << "code " << c;
    EXPECT_EQ(EncodeFloat(ref, PrimitiveType::F8E4M3FN), c) << "value " << ref;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF
  EXPECT_EQ(MaxFinite(PrimitiveType::F8E4M3FN), 448.0);
  EXPECT_EQ(DecodeFloat(0x7E, PrimitiveType::F8E4M3FN), 448.0);
  EXPECT_EQ(DecodeFloat(0x01, PrimitiveType::F8E4M3FN), std::ldexp(1.0, -9));
}

TEST(Fp8, E5M2AllCodes) {
  int nans = 0, infs = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double ref = DecodeRef(c, 5, 2, 15, /*fn_nan_only=*/false);
    const double got = DecodeFloat(c, PrimitiveType::F8E5M2);
    if (std::isnan(ref)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    if (std::isinf(ref)) ++infs;
    EXPECT_EQ(got, ref) << "code " << c;
    EXPECT_EQ(RoundToType(ref, PrimitiveType::F8E5M2), ref) << "code " << c;
    EXPECT_EQ(EncodeFloat(ref, PrimitiveType::F8E5M2), c) << "value " << ref;
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(DecodeFloat(0x7B, PrimitiveType::F8E5M2), 57344.0);
}

// Every midpoint between adjacent finite values rounds to the one with the even code; just
// below/above go down/up.
void CheckMidpoints(PrimitiveType t, int e_bits, int m_bits, int bias, bool fn) {
  std::vector<std::pair<double, uint32_t>> pos;
  const uint32_t half = 1u << (e_bits + m_bits);
  for (uint32_t c = 0; c < half; ++c) {
    const double v = DecodeRef(c, e_bits, m_bits, bias, fn);
    if (std::isfinite(v)) pos.push_back({v, c});
  }
  for (size_t k = 0; k + 1 < pos.size(); ++k) {
    const double lo = pos[k].first, hi = pos[k + 1].first;
    const double mid = (lo + hi) / 2;
    const double expect_mid = (pos[k].second % 2 == 0) ? lo : hi;
    EXPECT_EQ(RoundToType(mid, t), expect_mid) << "between " << lo << " and " << hi;
    EXPECT_EQ(RoundToType(-mid, t), -expect_mid);
    const double eps = (hi - lo) * 1e-3;
    EXPECT_EQ(RoundToType(mid - eps, t), lo);
    EXPECT_EQ(RoundToType(mid + eps, t), hi);
  }
}

TEST(Fp8, E4M3FnRoundingBoundaries) {
  CheckMidpoints(PrimitiveType::F8E4M3FN, 4, 3, 7, true);
  const PrimitiveType t = PrimitiveType::F8E4M3FN;
  // Past the largest finite value (448): XLA's convert gives NaN (no infinity in the type).
  EXPECT_EQ(RoundToType(464.0, t), 448.0);  // tie between 448 (even) and 480 -> 448
  EXPECT_TRUE(std::isnan(RoundToType(464.5, t)));
  EXPECT_TRUE(std::isnan(RoundToType(480.0, t)));
  EXPECT_TRUE(std::isnan(RoundToType(-1e9, t)));
  EXPECT_TRUE(std::isnan(RoundToType(INFINITY, t)));
  EXPECT_TRUE(std::isnan(RoundToType(NAN, t)));
  // Subnormals: smallest 2^-9; half of it is a tie with 0 (even) -> 0.
  EXPECT_EQ(RoundToType(std::ldexp(1.0, -10), t), 0.0);
  EXPECT_EQ(RoundToType(std::ldexp(1.5, -10), t), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::signbit(RoundToType(-std::ldexp(1.0, -11), t)));
}

TEST(Fp8, E5M2RoundingBoundaries) {
  CheckMidpoints(PrimitiveType::F8E5M2, 5, 2, 15, false);
  const PrimitiveType t = PrimitiveType::F8E5M2;
  EXPECT_EQ(RoundToType(61439.0, t), 57344.0);
  EXPECT_EQ(RoundToType(61440.0, t), INFINITY);  // tie with 65536 (even) -> overflow -> inf
  EXPECT_EQ(RoundToType(-1e9, t), -INFINITY);
  EXPECT_EQ(RoundToType(INFINITY, t), INFINITY);
  EXPECT_TRUE(std::isnan(RoundToType(NAN, t)));
  EXPECT_EQ(RoundToType(std::ldexp(1.0, -17), t), 0.0);  // half the smallest subnormal 2^-16
}

// Independent decoding of an FNUZ code (e.g. f8e4m3fnuz: bias 8): 0x80 is the only NaN, there
// are no infinities and no negative zero; every other code is a finite number.
double DecodeFnuzRef(uint32_t code, int e_bits, int m_bits, int bias) {
  if (code == 0x80) return NAN;
  const bool neg = (code >> 7) & 1;
  const uint32_t e = (code >> m_bits) & ((1u << e_bits) - 1);
  const uint32_t m = code & ((1u << m_bits) - 1);
  const double v = e == 0 ? m * std::pow(2.0, 1 - bias - m_bits)
                          : (1.0 + m / std::pow(2.0, m_bits)) * std::pow(2.0, static_cast<int>(e) - bias);
  return neg ? -v : v;
}

void CheckFnuzAllCodes(PrimitiveType t, int e_bits, int m_bits, int bias, double max) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double ref = DecodeFnuzRef(c, e_bits, m_bits, bias);
    const double got = DecodeFloat(c, t);
    if (std::isnan(ref)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(EncodeFloat(NAN, t), 0x80u);
      continue;
    }
    EXPECT_EQ(got, ref) << "code " << c;
    EXPECT_FALSE(std::signbit(got) && got == 0) << "negative zero from code " << c;
    EXPECT_EQ(RoundToType(ref, t), ref) << "code " << c;
    EXPECT_EQ(EncodeFloat(ref, t), c) << "value " << ref;
  }
  EXPECT_EQ(nans, 1);
  EXPECT_EQ(MaxFinite(t), max);
  EXPECT_EQ(DecodeFloat(0x7F, t), max);
  EXPECT_EQ(DecodeFloat(0xFF, t), -max);
  EXPECT_FALSE(HasInfinity(t));
  // No negative zero: -0 and negative values that round to zero give +0 (code 0x00).
  EXPECT_FALSE(std::signbit(RoundToType(-0.0, t)));
  EXPECT_FALSE(std::signbit(RoundToType(-std::ldexp(1.0, -40), t)));
  EXPECT_EQ(EncodeFloat(-0.0, t), 0u);
  // Non-saturating convert: past the largest value, and infinities, become the NaN.
  EXPECT_TRUE(std::isnan(RoundToType(2 * max, t)));
  EXPECT_TRUE(std::isnan(RoundToType(-INFINITY, t)));
  EXPECT_TRUE(std::isnan(RoundToType(NAN, t)));
}

TEST(Fp8, FnuzAllCodes) {
  CheckFnuzAllCodes(PrimitiveType::F8E4M3FNUZ, 4, 3, 8, 240.0);
  CheckFnuzAllCodes(PrimitiveType::F8E5M2FNUZ, 5, 2, 16, 57344.0);
  CheckFnuzAllCodes(PrimitiveType::F8E4M3B11FNUZ, 4, 3, 11, 30.0);
  // Smallest subnormals: 2^-10 (E4M3FNUZ) and 2^-17 (E5M2FNUZ), one binade below the FN types.
  EXPECT_EQ(DecodeFloat(0x01, PrimitiveType::F8E4M3FNUZ), std::ldexp(1.0, -10));
  EXPECT_EQ(DecodeFloat(0x01, PrimitiveType::F8E5M2FNUZ), std::ldexp(1.0, -17));
}

TEST(Fp8, FnuzRoundingBoundaries) {
  for (auto [t, e, m, bias] : {std::tuple{PrimitiveType::F8E4M3FNUZ, 4, 3, 8},
                               std::tuple{PrimitiveType::F8E5M2FNUZ, 5, 2, 16}}) {
    std::vector<std::pair<double, uint32_t>> pos;
    for (uint32_t c = 0; c < 128; ++c) pos.push_back({DecodeFnuzRef(c, e, m, bias), c});
    for (size_t k = 0; k + 1 < pos.size(); ++k) {
      const double lo = pos[k].first, hi = pos[k + 1].first;
      const double mid = (lo + hi) / 2;
      const double expect_mid = (pos[k].second % 2 == 0) ? lo : hi;
      EXPECT_EQ(RoundToType(mid, t), expect_mid) << "between " << lo << " and " << hi;
      EXPECT_EQ(RoundToType(-mid, t), expect_mid == 0 ? 0.0 : -expect_mid);
    }
  }
  // E4M3FNUZ: 240 is the largest; 248 is the tie with 256 (even mantissa: 256) -> overflow -> NaN.
  EXPECT_EQ(RoundToType(247.0, PrimitiveType::F8E4M3FNUZ), 240.0);
  EXPECT_TRUE(std::isnan(RoundToType(248.0, PrimitiveType::F8E4M3FNUZ)));
}

double DecodeHalfLike(uint32_t c, int e_bits, int m_bits, int bias) {
  return DecodeRef(c, e_bits, m_bits, bias, false);
}

TEST(Bf16F16, AllCodesRoundTrip) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const double b = DecodeHalfLike(c, 8, 7, 127);
    const double h = DecodeHalfLike(c, 5, 10, 15);
    if (!std::isnan(b)) {
      ASSERT_EQ(RoundToType(b, PrimitiveType::BF16), b) << c;
      ASSERT_EQ(RoundToBf16(static_cast<float>(b)), static_cast<float>(b)) << c;
      ASSERT_EQ(EncodeFloat(b, PrimitiveType::BF16), c) << c;
      ASSERT_EQ(DecodeFloat(c, PrimitiveType::BF16), b) << c;
    }
    if (!std::isnan(h)) {
      ASSERT_EQ(RoundToType(h, PrimitiveType::F16), h) << c;
      ASSERT_EQ(RoundFloatToType(static_cast<float>(h), PrimitiveType::F16), static_cast<float>(h));
      ASSERT_EQ(EncodeFloat(h, PrimitiveType::F16), c) << c;
    }
  }
}

TEST(Bf16F16, TiesSubnormalsNanInf) {
  const PrimitiveType bf = PrimitiveType::BF16, hf = PrimitiveType::F16;
  // bf16 has 7 mantissa bits: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7 -> 1 (even).
  EXPECT_EQ(RoundToType(1.0 + std::ldexp(1.0, -8), bf), 1.0);
  EXPECT_EQ(RoundToType(1.0 + 3 * std::ldexp(1.0, -8), bf), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Subnormals: smallest bf16 subnormal is 2^-133.
  EXPECT_EQ(RoundToType(std::ldexp(1.0, -134), bf), 0.0);
  EXPECT_EQ(RoundToType(std::ldexp(1.5, -134), bf), std::ldexp(1.0, -133));
  EXPECT_EQ(RoundToBf16(std::ldexp(1.5f, -134)), std::ldexp(1.0f, -133));
  // Overflow -> inf; NaN stays NaN.
  EXPECT_EQ(RoundToType(3.4e38, bf), INFINITY);
  EXPECT_EQ(RoundToBf16(3.4e38f), INFINITY);
  EXPECT_TRUE(std::isnan(RoundToBf16(NAN)));
  EXPECT_EQ(RoundToBf16(-INFINITY), -INFINITY);
  // f16: 10 mantissa bits, max 65504, smallest subnormal 2^-24.
  EXPECT_EQ(RoundToType(65519.0, hf), 65504.0);
  EXPECT_EQ(RoundToType(65520.0, hf), INFINITY);  // tie with 65536 (even) -> inf
  EXPECT_EQ(RoundToType(1.0 + std::ldexp(1.0, -11), hf), 1.0);
  EXPECT_EQ(RoundToType(std::ldexp(1.0, -25), hf), 0.0);
  EXPECT_EQ(RoundToType(std::ldexp(3.0, -26), hf), std::ldexp(1.0, -24));
  EXPECT_EQ(RoundFloatToType(std::ldexp(3.0f, -26), hf), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(RoundToType(NAN, hf)));
}

TEST(Bf16F16, FastAndGenericPathsAgree) {
  uint32_t state = 12345;
  for (int k = 0; k < 200000; ++k) {
    state = state * 1664525u + 1013904223u;
    float x;
    std::memcpy(&x, &state, 4);
    if (std::isnan(x)) continue;
    ASSERT_EQ(RoundToBf16(x), static_cast<float>(RoundToType(x, PrimitiveType::BF16))) << x;
    ASSERT_EQ(RoundFloatToType(x, PrimitiveType::F16),
              static_cast<float>(RoundToType(x, PrimitiveType::F16))) << x;
  }
}

TEST(Integers, WrapAndConvert) {
  EXPECT_EQ(WrapToType(128, PrimitiveType::S8), -128);
  EXPECT_EQ(WrapToType(-1, PrimitiveType::U8), 255);
  EXPECT_EQ(WrapToType(int64_t{1} << 32, PrimitiveType::S32), 0);
  EXPECT_EQ(WrapToType(5, PrimitiveType::PRED), 1);
  EXPECT_EQ(FloatToInteger(-2.7, PrimitiveType::S32), -2);
  EXPECT_EQ(FloatToInteger(1e20, PrimitiveType::S32), 2147483647);
  EXPECT_EQ(FloatToInteger(-1e20, PrimitiveType::S8), -128);
  EXPECT_EQ(FloatToInteger(-3.0, PrimitiveType::U16), 0);
  EXPECT_EQ(FloatToInteger(NAN, PrimitiveType::S32), 0);
}

// Both directions through the evaluator's convert: f32 -> f8 -> f32 for every code's value.
TEST(Fp8, ConvertThroughEvaluator) {
  for (auto [t, name, e, m, bias, fn] :
       {std::tuple{PrimitiveType::F8E4M3FN, "f8e4m3fn", 4, 3, 7, 1},
        std::tuple{PrimitiveType::F8E5M2, "f8e5m2", 5, 2, 15, 0},
        std::tuple{PrimitiveType::F8E4M3FNUZ, "f8e4m3fnuz", 4, 3, 8, 2},
        std::tuple{PrimitiveType::F8E5M2FNUZ, "f8e5m2fnuz", 5, 2, 16, 2}}) {
    std::vector<double> vals;
    for (uint32_t c = 0; c < 256; ++c) {
      vals.push_back(fn == 2 ? DecodeFnuzRef(c, e, m, bias) : DecodeRef(c, e, m, bias, fn == 1));
    }
    const std::string text = absl::StrCat(R"(
HloModule cvt
ENTRY e {
  x = f32[256] parameter(0)
  q = )", name, R"([256] convert(x)
  ROOT back = f32[256] convert(q)
})");
    auto out = testing::RunWith(text, {testing::Arr(PrimitiveType::F32, {256}, vals)});
    ASSERT_TRUE(out.ok()) << out.status().message();
    const Value& r = *(*out)[0][0];
    for (size_t c = 0; c < 256; ++c) {
      if (std::isnan(vals[c])) {
        EXPECT_TRUE(std::isnan(r.GetDouble(static_cast<int64_t>(c))));
      } else {
        EXPECT_EQ(r.GetDouble(static_cast<int64_t>(c)), vals[c]) << name << " code " << c;
      }
    }
    (void)t;
  }
}

TEST(Numerics, UlpOf) {
  EXPECT_EQ(UlpOf(1.0, PrimitiveType::BF16), std::ldexp(1.0, -7));
  EXPECT_EQ(UlpOf(1.99, PrimitiveType::BF16), std::ldexp(1.0, -7));
  EXPECT_EQ(UlpOf(-40.0, PrimitiveType::BF16), 0.25);
  EXPECT_EQ(UlpOf(1.0, PrimitiveType::F32), std::ldexp(1.0, -23));
  EXPECT_EQ(UlpOf(1.0, PrimitiveType::F64), std::ldexp(1.0, -52));
  EXPECT_EQ(UlpOf(448.0, PrimitiveType::F8E4M3FN), 32.0);
  EXPECT_EQ(UlpOf(1000.0, PrimitiveType::F16), 0.5);
  // Zero and subnormals: the spacing of the smallest exponent.
  EXPECT_EQ(UlpOf(0.0, PrimitiveType::BF16), std::ldexp(1.0, -133));
  EXPECT_EQ(UlpOf(1e-3, PrimitiveType::F8E4M3FN), std::ldexp(1.0, -9));
  EXPECT_EQ(UlpOf(1.0, PrimitiveType::S32), 0.0);
  EXPECT_EQ(UlpOf(std::nan(""), PrimitiveType::F32), 0.0);
}

}  // namespace
}  // namespace weave::eval
