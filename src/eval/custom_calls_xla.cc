// The evaluator's meaning for custom-call targets that XLA itself defines and that appear in
// global modules users hand to Weave (XLA's SPMD partitioner tests hold each of them):
//
//  - "LayoutConstraint": an identity (XLA pins the operand's layout; layouts carry no values).
//  - "xla.debug.Log": a side effect that prints its operands; the result is the empty tuple `()`.
//  - "GetRngSeed": XLA's per-run RNG seed, a u64/s64 scalar. The evaluator returns a fixed value
//    (kEvaluatorRngSeed) so that runs are deterministic: a global and a partitioned run read the
//    same seed, which is what XLA gives every device of one run.
//  - "TopK": operand T[..., n] -> (T[..., k], s32[..., k]), the k largest elements of each row of
//    the last dimension with their indices, ties in index order (xla/service/topk_rewriter's custom
//    call; the GPU and CPU TopK kernels). Its comparator, when it has one, must be
//    `compare(p0, p1)` with direction GT (largest first) or LT (smallest first), IEEE or
//    TOTALORDER; without one it is GT in total order. Any other comparator is an error.
//  - XLA's partitioner-internal ops (xla/service/spmd/custom_call_handler.cc), by the global
//    meaning their partitioning implements; `backend_config` holds `key=value` pairs:
//      "_SPMDInternalOp_RotateRight" (dimension=d, amount=a): out[.., j, ..] = x[.., (j-a) mod n, ..].
//      "_SPMDInternalOp_MultiSlice" (dimension=d, amount=a, start_indices=[..],
//        limit_indices=[..], strides=[..]): a tuple of a+1 slices, slice i shifted by i along d.
//      "_SPMDInternalOp_MultiPad" (dimension=d, amount=a; operands x, pad value): with
//        p = pad(x, a low, a high along d), a tuple of a+1 windows of p, window i starting at i,
//        each as long along d as the result shape says.
//      "_SPMDInternalOp_MultiRotate" (dimension=d, left_amount=L, right_amount=R, bufferize=b):
//        a tuple of L+R+1 arrays of x's shape, element i = x rotated left by L - i along d
//        (out_i[.., j, ..] = x[.., (j + L - i) mod n, ..]); bufferize has no effect on values.
//      "_SPMDInternalOp_Wrap" (dimension=d, left_amount=L, right_amount=R): defined by the
//        shards of its own sharding, P tiles along d (n divisible by P, k = n/P): each shard
//        s of the result is x[s*k - L, s*k + k + R) along d, indices mod n, so the result is
//        n + P*(L+R) long. Without a sharding tiled along d it is an error.
// Errors: an InvalidArgumentError naming the instruction for a missing or malformed attribute, an
// operand or result shape that does not fit, or an unsupported comparator.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "eval/custom_calls.h"
#include "eval/ops.h"
#include "hlo/ir.h"
#include "hlo/spmd_internal_config.h"
#include "hlo/status_macros.h"

