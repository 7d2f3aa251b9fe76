// Halo exchange (see halo_exchange.h).
#include "spmd/halo_exchange.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

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
  return c;
}

// What a halo exchange needs. Relative to the start of its own tile (i * T), every device reads
// the same range [from, to) of positions (the union over the tiles of where their windows hold
// data); the buffer is that range, fetched piece by piece from the tiles it spans (piece j from
// the tile j to the right, j < 0 to the left, j = 0 the device's own), then zeros where a window
// reaches past it (extra_lo, extra_hi; indices outside the data only).
struct HaloPlan {
  int64_t k = 0, size = 0, t = 0;
  int64_t from = 0, to = 0, extra_lo = 0, extra_hi = 0, fetched = 0;
  std::vector<std::vector<int64_t>> index;  // [partition] -> its index in the device array
  std::vector<int64_t> lo;                  // [partition] -> where it takes its window in the buffer
  // [partition] -> where its window starts (the global index of its first element: what the fill
  // mask reads; lo differs only for a device that reads nothing, which takes its window anywhere).
  std::vector<int64_t> window_lo;
};

int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

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
  if (p.t < 1) return absl::UnimplementedError("halo exchange of an empty dim");
  p.index.resize(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    std::optional<std::vector<int64_t>> idx = s.ArrayIndex(q);
    if (!idx) return absl::UnimplementedError(absl::StrCat("partition ", q, " holds no tile of ", s.ToString()));
    p.index[static_cast<size_t>(q)] = *std::move(idx);
  }
  if (!w.starts.empty() && static_cast<int64_t>(w.starts.size()) != n) {
    return absl::UnimplementedError("halo exchange: one window start per partition expected");
  }
  p.lo.resize(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    p.lo[static_cast<size_t>(q)] = w.starts.empty()
                                       ? w.first + p.index[static_cast<size_t>(q)][static_cast<size_t>(dim)] * w.step
                                       : w.starts[static_cast<size_t>(q)];
  }
  if (!w.needed.empty() && static_cast<int64_t>(w.needed.size()) != n) {
    return absl::UnimplementedError("halo exchange: one needed range per partition expected");
  }
  // Every device's window (or the part of it the device reads), relative to the start of its
  // tile; the union is what is fetched.
  bool any = false;
  std::vector<bool> reads(static_cast<size_t>(n), true);
  for (int64_t q = 0; q < n; ++q) {
    const int64_t i = p.index[static_cast<size_t>(q)][static_cast<size_t>(dim)];
    const int64_t l = p.lo[static_cast<size_t>(q)];
    int64_t a = std::max<int64_t>(l, 0), z = std::min<int64_t>(l + w.size, p.size);
    if (!w.needed.empty()) {
      a = std::max(a, w.needed[static_cast<size_t>(q)].first);
      z = std::min(z, w.needed[static_cast<size_t>(q)].second);
    }
    if (a >= z) {
      reads[static_cast<size_t>(q)] = false;
      continue;
    }
    p.from = any ? std::min(p.from, a - i * p.t) : a - i * p.t;
    p.to = any ? std::max(p.to, z - i * p.t) : z - i * p.t;
    any = true;
  }
  if (!any) {  // every window lies outside the data: the own tile, all of it masked or unread
    p.from = 0;
    p.to = p.t;
  }
  p.window_lo = p.lo;
  // A device that reads nothing takes its window at the start of its buffer (no far padding).
  if (!w.needed.empty()) {
    for (int64_t q = 0; q < n; ++q) {
      if (reads[static_cast<size_t>(q)]) continue;
      const int64_t i = p.index[static_cast<size_t>(q)][static_cast<size_t>(dim)];
      p.lo[static_cast<size_t>(q)] = i * p.t + p.from;
    }
  }
  for (int64_t q = 0; q < n; ++q) {
    const int64_t i = p.index[static_cast<size_t>(q)][static_cast<size_t>(dim)];
    const int64_t l = p.lo[static_cast<size_t>(q)];
    p.extra_lo = std::max(p.extra_lo, (i * p.t + p.from) - l);
    p.extra_hi = std::max(p.extra_hi, l + w.size - (i * p.t + p.to));
  }
  for (int64_t j = FloorDiv(p.from, p.t); j <= FloorDiv(p.to - 1, p.t); ++j) {
    if (j != 0) p.fetched += std::min(p.to - j * p.t, p.t) - std::max(p.from - j * p.t, int64_t{0});
  }
  if (FloorDiv(p.from, p.t) < -(p.k - 1) || FloorDiv(p.to - 1, p.t) > p.k - 1 || p.fetched > (p.k - 1) * p.t) {
    return absl::UnimplementedError(absl::StrCat("the halo (", p.fetched, " elements of ", p.t,
                                                 "-element tiles) is larger than the other tiles"));
  }
  return p;
}

}  // namespace

absl::Status CheckHalo(const Sharding& s, const Shape& global, const HaloWindow& w, int64_t n) {
  return PlanHalo(s, global, w, n).status();
}

