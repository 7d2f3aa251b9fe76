// Expansions before partitioning (see partition_expand.h).
#include "spmd/partition_expand.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "hlo/builders.h"
#include "hlo/spmd_internal_config.h"
#include "spmd/sharding.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

HloInstruction* Annotated(HloInstruction* h, const std::optional<HloSharding>& s) {
  if (s) h->sharding = *s;
  return h;
}

HloInstruction* SliceOf(HloComputation* c, HloInstruction* x, int64_t dim, int64_t start, int64_t limit,
                        const std::optional<HloSharding>& s) {
  Shape shape = x->shape();
  shape.dims[static_cast<size_t>(dim)] = limit - start;
  HloInstruction* sl = c->AddInstruction(HloOpcode::kSlice, shape, {x}, "slice");
  for (size_t d = 0; d < shape.dims.size(); ++d) {
    sl->mutable_slice()->push_back(static_cast<int64_t>(d) == dim ? SliceDim{start, limit, 1}
                                                                   : SliceDim{0, x->shape().dims[d], 1});
  }
  return Annotated(sl, s);
}

HloInstruction* PadOf(HloComputation* c, HloInstruction* x, HloInstruction* value, int64_t dim, int64_t lo,
                      int64_t hi, const std::optional<HloSharding>& s) {
  Shape shape = x->shape();
  shape.dims[static_cast<size_t>(dim)] += lo + hi;
  HloInstruction* p = c->AddInstruction(HloOpcode::kPad, shape, {x, value}, "pad");
  for (size_t d = 0; d < shape.dims.size(); ++d) {
    p->mutable_padding()->push_back(static_cast<int64_t>(d) == dim ? PadDim{lo, hi, 0} : PadDim{0, 0, 0});
  }
  return Annotated(p, s);
}

std::optional<HloSharding> Element(const std::optional<HloSharding>& s, size_t k) {
  if (!s) return std::nullopt;
  if (s->kind == HloSharding::Kind::kTuple) {
    if (k < s->tuple.size()) return s->tuple[k];
    return std::nullopt;
  }
  return s;
}

// Whether sharding `s` (of an array of shape `shape`) is tiled along `dim`.
bool TiledElement(const std::optional<HloSharding>& s, const Shape& shape, int64_t dim) {
  if (!s) return false;
  absl::StatusOr<Sharding> t = Sharding::FromHlo(*s, shape);
  return t.ok() && t->IsTiled() && !t->HasManualSubgroup() && dim < t->rank() && t->tile(dim) > 1;
}

// Whether `h` (array-shaped, with a sharding) is tiled along `dim` across partitions.
bool TiledAlong(const HloInstruction& h, int64_t dim) {
  return h.shape().IsArray() && TiledElement(h.sharding, h.shape(), dim);
}

std::optional<int64_t> Dim(const SpmdInternalConfig& cfg, const Shape& s) {
  std::optional<int64_t> d = cfg.Int("dimension");
  if (!d || *d < 0 || *d >= s.rank()) return std::nullopt;
  return d;
}

// A replicated scalar constant holding `lit`.
HloInstruction* ConstantOf(HloComputation* c, Literal lit, const std::string& name) {
  HloInstruction* k = c->AddInstruction(HloOpcode::kConstant, lit.shape, {}, name);
  k->literal = std::move(lit);
  k->sharding = HloSharding();
  return k;
}

// pred[out] along `dim`: compare(iota, bound) broadcast over the other dims, `iota` an s32[n]
// iota of out's extent along dim (rank 1: the mask costs one index per position of dim).
HloInstruction* IndexMask(HloComputation* c, HloInstruction* iota, const Shape& out, int64_t dim, int64_t bound,
                          ComparisonDirection dir, const std::string& bound_name, const std::string& cmp_name,
                          const std::optional<HloSharding>& s) {
  const Shape& s32 = iota->shape();
  HloInstruction* kb =
      AddBroadcast(c, ConstantOf(c, Literal::ScalarInt(PrimitiveType::S32, bound), bound_name), s32,
                   {}, "broadcast");
  kb->sharding = HloSharding();
  HloInstruction* cmp = c->AddInstruction(HloOpcode::kCompare, Shape(PrimitiveType::PRED, s32.dims), {iota, kb}, cmp_name);
  cmp->comparison_direction = dir;
  cmp->sharding = HloSharding();
  HloInstruction* m = AddBroadcast(c, cmp, Shape(PrimitiveType::PRED, out.dims), {dim}, "mask");
  return Annotated(m, s);
}