namespace weave::eval {
namespace {

// The seed GetRngSeed returns in every run of the evaluator.
constexpr int64_t kEvaluatorRngSeed = 0x5eed;

absl::Status Bad(const HloInstruction& instr, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("custom-call ", instr.name(), " (target \"",
                                                 instr.custom_call_target(), "\"): ", what));
}

using OpaqueAttrs = SpmdInternalConfig;

absl::StatusOr<OpaqueAttrs> ParseOpaque(const HloInstruction& instr) {
  absl::StatusOr<SpmdInternalConfig> c = ParseSpmdInternalConfig(instr.backend_config);
  if (!c.ok()) return Bad(instr, std::string(c.status().message()));
  return c;
}

absl::StatusOr<int64_t> NeedInt(const HloInstruction& instr, const OpaqueAttrs& a,
                                const std::string& key) {
  auto v = a.Int(key);
  if (!v) return Bad(instr, absl::StrCat("backend_config needs an integer '", key, "'"));
  return *v;
}

absl::StatusOr<Value> LayoutConstraint(const HloInstruction& instr,
                                       const std::vector<ValuePtr>& ops) {
  if (ops.size() != 1 || !ops[0]->shape.Compatible(instr.shape())) {
    return Bad(instr, "expects one operand of the result's shape");
  }
  Value v = *ops[0];
  v.shape = instr.shape();
  return v;
}

absl::StatusOr<Value> DebugLog(const HloInstruction& instr, const std::vector<ValuePtr>&) {
  if (!instr.shape().IsTuple() || !instr.shape().tuple_shapes.empty()) {
    return Bad(instr, "the result must be the empty tuple ()");
  }
  Value v;
  v.shape = instr.shape();
  return v;
}

absl::StatusOr<Value> GetRngSeed(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  const Shape& s = instr.shape();
  if (!ops.empty() || !s.IsArray() || !s.dims.empty() || !IsInteger(s.element_type)) {
    return Bad(instr, "takes no operands and returns an integer scalar");
  }
  Value v = Value::Zeros(s);
  v.SetInt(0, kEvaluatorRngSeed);
  return v;
}

absl::StatusOr<Value> TopK(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  const Shape& s = instr.shape();
  if (ops.size() != 1 || !ops[0]->shape.IsArray() || ops[0]->shape.dims.empty()) {
    return Bad(instr, "expects one array operand of rank >= 1");
  }
  const Value& x = *ops[0];
  const size_t rank = x.shape.dims.size();
  if (!s.IsTuple() || s.tuple_shapes.size() != 2 || s.tuple_shapes[0].dims.size() != rank ||
      s.tuple_shapes[1].dims.size() != rank || s.tuple_shapes[1].element_type != PrimitiveType::S32 ||
      s.tuple_shapes[0].element_type != x.shape.element_type) {
    return Bad(instr, "the result must be (T[..., k], s32[..., k]) for an operand T[..., n]");
  }
  const int64_t n = x.shape.dims.back(), k = s.tuple_shapes[0].dims.back();
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (s.tuple_shapes[0].dims[d] != x.shape.dims[d] || s.tuple_shapes[1].dims[d] != x.shape.dims[d]) {
      return Bad(instr, "the result's leading dimensions differ from the operand's");
    }
  }
  if (s.tuple_shapes[1].dims.back() != k || k > n) {
    return Bad(instr, absl::StrCat("k = ", k, " must be at most n = ", n, " in both results"));
  }
  bool largest = true, total_order = true;
  if (!instr.called_computations().empty()) {
    std::optional<ops::ParamCompare> pc = ops::MatchParamCompare(*instr.called_computations()[0]);
    if (!pc || (pc->dir != ComparisonDirection::kGt && pc->dir != ComparisonDirection::kLt)) {
      return Bad(instr, "the comparator must be compare(p0, p1) with direction GT or LT");
    }
    largest = pc->dir == ComparisonDirection::kGt;
    total_order = pc->total_order;
  }
  const bool ints = x.storage() == Storage::kInt;
  const bool unsigned_keys = IsUnsignedInteger(x.shape.element_type);
  Value vals = Value::Zeros(s.tuple_shapes[0]);
  Value idx = Value::Zeros(s.tuple_shapes[1]);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  const int64_t rows = n == 0 ? 0 : x.size() / n;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * n;
    std::iota(perm.begin(), perm.end(), 0);
    const ComparisonDirection dir = largest ? ComparisonDirection::kGt : ComparisonDirection::kLt;
    auto before = [&](int64_t a, int64_t b) {  // a is ranked ahead of b
      if (ints) {
        return ops::CompareInts(dir, x.i[static_cast<size_t>(base + a)], x.i[static_cast<size_t>(base + b)],
                                unsigned_keys);
      }
      return ops::CompareFloats(dir, x.GetDouble(base + a), x.GetDouble(base + b), total_order);
    };
    std::stable_sort(perm.begin(), perm.end(), before);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t src = base + perm[static_cast<size_t>(j)], dst = r * k + j;
      switch (x.storage()) {
        case Storage::kFloat: vals.f[static_cast<size_t>(dst)] = x.f[static_cast<size_t>(src)]; break;
        case Storage::kDouble: vals.d[static_cast<size_t>(dst)] = x.d[static_cast<size_t>(src)]; break;
        case Storage::kInt: vals.i[static_cast<size_t>(dst)] = x.i[static_cast<size_t>(src)]; break;
        default: return Bad(instr, "unsupported element type");
      }
      idx.i[static_cast<size_t>(dst)] = perm[static_cast<size_t>(j)];
    }
  }
  Value t;
  t.shape = s;
  t.elements = {Share(std::move(vals)), Share(std::move(idx))};
  return t;
}

