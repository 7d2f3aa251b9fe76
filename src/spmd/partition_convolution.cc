// spmd-partitioner: convolution, as XLA's convolution handler partitions it
// (xla/service/spmd/convolution_handler.cc, dot_as_convolution_util.cc): the convolution's dims
// are read as an einsum's and the dot handler's decision procedure (einsum_planner.h) picks the
// shardings; spatial windows that slide are served by halo exchange (halo_exchange.h).
//
//   lhs [batch, feature, spatial...]  rhs (kernel) [input feature, output feature, spatial...]
//   -> out [batch, feature, spatial...]
//
// The iteration space, by convolution form:
//   plain (no groups)           batch: lhs non-contracting (L); output feature: rhs
//                               non-contracting (R); input feature: contracting (C, partial sums)
//   feature_group_count G > 1   lhs feature = kernel output feature = output feature: a batch
//                               dim (B) whose tile count must divide G (each device holds whole
//                               groups; the local convolution has G / tiles groups); batch: L
//   batch_group_count G > 1     lhs batch = kernel output feature = output feature: B, tiles
//                               dividing G; input feature: C; the output batch stays whole
// and per spatial dim (lhs dilation must be 1, else the dim stays whole):
//   pointwise  (window 1, stride 1, no padding)  lhs and output: L (the kernel dim is 1)
//   sliding, the output tiled  (XLA's halo exchange on the lhs)  lhs and output: L. Output tile
//              [o0, o0 + To) reads lhs [o0*stride - lo, ... + (To-1)*stride + (size-1)*dil + 1):
//              fetched by collective-permute, zeros outside the lhs (the padding), and the local
//              convolution runs unpadded on the dim.
//   sliding, the kernel tiled (a filter gradient: the kernel is the other activation; XLA's
//              HaloExchangeOnLhs/Rhs forms)  lhs and kernel: C, the output dim whole. The device
//              holding kernel positions [k0, k0 + Tk) reads lhs [k0*dil - lo, ... +
//              (O-1)*stride + (Tk-1)*dil + 1) (reversed windows: the mirrored range); its local
//              convolution gives partial sums over its kernel positions, all-reduced (add).
// A sliding dim takes the kernel form when the kernel is tiled along it now and the output is
// not; else the output form. A decision the halo cannot serve (the fetched halo larger than the
// other tiles together) or a group dim whose tiles do not divide its groups leaves that dim
// whole and decides again. Uneven contracting tiles are zero-masked (the kernel's padding;
// the lhs's by the halo's zero fill outside the lhs). With the kernel tiled unevenly along a
// sliding dim, the kernel's padding positions meet real lhs elements: exact for finite data, an
// inf or NaN there turns the zero product into NaN (as XLA's own zero-masked padding). Both group counts > 1, or unreadable dims: computed
// replicated, with the remark naming why.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/conv_dims.h"
#include "hlo/window.h"
#include "spmd/einsum_planner.h"
#include "spmd/halo_exchange.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

enum class Role { kBatch, kOutFeature, kInFeature, kGroup, kPointwise, kSlideOut, kSlideKernel };

// One dim of the iteration space: its role and the lhs / kernel / output dims it maps (-1: none).
struct ConvSpaceDim {
  Role role;
  int64_t lhs = -1, rhs = -1, out = -1;
  int64_t spatial = -1;  // the window dim of a spatial role
  int64_t groups = 0;    // kGroup: the group count its tiles must divide
};

int Class(Role r) {  // 0 B, 1 L, 2 R, 3 C (EinsumSpace order)
  switch (r) {
    case Role::kGroup: return 0;
    case Role::kBatch: case Role::kPointwise: case Role::kSlideOut: return 1;
    case Role::kOutFeature: return 2;
    case Role::kInFeature: case Role::kSlideKernel: return 3;
  }
  return 3;
}

const char* RoleName(Role r) {
  switch (r) {
    case Role::kBatch: return "batch";
    case Role::kOutFeature: return "output feature";
    case Role::kInFeature: return "input feature";
    case Role::kGroup: return "groups";
    case Role::kPointwise: return "pointwise spatial";
    case Role::kSlideOut: return "spatial (halo, output tiled)";
    case Role::kSlideKernel: return "spatial (halo, kernel tiled)";
  }
  return "";
}

