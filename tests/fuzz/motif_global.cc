// Global modules with random shardings (GenOptions::Mode::kGlobal), the input of Weave's SPMD
// pipeline (../shared/specs/spmd-partitioner.md §0-§1): global shapes, parameters annotated with
// shardings over a random device mesh, `Sharding` custom calls on the outputs (the global-form
// evidence of spmd/input_form.h), and dots, FP8 dequantizations, elementwise ops and reductions
// in between. The differential driver partitions them (as `weave compile` does on global input)
// and compares the partitioned module with the global program on one device
// (eval/global_compare.h), then runs the partitioned-module checks on the result.
//
// Meshes: P in {2, 4, 6, 8} devices as [P], [a, P/a] or [2, 2, 2], whose device order is
// iota, a transposed iota or a random permutation. Shardings, per value: each mesh axis goes to
// one dim of the value (major to minor in the order drawn) or stays replicated; written as
//  - GSPMD: `{replicated}`, `{devices=[t0,..]<=[dims]T(perm)}` (iota tile assignments, also
//    transposed), `{devices=[t0,..]d0,d1,..}` (explicit device lists), with
//    `last_tile_dim_replicate` when some axes replicate;
//  - Shardy (a share of the programs): `xla.sdy.meshes` in the module header (with `device_ids`
//    for a non-iota device order) and `xla.sdy.sharding` / `sharding_per_value` frontend
//    attributes on parameters and `Sharding` calls.
// Scales of FP8 dequantizations are replicated scalars (a global program has one value). The
// convolution and block-scaled (MXFP8) motifs are in motif_global_ops.cc.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "generator.h"

