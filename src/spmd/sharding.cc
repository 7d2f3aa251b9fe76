// spmd::Sharding: construction, canonical form, text and IR conversion (see sharding.h).
#include "spmd/sharding.h"

#include <algorithm>
#include <mutex>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/mesh.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

// Upper bound on devices in one sharding (as the IR parser's).
constexpr int64_t kMaxDevices = int64_t{1} << 22;

}  // namespace

std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> DetectIota(
    const std::vector<int64_t>& a) {
  const int64_t n = static_cast<int64_t>(a.size());
  if (n == 0 || a[0] != 0) return std::nullopt;
  // Dims of the transposed array, minor first: (size, stride in the iota).
  std::vector<std::pair<int64_t, int64_t>> dims;
  int64_t block = 1;
  while (block < n) {
    const int64_t stride = a[static_cast<size_t>(block)];
    if (stride <= 0) return std::nullopt;
    // The run along which the values keep the stride, cut to a divisor of n/block.
    int64_t m = 1;
    while (block * m < n && a[static_cast<size_t>(block * m)] == m * stride) ++m;
    while (m > 1 && (n / block) % m != 0) --m;
    if (m <= 1) return std::nullopt;
    dims.push_back({m, stride});
    block *= m;
  }
  // Verify the affine structure everywhere.
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t v = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (a[static_cast<size_t>(k)] != v) return std::nullopt;
    for (size_t j = 0; j < dims.size(); ++j) {
      if (++idx[j] < dims[j].first) {
        v += dims[j].second;
        break;
      }
      v -= dims[j].second * (dims[j].first - 1);
      idx[j] = 0;
    }
  }
  // Transposed dims major first; the iota's dims R are these sorted by descending stride.
  std::vector<std::pair<int64_t, int64_t>> t(dims.rbegin(), dims.rend());
  std::vector<int64_t> order(t.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t x, int64_t y) { return t[x].second > t[y].second; });
  std::vector<int64_t> r(t.size());
  int64_t expect = 1;
  for (size_t q = order.size(); q-- > 0;) {
    const auto& d = t[static_cast<size_t>(order[q])];
    if (d.second != expect) return std::nullopt;
    expect *= d.first;
    r[q] = d.first;
  }
  // perm[k] = position in R of transposed dim k.
  std::vector<int64_t> perm(t.size());
  for (size_t q = 0; q < order.size(); ++q) perm[static_cast<size_t>(order[q])] = static_cast<int64_t>(q);
  // Merge R dims that stay adjacent under perm (XLA's canonical iota).
  std::vector<int64_t> r2, perm2;
  // Walk transposed dims; a run k, k+1 with perm[k+1] == perm[k] + 1 merges.
  std::vector<std::vector<int64_t>> runs;
  for (size_t k = 0; k < perm.size(); ++k) {
    if (!runs.empty() && perm[k] == runs.back().back() + 1) {
      runs.back().push_back(perm[k]);
    } else {
      runs.push_back({perm[k]});
    }
  }
  // Runs sorted by their first R index give the merged R.
  std::vector<size_t> run_order(runs.size());
  std::iota(run_order.begin(), run_order.end(), 0);
  std::sort(run_order.begin(), run_order.end(),
            [&](size_t x, size_t y) { return runs[x][0] < runs[y][0]; });
  std::vector<int64_t> run_pos(runs.size());
  for (size_t q = 0; q < run_order.size(); ++q) {
    int64_t size = 1;
    for (int64_t ri : runs[run_order[q]]) size *= r[static_cast<size_t>(ri)];
    r2.push_back(size);
    run_pos[run_order[q]] = static_cast<int64_t>(q);
  }
  for (size_t k = 0; k < runs.size(); ++k) perm2.push_back(run_pos[k]);
  return std::make_pair(r2, perm2);
}