// The space over `dims` (sorted by class); `order` receives the dims in space order.
EinsumSpace MakeConvSpace(const std::vector<ConvSpaceDim>& dims, int64_t rank,
                          std::vector<ConvSpaceDim>* order) {
  EinsumSpace sp;
  sp.lhs_map.assign(static_cast<size_t>(rank), -1);
  sp.rhs_map.assign(static_cast<size_t>(rank), -1);
  sp.out_map.assign(static_cast<size_t>(rank), -1);
  order->clear();
  for (int c = 0; c < 4; ++c) {
    for (const ConvSpaceDim& d : dims) {
      if (Class(d.role) != c) continue;
      const int64_t k = static_cast<int64_t>(order->size());
      if (d.lhs >= 0) sp.lhs_map[static_cast<size_t>(d.lhs)] = k;
      if (d.rhs >= 0) sp.rhs_map[static_cast<size_t>(d.rhs)] = k;
      if (d.out >= 0) sp.out_map[static_cast<size_t>(d.out)] = k;
      order->push_back(d);
      (c == 0 ? sp.nb : c == 1 ? sp.nl : c == 2 ? sp.nr : sp.nc) += 1;
    }
  }
  return sp;
}

int64_t TileOf(const Sharding& s, int64_t d) { return s.IsTiled() && d >= 0 ? s.tile(d) : 1; }

// The lhs window a device reads along a sliding dim, for tiles of `t` output rows (kSlideOut)
// or `t` kernel positions (kSlideKernel) of a kernel with `kernel` positions and an output of
// `out_size`.
HaloWindow SlideWindow(const ConvSpaceDim& d, const WindowDim& w, int64_t t, int64_t kernel,
                       int64_t out_size) {
  HaloWindow h;
  h.dim = d.lhs;
  if (d.role == Role::kSlideOut) {
    h.first = -w.lo;
    h.step = t * w.stride;
    h.size = (t - 1) * w.stride + (w.size - 1) * w.rhs_dilate + 1;
  } else if (!w.reversal) {
    h.first = -w.lo;
    h.step = t * w.rhs_dilate;
    h.size = (out_size - 1) * w.stride + (t - 1) * w.rhs_dilate + 1;
  } else {
    // Kernel tile i holds reversed positions k' in [i t, i t + t): window offsets k = kernel-1-k'.
    h.first = -w.lo + (kernel - t) * w.rhs_dilate;
    h.step = -t * w.rhs_dilate;
    h.size = (out_size - 1) * w.stride + (t - 1) * w.rhs_dilate + 1;
  }
  return h;
}

// The state one convolution's partitioning shares among its steps: the global shapes, the parsed
// dims and window, the operands' and output's physical shardings, and what the decision settles.
struct ConvPartitioning {
  const Shape& lg;
  const Shape& rg;
  const Shape& og;
  int64_t rank = 0;
  int64_t n = 0;
  ConvDims cd;
  std::vector<WindowDim> window;
  Sharding ls, rs, os;
  std::vector<ConvSpaceDim> dims{};    // the iteration space's dims (dropped ones leave)
  std::vector<std::string> whole{};    // why dims stay whole
  std::vector<ConvSpaceDim> order{};   // `dims` in space order, as the last decision saw them
  EinsumDecision decision{};
  std::vector<HaloWindow> halos{};     // the lhs windows of the decision's tiled sliding dims

  // Fills `dims` from the convolution form and each spatial dim's window (pointwise, sliding with
  // the kernel or the output tiled); spatial dims with base dilation stay whole (`whole` says so).
  void AddSpaceDims();
  // Decides over `dims`, dropping each dim the decision cannot serve and deciding again; false
  // when no decision was left that nothing was dropped from.
  bool Decide();
  // The position in `order` of the first dim the decision tiles but cannot serve (its tiles do
  // not divide its groups; its halo fails CheckHalo), its reason added to `whole`; nullopt when
  // all are served. `halos` receives the windows of the served sliding dims.
  std::optional<size_t> FirstUnservedDim();
  // With nothing tiled by the decision: drops the sliding dims the lhs is tiled along and the
  // output is not (they can only be gathered). Whether any was dropped.
  bool DropGatheredSlides();
  // Removes the dim of `dims` with d's role and lhs / kernel / output dims.
  void EraseDim(const ConvSpaceDim& d);
  // The operands in the decision's shardings, uneven contracting tiles zero-masked and the lhs
  // widened by the halos; `c_dims` receives the tiled contracting space dims. Errors: the
  // operands' reshards', the halo exchanges'.
  absl::StatusOr<std::pair<HloInstruction*, HloInstruction*>> LocalOperands(
      ComputationPartitioner& cp, const HloInstruction& h, std::vector<int64_t>* c_dims);
  // Fits the local convolution `local` (kernel `rhs`) to its tiles: group counts divided, the
  // tiled sliding dims unpadded (the kernel form's window the local kernel). Returns the
  // remark's "role xT" of each tiled dim.
  std::vector<std::string> FitLocalConvolution(HloInstruction* local, const HloInstruction* rhs);
};

