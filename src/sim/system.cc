// System files: loading, validation, overrides (see simulator.h).
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"
#include "hlo/status_macros.h"

namespace weave::sim {
namespace internal {
struct BuiltinSystem {
  std::string_view name;
  std::string_view json;
};
extern const BuiltinSystem kBuiltinSystems[];
extern const int kNumBuiltinSystems;
}  // namespace internal

namespace {

using nlohmann::json;

absl::Status Bad(std::string_view origin, std::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat("system file ", std::string(origin), ": ", std::string(msg)));
}

// Reads a number at `key` of `obj`; required unless `def` is given.
absl::StatusOr<double> Num(const json& obj, std::string_view origin, const std::string& path,
                           const std::string& key, std::optional<double> def, bool allow_zero) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (def) return *def;
    return Bad(origin, absl::StrCat("missing value \"", path, key, "\""));
  }
  if (!it->is_number()) return Bad(origin, absl::StrCat("\"", path, key, "\" must be a number"));
  double v = it->get<double>();
  if (!(v >= 0) || (!allow_zero && v == 0)) {
    return Bad(origin, absl::StrCat("\"", path, key, "\" must be ",
                                    allow_zero ? "non-negative" : "positive", ", got ",
                                    it->dump()));
  }
  return v;
}

absl::Status CheckFraction(std::string_view origin, std::string_view what, double v) {
  if (!(v > 0 && v <= 1)) {
    return Bad(origin, absl::StrFormat("%s must be in (0, 1], got %g", what, v));
  }
  return absl::OkStatus();
}

}  // namespace

double SystemSpec::MatmulTflops(PrimitiveType t) const {
  if (t == PrimitiveType::F4E2M1FN && fp4_tflops > 0) return fp4_tflops;
  if (t == PrimitiveType::F4E2M1FN || t == PrimitiveType::F6E2M3FN || t == PrimitiveType::F6E3M2FN) {
    return fp8_tflops > 0 ? fp8_tflops : f16_tflops;
  }
  if (IsFp8(t)) return fp8_tflops > 0 ? fp8_tflops : f16_tflops;
  switch (t) {
    case PrimitiveType::F16: return f16_tflops;
    case PrimitiveType::F32: return f32_tflops;
    case PrimitiveType::F64: return f64_tflops > 0 ? f64_tflops : f32_tflops;
    case PrimitiveType::C64: return f32_tflops / 4;
    case PrimitiveType::C128: return (f64_tflops > 0 ? f64_tflops : f32_tflops) / 4;
    default: return bf16_tflops;  // bf16, integer and other types
  }
}

std::string SystemSpec::Summary() const {
  return absl::StrFormat(
      "%s (%s): %d GPUs, %d SMs; dense matmul TFLOP/s bf16 %g, f16 %g, f32(tf32) %g, fp8 %s, "
      "fp4 %s, f64 %g; HBM %g GB/s x efficiency %g; link %g GB/s per direction x link efficiency %g; "
      "latency %g us per ring step; collectives on %s, contention %g; GEMM efficiency %g, "
      "model %s (tile %dx%d, overhead %g us)",
      name, origin, num_gpus, sm_count, bf16_tflops, f16_tflops, f32_tflops,
      fp8_tflops > 0 ? absl::StrFormat("%g", fp8_tflops) : std::string("none (f16 rate)"),
      fp4_tflops > 0 ? absl::StrFormat("%g", fp4_tflops) : std::string("none (fp8 rate)"), f64_tflops, hbm_gbps, hbm_efficiency, link_gbps, link_efficiency, latency_us,
      collective_engine == "sm" ? "SM-driven NCCL kernels" : "copy engines", contention,
      gemm.efficiency, gemm.tiled ? "tiled" : "roofline", gemm.tile_m, gemm.tile_n,
      gemm.overhead_us);
}

std::vector<std::string> BuiltinSystemNames() {
  std::vector<std::string> names;
  for (int i = 0; i < internal::kNumBuiltinSystems; ++i) {
    names.emplace_back(internal::kBuiltinSystems[i].name);
  }
  return names;
}

std::optional<std::string_view> BuiltinSystemJson(std::string_view name) {
  for (int i = 0; i < internal::kNumBuiltinSystems; ++i) {
    if (internal::kBuiltinSystems[i].name == name) return internal::kBuiltinSystems[i].json;
  }
  return std::nullopt;
}

