// XLA's GPU `backend_config` JSON in the schema of a chosen XLA version: the one place where Weave
// reads and writes stream assignments and scheduling hints (`operation_queue_id`,
// `wait_on_operation_queues`, `force_earliest_schedule`), shared by every pass that writes them
// (windowed-einsum-handler, fp8-gemm-rewriter, the all-to-all windowed einsum).
//
// XLA prints a backend_config as the proto3 JSON of a message: `GpuBackendConfig`
// (xla/service/gpu/backend_configs.proto) for every GPU instruction except `while`, whose config
// is `WhileLoopBackendConfig` (xla/xla_data.proto). Its JSON parser rejects fields the message
// does not have, so what Weave writes depends on the XLA that reads it:
//
//   version  XLA                       GpuBackendConfig stream fields written
//   2024     2024-01 .. 2025-04        operation_queue_id, wait_on_operation_queues, force_earliest_schedule
//   2025     2025-04 .. 2026-04        same (reification_cost, device_type added to the schema)
//   2026     2026-04 .. (default)      operation_queue_id, force_earliest_schedule
//
// `wait_on_operation_queues` was removed by XLA PR #40679 (2026-04-13, field 2 reserved); XLA's
// stream assignment adds the waits itself. Until its removal date XLA's parser still strips an
// empty `"wait_on_operation_queues":[],` (followed by a comma) from old dumps, nothing else. The
// field lists below are taken from the history of backend_configs.proto and xla_data.proto
// (commit and date per field in gpu_backend_config.cc); ../shared/specs/windowed-einsum-handler.md
// §4 gives the stream fields.
//
// Field order follows XLA's printer: fields in proto field-number order, int64 values as strings,
// default stream fields printed (`"operation_queue_id":"0"`, `"force_earliest_schedule":false`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "nlohmann/json.hpp"
#include "passes/pass.h"

namespace weave {

enum class XlaBackendConfigVersion { k2024 = 2024, k2025 = 2025, k2026 = 2026 };

// The pass option (and `weave compile` / `weave opt` flag) that selects the version:
// `--xla-backend-config=2024|2025|2026`, default 2026.
inline constexpr std::string_view kXlaBackendConfigOption = "xla-backend-config";
inline constexpr XlaBackendConfigVersion kDefaultXlaBackendConfig = XlaBackendConfigVersion::k2026;

// "2024" / "2025" / "2026" -> the version; InvalidArgument naming the accepted values otherwise.
absl::StatusOr<XlaBackendConfigVersion> ParseXlaBackendConfigVersion(std::string_view text);
// The version `options` select (kXlaBackendConfigOption; default 2026). Marks the option read.
absl::StatusOr<XlaBackendConfigVersion> XlaBackendConfigVersionFromOptions(
    const PassOptions& options);
std::string XlaBackendConfigVersionName(XlaBackendConfigVersion v);  // "2026"

// One field of a proto message: its JSON name and field number.
struct ProtoField {
  std::string_view name;
  int number = 0;
};
// The fields XLA's parser accepts in version `v`, in field-number order.
const std::vector<ProtoField>& GpuBackendConfigFields(XlaBackendConfigVersion v);
const std::vector<ProtoField>& GemmBackendConfigFields(XlaBackendConfigVersion v);
const std::vector<ProtoField>& WhileLoopBackendConfigFields(XlaBackendConfigVersion v);

// Checks the backend_config of `instr` against version `v`: an empty config passes; otherwise it
// must be a JSON object whose top-level fields (and, for GpuBackendConfig, the fields of
// `gemm_backend_config`) all exist in that version's schema. Returns one message per problem,
// e.g. "'dot.1': GpuBackendConfig (XLA 2026) has no field 'wait_on_operation_queues'"; empty when
// XLA of that version would accept it.
std::vector<std::string> CheckBackendConfig(const HloInstruction& instr, XlaBackendConfigVersion v);

// A GpuBackendConfig being edited. Parse it from an instruction, change the stream fields, write
// it back with ApplyTo: known fields in field-number order, the stream fields the version lacks
// dropped (wait_on_operation_queues in 2026; reification_cost and device_type, unknown to 2024).
// Other fields (gemm_backend_config, ...) are kept as they are.
class GpuBackendConfigEditor {
 public:
  // InvalidArgument if the instruction's backend_config is not empty and not a JSON object.
  static absl::StatusOr<GpuBackendConfigEditor> Of(const HloInstruction& instr,
                                                   XlaBackendConfigVersion v);
  // A fresh config (XLA's defaults: queue 0, no waits, not forced earliest).
  explicit GpuBackendConfigEditor(XlaBackendConfigVersion v);

  int64_t operation_queue_id() const;  // 0 if absent or not an integer
  void set_operation_queue_id(int64_t id);
  bool force_earliest_schedule() const;
  void set_force_earliest_schedule(bool v);
  // Adds `id` to wait_on_operation_queues (2024/2025). Returns false when it was already there,
  // and always in 2026, which has no such field (XLA adds the waits in its stream assignment).
  bool AddWaitOnOperationQueue(int64_t id);
  // Sets a nested message field such as "gemm_backend_config".
  void SetField(const std::string& name, nlohmann::ordered_json value);
  const nlohmann::ordered_json& json() const { return json_; }

  // The JSON text XLA of the chosen version would print for it.
  std::string ToString() const;
  // Writes ToString() into instr's backend_config; returns whether the text changed.
  bool ApplyTo(HloInstruction* instr) const;

 private:
  XlaBackendConfigVersion version_;
  nlohmann::ordered_json json_;
};


// The stream of `instr`: the top-level `operation_queue_id` of its backend_config (XLA's
// GpuBackendConfig field, an int64 that proto JSON writes as a decimal string), read as
// GpuBackendConfigEditor::Of(instr, v).operation_queue_id() reads it in every schema version v.
// Never fails: 0 when the config does not name a queue, is not a JSON object, or holds a value
// that is neither an integer nor a string of decimal digits (the editor's reading). Reads the
// text once, without building the JSON document (nlohmann's SAX parser); a text this thread has
// read before is answered from a per-thread table (up to 16k texts, emptied when full; passes
// read the same configs).
int64_t OperationQueueId(const HloInstruction& instr);

// The largest OperationQueueId of any instruction of `module` (0 when none has one); new streams
// take the next ids. Parses only the configs whose text names a queue or holds a `\u` escape
// (which may spell the key), so a scan costs a text search per instruction, not a JSON parse.
int64_t MaxOperationQueueId(const HloModule& module);

}  // namespace weave