void ConvPartitioning::AddSpaceDims() {
  const int64_t fgc = cd.feature_group_count, bgc = cd.batch_group_count;
  if (fgc > 1) {
    dims.push_back({Role::kGroup, cd.lhs.b, cd.kernel.b, cd.out.b, -1, fgc});
    dims.push_back({Role::kBatch, cd.lhs.a, -1, cd.out.a});
  } else if (bgc > 1) {
    dims.push_back({Role::kGroup, cd.lhs.a, cd.kernel.b, cd.out.b, -1, bgc});
    dims.push_back({Role::kInFeature, cd.lhs.b, cd.kernel.a, -1});
  } else {
    dims.push_back({Role::kBatch, cd.lhs.a, -1, cd.out.a});
    dims.push_back({Role::kOutFeature, -1, cd.kernel.b, cd.out.b});
    dims.push_back({Role::kInFeature, cd.lhs.b, cd.kernel.a, -1});
  }
  for (size_t j = 0; j < window.size(); ++j) {
    const WindowDim& w = window[j];
    const int64_t l = cd.lhs.spatial[j], k = cd.kernel.spatial[j], o = cd.out.spatial[j];
    if (w.lhs_dilate != 1) {
      whole.push_back(absl::StrCat("spatial dim ", j, ": base dilation"));
      continue;
    }
    if (w.size == 1 && w.stride == 1 && w.lo == 0 && w.hi == 0) {
      dims.push_back({Role::kPointwise, l, -1, o, static_cast<int64_t>(j)});
      continue;
    }
    const bool kernel_tiled = TileOf(rs, k) > 1, out_tiled = TileOf(os, o) > 1;
    if (kernel_tiled && !out_tiled) {
      dims.push_back({Role::kSlideKernel, l, k, -1, static_cast<int64_t>(j)});
    } else {
      dims.push_back({Role::kSlideOut, l, -1, o, static_cast<int64_t>(j)});
    }
  }
}

bool ConvPartitioning::Decide() {
  // Each retry drops at least one dim: at most as many retries as dims, and the last decision
  // taken is one nothing was dropped from (else the op is computed replicated).
  bool settled = false;
  const size_t max_attempts = dims.size() + 1;
  for (size_t attempt = 0; attempt < max_attempts && !settled; ++attempt) {
    const EinsumSpace sp = MakeConvSpace(dims, rank, &order);
    decision = PlanEinsum(sp, lg, rg, og, ls, rs, os, n);
    if (!decision.best) {
      settled = true;
      break;
    }
    halos.clear();
    const std::optional<size_t> drop = FirstUnservedDim();
    if (!drop) {
      if (!DropGatheredSlides()) {
        settled = true;
        break;
      }
      whole.push_back("the lhs's tiling along its sliding dims, with the output whole there");
      continue;
    }
    EraseDim(order[*drop]);
  }
  return settled;
}

