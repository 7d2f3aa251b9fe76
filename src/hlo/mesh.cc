// Meshes, mesh-axis shardings and mesh-form replica groups (see mesh.h).
#include "hlo/mesh.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "hlo/str_util.h"
#include "hlo/text_cursor.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

using hlo_internal::Cat;
using hlo_internal::TextCursor;

constexpr int64_t kMaxMeshDevices = int64_t{1} << 22;

absl::Status Bad(std::string_view what, std::string_view text) {
  return absl::InvalidArgumentError(Cat(what, " in '", text, "'"));
}

// The mesh cut into factors at every boundary the references use.
struct Factors {
  std::vector<int64_t> sizes;                 // all factors, mesh order, major first
  std::vector<std::vector<int64_t>> of_axis;  // factor indices of each axis (major first)
  // Factor indices a reference covers (major first).
  std::vector<int64_t> Of(const Mesh& mesh, const AxisRef& r) const {
    std::vector<int64_t> out;
    const int64_t size = AxisRefSize(mesh, r);
    int64_t pre = 1;
    for (int64_t f : of_axis[static_cast<size_t>(r.axis)]) {
      if (pre >= r.pre_size && pre < r.pre_size * size) out.push_back(f);
      pre *= sizes[static_cast<size_t>(f)];
    }
    return out;
  }
};

Factors CutMesh(const Mesh& mesh, const std::vector<const std::vector<AxisRef>*>& ref_lists) {
  std::vector<std::set<int64_t>> cuts(mesh.axis_sizes.size());
  for (size_t a = 0; a < mesh.axis_sizes.size(); ++a) cuts[a] = {1, mesh.axis_sizes[a]};
  for (const auto* refs : ref_lists) {
    for (const AxisRef& r : *refs) {
      cuts[static_cast<size_t>(r.axis)].insert(r.pre_size);
      cuts[static_cast<size_t>(r.axis)].insert(r.pre_size * AxisRefSize(mesh, r));
    }
  }
  Factors f;
  f.of_axis.resize(mesh.axis_sizes.size());
  for (size_t a = 0; a < mesh.axis_sizes.size(); ++a) {
    int64_t prev = 1;
    for (int64_t c : cuts[a]) {
      if (c == 1) continue;
      f.of_axis[a].push_back(static_cast<int64_t>(f.sizes.size()));
      f.sizes.push_back(c / prev);
      prev = c;
    }
  }
  return f;
}

}  // namespace

// Row-major strides of `dims`.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Transposes the row-major array `in` of shape `dims` by `perm` (out dim k = in dim perm[k]).
std::vector<int64_t> TransposeDeviceArray(const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& dims,
                                          const std::vector<int64_t>& perm) {
  const std::vector<int64_t> st = RowMajorStrides(dims);
  const size_t rank = dims.size();
  std::vector<int64_t> tdims(rank), tstride(rank), idx(rank, 0);
  for (size_t k = 0; k < rank; ++k) {
    tdims[k] = dims[static_cast<size_t>(perm[k])];
    tstride[k] = st[static_cast<size_t>(perm[k])];
  }
  std::vector<int64_t> out(in.size());
  int64_t src = 0;
  for (size_t o = 0; o < in.size(); ++o) {
    out[o] = in[static_cast<size_t>(src)];
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < tdims[k]) {
        src += tstride[k];
        break;
      }
      src -= tstride[k] * (tdims[k] - 1);
      idx[k] = 0;
    }
  }
  return out;
}

int64_t Mesh::num_devices() const {
  if (maximal_device) return 1;
  int64_t n = 1;
  for (int64_t s : axis_sizes) n *= s;
  return n;
}

int64_t Mesh::AxisIndex(std::string_view name) const {
  for (size_t i = 0; i < axis_names.size(); ++i) {
    if (axis_names[i] == name) return static_cast<int64_t>(i);
  }
  return -1;
}