namespace weave::fuzz {

struct Generator::Mesh {
  std::vector<int64_t> shape;         // axis sizes
  std::vector<std::string> names;     // Shardy axis names
  std::vector<int64_t> devices;       // device id at each mesh position, row-major over shape
  // devices == transpose(iota(iota_dims), iota_perm) flattened, when `iota`.
  bool iota = true;
  std::vector<int64_t> iota_dims, iota_perm;
};

namespace {

std::string Quoted(const std::string& s) { return absl::StrCat("\\\"", s, "\\\""); }

// The Shardy mesh `#sdy.mesh<["x"=2, "y"=4], device_ids=[..]>`.
std::string SdyMeshText(const std::vector<int64_t>& shape, const std::vector<std::string>& names,
                        const std::vector<int64_t>& devices) {
  std::vector<std::string> axes;
  for (size_t i = 0; i < shape.size(); ++i) {
    axes.push_back(absl::StrCat("\"", names[i], "\"=", shape[i]));
  }
  bool identity = true;
  for (size_t i = 0; i < devices.size(); ++i) identity &= devices[i] == static_cast<int64_t>(i);
  std::string s = absl::StrCat("#sdy.mesh<[", absl::StrJoin(axes, ", "), "]");
  if (!identity) absl::StrAppend(&s, ", device_ids=[", IntList(devices), "]");
  return s + ">";
}

}  // namespace

// A sharding of a value of `dims` over `mesh`, as the text of a `sharding=` attribute (GSPMD) or
// of a Shardy dim list `[{"x"}, {}]` (shardy_). *desc says which form.
std::string Generator::GlobalSharding(const Mesh& mesh, const std::vector<int64_t>& dims,
                                      std::string* desc) {
  const size_t rank = dims.size();
  const size_t naxes = mesh.shape.size();
  std::vector<std::vector<size_t>> dim_axes(rank);
  std::vector<size_t> rep_axes;
  std::vector<int64_t> tiles(rank, 1);
  const bool replicated = rank == 0 || c_.Percent(12);
  std::vector<size_t> order(naxes);
  std::iota(order.begin(), order.end(), 0);
  c_.Shuffle(order);
  for (size_t a : order) {
    const int64_t s = mesh.shape[a];
    std::vector<size_t> cand;
    for (size_t d = 0; d < rank; ++d) {
      if (dims[d] % (tiles[d] * s) == 0 || (uneven_ && dims[d] >= tiles[d] * s)) cand.push_back(d);
    }
    if (replicated || cand.empty() || c_.Percent(25)) {
      rep_axes.push_back(a);
      continue;
    }
    const size_t d = c_.Pick(cand);
    dim_axes[d].push_back(a);
    tiles[d] *= s;
  }
  if (neighbour_ && last_axes_.dim_axes.size() == rank && !replicated) {
    // One axis of the previous choice moves: replicated -> minor of dim d, or d's minor -> replicated.
    AxisChoice next = last_axes_;
    std::vector<size_t> tiled;
    for (size_t d = 0; d < rank; ++d) {
      if (!next.dim_axes[d].empty()) tiled.push_back(d);
    }
    if (!next.rep_axes.empty() && (tiled.empty() || c_.Percent(50))) {
      const size_t k = c_.Below(next.rep_axes.size());
      const size_t a = next.rep_axes[k];
      std::vector<size_t> cand;
      for (size_t d = 0; d < rank; ++d) {
        int64_t t = mesh.shape[a];
        for (size_t b : next.dim_axes[d]) t *= mesh.shape[b];
        if (dims[d] >= t) cand.push_back(d);
      }
      // Mostly onto a dim already tiled: its tile count changes from k >= 2 to k * s.
      std::vector<size_t> stacked;
      for (size_t d : cand) {
        if (!next.dim_axes[d].empty()) stacked.push_back(d);
      }
      if (!stacked.empty() && c_.Percent(80)) cand = stacked;
      if (!cand.empty()) {
        next.dim_axes[c_.Pick(cand)].push_back(a);
        next.rep_axes.erase(next.rep_axes.begin() + static_cast<std::ptrdiff_t>(k));
      }
    } else if (!tiled.empty()) {
      // Mostly from a dim tiled by several axes: its tile count drops from k to k / s >= 2.
      std::vector<size_t> multi;
      for (size_t d : tiled) {
        if (next.dim_axes[d].size() > 1) multi.push_back(d);
      }
      const size_t d = !multi.empty() && c_.Percent(80) ? c_.Pick(multi) : c_.Pick(tiled);
      next.rep_axes.push_back(next.dim_axes[d].back());
      next.dim_axes[d].pop_back();
    }
    dim_axes = next.dim_axes;
    rep_axes = next.rep_axes;
    for (size_t d = 0; d < rank; ++d) {
      tiles[d] = 1;
      for (size_t a : dim_axes[d]) tiles[d] *= mesh.shape[a];
    }
  }
  neighbour_ = false;
  last_axes_ = AxisChoice{dim_axes, rep_axes};
  int64_t rep = 1;
  for (size_t a : rep_axes) rep *= mesh.shape[a];
  if (shardy_) {
    std::vector<std::string> parts;
    for (size_t d = 0; d < rank; ++d) {
      std::vector<std::string> names;
      for (size_t a : dim_axes[d]) names.push_back(Quoted(mesh.names[a]));
      parts.push_back(absl::StrCat("{", absl::StrJoin(names, ", "), "}"));
    }
    *desc = absl::StrCat("sdy[", absl::StrJoin(parts, ","), "]");
    return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  }
  if (rep == P_) {
    *desc = "replicated";
    return "{replicated}";
  }
  // The tile assignment: the mesh transposed to (axes of dim 0, ..., axes of dim r-1, replicated
  // axes), reshaped to tiles (+ the replication).
  std::vector<int64_t> perm;
  for (size_t d = 0; d < rank; ++d) {
    for (size_t a : dim_axes[d]) perm.push_back(static_cast<int64_t>(a));
  }
  for (size_t a : rep_axes) perm.push_back(static_cast<int64_t>(a));
  std::vector<int64_t> array_dims = tiles;
  if (rep > 1) array_dims.push_back(rep);
  const std::string suffix = rep > 1 ? " last_tile_dim_replicate" : "";
  if (mesh.iota && c_.Percent(65)) {
    // transpose(transpose(iota(D), q), perm) = transpose(iota(D), q o perm).
    std::vector<int64_t> composed;
    for (int64_t p : perm) composed.push_back(mesh.iota_perm[static_cast<size_t>(p)]);
    bool identity = true;
    for (size_t i = 0; i < composed.size(); ++i) identity &= composed[i] == static_cast<int64_t>(i);
    std::string list = identity ? absl::StrCat("<=[", P_, "]")
                                : absl::StrCat("<=[", IntList(mesh.iota_dims), "]T(",
                                               IntList(composed), ")");
    *desc = absl::StrCat("iota[", IntList(array_dims), "]", identity ? "" : "T", rep > 1 ? "+rep" : "");
    return absl::StrCat("{devices=[", IntList(array_dims), "]", list, suffix, "}");
  }
  // Explicit device list: the mesh's devices in the transposed order.
  std::vector<int64_t> mesh_dims_t;
  for (int64_t p : perm) mesh_dims_t.push_back(mesh.shape[static_cast<size_t>(p)]);
  std::vector<int64_t> strides(naxes, 1);
  for (size_t i = naxes; i-- > 1;) strides[i - 1] = strides[i] * mesh.shape[i];
  std::vector<int64_t> ids, idx(naxes, 0);
  for (int64_t k = 0; k < P_; ++k) {
    int64_t flat = 0;
    for (size_t j = 0; j < naxes; ++j) flat += idx[j] * strides[static_cast<size_t>(perm[j])];
    ids.push_back(mesh.devices[static_cast<size_t>(flat)]);
    for (size_t j = naxes; j-- > 0;) {
      if (++idx[j] < mesh_dims_t[j]) break;
      idx[j] = 0;
    }
  }
  *desc = absl::StrCat("list[", IntList(array_dims), "]", rep > 1 ? "+rep" : "");
  return absl::StrCat("{devices=[", IntList(array_dims), "]", IntList(ids), suffix, "}");
}

// A global operand: a sharded parameter, or an FP8 parameter (sharded) dequantized by a
// replicated scalar scale in any of the three forms.
Val Generator::GlobalOperand(const Mesh& mesh, const std::string& wide,
                             const std::vector<int64_t>& dims, std::string* desc) {
  std::string sdesc;
  const bool fp8 = c_.Percent(40);
  const std::string type = fp8 ? (c_.Percent(80) ? "f8e4m3fn" : "f8e5m2") : wide;
  const std::string s = GlobalSharding(mesh, dims, &sdesc);
  Val v;
  if (shardy_) {
    v = b_.Param(type, dims, "", fp8 ? "q" : "x");
    b_.AppendToLastLine(absl::StrCat(", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, ",
                                     s, ">\"}"));
  } else {
    v = b_.Param(type, dims, s, fp8 ? "q" : "x");
  }
  if (!fp8) {
    *desc = absl::StrCat(wide, ":", sdesc);
    return v;
  }
  Val cvt = b_.Op("convert", wide, dims, {v}, "", "dq.cvt");
  Val sc = c_.Percent(80) ? b_.Param(wide, {}, shardy_ ? "" : "{replicated}", "scale")
                          : b_.ScalarConstant(wide, c_.Percent(50) ? "0.5" : "2", "scale");
  Val bc = b_.Op("broadcast", wide, dims, {sc}, "dimensions={}", "dq.bcast");
  const size_t form = c_.Weighted({50, 25, 25});
  *desc = absl::StrCat(type, form == 2 ? "/" : "*", ":", sdesc);
  if (form == 0) return b_.Op("multiply", wide, dims, {cvt, bc}, "", "dq");
  if (form == 1) return b_.Op("multiply", wide, dims, {bc, cvt}, "", "dq");
  return b_.Op("divide", wide, dims, {cvt, bc}, "", "dq");
}

int64_t GlobalSize(ChoiceSource& c) {
  static const int64_t kSizes[] = {8, 16, 4, 24, 2, 12, 6, 32, 3};
  return kSizes[c.Weighted({22, 16, 14, 10, 8, 10, 8, 6, 6})];
}

// An output through a `Sharding` custom call with a random sharding (the global form's
// evidence), sometimes an epilogue first.
void Generator::GlobalOutput(const Mesh& mesh, Val v) {
  switch (c_.Weighted({50, 15, 15, 10, 10})) {
    case 1: {
      Val z = b_.Splat(v.type, "0", v.dims);
      v = b_.Op("maximum", v.type, v.dims, {v, z}, "", "relu");
      break;
    }
    case 2:
      v = b_.Op("convert", v.type == "f32" ? "bf16" : "f32", v.dims, {v}, "", "cvt_out");
      break;
    case 3:
      if (!v.dims.empty()) {
        Val bias = b_.Param(v.type, {v.dims.back()}, shardy_ ? "" : "{replicated}", "bias");
        Val bb = b_.Op("broadcast", v.type, v.dims, {bias},
                       absl::StrCat("dimensions={", v.dims.size() - 1, "}"));
        v = b_.Op("add", v.type, v.dims, {v, bb}, "", "biased");
      }
      break;
    case 4:
      v = b_.Op("tanh", v.type, v.dims, {v});
      break;
    default:
      break;
  }
  std::string desc;
  const std::string s = GlobalSharding(mesh, v.dims, &desc);
  const std::string attrs =
      shardy_ ? absl::StrCat("custom_call_target=\"Sharding\", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding_per_value<[<@mesh, ",
                             s, ">]>\"}")
              : absl::StrCat("custom_call_target=\"Sharding\", sharding=", s);
  outputs_.push_back(b_.Op("custom-call", v.type, v.dims, {v}, attrs, "out"));
}

// dot(a, b) with random shardings on both operands (and sometimes on the dot).
void Generator::GlobalMotifDot(const Mesh& mesh) {
  const std::string wide = Wide();
  const int64_t rank = 2 + static_cast<int64_t>(c_.Weighted({60, 40}));
  std::vector<int64_t> x;
  for (int64_t i = 0; i < rank; ++i) x.push_back(GlobalSize(c_));
  while (Product(x) > o_.max_elements / 2) {
    auto it = std::max_element(x.begin(), x.end());
    *it = std::max<int64_t>(1, *it / 2);
  }
  DotPlan p = PlanAround(x, 0, -1, Role::kFree,
                         std::max<int64_t>(1, o_.max_elements / std::max<int64_t>(1, Product(x))));
  // Give the other side's free dims tileable sizes.
  for (int c : p.side[1]) {
    DimClass& d = p.cls[static_cast<size_t>(c)];
    if (d.role == Role::kFree && c_.Percent(70)) d.size = std::max<int64_t>(d.size, 2) * 2;
  }
  if (Product(p.Dims(1)) > o_.max_elements || Product(p.OutDims()) > o_.max_elements) {
    for (int c : p.side[1]) {
      DimClass& d = p.cls[static_cast<size_t>(c)];
      if (d.role == Role::kFree) d.size = 2;
    }
  }
  std::string ld, rd;
  Val a = GlobalOperand(mesh, wide, p.Dims(0), &ld);
  Val b = GlobalOperand(mesh, wide, p.Dims(1), &rd);
  const std::string rt = ResultType(wide);
  std::string attrs = p.Attrs();
  std::string dsd;
  if (!shardy_ && c_.Percent(20)) {
    absl::StrAppend(&attrs, ", sharding=", GlobalSharding(mesh, p.OutDims(), &dsd));
  }
  Val d = b_.Op("dot", rt, p.OutDims(), {a, b}, attrs, "dot");
  GlobalOutput(mesh, d);
  motifs_.push_back(absl::StrCat("gdot lhs=", ld, " rhs=", rd, " ", wide, "->", rt,
                                 dsd.empty() ? "" : " dot:" + dsd));
}

// Two dots in a row (an MLP): x[M,K] . w1[K,F] -> elementwise -> . w2[F,H]; Megatron-aligned
// shardings (x on M, w1 on F, w2 on F) some of the time, so that the partitioner gathers and
// reduce-scatters and the windowed einsum rewrites fire, else random.
void Generator::GlobalMotifChain(const Mesh& mesh) {
  const std::string wide = Wide();
  const int64_t m = GlobalSize(c_) * 2, k = GlobalSize(c_), f = GlobalSize(c_) * 2,
                h = GlobalSize(c_);
  const bool megatron = c_.Percent(45) && !shardy_;
  std::string xd, w1d, w2d;
  Val x, w1, w2;
  if (megatron) {
    // One mesh axis (the last) is the tensor-parallel axis; devices in mesh order.
    const int64_t t = mesh.shape.back();
    if (m % t == 0 && f % t == 0) {
      const int64_t rest = P_ / t;
      const std::string rep = rest > 1 ? absl::StrCat(",", rest) : "";
      const std::string rs = rest > 1 ? " last_tile_dim_replicate" : "";
      // Devices of the tensor axis minor: iota over the mesh, the mesh's own order.
      std::string list = absl::StrCat("<=[", P_, "]");
      if (!mesh.iota || rest > 1) {
        // Make the tensor axis the tile dim and the others the replication: transpose.
        std::vector<int64_t> perm = {static_cast<int64_t>(mesh.shape.size()) - 1};
        for (size_t i = 0; i + 1 < mesh.shape.size(); ++i) perm.push_back(static_cast<int64_t>(i));
        if (mesh.iota) {
          std::vector<int64_t> composed;
          for (int64_t q : perm) composed.push_back(mesh.iota_perm[static_cast<size_t>(q)]);
          list = absl::StrCat("<=[", IntList(mesh.iota_dims), "]T(", IntList(composed), ")");
        } else {
          std::vector<int64_t> ids;
          for (int64_t j = 0; j < t; ++j) {
            for (int64_t r = 0; r < rest; ++r) ids.push_back(mesh.devices[static_cast<size_t>(r * t + j)]);
          }
          list = IntList(ids);
        }
      }
      auto sh = [&](int64_t tiled_dim) {
        std::vector<int64_t> tiles = {1, 1};
        tiles[static_cast<size_t>(tiled_dim)] = t;
        return absl::StrCat("{devices=[", IntList(tiles), rep, "]", list, rs, "}");
      };
      x = b_.Param(wide, {m, k}, sh(0), "x");
      w1 = b_.Param(wide, {k, f}, sh(1), "w1");
      w2 = b_.Param(wide, {f, h}, sh(0), "w2");
      xd = "megatron";
    }
  }
  if (x.name.empty()) {
    x = GlobalOperand(mesh, wide, {m, k}, &xd);
    w1 = GlobalOperand(mesh, wide, {k, f}, &w1d);
    w2 = GlobalOperand(mesh, wide, {f, h}, &w2d);
  }
  const std::string attrs = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
  Val h1 = b_.Op("dot", wide, {m, f}, {x, w1}, attrs, "h");
  Val g = c_.Percent(50) ? b_.Op("tanh", wide, {m, f}, {h1}) : b_.Op("multiply", wide, {m, f}, {h1, h1});
  Val y = b_.Op("dot", wide, {m, h}, {g, w2}, attrs, "y");
  GlobalOutput(mesh, y);
  motifs_.push_back(absl::StrCat("gmlp x=", xd, " w1=", w1d, " w2=", w2d, " ", wide));
}

// a + b (each with its own sharding: a reshard), then sometimes a reduction over a dim or a
// transpose.
void Generator::GlobalMotifElementwise(const Mesh& mesh) {
  const std::string wide = Wide();
  std::vector<int64_t> dims = {GlobalSize(c_), GlobalSize(c_)};
  std::string ad, bd;
  Val a = GlobalOperand(mesh, wide, dims, &ad);
  Val b = GlobalOperand(mesh, wide, dims, &bd);
  static const char* kOps[] = {"add", "multiply", "subtract", "maximum"};
  const char* op = kOps[c_.Below(4)];
  Val v = b_.Op(op, wide, dims, {a, b});
  std::string post;
  switch (c_.Weighted({35, 30, 20, 15})) {
    case 3: {
      // A full reduction to a scalar (the partitioned program sums each shard, then all-reduces:
      // a bf16 sum in another order).
      Val z = b_.ScalarConstant(wide, "0");
      v = b_.Op("reduce", wide, {}, {v, z},
                absl::StrCat("dimensions={0,1}, to_apply=", b_.Reducer("add", wide)), "total");
      post = " reduce(all)";
      break;
    }
    case 1: {
      const int64_t d = static_cast<int64_t>(c_.Below(2));
      Val z = b_.ScalarConstant(wide, "0");
      v = b_.Op("reduce", wide, {dims[static_cast<size_t>(1 - d)]}, {v, z},
                absl::StrCat("dimensions={", d, "}, to_apply=", b_.Reducer("add", wide)), "sum");
      post = absl::StrCat(" reduce(dim ", d, ")");
      break;
    }
    case 2:
      v = b_.Op("transpose", wide, {dims[1], dims[0]}, {v}, "dimensions={1,0}");
      post = " transpose";
      break;
    default:
      break;
  }
  GlobalOutput(mesh, v);
  motifs_.push_back(absl::StrCat("gelementwise ", op, " ", ad, ",", bd, post));
}

// A value moved through 1-3 `Sharding` calls with random shardings, dims often uneven (5, 7, 9,
// 10 rows over 2-8 devices): every reshard the partitioner chooses between two shardings
// (slices, all-to-alls of a factor of a dim's tiling, all-gathers of a factor, permutes, the
// full fallback) is checked against the global program with its padding poisoned.
void Generator::GlobalMotifReshard(const Mesh& mesh) {
  const std::string wide = Wide();
  static const int64_t kSizes[] = {5, 6, 7, 8, 9, 10, 12, 16, 4};
  std::vector<int64_t> dims;
  const size_t rank = 2 + c_.Below(2);
  for (size_t d = 0; d < rank; ++d) dims.push_back(kSizes[c_.Below(9)]);
  uneven_ = c_.Percent(60);
  std::string desc;
  Val v = GlobalOperand(mesh, wide, dims, &desc);
  const int hops = 1 + static_cast<int>(c_.Below(3));
  for (int k = 0; k < hops; ++k) {
    std::string hd;
    // A third of the hops change one dim's tile count only (the previous sharding's axes with
    // one moved to or from the replicated ones).
    neighbour_ = c_.Percent(35);
    const std::string s = GlobalSharding(mesh, dims, &hd);
    const std::string attrs =
        shardy_ ? absl::StrCat("custom_call_target=\"Sharding\", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding_per_value<[<@mesh, ",
                               s, ">]>\"}")
                : absl::StrCat("custom_call_target=\"Sharding\", sharding=", s);
    v = b_.Op("custom-call", v.type, v.dims, {v}, attrs, "hop");
    absl::StrAppend(&desc, " -> ", hd);
    if (c_.Percent(15)) {
      // A reduce-window (sum or max) over some dims: halo exchange of the window's reach.
      std::vector<int64_t> out = v.dims;
      std::vector<std::string> size, stride, pad, lhs, rhs;
      bool any_lhs = false, any_rhs = false;
      for (size_t d = 0; d < out.size(); ++d) {
        int64_t w = 1, st = 1, lo = 0, hi = 0, ld = 1, rd = 1;
        if (c_.Percent(60)) {
          w = 1 + static_cast<int64_t>(c_.Below(4));
          st = 1 + static_cast<int64_t>(c_.Below(3));
          lo = static_cast<int64_t>(c_.Below(3));
          hi = static_cast<int64_t>(c_.Below(3));
          if (c_.Percent(15)) rd = 2;
          if (c_.Percent(8)) ld = 2;
        }
        const int64_t padded = out[d] + (out[d] - 1) * (ld - 1) + lo + hi;
        const int64_t eff = (w - 1) * rd + 1;
        if (padded < eff) {
          w = 1, st = 1, lo = 0, hi = 0, ld = 1, rd = 1;
        }
        out[d] = (out[d] + (out[d] - 1) * (ld - 1) + lo + hi - ((w - 1) * rd + 1)) / st + 1;
        size.push_back(absl::StrCat(w));
        stride.push_back(absl::StrCat(st));
        pad.push_back(absl::StrCat(lo, "_", hi));
        lhs.push_back(absl::StrCat(ld));
        rhs.push_back(absl::StrCat(rd));
        any_lhs |= ld != 1;
        any_rhs |= rd != 1;
      }
      const bool max = c_.Percent(40);
      std::string win = absl::StrCat("window={size=", absl::StrJoin(size, "x"), " stride=", absl::StrJoin(stride, "x"),
                                     " pad=", absl::StrJoin(pad, "x"));
      if (any_lhs) absl::StrAppend(&win, " lhs_dilate=", absl::StrJoin(lhs, "x"));
      if (any_rhs) absl::StrAppend(&win, " rhs_dilate=", absl::StrJoin(rhs, "x"));
      absl::StrAppend(&win, "}, to_apply=", b_.Reducer(max ? "maximum" : "add", v.type));
      if (!shardy_ && c_.Percent(50)) absl::StrAppend(&win, ", sharding=", s);
      Val init = b_.ScalarConstant(v.type, max ? "-inf" : "0");
      v = b_.Op("reduce-window", v.type, out, {v, init}, win, "pooled");
      dims = out;
      absl::StrAppend(&desc, " reduce-window ", max ? "max " : "sum ", absl::StrJoin(size, "x"));
    } else if (c_.Percent(12)) {
      // A dynamic-update-slice into the value: constant starts (now and then past the end, which
      // the op clamps), or a one-row update at a dynamic start; the update a slice of the value
      // itself half the time (the halo method reads the value directly), else a parameter.
      std::vector<int64_t> upd = v.dims;
      std::vector<Val> starts;
      std::vector<std::string> fields;
      const bool dynamic_row = c_.Percent(30);
      for (size_t d = 0; d < upd.size(); ++d) {
        const int64_t size = upd[d];
        if (d == 0 && dynamic_row) {
          upd[d] = 1;
          starts.push_back(b_.Param("s32", {}, shardy_ ? "" : "{replicated}", "row"));
        } else if (c_.Percent(40)) {
          starts.push_back(b_.ScalarConstant("s32", "0"));
        } else {
          upd[d] = 1 + static_cast<int64_t>(c_.Below(static_cast<uint64_t>(size)));
          const int64_t start = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(size - upd[d] + 1))) +
                                (c_.Percent(10) ? 3 : 0);
          starts.push_back(b_.ScalarConstant("s32", absl::StrCat(start)));
        }
        const int64_t a = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(size - upd[d] + 1)));
        fields.push_back(absl::StrCat("[", a, ":", a + upd[d], "]"));
      }
      Val u = c_.Percent(50) ? b_.Op("slice", v.type, upd, {v}, absl::StrCat("slice={", absl::StrJoin(fields, ", "), "}"),
                                     "dus_src")
                             : b_.Param(v.type, upd, shardy_ ? "" : "{replicated}", "dus_upd");
      std::vector<Val> ops = {v, u};
      ops.insert(ops.end(), starts.begin(), starts.end());
      v = b_.Op("dynamic-update-slice", v.type, v.dims, ops, !shardy_ && c_.Percent(50) ? absl::StrCat("sharding=", s) : "",
                "updated");
      absl::StrAppend(&desc, " dus [", IntList(upd), "]", dynamic_row ? " dyn-row" : "");
    } else if (c_.Percent(15)) {
      // A reverse of some dims (a permute to the mirrored tile order, a halo shift when uneven),
      // annotated with the value's own sharding half the time.
      std::vector<int64_t> rdims;
      for (size_t d = 0; d < v.dims.size(); ++d) {
        if (c_.Percent(50)) rdims.push_back(static_cast<int64_t>(d));
      }
      if (rdims.empty()) rdims.push_back(0);
      std::string attrs2 = absl::StrCat("dimensions={", IntList(rdims), "}");
      if (!shardy_ && c_.Percent(50)) absl::StrAppend(&attrs2, ", sharding=", s);
      v = b_.Op("reverse", v.type, v.dims, {v}, attrs2, "reversed");
      absl::StrAppend(&desc, " reverse {", IntList(rdims), "}");
    } else if (c_.Percent(40)) {
      // A slice or a pad of the value (halo exchange where the result stays tiled along the
      // sliced or padded dim), annotated with the value's own sharding half the time.
      std::vector<int64_t> out = v.dims;
      std::vector<std::string> fields;
      const bool pad = c_.Percent(50);
      for (size_t d = 0; d < out.size(); ++d) {
        const int64_t size = out[d];
        if (c_.Percent(40)) {
          fields.push_back(pad ? "0_0" : absl::StrCat("[0:", size, "]"));
          continue;
        }
        if (pad) {
          const int64_t lo = static_cast<int64_t>(c_.Below(6)) - 2, hi = static_cast<int64_t>(c_.Below(6)) - 2;
          const int64_t interior = c_.Percent(10) ? 1 : 0;
          const int64_t n = size + (size - 1) * interior + lo + hi;
          if (n < 1) {
            fields.push_back("0_0");
            continue;
          }
          out[d] = n;
          fields.push_back(interior ? absl::StrCat(lo, "_", hi, "_", interior) : absl::StrCat(lo, "_", hi));
        } else {
          const int64_t start = static_cast<int64_t>(c_.Below(static_cast<uint64_t>(size)));
          const int64_t limit = start + 1 + static_cast<int64_t>(c_.Below(static_cast<uint64_t>(size - start)));
          const int64_t stride = c_.Percent(25) ? 2 + static_cast<int64_t>(c_.Below(2)) : 1;
          out[d] = (limit - start + stride - 1) / stride;
          fields.push_back(stride == 1 ? absl::StrCat("[", start, ":", limit, "]")
                                       : absl::StrCat("[", start, ":", limit, ":", stride, "]"));
        }
      }
      std::string attrs2 = pad ? absl::StrCat("padding=", absl::StrJoin(fields, "x"))
                               : absl::StrCat("slice={", absl::StrJoin(fields, ", "), "}");
      if (!shardy_ && c_.Percent(50)) absl::StrAppend(&attrs2, ", sharding=", s);
      if (pad) {
        Val z = b_.ScalarConstant(v.type, c_.Percent(50) ? "0" : "-3");
        v = b_.Op("pad", v.type, out, {v, z}, attrs2, "padded");
      } else {
        v = b_.Op("slice", v.type, out, {v}, attrs2, "sliced");
      }
      dims = out;
      absl::StrAppend(&desc, pad ? " pad " : " slice ", absl::StrJoin(fields, pad ? "x" : ","));
    }
  }
  GlobalOutput(mesh, v);
  uneven_ = false;
  motifs_.push_back(absl::StrCat("greshard [", IntList(dims), "] ", desc));
}