absl::StatusOr<SystemSpec> ParseSystemJson(std::string_view json_text, std::string_view origin) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(origin, "not valid JSON");
  if (!j.is_object()) return Bad(origin, "must be a JSON object");
  SystemSpec s;
  s.origin = std::string(origin);
  s.json = j.dump(2);
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  s.name = str("name");
  if (s.name.empty()) return Bad(origin, "missing string \"name\"");
  s.description = str("description");
  s.source = str("source");
  if (s.source.empty()) return Bad(origin, "missing string \"source\" (name the datasheet)");

  auto it = j.find("matmul_tflops");
  if (it == j.end() || !it->is_object()) return Bad(origin, "missing object \"matmul_tflops\"");
  const json& mm = *it;
  absl::StatusOr<double> v;
#define WEAVE_NUM(field, obj, path, key, def, zero)       \
  v = Num(obj, origin, path, key, def, zero);             \
  if (!v.ok()) return v.status();                         \
  s.field = *v;
  WEAVE_NUM(bf16_tflops, mm, "matmul_tflops.", "bf16", std::nullopt, false);
  WEAVE_NUM(f16_tflops, mm, "matmul_tflops.", "f16", s.bf16_tflops, false);
  WEAVE_NUM(f32_tflops, mm, "matmul_tflops.", "f32", s.bf16_tflops / 2, false);
  WEAVE_NUM(fp8_tflops, mm, "matmul_tflops.", "fp8", 0.0, true);
  WEAVE_NUM(f64_tflops, mm, "matmul_tflops.", "f64", 0.0, true);
  WEAVE_NUM(fp4_tflops, mm, "matmul_tflops.", "fp4", 0.0, true);
  double gpus = 0, sms = 0;
  v = Num(j, origin, "", "num_gpus", 8.0, false);
  if (!v.ok()) return v.status();
  gpus = *v;
  v = Num(j, origin, "", "sm_count", std::nullopt, false);
  if (!v.ok()) return v.status();
  sms = *v;
  s.num_gpus = static_cast<int64_t>(gpus);
  s.sm_count = static_cast<int64_t>(sms);
  WEAVE_NUM(hbm_gbps, j, "", "hbm_gbps", std::nullopt, false);
  WEAVE_NUM(link_gbps, j, "", "link_gbps", std::nullopt, false);
  WEAVE_NUM(latency_us, j, "", "latency_us", 0.0, true);
  WEAVE_NUM(link_efficiency, j, "", "link_efficiency", 1.0, false);
  WEAVE_NUM(hbm_efficiency, j, "", "hbm_efficiency", 1.0, false);
  {
    std::string engine = str("collective_engine");
    if (j.contains("collective_engine") && engine.empty()) {
      return Bad(origin, "\"collective_engine\" must be \"sm\" or \"copy_engine\"");
    }
    if (!engine.empty()) {
      if (engine != "sm" && engine != "copy_engine") {
        return Bad(origin, absl::StrCat("\"collective_engine\" must be \"sm\" or "
                                        "\"copy_engine\", got \"", engine, "\""));
      }
      s.collective_engine = engine;
    }
  }
  if (auto c = j.find("contention"); c != j.end() && c->is_object()) {
    WEAVE_NUM(contention_sm, *c, "contention.", "sm", 0.0, true);
    WEAVE_NUM(contention_copy_engine, *c, "contention.", "copy_engine", 0.0, true);
    for (auto it = c->begin(); it != c->end(); ++it) {
      if (it.key() != "sm" && it.key() != "copy_engine") {
        return Bad(origin, absl::StrCat("\"contention\" has an unknown engine \"", it.key(),
                                        "\" (sm, copy_engine)"));
      }
    }
  } else {
    WEAVE_NUM(contention_sm, j, "", "contention", 0.0, true);
    s.contention_copy_engine = s.contention_sm;
  }
  s.contention = s.collective_engine == "sm" ? s.contention_sm : s.contention_copy_engine;
  if (auto src = j.find("sources"); src != j.end()) {
    if (!src->is_object()) return Bad(origin, "\"sources\" must be an object of strings");
    for (auto it = src->begin(); it != src->end(); ++it) {
      if (!it->is_string()) {
        return Bad(origin, absl::StrCat("\"sources.", it.key(), "\" must be a string"));
      }
      s.sources[it.key()] = it->get<std::string>();
    }
  }
  auto g = j.find("gemm");
  if (g != j.end()) {
    if (!g->is_object()) return Bad(origin, "\"gemm\" must be an object");
    WEAVE_NUM(gemm.efficiency, *g, "gemm.", "efficiency", 0.75, false);
    WEAVE_NUM(gemm.overhead_us, *g, "gemm.", "overhead_us", 0.0, true);
    double tm = 0, tn = 0, tk = 0;
    v = Num(*g, origin, "gemm.", "tile_m", 128.0, false);
    if (!v.ok()) return v.status();
    tm = *v;
    v = Num(*g, origin, "gemm.", "tile_n", 128.0, false);
    if (!v.ok()) return v.status();
    tn = *v;
    v = Num(*g, origin, "gemm.", "tile_k", 64.0, false);
    if (!v.ok()) return v.status();
    tk = *v;
    s.gemm.tile_m = static_cast<int64_t>(tm);
    s.gemm.tile_n = static_cast<int64_t>(tn);
    s.gemm.tile_k = static_cast<int64_t>(tk);
    auto t = g->find("tiled");
    if (t != g->end()) {
      if (!t->is_boolean()) return Bad(origin, "\"gemm.tiled\" must be true or false");
      s.gemm.tiled = t->get<bool>();
    }
  }
