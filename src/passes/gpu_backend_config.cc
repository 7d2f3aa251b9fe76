#include "passes/gpu_backend_config.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace weave {

using Json = nlohmann::ordered_json;

namespace {

// A field and the versions that accept it: first (inclusive) and last (inclusive) version whose
// end-of-year schema has it. The schema of a version is the message at the end of that year
// (2026: the snapshot of 2026-08-22 Weave was checked against).
struct VersionedField {
  ProtoField field;
  int first = 2024;
  int last = 2026;
};

// GpuBackendConfig, xla/service/gpu/backend_configs.proto (commit, date the field appeared):
constexpr VersionedField kGpuFields[] = {
    {{"operation_queue_id", 1}},                    // 3f5c73ecf5 2024-01-15
    {{"wait_on_operation_queues", 2}, 2024, 2025},  // 3f5c73ecf5 2024-01-15; removed 1a0ef2e2b5
                                                    // 2026-04-13 (PR #40679), field 2 reserved
    {{"cudnn_conv_backend_config", 3}},             // 558a6010ab 2024-01-12 (3..9)
    {{"gemm_backend_config", 4}},
    {{"bitcast_backend_config", 5}},
    {{"collective_backend_config", 6}},
    {{"fusion_backend_config", 7}},
    {{"cudnn_norm_backend_config", 8}},
    {{"cudnn_fmha_backend_config", 9}},
    {{"force_earliest_schedule", 10}},                      // 7fa9b6f4bb 2024-03-22
    {{"custom_call_backend_config", 11}},                   // 40e1c61bea 2024-12-02
    {{"reification_cost", 12}, 2025},                       // 7bf1170008 2025-04-30
    {{"block_scaled_dot_backend_config", 13}, 2025},        // 074bfe5ce7 2025-07-23
    {{"device_type", 14}, 2025},                            // 2f68c9d09b 2025-08-22
    {{"native_emitter_backend_config", 15}, 2025},          // abfb719ff2 2025-08-22
    {{"collective_metadata_backend_config", 16}, 2025},     // d2451cabf9 2025-11-18
    {{"grouped_gemm_backend_config", 17}, 2026},            // 10881f9462 2026-03-11
    {{"dynamic_slice_config", 18}, 2026},                   // 33073a7dd9 2026-05-08
};

// GemmBackendConfig, same file. Field 19 (reification_cost) existed only from 2025-03-31 to
// 2025-04-30 (761a4a4669, 7bf1170008) and is left out; there never was an `is_fp8` field.
constexpr VersionedField kGemmFields[] = {
    {{"selected_algorithm", 1}},             // 97166051be 2019-06-21
    {{"alpha_real", 2}},
    {{"beta", 3}},
    {{"dot_dimension_numbers", 7}},
    {{"alpha_imag", 9}},
    {{"precision_config", 12}},              // 3cdb87b122 2022-06-24
    {{"epilogue", 13}},                      // 480c7e1ceb 2022-07-20
    {{"lhs_stride", 14}},                    // a9fa44cdc7 2021-07-20
    {{"rhs_stride", 15}},
    {{"grad_x", 16}},                        // 9894515c54 2023-10-29
    {{"grad_y", 17}},
    {{"damax_output", 18}},                  // 8acce0832e 2024-05-21
    {{"autotune_workspace_size", 20}, 2025}, // 907b57686a 2025-12-16
    {{"scale_mode", 21}, 2026},              // 8bca790221 2026-03-16
};

// WhileLoopBackendConfig, xla/xla_data.proto.
constexpr VersionedField kWhileFields[] = {
    {{"known_trip_count", 1}},                               // 2ecc85dcee 2019-02-25
    {{"known_init_step", 2}, 2025},                          // e2fe57d4e9 2025-03-03
    {{"known_induction_variable", 3}, 2025},                 // e2fe57d4e9 2025-03-03
    {{"dynamic_variable_tuple_indices", 4}, 2025, 2025},     // 479bbcc060 2025-12-16; removed
                                                             // eb19f194ce 2026-05-27
    {{"dynamic_variables", 5}, 2026},                        // eb19f194ce 2026-05-27
};

template <size_t N>
std::vector<ProtoField> Select(const VersionedField (&all)[N], XlaBackendConfigVersion v) {
  const int year = static_cast<int>(v);
  std::vector<ProtoField> out;
  for (const VersionedField& f : all) {
    if (f.first <= year && year <= f.last) out.push_back(f.field);
  }
  return out;
}

template <size_t N>
const std::vector<ProtoField>& Cached(const VersionedField (&all)[N], XlaBackendConfigVersion v) {
  // One list per version, built once (the tables are constant).
  static const std::vector<ProtoField>* lists[3] = {
      new std::vector<ProtoField>(Select(all, XlaBackendConfigVersion::k2024)),
      new std::vector<ProtoField>(Select(all, XlaBackendConfigVersion::k2025)),
      new std::vector<ProtoField>(Select(all, XlaBackendConfigVersion::k2026))};
  return *lists[static_cast<int>(v) - 2024];
}

int FieldNumber(const std::vector<ProtoField>& fields, std::string_view name) {
  for (const ProtoField& f : fields) {
    if (f.name == name) return f.number;
  }
  return -1;
}

// Fields a config may carry in one version and not another, that say nothing the target XLA
// could use: dropped when Weave writes the config for a version without them.
bool DroppedWhenUnknown(std::string_view name) {
  return name == "wait_on_operation_queues" || name == "reification_cost" ||
         name == "device_type";
}

void CheckFields(const Json& obj, const std::vector<ProtoField>& fields, std::string_view message,
                 const HloInstruction& instr, XlaBackendConfigVersion v,
                 std::vector<std::string>* problems) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (FieldNumber(fields, it.key()) < 0) {
      problems->push_back(absl::StrCat("'", instr.name(), "': ", std::string(message), " (XLA ",
                                       XlaBackendConfigVersionName(v), ") has no field '",
                                       std::string(it.key()), "'"));
    }
  }
}

