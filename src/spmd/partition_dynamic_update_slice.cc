// dynamic-update-slice along tiled dims without gathering them (partitioner_internal.h), as XLA's
// partitioner does (HandleDynamicUpdateSlice with AnalyzeDynamicUpdateSlice in
// spmd_partitioner.cc / spmd_partitioner_util.cc):
//
//   single tile  every tiled sliced dim has a constant start whose update lies within one tile,
//                or an update of one element (any start): each device writes the update into its
//                own tile at the local offset, and keeps its tile where the update is not its
//                (select). The update is replicated along the sliced dims; nothing is gathered.
//                XLA's kUpdateOnASinglePartition, on by default as in XLA.
//
//   halo         every tiled sliced dim has a constant start (the update spans tiles): the
//                update, tiled like the result, is shifted to where it lands by halo exchange
//                (halo_exchange.h; only the elements a device's tile receives are fetched), then
//                selected in over the operand's tile. When the update is a stride-1 slice of a
//                value whose other dims are whole, the halo reads that value directly, so a
//                slice put back at its own offset moves nothing. XLA's
//                kAllPartitionedSliceDimsHaveConstantIndices, which XLA runs only with
//                --xla_enable_enzyme_comms_opt; so does Weave (pass option of that name).
//
//    operand  [ t0 | t1 | t2 | t3 ]      update at [s, s+len), result tiled like the operand:
//    update        [ u0 | u1 ]           device i keeps t_i outside [s, s+len), and takes the
//    result   [ t0 |u0 u1| t2 | t3 ]     update's elements for its positions inside it.
//
// Starts are clamped as dynamic-update-slice clamps them (to [0, G - len]); as in XLA, the halo
// method does not take a constant start that needs the clamp. Neither applies to a
// value with a manual or unreduced subgroup, or to XLA's packed (rank-1) start operand; the
// caller then replicates the sliced dims (XLA's default method).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spmd/halo_exchange.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// What the two methods share: the result sharding, its tiled sliced dims and their starts.
struct DusDims {
  Sharding target;
  std::vector<int64_t> sliced;          // dims where the update is smaller than the operand
  std::vector<int64_t> tiled;           // those tiled in the target
  std::vector<int64_t> constant_start;  // per dim: the clamped constant start, or -1
  bool out_of_range = false;            // a constant start that dynamic-update-slice clamps
};

std::optional<DusDims> AnalyzeDus(ComputationPartitioner& cp, const HloInstruction& h) {
  const Shape& out = h.shape();
  const Shape& upd = h.operand(1)->shape();
  if (!out.IsArray() || h.operand_count() != 2 + out.rank()) return std::nullopt;  // packed form
  DusDims a;
  a.target = Sharding::Broadcast(cp.Target(&h), out);
  if (!a.target.IsTiled()) return std::nullopt;
  for (const Sharding::Subgroup& g : a.target.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return std::nullopt;
  }
  a.constant_start.assign(static_cast<size_t>(out.rank()), -1);
  for (int64_t d = 0; d < out.rank(); ++d) {
    const int64_t g = out.dims[static_cast<size_t>(d)], len = upd.dims[static_cast<size_t>(d)];
    if (len == g) continue;
    a.sliced.push_back(d);
    if (a.target.tile(d) > 1) a.tiled.push_back(d);
    const HloInstruction* idx = h.operand(2 + d);
    if (idx->opcode() == HloOpcode::kConstant && idx->literal.has_value()) {
      const int64_t c = idx->literal->GetAsInt(0);
      a.constant_start[static_cast<size_t>(d)] = std::clamp<int64_t>(c, 0, g - len);
      a.out_of_range |= c < 0 || c > g - len;
    }
  }
  if (a.tiled.empty()) return std::nullopt;
  return a;
}

HloInstruction* S32Const(SpmdBuilder& b, int64_t v) { return b.ScalarConst(PrimitiveType::S32, static_cast<double>(v)); }

HloInstruction* Compare(SpmdBuilder& b, HloInstruction* x, HloInstruction* y, ComparisonDirection dir) {
  HloInstruction* c = b.Add(HloOpcode::kCompare, Shape(PrimitiveType::PRED, x->shape().dims), {x, y}, "compare");
  c->comparison_direction = dir;
  return c;
}

