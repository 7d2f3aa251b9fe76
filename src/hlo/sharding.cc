// Replica groups and shardings: parsing, expansion and printing (see sharding.h).
#include "hlo/sharding.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/mesh.h"
#include "hlo/text_cursor.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// absl 20220623 is built with its own string_view type: adapt std::string_view arguments.
template <typename T>
const T& A(const T& v) { return v; }
inline absl::string_view A(std::string_view v) { return absl::string_view(v.data(), v.size()); }
template <typename... Ts>
std::string Cat(const Ts&... v) { return absl::StrCat(A(v)...); }
template <typename... Ts>
void Append(std::string* o, const Ts&... v) { absl::StrAppend(o, A(v)...); }


// Upper bound on the number of device ids an iota list or sharding may expand to. Real meshes
// have at most a few tens of thousands of devices; the bound keeps malformed input from
// allocating without limit.
constexpr int64_t kMaxDevices = int64_t{1} << 22;

absl::Status Bad(std::string_view what, std::string_view text) {
  return absl::InvalidArgumentError(Cat(what, " in '", text, "'"));
}

using Cursor = hlo_internal::TextCursor;

// Product of dims with overflow and size checks.
bool CheckedProduct(const std::vector<int64_t>& dims, int64_t* out) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (d != 0 && p > kMaxDevices / d) return false;
    p *= d;
  }
  *out = p;
  return true;
}

// Parses `<=[reshape]T(perm)` after `devices=[dims]` or `[G,S]`. Validates the permutation.
absl::Status ParseIotaTail(Cursor& c, std::string_view text, IotaList* iota) {
  if (!c.IntList('[', ']', &iota->reshape)) return Bad("malformed iota reshape dims", text);
  if (c.ConsumeStr("T")) {
    if (!c.IntList('(', ')', &iota->perm)) return Bad("malformed iota transpose", text);
    if (iota->perm.size() != iota->reshape.size()) {
      return Bad("iota transpose has a different rank than its reshape dims", text);
    }
    std::vector<bool> seen(iota->perm.size(), false);
    for (int64_t p : iota->perm) {
      if (p < 0 || p >= static_cast<int64_t>(seen.size()) || seen[static_cast<size_t>(p)]) {
        return Bad("iota transpose is not a permutation", text);
      }
      seen[static_cast<size_t>(p)] = true;
    }
  }
  int64_t n_dims, n_reshape;
  if (!CheckedProduct(iota->dims, &n_dims) || !CheckedProduct(iota->reshape, &n_reshape)) {
    return Bad("iota device list is too large or has negative dims", text);
  }
  if (n_dims != n_reshape) {
    return Bad(Cat("iota dims hold ", n_dims, " devices but the reshape dims hold ",
                            n_reshape),
               text);
  }
  return absl::OkStatus();
}