int64_t JsonInt(const Json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    int64_t v = 0;
    if (s.empty()) return 0;
    for (char c : s) {
      if (c < '0' || c > '9') return 0;
      if (v > (INT64_MAX - (c - '0')) / 10) return 0;
      v = v * 10 + (c - '0');
    }
    return v;
  }
  return 0;
}

}  // namespace

absl::StatusOr<XlaBackendConfigVersion> ParseXlaBackendConfigVersion(std::string_view text) {
  if (text == "2024") return XlaBackendConfigVersion::k2024;
  if (text == "2025") return XlaBackendConfigVersion::k2025;
  if (text == "2026") return XlaBackendConfigVersion::k2026;
  return absl::InvalidArgumentError(absl::StrCat("--", std::string(kXlaBackendConfigOption), "=", std::string(text),
                                                 ": expected 2024, 2025 or 2026 (the XLA version "
                                                 "whose backend_config schema to write)"));
}

absl::StatusOr<XlaBackendConfigVersion> XlaBackendConfigVersionFromOptions(
    const PassOptions& options) {
  if (!options.Has(kXlaBackendConfigOption)) return kDefaultXlaBackendConfig;
  return ParseXlaBackendConfigVersion(
      options.GetString(kXlaBackendConfigOption, XlaBackendConfigVersionName(kDefaultXlaBackendConfig)));
}

std::string XlaBackendConfigVersionName(XlaBackendConfigVersion v) {
  return std::to_string(static_cast<int>(v));
}

const std::vector<ProtoField>& GpuBackendConfigFields(XlaBackendConfigVersion v) {
  return Cached(kGpuFields, v);
}
const std::vector<ProtoField>& GemmBackendConfigFields(XlaBackendConfigVersion v) {
  return Cached(kGemmFields, v);
}
const std::vector<ProtoField>& WhileLoopBackendConfigFields(XlaBackendConfigVersion v) {
  return Cached(kWhileFields, v);
}