namespace {

std::string DeviceListText(const std::vector<int64_t>& array_dims,
                           const std::vector<int64_t>& devices) {
  std::string s = absl::StrCat("devices=[", absl::StrJoin(array_dims, ","), "]");
  if (auto iota = DetectIota(devices)) {
    absl::StrAppend(&s, "<=[", absl::StrJoin(iota->first, ","), "]");
    if (iota->first.size() > 1) absl::StrAppend(&s, "T(", absl::StrJoin(iota->second, ","), ")");
  } else {
    absl::StrAppend(&s, absl::StrJoin(devices, ","));
  }
  return s;
}

std::optional<SubgroupType> ParseSubgroupType(std::string_view t) {
  if (t == "manual") return SubgroupType::kManual;
  if (t == "unreduced") return SubgroupType::kUnreduced;
  if (t == "replicated") return SubgroupType::kReplicated;
  return std::nullopt;
}

}  // namespace

std::string_view SubgroupTypeName(SubgroupType t) {
  switch (t) {
    case SubgroupType::kManual: return "manual";
    case SubgroupType::kUnreduced: return "unreduced";
    case SubgroupType::kReplicated: return "replicated";
  }
  return "?";
}

Sharding Sharding::Maximal(int64_t device) {
  Sharding s = OfKind(Kind::kMaximal);
  s.device_ = device;
  return s;
}

Sharding Sharding::Tuple(std::vector<Sharding> leaves) {
  Sharding s = OfKind(Kind::kTuple);
  s.leaves_ = std::move(leaves);
  return s;
}

absl::StatusOr<Sharding> Sharding::Tiled(std::vector<int64_t> tiles,
                                         std::vector<Subgroup> subgroups,
                                         std::vector<int64_t> devices) {
  int64_t n = 1;
  for (int64_t t : tiles) {
    if (t < 1 || n > kMaxDevices / t) {
      return absl::InvalidArgumentError("tile counts must be positive (and not too large)");
    }
    n *= t;
  }
  for (const Subgroup& g : subgroups) {
    if (g.size < 1 || n > kMaxDevices / g.size) {
      return absl::InvalidArgumentError("subgroup sizes must be positive (and not too large)");
    }
    n *= g.size;
  }
  if (static_cast<int64_t>(devices.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("the device array needs ", n,
                                                   " device ids but has ", devices.size()));
  }
  int64_t max_id = -1;
  for (int64_t d : devices) {
    if (d < 0 || d >= kMaxDevices) {
      return absl::InvalidArgumentError(absl::StrCat("device id ", d, " is out of range"));
    }
    max_id = std::max(max_id, d);
  }
  auto t = std::make_shared<TiledData>();
  t->tiles = std::move(tiles);
  t->subgroups = std::move(subgroups);
  t->devices = std::move(devices);
  t->position.assign(static_cast<size_t>(max_id + 1), -1);
  for (size_t k = 0; k < t->devices.size(); ++k) {
    int32_t& p = t->position[static_cast<size_t>(t->devices[k])];
    if (p >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("device ", t->devices[k], " appears twice in the device array"));
    }
    p = static_cast<int32_t>(k);
  }
  const Kind k = Canonicalize(*t);
  if (k != Kind::kTiled) return OfKind(k);
  Sharding s = OfKind(Kind::kTiled);
  s.tiled_ = Intern(std::move(t));
  return s;
}

std::shared_ptr<const Sharding::TiledData> Sharding::Intern(std::shared_ptr<TiledData> t) {
  struct Hash {
    size_t operator()(const std::shared_ptr<const TiledData>& d) const {
      size_t h = absl::Hash<std::vector<int64_t>>()(d->tiles);
      h = h * 1000003u ^ absl::Hash<std::vector<int64_t>>()(d->devices);
      for (const Subgroup& g : d->subgroups) {
        h = h * 1000003u ^ (static_cast<size_t>(g.size) * 4u + static_cast<size_t>(g.type));
      }
      return h;
    }
  };
  struct Eq {
    bool operator()(const std::shared_ptr<const TiledData>& a,
                    const std::shared_ptr<const TiledData>& b) const {
      return a->tiles == b->tiles && a->subgroups == b->subgroups && a->devices == b->devices;
    }
  };
  struct Table {
    std::mutex mu;
    absl::flat_hash_set<std::shared_ptr<const TiledData>, Hash, Eq> set;
    size_t purge_at = 4096;
  };
  static Table* const table = new Table();  // lives for the process
  std::shared_ptr<const TiledData> fresh = std::move(t);
  std::lock_guard<std::mutex> lock(table->mu);
  auto [it, inserted] = table->set.insert(fresh);
  if (!inserted) return *it;
  if (table->set.size() >= table->purge_at) {
    // Payloads only the table holds belong to no sharding any more: dropped, so that a long
    // process (a fuzzing campaign) keeps the payloads in use, not every one ever made. The
    // count is exact here: a payload not in the table's hands is reached only through a
    // sharding that holds it, and a new holder takes it from the table under this lock.
    absl::erase_if(table->set, [](const std::shared_ptr<const TiledData>& d) {
      return d.use_count() == 1;
    });
    table->purge_at = std::max<size_t>(4096, 2 * table->set.size());
  }
  return fresh;
}

