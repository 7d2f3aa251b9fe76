// The evaluator's elementwise kernels (eval/ops.h): unary and binary ops, compare (with XLA's
// total order), convert, bitcast-convert, select, clamp, and the scalar combine of reductions;
// results rounded to the element type (eval/numerics.h).
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "eval/ops_internal.h"
#include "hlo/status_macros.h"

namespace weave::eval::ops {

using absl::InvalidArgumentError;
using internal::Empty;
using internal::TypeName;

namespace {

// Broadcasts a scalar value to `dims` (or returns it unchanged when not scalar).
const Value& MaybeBroadcastScalar(const Value& v, const Shape& out, Value* tmp) {
  if (v.shape.dims.empty() && !out.dims.empty()) {
    Shape s = out.WithElementType(v.shape.element_type);
    *tmp = Broadcast(v, s, {});
    return *tmp;
  }
  return v;
}

int64_t ClzN(uint64_t v, int bits) {
  if (bits <= 0) return 0;
  uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
  v &= mask;
  if (v == 0) return bits;
  return std::countl_zero(v) - (64 - bits);
}

// Elementwise unary op on a float value, computed in T (float for types of 32 bits or fewer,
// double for f64), as XLA's evaluator does. Sets *ok = false for opcodes it does not handle.
template <typename T>
T UnaryFloat(HloOpcode op, T x, bool* ok) {
  switch (op) {
    case HloOpcode::kAbs: return std::fabs(x);
    case HloOpcode::kNegate: return -x;
    case HloOpcode::kCeil: return std::ceil(x);
    case HloOpcode::kFloor: return std::floor(x);
    case HloOpcode::kCos: return std::cos(x);
    case HloOpcode::kSin: return std::sin(x);
    case HloOpcode::kTan: return std::tan(x);
    case HloOpcode::kTanh: return std::tanh(x);
    case HloOpcode::kExp: return std::exp(x);
    case HloOpcode::kExpm1: return std::expm1(x);
    case HloOpcode::kLog: return std::log(x);
    case HloOpcode::kLog1p: return std::log1p(x);
    case HloOpcode::kLogistic: return T(1) / (T(1) + std::exp(-x));
    case HloOpcode::kSqrt: return std::sqrt(x);
    case HloOpcode::kRsqrt: return T(1) / std::sqrt(x);
    case HloOpcode::kCbrt: return std::cbrt(x);
    case HloOpcode::kErf: return std::erf(x);
    case HloOpcode::kSign:
      return std::isnan(x) ? x : (x > 0 ? T(1) : (x < 0 ? T(-1) : x));
    case HloOpcode::kRoundNearestAfz: return std::round(x);
    case HloOpcode::kRoundNearestEven: return std::nearbyint(x);
    case HloOpcode::kCopy: return x;
    default: *ok = false; return 0;
  }
}

int64_t UnaryInt(HloOpcode op, int64_t x, PrimitiveType t, bool* ok) {
  const int bits = t == PrimitiveType::PRED ? 1 : BitWidth(t);
  switch (op) {
    case HloOpcode::kAbs: return x < 0 ? -static_cast<uint64_t>(x) : x;
    case HloOpcode::kNegate: return static_cast<int64_t>(-static_cast<uint64_t>(x));
    case HloOpcode::kSign: return IsUnsignedInteger(t) ? (x != 0) : (x > 0) - (x < 0);
    case HloOpcode::kNot: return t == PrimitiveType::PRED ? !x : ~x;
    case HloOpcode::kCopy: return x;
    case HloOpcode::kPopulationCount: {
      uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      return std::popcount(static_cast<uint64_t>(x) & mask);
    }
    case HloOpcode::kClz: return ClzN(static_cast<uint64_t>(x), bits);
    default: *ok = false; return 0;
  }
}

template <typename T>
T FMax(T a, T b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b && a == 0) return std::signbit(a) ? b : a;  // max(-0, +0) = +0
  return a > b ? a : b;
}
template <typename T>
T FMin(T a, T b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  if (a == b && a == 0) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <typename T>
T BinaryFloatT(HloOpcode op, T a, T b, bool* ok) {
  switch (op) {
    case HloOpcode::kAdd: return a + b;
    case HloOpcode::kSubtract: return a - b;
    case HloOpcode::kMultiply: return a * b;
    case HloOpcode::kDivide: return a / b;
    case HloOpcode::kMaximum: return FMax(a, b);
    case HloOpcode::kMinimum: return FMin(a, b);
    case HloOpcode::kPower: return std::pow(a, b);
    case HloOpcode::kRemainder: return std::fmod(a, b);
    case HloOpcode::kAtan2: return std::atan2(a, b);
    default: *ok = false; return 0;
  }
}

int64_t BinaryInt(HloOpcode op, int64_t a, int64_t b, PrimitiveType t, bool* ok) {
  const bool is_unsigned = IsUnsignedInteger(t) || t == PrimitiveType::PRED;
  const int bits = t == PrimitiveType::PRED ? 1 : BitWidth(t);
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  const int64_t type_min = is_unsigned ? 0 : WrapToType(int64_t{1} << (bits - 1), t);
  switch (op) {
    case HloOpcode::kAdd: return static_cast<int64_t>(ua + ub);
    case HloOpcode::kSubtract: return static_cast<int64_t>(ua - ub);
    case HloOpcode::kMultiply: return static_cast<int64_t>(ua * ub);
    case HloOpcode::kDivide:
      if (b == 0) return -1;  // all ones: -1 signed, max unsigned
      if (is_unsigned) return static_cast<int64_t>(ua / ub);
      if (a == type_min && b == -1) return a;
      return a / b;
    case HloOpcode::kRemainder:
      if (b == 0) return a;
      if (is_unsigned) return static_cast<int64_t>(ua % ub);
      if (a == type_min && b == -1) return 0;
      return a % b;
    case HloOpcode::kMaximum:
      if (t == PrimitiveType::U64) return ua > ub ? a : b;
      return std::max(a, b);
    case HloOpcode::kMinimum:
      if (t == PrimitiveType::U64) return ua < ub ? a : b;
      return std::min(a, b);
    case HloOpcode::kAnd: return a & b;
    case HloOpcode::kOr: return a | b;
    case HloOpcode::kXor: return a ^ b;
    case HloOpcode::kPower: {
      if (b < 0 && !is_unsigned) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
      uint64_t r = 1, base = ua, e = ub;
      while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
      }
      return static_cast<int64_t>(r);
    }
    case HloOpcode::kShiftLeft: {
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      const uint64_t amount = ub & mask;
      if (amount >= static_cast<uint64_t>(bits)) return 0;
      return static_cast<int64_t>(ua << amount);
    }
    case HloOpcode::kShiftRightLogical: {
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      const uint64_t amount = ub & mask;
      if (amount >= static_cast<uint64_t>(bits)) return 0;
      return static_cast<int64_t>((ua & mask) >> amount);
    }
    case HloOpcode::kShiftRightArithmetic: {
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
      const uint64_t amount = ub & mask;
      // Sign-extend the value from its width first (unsigned types too: arithmetic = sign fill).
      int64_t sv = a;
      if (bits < 64) {
        const uint64_t v = ua & mask;
        sv = static_cast<int64_t>(((v >> (bits - 1)) & 1u) ? (v | ~mask) : v);
      }
      if (amount >= static_cast<uint64_t>(bits)) return sv < 0 ? -1 : 0;
      return sv >> amount;
    }
    default: *ok = false; return 0;
  }
}

absl::Status Unsupported(HloOpcode op, const Shape& s) {
  return InvalidArgumentError(absl::StrCat("opcode ", std::string(HloOpcodeString(op)),
                                           " is not supported for element type ", TypeName(s)));
}

}  // namespace