absl::StatusOr<int64_t> HaloFetchedElements(const Sharding& s, const Shape& global, const HaloWindow& w,
                                            int64_t n) {
  ASSIGN_OR_RETURN(HaloPlan p, PlanHalo(s, global, w, n));
  return p.fetched;
}

absl::StatusOr<HloInstruction*> ExchangeHalo(SpmdBuilder& b, HloInstruction* x, const Sharding& s,
                                             const Shape& global, const HaloWindow& w,
                                             HloInstruction* fill) {
  const int64_t dim = w.dim;
  const int64_t n = b.num_partitions();
  ASSIGN_OR_RETURN(HaloPlan plan, PlanHalo(s, global, w, n));
  const int64_t k = plan.k, size = plan.size, t = plan.t;
  const int64_t from = plan.from, to = plan.to;
  const int64_t extra_lo = plan.extra_lo, extra_hi = plan.extra_hi;
  const std::vector<std::vector<int64_t>>& index = plan.index;
  if (x->shape().dims[static_cast<size_t>(dim)] != t) {
    return absl::UnimplementedError("halo exchange of a value whose local extent is not its tile");
  }
  auto device_at = [&](std::vector<int64_t> idx) {
    int64_t flat = 0;
    const std::vector<int64_t>& a = s.ArrayDims();
    for (size_t d = 0; d < a.size(); ++d) flat = flat * a[d] + idx[d];
    return s.devices()[static_cast<size_t>(flat)];
  };
  const std::vector<int64_t>& lo = plan.lo;
  // Piece j (positions [start, limit) of a tile) comes from the tile j to the right: each tile
  // sends it to the device j to its left (none beyond the edge: that device receives zeros).
  std::vector<HloInstruction*> parts;
  for (int64_t j = FloorDiv(from, t); j <= FloorDiv(to - 1, t); ++j) {
    const int64_t start = std::max(from - j * t, int64_t{0}), limit = std::min(to - j * t, t);
    HloInstruction* piece = SliceAlong(b, x, dim, start, limit);
    if (j != 0) {
      std::vector<std::pair<int64_t, int64_t>> pairs;
      for (int64_t q = 0; q < n; ++q) {
        std::vector<int64_t> dst = index[static_cast<size_t>(q)];
        dst[static_cast<size_t>(dim)] -= j;
        if (dst[static_cast<size_t>(dim)] < 0 || dst[static_cast<size_t>(dim)] >= k) continue;
        pairs.push_back({q, device_at(dst)});
      }
      std::sort(pairs.begin(), pairs.end());
      piece = b.CollectivePermute(piece, pairs);
    }
    parts.push_back(piece);
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
  // Each device's window at its offset in the buffer (which starts at index i*T + from - extra_lo).
  std::vector<int64_t> offsets(static_cast<size_t>(n)), starts(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    const int64_t i = index[static_cast<size_t>(p)][static_cast<size_t>(dim)];
    offsets[static_cast<size_t>(p)] = lo[static_cast<size_t>(p)] - (i * t + from - extra_lo);
    starts[static_cast<size_t>(p)] = plan.window_lo[static_cast<size_t>(p)];
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
  for (int64_t l : plan.window_lo) outside |= l < 0 || l + w.size > size;
  if (!outside) return win;
  // The mask along `dim` only (1-D), broadcast over the other dims: a rank-1 index instead of a
  // full-size s32 one (the window can be most of the device's memory).
  const int64_t wsize = sizes[static_cast<size_t>(dim)];
  const Shape s32(PrimitiveType::S32, {wsize}), pred(PrimitiveType::PRED, {wsize});
  HloInstruction* iota = b.Add(HloOpcode::kIota, s32, {}, "iota");
  iota->iota_dimension = 0;
  HloInstruction* at = b.Add(HloOpcode::kAdd, s32, {iota, b.Splat(b.TableLookup(starts), s32)}, "halo_index");
  HloInstruction* ge = b.Add(HloOpcode::kCompare, pred, {at, b.Splat(b.ScalarConst(PrimitiveType::S32, 0), s32)}, "in_low");
  ge->comparison_direction = ComparisonDirection::kGe;
  HloInstruction* lt = b.Add(HloOpcode::kCompare, pred, {at, b.Splat(b.ScalarConst(PrimitiveType::S32, static_cast<double>(size)), s32)}, "in_high");
  lt->comparison_direction = ComparisonDirection::kLt;
  HloInstruction* in1 = b.Add(HloOpcode::kAnd, pred, {ge, lt}, "in_bounds");
  HloInstruction* in = in1;
  if (sizes.size() > 1) {
    in = b.Add(HloOpcode::kBroadcast, Shape(PrimitiveType::PRED, sizes), {in1}, "in_bounds");
    in->dimensions = {dim};
  }
  return b.Select(in, win, b.Splat(fill, win->shape()));
}

}  // namespace weave::spmd
