// Slice, pad, reduce-window and reverse along tiled dims by halo exchange (halo_exchange.h), as
// XLA's partitioner does (HandleSlice / HandlePad / HandleReduceWindow through
// ReshardAsWindowedInput): the result keeps its target's tiling and each device fetches only the
// neighbouring elements its tile of the result reads. A reduce-window's padding becomes its init
// value in the fetched window (masked), and the local reduce-window runs unpadded on those dims.
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/window.h"
#include "spmd/halo_exchange.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// reverse along tiled dims (XLA's HandleReverse: the operand resharded so that each device holds
// the tile its result tile mirrors, then a local reverse). Along a dim of G elements in k tiles
// of T, result tile i holds operand elements [G - (i+1) T, G - i T) reversed: with the operand's
// tile order flipped along the dim (a collective-permute), the device holding result tile i holds
// operand tile k-1-i = [(k-1-i) T, (k-i) T), which is that range when T k = G, else that range
// shifted by p = T k - G: a halo of p elements from the neighbouring tile (the window's first p
// elements, before the data, land in the last tile's padding).
absl::StatusOr<PValue> ReverseByPermute(ComputationPartitioner& cp, const HloInstruction& h,
                                        const std::vector<int64_t>& dims, const Sharding& target) {
  const Shape& out = h.shape();
  const int64_t rank = out.rank();
  std::vector<int64_t> tiles;
  for (int64_t d = 0; d < rank; ++d) tiles.push_back(target.tile(d));
  std::optional<Sharding> flipped =
      Sharding::FromTileFunction(tiles, SortedDevices(target), [&](int64_t dev) {
        std::vector<int64_t> idx = *target.TileIndex(dev, rank);
        for (int64_t d : dims) idx[static_cast<size_t>(d)] = target.tile(d) - 1 - idx[static_cast<size_t>(d)];
        return idx;
      });
  if (!flipped) return absl::UnimplementedError("no flipped tile order for the operand");
  std::vector<HaloWindow> windows;
  for (int64_t d : dims) {
    const int64_t g = out.dims[static_cast<size_t>(d)], k = target.tile(d), t = ShardSize(g, k);
    if (t * k == g) continue;
    HaloWindow w;
    w.dim = d;
    w.first = g - t * k;
    w.step = t;
    w.size = t;
    RETURN_IF_ERROR(CheckHalo(*flipped, out, w, cp.num_partitions()));
    windows.push_back(w);
  }
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, *flipped));
  HloInstruction* local = x;
  for (const HaloWindow& w : windows) {
    ASSIGN_OR_RETURN(HloInstruction* win, ExchangeHalo(cp.b(), local, *flipped, out, w, nullptr));
    local = win;
  }
  HloInstruction* r = cp.Clone(h, LocalShape(out, target), {local});
  cp.Remark(h, true,
            absl::StrCat("reverse along tiled dim(s) ", absl::StrJoin(dims, ","), ": operand in the mirrored tile order ",
                         flipped->ToString(), windows.empty() ? std::string()
                                                              : absl::StrCat(", ", windows.size(), " halo shift(s) for uneven tiles"),
                         ", local reverse"));
  return PValue{r, target, out};
}

// Where the result is uneven along `dim` (its last tiles partly or wholly padding), each device
// fetches only what its valid result elements read (HaloWindow::needed): a result tile that is
// all padding reads nothing, so a small slice of a tiled dim (slice [7:8] of 8 tiles) moves no
// element instead of a halo reaching across the tiles. The padding of a tiled value holds
// nothing its users read, so what it computes from is left unspecified.
void ClipToValidResult(const HloInstruction& h, const Sharding& target, int64_t dim, int64_t to,
                       HaloWindow* w, int64_t n) {
  const int64_t extent = h.shape().dims[static_cast<size_t>(dim)];
  if (to * target.tile(dim) == extent) return;  // even: every result element is valid
  std::vector<std::pair<int64_t, int64_t>> needed(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    const int64_t o = TileOffset(target, q, dim, extent);
    const int64_t valid = std::clamp<int64_t>(extent - o, 0, to);
    if (valid == 0) {
      needed[static_cast<size_t>(q)] = {0, 0};
      continue;
    }
    const int64_t start = w->starts.empty() ? w->first + (o / to) * w->step : w->starts[static_cast<size_t>(q)];
    int64_t reach = w->size;  // window elements the valid results read
    if (h.opcode() == HloOpcode::kSlice) {
      reach = (valid - 1) * h.slice()[static_cast<size_t>(dim)].stride + 1;
    } else if (h.opcode() == HloOpcode::kPad) {
      const PadDim& pd = h.padding()[static_cast<size_t>(dim)];
      const int64_t step = pd.interior + 1;
      reach = pd.interior > 0 ? (pd.interior + valid + step - 1) / step : valid;
    } else if (h.opcode() == HloOpcode::kReduceWindow) {
      reach = w->size - (to - valid) * (w->step / to);
    }
    needed[static_cast<size_t>(q)] = {start, start + std::min(reach, w->size)};
  }
  w->needed = std::move(needed);
}