absl::StatusOr<Value> Unary(HloOpcode op, const Value& a, const Shape& out) {
  if (op == HloOpcode::kIsFinite) {
    Value r = Empty(out);
    const int64_t n = a.size();
    for (int64_t k = 0; k < n; ++k) r.i[static_cast<size_t>(k)] = std::isfinite(a.GetDouble(k));
    return r;
  }
  if (a.storage() == Storage::kComplex || op == HloOpcode::kReal || op == HloOpcode::kImag) {
    return internal::ComplexUnary(op, a, out);
  }
  Value r = Empty(out);
  const PrimitiveType t = out.element_type;
  bool ok = true;
  switch (a.storage()) {
    case Storage::kFloat: {
      const size_t n = a.f.size();
      const float* x = a.f.data();
      float* y = r.f.data();
      for (size_t k = 0; k < n && ok; ++k) y[k] = UnaryFloat<float>(op, x[k], &ok);
      if (t != PrimitiveType::F32 && op != HloOpcode::kAbs && op != HloOpcode::kNegate &&
          op != HloOpcode::kCopy) {
        for (size_t k = 0; k < n; ++k) y[k] = RoundFloatToType(y[k], t);
      }
      break;
    }
    case Storage::kDouble:
      for (size_t k = 0; k < a.d.size() && ok; ++k) r.d[k] = UnaryFloat<double>(op, a.d[k], &ok);
      break;
    case Storage::kInt:
      for (size_t k = 0; k < a.i.size() && ok; ++k) {
        r.i[k] = WrapToType(UnaryInt(op, a.i[k], t, &ok), t);
      }
      break;
    default: ok = false;
  }
  if (!ok) return Unsupported(op, a.shape);
  return r;
}