absl::StatusOr<int64_t> CheckedDim(const HloInstruction& instr, const OpaqueAttrs& a,
                                   const Shape& operand) {
  ASSIGN_OR_RETURN(auto dim, NeedInt(instr, a, "dimension"));
  if (dim < 0 || dim >= static_cast<int64_t>(operand.dims.size())) {
    return Bad(instr, absl::StrCat("dimension ", dim, " is out of range for rank ",
                                   operand.dims.size()));
  }
  return dim;
}

// x rotated right by `a` (0 <= a < n) along `dim`: concat(x[n-a:], x[:n-a]).
Value Rotated(const Value& x, size_t dim, int64_t a, const Shape& result) {
  const int64_t n = x.shape.dims[dim];
  if (a == 0) {
    Value v = x;
    v.shape = result;
    return v;
  }
  std::vector<SliceDim> tail, head;
  for (size_t d = 0; d < x.shape.dims.size(); ++d) {
    tail.push_back({0, x.shape.dims[d], 1});
    head.push_back({0, x.shape.dims[d], 1});
  }
  tail[dim] = {n - a, n, 1};
  head[dim] = {0, n - a, 1};
  Shape ts = x.shape, hs = x.shape;
  ts.dims[dim] = a;
  hs.dims[dim] = n - a;
  const Value t = ops::Slice(x, ts, tail), h = ops::Slice(x, hs, head);
  return ops::Concatenate({&t, &h}, result, static_cast<int64_t>(dim));
}

// a mod n in [0, n) (n > 0).
int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

absl::StatusOr<Value> RotateRight(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 1 || !ops[0]->shape.IsArray() || !ops[0]->shape.Compatible(instr.shape())) {
    return Bad(instr, "expects one array operand of the result's shape");
  }
  ASSIGN_OR_RETURN(auto attrs, ParseOpaque(instr));
  ASSIGN_OR_RETURN(auto dim, CheckedDim(instr, attrs, ops[0]->shape));
  auto amount = NeedInt(instr, attrs, "amount");
  if (!amount.ok()) return amount.status();
  if (*amount < 0) return Bad(instr, "amount must not be negative");
  const Value& x = *ops[0];
  const int64_t n = x.shape.dims[static_cast<size_t>(dim)];
  return Rotated(x, static_cast<size_t>(dim), n == 0 ? 0 : *amount % n, instr.shape());
}

// Checks a tuple of `count` equal array shapes of the operand's element type `type`; returns the
// element shape.
absl::StatusOr<Shape> EqualTupleElements(const HloInstruction& instr, int64_t count, PrimitiveType type,
                                         const char* what = "amount + 1") {
  const Shape& s = instr.shape();
  if (!s.IsTuple() || static_cast<int64_t>(s.tuple_shapes.size()) != count) {
    return Bad(instr, absl::StrCat("the result must be a tuple of ", what, " = ", count, " arrays"));
  }
  for (const Shape& e : s.tuple_shapes) {
    if (!e.IsArray() || !e.Compatible(s.tuple_shapes[0])) {
      return Bad(instr, "the result's elements must have one shape");
    }
    if (e.element_type != type) {
      return Bad(instr, absl::StrCat("the result's elements must have the operand's element type ",
                                     std::string(PrimitiveTypeName(type))));
    }
  }
  return s.tuple_shapes[0];
}

