// spmd::Sharding: the one sharding representation of Weave's SPMD passes
// (../shared/specs/spmd-partitioner.md §1; XLA's HloSharding + TileAssignment).
//
// Contract
// --------
// A sharding says which device holds which part of a value of a *global* shape:
//  - Unset: nothing known yet (propagation fills it; the partitioner treats it as replicated).
//  - Unknown: `{unknown}`, a placeholder that propagation replaces.
//  - Replicated: every device holds the whole value.  Maximal{d}: only device d holds it.
//  - Manual: every device runs its own program on its own value (no global view).
//  - Unreduced: every device holds a partial value; the value is their sum.
//  - Tuple: one sharding per array leaf of a tuple shape, flattened depth-first.
//  - Tiled: data tile counts t[0..r) (r = rank of the value), typed subgroup dims g[0..k)
//    (manual, unreduced or replicated) and a device array A of shape t ++ g (row-major, each
//    device once). Device A[i, j] holds tile i: with c_d = ceil(S_d / t_d) the tile covers
//    [i_d * c_d, min((i_d + 1) * c_d, S_d)) along dim d, padded to c_d (the padding is
//    undefined; a trailing tile may be all padding). Devices that differ only in j hold the same
//    tile: identical copies (replicated), separate manual programs, or partial sums (unreduced).
//
// Canonical form (Tiled; kept by every constructor, so == and ToString() are semantic; every
// tiled payload is interned, so == on tiled shardings is a pointer compare): size-1
// subgroups dropped, same-typed subgroups merged, subgroups ordered manual < unreduced <
// replicated, device ids sorted within each replication group (the order of identical copies
// means nothing), and trivial tilings collapsed to their kind (all tiles 1 and only a replicated
// / manual / unreduced subgroup -> Replicated / Manual / Unreduced).
//
// Text: ToString() writes XLA's GSPMD form, with an iota device list `<=[R]T(perm)` whenever the
// device array is one (iota(prod R) reshaped to R, transposed by perm, flattened), else explicit
// ids: `{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}` on f32[8,6] puts rows 0-3 on
// devices {0,2} and rows 4-7 on {1,3}.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "hlo/sharding.h"
#include "hlo/types.h"

namespace weave::spmd {

// Subgroup types in canonical order.
enum class SubgroupType : uint8_t { kManual = 0, kUnreduced = 1, kReplicated = 2 };
std::string_view SubgroupTypeName(SubgroupType t);  // "manual", "unreduced", "replicated"

class Sharding {
 public:
  enum class Kind : uint8_t {
    kUnset, kUnknown, kReplicated, kMaximal, kManual, kUnreduced, kTuple, kTiled
  };
  struct Subgroup {
    SubgroupType type;
    int64_t size;
    bool operator==(const Subgroup& o) const { return type == o.type && size == o.size; }
  };

  Sharding() = default;  // Unset
  static Sharding Unset() { return Sharding(); }
  static Sharding Unknown() { return OfKind(Kind::kUnknown); }
  static Sharding Replicated() { return OfKind(Kind::kReplicated); }
  static Sharding Manual() { return OfKind(Kind::kManual); }
  static Sharding Unreduced() { return OfKind(Kind::kUnreduced); }
  static Sharding Maximal(int64_t device);
  static Sharding Tuple(std::vector<Sharding> leaves);
  // A tiled sharding, canonicalized. `devices` is A in row-major order over tiles ++ subgroup
  // sizes. InvalidArgument when the sizes disagree, a device repeats or is negative.
  static absl::StatusOr<Sharding> Tiled(std::vector<int64_t> tiles,
                                        std::vector<Subgroup> subgroups,
                                        std::vector<int64_t> devices);
  // Tiled with A = iota(prod(tiles ++ subgroups)); with a replicated subgroup of
  // `replication` > 1 when given.
  static Sharding IotaTiled(std::vector<int64_t> tiles, int64_t replication = 1);
  // The sharding whose tile on `device` is tile_of(device) (a data tile index, size == tiles),
  // for the devices in `devices`; nullopt unless every tile is held by the same number of devices
  // (that number > 1 becomes a replicated subgroup, members in ascending id order). A device for
  // which tile_of returns an empty vector makes the result invalid.
  template <typename F>
  static std::optional<Sharding> FromTileFunction(const std::vector<int64_t>& tiles,
                                                  const std::vector<int64_t>& devices, F tile_of);

  Kind kind() const { return kind_; }
  bool IsUnset() const { return kind_ == Kind::kUnset; }
  bool IsUnknown() const { return kind_ == Kind::kUnknown; }
  bool IsReplicated() const { return kind_ == Kind::kReplicated; }
  bool IsMaximal() const { return kind_ == Kind::kMaximal; }
  bool IsManual() const { return kind_ == Kind::kManual; }
  bool IsUnreduced() const { return kind_ == Kind::kUnreduced; }
  bool IsTuple() const { return kind_ == Kind::kTuple; }
  bool IsTiled() const { return kind_ == Kind::kTiled; }
  bool IsReplicatedOrMaximal() const { return IsReplicated() || IsMaximal(); }
  // Tiled with a manual subgroup.
  bool HasManualSubgroup() const;
  // Tiled (or tuple leaf) with a replicated subgroup.
  bool HasPartialReplication() const { return ReplicationSize() > 1; }