absl::StatusOr<Value> Binary(HloOpcode op, const Value& a0, const Value& b0, const Shape& out) {
  Value ta, tb;
  const Value& a = MaybeBroadcastScalar(a0, out, &ta);
  const Value& b = MaybeBroadcastScalar(b0, out, &tb);
  if (a.size() != out.ElementCount() || b.size() != out.ElementCount()) {
    return InvalidArgumentError(absl::StrCat("operand shapes ", a.shape.ToString(false), " and ",
                                             b.shape.ToString(false), " do not match result ",
                                             out.ToString(false)));
  }
  if (op == HloOpcode::kComplex || StorageFor(out.element_type) == Storage::kComplex) {
    return internal::ComplexBinary(op, a, b, out);
  }
  Value r = Empty(out);
  const PrimitiveType t = out.element_type;
  if (a.storage() != r.storage() || b.storage() != r.storage()) {
    return InvalidArgumentError(absl::StrCat("operand types ", TypeName(a.shape), " and ",
                                             TypeName(b.shape), " do not fit the result ",
                                             TypeName(out)));
  }
  bool ok = true;
  switch (r.storage()) {
    case Storage::kFloat: {
      const size_t n = r.f.size();
      const float* x = a.f.data();
      const float* y = b.f.data();
      float* z = r.f.data();
      switch (op) {  // hot loops first
        case HloOpcode::kAdd: for (size_t k = 0; k < n; ++k) z[k] = x[k] + y[k]; break;
        case HloOpcode::kSubtract: for (size_t k = 0; k < n; ++k) z[k] = x[k] - y[k]; break;
        case HloOpcode::kMultiply: for (size_t k = 0; k < n; ++k) z[k] = x[k] * y[k]; break;
        case HloOpcode::kDivide: for (size_t k = 0; k < n; ++k) z[k] = x[k] / y[k]; break;
        default:
          for (size_t k = 0; k < n && ok; ++k) z[k] = BinaryFloatT<float>(op, x[k], y[k], &ok);
      }
      if (ok && t != PrimitiveType::F32) {
        if (t == PrimitiveType::BF16) {
          for (size_t k = 0; k < n; ++k) z[k] = RoundToBf16(z[k]);
        } else {
          for (size_t k = 0; k < n; ++k) z[k] = RoundFloatToType(z[k], t);
        }
      }
      break;
    }
    case Storage::kDouble:
      for (size_t k = 0; k < r.d.size() && ok; ++k) {
        r.d[k] = BinaryFloatT<double>(op, a.d[k], b.d[k], &ok);
      }
      break;
    case Storage::kInt:
      for (size_t k = 0; k < r.i.size() && ok; ++k) {
        r.i[k] = WrapToType(BinaryInt(op, a.i[k], b.i[k], t, &ok), t);
      }
      break;
    default: ok = false;
  }
  if (!ok) return Unsupported(op, out);
  return r;
}

double CombineFloat(HloOpcode op, double a, double b, PrimitiveType t) {
  bool ok = true;
  if (t == PrimitiveType::F64) return BinaryFloatT<double>(op, a, b, &ok);
  const float r = BinaryFloatT<float>(op, static_cast<float>(a), static_cast<float>(b), &ok);
  return RoundFloatToType(r, t);
}

int64_t CombineInt(HloOpcode op, int64_t a, int64_t b, PrimitiveType t) {
  bool ok = true;
  return WrapToType(BinaryInt(op, a, b, t, &ok), t);
}

