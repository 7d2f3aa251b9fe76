// Element-type numerics: round-to-nearest-even into every supported float format, XLA's
// non-saturating overflow, integer wrapping and float->integer conversion.
#include "eval/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace weave::eval {
namespace {

// A binary float format: explicit mantissa bits, minimum normal exponent (unbiased), largest
// finite value, infinities, exponent width and bias. `nuz` marks the FNUZ formats (AMD's
// "NANOO" FP8, Graphcore's proposal; XLA's f8e4m3fnuz, f8e5m2fnuz, f8e4m3b11fnuz): finite only,
// no negative zero, and the single NaN encoding 0x80 (the code negative zero would have). Their
// bias is one more than IEEE's for the exponent width (8 for E4M3, 16 for E5M2), so every
// exponent-field value 1..max is a normal number.
struct FloatFormat {
  int mantissa_bits;
  int min_exponent;
  double max_finite;
  bool has_inf;
  int exponent_bits;
  int bias;
  bool valid;
  bool nuz = false;
  // `mx`: the OCP microscaling element formats (f4e2m1fn, f6e2m3fn, f6e3m2fn): every code is a
  // finite number, so a conversion saturates to +-max and a NaN becomes a zero (ml_dtypes'
  // mxfloat.h, which XLA's convert follows).
  bool mx = false;
  // `e8m0`: f8e8m0fnu, the MX scale type: an unsigned power of two 2^(bits - 127), no zero, the
  // only NaN 0xff. Zero, negative and infinite inputs convert to NaN; values at or below 2^-127
  // to 2^-127, those between 2^-127 and 2^-126 to 2^-126 (ml_dtypes' float8.h ConvertImpl,
  // non-saturating, which treats code 0 as a subnormal).
  bool e8m0 = false;
};

FloatFormat FormatOf(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F16: return {10, -14, 65504.0, true, 5, 15, true};
    case PrimitiveType::BF16: return {7, -126, 3.3895313892515355e38, true, 8, 127, true};
    case PrimitiveType::F32: return {23, -126, 3.4028234663852886e38, true, 8, 127, true};
    case PrimitiveType::F8E4M3FN: return {3, -6, 448.0, false, 4, 7, true};
    case PrimitiveType::F8E5M2: return {2, -14, 57344.0, true, 5, 15, true};
    case PrimitiveType::F8E4M3: return {3, -6, 240.0, true, 4, 7, true};
    case PrimitiveType::F8E3M4: return {4, -2, 15.5, true, 3, 3, true};
    // FNUZ: max = 1.111b x 2^(15-8) = 240; 1.11b x 2^(31-16) = 57344; 1.111b x 2^(15-11) = 30.
    case PrimitiveType::F8E4M3FNUZ: return {3, -7, 240.0, false, 4, 8, true, true};
    case PrimitiveType::F8E5M2FNUZ: return {2, -15, 57344.0, false, 5, 16, true, true};
    case PrimitiveType::F8E4M3B11FNUZ: return {3, -10, 30.0, false, 4, 11, true, true};
    // MX element types: 1.1b x 2^2 = 6; 1.111b x 2^2 = 7.5; 1.11b x 2^4 = 28.
    case PrimitiveType::F4E2M1FN: return {1, 0, 6.0, false, 2, 1, true, false, true};
    case PrimitiveType::F6E2M3FN: return {3, 0, 7.5, false, 2, 1, true, false, true};
    case PrimitiveType::F6E3M2FN: return {2, -2, 28.0, false, 3, 3, true, false, true};
    // E8M0: no mantissa, exponents -127..127 (0xff is the NaN).
    case PrimitiveType::F8E8M0FNU:
      return {0, -127, 1.7014118346046923e38, false, 8, 127, true, false, false, true};
    default: return {0, 0, 0, false, 0, 0, false};
  }
}

}  // namespace

double UlpOf(double x, PrimitiveType t) {
  if (!std::isfinite(x)) return 0;
  int mantissa_bits = 52, min_exponent = -1022;
  if (t != PrimitiveType::F64) {
    const FloatFormat f = FormatOf(t);
    if (!f.valid) return 0;
    mantissa_bits = f.mantissa_bits;
    min_exponent = f.min_exponent;
  }
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  const int exponent = x == 0 ? min_exponent : std::max(e - 1, min_exponent);
  return std::ldexp(1.0, exponent - mantissa_bits);
}

