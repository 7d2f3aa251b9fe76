// Array kernels of the reference evaluator.
#include "eval/ops.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "eval/numerics.h"

namespace weave::eval::ops {
namespace {

using absl::InvalidArgumentError;

// Calls fn(src_vec, dst_vec) on the storage vectors both values use (same storage kind).
template <typename Fn>
void ForStorage(const Value& src, Value* dst, Fn&& fn) {
  switch (src.storage()) {
    case Storage::kFloat: fn(src.f, dst->f); break;
    case Storage::kDouble: fn(src.d, dst->d); break;
    case Storage::kInt: fn(src.i, dst->i); break;
    default: break;
  }
}

Value Empty(const Shape& out) {
  Value v;
  v.shape = out;
  const size_t n = static_cast<size_t>(out.ElementCount());
  switch (v.storage()) {
    case Storage::kFloat: v.f.resize(n); break;
    case Storage::kDouble: v.d.resize(n); break;
    case Storage::kInt: v.i.resize(n); break;
    default: break;
  }
  return v;
}

// Copies a box of `dims` from src (offset sbase, strides sstr) to dst (dbase, dstr).
template <typename T>
void StridedCopy(const T* src, int64_t sbase, const std::vector<int64_t>& sstr, T* dst,
                 int64_t dbase, const std::vector<int64_t>& dstr,
                 const std::vector<int64_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  for (int64_t d : dims) {
    if (d <= 0) return;
  }
  if (rank == 0) {
    dst[dbase] = src[sbase];
    return;
  }
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  const int64_t n_inner = dims[rank - 1];
  const int64_t s_inner = sstr[rank - 1], d_inner = dstr[rank - 1];
  int64_t so = sbase, dof = dbase;
  while (true) {
    if (s_inner == 1 && d_inner == 1) {
      std::copy(src + so, src + so + n_inner, dst + dof);
    } else {
      for (int64_t k = 0; k < n_inner; ++k) dst[dof + k * d_inner] = src[so + k * s_inner];
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      so += sstr[d];
      dof += dstr[d];
      if (idx[d] < dims[d]) break;
      so -= sstr[d] * dims[d];
      dof -= dstr[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

// Gathers from `a` into a new contiguous value of shape `out`: element at output index idx comes
// from a's flat offset base + sum(idx[j] * strides[j]).
Value Gather(const Value& a, const Shape& out, const std::vector<int64_t>& strides, int64_t base) {
  Value r = Empty(out);
  const std::vector<int64_t> dstr = Strides(out.dims);
  ForStorage(a, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), base, strides, d.data(), 0, dstr, out.dims);
  });
  return r;
}

// Broadcasts a scalar value to `dims` (or returns it unchanged when not scalar).
const Value& MaybeBroadcastScalar(const Value& v, const Shape& out, Value* tmp) {
  if (v.shape.dims.empty() && !out.dims.empty()) {
    Shape s = out.WithElementType(v.shape.element_type);
    *tmp = Broadcast(v, s, {});
    return *tmp;
  }
  return v;
}

bool IsTotalOrderLess(double a, double b) {
  // Total order: -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
  auto k2 = [&](double x) {
    int64_t k;
    std::memcpy(&k, &x, 8);
    // Map sign-magnitude to two's complement ordering.
    return k < 0 ? -(k & std::numeric_limits<int64_t>::max()) - 1 : k;
  };
  return k2(a) < k2(b);
}

std::string TypeName(const Shape& s) { return std::string(PrimitiveTypeName(s.element_type)); }

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

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t k = static_cast<int64_t>(dims.size()) - 2; k >= 0; --k) {
    s[static_cast<size_t>(k)] = s[static_cast<size_t>(k + 1)] * dims[static_cast<size_t>(k + 1)];
  }
  return s;
}

absl::StatusOr<Value> Unary(HloOpcode op, const Value& a, const Shape& out) {
  if (op == HloOpcode::kIsFinite) {
    Value r = Empty(out);
    const int64_t n = a.size();
    for (int64_t k = 0; k < n; ++k) r.i[static_cast<size_t>(k)] = std::isfinite(a.GetDouble(k));
    return r;
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
  Value r = Empty(out);
  const PrimitiveType t = out.element_type;
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
  if (a.storage() == Storage::kInt) {
    const bool u64 = a.shape.element_type == PrimitiveType::U64;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t x = a.i[static_cast<size_t>(k)], y = b.i[static_cast<size_t>(k)];
      bool res = false;
      const bool lt = u64 ? static_cast<uint64_t>(x) < static_cast<uint64_t>(y) : x < y;
      const bool gt = u64 ? static_cast<uint64_t>(x) > static_cast<uint64_t>(y) : x > y;
      switch (dir) {
        case ComparisonDirection::kEq: res = x == y; break;
        case ComparisonDirection::kNe: res = x != y; break;
        case ComparisonDirection::kLt: res = lt; break;
        case ComparisonDirection::kLe: res = !gt; break;
        case ComparisonDirection::kGt: res = gt; break;
        case ComparisonDirection::kGe: res = !lt; break;
      }
      r.i[static_cast<size_t>(k)] = res;
    }
    return r;
  }
  for (int64_t k = 0; k < n; ++k) {
    const double x = a.GetDouble(k), y = b.GetDouble(k);
    bool res = false;
    if (total_order) {
      const bool lt = IsTotalOrderLess(x, y), gt = IsTotalOrderLess(y, x);
      switch (dir) {
        case ComparisonDirection::kEq: res = !lt && !gt; break;
        case ComparisonDirection::kNe: res = lt || gt; break;
        case ComparisonDirection::kLt: res = lt; break;
        case ComparisonDirection::kLe: res = !gt; break;
        case ComparisonDirection::kGt: res = gt; break;
        case ComparisonDirection::kGe: res = !lt; break;
      }
    } else {
      switch (dir) {
        case ComparisonDirection::kEq: res = x == y; break;
        case ComparisonDirection::kNe: res = x != y; break;
        case ComparisonDirection::kLt: res = x < y; break;
        case ComparisonDirection::kLe: res = x <= y; break;
        case ComparisonDirection::kGt: res = x > y; break;
        case ComparisonDirection::kGe: res = x >= y; break;
      }
    }
    r.i[static_cast<size_t>(k)] = res;
  }
  return r;
}

absl::StatusOr<Value> Convert(const Value& a, const Shape& out) {
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

absl::StatusOr<Value> BitcastConvert(const Value& a, const Shape& out) {
  const PrimitiveType st = a.shape.element_type, dt = out.element_type;
  if (BitWidth(st) != BitWidth(dt) || a.size() != out.ElementCount()) {
    return InvalidArgumentError(absl::StrCat(
        "bitcast-convert between types of different widths (", TypeName(a.shape), " to ",
        TypeName(out), ") is not supported"));
  }
  auto bits_of = [&](int64_t k) -> uint64_t {
    switch (a.storage()) {
      case Storage::kFloat: return EncodeFloat(a.f[static_cast<size_t>(k)], st);
      case Storage::kDouble: {
        uint64_t u;
        std::memcpy(&u, &a.d[static_cast<size_t>(k)], 8);
        return u;
      }
      default: {
        const int w = BitWidth(st);
        const uint64_t mask = w >= 64 ? ~uint64_t{0} : ((uint64_t{1} << w) - 1);
        return static_cast<uint64_t>(a.i[static_cast<size_t>(k)]) & mask;
      }
    }
  };
  Value r = Empty(out);
  if (r.storage() == Storage::kNone || a.storage() == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat("bitcast-convert to ", TypeName(out),
                                             " is not supported"));
  }
  for (int64_t k = 0; k < out.ElementCount(); ++k) {
    const uint64_t u = bits_of(k);
    switch (r.storage()) {
      case Storage::kFloat:
        r.f[static_cast<size_t>(k)] = static_cast<float>(DecodeFloat(static_cast<uint32_t>(u), dt));
        break;
      case Storage::kDouble: std::memcpy(&r.d[static_cast<size_t>(k)], &u, 8); break;
      default: r.i[static_cast<size_t>(k)] = WrapToType(static_cast<int64_t>(u), dt); break;
    }
  }
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
    default: return Unsupported(HloOpcode::kSelect, out);
  }
  return r;
}