int64_t TotalOrderKey(double v) {
  int64_t k;
  std::memcpy(&k, &v, 8);
  return k < 0 ? -(k & std::numeric_limits<int64_t>::max()) - 1 : k;
}

bool CompareInts(ComparisonDirection dir, int64_t x, int64_t y, bool u64) {
  const bool lt = u64 ? static_cast<uint64_t>(x) < static_cast<uint64_t>(y) : x < y;
  const bool gt = u64 ? static_cast<uint64_t>(x) > static_cast<uint64_t>(y) : x > y;
  switch (dir) {
    case ComparisonDirection::kEq: return x == y;
    case ComparisonDirection::kNe: return x != y;
    case ComparisonDirection::kLt: return lt;
    case ComparisonDirection::kLe: return !gt;
    case ComparisonDirection::kGt: return gt;
    case ComparisonDirection::kGe: return !lt;
  }
  return false;
}

bool CompareFloats(ComparisonDirection dir, double x, double y, bool total_order) {
  if (total_order) return CompareInts(dir, TotalOrderKey(x), TotalOrderKey(y), false);
  switch (dir) {
    case ComparisonDirection::kEq: return x == y;
    case ComparisonDirection::kNe: return x != y;
    case ComparisonDirection::kLt: return x < y;
    case ComparisonDirection::kLe: return x <= y;
    case ComparisonDirection::kGt: return x > y;
    case ComparisonDirection::kGe: return x >= y;
  }
  return false;
}

std::optional<ParamCompare> MatchParamCompare(const HloComputation& c) {
  const HloInstruction* r = c.root();
  if (r == nullptr || r->opcode() != HloOpcode::kCompare || r->operand_count() != 2 ||
      !r->comparison_direction.has_value()) {
    return std::nullopt;
  }
  const HloInstruction* p0 = r->operand(0);
  const HloInstruction* p1 = r->operand(1);
  if (p0->opcode() != HloOpcode::kParameter || p1->opcode() != HloOpcode::kParameter ||
      p0->parameter_number != 0 || p1->parameter_number != 1) {
    return std::nullopt;
  }
  return ParamCompare{*r->comparison_direction, r->comparison_type() == "TOTALORDER"};
}

absl::StatusOr<Value> Compare(ComparisonDirection dir, bool total_order, const Value& a0,
                              const Value& b0, const Shape& out) {
  Value ta, tb;
  const Value& a = MaybeBroadcastScalar(a0, out, &ta);
  const Value& b = MaybeBroadcastScalar(b0, out, &tb);
  Value r = Empty(out);
  const int64_t n = out.ElementCount();
  if (a.size() != n || b.size() != n) {
    return InvalidArgumentError("compare operands do not match the result shape");
  }
  if (a.storage() == Storage::kComplex) return internal::ComplexCompare(dir, a, b, out);
  if (a.storage() != b.storage()) {
    return InvalidArgumentError(absl::StrCat("compare operands have different element types (",
                                             TypeName(a.shape), " vs ", TypeName(b.shape), ")"));
  }
  if (a.storage() == Storage::kInt) {
    const bool u64 = a.shape.element_type == PrimitiveType::U64;
    for (int64_t k = 0; k < n; ++k) {
      r.i[static_cast<size_t>(k)] = CompareInts(dir, a.i[static_cast<size_t>(k)], b.i[static_cast<size_t>(k)], u64);
    }
    return r;
  }
  for (int64_t k = 0; k < n; ++k) {
    r.i[static_cast<size_t>(k)] = CompareFloats(dir, a.GetDouble(k), b.GetDouble(k), total_order);
  }
  return r;
}