double MaxFinite(PrimitiveType t) {
  if (t == PrimitiveType::F64) return std::numeric_limits<double>::max();
  return FormatOf(t).max_finite;
}

double RoundToType(double x, PrimitiveType t) {
  if (t == PrimitiveType::F64) return x;
  if (t == PrimitiveType::F32) return static_cast<double>(static_cast<float>(x));
  const FloatFormat f = FormatOf(t);
  if (!f.valid) return x;
  if (f.e8m0 && (std::isnan(x) || std::isinf(x) || x <= 0)) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (f.mx && std::isnan(x)) return std::signbit(x) ? 0.0 : -0.0;  // ml_dtypes' NaN code 1.00.0
  if (f.mx && std::isinf(x)) return std::copysign(f.max_finite, x);
  if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(x)) return f.has_inf ? x : std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return f.nuz ? 0.0 : x;  // FNUZ: no negative zero
  const double ax = std::fabs(x);
  if (f.e8m0 && ax < std::ldexp(1.0, f.min_exponent + 1)) {
    // ml_dtypes treats code 0 (2^-127) as a subnormal: the values between it and 2^-126 round
    // up to 2^-126 (the midpoint of "zero" and 2^-126 is 2^-127, which ties to code 0), and
    // everything at or below 2^-127 is code 0.
    return ax <= std::ldexp(1.0, f.min_exponent) ? std::ldexp(1.0, f.min_exponent)
                                                 : std::ldexp(1.0, f.min_exponent + 1);
  }
  int e = 0;
  std::frexp(ax, &e);  // ax = m * 2^e, m in [0.5, 1): leading bit has exponent e - 1
  const int exponent = std::max(e - 1, f.min_exponent);
  const int quantum_exp = exponent - f.mantissa_bits;
  // ax / 2^quantum_exp is exact in double (power-of-two scaling within range).
  const double q = std::ldexp(ax, -quantum_exp);
  const double r = std::nearbyint(q);  // default rounding mode: to nearest, ties to even
  const double res = std::ldexp(r, quantum_exp);
  if (res > f.max_finite) {
    if (f.mx) return std::copysign(f.max_finite, x);
    return f.has_inf ? std::copysign(std::numeric_limits<double>::infinity(), x)
                     : std::numeric_limits<double>::quiet_NaN();
  }
  if (res == 0 && f.nuz) return 0.0;  // a negative value that underflows becomes +0
  return std::copysign(res, x);
}

float RoundToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) {  // inf or NaN
    if (u & 0x007fffffu) u = (u | 0x00400000u) & 0xffff0000u;  // quiet NaN
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  }
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest even (carries into the exponent: overflow -> inf)
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

float RoundFloatToType(float x, PrimitiveType t) {
  switch (t) {
    case PrimitiveType::F32: return x;
    case PrimitiveType::BF16: return RoundToBf16(x);
#ifdef __FLT16_MAX__  // _Float16 (gcc 12; clang >= 15 on x86): else the generic rounding below
    case PrimitiveType::F16: return static_cast<float>(static_cast<_Float16>(x));
#endif
    default: return static_cast<float>(RoundToType(static_cast<double>(x), t));
  }
}

uint32_t EncodeFloat(double x, PrimitiveType t) {
  if (t == PrimitiveType::F32) {
    float v = static_cast<float>(x);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  }
  const FloatFormat f = FormatOf(t);
  if (!f.valid) return 0;
  if (f.e8m0) {
    if (!(x > 0) || std::isinf(x)) return 0xffu;
    int e = 0;
    std::frexp(x, &e);
    return static_cast<uint32_t>(std::clamp(e - 1, f.min_exponent, 127) + f.bias);
  }
  const int total_bits = 1 + f.exponent_bits + f.mantissa_bits;
  const uint32_t sign = std::signbit(x) ? (1u << (total_bits - 1)) : 0u;
  if (f.mx && std::isnan(x)) return 1u << (total_bits - 1);
  const uint32_t exp_all_ones = ((1u << f.exponent_bits) - 1u) << f.mantissa_bits;
  if (std::isnan(x) || (f.nuz && std::isinf(x))) {
    if (f.nuz) return 1u << (total_bits - 1);  // 0x80: the only NaN
    if (t == PrimitiveType::F8E4M3FN) return 0x7f;
    return exp_all_ones | (1u << (f.mantissa_bits - 1));
  }
  if (std::isinf(x)) return sign | exp_all_ones;
  const double ax = std::fabs(x);
  if (ax == 0) return f.nuz ? 0u : sign;
  int e = 0;
  std::frexp(ax, &e);
  int exponent = e - 1;
  if (exponent < f.min_exponent) {  // subnormal: ax = m * 2^(min_exp - mantissa_bits)
    const uint32_t m = static_cast<uint32_t>(std::ldexp(ax, f.mantissa_bits - f.min_exponent));
    return sign | m;
  }
  const uint32_t biased = static_cast<uint32_t>(exponent + f.bias);
  const uint32_t m = static_cast<uint32_t>(std::ldexp(ax, f.mantissa_bits - exponent)) &
                     ((1u << f.mantissa_bits) - 1u);
  return sign | (biased << f.mantissa_bits) | m;
}