absl::StatusOr<Value> Clamp(const Value& lo0, const Value& x, const Value& hi0, const Shape& out) {
  Value tl, th;
  const Value& lo = MaybeBroadcastScalar(lo0, out, &tl);
  const Value& hi = MaybeBroadcastScalar(hi0, out, &th);
  auto mx = Binary(HloOpcode::kMaximum, lo, x, out);
  if (!mx.ok()) return mx.status();
  return Binary(HloOpcode::kMinimum, *mx, hi, out);
}

Value Broadcast(const Value& a, const Shape& out, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(out.dims.size(), 0);
  const std::vector<int64_t> as = Strides(a.shape.dims);
  for (size_t i = 0; i < dims.size() && i < as.size(); ++i) {
    strides[static_cast<size_t>(dims[i])] = a.shape.dims[i] == 1 ? 0 : as[i];
  }
  return Gather(a, out, strides, 0);
}

Value Transpose(const Value& a, const Shape& out, const std::vector<int64_t>& perm) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  std::vector<int64_t> strides(out.dims.size());
  for (size_t j = 0; j < perm.size(); ++j) strides[j] = as[static_cast<size_t>(perm[j])];
  return Gather(a, out, strides, 0);
}

Value Reshape(const Value& a, const Shape& out) {
  Value r = a;
  r.shape = out;
  return r;
}

