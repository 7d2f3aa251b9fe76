// Device meshes and mesh-axis shardings: XLA's named shardings (`{mesh['x'=2,'y'=2], [{'x'},
// {}]}`, HloSharding v3), mesh-form replica groups (`mesh['a'=2,'b'=2] {'b'}`) and, through
// src/spmd/sdy_text, Shardy's `#sdy.sharding<@mesh, [{"x"}, {}]>`. All three name mesh axes;
// this file turns them into XLA's tile-assignment form (../shared/specs/spmd-partitioner.md §1;
// XLA's Mesh/AxisRef in hlo/ir/mesh_and_axis, NamedSharding and HloSharding::V3ToV2Sharding,
// MeshAxesReplicaGroupList).
//
// Axis cutting: a mesh axis of size n used through sub-axes `"x":(pre)size` is cut at every
// boundary pre and pre*size any reference uses; each piece (a "factor", major first) is one
// dimension of the reshaped device array. A reference covers a contiguous run of its axis'
// factors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/sharding.h"

namespace weave {

// A device mesh: named axes (major first) and the device id at each mesh position, row-major
// over the axes. `maximal_device` set: XLA's `maximal_mesh[device_id=N]` / Shardy's
// `<[], device_ids=[N]>` (no axes).
struct Mesh {
  std::vector<std::string> axis_names;
  std::vector<int64_t> axis_sizes;
  std::vector<int64_t> device_ids;  // empty: iota (0, 1, ..., N-1)
  std::optional<int64_t> maximal_device;

  int64_t num_devices() const;
  // Index of the axis named `name`, or -1.
  int64_t AxisIndex(std::string_view name) const;
  // Device ids at each mesh position (device_ids, or iota).
  std::vector<int64_t> Devices() const;
};

// A reference to mesh axis `axis`, or to its sub-axis of `size` devices after the first
// `pre_size` (Shardy `"x":(pre)size`, XLA `'x':(pre)size`). size == -1: the whole axis.
struct AxisRef {
  int64_t axis = 0;
  int64_t pre_size = 1;
  int64_t size = -1;
  bool operator==(const AxisRef& o) const {
    return axis == o.axis && pre_size == o.pre_size && size == o.size;
  }
};

// The sharding of one tensor dimension over mesh axes, major first. `closed` false: an open
// dimension (`?`), which propagation may refine; `priority` >= 0 for Shardy's `p<k>`.
struct DimAxes {
  std::vector<AxisRef> axes;
  bool closed = true;
  int64_t priority = -1;
};

// A sharding over a mesh: per-dimension axes, plus axes that are explicitly replicated,
// unreduced (partial sums) or manual. `kind` covers the forms without dimensions.
struct MeshSharding {
  enum class Kind { kDims, kReplicated, kMaximal, kManual, kUnreduced };
  Kind kind = Kind::kDims;
  Mesh mesh;
  std::vector<DimAxes> dims;
  std::vector<AxisRef> replicated, unreduced, manual;
  // "unreduced=max"/"min" of XLA's named form (the reduction of unreduced axes; "sum" default).
  std::string reduction = "sum";
};

// Size of a reference on `mesh` (checked by ValidateAxisRefs).
int64_t AxisRefSize(const Mesh& mesh, const AxisRef& ref);

// Checks that every reference names an axis of `mesh`, that sub-axes divide their axis, and that
// no two references overlap (InvalidArgument naming the reference).
absl::Status ValidateAxisRefs(const Mesh& mesh, const std::vector<AxisRef>& refs);

// XLA's conversion of a mesh sharding to tile-assignment form: tile count of dim d = product of
// its axes' sizes; device array = mesh devices cut into factors, transposed to (sharded factors
// by dim, major first; manual; unreduced; the rest in mesh order = the replicated subgroup) and
// reshaped to tiles ++ subgroups. Size-1 subgroups are dropped; a sharding with no tiled dim and
// only a replicated (manual, unreduced) subgroup is `{replicated}` (`{manual}`, `{unreduced}`).
// `text` is kept as HloSharding::text (printed back verbatim); InvalidArgument for unknown or
// overlapping axes, sub-axes that do not divide their axis, or `rank` mismatches (rank < 0: not
// checked).
absl::StatusOr<HloSharding> MeshShardingToHlo(const MeshSharding& s, std::string text,
                                              int64_t rank = -1);

// Replica groups of a mesh-form `replica_groups=mesh[...] {axes}`: each group runs over the
// listed axes (first = major), one group per combination of the other axes, in mesh order.
// mesh['a'=2,'b'=2]: {'b'} -> {0,1},{2,3}; {'a'} -> {0,2},{1,3}; {'b','a'} -> {0,2,1,3}.
absl::StatusOr<std::vector<std::vector<int64_t>>> MeshAxesReplicaGroups(
    const Mesh& mesh, const std::vector<AxisRef>& axes);

// Row-major array helpers (device arrays): strides of `dims`, and `in` (shape `dims`)
// transposed by `perm` (result dim k = input dim perm[k]), flattened.
std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims);
std::vector<int64_t> TransposeDeviceArray(const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& dims,
                                          const std::vector<int64_t>& perm);

// Parsing of XLA's text forms (names quoted with ' or "):
//   mesh  := "mesh[" ('NAME'=INT (',' 'NAME'=INT)*)? "]" (", device_ids=(" ids | [dims]T(perm) ")")?
//          | "maximal_mesh[device_id=" INT "]"
//   axes  := "{" (AXIS (',' AXIS)*)? "}",  AXIS := 'NAME' (":(" INT ")" INT)?   (or an axis index)
// ParseNamedSharding takes the inside of one `{...}` sharding starting at `mesh`/`maximal_mesh`:
//   mesh ("," ("replicated" | "manual" | "unreduced" ("=" op)? axes?
//              | "[" dim ("," dim)* "]" ("," "replicated=" axes)? ("," "unreduced=" op? axes)?
//                ("," "manual=" axes)?))? ("," "metadata=" {...})?
//   dim := "{" (AXIS ("," AXIS)* ("," "?")? | "?")? "}"
absl::StatusOr<MeshSharding> ParseNamedSharding(std::string_view inner);
// `mesh[...] {axes}` of a mesh-form replica group list.
absl::StatusOr<std::pair<Mesh, std::vector<AxisRef>>> ParseMeshReplicaGroups(
    std::string_view text);

}  // namespace weave