// The error of a MultiSlice / MultiPad whose result elements have another rank than the operand
// (their windows index both by the operand's dimensions).
absl::Status ElementRankDiffers(const HloInstruction& instr, const Shape& operand) {
  return Bad(instr, absl::StrCat("the result's elements must have the operand's rank ",
                                 operand.rank(), " (", operand.ToString(false), ")"));
}

absl::StatusOr<Value> MultiSlice(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 1 || !ops[0]->shape.IsArray()) return Bad(instr, "expects one array operand");
  ASSIGN_OR_RETURN(auto attrs, ParseOpaque(instr));
  const Value& x = *ops[0];
  ASSIGN_OR_RETURN(auto dim, CheckedDim(instr, attrs, x.shape));
  auto amount = NeedInt(instr, attrs, "amount");
  if (!amount.ok()) return amount.status();
  if (*amount < 0 || *amount > (int64_t{1} << 20)) return Bad(instr, "amount is out of range");
  const size_t rank = x.shape.dims.size();
  const std::vector<int64_t>* starts = attrs.Array("start_indices");
  const std::vector<int64_t>* limits = attrs.Array("limit_indices");
  const std::vector<int64_t>* strides = attrs.Array("strides");
  if (!starts || !limits || starts->size() != rank || limits->size() != rank ||
      (strides && strides->size() != rank)) {
    return Bad(instr, absl::StrCat("start_indices, limit_indices (and strides) need ", rank,
                                   " entries each"));
  }
  ASSIGN_OR_RETURN(auto elem, EqualTupleElements(instr, *amount + 1, x.shape.element_type));
  if (elem.rank() != x.shape.rank()) return ElementRankDiffers(instr, x.shape);
  Value t;
  t.shape = instr.shape();
  for (int64_t i = 0; i <= *amount; ++i) {
    std::vector<SliceDim> sl(rank);
    for (size_t d = 0; d < rank; ++d) {
      const int64_t shift = static_cast<int64_t>(d) == dim ? i : 0;
      sl[d] = {(*starts)[d] + shift, (*limits)[d] + shift, strides ? (*strides)[d] : 1};
      const int64_t len = sl[d].stride <= 0 ? -1
                                            : (sl[d].limit - sl[d].start + sl[d].stride - 1) / sl[d].stride;
      if (sl[d].start < 0 || sl[d].limit > x.shape.dims[d] || sl[d].stride <= 0 ||
          len != elem.dims[d]) {
        return Bad(instr, absl::StrCat("slice ", i, " [", sl[d].start, ":", sl[d].limit, ":",
                                       sl[d].stride, "] of dimension ", d, " does not give ",
                                       elem.dims[d], " elements of ", x.shape.dims[d]));
      }
    }
    t.elements.push_back(Share(ops::Slice(x, elem, sl)));
  }
  return t;
}