std::optional<size_t> ConvPartitioning::FirstUnservedDim() {
  std::optional<size_t> drop;
  for (size_t k = 0; k < order.size() && !drop; ++k) {
    const ConvSpaceDim& d = order[k];
    const int64_t t = TileOf(*decision.best, static_cast<int64_t>(k));
    if (t <= 1) continue;
    if (d.role == Role::kGroup && d.groups % t != 0) {
      drop = k;
      whole.push_back(absl::StrCat(RoleName(d.role), ": ", t, " tiles do not divide ", d.groups, " groups"));
    }
    if (d.role != Role::kSlideOut && d.role != Role::kSlideKernel) continue;
    const WindowDim& w = window[static_cast<size_t>(d.spatial)];
    const int64_t kernel = rg.dims[static_cast<size_t>(cd.kernel.spatial[static_cast<size_t>(d.spatial)])];
    const int64_t out_size = og.dims[static_cast<size_t>(cd.out.spatial[static_cast<size_t>(d.spatial)])];
    const int64_t tile = d.role == Role::kSlideOut ? ShardSize(out_size, t) : ShardSize(kernel, t);
    const HaloWindow hw = SlideWindow(d, w, tile, kernel, out_size);
    const absl::Status ok = CheckHalo(decision.lhs_target, lg, hw, n);
    if (!ok.ok()) {
      drop = k;
      whole.push_back(absl::StrCat("spatial dim ", d.spatial, ": ", ok.message()));
    } else {
      halos.push_back(hw);
    }
  }
  return drop;
}

bool ConvPartitioning::DropGatheredSlides() {
  // Nothing tiled: a sliding dim the output is not tiled along can only be gathered; without
  // it in the space the other tilings may still serve (an lhs moved to its contracting dim).
  const bool untiled = !decision.best->IsTiled() || decision.best->NumTiles() <= 1;
  const size_t before = dims.size();
  if (untiled) {
    dims.erase(std::remove_if(dims.begin(), dims.end(),
                              [&](const ConvSpaceDim& d) {
                                return d.role == Role::kSlideOut && TileOf(os, d.out) <= 1 &&
                                       TileOf(ls, d.lhs) > 1;
                              }),
               dims.end());
  }
  return dims.size() != before;
}

void ConvPartitioning::EraseDim(const ConvSpaceDim& d) {
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k].role == d.role && dims[k].lhs == d.lhs && dims[k].rhs == d.rhs && dims[k].out == d.out) {
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
  }
}

absl::StatusOr<std::pair<HloInstruction*, HloInstruction*>> ConvPartitioning::LocalOperands(
    ComputationPartitioner& cp, const HloInstruction& h, std::vector<int64_t>* c_dims) {
  const Sharding& best = *decision.best;
  ASSIGN_OR_RETURN(HloInstruction* l, cp.Operand(h, 0, decision.lhs_target));
  ASSIGN_OR_RETURN(HloInstruction* r, cp.Operand(h, 1, decision.rhs_target));
  SpmdBuilder& b = cp.b();
  HloInstruction* lhs = l;
  HloInstruction* rhs = r;
  // Zero the padding of uneven contracting tiles (the halo fills the lhs's sliding dims).
  std::vector<int64_t> lmask, rmask;
  for (size_t k = 0; k < order.size(); ++k) {
    if (TileOf(best, static_cast<int64_t>(k)) <= 1 || Class(order[k].role) != 3) continue;
    c_dims->push_back(static_cast<int64_t>(k));
    if (order[k].role == Role::kInFeature) lmask.push_back(order[k].lhs);
    rmask.push_back(order[k].rhs);
  }
  if (!lmask.empty()) lhs = b.MaskPadding(lhs, decision.lhs_target, lg, lmask, b.ScalarConst(lg.element_type, 0));
  if (!rmask.empty()) rhs = b.MaskPadding(rhs, decision.rhs_target, rg, rmask, b.ScalarConst(rg.element_type, 0));
  HloInstruction* zero = halos.empty() ? nullptr : b.ScalarConst(lg.element_type, 0);
  for (const HaloWindow& hw : halos) {
    ASSIGN_OR_RETURN(HloInstruction* x, ExchangeHalo(b, lhs, decision.lhs_target, lg, hw, zero));
    lhs = x;
  }
  return std::make_pair(lhs, rhs);
}

std::vector<std::string> ConvPartitioning::FitLocalConvolution(HloInstruction* local,
                                                               const HloInstruction* rhs) {
  const Sharding& best = *decision.best;
  const int64_t fgc = cd.feature_group_count;
  std::vector<std::string> roles;
  bool window_changed = false;
  for (size_t k = 0; k < order.size(); ++k) {
    const ConvSpaceDim& d = order[k];
    const int64_t t = TileOf(best, static_cast<int64_t>(k));
    if (t > 1) roles.push_back(absl::StrCat(RoleName(d.role), " x", t));
    if (t <= 1) continue;
    if (d.role == Role::kGroup) {
      local->SetRawAttribute(fgc > 1 ? "feature_group_count" : "batch_group_count",
                             absl::StrCat(d.groups / t));
    } else if (d.role == Role::kSlideOut || d.role == Role::kSlideKernel) {
      WindowDim& w = window[static_cast<size_t>(d.spatial)];
      w.lo = 0;
      w.hi = 0;
      if (d.role == Role::kSlideKernel) w.size = rhs->shape().dims[static_cast<size_t>(d.rhs)];
      window_changed = true;
    }
  }
  if (window_changed) SetWindow(local, window);
  return roles;
}

}  // namespace