const Sharding::TiledData& Sharding::EmptyData() {
  static const TiledData* empty = new TiledData();
  return *empty;
}

Sharding Sharding::IotaTiled(std::vector<int64_t> tiles, int64_t replication) {
  int64_t n = replication;
  for (int64_t t : tiles) n *= t;
  std::vector<int64_t> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<Subgroup> sub;
  if (replication > 1) sub.push_back({SubgroupType::kReplicated, replication});
  return *Tiled(std::move(tiles), std::move(sub), std::move(devices));
}

Sharding::Kind Sharding::Canonicalize(TiledData& t) {
  // Drop size-1 subgroups (no effect on the row-major order).
  t.subgroups.erase(std::remove_if(t.subgroups.begin(), t.subgroups.end(),
                                  [](const Subgroup& g) { return g.size == 1; }),
                   t.subgroups.end());
  // Order subgroups manual < unreduced < replicated (stable), then merge equal neighbours.
  std::vector<int64_t> dims = t.tiles;
  for (const Subgroup& g : t.subgroups) dims.push_back(g.size);
  const int64_t r = static_cast<int64_t>(t.tiles.size());
  std::vector<int64_t> sub_order(t.subgroups.size());
  std::iota(sub_order.begin(), sub_order.end(), 0);
  std::stable_sort(sub_order.begin(), sub_order.end(), [&](int64_t a, int64_t b) {
    return t.subgroups[static_cast<size_t>(a)].type < t.subgroups[static_cast<size_t>(b)].type;
  });
  bool sorted = std::is_sorted(sub_order.begin(), sub_order.end());
  if (!sorted) {
    std::vector<int64_t> perm(static_cast<size_t>(r));
    std::iota(perm.begin(), perm.end(), 0);
    std::vector<Subgroup> reordered;
    for (int64_t k : sub_order) {
      perm.push_back(r + k);
      reordered.push_back(t.subgroups[static_cast<size_t>(k)]);
    }
    t.devices = TransposeDeviceArray(t.devices, dims, perm);
    t.subgroups = std::move(reordered);
  }
  std::vector<Subgroup> merged;
  for (const Subgroup& g : t.subgroups) {
    if (!merged.empty() && merged.back().type == g.type) {
      merged.back().size *= g.size;
    } else {
      merged.push_back(g);
    }
  }
  t.subgroups = std::move(merged);
  // Identical copies: sort ids within each replication group.
  if (!t.subgroups.empty() && t.subgroups.back().type == SubgroupType::kReplicated) {
    const size_t g = static_cast<size_t>(t.subgroups.back().size);
    for (size_t b = 0; b < t.devices.size(); b += g) {
      std::sort(t.devices.begin() + static_cast<int64_t>(b),
                t.devices.begin() + static_cast<int64_t>(b + g));
    }
  }
  for (size_t k = 0; k < t.devices.size(); ++k) {
    t.position[static_cast<size_t>(t.devices[k])] = static_cast<int32_t>(k);
  }
  t.array_dims = t.tiles;
  t.subgroup_devices = 1;
  for (const Subgroup& g : t.subgroups) {
    t.array_dims.push_back(g.size);
    t.subgroup_devices *= g.size;
  }
  int64_t num_tiles = 1;
  for (int64_t x : t.tiles) num_tiles *= x;
  if (num_tiles == 1 && t.subgroups.size() <= 1) {
    return t.subgroups.empty() || t.subgroups[0].type == SubgroupType::kReplicated
               ? Kind::kReplicated
           : t.subgroups[0].type == SubgroupType::kManual ? Kind::kManual
                                                          : Kind::kUnreduced;
  }
  return Kind::kTiled;
}