// An s32[n] iota along its only dim, replicated.
HloInstruction* IotaOf(HloComputation* c, int64_t n) {
  HloInstruction* iota = c->AddInstruction(HloOpcode::kIota, Shape(PrimitiveType::S32, {n}), {}, "iota");
  iota->iota_dimension = 0;
  iota->sharding = HloSharding();
  return iota;
}

// The concatenate of `parts` along `dim` (result shape `out`, tiled along dim by `sharding`) as
// zero pads picked by an index mask (see the header).
HloInstruction* ExpandConcatenate(HloComputation* c, const std::vector<HloInstruction*>& parts, int64_t dim,
                                  const Shape& out, const std::optional<HloSharding>& sharding) {
  const int64_t total = out.dims[static_cast<size_t>(dim)];
  HloInstruction* zero = ConstantOf(c, Literal::Scalar(out.element_type, 0), "zero");
  HloInstruction* iota = IotaOf(c, total);
  std::vector<HloInstruction*> padded;
  std::vector<int64_t> ends;
  int64_t at = 0;
  for (HloInstruction* x : parts) {
    const int64_t len = x->shape().dims[static_cast<size_t>(dim)];
    padded.push_back(PadOf(c, x, zero, dim, at, total - at - len, sharding));
    at += len;
    ends.push_back(at);
  }
  HloInstruction* result = padded.back();
  for (size_t k = padded.size() - 1; k-- > 0;) {
    HloInstruction* mask =
        IndexMask(c, iota, out, dim, ends[k], ComparisonDirection::kLt, "end", "in_operand", sharding);
    result = Annotated(c->AddInstruction(HloOpcode::kSelect, out, {mask, padded[k], result}, "select"), sharding);
  }
  return result;
}

// x rotated right by a (0 <= a < n) along dim: concatenate(x[n-a:], x[:n-a]), or, where the
// result is tiled along dim, that concatenate as masked zero pads (ExpandConcatenate).
HloInstruction* RotateRightOf(HloComputation* c, HloInstruction* x, int64_t dim, int64_t a,
                              const std::optional<HloSharding>& s, bool tiled, std::string* note) {
  const Shape& xs = x->shape();
  const int64_t n = xs.dims[static_cast<size_t>(dim)];
  if (a == 0) return Annotated(c->AddInstruction(HloOpcode::kCopy, xs, {x}, "copy"), s);
  HloInstruction* tail = SliceOf(c, x, dim, n - a, n, s);
  HloInstruction* head = SliceOf(c, x, dim, 0, n - a, s);
  if (tiled) {
    *note = "; its concatenate along the tiled dim as zero pads picked by an index mask";
    return ExpandConcatenate(c, {tail, head}, dim, xs, s);
  }
  HloInstruction* cat = c->AddInstruction(HloOpcode::kConcatenate, xs, {tail, head}, "concatenate");
  cat->dimensions = {dim};
  return Annotated(cat, s);
}

HloInstruction* ReshapeOf(HloComputation* c, HloInstruction* x, const Shape& shape,
                          const std::optional<HloSharding>& s) {
  return Annotated(c->AddInstruction(HloOpcode::kReshape, shape, {x}, "reshape"), s);
}

// `s` (of `shape`) with `dim` split into [tiles, rest]: the tiling on the major part.
std::optional<HloSharding> SplitSharding(const Sharding& s, int64_t dim) {
  std::vector<int64_t> tiles = s.tiles();
  tiles.insert(tiles.begin() + dim + 1, 1);
  absl::StatusOr<Sharding> split = Sharding::Tiled(tiles, s.subgroups(), s.devices());
  if (!split.ok()) return std::nullopt;
  return split->ToHlo();
}