Value Bitcast(const Value& a, const Shape& from, const Shape& out) {
  // Logical -> physical order of a (major-to-minor), reinterpret, physical -> logical of out.
  auto major_to_minor = [](const Shape& s) {
    std::vector<int64_t> m2m = s.MinorToMajor();
    std::reverse(m2m.begin(), m2m.end());
    return m2m;
  };
  const std::vector<int64_t> am = major_to_minor(from), om = major_to_minor(out);
  bool a_identity = true, o_identity = true;
  for (size_t k = 0; k < am.size(); ++k) a_identity &= am[k] == static_cast<int64_t>(k);
  for (size_t k = 0; k < om.size(); ++k) o_identity &= om[k] == static_cast<int64_t>(k);
  if (a_identity && o_identity) return Reshape(a, out);
  // Physical array of a: dims a.dims[am[k]].
  Shape phys = a.shape;
  phys.layout.reset();
  phys.dims.clear();
  for (int64_t d : am) phys.dims.push_back(a.shape.dims[static_cast<size_t>(d)]);
  Value p = a_identity ? a : Transpose(a, phys, am);
  // Out physical dims: out.dims[om[k]]; logical out[idx] = phys_out[idx permuted].
  Shape ophys = out;
  ophys.layout.reset();
  ophys.dims.clear();
  for (int64_t d : om) ophys.dims.push_back(out.dims[static_cast<size_t>(d)]);
  p.shape = ophys;
  if (o_identity) {
    p.shape = out;
    return p;
  }
  // inverse permutation: logical dim om[k] is physical dim k.
  std::vector<int64_t> inv(om.size());
  for (size_t k = 0; k < om.size(); ++k) inv[static_cast<size_t>(om[k])] = static_cast<int64_t>(k);
  return Transpose(p, out, inv);
}

Value Slice(const Value& a, const Shape& out, const std::vector<SliceDim>& slice) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  std::vector<int64_t> strides(as.size());
  int64_t base = 0;
  for (size_t j = 0; j < as.size(); ++j) {
    base += slice[j].start * as[j];
    strides[j] = as[j] * slice[j].stride;
  }
  return Gather(a, out, strides, base);
}