  int64_t maximal_device() const { return device_; }
  const std::vector<Sharding>& leaves() const { return leaves_; }
  std::vector<Sharding>* mutable_leaves() { return &leaves_; }

  // ---- tiled ----
  int64_t rank() const { return static_cast<int64_t>(data().tiles.size()); }
  const std::vector<int64_t>& tiles() const { return data().tiles; }
  int64_t tile(int64_t d) const { return data().tiles[static_cast<size_t>(d)]; }
  const std::vector<Subgroup>& subgroups() const { return data().subgroups; }
  // A, row-major over tiles() ++ subgroup sizes.
  const std::vector<int64_t>& devices() const { return data().devices; }
  // The shape of A (tiles ++ subgroup sizes; empty unless tiled). The reference stays valid while
  // this sharding or a copy of it lives (it is the shared payload's).
  const std::vector<int64_t>& ArrayDims() const { return data().array_dims; }
  // Product of tiles (1 unless tiled).
  int64_t NumTiles() const;
  // Size of the replicated (manual, unreduced) subgroup; 1 if none or not tiled.
  int64_t ReplicationSize() const { return SubgroupSize(SubgroupType::kReplicated); }
  int64_t SubgroupSize(SubgroupType t) const;
  // Position of the subgroup of type `t` among the device array's dims (tiles ++ subgroups), or
  // -1 when there is none (or not tiled).
  int64_t SubgroupArrayDim(SubgroupType t) const;
  // Flat position of `device` in A, or -1.
  int64_t PositionOf(int64_t device) const;
  // Index of `device` along every dim of A (tiles ++ subgroups); nullopt if absent.
  std::optional<std::vector<int64_t>> ArrayIndex(int64_t device) const;
  // Tile index of `device` along each data dim: all zeros for Replicated/Unset/Manual/Unreduced,
  // nullopt if the device holds nothing (not in A, or Maximal on another device).
  std::optional<std::vector<int64_t>> TileIndex(int64_t device, int64_t rank) const;

  // ---- comparisons and text ----
  bool operator==(const Sharding& o) const;
  bool operator!=(const Sharding& o) const { return !(*this == o); }
  // XLA's GSPMD text with braces: `{devices=[1,4]<=[4]}`, `{replicated}`, `{{...}, {...}}`
  // (Unset prints as `{unset}`, only for messages).
  std::string ToString() const;
  // Appends ToString()'s text to *out (without a copy of a tiled sharding's kept text).
  void AppendTo(std::string* out) const;
  // The IR attribute form (text filled in as ToString() without braces).
  HloSharding ToHlo() const;
  // From the IR form, for a value of `shape` (a non-tuple sharding on a tuple applies to every
  // leaf; a named sharding with no dims on a rank-r value gets r untiled dims). InvalidArgument
  // when the data rank does not match the shape, or for kOther/unsupported forms.
  static absl::StatusOr<Sharding> FromHlo(const HloSharding& h, const Shape& shape);

  // For a tuple-shaped value: the sharding of element `i` of `shape` (a Tuple sharding of that
  // element's leaves, or the leaf itself for an array element). Non-tuple shardings are returned
  // unchanged.
  Sharding TupleElement(const Shape& shape, int64_t i) const;
  // Broadcast(s, shape).TupleElement(shape, i), without building the broadcast tuple: element i
  // of a tuple-shaped value costs the element's leaves, not the whole tuple's.
  static Sharding ElementOf(const Sharding& s, const Shape& shape, int64_t i);
  // Number of array leaves of a shape (1 for an array).
  static int64_t LeafCount(const Shape& shape);
  // A tuple sharding giving every leaf of `shape` the sharding `s` (s itself for arrays).
  static Sharding Broadcast(const Sharding& s, const Shape& shape);