bool Sharding::HasManualSubgroup() const { return SubgroupSize(SubgroupType::kManual) > 1; }

int64_t Sharding::NumTiles() const {
  int64_t n = 1;
  for (int64_t t : data().tiles) n *= t;
  return n;
}

int64_t Sharding::SubgroupSize(SubgroupType t) const {
  for (const Subgroup& g : data().subgroups) {
    if (g.type == t) return g.size;
  }
  return 1;
}

int64_t Sharding::SubgroupArrayDim(SubgroupType t) const {
  if (!IsTiled()) return -1;
  for (size_t k = 0; k < data().subgroups.size(); ++k) {
    if (data().subgroups[k].type == t) return rank() + static_cast<int64_t>(k);
  }
  return -1;
}

int64_t Sharding::PositionOf(int64_t device) const {
  if (device < 0 || device >= static_cast<int64_t>(data().position.size())) return -1;
  return data().position[static_cast<size_t>(device)];
}

std::optional<std::vector<int64_t>> Sharding::ArrayIndex(int64_t device) const {
  int64_t p = PositionOf(device);
  if (p < 0) return std::nullopt;
  const std::vector<int64_t>& dims = ArrayDims();
  std::vector<int64_t> idx(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    idx[k] = p % dims[k];
    p /= dims[k];
  }
  return idx;
}

std::optional<std::vector<int64_t>> Sharding::TileIndex(int64_t device, int64_t rank) const {
  if (kind_ == Kind::kMaximal && device != device_) return std::nullopt;
  if (kind_ != Kind::kTiled) return std::vector<int64_t>(static_cast<size_t>(rank), 0);
  int64_t p = PositionOf(device);
  if (p < 0) return std::nullopt;
  p /= data().subgroup_devices;  // the tile's position: the subgroup dims are minor
  const std::vector<int64_t>& tiles = data().tiles;
  std::vector<int64_t> idx(tiles.size());
  for (size_t k = tiles.size(); k-- > 0;) {
    idx[k] = p % tiles[k];
    p /= tiles[k];
  }
  return idx;
}

bool Sharding::operator==(const Sharding& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kMaximal: return device_ == o.device_;
    case Kind::kTuple: return leaves_ == o.leaves_;
    case Kind::kTiled: return tiled_ == o.tiled_;  // interned: equal payloads are one
    default: return true;
  }
}

std::string Sharding::ToString() const {
  switch (kind_) {
    case Kind::kUnset: return "{unset}";
    case Kind::kUnknown: return "{unknown}";
    case Kind::kReplicated: return "{replicated}";
    case Kind::kManual: return "{manual}";
    case Kind::kUnreduced: return "{unreduced}";
    case Kind::kMaximal: return absl::StrCat("{maximal device=", device_, "}");
    case Kind::kTuple: {
      std::string s = "{";
      for (size_t i = 0; i < leaves_.size(); ++i) {
        if (i) s += ", ";
        if (i % 5 == 0 && i) absl::StrAppend(&s, "/*index=", i, "*/");
        s += leaves_[i].ToString();
      }
      return s + "}";
    }
    case Kind::kTiled: return TiledText();
  }
  return "{}";
}

void Sharding::AppendTo(std::string* out) const {
  if (kind_ == Kind::kTiled) {
    out->append(TiledText());
  } else {
    out->append(ToString());
  }
}

