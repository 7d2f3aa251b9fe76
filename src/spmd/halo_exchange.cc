// Halo exchange (see halo_exchange.h).
#include "spmd/halo_exchange.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

// x[..., start:limit, ...] along `dim`.
HloInstruction* SliceAlong(SpmdBuilder& b, HloInstruction* x, int64_t dim, int64_t start, int64_t limit) {
  std::vector<int64_t> dims = x->shape().dims;
  if (start == 0 && limit == dims[static_cast<size_t>(dim)]) return x;
  dims[static_cast<size_t>(dim)] = limit - start;
  HloInstruction* s = b.Add(HloOpcode::kSlice, Shape(x->shape().element_type, dims), {x}, "halo_slice");
  for (size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int64_t>(d) == dim) {
      s->mutable_slice()->push_back(SliceDim{start, limit, 1});
    } else {
      s->mutable_slice()->push_back(SliceDim{0, x->shape().dims[d], 1});
    }
  }
  return s;
}

HloInstruction* ConcatAlong(SpmdBuilder& b, const std::vector<HloInstruction*>& parts, int64_t dim) {
  if (parts.size() == 1) return parts[0];
  std::vector<int64_t> dims = parts[0]->shape().dims;
  dims[static_cast<size_t>(dim)] = 0;
  for (HloInstruction* p : parts) dims[static_cast<size_t>(dim)] += p->shape().dims[static_cast<size_t>(dim)];
  HloInstruction* c = b.Add(HloOpcode::kConcatenate, Shape(parts[0]->shape().element_type, dims), parts, "halo_concat");
  c->dimensions = {dim};
  c->has_dimensions_attr = true;
  return c;
}

// What a halo exchange needs: tiles, reaches and the zeros past the data.
struct HaloPlan {
  int64_t k = 0, size = 0, t = 0;
  int64_t ld = 0, rd = 0, nl = 0, nr = 0, extra_lo = 0, extra_hi = 0;
  std::vector<std::vector<int64_t>> index;  // [partition] -> its index in the device array
};

absl::StatusOr<HaloPlan> PlanHalo(const Sharding& s, const Shape& global, const HaloWindow& w, int64_t n) {
  const int64_t dim = w.dim;
  if (!s.IsTiled() || dim < 0 || dim >= s.rank() || s.tile(dim) < 2 || w.size < 1) {
    return absl::UnimplementedError("halo exchange needs a value tiled along the window's dim");
  }
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) {
      return absl::UnimplementedError("halo exchange of a value with a manual or unreduced subgroup");
    }
  }
  HaloPlan p;
  p.k = s.tile(dim);
  p.size = global.dims[static_cast<size_t>(dim)];
  p.t = ShardSize(p.size, p.k);
  p.index.resize(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    std::optional<std::vector<int64_t>> idx = s.ArrayIndex(q);
    if (!idx) return absl::UnimplementedError(absl::StrCat("partition ", q, " holds no tile of ", s.ToString()));
    p.index[static_cast<size_t>(q)] = *std::move(idx);
  }
  auto lo = [&](int64_t i) { return w.first + i * w.step; };
  // The reach left (ld) and right (rd) of a tile where its window holds data.
  for (int64_t i = 0; i < p.k; ++i) {
    const int64_t a = std::max<int64_t>(lo(i), 0), z = std::min<int64_t>(lo(i) + w.size, p.size);
    if (a >= z) continue;
    p.ld = std::max(p.ld, i * p.t - a);
    p.rd = std::max(p.rd, z - (i + 1) * p.t);
  }
  p.nl = (p.ld + p.t - 1) / p.t;
  p.nr = (p.rd + p.t - 1) / p.t;
  // Zeros where a window reaches past what is fetched (indices outside [0, G) only).
  for (int64_t i = 0; i < p.k; ++i) {
    p.extra_lo = std::max(p.extra_lo, (i * p.t - p.ld) - lo(i));
    p.extra_hi = std::max(p.extra_hi, lo(i) + w.size - ((i + 1) * p.t + p.rd));
  }
  const int64_t others = (p.k - 1) * p.t;
  if (p.nl > p.k - 1 || p.nr > p.k - 1 || p.ld + p.rd >= others) {
    return absl::UnimplementedError(absl::StrCat("the halo (", p.ld, " left, ", p.rd, " right of ", p.t,
                                                 "-element tiles) is as large as the other tiles"));
  }
  return p;
}

}  // namespace

absl::Status CheckHalo(const Sharding& s, const Shape& global, const HaloWindow& w, int64_t n) {
  return PlanHalo(s, global, w, n).status();
}