std::vector<std::string> CheckBackendConfig(const HloInstruction& instr,
                                            XlaBackendConfigVersion v) {
  std::vector<std::string> problems;
  if (instr.backend_config.empty()) return problems;
  Json j = Json::parse(instr.backend_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    problems.push_back(absl::StrCat("'", instr.name(), "': backend_config is not a JSON object"));
    return problems;
  }
  if (instr.opcode() == HloOpcode::kWhile) {
    CheckFields(j, WhileLoopBackendConfigFields(v), "WhileLoopBackendConfig", instr, v, &problems);
    return problems;
  }
  CheckFields(j, GpuBackendConfigFields(v), "GpuBackendConfig", instr, v, &problems);
  auto g = j.find("gemm_backend_config");
  if (g != j.end() && g->is_object()) {
    CheckFields(*g, GemmBackendConfigFields(v), "GemmBackendConfig", instr, v, &problems);
  }
  return problems;
}

GpuBackendConfigEditor::GpuBackendConfigEditor(XlaBackendConfigVersion v)
    : version_(v), json_(Json::object()) {}

absl::StatusOr<GpuBackendConfigEditor> GpuBackendConfigEditor::Of(const HloInstruction& instr,
                                                                  XlaBackendConfigVersion v) {
  GpuBackendConfigEditor e(v);
  if (instr.backend_config.empty()) return e;
  Json j = Json::parse(instr.backend_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend_config of '", instr.name(), "' is not a JSON object"));
  }
  e.json_ = std::move(j);
  return e;
}

int64_t GpuBackendConfigEditor::operation_queue_id() const {
  auto it = json_.find("operation_queue_id");
  return it == json_.end() ? 0 : JsonInt(*it);
}

void GpuBackendConfigEditor::set_operation_queue_id(int64_t id) {
  json_["operation_queue_id"] = std::to_string(id);
}

bool GpuBackendConfigEditor::force_earliest_schedule() const {
  auto it = json_.find("force_earliest_schedule");
  return it != json_.end() && it->is_boolean() && it->get<bool>();
}

void GpuBackendConfigEditor::set_force_earliest_schedule(bool v) {
  json_["force_earliest_schedule"] = v;
}

bool GpuBackendConfigEditor::AddWaitOnOperationQueue(int64_t id) {
  if (version_ == XlaBackendConfigVersion::k2026) return false;
  Json& list = json_["wait_on_operation_queues"];
  if (!list.is_array()) list = Json::array();
  for (const Json& e : list) {
    if (JsonInt(e) == id) return false;
  }
  list.push_back(std::to_string(id));
  return true;
}

void GpuBackendConfigEditor::SetField(const std::string& name, Json value) {
  json_[name] = std::move(value);
}

std::string GpuBackendConfigEditor::ToString() const {
  const std::vector<ProtoField>& fields = GpuBackendConfigFields(version_);
  // XLA prints the stream fields even at their defaults: the value a field takes when the config
  // does not hold it (null: none).
  auto default_of = [this](std::string_view name) -> std::optional<Json> {
    if (name == "operation_queue_id") return Json("0");
    if (name == "wait_on_operation_queues" && version_ != XlaBackendConfigVersion::k2026) {
      return Json::array();
    }
    if (name == "force_earliest_schedule") return Json(false);
    return std::nullopt;
  };
  // Written member by member, as nlohmann's dump writes an object (`{"key":value,...}`, the key
  // escaped as a string), without first building the object: a config is written for every
  // GEMM and stream annotation, and the copies cost more than the text. One serializer writes
  // every value straight into the text (dump makes one, and a string, per call), with dump's
  // settings: no indentation, non-ASCII kept, invalid UTF-8 an error.
  std::string text = "{";
  nlohmann::detail::serializer<Json> serializer(
      nlohmann::detail::output_adapter<char, std::string>(text), ' ',
      nlohmann::detail::error_handler_t::strict);
  auto emit = [&text, &serializer](std::string_view key, const Json& value) {
    if (text.size() > 1) text.push_back(',');
    // A key of letters, digits and '_' (every proto field name) needs no escaping.
    const bool plain = std::all_of(key.begin(), key.end(), [](char ch) {
      return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_';
    });
    if (plain) {
      text.push_back('"');
      text.append(key);
      text.push_back('"');
    } else {
      serializer.dump(Json(std::string(key)), false, false, 0);
    }
    text.push_back(':');
    serializer.dump(value, false, false, 0);
  };
  // The fields this version knows, in its order...
  for (const ProtoField& f : fields) {
    auto it = json_.find(f.name);
    if (it != json_.end()) {
      emit(f.name, *it);
    } else if (std::optional<Json> d = default_of(f.name)) {
      emit(f.name, *d);
    }
  }
  // ...then the ones it does not know, in the config's order (the defaults after the config's
  // own): dropped when they only carry scheduling data, otherwise kept (CheckBackendConfig
  // reports them).
  auto unknown_kept = [&fields](std::string_view name) {
    return FieldNumber(fields, name) < 0 && !DroppedWhenUnknown(name);
  };
  for (auto it = json_.begin(); it != json_.end(); ++it) {
    if (unknown_kept(it.key())) emit(it.key(), it.value());
  }
  for (std::string_view name :
       {"operation_queue_id", "wait_on_operation_queues", "force_earliest_schedule"}) {
    if (json_.contains(std::string(name)) || !unknown_kept(name)) continue;
    if (std::optional<Json> d = default_of(name)) emit(name, *d);
  }
  text.push_back('}');
  return text;
}