const std::string& Sharding::TiledText() const {
  const TiledData& d = data();
  std::call_once(d.text_once, [this, &d] {
    std::string s = "{" + DeviceListText(ArrayDims(), d.devices);
    if (d.subgroups.size() == 1 && d.subgroups[0].type == SubgroupType::kReplicated) {
      s += " last_tile_dim_replicate";
    } else if (!d.subgroups.empty()) {
      s += " last_tile_dims={";
      for (size_t k = 0; k < d.subgroups.size(); ++k) {
        if (k) s += ", ";
        s += SubgroupTypeName(d.subgroups[k].type);
      }
      s += "}";
    }
    d.text = s + "}";
  });
  return d.text;
}

HloSharding Sharding::ToHlo() const {
  HloSharding h;
  switch (kind_) {
    case Kind::kUnset:
    case Kind::kReplicated: h.kind = HloSharding::Kind::kReplicated; break;
    case Kind::kUnknown: h.kind = HloSharding::Kind::kUnknown; break;
    case Kind::kManual: h.kind = HloSharding::Kind::kManual; break;
    case Kind::kUnreduced: h.kind = HloSharding::Kind::kUnreduced; break;
    case Kind::kMaximal:
      h.kind = HloSharding::Kind::kMaximal;
      h.maximal_device = device_;
      break;
    case Kind::kTuple: {
      // The text as ToString() writes it, composed from the leaves' texts (one pass).
      h.kind = HloSharding::Kind::kTuple;
      h.tuple.reserve(leaves_.size());
      for (size_t i = 0; i < leaves_.size(); ++i) {
        h.tuple.push_back(leaves_[i].ToHlo());
        if (i) h.text += ", ";
        if (i % 5 == 0 && i) absl::StrAppend(&h.text, "/*index=", i, "*/");
        absl::StrAppend(&h.text, "{", leaves_[i].IsUnset() ? "unset" : h.tuple.back().text, "}");
      }
      return h;
    }
    case Kind::kTiled:
      h.kind = HloSharding::Kind::kTiled;
      h.tile_dims = ArrayDims();
      h.devices = data().devices;
      if (data().subgroups.size() == 1 && data().subgroups[0].type == SubgroupType::kReplicated) {
        h.last_tile_dim_replicate = true;
      } else {
        for (const Subgroup& g : data().subgroups) {
          h.last_tile_dims.emplace_back(std::string(SubgroupTypeName(g.type)));
        }
      }
      break;
  }
  if (kind_ == Kind::kTiled) {
    const std::string& text = TiledText();
    h.text.assign(text, 1, text.size() - 2);
    return h;
  }
  const std::string text = kind_ == Kind::kUnset ? "{replicated}" : ToString();
  h.text = text.substr(1, text.size() - 2);
  return h;
}

int64_t Sharding::LeafCount(const Shape& shape) { return shape.LeafCount(); }

Sharding Sharding::Broadcast(const Sharding& s, const Shape& shape) {
  if (!shape.IsTuple() || s.IsTuple()) return s;
  return Tuple(std::vector<Sharding>(static_cast<size_t>(LeafCount(shape)), s));
}

Sharding Sharding::ElementOf(const Sharding& s, const Shape& shape, int64_t i) {
  if (!shape.IsTuple() || s.IsTuple()) return s.TupleElement(shape, i);
  if (i < 0 || i >= static_cast<int64_t>(shape.tuple_shapes.size())) return Broadcast(s, shape);
  return Broadcast(s, shape.tuple_shapes[static_cast<size_t>(i)]);
}

Sharding Sharding::TupleElement(const Shape& shape, int64_t i) const {
  if (kind_ != Kind::kTuple || !shape.IsTuple() || i < 0 ||
      i >= static_cast<int64_t>(shape.tuple_shapes.size())) {
    return *this;
  }
  int64_t first = 0;
  for (int64_t k = 0; k < i; ++k) first += LeafCount(shape.tuple_shapes[static_cast<size_t>(k)]);
  const Shape& e = shape.tuple_shapes[static_cast<size_t>(i)];
  const int64_t count = LeafCount(e);
  if (first + count > static_cast<int64_t>(leaves_.size())) return Unset();
  if (!e.IsTuple()) return leaves_[static_cast<size_t>(first)];
  return Tuple(std::vector<Sharding>(leaves_.begin() + first, leaves_.begin() + first + count));
}