absl::StatusOr<HloInstruction*> ExchangeHalo(SpmdBuilder& b, HloInstruction* x, const Sharding& s,
                                             const Shape& global, const HaloWindow& w,
                                             HloInstruction* fill) {
  const int64_t dim = w.dim;
  const int64_t n = b.num_partitions();
  absl::StatusOr<HaloPlan> plan = PlanHalo(s, global, w, n);
  if (!plan.ok()) return plan.status();
  const int64_t k = plan->k, size = plan->size, t = plan->t;
  const int64_t ld = plan->ld, rd = plan->rd, nl = plan->nl, nr = plan->nr;
  const int64_t extra_lo = plan->extra_lo, extra_hi = plan->extra_hi;
  const std::vector<std::vector<int64_t>>& index = plan->index;
  if (x->shape().dims[static_cast<size_t>(dim)] != t) {
    return absl::UnimplementedError("halo exchange of a value whose local extent is not its tile");
  }
  auto device_at = [&](std::vector<int64_t> idx) {
    int64_t flat = 0;
    const std::vector<int64_t>& a = s.ArrayDims();
    for (size_t d = 0; d < a.size(); ++d) flat = flat * a[d] + idx[d];
    return s.devices()[static_cast<size_t>(flat)];
  };
  auto lo = [&](int64_t i) { return w.first + i * w.step; };
  // Piece j of the left halo comes from the tile j to the left (its last elements), piece j of
  // the right halo from the tile j to the right (its first elements).
  auto fetch = [&](int64_t j, bool left, int64_t start, int64_t limit) {
    HloInstruction* piece = SliceAlong(b, x, dim, start, limit);
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (int64_t q = 0; q < n; ++q) {
      std::vector<int64_t> to = index[static_cast<size_t>(q)];
      to[static_cast<size_t>(dim)] += left ? j : -j;
      if (to[static_cast<size_t>(dim)] < 0 || to[static_cast<size_t>(dim)] >= k) continue;
      pairs.push_back({q, device_at(to)});
    }
    std::sort(pairs.begin(), pairs.end());
    return b.CollectivePermute(piece, pairs);
  };
  std::vector<HloInstruction*> parts;
  for (int64_t j = nl; j >= 1; --j) {
    const int64_t m = std::min(t, ld - (j - 1) * t);
    parts.push_back(fetch(j, true, t - m, t));
  }
  parts.push_back(x);
  for (int64_t j = 1; j <= nr; ++j) {
    const int64_t m = std::min(t, rd - (j - 1) * t);
    parts.push_back(fetch(j, false, 0, m));
  }
  HloInstruction* buffer = ConcatAlong(b, parts, dim);
  // Zeros where a window reaches past what was fetched (indices outside [0, G) only).
  if (extra_lo > 0 || extra_hi > 0) {
    std::vector<int64_t> dims = buffer->shape().dims;
    dims[static_cast<size_t>(dim)] += extra_lo + extra_hi;
    HloInstruction* zero = b.ScalarConst(x->shape().element_type, 0);
    HloInstruction* p = b.Add(HloOpcode::kPad, Shape(x->shape().element_type, dims), {buffer, zero}, "halo_pad");
    for (size_t d = 0; d < dims.size(); ++d) {
      p->mutable_padding()->push_back(static_cast<int64_t>(d) == dim ? PadDim{extra_lo, extra_hi, 0} : PadDim{0, 0, 0});
    }
    buffer = p;
  }
  // Each device's window at its offset in the buffer (which starts at index i*T - ld - extra_lo).
  std::vector<int64_t> offsets(static_cast<size_t>(n)), starts(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    const int64_t i = index[static_cast<size_t>(p)][static_cast<size_t>(dim)];
    offsets[static_cast<size_t>(p)] = lo(i) - (i * t - ld - extra_lo);
    starts[static_cast<size_t>(p)] = lo(i);
  }
  std::vector<int64_t> sizes = x->shape().dims;
  sizes[static_cast<size_t>(dim)] = w.size;
  HloInstruction* win = buffer;
  const bool same = std::all_of(offsets.begin(), offsets.end(), [](int64_t o) { return o == 0; });
  if (!(same && buffer->shape().dims == sizes)) {
    std::vector<HloInstruction*> at;
    for (size_t d = 0; d < sizes.size(); ++d) {
      at.push_back(static_cast<int64_t>(d) == dim ? b.TableLookup(offsets) : b.ScalarConst(PrimitiveType::S32, 0));
    }
    win = b.DynamicSlice(buffer, at, sizes);
  }
  if (fill == nullptr) return win;
  bool outside = false;
  for (int64_t i = 0; i < k; ++i) outside |= lo(i) < 0 || lo(i) + w.size > size;
  if (!outside) return win;
  const Shape s32(PrimitiveType::S32, sizes), pred(PrimitiveType::PRED, sizes);
  HloInstruction* iota = b.Add(HloOpcode::kIota, s32, {}, "iota");
  iota->iota_dimension = dim;
  HloInstruction* at = b.Add(HloOpcode::kAdd, s32, {iota, b.Splat(b.TableLookup(starts), s32)}, "halo_index");
  HloInstruction* ge = b.Add(HloOpcode::kCompare, pred, {at, b.Splat(b.ScalarConst(PrimitiveType::S32, 0), s32)}, "in_low");
  ge->comparison_direction = ComparisonDirection::kGe;
  HloInstruction* lt = b.Add(HloOpcode::kCompare, pred, {at, b.Splat(b.ScalarConst(PrimitiveType::S32, static_cast<double>(size)), s32)}, "in_high");
  lt->comparison_direction = ComparisonDirection::kLt;
  HloInstruction* in = b.Add(HloOpcode::kAnd, pred, {ge, lt}, "in_bounds");
  return b.Select(in, win, b.Splat(fill, win->shape()));
}

}  // namespace weave::spmd