bool GpuBackendConfigEditor::ApplyTo(HloInstruction* instr) const {
  std::string text = ToString();
  if (text == instr->backend_config) return false;
  instr->backend_config = std::move(text);
  return true;
}

namespace {

// Reads the top-level "operation_queue_id" of a config through nlohmann's SAX interface: the
// same grammar, acceptance and duplicate-key rule (the last one wins) as the DOM parse
// GpuBackendConfigEditor::Of makes, and the value as operation_queue_id() reads it (JsonInt),
// without building the document (queue-id scans read every config of a module that names a
// queue; on the 30k layer stack this took a fifth off them, the lexer being the rest).
class QueueIdReader final : public nlohmann::json_sax<Json> {
 public:
  int64_t value = 0;           // the last top-level operation_queue_id as JsonInt reads it
  bool top_is_object = false;  // Of accepts objects only

  bool null() override { return Scalar(0); }
  bool boolean(bool) override { return Scalar(0); }
  bool number_integer(number_integer_t v) override { return Scalar(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return Scalar(Json(v).get<int64_t>());  // as JsonInt's get<int64_t>() converts it
  }
  bool number_float(number_float_t, const string_t&) override { return Scalar(0); }
  bool string(string_t& s) override { return Scalar(pending_ ? JsonInt(Json(s)) : 0); }
  bool binary(binary_t&) override { return Scalar(0); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_is_object = true;
    return Open();
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    pending_ = depth_ == 1 && k == "operation_queue_id";
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  // The value event right after the key (always at depth 1) is the field's value.
  bool Scalar(int64_t v) {
    if (pending_) value = v;
    pending_ = false;
    return true;
  }
  bool Open() {
    if (pending_) value = 0;  // an object or array reads as 0
    pending_ = false;
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  bool pending_ = false;
};

}  // namespace

int64_t OperationQueueId(const HloInstruction& instr) {
  // Without the key's text there is no key, unless a \u escape spells part of it (JSON's only
  // escape that can write a letter or '_'): then the parse decides, as the editor's does.
  if (instr.backend_config.find("operation_queue_id") == std::string::npos &&
      instr.backend_config.find("\\u") == std::string::npos) {
    return 0;
  }
  // The same config is read by several passes (each stream-annotated dot's by the handler's
  // and the consumers pass's scans, then the dot-merger): its answer is kept per thread by the
  // text, a hash away instead of a parse. Emptied when it holds 16k texts (a few MB for the
  // stream annotations passes write; more for long configs).
  thread_local absl::flat_hash_map<std::string, int64_t> known;
  if (auto it = known.find(instr.backend_config); it != known.end()) return it->second;
  QueueIdReader reader;
  const int64_t id =
      Json::sax_parse(instr.backend_config, &reader) && reader.top_is_object ? reader.value : 0;
  if (known.size() >= (size_t{1} << 14)) known.clear();
  known.emplace(instr.backend_config, id);
  return id;
}

int64_t MaxOperationQueueId(const HloModule& module) {
  int64_t q = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) q = std::max(q, OperationQueueId(*i));
  }
  return q;
}

}  // namespace weave