std::vector<int64_t> Mesh::Devices() const {
  if (maximal_device) return {*maximal_device};
  if (!device_ids.empty()) return device_ids;
  std::vector<int64_t> d(static_cast<size_t>(num_devices()));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

int64_t AxisRefSize(const Mesh& mesh, const AxisRef& ref) {
  if (ref.size >= 0) return ref.size;
  if (ref.axis < 0 || ref.axis >= static_cast<int64_t>(mesh.axis_sizes.size())) return 1;
  return mesh.axis_sizes[static_cast<size_t>(ref.axis)];
}

absl::Status ValidateAxisRefs(const Mesh& mesh, const std::vector<AxisRef>& refs) {
  // Per axis, the covered [pre, pre*size) ranges must not overlap.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (const AxisRef& r : refs) {
    if (r.axis < 0 || r.axis >= static_cast<int64_t>(mesh.axis_sizes.size())) {
      return absl::InvalidArgumentError(Cat("axis index ", r.axis, " is not an axis of the mesh"));
    }
    const int64_t n = mesh.axis_sizes[static_cast<size_t>(r.axis)];
    const std::string& name = mesh.axis_names[static_cast<size_t>(r.axis)];
    if (r.size >= 0) {
      if (r.pre_size < 1 || r.size < 1 || n % r.pre_size != 0 || (n / r.pre_size) % r.size != 0) {
        return absl::InvalidArgumentError(Cat("sub-axis '", name, "':(", r.pre_size, ")", r.size,
                                              " does not divide axis '", name, "' of size ", n));
      }
    }
    const int64_t lo = r.pre_size, hi = r.pre_size * AxisRefSize(mesh, r);
    for (auto [a, b] : ranges[r.axis]) {
      // Sub-axes nest by divisibility: [lo,hi) and [a,b) overlap unless one ends where the
      // other begins (or before).
      if (lo < b && a < hi) {
        return absl::InvalidArgumentError(Cat("axis '", name, "' is used twice"));
      }
    }
    ranges[r.axis].push_back({lo, hi});
  }
  return absl::OkStatus();
}