// The `affected` dims the result's sharding `target` tiles (the windows to exchange halos
// along). Unimplemented when the result is not an array tiled along them (nor with a manual or
// unreduced subgroup).
absl::StatusOr<std::vector<int64_t>> HaloDims(const HloInstruction& h, const Sharding& target,
                                              const std::vector<int64_t>& affected) {
  const Shape& out = h.shape();
  if (!out.IsArray() || !target.IsTiled() || target.rank() != out.rank()) {
    return absl::UnimplementedError("the result is not tiled");
  }
  for (const Sharding::Subgroup& g : target.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return absl::UnimplementedError("a manual or unreduced result");
  }
  std::vector<int64_t> dims;  // affected dims the result is tiled along: windows by halo
  for (int64_t d : affected) {
    if (target.tile(d) > 1) dims.push_back(d);
  }
  if (dims.empty()) return absl::UnimplementedError("the result is not tiled along the affected dims");
  return dims;
}

// The window of a slice, pad or reduce-window (empty but for a reduce-window) whose `dims` take
// halos. Unimplemented for another op, a variadic reduce-window, a window that does not parse,
// negative interior padding or base dilation along `dims`.
absl::StatusOr<std::vector<WindowDim>> HaloOpWindow(const HloInstruction& h,
                                                    const std::vector<int64_t>& dims) {
  const bool pad = h.opcode() == HloOpcode::kPad;
  const bool rw = h.opcode() == HloOpcode::kReduceWindow;
  if (!pad && !rw && h.opcode() != HloOpcode::kSlice) return absl::UnimplementedError("not a slice, pad or reduce-window");
  std::vector<WindowDim> window;
  if (rw) {
    if (h.operand_count() != 2) return absl::UnimplementedError("a variadic reduce-window");
    absl::StatusOr<std::vector<WindowDim>> w =
        ParseWindow(h, static_cast<size_t>(h.operand(0)->shape().rank()));
    if (!w.ok()) return absl::UnimplementedError(std::string(w.status().message()));
    window = *std::move(w);
  }
  for (int64_t d : dims) {
    if (pad && h.padding()[static_cast<size_t>(d)].interior < 0) {
      return absl::UnimplementedError(absl::StrCat("negative interior padding on dim ", d));
    }
    if (rw && window[static_cast<size_t>(d)].lhs_dilate != 1) {
      return absl::UnimplementedError(absl::StrCat("base dilation on dim ", d));
    }
  }
  return window;
}