// "_SPMDInternalOp_Wrap" (see the evaluator's definition, eval/custom_calls_xla.cc): with P tiles
// along dim in its own sharding and k = n/P, dim is split into [P, k]; each row gets the last L
// elements of the row before (x rotated right by L, first L columns) and the first R of the row
// after (x rotated left by R, last R columns), concatenated along the row, and merged back.
HloInstruction* ExpandWrap(HloComputation* c, HloInstruction* h, const SpmdInternalConfig& cfg, int64_t dim,
                           std::string* what, std::string* note) {
  HloInstruction* x = h->operand(0);
  const Shape& xs = x->shape();
  const Shape& out = h->shape();
  const size_t d = static_cast<size_t>(dim);
  std::optional<int64_t> left = cfg.Int("left_amount"), right = cfg.Int("right_amount");
  if (!left || !right || *left < 0 || *right < 0 || !h->sharding || out.rank() != xs.rank() ||
      out.element_type != xs.element_type) {
    return nullptr;
  }
  absl::StatusOr<Sharding> os = Sharding::FromHlo(*h->sharding, out);
  if (!os.ok() || !os->IsTiled() || os->HasManualSubgroup() || dim >= os->rank()) return nullptr;
  const int64_t p = os->tile(dim), n = xs.dims[d], L = *left, R = *right;
  if (p < 1 || n % p != 0 || out.dims[d] != n + p * (L + R)) return nullptr;
  for (size_t e = 0; e < xs.dims.size(); ++e) {
    if (e != d && out.dims[e] != xs.dims[e]) return nullptr;
  }
  const int64_t k = n / p;
  if (L > k || R > k) return nullptr;  // a halo from beyond the neighbouring shard
  // The split shape [.., P, k, ..] and its sharding: the result's tiles with 1 after dim.
  const std::optional<HloSharding> ss = SplitSharding(*os, dim);
  if (!ss) return nullptr;
  Shape split = xs;
  split.dims[d] = k;
  split.dims.insert(split.dims.begin() + dim, p);
  const bool tiled = p > 1;
  std::vector<HloInstruction*> pieces;
  if (L > 0) {
    HloInstruction* r = ReshapeOf(c, RotateRightOf(c, x, dim, L % n, h->sharding, tiled, note), split, ss);
    pieces.push_back(SliceOf(c, r, dim + 1, 0, L, ss));
  }
  pieces.push_back(ReshapeOf(c, x, split, ss));
  if (R > 0) {
    HloInstruction* r = ReshapeOf(c, RotateRightOf(c, x, dim, (n - R % n) % n, h->sharding, tiled, note), split, ss);
    pieces.push_back(SliceOf(c, r, dim + 1, k - R, k, ss));
  }
  Shape rows = split;
  rows.dims[d + 1] = k + L + R;
  HloInstruction* cat = c->AddInstruction(HloOpcode::kConcatenate, rows, pieces, "concatenate");
  cat->dimensions = {dim + 1};
  Annotated(cat, ss);
  *what = absl::StrCat("each of ", p, " shards along dim ", dim, " with ", L, " elements of the shard before and ", R,
                       " of the one after, as rotations of the rows of a [", p, ",", k, "] split");
  return ReshapeOf(c, cat, out, h->sharding);
}