absl::StatusOr<Sharding> Sharding::FromHlo(const HloSharding& h, const Shape& shape) {
  if (h.kind == HloSharding::Kind::kTuple) {
    if (!shape.IsTuple()) {
      if (h.tuple.size() == 1) return FromHlo(h.tuple[0], shape);
      return absl::InvalidArgumentError(
          absl::StrCat("tuple sharding ", h.ToString(), " on non-tuple shape ", shape.ToString(false)));
    }
    // Flattened leaves.
    std::vector<const Shape*> leaves;
    std::vector<const Shape*> stack = {&shape};
    while (!stack.empty()) {
      const Shape* s = stack.back();
      stack.pop_back();
      if (s->IsTuple()) {
        for (size_t k = s->tuple_shapes.size(); k-- > 0;) stack.push_back(&s->tuple_shapes[k]);
      } else {
        leaves.push_back(s);
      }
    }
    if (leaves.size() != h.tuple.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tuple sharding has ", h.tuple.size(), " elements but the shape ",
          shape.ToString(false), " has ", leaves.size(), " leaves"));
    }
    std::vector<Sharding> out;
    for (size_t k = 0; k < leaves.size(); ++k) {
      ASSIGN_OR_RETURN(Sharding l, FromHlo(h.tuple[k], *leaves[k]));
      out.push_back(std::move(l));
    }
    return Tuple(std::move(out));
  }
  if (shape.IsTuple()) {
    absl::StatusOr<Sharding> leaf;
    std::vector<Sharding> out;
    std::vector<const Shape*> stack = {&shape};
    while (!stack.empty()) {
      const Shape* s = stack.back();
      stack.pop_back();
      if (s->IsTuple()) {
        for (size_t k = s->tuple_shapes.size(); k-- > 0;) stack.push_back(&s->tuple_shapes[k]);
        continue;
      }
      ASSIGN_OR_RETURN(Sharding l, FromHlo(h, *s));
      out.push_back(std::move(l));
    }
    return Tuple(std::move(out));
  }
  switch (h.kind) {
    case HloSharding::Kind::kReplicated: return Replicated();
    case HloSharding::Kind::kManual: return Manual();
    case HloSharding::Kind::kUnknown: return Unknown();
    case HloSharding::Kind::kUnreduced: return Unreduced();
    case HloSharding::Kind::kMaximal: return Maximal(h.maximal_device);
    case HloSharding::Kind::kTiled: break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported sharding form ", h.ToString()));
  }
  // Tiled: built once per distinct attribute and rank (a module repeats a few shardings on
  // thousands of instructions); the key is every field read below.
  std::string key;
  {
    // Counts, then the fields' bytes: an unambiguous key without formatting a number.
    const int64_t head[] = {shape.rank(), h.last_tile_dim_replicate ? 1 : 0,
                            static_cast<int64_t>(h.last_tile_dims.size()),
                            static_cast<int64_t>(h.tile_dims.size()),
                            static_cast<int64_t>(h.devices.size())};
    key.reserve(sizeof(head) + 8 * (h.tile_dims.size() + h.devices.size()) + 16);
    key.append(reinterpret_cast<const char*>(head), sizeof(head));
    key.append(reinterpret_cast<const char*>(h.tile_dims.data()), 8 * h.tile_dims.size());
    key.append(reinterpret_cast<const char*>(h.devices.data()), 8 * h.devices.size());
    for (const std::string& t : h.last_tile_dims) key.append(t).push_back('\0');
  }
  thread_local absl::flat_hash_map<std::string, Sharding> built;
  if (auto it = built.find(key); it != built.end()) return it->second;
  absl::StatusOr<Sharding> s = TiledFromHlo(h, shape);
  if (s.ok()) {
    if (built.size() >= (size_t{1} << 14)) built.clear();
    built.emplace(std::move(key), *s);
  }
  return s;
}