absl::StatusOr<Value> MultiPad(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 2 || !ops[0]->shape.IsArray() || !ops[1]->shape.IsArray() ||
      !ops[1]->shape.dims.empty() || ops[1]->shape.element_type != ops[0]->shape.element_type) {
    return Bad(instr, "expects an array operand and a scalar pad value of its type");
  }
  ASSIGN_OR_RETURN(auto attrs, ParseOpaque(instr));
  const Value& x = *ops[0];
  auto dim = CheckedDim(instr, attrs, x.shape);
  if (!dim.ok()) return dim.status();
  auto amount = attrs.Int("amt") ? attrs.Int("amt") : attrs.Int("amount");
  if (!amount) return Bad(instr, "backend_config needs an integer 'amt'");
  if (*amount < 0 || *amount > (int64_t{1} << 20)) return Bad(instr, "amt is out of range");
  ASSIGN_OR_RETURN(auto elem, EqualTupleElements(instr, *amount + 1, x.shape.element_type));
  if (elem.rank() != x.shape.rank()) return ElementRankDiffers(instr, x.shape);
  const size_t rank = x.shape.dims.size(), d0 = static_cast<size_t>(*dim);
  std::vector<PadDim> pads(rank);
  pads[d0] = {*amount, *amount, 0};
  Shape ps = x.shape;
  ps.dims[d0] += 2 * *amount;
  for (size_t d = 0; d < rank; ++d) {
    // Along `dim` the window (amount + 1 starts) must lie inside the padded operand; elsewhere
    // the result keeps the operand's extent.
    const bool fits = d == d0 ? elem.dims[d] + *amount <= ps.dims[d] : elem.dims[d] == x.shape.dims[d];
    if (!fits) {
      return Bad(instr, absl::StrCat("the result's dimension ", d, " (", elem.dims[d],
                                     ") does not fit the operand padded by ", *amount, " (",
                                     ps.dims[d], ")"));
    }
  }
  const Value padded = ops::Pad(x, *ops[1], ps, pads);
  Value t;
  t.shape = instr.shape();
  for (int64_t i = 0; i <= *amount; ++i) {
    std::vector<SliceDim> sl(rank);
    for (size_t d = 0; d < rank; ++d) sl[d] = {0, ps.dims[d], 1};
    sl[d0] = {i, i + elem.dims[d0], 1};
    t.elements.push_back(Share(ops::Slice(padded, elem, sl)));
  }
  return t;
}

// The tile count of `instr`'s own sharding along `dim`, when that sharding is tiled there (the
// shard count a `_SPMDInternalOp_Wrap` is defined by).
std::optional<int64_t> WrapShardCount(const HloInstruction& instr, size_t dim) {
  if (!instr.sharding || instr.sharding->kind != HloSharding::Kind::kTiled) return std::nullopt;
  if (static_cast<int64_t>(dim) >= instr.sharding->DataRank()) return std::nullopt;
  const int64_t tiles = instr.sharding->tile_dims[dim];
  if (tiles < 1) return std::nullopt;
  return tiles;
}

// out[.., t, ..] = x[.., source[t], ..] along dimension d (out's other dims are x's).
Value TakeAlong(const Value& x, const Shape& out, size_t d, const std::vector<int64_t>& source) {
  Value r = Value::Zeros(out);
  int64_t outer = 1, inner = 1;
  for (size_t e = 0; e < d; ++e) outer *= out.dims[e];
  for (size_t e = d + 1; e < out.dims.size(); ++e) inner *= out.dims[e];
  const int64_t n = x.shape.dims[d], m = out.dims[d];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t t = 0; t < m; ++t) {
      const size_t dst = static_cast<size_t>((o * m + t) * inner);
      const size_t src = static_cast<size_t>((o * n + source[static_cast<size_t>(t)]) * inner);
      switch (x.storage()) {
        case Storage::kFloat: std::copy_n(x.f.begin() + src, inner, r.f.begin() + dst); break;
        case Storage::kDouble: std::copy_n(x.d.begin() + src, inner, r.d.begin() + dst); break;
        case Storage::kInt: std::copy_n(x.i.begin() + src, inner, r.i.begin() + dst); break;
        case Storage::kComplex: std::copy_n(x.c.begin() + src, inner, r.c.begin() + dst); break;
        default: break;
      }
    }
  }
  return r;
}

// The operand, dimension and left/right amounts of a MultiRotate or Wrap call.
struct LeftRightCall {
  const Value* x = nullptr;
  size_t dim = 0;
  int64_t left = 0, right = 0;
};

absl::StatusOr<LeftRightCall> ReadLeftRightCall(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (ops.size() != 1 || !ops[0]->shape.IsArray()) return Bad(instr, "expects one array operand");
  ASSIGN_OR_RETURN(auto attrs, ParseOpaque(instr));
  ASSIGN_OR_RETURN(auto dim, CheckedDim(instr, attrs, ops[0]->shape));
  ASSIGN_OR_RETURN(auto left, NeedInt(instr, attrs, "left_amount"));
  ASSIGN_OR_RETURN(auto right, NeedInt(instr, attrs, "right_amount"));
  if (left < 0 || right < 0 || left > (int64_t{1} << 20) || right > (int64_t{1} << 20)) {
    return Bad(instr, "left_amount and right_amount must be in [0, 2^20]");
  }
  return LeftRightCall{ops[0].get(), static_cast<size_t>(dim), left, right};
}