double DecodeFloat(uint32_t bits, PrimitiveType t) {
  if (t == PrimitiveType::F32) {
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  const FloatFormat f = FormatOf(t);
  if (!f.valid) return 0;
  if (f.e8m0) {
    bits &= 0xffu;
    if (bits == 0xffu) return std::numeric_limits<double>::quiet_NaN();
    return std::ldexp(1.0, static_cast<int>(bits) - f.bias);
  }
  const int total_bits = 1 + f.exponent_bits + f.mantissa_bits;
  const bool neg = (bits >> (total_bits - 1)) & 1u;
  const uint32_t exp_field = (bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1u);
  const uint32_t mant = bits & ((1u << f.mantissa_bits) - 1u);
  const uint32_t exp_max = (1u << f.exponent_bits) - 1u;
  double v;
  if (f.nuz) {
    // Sign bit with everything else zero is the NaN; no infinities, every other code is finite.
    if (neg && exp_field == 0 && mant == 0) return std::numeric_limits<double>::quiet_NaN();
  } else if (t == PrimitiveType::F8E4M3FN) {
    // No infinities; only S.1111.111 is NaN, the other exponent-15 codes are normal numbers.
    if (exp_field == exp_max && mant == ((1u << f.mantissa_bits) - 1u)) {
      return std::numeric_limits<double>::quiet_NaN();
    }
  } else if (f.mx) {
    // Every code is finite: the all-ones exponent holds normal numbers.
  } else if (exp_field == exp_max) {
    if (mant != 0) return std::numeric_limits<double>::quiet_NaN();
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(mant), f.min_exponent - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << f.mantissa_bits)),
                   static_cast<int>(exp_field) - f.bias - f.mantissa_bits);
  }
  return neg ? -v : v;
}

int64_t WrapToType(int64_t v, PrimitiveType t) {
  if (t == PrimitiveType::PRED) return v != 0 ? 1 : 0;
  const int bits = BitWidth(t);
  if (bits >= 64 || bits <= 0) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1u;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (IsSignedInteger(t) && (u >> (bits - 1)) & 1u) u |= ~mask;
  return static_cast<int64_t>(u);
}

int64_t FloatToInteger(double x, PrimitiveType t) {
  if (t == PrimitiveType::PRED) return x != 0 ? 1 : 0;
  if (std::isnan(x)) return 0;
  const int bits = BitWidth(t);
  x = std::trunc(x);
  if (IsUnsignedInteger(t)) {
    if (x <= 0) return 0;
    if (bits >= 64) {
      if (x >= 18446744073709551616.0) return -1;  // all ones (u64 max, bit-cast)
      return static_cast<int64_t>(static_cast<uint64_t>(x));
    }
    const double maxv = std::ldexp(1.0, bits) - 1;
    return static_cast<int64_t>(x >= maxv ? maxv : x);
  }
  if (bits >= 64) {
    if (x >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
    if (x <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
    return static_cast<int64_t>(x);
  }
  const double maxv = std::ldexp(1.0, bits - 1) - 1;
  const double minv = -std::ldexp(1.0, bits - 1);
  if (x >= maxv) return static_cast<int64_t>(maxv);
  if (x <= minv) return static_cast<int64_t>(minv);
  return static_cast<int64_t>(x);
}

double IntegerToDouble(int64_t v, PrimitiveType t) {
  if (t == PrimitiveType::U64) return static_cast<double>(static_cast<uint64_t>(v));
  return static_cast<double>(v);
}

std::complex<double> RoundComplex(std::complex<double> z, PrimitiveType t) {
  if (t != PrimitiveType::C64) return z;
  return {static_cast<double>(static_cast<float>(z.real())), static_cast<double>(static_cast<float>(z.imag()))};
}

}  // namespace weave::eval