Value DynamicSlice(const Value& a, const Shape& out, std::vector<int64_t> starts) {
  const std::vector<int64_t> as = Strides(a.shape.dims);
  int64_t base = 0;
  for (size_t j = 0; j < as.size(); ++j) {
    starts[j] = std::clamp<int64_t>(starts[j], 0, a.shape.dims[j] - out.dims[j]);
    base += starts[j] * as[j];
  }
  return Gather(a, out, as, base);
}

Value DynamicUpdateSlice(const Value& a, const Value& update, std::vector<int64_t> starts) {
  Value r = a;
  const std::vector<int64_t> rs = Strides(a.shape.dims), us = Strides(update.shape.dims);
  int64_t base = 0;
  for (size_t j = 0; j < rs.size(); ++j) {
    starts[j] = std::clamp<int64_t>(starts[j], 0, a.shape.dims[j] - update.shape.dims[j]);
    base += starts[j] * rs[j];
  }
  ForStorage(update, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), 0, us, d.data(), base, rs, update.shape.dims);
  });
  return r;
}

Value Pad(const Value& a, const Value& pad_value, const Shape& out,
          const std::vector<PadDim>& padding) {
  Value r = Broadcast(pad_value, out, {});
  const size_t rank = a.shape.dims.size();
  const std::vector<int64_t> as = Strides(a.shape.dims), rs = Strides(out.dims);
  std::vector<int64_t> counts(rank), sstr(rank), dstr(rank);
  int64_t sbase = 0, dbase = 0;
  for (size_t j = 0; j < rank; ++j) {
    const int64_t step = padding[j].interior + 1;
    // Source indices i with 0 <= lo + i*step < out.dims[j].
    int64_t i0 = 0;
    if (padding[j].lo < 0) i0 = (-padding[j].lo + step - 1) / step;
    int64_t i1 = a.shape.dims[j];  // exclusive
    // largest i with lo + i*step <= out-1
    const int64_t max_pos = out.dims[j] - 1 - padding[j].lo;
    if (max_pos < 0) {
      i1 = 0;
    } else {
      i1 = std::min(i1, max_pos / step + 1);
    }
    counts[j] = std::max<int64_t>(0, i1 - i0);
    sbase += i0 * as[j];
    dbase += (padding[j].lo + i0 * step) * rs[j];
    sstr[j] = as[j];
    dstr[j] = rs[j] * step;
  }
  ForStorage(a, &r, [&](const auto& s, auto& d) {
    StridedCopy(s.data(), sbase, sstr, d.data(), dbase, dstr, counts);
  });
  return r;
}

Value Concatenate(const std::vector<const Value*>& parts, const Shape& out, int64_t dim) {
  Value r = Empty(out);
  const std::vector<int64_t> rs = Strides(out.dims);
  int64_t offset = 0;
  for (const Value* p : parts) {
    const std::vector<int64_t> ps = Strides(p->shape.dims);
    ForStorage(*p, &r, [&](const auto& s, auto& d) {
      StridedCopy(s.data(), 0, ps, d.data(), offset * rs[static_cast<size_t>(dim)], rs,
                  p->shape.dims);
    });
    offset += p->shape.dims[static_cast<size_t>(dim)];
  }
  return r;
}

Value Reverse(const Value& a, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides = Strides(a.shape.dims);
  int64_t base = 0;
  for (int64_t d : dims) {
    const size_t j = static_cast<size_t>(d);
    base += (a.shape.dims[j] - 1) * strides[j];
    strides[j] = -strides[j];
  }
  return Gather(a, a.shape, strides, base);
}