// A gather or a scatter-add of rows of a table at ids that are sharded over every device,
// usually unevenly (K ids, K not a multiple of P: the last tiles hold padding), clamped into the
// table or left as drawn (the evaluator draws ids in [0, 8), past the end of a 5- or 6-row
// table: gather clamps them, scatter skips them). The scatter's updates are tiled like the ids
// or replicated. The table takes a random sharding.
void Generator::GlobalMotifIndexed(const Mesh& mesh) {
  const std::string wide = Wide();
  static const int64_t kRows[] = {5, 6, 8, 12};
  static const int64_t kIds[] = {3, 4, 5, 7, 9, 12};
  const int64_t rows = kRows[c_.Below(4)], width = GlobalSize(c_), k = kIds[c_.Below(6)];
  std::string td;
  const std::string table_sharding = GlobalSharding(mesh, {rows, width}, &td);
  Val table = shardy_ ? b_.Param(wide, {rows, width}, "", "table")
                      : b_.Param(wide, {rows, width}, table_sharding, "table");
  if (shardy_) {
    b_.AppendToLastLine(absl::StrCat(", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, ",
                                     table_sharding, ">\"}"));
  }
  // The ids over every device in the mesh's order (Shardy: every mesh axis on the one dim).
  std::vector<std::string> axes;
  for (const std::string& n : mesh.names) axes.push_back(Quoted(n));
  Val ids = shardy_ ? b_.Param("s32", {k}, "", "ids")
                    : b_.Param("s32", {k}, absl::StrCat("{devices=[", P_, "]", IntList(mesh.devices), "}"), "ids");
  if (shardy_) {
    b_.AppendToLastLine(absl::StrCat(", frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{",
                                     absl::StrJoin(axes, ", "), "}]>\"}"));
  }
  const bool clamped = c_.Percent(65);
  Val at = ids;
  if (clamped) {
    Val lo = b_.Splat("s32", "0", {k});
    Val hi = b_.Splat("s32", absl::StrCat(rows - 1), {k});
    at = b_.Op("clamp", "s32", {k}, {lo, ids, hi}, "", "at");
  }
  const bool gather = c_.Percent(50);
  Val v;
  if (gather) {
    v = b_.Op("gather", wide, {k, width}, {table, at},
              absl::StrCat("offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                           "index_vector_dim=1, slice_sizes={1,", width, "}"),
              "rows");
  } else {
    const bool tiled = c_.Percent(50) && !shardy_;
    Val upd = b_.Param(wide, {k, width},
                       tiled ? absl::StrCat("{devices=[", P_, ",1]", IntList(mesh.devices), "}")
                             : (shardy_ ? "" : "{replicated}"),
                       "delta");
    v = b_.Op("scatter", wide, {rows, width}, {table, at, upd},
              absl::StrCat("update_window_dims={1}, inserted_window_dims={0}, "
                           "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=",
                           b_.Reducer("add", wide)),
              "grown");
    td += tiled ? " updates:tiled" : " updates:replicated";
  }
  GlobalOutput(mesh, v);
  motifs_.push_back(absl::StrCat("g", gather ? "gather" : "scatter", " rows=", rows, " ids=", k,
                                 k % P_ == 0 ? "" : "(uneven)", clamped ? " clamped" : " raw",
                                 " table=", td, " ", wide));
}

GeneratedProgram Generator::RunGlobal(const std::string& name) {
  static const int64_t kParts[] = {4, 2, 8, 6};
  P_ = kParts[c_.Weighted({35, 20, 35, 10})];
  Mesh mesh;
  {
    std::vector<std::vector<int64_t>> shapes = {{P_}};
    for (int64_t a = 2; a < P_; ++a) {
      if (P_ % a == 0) shapes.push_back({a, P_ / a});
    }
    if (P_ == 8) shapes.push_back({2, 2, 2});
    mesh.shape = shapes[c_.Below(shapes.size())];
  }
  static const char* kNames[] = {"x", "y", "z"};
  for (size_t i = 0; i < mesh.shape.size(); ++i) mesh.names.push_back(kNames[i]);
  // Device order: iota, a transposed iota, or a random permutation.
  const size_t order = c_.Weighted({55, 30, 15});
  mesh.iota_perm.resize(mesh.shape.size());
  std::iota(mesh.iota_perm.begin(), mesh.iota_perm.end(), 0);
  if (order == 1 && mesh.shape.size() > 1) c_.Shuffle(mesh.iota_perm);
  // shape[i] = iota_dims[iota_perm[i]].
  mesh.iota_dims.resize(mesh.shape.size());
  for (size_t i = 0; i < mesh.shape.size(); ++i) {
    mesh.iota_dims[static_cast<size_t>(mesh.iota_perm[i])] = mesh.shape[i];
  }
  mesh.devices = IotaTransposed(mesh.iota_dims, mesh.iota_perm);
  if (order == 2) {
    c_.Shuffle(mesh.devices);
    mesh.iota = false;
  }
  shardy_ = c_.Percent(25);
  std::string mesh_desc = absl::StrCat("mesh=[", IntList(mesh.shape), "]",
                                       order == 0 ? "" : order == 1 ? "T" : "perm",
                                       shardy_ ? " shardy" : "");
  if (shardy_) {
    b_.set_header_attributes(absl::StrCat("frontend_attributes={xla.sdy.meshes={mesh = ",
                                          SdyMeshText(mesh.shape, mesh.names, mesh.devices),
                                          "}}"));
  }
  const int motifs = 1 + static_cast<int>(c_.Below(static_cast<uint64_t>(std::min(o_.max_motifs, 2))));
  for (int m = 0; m < motifs; ++m) {
    b_.set_prefix(motifs == 1 ? "" : absl::StrCat("m", m, "."));
    switch (c_.Weighted({30, 23, 14, 11, 12, 10, 8})) {
      case 0: GlobalMotifDot(mesh); break;
      case 1: GlobalMotifChain(mesh); break;
      case 2: GlobalMotifElementwise(mesh); break;
      case 3: GlobalMotifIndexed(mesh); break;
      case 4: GlobalMotifReshard(mesh); break;
      case 5: GlobalMotifConvolution(mesh); break;
      default: GlobalMotifBlockScaled(mesh); break;
    }
  }
  b_.set_prefix("");
  const bool tuple_root = outputs_.size() > 1 || c_.Percent(20);
  GeneratedProgram p;
  p.name = name;
  p.num_partitions = P_;
  p.motifs = motifs_;
  p.motifs.insert(p.motifs.begin(), absl::StrCat("global P=", P_, " ", mesh_desc));
  p.text = b_.Module(name, P_, outputs_, tuple_root,
                     absl::StrCat("weave-fuzz global program: ", absl::StrJoin(p.motifs, "; ")));
  return p;
}

}  // namespace weave::fuzz