// pred[local dims]: along each tiled sliced dim d, whether this device's element's global index
// lies in [start_d, start_d + len_d) (starts are s32 scalars; a 1-D mask per dim, broadcast).
HloInstruction* LandsMask(SpmdBuilder& b, const DusDims& a, const Shape& out, const Shape& upd,
                          const std::vector<HloInstruction*>& starts, const std::vector<int64_t>& local) {
  HloInstruction* mask = nullptr;
  const Shape pred(PrimitiveType::PRED, local);
  for (int64_t d : a.tiled) {
    const int64_t t = local[static_cast<size_t>(d)];
    const Shape s32_1(PrimitiveType::S32, {t});
    HloInstruction* iota = b.Add(HloOpcode::kIota, s32_1, {}, "iota");
    iota->iota_dimension = 0;
    HloInstruction* at = b.Add(HloOpcode::kAdd, s32_1,
                               {iota, b.Splat(b.TableLookup(b.OffsetTable(a.target, out, d)), s32_1)}, "index");
    HloInstruction* s = starts[static_cast<size_t>(d)];
    HloInstruction* end = b.Add(HloOpcode::kAdd, Shape::Scalar(PrimitiveType::S32),
                                {s, S32Const(b, upd.dims[static_cast<size_t>(d)])}, "end");
    HloInstruction* in = b.Add(HloOpcode::kAnd, Shape(PrimitiveType::PRED, {t}),
                               {Compare(b, at, b.Splat(s, s32_1), ComparisonDirection::kGe),
                                Compare(b, at, b.Splat(end, s32_1), ComparisonDirection::kLt)},
                               "lands");
    HloInstruction* full = in;
    if (local.size() > 1) {
      full = b.Add(HloOpcode::kBroadcast, pred, {in}, "lands");
      full->dimensions = {d};
    }
    mask = mask == nullptr ? full : b.Add(HloOpcode::kAnd, pred, {mask, full}, "lands");
  }
  return mask;
}

// The start operand of dim d as an s32 scalar, clamped to [0, G - len].
absl::StatusOr<HloInstruction*> ClampedStart(ComputationPartitioner& cp, const HloInstruction& h,
                                             const DusDims& a, int64_t d) {
  SpmdBuilder& b = cp.b();
  const int64_t c = a.constant_start[static_cast<size_t>(d)];
  if (c >= 0) return S32Const(b, c);
  ASSIGN_OR_RETURN(HloInstruction* idx, cp.Operand(h, 2 + d, Sharding::Replicated()));
  HloInstruction* x = idx;
  if (x->shape().element_type != PrimitiveType::S32) {
    x = b.Add(HloOpcode::kConvert, Shape::Scalar(PrimitiveType::S32), {x}, "convert");
  }
  const int64_t hi = h.shape().dims[static_cast<size_t>(d)] - h.operand(1)->shape().dims[static_cast<size_t>(d)];
  return b.Add(HloOpcode::kClamp, Shape::Scalar(PrimitiveType::S32), {S32Const(b, 0), x, S32Const(b, hi)}, "clamp");
}

// The local start operands of the local dynamic-update-slice: 0 on whole and tiled sliced dims
// (or `tiled_local` there when given), the original start on untiled sliced dims, all of the
// type of h's first start operand.
absl::StatusOr<std::vector<HloInstruction*>> LocalStarts(ComputationPartitioner& cp, const HloInstruction& h,
                                                         const DusDims& a,
                                                         const std::vector<HloInstruction*>& tiled_local) {
  SpmdBuilder& b = cp.b();
  const PrimitiveType it = h.operand(2)->shape().element_type;
  std::vector<HloInstruction*> out;
  for (int64_t d = 0; d < h.shape().rank(); ++d) {
    const bool sliced = std::find(a.sliced.begin(), a.sliced.end(), d) != a.sliced.end();
    const bool tiled = std::find(a.tiled.begin(), a.tiled.end(), d) != a.tiled.end();
    HloInstruction* x = nullptr;
    if (tiled && !tiled_local.empty()) {
      x = tiled_local[static_cast<size_t>(d)];
      if (it != PrimitiveType::S32) x = b.Add(HloOpcode::kConvert, Shape::Scalar(it), {x}, "convert");
    } else if (sliced && !tiled) {
      ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, 2 + d, Sharding::Replicated()));
      x = o;
    } else {
      x = b.ScalarConst(it, 0);
    }
    out.push_back(x);
  }
  return out;
}