absl::StatusOr<Value> Convert(const Value& a, const Shape& out) {
  if (a.storage() == Storage::kComplex || StorageFor(out.element_type) == Storage::kComplex) {
    return internal::ComplexConvert(a, out);
  }
  Value r = Empty(out);
  const PrimitiveType t = out.element_type;
  const int64_t n = out.ElementCount();
  if (r.storage() == Storage::kNone || a.storage() == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat("convert from ", TypeName(a.shape), " to ",
                                             TypeName(out), " is not supported"));
  }
  switch (r.storage()) {
    case Storage::kFloat:
      if (a.storage() == Storage::kFloat) {
        for (int64_t k = 0; k < n; ++k) {
          r.f[static_cast<size_t>(k)] = RoundFloatToType(a.f[static_cast<size_t>(k)], t);
        }
      } else {
        for (int64_t k = 0; k < n; ++k) {
          r.f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(a.GetDouble(k), t));
        }
      }
      break;
    case Storage::kDouble:
      for (int64_t k = 0; k < n; ++k) r.d[static_cast<size_t>(k)] = a.GetDouble(k);
      break;
    case Storage::kInt:
      if (a.storage() == Storage::kInt) {
        for (int64_t k = 0; k < n; ++k) {
          r.i[static_cast<size_t>(k)] = WrapToType(a.i[static_cast<size_t>(k)], t);
        }
      } else {
        for (int64_t k = 0; k < n; ++k) {
          r.i[static_cast<size_t>(k)] = FloatToInteger(a.GetDouble(k), t);
        }
      }
      break;
    default: break;
  }
  return r;
}

// The bit pattern of element k of `a` (its type's width, zero-extended).
static uint64_t ElementBits(const Value& a, int64_t k) {
  const PrimitiveType t = a.shape.element_type;
  switch (a.storage()) {
    case Storage::kFloat:
      if (t == PrimitiveType::F32 || t == PrimitiveType::BF16) {
        // The stored float's own bits (bf16: its upper half): NaN payloads and signs kept, as
        // XLA's bitcast copies memory.
        uint32_t u;
        std::memcpy(&u, &a.f[static_cast<size_t>(k)], 4);
        return t == PrimitiveType::F32 ? u : (u >> 16);
      }
      return EncodeFloat(a.f[static_cast<size_t>(k)], t);
    case Storage::kDouble: {
      uint64_t u;
      std::memcpy(&u, &a.d[static_cast<size_t>(k)], 8);
      return u;
    }
    default: {
      const int w = BitWidth(t);
      const uint64_t mask = w >= 64 ? ~uint64_t{0} : ((uint64_t{1} << w) - 1);
      return static_cast<uint64_t>(a.i[static_cast<size_t>(k)]) & mask;
    }
  }
}

// Sets element k of `r` to the value of bit pattern u in r's type.
static void SetFromBits(Value* r, int64_t k, uint64_t u) {
  const PrimitiveType t = r->shape.element_type;
  switch (r->storage()) {
    case Storage::kFloat:
      if (t == PrimitiveType::F32 || t == PrimitiveType::BF16) {
        const uint32_t bits = t == PrimitiveType::F32 ? static_cast<uint32_t>(u) : static_cast<uint32_t>(u) << 16;
        std::memcpy(&r->f[static_cast<size_t>(k)], &bits, 4);
        break;
      }
      r->f[static_cast<size_t>(k)] = static_cast<float>(DecodeFloat(static_cast<uint32_t>(u), t));
      break;
    case Storage::kDouble: std::memcpy(&r->d[static_cast<size_t>(k)], &u, 8); break;
    default: r->i[static_cast<size_t>(k)] = WrapToType(static_cast<int64_t>(u), t); break;
  }
}

// Between types of different widths (XLA's BitcastConvertType): the narrower side has one more
// dimension, last, of size wide/narrow, and piece j of a wide element is its bits
// [j*narrow, (j+1)*narrow), the little-endian order of XLA's evaluator.
static absl::StatusOr<Value> BitcastConvertResize(const Value& a, const Shape& out) {
  const PrimitiveType st = a.shape.element_type, dt = out.element_type;
  const int ws = BitWidth(st), wd = BitWidth(dt);
  const bool split = ws > wd;
  const int narrow = split ? wd : ws, ratio = split ? ws / wd : wd / ws;
  const Shape& wide_shape = split ? a.shape : out;
  const Shape& narrow_shape = split ? out : a.shape;
  std::vector<int64_t> want = wide_shape.dims;
  want.push_back(ratio);
  if (narrow <= 0 || (split ? ws % wd : wd % ws) != 0 || narrow_shape.dims != want ||
      st == PrimitiveType::PRED || dt == PrimitiveType::PRED || a.storage() == Storage::kNone ||
      StorageFor(dt) == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat(
        "bitcast-convert from ", TypeName(a.shape), " to ", TypeName(out),
        ": the narrower side must be the wider side's shape with a last dimension of ", ratio));
  }
  auto bits_of = [&](int64_t k) { return ElementBits(a, k); };
  Value r = Empty(out);
  auto put = [&](int64_t k, uint64_t u) { SetFromBits(&r, k, u); };
  const uint64_t piece_mask = narrow >= 64 ? ~uint64_t{0} : ((uint64_t{1} << narrow) - 1);
  if (split) {
    for (int64_t k = 0; k < a.size(); ++k) {
      const uint64_t u = bits_of(k);
      for (int j = 0; j < ratio; ++j) put(k * ratio + j, (u >> (j * narrow)) & piece_mask);
    }
  } else {
    for (int64_t k = 0; k < out.ElementCount(); ++k) {
      uint64_t u = 0;
      for (int j = 0; j < ratio; ++j) u |= (bits_of(k * ratio + j) & piece_mask) << (j * narrow);
      put(k, u);
    }
  }
  return r;
}

