// The evaluator's elementwise kernels for complex types (c64, c128), as XLA's HLO evaluator
// defines them: c64 arithmetic in std::complex<float>, c128 in std::complex<double>.
//   unary: negate, copy, exp, log, log-plus-one, exponential-minus-one, sqrt, rsqrt, sin, cos,
//          tan, tanh, sign (z/|z|, 0 at 0), abs (|z|, real result), real, imag (real results; of
//          a real operand: the operand, and zeros);
//   binary: add, subtract, multiply, divide, power, and complex(re, im) from two real operands;
//   compare: EQ and NE (complex numbers have no order);
//   convert: real -> complex (imaginary part 0), complex -> complex. XLA has no complex -> real
//          convert (real() is the op), so that is an error.
// Errors: InvalidArgument for an op or a type pair outside these.
#include <cmath>
#include <complex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/numerics.h"
#include "eval/ops_internal.h"

namespace weave::eval::ops::internal {
namespace {

using absl::InvalidArgumentError;

absl::Status Unsupported(HloOpcode op, const Shape& s) {
  return InvalidArgumentError(absl::StrCat("opcode ", std::string(HloOpcodeString(op)),
                                           " is not supported for element type ", TypeName(s)));
}

template <typename T>
bool UnaryC(HloOpcode op, std::complex<T> z, std::complex<T>* out) {
  switch (op) {
    case HloOpcode::kNegate: *out = -z; return true;
    case HloOpcode::kCopy: *out = z; return true;
    case HloOpcode::kExp: *out = std::exp(z); return true;
    case HloOpcode::kLog: *out = std::log(z); return true;
    case HloOpcode::kLog1p: *out = std::log(z + std::complex<T>(1)); return true;
    case HloOpcode::kExpm1: *out = std::exp(z) - std::complex<T>(1); return true;
    case HloOpcode::kSqrt: *out = std::sqrt(z); return true;
    case HloOpcode::kRsqrt: *out = std::complex<T>(1) / std::sqrt(z); return true;
    case HloOpcode::kSin: *out = std::sin(z); return true;
    case HloOpcode::kCos: *out = std::cos(z); return true;
    case HloOpcode::kTan: *out = std::tan(z); return true;
    case HloOpcode::kTanh: *out = std::tanh(z); return true;
    case HloOpcode::kSign: *out = z == std::complex<T>(0) ? z : z / std::abs(z); return true;
    default: return false;
  }
}

template <typename T>
bool BinaryC(HloOpcode op, std::complex<T> a, std::complex<T> b, std::complex<T>* out) {
  switch (op) {
    case HloOpcode::kAdd: *out = a + b; return true;
    case HloOpcode::kSubtract: *out = a - b; return true;
    case HloOpcode::kMultiply: *out = a * b; return true;
    case HloOpcode::kDivide: *out = a / b; return true;
    case HloOpcode::kPower: *out = std::pow(a, b); return true;
    default: return false;
  }
}

std::complex<float> F(std::complex<double> z) {
  return {static_cast<float>(z.real()), static_cast<float>(z.imag())};
}
std::complex<double> D(std::complex<float> z) { return {z.real(), z.imag()}; }

}  // namespace

absl::StatusOr<Value> ComplexUnary(HloOpcode op, const Value& a, const Shape& out) {
  Value r = Empty(out);
  const int64_t n = out.ElementCount();
  if (a.size() != n) return InvalidArgumentError("the operand does not match the result shape");
  if (a.storage() != Storage::kComplex) {  // real / imag of a real operand
    if (op != HloOpcode::kReal && op != HloOpcode::kImag) return Unsupported(op, a.shape);
    for (int64_t k = 0; k < n; ++k) r.SetDouble(k, op == HloOpcode::kReal ? a.GetDouble(k) : 0.0);
    return r;
  }
  const bool c64 = a.shape.element_type == PrimitiveType::C64;
  if (op == HloOpcode::kReal || op == HloOpcode::kImag || op == HloOpcode::kAbs) {
    if (r.storage() == Storage::kComplex) return Unsupported(op, out);
    for (int64_t k = 0; k < n; ++k) {
      const std::complex<double> z = a.c[static_cast<size_t>(k)];
      const double v = op == HloOpcode::kReal ? z.real()
                       : op == HloOpcode::kImag ? z.imag()
                       : c64 ? static_cast<double>(std::abs(F(z)))
                             : std::abs(z);
      r.SetDouble(k, v);
    }
    return r;
  }
  if (r.storage() != Storage::kComplex) return Unsupported(op, out);
  for (int64_t k = 0; k < n; ++k) {
    const std::complex<double> z = a.c[static_cast<size_t>(k)];
    bool ok;
    if (c64) {
      std::complex<float> y;
      ok = UnaryC<float>(op, F(z), &y);
      r.c[static_cast<size_t>(k)] = D(y);
    } else {
      ok = UnaryC<double>(op, z, &r.c[static_cast<size_t>(k)]);
    }
    if (!ok) return Unsupported(op, a.shape);
  }
  return RoundedComplex(std::move(r));
}

absl::StatusOr<Value> ComplexBinary(HloOpcode op, const Value& a, const Value& b, const Shape& out) {
  Value r = Empty(out);
  const int64_t n = out.ElementCount();
  if (r.storage() != Storage::kComplex) return Unsupported(op, out);
  if (op == HloOpcode::kComplex) {
    if (a.storage() == Storage::kComplex || b.storage() == Storage::kComplex) return Unsupported(op, a.shape);
    for (int64_t k = 0; k < n; ++k) r.c[static_cast<size_t>(k)] = {a.GetDouble(k), b.GetDouble(k)};
    return RoundedComplex(std::move(r));
  }
  if (a.storage() != Storage::kComplex || b.storage() != Storage::kComplex) {
    return InvalidArgumentError(absl::StrCat("operand types ", TypeName(a.shape), " and ", TypeName(b.shape),
                                             " do not fit the result ", TypeName(out)));
  }
  const bool c64 = out.element_type == PrimitiveType::C64;
  for (int64_t k = 0; k < n; ++k) {
    const size_t q = static_cast<size_t>(k);
    bool ok;
    if (c64) {
      std::complex<float> y;
      ok = BinaryC<float>(op, F(a.c[q]), F(b.c[q]), &y);
      r.c[q] = D(y);
    } else {
      ok = BinaryC<double>(op, a.c[q], b.c[q], &r.c[q]);
    }
    if (!ok) return Unsupported(op, out);
  }
  return r;
}

absl::StatusOr<Value> ComplexCompare(ComparisonDirection dir, const Value& a, const Value& b, const Shape& out) {
  if (dir != ComparisonDirection::kEq && dir != ComparisonDirection::kNe) {
    return InvalidArgumentError(absl::StrCat("compare ", std::string(ComparisonDirectionString(dir)),
                                             " is not defined for complex operands (only EQ and NE)"));
  }
  if (a.storage() != Storage::kComplex || b.storage() != Storage::kComplex) {
    return InvalidArgumentError("compare needs two complex operands");
  }
  Value r = Empty(out);
  for (int64_t k = 0; k < out.ElementCount(); ++k) {
    const bool eq = a.c[static_cast<size_t>(k)] == b.c[static_cast<size_t>(k)];
    r.i[static_cast<size_t>(k)] = dir == ComparisonDirection::kEq ? eq : !eq;
  }
  return r;
}

absl::StatusOr<Value> ComplexConvert(const Value& a, const Shape& out) {
  Value r = Empty(out);
  if (r.storage() != Storage::kComplex || a.storage() == Storage::kNone || a.storage() == Storage::kTuple) {
    return InvalidArgumentError(absl::StrCat("convert from ", TypeName(a.shape), " to ", TypeName(out),
                                             " is not supported (XLA takes the real part with real())"));
  }
  for (int64_t k = 0; k < out.ElementCount(); ++k) {
    r.c[static_cast<size_t>(k)] =
        a.storage() == Storage::kComplex ? a.c[static_cast<size_t>(k)] : std::complex<double>(a.GetDouble(k), 0.0);
  }
  return RoundedComplex(std::move(r));
}

Value RoundedComplex(Value v) {
  if (v.shape.element_type == PrimitiveType::C64) {
    for (std::complex<double>& z : v.c) z = RoundComplex(z, PrimitiveType::C64);
  }
  return v;
}

}  // namespace weave::eval::ops::internal