// The replacement of an XLA partitioner-internal custom call, or nullptr.
// *what says what it became, *note what more was done (appended after the remark).
HloInstruction* ExpandInternalOp(HloComputation* c, HloInstruction* h, std::string* what, std::string* note) {
  const std::string& target = h->custom_call_target();
  if (h->operand_count() < 1 || !h->operand(0)->shape().IsArray()) return nullptr;
  absl::StatusOr<SpmdInternalConfig> cfg = ParseSpmdInternalConfig(h->backend_config);
  if (!cfg.ok()) return nullptr;
  HloInstruction* x = h->operand(0);
  const Shape& xs = x->shape();
  std::optional<int64_t> dim = Dim(*cfg, xs);
  if (!dim) return nullptr;
  const size_t d = static_cast<size_t>(*dim);
  if (target == "_SPMDInternalOp_RotateRight" && h->operand_count() == 1 && h->shape().IsArray() &&
      h->shape().Compatible(xs)) {
    std::optional<int64_t> amount = cfg->Int("amount");
    const int64_t n = xs.dims[d];
    if (!amount || *amount < 0 || n == 0) return nullptr;
    const int64_t a = *amount % n;
    *what = absl::StrCat("rotate right by ", a, " along dim ", *dim);
    return RotateRightOf(c, x, *dim, a, h->sharding, TiledAlong(*h, *dim), note);
  }
  if (target == "_SPMDInternalOp_Wrap" && h->operand_count() == 1 && h->shape().IsArray()) {
    return ExpandWrap(c, h, *cfg, *dim, what, note);
  }
  if (!h->shape().IsTuple() || h->shape().tuple_shapes.empty()) return nullptr;
  const Shape elem = h->shape().tuple_shapes[0];
  for (const Shape& e : h->shape().tuple_shapes) {
    if (!e.IsArray() || !e.Compatible(elem) || e.rank() != xs.rank()) return nullptr;
  }
  const int64_t count = static_cast<int64_t>(h->shape().tuple_shapes.size());
  std::vector<HloInstruction*> parts;
  if (target == "_SPMDInternalOp_MultiSlice" && h->operand_count() == 1) {
    const std::vector<int64_t>* starts = cfg->Array("start_indices");
    const std::vector<int64_t>* limits = cfg->Array("limit_indices");
    const std::vector<int64_t>* strides = cfg->Array("strides");
    std::optional<int64_t> amount = cfg->Int("amount");
    const size_t rank = xs.dims.size();
    if (!amount || *amount + 1 != count || !starts || !limits || starts->size() != rank ||
        limits->size() != rank || (strides && strides->size() != rank) ||
        elem.element_type != xs.element_type) {
      return nullptr;
    }
    // Every slice checked before any instruction is added (a refused call is left untouched).
    std::vector<std::vector<SliceDim>> slices(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      for (size_t e = 0; e < rank; ++e) {
        const int64_t shift = e == d ? i : 0;
        const SliceDim sd{(*starts)[e] + shift, (*limits)[e] + shift, strides ? (*strides)[e] : 1};
        const int64_t len = sd.stride <= 0 ? -1 : (sd.limit - sd.start + sd.stride - 1) / sd.stride;
        if (sd.start < 0 || sd.limit > xs.dims[e] || len != elem.dims[e]) return nullptr;
        slices[static_cast<size_t>(i)].push_back(sd);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      HloInstruction* sl = c->AddInstruction(HloOpcode::kSlice, elem, {x}, "slice");
      *sl->mutable_slice() = slices[static_cast<size_t>(i)];
      parts.push_back(Annotated(sl, Element(h->sharding, static_cast<size_t>(i))));
    }
    *what = absl::StrCat(count, " shifted slices along dim ", *dim);
  } else if (target == "_SPMDInternalOp_MultiPad" && h->operand_count() == 2 &&
             h->operand(1)->shape().IsArray() && h->operand(1)->shape().rank() == 0) {
    std::optional<int64_t> amount = cfg->Int("amt") ? cfg->Int("amt") : cfg->Int("amount");
    if (!amount || *amount < 0 || *amount + 1 != count) return nullptr;
    if (h->operand(1)->shape().element_type != xs.element_type || elem.element_type != xs.element_type) {
      return nullptr;
    }
    // Checked before any instruction is added: the other dims as the operand's, every window
    // inside the padded dim.
    for (size_t e = 0; e < xs.dims.size(); ++e) {
      if (e != d && elem.dims[e] != xs.dims[e]) return nullptr;
    }
    if (count - 1 + elem.dims[d] > xs.dims[d] + 2 * *amount) return nullptr;
    HloInstruction* padded = PadOf(c, x, h->operand(1), *dim, *amount, *amount, Element(h->sharding, 0));
    for (int64_t i = 0; i < count; ++i) {
      parts.push_back(SliceOf(c, padded, *dim, i, i + elem.dims[d], Element(h->sharding, static_cast<size_t>(i))));
    }
    *what = absl::StrCat("pad by ", *amount, " and ", count, " windows along dim ", *dim);
  } else if (target == "_SPMDInternalOp_MultiRotate" && h->operand_count() == 1) {
    std::optional<int64_t> left = cfg->Int("left_amount"), right = cfg->Int("right_amount");
    const int64_t n = xs.dims[d];
    if (!left || !right || *left < 0 || *right < 0 || *left + *right + 1 != count || n == 0 ||
        !elem.Compatible(xs)) {
      return nullptr;
    }
    for (int64_t i = 0; i < count; ++i) {
      // Element i: x rotated left by left - i, i.e. right by (i - left) mod n.
      const std::optional<HloSharding> es = Element(h->sharding, static_cast<size_t>(i));
      const bool tiled = TiledElement(es, xs, *dim);
      parts.push_back(RotateRightOf(c, x, *dim, (((i - *left) % n) + n) % n, es, tiled, note));
    }
    *what = absl::StrCat(count, " rotations (left by ", *left, " to right by ", *right, ") along dim ", *dim);
  } else {
    return nullptr;
  }
  HloInstruction* t = c->AddInstruction(HloOpcode::kTuple, h->shape(), parts, "tuple");
  return Annotated(t, h->sharding);
}

const HloInstruction* SkipCopies(const HloInstruction* x) {
  while (x->opcode() == HloOpcode::kCopy && x->operand_count() == 1) x = x->operand(0);
  return x;
}

// A stride-1 slice of `of` along `dim` (whole along the others, as a concatenate's operand of
// `of`'s extent there is): its start, else nullopt.
std::optional<int64_t> SliceStart(const HloInstruction* s, const HloInstruction* of, int64_t dim) {
  if (s->opcode() != HloOpcode::kSlice || s->operand(0) != of) return std::nullopt;
  const SliceDim& sd = s->slice()[static_cast<size_t>(dim)];
  if (sd.stride != 1) return std::nullopt;
  return sd.start;
}

// concatenate(slice(x, [n-a:n]), slice(x, [0:n-a])) along a tiled dim, x sharded as the
// concatenate: x rotated right by a (XLA's FindRotateRightPattern), expanded as RotateRight.
HloInstruction* ExpandRotatePattern(HloComputation* c, HloInstruction* h, int64_t dim, std::string* what,
                                    std::string* note) {
  if (h->operand_count() != 2) return nullptr;
  const HloInstruction* lhs = SkipCopies(h->operand(0));
  const HloInstruction* rhs = SkipCopies(h->operand(1));
  if (lhs->opcode() != HloOpcode::kSlice || rhs->opcode() != HloOpcode::kSlice) return nullptr;
  HloInstruction* x = const_cast<HloInstruction*>(lhs->operand(0));
  std::optional<int64_t> ls = SliceStart(lhs, x, dim), rs = SliceStart(rhs, x, dim);
  if (!ls || !rs || !x->shape().Compatible(h->shape()) || !x->sharding) return nullptr;
  absl::StatusOr<Sharding> xs = Sharding::FromHlo(*x->sharding, x->shape());
  absl::StatusOr<Sharding> hs = Sharding::FromHlo(*h->sharding, h->shape());
  if (!xs.ok() || !hs.ok() || *xs != *hs) return nullptr;  // x sharded as the concatenate
  if (rhs->slice()[static_cast<size_t>(dim)].limit != *ls || *rs != 0) return nullptr;
  const int64_t a = lhs->shape().dims[static_cast<size_t>(dim)];
  *what = absl::StrCat("rotate right by ", a, " along dim ", dim, ", written as concatenate(slice, slice)");
  return RotateRightOf(c, x, dim, a, h->sharding, true, note);
}

// concatenate(f(slice(x)), x, g(slice(x))) along a tiled dim, f and g chains of single-use
// elementwise unary ops (XLA's FindPadWithWrapPattern: a wrap-around pad, as jnp.pad's
// mode="wrap" writes it): pad(x) by the two widths, rotated so that each slice lands in its end,
// the chains applied to the rotations, and the three picked by an index mask.
HloInstruction* ExpandPadWrapPattern(HloComputation* c, HloInstruction* h, int64_t dim, std::string* what,
                                     std::string* note) {
  if (h->operand_count() != 3) return nullptr;
  HloInstruction* mid = const_cast<HloInstruction*>(SkipCopies(h->operand(1)));
  auto strip = [](const HloInstruction* x, std::vector<const HloInstruction*>* chain) {
    x = SkipCopies(x);
    while (IsElementwiseUnary(x->opcode()) && x->operand_count() == 1 && x->users().size() == 1) {
      if (x->opcode() != HloOpcode::kCopy) chain->push_back(x);
      x = x->operand(0);
    }
    return x;
  };
  std::vector<const HloInstruction*> lhs_chain, rhs_chain;
  const HloInstruction* lhs = strip(h->operand(0), &lhs_chain);
  const HloInstruction* rhs = strip(h->operand(2), &rhs_chain);
  std::optional<int64_t> ls = SliceStart(lhs, mid, dim), rs = SliceStart(rhs, mid, dim);
  if (!ls || !rs || mid->shape().element_type != h->shape().element_type) return nullptr;
  const Shape& out = h->shape();
  const int64_t p = out.dims[static_cast<size_t>(dim)];
  const int64_t low = lhs->shape().dims[static_cast<size_t>(dim)], high = rhs->shape().dims[static_cast<size_t>(dim)];
  HloInstruction* zero = ConstantOf(c, Literal::Scalar(out.element_type, 0), "zero");
  HloInstruction* padded = PadOf(c, mid, zero, dim, low, high, h->sharding);
  auto rotated = [&](int64_t start, const std::vector<const HloInstruction*>& chain) {
    const int64_t right = ((p - start) % p + p) % p;
    HloInstruction* r = RotateRightOf(c, padded, dim, right, h->sharding, true, note);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Shape s = out;
      s.element_type = (*it)->shape().element_type;
      r = Annotated(c->AddInstruction((*it)->CloneWithNewOperands(s, {r})), h->sharding);
    }
    return r;
  };
  HloInstruction* left = rotated(*ls + low, lhs_chain);
  HloInstruction* right = rotated(*rs + low + high, rhs_chain);
  // Positions < low from `left`, >= p - high from `right`, the padded x between.
  HloInstruction* iota = IotaOf(c, p);
  auto mask = [&](int64_t bound, ComparisonDirection dir) {
    return IndexMask(c, iota, out, dim, bound, dir, "bound", "in_wrap", h->sharding);
  };
  HloInstruction* r = Annotated(
      c->AddInstruction(HloOpcode::kSelect, out, {mask(p - high, ComparisonDirection::kGe), right, padded}, "select"),
      h->sharding);
  r = Annotated(c->AddInstruction(HloOpcode::kSelect, out, {mask(low, ComparisonDirection::kLt), left, r}, "select"),
                h->sharding);
  *what = absl::StrCat("a wrap-around pad by ", low, " and ", high, " along dim ", dim,
                       " (concatenate(slice, x, slice)", lhs_chain.empty() && rhs_chain.empty() ? "" : " with elementwise ops on the slices",
                       "), written as two rotations of the padded value");
  return r;
}