absl::StatusOr<Value> BitcastConvert(const Value& a, const Shape& out) {
  const PrimitiveType st = a.shape.element_type, dt = out.element_type;
  if (a.storage() == Storage::kComplex || StorageFor(dt) == Storage::kComplex) {
    return InvalidArgumentError(absl::StrCat("bitcast-convert from ", TypeName(a.shape), " to ", TypeName(out),
                                             " is not supported for complex types"));
  }
  if (BitWidth(st) != BitWidth(dt)) return BitcastConvertResize(a, out);
  if (a.size() != out.ElementCount()) {
    return InvalidArgumentError(absl::StrCat("bitcast-convert from ", TypeName(a.shape), " to ",
                                             TypeName(out), " changes the element count"));
  }
  auto bits_of = [&](int64_t k) { return ElementBits(a, k); };
  Value r = Empty(out);
  if (r.storage() == Storage::kNone || a.storage() == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat("bitcast-convert to ", TypeName(out),
                                             " is not supported"));
  }
  for (int64_t k = 0; k < out.ElementCount(); ++k) SetFromBits(&r, k, bits_of(k));
  return r;
}

absl::StatusOr<Value> Select(const Value& p0, const Value& t, const Value& f, const Shape& out) {
  Value tp, tt, tf;
  const Value& p = MaybeBroadcastScalar(p0, out, &tp);
  const Value& a = MaybeBroadcastScalar(t, out, &tt);
  const Value& b = MaybeBroadcastScalar(f, out, &tf);
  const int64_t n = out.ElementCount();
  if (p.size() != n || a.size() != n || b.size() != n) {
    return InvalidArgumentError("select operands do not match the result shape");
  }
  Value r = Empty(out);
  if (p.storage() != Storage::kInt || a.storage() != r.storage() || b.storage() != r.storage()) {
    return InvalidArgumentError(absl::StrCat("select operand types (", TypeName(p.shape), ", ",
                                             TypeName(a.shape), ", ", TypeName(b.shape),
                                             ") do not fit the result ", TypeName(out)));
  }
  switch (r.storage()) {
    case Storage::kFloat:
      for (int64_t k = 0; k < n; ++k) r.f[k] = p.i[k] ? a.f[k] : b.f[k];
      break;
    case Storage::kDouble:
      for (int64_t k = 0; k < n; ++k) r.d[k] = p.i[k] ? a.d[k] : b.d[k];
      break;
    case Storage::kInt:
      for (int64_t k = 0; k < n; ++k) r.i[k] = p.i[k] ? a.i[k] : b.i[k];
      break;
    case Storage::kComplex:
      for (int64_t k = 0; k < n; ++k) r.c[k] = p.i[k] ? a.c[k] : b.c[k];
      break;
    default: return Unsupported(HloOpcode::kSelect, out);
  }
  return r;
}

absl::StatusOr<Value> Clamp(const Value& lo0, const Value& x, const Value& hi0, const Shape& out) {
  Value tl, th;
  const Value& lo = MaybeBroadcastScalar(lo0, out, &tl);
  const Value& hi = MaybeBroadcastScalar(hi0, out, &th);
  ASSIGN_OR_RETURN(auto mx, Binary(HloOpcode::kMaximum, lo, x, out));
  return Binary(HloOpcode::kMinimum, mx, hi, out);
}

}  // namespace weave::eval::ops
