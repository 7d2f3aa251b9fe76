// The GpuBackendConfig XLA's GemmRewriter writes on an FP8 cuBLASLt call (see
// fp8_gemm_internal.h), in the schema of the XLA version chosen by --xla-backend-config.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "gpu/fp8_gemm_internal.h"
#include "nlohmann/json.hpp"
#include "passes/gpu_backend_config.h"

namespace weave {
namespace fp8_gemm_internal {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string PrecisionName(const HloInstruction* dot, size_t i) {
  if (i < dot->operand_precision().size() && !dot->operand_precision()[i].empty()) {
    return absl::AsciiStrToUpper(dot->operand_precision()[i]);
  }
  return "DEFAULT";
}

ordered_json IntList(const std::vector<int64_t>& v) {
  ordered_json a = ordered_json::array();
  for (int64_t x : v) a.push_back(std::to_string(x));
  return a;
}

ordered_json JsonNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
    return ordered_json(static_cast<int64_t>(v));
  }
  return ordered_json(v);
}

}  // namespace

namespace {

// The config, built (see BackendConfig below for what it reads).
std::string BuildBackendConfig(const HloInstruction* dot, const OutputPlan& plan, int64_t nb,
                               int64_t lhs_k, int64_t rhs_k, int64_t lhs_stride,
                               int64_t rhs_stride, XlaBackendConfigVersion v) {
  // Built member by member in place: nested initializer lists copy every value they hold. An
  // ordered object is a vector of (const key, value): room for its 11 members up front, so that
  // growing it does not copy the keys.
  ordered_json gemm = ordered_json::object();
  gemm.get_ref<ordered_json::object_t&>().reserve(11);
  gemm["alpha_real"] = JsonNumber(plan.alpha);
  gemm["beta"] = plan.matrix_bias != nullptr ? 1 : 0;
  std::vector<int64_t> batch_dims;
  if (nb > 0) batch_dims.push_back(0);
  {
    ordered_json& dims = gemm["dot_dimension_numbers"];
    dims["lhs_contracting_dimensions"] = IntList({lhs_k});
    dims["rhs_contracting_dimensions"] = IntList({rhs_k});
    dims["lhs_batch_dimensions"] = IntList(batch_dims);
    dims["rhs_batch_dimensions"] = IntList(batch_dims);
  }
  gemm["alpha_imag"] = 0;
  std::string algorithm = "ALG_UNSET";
  if (const std::string* alg = dot->GetRawAttribute("algorithm")) {
    algorithm = "ALG_" + absl::AsciiStrToUpper(*alg);
  }
  {
    ordered_json& precision = gemm["precision_config"];
    ordered_json& operands = precision["operand_precision"];
    operands = ordered_json::array();
    operands.push_back(PrecisionName(dot, 0));
    operands.push_back(PrecisionName(dot, 1));
    precision["algorithm"] = std::move(algorithm);
  }
  gemm["epilogue"] = plan.epilogue;
  gemm["lhs_stride"] = std::to_string(lhs_stride);
  gemm["rhs_stride"] = std::to_string(rhs_stride);
  gemm["grad_x"] = dot->GetFrontendAttribute("grad_x").value_or("") == "true";
  gemm["grad_y"] = dot->GetFrontendAttribute("grad_y").value_or("") == "true";
  gemm["damax_output"] = plan.amax_reduce != nullptr;

  // A dot's config that is not JSON (never written by XLA) is replaced by a fresh one.
  absl::StatusOr<GpuBackendConfigEditor> edit = GpuBackendConfigEditor::Of(*dot, v);
  GpuBackendConfigEditor cfg = edit.ok() ? std::move(*edit) : GpuBackendConfigEditor(v);
  // The dot's own backend (oneof) config does not describe the GEMM call.
  static const char* kOneof[] = {"cudnn_conv_backend_config", "bitcast_backend_config",
                                 "collective_backend_config", "fusion_backend_config",
                                 "cudnn_norm_backend_config", "cudnn_fmha_backend_config",
                                 "custom_call_backend_config"};
  GpuBackendConfigEditor out(v);
  for (auto it = cfg.json().begin(); it != cfg.json().end(); ++it) {
    if (std::find(std::begin(kOneof), std::end(kOneof), it.key()) != std::end(kOneof)) continue;
    out.SetField(it.key(), it.value());
  }
  out.SetField("gemm_backend_config", std::move(gemm));
  return out.ToString();
}

}  // namespace

// The GpuBackendConfig of the call in the schema of XLA version `v`: the dot's own fields kept
// (operation_queue_id, force_earliest_schedule, ...), gemm_backend_config set with the fields of
// GemmBackendConfig (passes/gpu_backend_config.h), in proto field-number order. Building one
// goes through two JSON documents (about 40k machine instructions), and a module's GEMMs repeat
// a few forms: each text is kept per thread by everything it is made of (the dot's config text,
// algorithm, operand precisions and grad_x/grad_y attributes, the plan's alpha, amax, beta and
// epilogue, the dimensions, strides and schema version), in a table emptied when it reaches 4k texts.
std::string BackendConfig(const HloInstruction* dot, const OutputPlan& plan, int64_t nb,
                          int64_t lhs_k, int64_t rhs_k, int64_t lhs_stride, int64_t rhs_stride,
                          XlaBackendConfigVersion v) {
  std::string key;
  auto put = [&key](int64_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof(x)); };
  auto put_text = [&](std::string_view t) {
    put(static_cast<int64_t>(t.size()));
    key.append(t);
  };
  double alpha = plan.alpha;
  int64_t alpha_bits = 0;
  static_assert(sizeof(alpha) == sizeof(alpha_bits));
  std::memcpy(&alpha_bits, &alpha, sizeof(alpha));
  put(static_cast<int64_t>(v));
  put(nb);
  put(lhs_k);
  put(rhs_k);
  put(lhs_stride);
  put(rhs_stride);
  put(alpha_bits);
  put(plan.amax_reduce != nullptr ? 1 : 0);
  put(plan.matrix_bias != nullptr ? 1 : 0);
  put_text(plan.epilogue);
  const std::string* algorithm = dot->GetRawAttribute("algorithm");
  put(algorithm != nullptr ? 1 : 0);
  if (algorithm != nullptr) put_text(*algorithm);
  put(static_cast<int64_t>(dot->operand_precision().size()));
  for (const std::string& p : dot->operand_precision()) put_text(p);
  for (const char* attr : {"grad_x", "grad_y"}) {
    const std::optional<std::string> a = dot->GetFrontendAttribute(attr);
    put(a.has_value() ? 1 : 0);
    if (a) put_text(*a);
  }
  put_text(dot->backend_config);
  thread_local absl::flat_hash_map<std::string, std::string> built;
  if (auto it = built.find(key); it != built.end()) return it->second;
  std::string config =
      BuildBackendConfig(dot, plan, nb, lhs_k, rhs_k, lhs_stride, rhs_stride, v);
  if (built.size() >= (size_t{1} << 12)) built.clear();
  built.emplace(std::move(key), config);
  return config;
}

}  // namespace fp8_gemm_internal
}  // namespace weave