bool IsIdentityPerm(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

std::string IotaTailString(const IotaList& iota) {
  std::string s = Cat("<=[", absl::StrJoin(iota.reshape, ","), "]");
  if (!iota.perm.empty() && !IsIdentityPerm(iota.perm)) {
    Append(&s, "T(", absl::StrJoin(iota.perm, ","), ")");
  }
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

absl::StatusOr<HloSharding> ParseSingleOrTuple(std::string_view text, int depth);

// Parses the inside of one non-tuple sharding `{...}` (without braces).
absl::StatusOr<HloSharding> ParseSingle(std::string_view inner) {
  HloSharding s;
  s.text = std::string(Trim(inner));
  Cursor c(inner);
  bool have_kind = false;
  while (!c.AtEnd()) {
    std::string_view w = c.Word();
    if (w.empty()) return Bad("unexpected character in sharding", inner);
    if (w == "replicated" || w == "manual" || w == "unknown" || w == "unreduced") {
      s.kind = w == "replicated" ? HloSharding::Kind::kReplicated
               : w == "manual"   ? HloSharding::Kind::kManual
               : w == "unknown"  ? HloSharding::Kind::kUnknown
                                 : HloSharding::Kind::kUnreduced;
      have_kind = true;
    } else if (w == "maximal") {
      if (!c.ConsumeStr("device") || !c.Consume('=') || !c.Int(&s.maximal_device) ||
          s.maximal_device < 0) {
        return Bad("expected 'maximal device=N'", inner);
      }
      s.kind = HloSharding::Kind::kMaximal;
      have_kind = true;
    } else if (w == "devices") {
      if (!c.Consume('=') || !c.IntList('[', ']', &s.tile_dims)) {
        return Bad("expected 'devices=[dims]'", inner);
      }
      int64_t n;
      if (!CheckedProduct(s.tile_dims, &n)) return Bad("tile assignment is too large", inner);
      if (c.ConsumeStr("<=")) {
        IotaList iota;
        iota.dims = s.tile_dims;
        RETURN_IF_ERROR(ParseIotaTail(c, inner, &iota));
        s.devices = iota.Expand();
      } else {
        s.devices.reserve(static_cast<size_t>(n));
        do {
          int64_t d;
          if (!c.Int(&d)) return Bad("expected a device id", inner);
          s.devices.push_back(d);
        } while (c.Consume(','));
        if (static_cast<int64_t>(s.devices.size()) != n) {
          return Bad(Cat("tile assignment needs ", n, " device ids but has ",
                                  s.devices.size()),
                     inner);
        }
      }
      s.kind = HloSharding::Kind::kTiled;
      have_kind = true;
    } else if (w == "last_tile_dim_replicate") {
      s.last_tile_dim_replicate = true;
    } else if (w == "last_tile_dims") {
      if (!c.Consume('=') || !c.Consume('{')) return Bad("expected 'last_tile_dims={'", inner);
      do {
        std::string_view t = c.Word();
        if (t.empty()) return Bad("expected a subgroup type", inner);
        s.last_tile_dims.emplace_back(t);
      } while (c.Consume(','));
      if (!c.Consume('}')) return Bad("expected '}' after last_tile_dims", inner);
    } else if (w == "shard_as" || w == "shard_like") {
      int64_t id;
      if (!c.Int(&id)) return Bad("expected a group id", inner);
    } else if (w == "metadata") {
      if (!c.Consume('=') || !c.SkipBraces()) return Bad("malformed sharding metadata", inner);
    } else if ((w == "mesh" || w == "maximal_mesh") && !have_kind) {
      // XLA's named (v3) form, converted to the tile-assignment form (text kept verbatim).
      ASSIGN_OR_RETURN(MeshSharding named, ParseNamedSharding(inner));
      return MeshShardingToHlo(named, s.text);
    } else {
      // Anything newer: keep verbatim.
      s.kind = HloSharding::Kind::kOther;
      return s;
    }
  }
  if (!have_kind) return Bad("sharding names no kind", inner);
  if (s.kind == HloSharding::Kind::kTiled) {
    int64_t extra = (s.last_tile_dim_replicate ? 1 : 0) +
                    static_cast<int64_t>(s.last_tile_dims.size());
    if (static_cast<int64_t>(s.tile_dims.size()) < extra) {
      return Bad("tile assignment has fewer dims than its subgroup dims", inner);
    }
    // XLA's normalization: `last_tile_dims={replicated}` alone is last_tile_dim_replicate.
    if (!s.last_tile_dim_replicate && s.last_tile_dims.size() == 1 &&
        s.last_tile_dims[0] == "replicated") {
      s.last_tile_dims.clear();
      s.last_tile_dim_replicate = true;
    }
  }
  return s;
}

// `text` is `{...}` including braces.
absl::StatusOr<HloSharding> ParseSingleOrTuple(std::string_view text, int depth) {
  text = Trim(text);
  if (depth > 64) return Bad("tuple sharding nested too deeply", text.substr(0, 32));
  if (text.size() < 2 || text.front() != '{' || text.back() != '}') {
    return Bad("sharding must be enclosed in braces", text);
  }
  std::string_view inner = text.substr(1, text.size() - 2);
  Cursor c(inner);
  if (c.AtEnd()) {
    HloSharding s;
    s.kind = HloSharding::Kind::kTuple;
    return s;
  }
  if (c.Peek() != '{') return ParseSingle(inner);
  HloSharding s;
  s.kind = HloSharding::Kind::kTuple;
  s.text = std::string(Trim(inner));
  do {
    size_t b = c.pos();
    c.SkipWs();
    b = c.pos();
    if (!c.SkipBraces()) return Bad("malformed tuple sharding element", text);
    ASSIGN_OR_RETURN(auto e, ParseSingleOrTuple(inner.substr(b, c.pos() - b), depth + 1));
    s.tuple.push_back(std::move(e));
  } while (c.Consume(','));
  if (!c.AtEnd()) return Bad("unexpected text after tuple sharding", text);
  return s;
}

}  // namespace

std::vector<int64_t> IotaList::Expand() const {
  int64_t n = 1;
  for (int64_t d : reshape) n *= d;
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n <= 0) return out;
  const size_t rank = reshape.size();
  if (perm.empty() || IsIdentityPerm(perm)) {
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  // Strides of the reshaped (source) array, row-major.
  std::vector<int64_t> src_stride(rank, 1);
  for (size_t i = rank; i-- > 1;) src_stride[i - 1] = src_stride[i] * reshape[i];
  // Transposed array: dim k has size reshape[perm[k]] and source stride src_stride[perm[k]].
  std::vector<int64_t> tdims(rank), tstride(rank), idx(rank, 0);
  for (size_t k = 0; k < rank; ++k) {
    tdims[k] = reshape[static_cast<size_t>(perm[k])];
    tstride[k] = src_stride[static_cast<size_t>(perm[k])];
  }
  int64_t src = 0;
  for (int64_t o = 0; o < n; ++o) {
    out[static_cast<size_t>(o)] = src;
    // Increment the multi-index over the transposed dims (last fastest).
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

std::string ReplicaGroups::ToString() const {
  if (!text.empty()) return text;
  if (iota) {
    return Cat("[", absl::StrJoin(iota->dims, ","), "]", IotaTailString(*iota));
  }
  std::string s = "{";
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g) s += ",";
    Append(&s, "{", absl::StrJoin(groups[g], ","), "}");
  }
  s += "}";
  return s;
}

ReplicaGroups ReplicaGroups::FromList(std::vector<std::vector<int64_t>> groups) {
  ReplicaGroups rg;
  rg.groups = std::move(groups);
  return rg;
}

absl::StatusOr<ReplicaGroups> ParseReplicaGroups(std::string_view text) {
  text = Trim(text);
  ReplicaGroups rg;
  rg.text = std::string(text);
  Cursor c(text);
  if (c.Peek() == '{') {
    c.Consume('{');
    if (!c.Consume('}')) {
      do {
        std::vector<int64_t> g;
        if (!c.IntList('{', '}', &g)) return Bad("malformed replica group", text);
        for (int64_t id : g) {
          if (id < 0) return Bad("negative replica id", text);
        }
        rg.groups.push_back(std::move(g));
      } while (c.Consume(','));
      if (!c.Consume('}')) return Bad("expected '}' after replica groups", text);
    }
  } else if (c.Peek() == '[') {
    IotaList iota;
    if (!c.IntList('[', ']', &iota.dims) || iota.dims.size() != 2) {
      return Bad("iota replica groups need '[num_groups,group_size]'", text);
    }
    if (!c.ConsumeStr("<=")) return Bad("expected '<=' in iota replica groups", text);
    RETURN_IF_ERROR(ParseIotaTail(c, text, &iota));
    std::vector<int64_t> ids = iota.Expand();
    const int64_t g = iota.dims[0], sz = iota.dims[1];
    rg.groups.assign(static_cast<size_t>(g), {});
    for (int64_t i = 0; i < g; ++i) {
      rg.groups[static_cast<size_t>(i)].assign(ids.begin() + i * sz, ids.begin() + (i + 1) * sz);
    }
    rg.iota = std::move(iota);
  } else if (c.ConsumeStr("mesh") || c.ConsumeStr("maximal_mesh")) {
    // Mesh form: expanded here (each group runs over the listed axes); printed back verbatim.
    ASSIGN_OR_RETURN(auto mesh, ParseMeshReplicaGroups(text));
    absl::StatusOr<std::vector<std::vector<int64_t>>> groups =
        MeshAxesReplicaGroups(mesh.first, mesh.second);
    if (!groups.ok()) return Bad(std::string(groups.status().message()), text);
    rg.groups = *std::move(groups);
    rg.is_mesh = true;
    return rg;
  } else {
    return Bad("expected replica groups ('{{...}}' or '[G,S]<=[...]')", text);
  }
  if (!c.AtEnd()) return Bad("unexpected text after replica groups", text);
  return rg;
}

int64_t HloSharding::DataRank() const {
  int64_t r = static_cast<int64_t>(tile_dims.size()) - (last_tile_dim_replicate ? 1 : 0) -
              static_cast<int64_t>(last_tile_dims.size());
  return std::max<int64_t>(r, 0);
}

std::optional<std::vector<int64_t>> HloSharding::TileIndexForDevice(int64_t device) const {
  if (kind != Kind::kTiled) return std::nullopt;
  auto it = std::find(devices.begin(), devices.end(), device);
  if (it == devices.end()) return std::nullopt;
  int64_t flat = it - devices.begin();
  std::vector<int64_t> idx(tile_dims.size(), 0);
  for (size_t k = tile_dims.size(); k-- > 0;) {
    if (tile_dims[k] <= 0) return std::nullopt;
    idx[k] = flat % tile_dims[k];
    flat /= tile_dims[k];
  }
  idx.resize(static_cast<size_t>(DataRank()));
  return idx;
}

std::string HloSharding::ToString() const {
  if (!text.empty()) return Cat("{", text, "}");
  switch (kind) {
    case Kind::kReplicated:
      return "{replicated}";
    case Kind::kManual:
      return "{manual}";
    case Kind::kUnknown:
      return "{unknown}";
    case Kind::kUnreduced:
      return "{unreduced}";
    case Kind::kMaximal:
      return Cat("{maximal device=", maximal_device, "}");
    case Kind::kTuple: {
      std::string s = "{";
      for (size_t i = 0; i < tuple.size(); ++i) {
        if (i) s += ", ";
        if (i % 5 == 0 && i) Append(&s, "/*index=", i, "*/");
        s += tuple[i].ToString();
      }
      s += "}";
      return s;
    }
    case Kind::kTiled: {
      std::string s = Cat("{devices=[", absl::StrJoin(tile_dims, ","), "]");
      bool is_iota = !devices.empty();
      for (size_t i = 0; i < devices.size() && is_iota; ++i) {
        is_iota = devices[i] == static_cast<int64_t>(i);
      }
      if (is_iota) {
        Append(&s, "<=[", devices.size(), "]");
      } else {
        s += absl::StrJoin(devices, ",");
      }
      if (last_tile_dim_replicate) s += " last_tile_dim_replicate";
      if (!last_tile_dims.empty()) {
        Append(&s, " last_tile_dims={", absl::StrJoin(last_tile_dims, ", "), "}");
      }
      s += "}";
      return s;
    }
    case Kind::kOther:
      return "{}";
  }
  return "{}";
}

absl::StatusOr<HloSharding> ParseSharding(std::string_view text) {
  return ParseSingleOrTuple(text, 0);
}

}  // namespace weave