// The sort of a top-k (XLA's sort-in-TopK: jax.lax.top_k lowered without its custom call):
//   sort(values, iota along d), dimensions={d}, each result read only by slices [0:k] along d,
// with d tiled T ways, n = T * m, k <= m. Written as the two-stage top-k XLA's partitioner
// builds: d split into [T, m], sorted along m and sliced to k (local to each tile), merged to
// T*k candidates, sorted again with d whole (the candidates gathered) and sliced to k. Ties keep
// the order of the global stable sort (tiles in order, then positions in a tile).
// The replaced slices are appended to *dead: they, their get-tuple-elements and the sort are
// removed by the caller once it has walked the computation (they follow the sort in its walk).
bool ExpandSortTopK(HloComputation* c, HloInstruction* h, std::string* what, std::vector<HloInstruction*>* dead) {
  if (h->operand_count() != 2 || h->dimensions.size() != 1 || !h->shape().IsTuple() || !h->sharding) return false;
  const int64_t d = h->dimensions[0];
  HloInstruction* values = h->operand(0);
  const HloInstruction* idx = SkipCopies(h->operand(1));
  if (idx->opcode() != HloOpcode::kIota || idx->iota_dimension != d) return false;  // XLA: an iota payload only
  const Shape& vs = values->shape();
  // The tiling along d: the values' own (as XLA reads it), else the sort's.
  auto tiled_along = [&](const std::optional<HloSharding>& hs) -> std::optional<Sharding> {
    if (!hs) return std::nullopt;
    absl::StatusOr<Sharding> r = Sharding::FromHlo(*hs, vs);
    if (!r.ok() || !r->IsTiled() || r->HasManualSubgroup() || d >= r->rank() || r->tile(d) < 2) return std::nullopt;
    return *r;
  };
  std::optional<Sharding> s = tiled_along(values->sharding);
  if (!s) s = tiled_along(Element(h->sharding, 0));
  if (!s) return false;
  const std::optional<HloSharding> es = s->ToHlo();
  const int64_t t = s->tile(d), n = vs.dims[static_cast<size_t>(d)];
  if (n % t != 0) return false;
  const int64_t m = n / t;
  // Every result read only by slices [0:k] along d (whole elsewhere), one k.
  int64_t k = -1;
  std::vector<HloInstruction*> slices[2];
  for (HloInstruction* u : h->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement || u->tuple_index < 0 || u->tuple_index > 1) return false;
    for (HloInstruction* sl : u->users()) {
      if (sl->opcode() != HloOpcode::kSlice) return false;
      for (size_t e = 0; e < sl->slice().size(); ++e) {
        const SliceDim& sd = sl->slice()[e];
        const bool along = static_cast<int64_t>(e) == d;
        if (sd.start != 0 || sd.stride != 1 || (!along && sd.limit != vs.dims[e])) return false;
        if (along && k >= 0 && sd.limit != k) return false;
        if (along) k = sd.limit;
      }
      slices[u->tuple_index].push_back(sl);
    }
  }
  if (k <= 0 || k > m || (slices[0].empty() && slices[1].empty())) return false;
  std::optional<HloSharding> split = SplitSharding(*s, d);
  // Stage 2 in the sort's own sharding with d whole.
  std::optional<Sharding> whole;
  if (std::optional<HloSharding> own = Element(h->sharding, 0)) {
    absl::StatusOr<Sharding> o = Sharding::FromHlo(*own, vs);
    if (o.ok()) whole = ReplicateDims(*o, {d});
  }
  if (!whole) whole = ReplicateDims(*s, {d});
  if (!split || !whole) return false;
  auto tuple_of = [](const std::optional<HloSharding>& e) {
    HloSharding t;
    t.kind = HloSharding::Kind::kTuple;
    t.tuple = {*e, *e};
    return t;
  };
  // Stage 1: [.., T, m, ..], sorted along m, k taken.
  auto split_shape = [&](const Shape& x, int64_t inner) {
    Shape r = x;
    r.dims[static_cast<size_t>(d)] = inner;
    r.dims.insert(r.dims.begin() + d, t);
    return r;
  };
  HloInstruction* v1 = ReshapeOf(c, values, split_shape(vs, m), split);
  HloInstruction* i1 = ReshapeOf(c, h->operand(1), split_shape(h->operand(1)->shape(), m), split);
  const Shape sorted1 = Shape::Tuple({v1->shape(), i1->shape()});
  HloInstruction* s1 = c->AddInstruction(h->CloneWithNewOperands(sorted1, {v1, i1}));
  s1->dimensions = {d + 1};
  s1->sharding = tuple_of(split);
  // The candidates, d whole: gathered where they are made (the second sort then runs locally).
  const std::optional<HloSharding> ws = whole->ToHlo();
  HloInstruction* cand[2];
  for (int j = 0; j < 2; ++j) {
    HloInstruction* g = AddGetTupleElement(c, s1, j, "get-tuple-element");
    Annotated(g, split);
    HloInstruction* top = SliceOf(c, g, d + 1, 0, k, split);
    Shape merged = h->shape().tuple_shapes[static_cast<size_t>(j)];
    merged.dims[static_cast<size_t>(d)] = t * k;
    cand[j] = ReshapeOf(c, top, merged, ws);
  }
  // Stage 2: the T*k candidates sorted and sliced to k.
  const Shape sorted2 = Shape::Tuple({cand[0]->shape(), cand[1]->shape()});
  HloInstruction* s2 = c->AddInstruction(h->CloneWithNewOperands(sorted2, {cand[0], cand[1]}));
  s2->dimensions = {d};
  s2->sharding = tuple_of(ws);
  for (int j = 0; j < 2; ++j) {
    if (slices[j].empty()) continue;
    HloInstruction* g = AddGetTupleElement(c, s2, j, "get-tuple-element");
    Annotated(g, ws);
    HloInstruction* top = SliceOf(c, g, d, 0, k, ws);
    for (HloInstruction* sl : slices[j]) {
      if (sl->sharding) top->sharding = sl->sharding;
      if (!sl->ReplaceAllUsesWith(top).ok()) return false;
    }
  }
  dead->insert(dead->end(), slices[0].begin(), slices[0].end());
  dead->insert(dead->end(), slices[1].begin(), slices[1].end());
  *what = absl::StrCat("the sort of a top-", k, " along dim ", d, " (tiled ", t,
                       " ways) as a top-k per tile and a sort of the ", t * k, " candidates");
  return true;
}