// XLA's kUpdateOnASinglePartition.
absl::StatusOr<PValue> SingleTile(ComputationPartitioner& cp, const HloInstruction& h, const DusDims& a) {
  const Shape& out = h.shape();
  const Shape& upd = h.operand(1)->shape();
  SpmdBuilder& b = cp.b();
  std::optional<Sharding> upd_sharding = ReplicateDims(a.target, a.sliced);
  if (!upd_sharding) return absl::UnimplementedError("no update sharding with the sliced dims whole");
  absl::StatusOr<HloInstruction*> in = cp.Operand(h, 0, a.target);
  if (!in.ok()) return in.status();
  ASSIGN_OR_RETURN(HloInstruction* u, cp.Operand(h, 1, *upd_sharding));
  const std::vector<int64_t> local = LocalShape(out, a.target).dims;
  std::vector<HloInstruction*> starts(static_cast<size_t>(out.rank()), nullptr), local_starts = starts;
  for (int64_t d : a.tiled) {
    ASSIGN_OR_RETURN(HloInstruction* s, ClampedStart(cp, h, a, d));
    starts[static_cast<size_t>(d)] = s;
    HloInstruction* off = b.TableLookup(b.OffsetTable(a.target, out, d));
    // The update lies in one tile: the local start is start - offset on the owner (elsewhere
    // anything in range; the select below keeps the operand there).
    HloInstruction* rel = b.Add(HloOpcode::kSubtract, Shape::Scalar(PrimitiveType::S32), {s, off}, "local_start");
    const int64_t room = local[static_cast<size_t>(d)] - upd.dims[static_cast<size_t>(d)];
    local_starts[static_cast<size_t>(d)] =
        b.Add(HloOpcode::kClamp, Shape::Scalar(PrimitiveType::S32), {S32Const(b, 0), rel, S32Const(b, room)}, "clamp");
  }
  ASSIGN_OR_RETURN(std::vector<HloInstruction*> idx, LocalStarts(cp, h, a, local_starts));
  std::vector<HloInstruction*> ops = {*in, u};
  ops.insert(ops.end(), idx.begin(), idx.end());
  HloInstruction* dus = cp.Clone(h, Shape(out.element_type, local), ops);
  // Owner: the device whose tile holds the update's first element along every tiled sliced dim.
  HloInstruction* mask = nullptr;
  for (int64_t d : a.tiled) {
    HloInstruction* off = b.TableLookup(b.OffsetTable(a.target, out, d));
    HloInstruction* s = starts[static_cast<size_t>(d)];
    HloInstruction* end = b.Add(HloOpcode::kAdd, Shape::Scalar(PrimitiveType::S32),
                                {off, S32Const(b, local[static_cast<size_t>(d)])}, "tile_end");
    HloInstruction* own = b.Add(HloOpcode::kAnd, Shape::Scalar(PrimitiveType::PRED),
                                {Compare(b, s, off, ComparisonDirection::kGe),
                                 Compare(b, s, end, ComparisonDirection::kLt)},
                                "owns_update");
    mask = mask == nullptr ? own : b.Add(HloOpcode::kAnd, Shape::Scalar(PrimitiveType::PRED), {mask, own}, "owns_update");
  }
  HloInstruction* sel = b.Select(b.Splat(mask, Shape(PrimitiveType::PRED, local)), dus, *in);
  cp.Remark(h, true,
            absl::StrCat("dynamic-update-slice within one tile of tiled dim(s) ", absl::StrJoin(a.tiled, ","),
                         ": written in place by the tile's owner (XLA's single-partition update), the operand "
                         "not gathered"));
  return PValue{sel, a.target, out};
}