 private:
  // FromHlo's tiled case, uncached (h tiled, shape an array).
  static absl::StatusOr<Sharding> TiledFromHlo(const HloSharding& h, const Shape& shape);
  static Sharding OfKind(Kind k) {
    Sharding s;
    s.kind_ = k;
    return s;
  }
  // The tiled payload, immutable once built and shared between copies (propagation copies
  // shardings a lot) and between equal shardings (Intern).
  struct TiledData {
    std::vector<int64_t> tiles;
    std::vector<Subgroup> subgroups;
    std::vector<int64_t> devices;
    std::vector<int32_t> position;  // device id -> flat position in A (-1 absent)
    std::vector<int64_t> array_dims;  // tiles ++ subgroup sizes (set by Canonicalize)
    int64_t subgroup_devices = 1;     // product of the subgroup sizes
    // ToString's text, made once on first use (the data never changes after Tiled() builds
    // it, and many instructions share one TiledData).
    mutable std::once_flag text_once;
    mutable std::string text;
  };
  const std::string& TiledText() const;
  // The one shared payload equal to `t` (canonical already): `t` itself when no equal one is
  // alive, else the payload made first. Every tiled sharding's payload comes from here, so two
  // tiled shardings are equal exactly when they share a payload (== is a pointer compare), and a
  // payload's text is made once per distinct sharding, not once per copy built. Thread-safe.
  static std::shared_ptr<const TiledData> Intern(std::shared_ptr<TiledData> t);
  static const TiledData& EmptyData();
  const TiledData& data() const { return tiled_ ? *tiled_ : EmptyData(); }
  // Canonicalizes `t`; returns the kind it collapses to (kTiled if none).
  static Kind Canonicalize(TiledData& t);
  Kind kind_ = Kind::kUnset;
  int64_t device_ = -1;
  std::shared_ptr<const TiledData> tiled_;
  std::vector<Sharding> leaves_;
};

// gtest / logging printer: the ToString() text.
inline void PrintTo(const Sharding& s, std::ostream* os) { *os << s.ToString(); }

// ---- shapes and tiles ----

// ceil(size / tiles) (0 for size 0).
inline int64_t ShardSize(int64_t size, int64_t tiles) {
  return tiles <= 1 ? size : (size + tiles - 1) / tiles;
}
// The per-device (local) shape of a value of `global` shape: dim d becomes ceil(S_d / t_d).
// Tuple shapes with a Tuple sharding are mapped per leaf; other shardings keep the shape.
Shape LocalShape(const Shape& global, const Sharding& s);

// Offset of `device`'s tile along dim d: tile_index_d * ceil(S_d / t_d); 0 for untiled dims.
int64_t TileOffset(const Sharding& s, int64_t device, int64_t dim, int64_t global_size);

// The devices of A grouped over the dims `dims` of A (data or subgroup dims, as indices into
// ArrayDims()): one group per combination of the other dims (in A's row-major order), members
// ordered row-major over `dims` (listed order, first = major), so that a member's position in
// its group is its index along those dims. Spec §3 "Groups".
std::vector<std::vector<int64_t>> DeviceGroups(const Sharding& s, const std::vector<int64_t>& dims);

// The shape an instruction's `sharding=` attribute describes: its data operand's for an outfeed
// (XLA's outfeed sharding lays out what is sent; its result is a token), its own otherwise.
const Shape& ShapeOfSharding(const HloInstruction& h);

// Finds R and perm with a == iota(prod R) reshaped to R, transposed by perm, flattened, in
// XLA's canonical form (no size-1 dims, adjacent dims merged); nullopt if `a` is no such array.
std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> DetectIota(
    const std::vector<int64_t>& a);

// ---- template definition ----
template <typename F>
std::optional<Sharding> Sharding::FromTileFunction(const std::vector<int64_t>& tiles,
                                                   const std::vector<int64_t>& devices,
                                                   F tile_of) {
  int64_t num_tiles = 1;
  for (int64_t t : tiles) {
    if (t < 1) return std::nullopt;
    num_tiles *= t;
  }
  if (num_tiles <= 0 || devices.empty() || static_cast<int64_t>(devices.size()) % num_tiles != 0) {
    return std::nullopt;
  }
  const int64_t r = static_cast<int64_t>(devices.size()) / num_tiles;
  std::vector<std::vector<int64_t>> holders(static_cast<size_t>(num_tiles));
  for (int64_t d : devices) {
    const std::vector<int64_t> idx = tile_of(d);
    if (idx.size() != tiles.size()) return std::nullopt;
    int64_t flat = 0;
    for (size_t k = 0; k < tiles.size(); ++k) {
      if (idx[k] < 0 || idx[k] >= tiles[k]) return std::nullopt;
      flat = flat * tiles[k] + idx[k];
    }
    std::vector<int64_t>& h = holders[static_cast<size_t>(flat)];
    if (static_cast<int64_t>(h.size()) >= r) return std::nullopt;
    h.push_back(d);
  }
  std::vector<int64_t> array;
  array.reserve(devices.size());
  for (auto& h : holders) {
    if (static_cast<int64_t>(h.size()) != r) return std::nullopt;
    array.insert(array.end(), h.begin(), h.end());
  }
  std::vector<Subgroup> sub;
  if (r > 1) sub.push_back({SubgroupType::kReplicated, r});
  absl::StatusOr<Sharding> s = Tiled(tiles, std::move(sub), std::move(array));
  if (!s.ok()) return std::nullopt;
  return *std::move(s);
}

}  // namespace weave::spmd
