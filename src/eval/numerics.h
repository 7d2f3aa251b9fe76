// Element-type numerics of the reference evaluator, following XLA's semantics.
//
// Floats: every element type is modelled as a binary floating-point format with a given number
// of explicit mantissa bits, a minimum normal exponent, a largest finite value and whether it has
// infinities. Rounding is to nearest, ties to even (IEEE roundTiesToEven), including subnormals.
// Overflow (a value that rounds past the largest finite magnitude) follows XLA's non-saturating
// `convert`: +-inf for types with infinities (f16, bf16, f32, f8e5m2), NaN for types without
// (f8e4m3fn, and the other *fn/*fnuz formats). NaN stays NaN, +-inf becomes NaN for types without
// infinities. Negative zero is kept where the type has it; the FNUZ formats (f8e4m3fnuz: exponent
// bias 8, max 240; f8e5m2fnuz: bias 16, max 57344; f8e4m3b11fnuz: bias 11, max 30) have none: a
// result that rounds to zero is +0, and their only NaN is the code 0x80.
#pragma once

#include <complex>
#include <cstdint>

#include "hlo/types.h"

namespace weave::eval {

// Rounds `x` to the nearest value of float type `t` (see above) and returns it as a double.
// For f64 returns x. For non-float types returns x unchanged (use ConvertToInteger).
double RoundToType(double x, PrimitiveType t);
// Same for a float input; fast paths for f32/bf16/f16 (returns the rounded value as float).
float RoundFloatToType(float x, PrimitiveType t);
// Round-to-nearest-even float -> bf16 -> float (bit-exact, NaN kept quiet).
float RoundToBf16(float x);

// Unit in the last place of float type `t` at magnitude |x|: the spacing of t's values around x,
// 2^(e - mantissa_bits) for |x| in [2^e, 2^(e+1)), the subnormal spacing below the smallest normal
// (e.g. bf16: 2^-7 at 1.0, 0.25 at 40.0). f64: 2^(e - 52). 0 for non-float types, NaN or inf.
double UlpOf(double x, PrimitiveType t);

// Largest finite value of float type t (e.g. 448 for f8e4m3fn, 57344 for f8e5m2, 65504 for f16).
double MaxFinite(PrimitiveType t);
// (HasInfinity(t): hlo/types.h.)

// Encoding helpers for 8/16-bit float types: the bit pattern of the (already representable)
// value `x`, and the value of a bit pattern. Supported for f16, bf16, the FP8 formats (f8e4m3fn,
// f8e5m2, f8e4m3, f8e3m4 and the FNUZ ones) and f32 (32-bit codes). NaN decodes to a quiet NaN;
// NaN encodes to the type's canonical NaN (0x7F for f8e4m3fn, 0x7E for f8e5m2, 0x80 for the FNUZ
// formats, 0x7E00 f16, 0x7FC0 bf16); FNUZ encodes zero of either sign as 0x00.
// The MX types: f4e2m1fn, f6e2m3fn and f6e3m2fn have no NaN or infinity (every code is finite;
// RoundToType saturates to +-max and maps NaN to a zero); f8e8m0fnu is 2^(bits - 127), 0xFF NaN
// (RoundToType: zero, negative, inf and NaN give NaN; at or below 2^-127 gives 2^-127, between
// 2^-127 and 2^-126 gives 2^-126; ties between 2^e and 2^(e+1), i.e. 1.5 x 2^e, round up). These follow ml_dtypes (float8.h, mxfloat.h),
// which XLA's convert uses.
uint32_t EncodeFloat(double x, PrimitiveType t);
double DecodeFloat(uint32_t bits, PrimitiveType t);

// Wraps an integer to the value range of integer type `t` (two's complement: signed types are
// sign-extended from their width, unsigned types masked). pred: 0 or 1 (any non-zero -> 1).
int64_t WrapToType(int64_t v, PrimitiveType t);

// A complex value rounded to complex type `t`: each part to f32 for c64 (round to nearest even),
// unchanged for c128.
std::complex<double> RoundComplex(std::complex<double> z, PrimitiveType t);
// XLA's float -> integer convert: truncation toward zero, NaN -> 0, saturating at the integer
// type's min/max (u64 is bit-cast into int64 storage).
int64_t FloatToInteger(double x, PrimitiveType t);
// Integer -> double for storage value `v` of type `t` (u64 is reinterpreted as unsigned).
double IntegerToDouble(int64_t v, PrimitiveType t);

}  // namespace weave::eval