Value Iota(const Shape& out, int64_t dim) {
  Value r = Empty(out);
  const std::vector<int64_t> rs = Strides(out.dims);
  const int64_t n = out.ElementCount();
  const int64_t stride = rs[static_cast<size_t>(dim)], extent = out.dims[static_cast<size_t>(dim)];
  for (int64_t k = 0; k < n; ++k) r.SetInt(k, (k / stride) % extent);
  return r;
}

Value MoveReducedDimsLast(const Value& a, const std::vector<int64_t>& reduced, int64_t* outer,
                          int64_t* inner) {
  const size_t rank = a.shape.dims.size();
  std::vector<bool> is_red(rank, false);
  for (int64_t d : reduced) is_red[static_cast<size_t>(d)] = true;
  std::vector<int64_t> perm;
  *outer = 1;
  *inner = 1;
  for (size_t j = 0; j < rank; ++j) {
    if (!is_red[j]) {
      perm.push_back(static_cast<int64_t>(j));
      *outer *= a.shape.dims[j];
    }
  }
  for (size_t j = 0; j < rank; ++j) {
    if (is_red[j]) {
      perm.push_back(static_cast<int64_t>(j));
      *inner *= a.shape.dims[j];
    }
  }
  bool identity = true;
  for (size_t j = 0; j < rank; ++j) identity &= perm[j] == static_cast<int64_t>(j);
  if (identity) return a;
  Shape s = a.shape;
  s.layout.reset();
  for (size_t j = 0; j < rank; ++j) s.dims[j] = a.shape.dims[static_cast<size_t>(perm[j])];
  return Transpose(a, s, perm);
}

namespace {

// Layout of one dot operand as a [batch, rows, cols] matrix stack: `order` lists the operand dims
// in the order the gathered buffer uses.
struct DotSide {
  std::vector<int64_t> order;
  int64_t batch = 1, rows = 1, cols = 1;
};

// Gathers `v` (converted to T) into the order `order` (contiguous), or returns a pointer to v's own
// storage when it is already contiguous in that order and of type T.
template <typename T>
const T* PrepareOperand(const Value& v, const std::vector<int64_t>& order, std::vector<T>* buf) {
  bool identity = true;
  for (size_t j = 0; j < order.size(); ++j) identity &= order[j] == static_cast<int64_t>(j);
  if constexpr (std::is_same_v<T, float>) {
    if (identity && v.storage() == Storage::kFloat) return v.f.data();
  }
  if constexpr (std::is_same_v<T, double>) {
    if (identity && v.storage() == Storage::kDouble) return v.d.data();
  }
  const std::vector<int64_t> vs = Strides(v.shape.dims);
  std::vector<int64_t> dims(order.size()), strides(order.size());
  for (size_t j = 0; j < order.size(); ++j) {
    dims[j] = v.shape.dims[static_cast<size_t>(order[j])];
    strides[j] = vs[static_cast<size_t>(order[j])];
  }
  const int64_t n = v.shape.ElementCount();
  buf->resize(static_cast<size_t>(n));
  const std::vector<int64_t> ds = Strides(dims);
  if constexpr (std::is_same_v<T, float>) {
    if (v.storage() == Storage::kFloat) {
      StridedCopy(v.f.data(), 0, strides, buf->data(), 0, ds, dims);
      return buf->data();
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    if (v.storage() == Storage::kDouble) {
      StridedCopy(v.d.data(), 0, strides, buf->data(), 0, ds, dims);
      return buf->data();
    }
  }
  // Other storage: convert element by element through a gather of indices.
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), 0);
  StridedCopy(iota.data(), 0, strides, idx.data(), 0, ds, dims);
  for (int64_t k = 0; k < n; ++k) {
    if constexpr (std::is_same_v<T, int64_t>) {
      (*buf)[static_cast<size_t>(k)] = v.GetInt(idx[static_cast<size_t>(k)]);
    } else {
      (*buf)[static_cast<size_t>(k)] = static_cast<T>(v.GetDouble(idx[static_cast<size_t>(k)]));
    }
  }
  return buf->data();
}

}  // namespace

