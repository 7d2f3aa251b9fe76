// Shardings and replica groups as XLA's text format writes them
// (../shared/specs/hlo-text-format.md §4 "Replica groups" and "Sharding"; XLA's HloSharding,
// TileAssignment and IotaReplicaGroupList).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weave {

// An iota device list `[dims]<=[reshape]T(perm)`: iota(prod(reshape)) reshaped to `reshape`,
// transposed by `perm` (identity if empty), flattened, then viewed with shape `dims`.
struct IotaList {
  std::vector<int64_t> dims;
  std::vector<int64_t> reshape;
  std::vector<int64_t> perm;
  // The flattened device ids.
  std::vector<int64_t> Expand() const;
};

// `replica_groups=` in list form `{{0,1},{2,3}}`, iota form `[G,S]<=[..]T(..)`, or the 2026
// mesh form `mesh['a'=2,'b'=2] {'b'}` (hlo/mesh.h: each group runs over the listed axes).
// `groups` is always the expanded list; the text is printed back as written.
struct ReplicaGroups {
  std::vector<std::vector<int64_t>> groups;  // expanded groups (empty = one group of all)
  std::optional<IotaList> iota;              // set when written in iota form
  bool is_mesh = false;                      // written in mesh form (groups expanded)
  std::string text;  // the text as written (printed back verbatim when non-empty)

  // Text in XLA's form: the iota form if `iota` is set, else the list form.
  std::string ToString() const;
  static ReplicaGroups FromList(std::vector<std::vector<int64_t>> groups);
};
// Parses `{{0,1},{2,3}}`, `{}`, `[2,4]<=[8]`, `[4,2]<=[2,4]T(1,0)`, or
// `mesh['a'=2,'b'=2] {'b'}` (optionally `mesh[...], device_ids=(...) {...}`).
absl::StatusOr<ReplicaGroups> ParseReplicaGroups(std::string_view text);

// One (non-tuple) sharding.
struct HloSharding {
  // kOther: a form this version does not know (kept verbatim). XLA's named (v3) form
  // `{mesh['x'=2], [{'x'}, {}]}` is parsed into the kinds above (hlo/mesh.h), text kept.
  enum class Kind { kReplicated, kManual, kMaximal, kTiled, kUnknown, kUnreduced, kTuple, kOther };
  Kind kind = Kind::kReplicated;
  // kTiled: tile assignment dims (one per data dim, plus a trailing replication dim when
  // last_tile_dim_replicate, plus trailing subgroup dims for last_tile_dims) and the device id
  // of each tile in row-major order.
  std::vector<int64_t> tile_dims;
  std::vector<int64_t> devices;
  bool last_tile_dim_replicate = false;
  std::vector<std::string> last_tile_dims;  // e.g. {"manual"}
  int64_t maximal_device = -1;              // kMaximal
  std::vector<HloSharding> tuple;           // kTuple
  std::string text;  // the text as written, without the outer braces; printed back verbatim

  // Number of data (non-replication, non-subgroup) tile dims.
  int64_t DataRank() const;
  // Tile index along each data dim held by `device`; nullopt if the device is absent.
  std::optional<std::vector<int64_t>> TileIndexForDevice(int64_t device) const;
  bool IsReplicated() const { return kind == Kind::kReplicated; }
  // `{...}` text (with braces).
  std::string ToString() const;
};
// Parses the text inside `sharding=` including the outer braces.
absl::StatusOr<HloSharding> ParseSharding(std::string_view text);

}  // namespace weave