absl::StatusOr<HloSharding> MeshShardingToHlo(const MeshSharding& s, std::string text,
                                              int64_t rank) {
  HloSharding out;
  out.text = std::move(text);
  if (s.kind == MeshSharding::Kind::kMaximal || s.mesh.maximal_device) {
    out.kind = HloSharding::Kind::kMaximal;
    out.maximal_device = s.mesh.maximal_device.value_or(s.mesh.Devices().at(0));
    return out;
  }
  if (s.reduction != "sum" && !s.unreduced.empty()) {
    // Partial values combined by max or min: kept verbatim, not a form Weave partitions (it
    // sums partial values).
    out.kind = HloSharding::Kind::kOther;
    return out;
  }
  if (s.kind == MeshSharding::Kind::kReplicated) {
    out.kind = HloSharding::Kind::kReplicated;
    return out;
  }
  if (s.kind == MeshSharding::Kind::kManual) {
    out.kind = HloSharding::Kind::kManual;
    return out;
  }
  if (s.kind == MeshSharding::Kind::kUnreduced) {
    out.kind = HloSharding::Kind::kUnreduced;
    return out;
  }
  if (rank >= 0 && static_cast<int64_t>(s.dims.size()) != rank) {
    return absl::InvalidArgumentError(Cat("sharding has ", s.dims.size(),
                                          " dimensions but the value has rank ", rank));
  }
  if (s.mesh.num_devices() > kMaxMeshDevices || s.mesh.num_devices() < 1) {
    return absl::InvalidArgumentError("mesh is empty or too large");
  }
  std::vector<AxisRef> all;
  for (const DimAxes& d : s.dims) all.insert(all.end(), d.axes.begin(), d.axes.end());
  all.insert(all.end(), s.manual.begin(), s.manual.end());
  all.insert(all.end(), s.unreduced.begin(), s.unreduced.end());
  std::vector<AxisRef> with_replicated = all;
  with_replicated.insert(with_replicated.end(), s.replicated.begin(), s.replicated.end());
  RETURN_IF_ERROR(ValidateAxisRefs(s.mesh, with_replicated));
  const Factors f = CutMesh(s.mesh, {&with_replicated});
  std::vector<int64_t> order;
  std::vector<bool> used(f.sizes.size(), false);
  auto take = [&](const AxisRef& r) {
    for (int64_t k : f.Of(s.mesh, r)) {
      order.push_back(k);
      used[static_cast<size_t>(k)] = true;
    }
  };
  std::vector<int64_t> tile_dims;
  for (const DimAxes& d : s.dims) {
    int64_t t = 1;
    for (const AxisRef& r : d.axes) {
      take(r);
      t *= AxisRefSize(s.mesh, r);
    }
    tile_dims.push_back(t);
  }
  std::vector<std::string> subgroup_types;
  auto add_subgroup = [&](const std::vector<AxisRef>& refs, const char* type) {
    int64_t g = 1;
    for (const AxisRef& r : refs) {
      take(r);
      g *= AxisRefSize(s.mesh, r);
    }
    if (g > 1) {
      tile_dims.push_back(g);
      subgroup_types.push_back(type);
    }
  };
  add_subgroup(s.manual, "manual");
  add_subgroup(s.unreduced, "unreduced");
  int64_t rest = 1;
  for (size_t k = 0; k < f.sizes.size(); ++k) {
    if (!used[k]) {
      order.push_back(static_cast<int64_t>(k));
      rest *= f.sizes[k];
    }
  }
  if (rest > 1) {
    tile_dims.push_back(rest);
    subgroup_types.push_back("replicated");
  }
  int64_t data_tiles = 1;
  for (size_t d = 0; d < s.dims.size(); ++d) data_tiles *= tile_dims[d];
  if (data_tiles == 1 && subgroup_types.size() <= 1) {
    // Collapse trivial tilings to their kind (XLA's normalisation).
    out.kind = subgroup_types.empty() || subgroup_types[0] == "replicated"
                   ? HloSharding::Kind::kReplicated
               : subgroup_types[0] == "manual" ? HloSharding::Kind::kManual
                                               : HloSharding::Kind::kUnreduced;
    return out;
  }
  out.kind = HloSharding::Kind::kTiled;
  out.tile_dims = tile_dims;
  out.devices = TransposeDeviceArray(s.mesh.Devices(), f.sizes, order);
  if (subgroup_types.size() == 1 && subgroup_types[0] == "replicated") {
    out.last_tile_dim_replicate = true;
  } else {
    out.last_tile_dims = subgroup_types;
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> MeshAxesReplicaGroups(
    const Mesh& mesh, const std::vector<AxisRef>& axes) {
  if (mesh.maximal_device) return std::vector<std::vector<int64_t>>{{*mesh.maximal_device}};
  RETURN_IF_ERROR(ValidateAxisRefs(mesh, axes));
  if (mesh.num_devices() > kMaxMeshDevices) return absl::InvalidArgumentError("mesh too large");
  const Factors f = CutMesh(mesh, {&axes});
  std::vector<int64_t> grouped;
  std::vector<bool> used(f.sizes.size(), false);
  int64_t group_size = 1;
  for (const AxisRef& r : axes) {
    for (int64_t k : f.Of(mesh, r)) {
      grouped.push_back(k);
      used[static_cast<size_t>(k)] = true;
    }
    group_size *= AxisRefSize(mesh, r);
  }
  std::vector<int64_t> order;
  for (size_t k = 0; k < f.sizes.size(); ++k) {
    if (!used[k]) order.push_back(static_cast<int64_t>(k));
  }
  order.insert(order.end(), grouped.begin(), grouped.end());
  const std::vector<int64_t> flat = TransposeDeviceArray(mesh.Devices(), f.sizes, order);
  std::vector<std::vector<int64_t>> groups;
  for (size_t b = 0; b < flat.size(); b += static_cast<size_t>(group_size)) {
    groups.emplace_back(flat.begin() + static_cast<int64_t>(b),
                        flat.begin() + static_cast<int64_t>(b) + group_size);
  }
  return groups;
}

// ------------------------------------------------------------------------------------ parsing

namespace {

absl::StatusOr<Mesh> ParseMesh(TextCursor& c) {
  const std::string_view text = c.text();
  Mesh m;
  if (c.ConsumeWord("maximal_mesh")) {
    int64_t d;
    if (!c.Consume('[') || !c.ConsumeWord("device_id") || !c.Consume('=') || !c.Int(&d) ||
        !c.Consume(']') || d < 0) {
      return Bad("expected 'maximal_mesh[device_id=N]'", text);
    }
    m.maximal_device = d;
    return m;
  }
  if (!c.ConsumeWord("mesh") || !c.Consume('[')) return Bad("expected 'mesh['", text);
  if (!c.Consume(']')) {
    do {
      std::string name;
      int64_t size;
      if (!c.QuotedString(&name) || !c.Consume('=') || !c.Int(&size) || size < 1) {
        return Bad("expected 'name'=size in mesh axes", text);
      }
      if (m.AxisIndex(name) >= 0) return Bad(Cat("mesh axis '", name, "' repeated"), text);
      m.axis_names.push_back(std::move(name));
      m.axis_sizes.push_back(size);
    } while (c.Consume(','));
    if (!c.Consume(']')) return Bad("expected ']' after mesh axes", text);
  }
  int64_t n = 1;
  for (int64_t s : m.axis_sizes) {
    if (n > kMaxMeshDevices / s) return Bad("mesh is too large", text);
    n *= s;
  }
  // Optional `, device_ids=(...)`.
  const size_t save = c.pos();
  if (c.Consume(',') && c.ConsumeWord("device_ids")) {
    if (!c.Consume('=') || !c.Consume('(')) return Bad("expected 'device_ids=('", text);
    if (c.Peek() == '[') {
      IotaList iota;
      if (!c.IntList('[', ']', &iota.reshape)) return Bad("malformed device_ids iota", text);
      if (c.ConsumeStr("T") && !c.IntList('(', ')', &iota.perm)) {
        return Bad("malformed device_ids transpose", text);
      }
      int64_t rn = 1;
      for (int64_t r : iota.reshape) {
        if (r < 1 || rn > kMaxMeshDevices / r) return Bad("malformed device_ids iota", text);
        rn *= r;
      }
      if (rn != n) return Bad("device_ids iota size differs from the mesh size", text);
      if (!iota.perm.empty()) {
        std::vector<int64_t> p = iota.perm;
        std::sort(p.begin(), p.end());
        for (size_t i = 0; i < p.size(); ++i) {
          if (p[i] != static_cast<int64_t>(i) || iota.perm.size() != iota.reshape.size()) {
            return Bad("device_ids transpose is not a permutation", text);
          }
        }
      }
      iota.dims = {n};
      m.device_ids = iota.Expand();
    } else {
      do {
        int64_t d;
        if (!c.Int(&d) || d < 0) return Bad("expected a device id", text);
        m.device_ids.push_back(d);
      } while (c.Consume(','));
      if (static_cast<int64_t>(m.device_ids.size()) != n) {
        return Bad(Cat("mesh needs ", n, " device ids but has ", m.device_ids.size()), text);
      }
    }
    if (!c.Consume(')')) return Bad("expected ')' after device_ids", text);
  } else {
    c.set_pos(save);
  }
  return m;
}

absl::StatusOr<AxisRef> ParseAxis(TextCursor& c, const Mesh& m) {
  std::string name;
  AxisRef r;
  if (!c.QuotedString(&name)) {
    int64_t idx;
    if (!c.Int(&idx)) return Bad("expected an axis name", c.text());
    r.axis = idx;
  } else {
    r.axis = m.AxisIndex(name);
    if (r.axis < 0) return Bad(Cat("axis '", name, "' is not in the mesh"), c.text());
  }
  if (r.axis < 0 || r.axis >= static_cast<int64_t>(m.axis_sizes.size())) {
    return Bad("axis index out of range", c.text());
  }
  if (c.Consume(':')) {
    if (!c.Consume('(') || !c.Int(&r.pre_size) || !c.Consume(')') || !c.Int(&r.size)) {
      return Bad("expected a sub-axis ':(pre)size'", c.text());
    }
  }
  return r;
}

// `{a, b, ...}` (possibly empty); with `dim` set, a trailing `?` (open dimension) is allowed.
absl::Status ParseAxisList(TextCursor& c, const Mesh& m, std::vector<AxisRef>* out,
                           DimAxes* dim = nullptr) {
  if (!c.Consume('{')) return Bad("expected '{' before axes", c.text());
  if (c.Consume('}')) return absl::OkStatus();
  do {
    if (dim != nullptr && c.Consume('?')) {
      dim->closed = false;
      break;
    }
    ASSIGN_OR_RETURN(AxisRef r, ParseAxis(c, m));
    out->push_back(r);
  } while (c.Consume(','));
  if (!c.Consume('}')) return Bad("expected '}' after axes", c.text());
  return absl::OkStatus();
}

bool ParseReduction(TextCursor& c, std::string* op) {
  for (const char* w : {"sum", "max", "min"}) {
    if (c.ConsumeWord(w)) {
      *op = w;
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<MeshSharding> ParseNamedSharding(std::string_view inner) {
  TextCursor c(inner);
  MeshSharding s;
  absl::StatusOr<Mesh> mesh = ParseMesh(c);
  if (!mesh.ok()) return mesh.status();
  s.mesh = *std::move(mesh);
  auto skip_metadata = [&]() -> absl::Status {
    const size_t save = c.pos();
    if (c.Consume(',') && c.ConsumeWord("metadata")) {
      if (!c.Consume('=') || !c.SkipBraces()) return Bad("malformed sharding metadata", inner);
    } else {
      c.set_pos(save);
    }
    return absl::OkStatus();
  };
  auto finish = [&]() -> absl::StatusOr<MeshSharding> {
    RETURN_IF_ERROR(skip_metadata());
    if (!c.AtEnd()) return Bad("unexpected text in named sharding", inner);
    return s;
  };
  if (s.mesh.maximal_device) {
    s.kind = MeshSharding::Kind::kMaximal;
    return finish();
  }
  // The comma after the mesh is optional: XLA prints `{mesh[...], [...]}`, and its parser also
  // takes `{mesh[...] [...]}` and `{mesh[...] replicated}` (the form of most named shardings in
  // its partitioner tests).
  const size_t after_mesh = c.pos();
  c.Consume(',');
  if (c.AtEnd() || c.ConsumeWord("metadata")) {
    // `{mesh[...]}` alone (or with metadata only): nothing sharded.
    c.set_pos(after_mesh);
    s.kind = MeshSharding::Kind::kReplicated;
    return finish();
  }
  if (c.ConsumeWord("replicated")) {
    s.kind = MeshSharding::Kind::kReplicated;
    return finish();
  }
  if (c.ConsumeWord("manual")) {
    s.kind = MeshSharding::Kind::kManual;
    return finish();
  }
  if (c.ConsumeWord("unreduced")) {
    s.kind = MeshSharding::Kind::kUnreduced;
    if (c.Consume('=') && !ParseReduction(c, &s.reduction)) {
      return Bad("expected sum, max or min after 'unreduced='", inner);
    }
    if (c.Peek() == '{') {
      std::vector<AxisRef> axes;
      RETURN_IF_ERROR(ParseAxisList(c, s.mesh, &axes));
      // Unreduced over only some axes: a tiled sharding with an unreduced subgroup.
      s.kind = MeshSharding::Kind::kDims;
      s.unreduced = std::move(axes);
    } else {
      for (int64_t a = 0; a < static_cast<int64_t>(s.mesh.axis_sizes.size()); ++a) {
        s.unreduced.push_back(AxisRef{a});
      }
    }
    return finish();
  }
  if (!c.Consume('[')) return Bad("expected '[' before dimension shardings", inner);
  if (!c.Consume(']')) {
    do {
      DimAxes d;
      RETURN_IF_ERROR(ParseAxisList(c, s.mesh, &d.axes, &d));
      s.dims.push_back(std::move(d));
    } while (c.Consume(','));
    if (!c.Consume(']')) return Bad("expected ']' after dimension shardings", inner);
  }
  while (true) {
    const size_t save = c.pos();
    if (!c.Consume(',')) break;
    if (c.ConsumeWord("replicated")) {
      if (!c.Consume('=')) return Bad("expected 'replicated='", inner);
      RETURN_IF_ERROR(ParseAxisList(c, s.mesh, &s.replicated));
    } else if (c.ConsumeWord("unreduced")) {
      if (!c.Consume('=')) return Bad("expected 'unreduced='", inner);
      ParseReduction(c, &s.reduction);
      RETURN_IF_ERROR(ParseAxisList(c, s.mesh, &s.unreduced));
    } else if (c.ConsumeWord("manual")) {
      if (!c.Consume('=')) return Bad("expected 'manual='", inner);
      RETURN_IF_ERROR(ParseAxisList(c, s.mesh, &s.manual));
    } else {
      c.set_pos(save);
      break;
    }
  }
  return finish();
}

absl::StatusOr<std::pair<Mesh, std::vector<AxisRef>>> ParseMeshReplicaGroups(
    std::string_view text) {
  TextCursor c(text);
  absl::StatusOr<Mesh> mesh = ParseMesh(c);
  if (!mesh.ok()) return mesh.status();
  std::vector<AxisRef> axes;
  if (!mesh->maximal_device) {
    RETURN_IF_ERROR(ParseAxisList(c, *mesh, &axes));
  }
  if (!c.AtEnd()) return Bad("unexpected text after mesh replica groups", text);
  return std::make_pair(*std::move(mesh), std::move(axes));
}

}  // namespace weave
