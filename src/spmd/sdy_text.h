// Shardy's round-trip attributes as XLA writes them into HLO text frontend attributes
// (../shared/specs/spmd-partitioner.md §1 "Shardy"; XLA's spmd/shardy/sdy_round_trip):
//   module:  xla.sdy.meshes={mesh = #sdy.mesh<["data"=2, "model"=2]>, ...}  (raw blob, or a
//            \"-escaped string)
//   values:  xla.sdy.sharding="#sdy.sharding<@mesh, [{\"data\"}, {}]>"
//   ops:     xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [...]>, ...]>" (one per result)
//   manual:  xla.sdy.manual_axes="#sdy<manual_axes{\"x\"}>"
// Mesh: `#sdy.mesh<["a"=2, "b"=2]>`, optional `, device_ids=[..]`; `<[]>` empty; `<[],
// device_ids=[3]>` maximal. Dims: `{}` closed replicated, `{"a", "b"}` closed (major first),
// `{"a", ?}` / `{?}` open, suffix `p<k>` a priority; `replicated={..}`, `unreduced={..}`;
// `"x":(pre)size` a sub-axis. An inline `mesh<...>` may replace `@name`.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/mesh.h"

namespace weave::spmd {

using SdyMeshes = std::map<std::string, Mesh, std::less<>>;

// Removes one level of backslash escapes (\" -> ", \\ -> \) and surrounding quotes, if any.
std::string UnescapeSdy(std::string_view text);

// Parses the `xla.sdy.meshes` value: `{name = #sdy.mesh<...>, ...}` (quoted or raw).
absl::StatusOr<SdyMeshes> ParseSdyMeshes(std::string_view text);
// Parses one `#sdy.mesh<...>` (or `mesh<...>`) body.
absl::StatusOr<Mesh> ParseSdyMesh(std::string_view text);
// `#sdy.sharding<@mesh, [...]...>` (quoted or not).
absl::StatusOr<MeshSharding> ParseSdySharding(std::string_view text, const SdyMeshes& meshes);
// `#sdy.sharding_per_value<[<@mesh, [...]>, ...]>`: one sharding per result.
absl::StatusOr<std::vector<MeshSharding>> ParseSdyShardingPerValue(std::string_view text,
                                                                   const SdyMeshes& meshes);
// `#sdy<manual_axes{"x", "y"}>`: the axis names.
absl::StatusOr<std::vector<std::string>> ParseSdyManualAxes(std::string_view text);

// Splits a `frontend_attributes={k=v, k2="..."}` blob (module header form) into key -> value
// text (values verbatim, quoted or raw).
std::map<std::string, std::string> SplitFrontendAttributes(std::string_view blob);

}  // namespace weave::spmd