absl::StatusOr<Value> Dot(const Value& a, const Value& b, const Shape& out, const DotDims& dd) {
  const size_t ar = a.shape.dims.size(), br = b.shape.dims.size();
  if (dd.lhs_batch.size() != dd.rhs_batch.size() ||
      dd.lhs_contracting.size() != dd.rhs_contracting.size()) {
    return InvalidArgumentError("dot: batch/contracting dimension counts differ between sides");
  }
  std::vector<bool> a_used(ar, false), b_used(br, false);
  int64_t batch = 1, m = 1, k = 1, n = 1;
  std::vector<int64_t> a_order, b_order, a_free, b_free;
  for (size_t j = 0; j < dd.lhs_batch.size(); ++j) {
    const int64_t ad = dd.lhs_batch[j], bd = dd.rhs_batch[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid batch dimensions");
    }
    batch *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < dd.lhs_contracting.size(); ++j) {
    const int64_t ad = dd.lhs_contracting[j], bd = dd.rhs_contracting[j];
    if (ad < 0 || ad >= static_cast<int64_t>(ar) || bd < 0 || bd >= static_cast<int64_t>(br) ||
        a.shape.dims[ad] != b.shape.dims[bd]) {
      return InvalidArgumentError("dot: invalid contracting dimensions");
    }
    k *= a.shape.dims[ad];
    a_used[ad] = b_used[bd] = true;
  }
  for (size_t j = 0; j < ar; ++j) {
    if (!a_used[j]) {
      a_free.push_back(static_cast<int64_t>(j));
      m *= a.shape.dims[j];
    }
  }
  for (size_t j = 0; j < br; ++j) {
    if (!b_used[j]) {
      b_free.push_back(static_cast<int64_t>(j));
      n *= b.shape.dims[j];
    }
  }
  if (out.ElementCount() != batch * m * n) {
    return InvalidArgumentError(absl::StrCat("dot: result shape ", out.ToString(false),
                                             " does not match the operands"));
  }
  // lhs as [batch, m, k] (or [batch, k, m] transposed), rhs as [batch, k, n] (or [batch, n, k]).
  auto concat = [](std::vector<int64_t> x, const std::vector<int64_t>& y,
                   const std::vector<int64_t>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  auto is_identity = [](const std::vector<int64_t>& o) {
    for (size_t j = 0; j < o.size(); ++j) {
      if (o[j] != static_cast<int64_t>(j)) return false;
    }
    return true;
  };
  const std::vector<int64_t> a_mk = concat(dd.lhs_batch, a_free, dd.lhs_contracting);
  const std::vector<int64_t> a_km = concat(dd.lhs_batch, dd.lhs_contracting, a_free);
  const std::vector<int64_t> b_kn = concat(dd.rhs_batch, dd.rhs_contracting, b_free);
  const std::vector<int64_t> b_nk = concat(dd.rhs_batch, b_free, dd.rhs_contracting);
  const bool trans_a = !is_identity(a_mk) && is_identity(a_km);
  const bool trans_b = !is_identity(b_kn) && is_identity(b_nk);
  const std::vector<int64_t>& a_ord = trans_a ? a_km : a_mk;
  const std::vector<int64_t>& b_ord = trans_b ? b_nk : b_kn;

  Value r = Empty(out);
  const PrimitiveType ot = out.element_type;
  const bool use_double = r.storage() == Storage::kDouble || a.storage() == Storage::kDouble ||
                          b.storage() == Storage::kDouble;
  if (r.storage() == Storage::kInt) {
    std::vector<int64_t> abuf, bbuf;
    const int64_t* pa = PrepareOperand<int64_t>(a, a_mk, &abuf);
    const int64_t* pb = PrepareOperand<int64_t>(b, b_kn, &bbuf);
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          uint64_t acc = 0;
          for (int64_t q = 0; q < k; ++q) {
            acc += static_cast<uint64_t>(pa[(bi * m + i) * k + q]) *
                   static_cast<uint64_t>(pb[(bi * k + q) * n + j]);
          }
          r.i[static_cast<size_t>((bi * m + i) * n + j)] =
              WrapToType(static_cast<int64_t>(acc), ot);
        }
      }
    }
    return r;
  }
  if (r.storage() != Storage::kFloat && r.storage() != Storage::kDouble) {
    return InvalidArgumentError(absl::StrCat("dot with result type ", TypeName(out),
                                             " is not supported"));
  }
  if (m == 0 || n == 0 || batch == 0) return r;
  if (use_double) {
    std::vector<double> abuf, bbuf, cbuf;
    const double* pa = PrepareOperand<double>(a, a_ord, &abuf);
    const double* pb = PrepareOperand<double>(b, b_ord, &bbuf);
    double* pc;
    if (r.storage() == Storage::kDouble) {
      pc = r.d.data();
    } else {
      cbuf.resize(static_cast<size_t>(batch * m * n));
      pc = cbuf.data();
    }
    for (int64_t bi = 0; bi < batch; ++bi) {
      if (k == 0) {
        std::fill(pc + bi * m * n, pc + (bi + 1) * m * n, 0.0);
        continue;
      }
      cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0, pa + bi * m * k, static_cast<int>(trans_a ? m : k),
                  pb + bi * k * n, static_cast<int>(trans_b ? k : n), 0.0, pc + bi * m * n,
                  static_cast<int>(n));
    }
    if (r.storage() == Storage::kFloat) {
      for (size_t q = 0; q < cbuf.size(); ++q) r.f[q] = static_cast<float>(RoundToType(cbuf[q], ot));
    }
    return r;
  }
  std::vector<float> abuf, bbuf;
  const float* pa = PrepareOperand<float>(a, a_ord, &abuf);
  const float* pb = PrepareOperand<float>(b, b_ord, &bbuf);
  float* pc = r.f.data();
  for (int64_t bi = 0; bi < batch; ++bi) {
    if (k == 0) {
      std::fill(pc + bi * m * n, pc + (bi + 1) * m * n, 0.0f);
      continue;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, pa + bi * m * k, static_cast<int>(trans_a ? m : k),
                pb + bi * k * n, static_cast<int>(trans_b ? k : n), 0.0f, pc + bi * m * n,
                static_cast<int>(n));
  }
  if (ot != PrimitiveType::F32) {
    const size_t total = r.f.size();
    if (ot == PrimitiveType::BF16) {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundToBf16(pc[q]);
    } else {
      for (size_t q = 0; q < total; ++q) pc[q] = RoundFloatToType(pc[q], ot);
    }
  }
  return r;
}

absl::StatusOr<Value> FromLiteral(const Literal& lit, const Shape& shape) {
  Value r = Empty(shape);
  if (lit.elided) return Value::Zeros(shape);  // values unknown: zeros, as XLA's parser does
  if (r.storage() == Storage::kNone) {
    return InvalidArgumentError(absl::StrCat("constants of type ", TypeName(shape),
                                             " are not supported"));
  }
  const int64_t n = shape.ElementCount();
  const int64_t have = static_cast<int64_t>(lit.f.empty() ? lit.i.size() : lit.f.size());
  if (have != n && have != 1) {
    return InvalidArgumentError(absl::StrCat("constant literal has ", have,
                                             " values but its shape ", shape.ToString(false),
                                             " has ", n));
  }
  for (int64_t q = 0; q < n; ++q) {
    const int64_t src = have == 1 ? 0 : q;
    if (r.storage() == Storage::kInt) {
      r.i[static_cast<size_t>(q)] = WrapToType(lit.GetAsInt(src), shape.element_type);
    } else {
      r.SetDouble(q, lit.GetAsDouble(src));
    }
  }
  return r;
}

}  // namespace weave::eval::ops