// XLA's kAllPartitionedSliceDimsHaveConstantIndices, by halo exchange.
absl::StatusOr<PValue> Halo(ComputationPartitioner& cp, const HloInstruction& h, const DusDims& a) {
  const Shape& out = h.shape();
  const Shape& upd = h.operand(1)->shape();
  const int64_t n = cp.num_partitions();
  SpmdBuilder& b = cp.b();
  for (int64_t d : a.tiled) {
    if (a.constant_start[static_cast<size_t>(d)] < 0) return absl::UnimplementedError("a tiled sliced dim's start is not a constant");
  }
  // As XLA: a start the op clamps takes the default method.
  if (a.out_of_range) return absl::UnimplementedError("a constant start out of range (clamped)");
  // The source: the update, or the value it is a stride-1 slice of (other dims whole).
  const HloInstruction* src = h.operand(1);
  std::vector<int64_t> src_first(static_cast<size_t>(out.rank()), 0);
  const HloInstruction* op1 = h.operand(1);
  if (op1->opcode() == HloOpcode::kSlice && op1->operand(0)->shape().rank() == out.rank()) {
    bool ok = true;
    for (int64_t d = 0; d < out.rank() && ok; ++d) {
      const SliceDim& sd = op1->slice()[static_cast<size_t>(d)];
      const bool tiled = std::find(a.tiled.begin(), a.tiled.end(), d) != a.tiled.end();
      ok = sd.stride == 1 && (tiled || (sd.start == 0 && sd.limit == op1->operand(0)->shape().dims[static_cast<size_t>(d)]));
    }
    if (ok) {
      src = op1->operand(0);
      for (int64_t d : a.tiled) src_first[static_cast<size_t>(d)] = op1->slice()[static_cast<size_t>(d)].start;
    }
  }
  Shape global = src->shape();
  const std::vector<int64_t> local = LocalShape(out, a.target).dims;
  std::vector<HaloWindow> windows;
  for (int64_t d : a.tiled) {
    const int64_t s = a.constant_start[static_cast<size_t>(d)], len = upd.dims[static_cast<size_t>(d)];
    const int64_t shift = src_first[static_cast<size_t>(d)] - s;  // source index - result index
    const int64_t t = local[static_cast<size_t>(d)];
    const std::vector<int64_t> offsets = b.OffsetTable(a.target, out, d);
    HaloWindow w;
    w.dim = d;
    w.size = t;
    for (int64_t p = 0; p < n; ++p) {
      const int64_t lo = offsets[static_cast<size_t>(p)];
      w.starts.push_back(lo + shift);
      const int64_t begin = std::max(lo, s), end = std::min({lo + t, s + len, out.dims[static_cast<size_t>(d)]});
      w.needed.push_back(begin < end ? std::make_pair(begin + shift, end + shift) : std::make_pair(int64_t{0}, int64_t{0}));
    }
    RETURN_IF_ERROR(CheckHalo(a.target, global, w, n));
    windows.push_back(w);
    global.dims[static_cast<size_t>(d)] = out.dims[static_cast<size_t>(d)];
  }
  ASSIGN_OR_RETURN(HloInstruction* x, cp.ValueIn(src, a.target));
  ASSIGN_OR_RETURN(HloInstruction* in, cp.Operand(h, 0, a.target));
  HloInstruction* win = x;
  global = src->shape();
  for (const HaloWindow& w : windows) {
    ASSIGN_OR_RETURN(HloInstruction* r, ExchangeHalo(b, win, a.target, global, w, nullptr));
    win = r;
    global.dims[static_cast<size_t>(w.dim)] = out.dims[static_cast<size_t>(w.dim)];
  }
  // Untiled sliced dims: a local dynamic-update-slice places the window there.
  HloInstruction* merged = win;
  if (a.sliced.size() > a.tiled.size()) {
    ASSIGN_OR_RETURN(std::vector<HloInstruction*> idx, LocalStarts(cp, h, a, {}));
    std::vector<HloInstruction*> ops = {in, win};
    ops.insert(ops.end(), idx.begin(), idx.end());
    merged = cp.Clone(h, Shape(out.element_type, local), ops);
  }
  std::vector<HloInstruction*> starts(static_cast<size_t>(out.rank()), nullptr);
  for (int64_t d : a.tiled) starts[static_cast<size_t>(d)] = S32Const(b, a.constant_start[static_cast<size_t>(d)]);
  HloInstruction* sel = b.Select(LandsMask(b, a, out, upd, starts, local), merged, in);
  cp.Remark(h, true,
            absl::StrCat("dynamic-update-slice at constant starts along tiled dim(s) ", absl::StrJoin(a.tiled, ","),
                         ": the ", src == h.operand(1) ? "update" : absl::StrCat("update's source '", src->name(), "'"),
                         " moved to where it lands by halo exchange (--xla_enable_enzyme_comms_opt), the operand "
                         "not gathered"));
  return PValue{sel, a.target, out};
}

// Whether the update lies within one tile along every tiled sliced dim.
bool WithinOneTile(const HloInstruction& h, const DusDims& a) {
  for (int64_t d : a.tiled) {
    const int64_t len = h.operand(1)->shape().dims[static_cast<size_t>(d)];
    if (len == 1) continue;
    const int64_t s = a.constant_start[static_cast<size_t>(d)];
    if (s < 0) return false;
    const int64_t t = ShardSize(h.shape().dims[static_cast<size_t>(d)], a.target.tile(d));
    if (s / t != (s + len - 1) / t) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<PValue> PartitionDynamicUpdateSliceInTiles(ComputationPartitioner& cp, const HloInstruction& h) {
  std::optional<DusDims> a = AnalyzeDus(cp, h);
  if (!a) return absl::UnimplementedError(kNoTiledSlicedDim);
  std::string halo_why;
  if (cp.ctx()->enzyme_comms_opt) {
    absl::StatusOr<PValue> r = Halo(cp, h, *a);
    if (r.ok() || r.status().code() != absl::StatusCode::kUnimplemented) return r;
    halo_why = absl::StrCat("; no halo exchange: ", r.status().message());
  }
  if (WithinOneTile(h, *a)) return SingleTile(cp, h, *a);
  return absl::UnimplementedError(absl::StrCat(
      "dynamic-update-slice along tiled dim(s) ", absl::StrJoin(a->tiled, ","),
      ": the update spans tiles", halo_why.empty() ? "" : halo_why,
      ", so those dims are gathered (XLA's default method",
      cp.ctx()->enzyme_comms_opt ? "" : "; --xla_enable_enzyme_comms_opt moves the update by halo exchange", ")"));
}

}  // namespace weave::spmd