// The operand window along `d` that a device's result tile of `to` elements reads: by the pad's
// low (or interior) padding, the reduce-window's `window` or the slice's start and stride (over
// partitions 0..n-1).
HaloWindow OperandWindowAlong(const HloInstruction& h, const Sharding& target,
                              const std::vector<WindowDim>& window, int64_t d, int64_t to,
                              int64_t n) {
  const Shape& out = h.shape();
  const bool pad = h.opcode() == HloOpcode::kPad;
  const bool rw = h.opcode() == HloOpcode::kReduceWindow;
  HaloWindow w;
  w.dim = d;
  if (pad && h.padding()[static_cast<size_t>(d)].interior > 0) {
    // Interior padding: output index lo + k (i + 1) holds input k. Each device fetches the
    // inputs from floor((o - lo) / (i + 1)) on, enough for its tile once padded locally
    // (interior i, i more at the end), then slices its tile at its offset (below).
    const PadDim& pd = h.padding()[static_cast<size_t>(d)];
    const int64_t step = pd.interior + 1, size = out.dims[static_cast<size_t>(d)];
    w.size = (pd.interior + to + step - 1) / step;
    w.starts.resize(static_cast<size_t>(n));
    for (int64_t q = 0; q < n; ++q) {
      const int64_t rel = TileOffset(target, q, d, size) - pd.lo;
      w.starts[static_cast<size_t>(q)] = rel >= 0 ? rel / step : -((-rel + step - 1) / step);
    }
  } else if (pad) {
    w.first = -h.padding()[static_cast<size_t>(d)].lo;
    w.step = to;
    w.size = to;
  } else if (rw) {
    const WindowDim& wd = window[static_cast<size_t>(d)];
    w.first = -wd.lo;
    w.step = to * wd.stride;
    w.size = (to - 1) * wd.stride + (wd.size - 1) * wd.rhs_dilate + 1;  // window dilation kept
  } else {
    const SliceDim& s = h.slice()[static_cast<size_t>(d)];
    w.first = s.start;
    w.step = to * s.stride;
    w.size = (to - 1) * s.stride + 1;
  }
  return w;
}

// The halo windows along `dims`, clipped to the valid result and checked before any reshard is
// built (a declined halo leaves no remark behind); CheckHalo's Unimplemented error otherwise.
absl::StatusOr<std::vector<HaloWindow>> HaloWindows(ComputationPartitioner& cp,
                                                    const HloInstruction& h, const Sharding& target,
                                                    const std::vector<WindowDim>& window,
                                                    const std::vector<int64_t>& dims) {
  const Shape& out = h.shape();
  std::vector<HaloWindow> windows;
  for (int64_t d : dims) {
    const int64_t to = ShardSize(out.dims[static_cast<size_t>(d)], target.tile(d));
    HaloWindow w = OperandWindowAlong(h, target, window, d, to, cp.num_partitions());
    ClipToValidResult(h, target, d, to, &w, cp.num_partitions());
    RETURN_IF_ERROR(CheckHalo(target, h.operand(0)->shape(), w, cp.num_partitions()));
    windows.push_back(w);
  }
  return windows;
}

// Sets the local pad or slice `r` (on the exchanged windows `local`) to what is left: the
// windowed dims whole (a slice keeps its stride, an interior pad only its interior), the
// untouched dims whole. Collects into `padded` the local pad's shape and into `interior` the
// windowed dims with interior padding; returns whether `r` is then the identity.
bool SetLocalPadOrSlice(const HloInstruction& h, HloInstruction* r, const HloInstruction* local,
                        const std::vector<int64_t>& dims, const std::vector<int64_t>& affected,
                        Shape& padded, std::vector<int64_t>& interior) {
  const bool pad = h.opcode() == HloOpcode::kPad;
  bool trivial = true;
  for (int64_t d = 0; d < h.shape().rank(); ++d) {
    const bool windowed = std::find(dims.begin(), dims.end(), d) != dims.end();
    const bool touched = std::find(affected.begin(), affected.end(), d) != affected.end();
    const int64_t extent = local->shape().dims[static_cast<size_t>(d)];
    if (pad) {
      PadDim& p = r->mutable_padding()->at(static_cast<size_t>(d));
      if (windowed && p.interior > 0) {
        p = PadDim{0, p.interior, p.interior};
        padded.dims[static_cast<size_t>(d)] = extent * (p.interior + 1);
        interior.push_back(d);
      } else if (windowed || !touched) {
        p = PadDim{0, 0, 0};
      }
      trivial &= p.lo == 0 && p.hi == 0 && p.interior == 0;
    } else {
      SliceDim& s = r->mutable_slice()->at(static_cast<size_t>(d));
      if (windowed) {
        s = SliceDim{0, extent, s.stride};
      } else if (!touched) {
        s = SliceDim{0, extent, 1};
      }
      trivial &= s.start == 0 && s.limit == extent && s.stride == 1;
    }
  }
  return trivial;
}