absl::StatusOr<Sharding> Sharding::TiledFromHlo(const HloSharding& h, const Shape& shape) {
  std::vector<std::string> types = h.last_tile_dims;
  if (h.last_tile_dim_replicate) types.push_back("replicated");
  const int64_t data_rank = static_cast<int64_t>(h.tile_dims.size()) -
                            static_cast<int64_t>(types.size());
  if (data_rank < 0) return absl::InvalidArgumentError("sharding has too many subgroup dims");
  std::vector<int64_t> tiles(h.tile_dims.begin(), h.tile_dims.begin() + data_rank);
  if (data_rank != shape.rank()) {
    bool all_one = std::all_of(tiles.begin(), tiles.end(), [](int64_t t) { return t == 1; });
    if (!all_one) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sharding ", h.ToString(), " tiles ", data_rank, " dimensions but the value ",
          shape.ToString(false), " has rank ", shape.rank()));
    }
    tiles.assign(static_cast<size_t>(shape.rank()), 1);
  }
  std::vector<Subgroup> sub;
  for (size_t k = 0; k < types.size(); ++k) {
    std::optional<SubgroupType> t = ParseSubgroupType(types[k]);
    if (!t) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown subgroup type '", types[k], "' in ", h.ToString()));
    }
    sub.push_back({*t, h.tile_dims[static_cast<size_t>(data_rank) + k]});
  }
  absl::StatusOr<Sharding> s = Tiled(std::move(tiles), std::move(sub), h.devices);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharding ", h.ToString(), ": ", s.status().message()));
  }
  return s;
}

Shape LocalShape(const Shape& global, const Sharding& s) {
  if (global.IsTuple()) {
    if (!s.IsTuple()) {
      Shape out = global;
      for (Shape& e : out.tuple_shapes) e = LocalShape(e, s);
      return out;
    }
    Shape out = global;
    for (size_t i = 0; i < out.tuple_shapes.size(); ++i) {
      out.tuple_shapes[i] =
          LocalShape(global.tuple_shapes[i], s.TupleElement(global, static_cast<int64_t>(i)));
    }
    return out;
  }
  if (!s.IsTiled() || s.rank() != global.rank()) return global;
  Shape out = global;
  for (int64_t d = 0; d < global.rank(); ++d) {
    out.dims[static_cast<size_t>(d)] = ShardSize(global.dims[static_cast<size_t>(d)], s.tile(d));
  }
  return out;
}

int64_t TileOffset(const Sharding& s, int64_t device, int64_t dim, int64_t global_size) {
  if (!s.IsTiled() || dim >= s.rank() || s.tile(dim) == 1) return 0;
  auto idx = s.ArrayIndex(device);
  if (!idx) return 0;
  return (*idx)[static_cast<size_t>(dim)] * ShardSize(global_size, s.tile(dim));
}

std::vector<std::vector<int64_t>> DeviceGroups(const Sharding& s,
                                               const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return {};
  const std::vector<int64_t> array_dims = s.ArrayDims();
  std::vector<bool> grouped(array_dims.size(), false);
  int64_t size = 1;
  for (int64_t d : dims) {
    grouped[static_cast<size_t>(d)] = true;
    size *= array_dims[static_cast<size_t>(d)];
  }
  std::vector<int64_t> perm;
  for (size_t k = 0; k < array_dims.size(); ++k) {
    if (!grouped[k]) perm.push_back(static_cast<int64_t>(k));
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  const std::vector<int64_t> flat = TransposeDeviceArray(s.devices(), array_dims, perm);
  std::vector<std::vector<int64_t>> groups;
  for (size_t b = 0; b < flat.size(); b += static_cast<size_t>(size)) {
    groups.emplace_back(flat.begin() + static_cast<int64_t>(b),
                        flat.begin() + static_cast<int64_t>(b) + size);
  }
  return groups;
}

const Shape& ShapeOfSharding(const HloInstruction& h) {
  if (h.opcode() == HloOpcode::kOutfeed && h.operand_count() >= 1) return h.operand(0)->shape();
  return h.shape();
}

}  // namespace weave::spmd