absl::StatusOr<PValue> PartitionConvolution(ComputationPartitioner& cp, const HloInstruction& h) {
  const int64_t n = cp.num_partitions();
  const Shape& lg = h.operand(0)->shape();
  const Shape& rg = h.operand(1)->shape();
  const Shape& og = h.shape();
  const int64_t rank = lg.rank();
  absl::StatusOr<ConvDims> cd = ParseConvDims(h, rank);
  if (!cd.ok()) return cp.Replicated(h, absl::StrCat("convolution: ", cd.status().message()));
  absl::StatusOr<std::vector<WindowDim>> win = ParseWindow(h, cd->lhs.spatial.size());
  if (!win.ok()) return cp.Replicated(h, absl::StrCat("convolution: ", win.status().message()));
  const int64_t fgc = cd->feature_group_count, bgc = cd->batch_group_count;
  if (fgc > 1 && bgc > 1) {
    return cp.Replicated(h, "convolution with both feature and batch group counts (no partitioning rule)");
  }
  ConvPartitioning c{.lg = lg,
                     .rg = rg,
                     .og = og,
                     .rank = rank,
                     .n = n,
                     .cd = *std::move(cd),
                     .window = *std::move(win),
                     .ls = PhysicalSharding(cp.Value(h.operand(0)).sharding),
                     .rs = PhysicalSharding(cp.Value(h.operand(1)).sharding),
                     .os = PhysicalSharding(cp.Target(&h))};
  c.AddSpaceDims();
  // Decide; a dim the decision cannot serve leaves the space and the decision is made again.
  const bool settled = c.Decide();
  const EinsumDecision& decision = c.decision;
  const std::vector<std::string>& whole = c.whole;
  if (!settled) return cp.Replicated(h, "convolution: no decision after dropping every dim it could not serve");
  if (!decision.best) return cp.Replicated(h, "convolution: no consistent sharding of its iteration space");
  const Sharding& best = *decision.best;
  if (!best.IsTiled() || best.NumTiles() <= 1) {
    return cp.Replicated(h, absl::StrCat("convolution: no dim of its iteration space can be tiled",
                                         whole.empty() ? std::string() : absl::StrCat(" (", absl::StrJoin(whole, "; "), ")")));
  }
  std::vector<int64_t> c_dims;
  ASSIGN_OR_RETURN(auto operands, c.LocalOperands(cp, h, &c_dims));
  SpmdBuilder& b = cp.b();
  HloInstruction* local =
      cp.Clone(h, LocalShape(og, decision.output_target), {operands.first, operands.second});
  const std::vector<std::string> roles = c.FitLocalConvolution(local, operands.second);
  for (auto it = c_dims.rbegin(); it != c_dims.rend(); ++it) {
    local = b.AllReduce(local, DeviceGroups(best, {*it}), b.Reducer(HloOpcode::kAdd, og.element_type));
  }
  cp.Remark(h, true,
            absl::StrCat("convolution as an einsum (XLA's convolution handler): ",
                         roles.empty() ? std::string("no dim tiled") : absl::StrJoin(roles, ", "),
                         "; by the dot handler's order: ", absl::StrJoin(decision.steps, "; then "),
                         "; lhs ", decision.lhs_target.ToString(), ", kernel ", decision.rhs_target.ToString(),
                         c.halos.empty() ? std::string() : absl::StrCat(", ", c.halos.size(), " halo exchange(s) on the lhs"),
                         c_dims.empty() ? std::string() : absl::StrCat(", ", c_dims.size(), " all-reduce(s) of the partial sums"),
                         whole.empty() ? std::string() : absl::StrCat("; kept whole: ", absl::StrJoin(whole, "; "))));
  return PValue{local, decision.output_target, og};
}

}  // namespace weave::spmd