// Each device's tile of `want` dims sliced out of the locally padded `r` (shape `padded`): along
// an `interior` dim it starts (o - lo) mod (i + 1) into the window (a table lookup), elsewhere
// at 0. Returns the dynamic-slice.
HloInstruction* SliceInteriorPadTile(ComputationPartitioner& cp, const HloInstruction& h,
                                     HloInstruction* r, const Sharding& target, const Shape& padded,
                                     const std::vector<int64_t>& interior, const Shape& want) {
  SpmdBuilder& b = cp.b();
  const Shape& out = h.shape();
  r->set_shape(padded);
  std::vector<HloInstruction*> at;
  for (int64_t d = 0; d < out.rank(); ++d) {
    if (std::find(interior.begin(), interior.end(), d) == interior.end()) {
      at.push_back(b.ScalarConst(PrimitiveType::S32, 0));
      continue;
    }
    const PadDim& pd = h.padding()[static_cast<size_t>(d)];
    const int64_t step = pd.interior + 1;
    std::vector<int64_t> offsets(static_cast<size_t>(cp.num_partitions()));
    for (int64_t q = 0; q < cp.num_partitions(); ++q) {
      const int64_t rel = TileOffset(target, q, d, out.dims[static_cast<size_t>(d)]) - pd.lo;
      offsets[static_cast<size_t>(q)] = ((rel % step) + step) % step;
    }
    at.push_back(b.TableLookup(offsets));
  }
  return b.DynamicSlice(r, at, want.dims);
}

}  // namespace

absl::StatusOr<PValue> PartitionByHalo(ComputationPartitioner& cp, const HloInstruction& h,
                                       const std::vector<int64_t>& affected, const Sharding* result) {
  const Shape& out = h.shape();
  const Shape& in = h.operand(0)->shape();
  const Sharding target = result != nullptr ? *result : cp.Target(&h);
  ASSIGN_OR_RETURN(const std::vector<int64_t> dims, HaloDims(h, target, affected));
  if (h.opcode() == HloOpcode::kReverse) return ReverseByPermute(cp, h, dims, target);
  const bool pad = h.opcode() == HloOpcode::kPad;
  const bool rw = h.opcode() == HloOpcode::kReduceWindow;
  ASSIGN_OR_RETURN(std::vector<WindowDim> window, HaloOpWindow(h, dims));
  ASSIGN_OR_RETURN(const std::vector<HaloWindow> windows, HaloWindows(cp, h, target, window, dims));
  SpmdBuilder& b = cp.b();
  ASSIGN_OR_RETURN(HloInstruction* x, cp.Operand(h, 0, target));
  HloInstruction* fill = nullptr;
  if (pad || rw) {
    ASSIGN_OR_RETURN(HloInstruction* v, cp.Operand(h, 1, Sharding::Replicated()));
    fill = v;
  }
  HloInstruction* local = x;
  for (const HaloWindow& w : windows) {
    ASSIGN_OR_RETURN(HloInstruction* win, ExchangeHalo(b, local, target, in, w, fill));
    local = win;
  }
  // The op on what is left: the untiled affected dims as written, the windowed dims whole (a
  // slice keeps its stride), the other dims whole.
  const Shape want = LocalShape(out, target);
  std::vector<HloInstruction*> ops = {local};
  if (pad || rw) ops.push_back(fill);
  HloInstruction* r = cp.Clone(h, want, ops);
  if (rw) {
    for (int64_t d : dims) {
      window[static_cast<size_t>(d)].lo = 0;
      window[static_cast<size_t>(d)].hi = 0;
    }
    SetWindow(r, window);
    return PValue{r, target, out};
  }
  Shape padded = want;              // the local pad's result (interior dims: before their slice)
  std::vector<int64_t> interior;    // windowed dims with interior padding
  const bool trivial = SetLocalPadOrSlice(h, r, local, dims, affected, padded, interior);
  if (trivial && local->shape().dims == want.dims) return PValue{local, target, out};
  if (!interior.empty()) {
    return PValue{SliceInteriorPadTile(cp, h, r, target, padded, interior, want), target, out};
  }
  return PValue{r, target, out};
}

}  // namespace weave::spmd