absl::StatusOr<Value> MultiRotate(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  ASSIGN_OR_RETURN(LeftRightCall call, ReadLeftRightCall(instr, ops));
  const Value& x = *call.x;
  const size_t d = call.dim;
  const int64_t left = call.left, right = call.right;
  ASSIGN_OR_RETURN(auto elem, EqualTupleElements(instr, left + right + 1, x.shape.element_type, "left_amount + right_amount + 1"));
  if (!elem.Compatible(x.shape)) return Bad(instr, "the result's elements must have the operand's shape");
  const int64_t n = x.shape.dims[d];
  Value t;
  t.shape = instr.shape();
  for (int64_t i = 0; i <= left + right; ++i) {
    // Element i is x rotated left by (left - i): rotated right by (i - left) mod n.
    t.elements.push_back(Share(Rotated(x, d, n == 0 ? 0 : Mod(i - left, n), elem)));
  }
  return t;
}

absl::StatusOr<Value> Wrap(const HloInstruction& instr, const std::vector<ValuePtr>& ops) {
  if (!instr.shape().IsArray()) return Bad(instr, "expects an array result");
  ASSIGN_OR_RETURN(LeftRightCall call, ReadLeftRightCall(instr, ops));
  const Value& x = *call.x;
  const size_t d = call.dim;
  const int64_t left = call.left, right = call.right;
  const Shape& out = instr.shape();
  std::optional<int64_t> parts = WrapShardCount(instr, d);
  if (!parts) {
    return Bad(instr, absl::StrCat("its meaning depends on its shards: it needs a tiled sharding along "
                                   "dimension ", d));
  }
  const int64_t n = x.shape.dims[d], p = *parts;
  if (out.rank() != x.shape.rank() || n % p != 0 || out.element_type != x.shape.element_type ||
      out.dims[d] != n + p * (left + right)) {
    return Bad(instr, absl::StrCat("the result must be the operand with ", left, " + ", right,
                                   " elements added to each of its ", p, " shards along dimension ", d));
  }
  for (size_t e = 0; e < out.dims.size(); ++e) {
    if (e != d && out.dims[e] != x.shape.dims[e]) return Bad(instr, "the result's other dimensions differ");
  }
  // Shard s of the result along d is x[s*k - left, s*k + k + right) along d, indices mod n.
  const int64_t k = n / p, w = k + left + right;
  std::vector<int64_t> source(static_cast<size_t>(out.dims[d]));
  for (int64_t t = 0; t < out.dims[d]; ++t) source[static_cast<size_t>(t)] = Mod((t / w) * k - left + t % w, n);
  return TakeAlong(x, out, d, source);
}

}  // namespace

void RegisterXlaCustomCalls() {
  RegisterCustomCallEvaluator("LayoutConstraint", LayoutConstraint);
  RegisterCustomCallEvaluator("xla.debug.Log", DebugLog);
  RegisterCustomCallEvaluator("GetRngSeed", GetRngSeed);
  RegisterCustomCallEvaluator("TopK", TopK);
  RegisterCustomCallEvaluator("_SPMDInternalOp_RotateRight", RotateRight);
  RegisterCustomCallEvaluator("_SPMDInternalOp_MultiSlice", MultiSlice);
  RegisterCustomCallEvaluator("_SPMDInternalOp_MultiPad", MultiPad);
  RegisterCustomCallEvaluator("_SPMDInternalOp_MultiRotate", MultiRotate);
  RegisterCustomCallEvaluator("_SPMDInternalOp_Wrap", Wrap);
}

}  // namespace weave::eval