#undef WEAVE_NUM
  if (s.num_gpus < 1 || s.sm_count < 1 || s.gemm.tile_m < 1 || s.gemm.tile_n < 1 ||
      s.gemm.tile_k < 1) {
    return Bad(origin, "num_gpus, sm_count and gemm tiles must be at least 1");
  }
  RETURN_IF_ERROR(CheckFraction(origin, "link_efficiency", s.link_efficiency));
  RETURN_IF_ERROR(CheckFraction(origin, "gemm.efficiency", s.gemm.efficiency));
  RETURN_IF_ERROR(CheckFraction(origin, "hbm_efficiency", s.hbm_efficiency));
  return s;
}

absl::StatusOr<SystemSpec> LoadSystem(std::string_view name_or_path) {
  if (auto builtin = BuiltinSystemJson(name_or_path)) {
    return ParseSystemJson(*builtin, absl::StrCat("built-in systems/", std::string(name_or_path), ".json"));
  }
  std::ifstream in{std::string(name_or_path)};
  if (!in) {
    std::string names;
    for (const auto& n : BuiltinSystemNames()) absl::StrAppend(&names, names.empty() ? "" : "|", n);
    return absl::NotFoundError(absl::StrCat("unknown system '", std::string(name_or_path),
                                            "': not a built-in (", names,
                                            ") and no such file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSystemJson(ss.str(), name_or_path);
}

absl::StatusOr<SystemSpec> OverrideSystemValue(const SystemSpec& spec,
                                               std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("system override '", std::string(assignment), "' must be KEY=VALUE"));
  }
  std::string key(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  json j = json::parse(spec.json, nullptr, false);
  if (j.is_discarded()) return absl::InternalError("system JSON lost");
  json* node = &j;
  std::vector<std::string> parts = absl::StrSplit(key, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!node->is_object() || !node->contains(parts[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("system override: unknown key '", key, "' in ", spec.origin));
    }
    node = &(*node)[parts[i]];
  }
  json parsed = json::parse(value, nullptr, false);
  if (parsed.is_discarded()) parsed = value;
  if (node->is_number() != parsed.is_number() || node->is_boolean() != parsed.is_boolean() ||
      node->is_object() || node->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("system override '", std::string(assignment),
                                                   "': value must be of the same kind as ",
                                                   node->dump()));
  }
  *node = parsed;
  std::string text = j.dump(2);
  absl::StatusOr<SystemSpec> out =
      ParseSystemJson(text, absl::StrCat(spec.origin, " with ", key, "=", value));
  return out;
}

absl::StatusOr<SystemSpec> ApplySimOptions(const SystemSpec& spec, const SimOptions& o) {
  SystemSpec s = spec;
  auto frac = [](const char* flag, double v) -> absl::Status {
    if (!(v > 0 && v <= 1)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s must be in (0, 1], got %g", flag, v));
    }
    return absl::OkStatus();
  };
  if (o.gemm_efficiency) {
    RETURN_IF_ERROR(frac("--gemm-efficiency", *o.gemm_efficiency));
    s.gemm.efficiency = *o.gemm_efficiency;
  }
  if (o.link_efficiency) {
    RETURN_IF_ERROR(frac("--link-efficiency", *o.link_efficiency));
    s.link_efficiency = *o.link_efficiency;
  }
  if (o.hbm_efficiency) {
    RETURN_IF_ERROR(frac("--hbm-efficiency", *o.hbm_efficiency));
    s.hbm_efficiency = *o.hbm_efficiency;
  }
  if (o.latency_us) {
    if (!(*o.latency_us >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--latency-us must be >= 0, got %g", *o.latency_us));
    }
    s.latency_us = *o.latency_us;
  }
  if (o.contention) {
    if (!(*o.contention >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--contention must be >= 0, got %g", *o.contention));
    }
    s.contention = s.contention_sm = s.contention_copy_engine = *o.contention;
  }
  if (o.gemm_tiled) s.gemm.tiled = *o.gemm_tiled;
  return s;
}

}  // namespace weave::sim