// A concatenate along a tiled dim in one of XLA's rotate or wrap-pad forms, or nullptr.
HloInstruction* ExpandConcatPattern(HloComputation* c, HloInstruction* h, std::string* what, std::string* note) {
  if (h->dimensions.size() != 1 || !h->shape().IsArray() || !h->sharding) return nullptr;
  const int64_t dim = h->dimensions[0];
  if (!TiledAlong(*h, dim)) return nullptr;
  if (HloInstruction* r = ExpandRotatePattern(c, h, dim, what, note)) return r;
  return ExpandPadWrapPattern(c, h, dim, what, note);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ExpandForPartitioning(HloModule* module) {
  std::vector<std::pair<std::string, std::string>> remarks;
  for (HloComputation* c : module->computations()) {
    std::vector<HloInstruction*> dead;  // replaced top-k slices, removed after the walk
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      if (h->opcode() == HloOpcode::kSort) {
        std::string what;
        if (ExpandSortTopK(c, h, &what, &dead)) {
          remarks.push_back({h->name(), absl::StrCat("sort: ", what)});
        }
        continue;
      }
      if (h->opcode() == HloOpcode::kConcatenate) {
        std::string what, note;
        HloInstruction* replacement = ExpandConcatPattern(c, h, &what, &note);
        if (replacement == nullptr) continue;
        const std::string name = h->name();
        if (!c->ReplaceInstruction(h, replacement).ok()) continue;
        remarks.push_back({name, absl::StrCat("concatenate: ", what, " for the slice, pad and concatenate rules", note)});
        continue;
      }
      if (h->opcode() != HloOpcode::kCustomCall || !absl::StartsWith(h->custom_call_target(), "_SPMDInternalOp_")) {
        continue;
      }
      std::string what, note;
      HloInstruction* replacement = ExpandInternalOp(c, h, &what, &note);
      if (replacement == nullptr) continue;
      const std::string name = h->name();
      const std::string target = h->custom_call_target();
      if (!c->ReplaceInstruction(h, replacement).ok()) continue;
      remarks.push_back({name, absl::StrCat(target, " written as its global meaning (", what,
                                            ") for the slice, pad and concatenate rules", note)});
    }
    // The replaced top-k slices, then their get-tuple-elements and sorts, which nothing else reads.
    (void)c->RemoveUnusedChains(dead, [](const HloInstruction* x) {
      return x->opcode() == HloOpcode::kSlice || x->opcode() == HloOpcode::kGetTupleElement ||
             x->opcode() == HloOpcode::kSort;
    });
  }
  return remarks;
}

}  // namespace weave::spmd
