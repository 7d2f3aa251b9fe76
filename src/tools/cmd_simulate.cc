// `weave simulate MODULE.hlo --system=h100x8|h200x8|a100x8|FILE.json [...]`: the performance
// model (src/sim/simulator.h) on one partitioned module.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hlo/parser.h"
#include "nlohmann/json.hpp"
#include "sim/calibration.h"
#include "sim/simulator.h"
#include "tools/report.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace weave::tools {
namespace {

struct SimulateArgs {
  std::string module;
  std::string system;
  std::optional<double> gemm_efficiency, link_efficiency, latency_us, contention;
  std::string gemm_model;
  std::vector<std::string> overrides;
  bool json = false;
  std::string trace;
  std::optional<double> hbm_efficiency;
  bool calibration = false;
  bool serial_sub_wave_gemms = false;
  std::string write_modules;  // --write-modules DIR (with --calibration)
};

// `weave simulate --calibration`: the rows C1-C5 (sim/calibration.h).
int RunCalibrationCommand(const SimulateArgs& a) {
  if (!a.write_modules.empty()) {
    std::filesystem::path dir(a.write_modules);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::cerr << "weave simulate: cannot create " << dir.string() << ": " << ec.message()
                << "\n";
      return 1;
    }
    for (const sim::CalibrationRow& row : sim::CalibrationRows()) {
      for (const sim::TpMatmul& seg : row.segments) {
        for (int which = 0; which < 2; ++which) {
          std::string text = which == 0 ? sim::TpMatmulBaseModule(seg)
                                        : sim::TpMatmulDecomposedModule(seg, row.streams);
          std::string file = (dir / (seg.name + (which == 0 ? "_base.hlo" : "_decomposed.hlo")))
                                 .string();
          if (absl::Status st = WriteFileAtomically(file, text); !st.ok()) {
            std::cerr << "weave simulate: " << st.message() << "\n";
            return 1;
          }
        }
      }
    }
  }
  absl::StatusOr<std::vector<sim::CalibrationResult>> results = sim::RunCalibration();
  if (!results.ok()) {
    std::cerr << "weave simulate: --calibration: " << results.status().message() << "\n";
    return 1;
  }
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const sim::CalibrationResult& r : *results) {
      nlohmann::json j = {{"id", r.row->id},
                          {"source", r.row->source},
                          {"hardware", r.row->hardware},
                          {"shape", r.row->shape},
                          {"system", r.row->system},
                          {"overrides", r.row->overrides},
                          {"implementation", r.row->implementation},
                          {"published_base_us", r.row->published_base_us},
                          {"published_overlapped_us", r.row->published_overlapped_us},
                          {"published_speedup", r.row->published_speedup},
                          {"predicted_overlapped_us", r.predicted_overlapped_us},
                          {"predicted_speedup", r.predicted_speedup},
                          {"speedup_ratio", r.speedup_ratio},
                          {"weave_us", r.weave_us},
                          {"weave_speedup", r.weave_speedup},
                          {"weave_bound_us", r.weave_bound_us},
                          {"weave_bound_speedup", r.weave_bound_speedup}};
      if (r.predicted_base_us) j["predicted_base_us"] = *r.predicted_base_us;
      if (r.base_ratio) j["base_ratio"] = *r.base_ratio;
      if (r.row->layers > 0) {
        j["layers"] = r.row->layers;
        j["saving_per_layer_us"] = r.saving_per_layer_us;
      }
      rows.push_back(j);
    }
    std::cout << nlohmann::json{{"calibration", rows}}.dump(2) << "\n";
  } else {
    std::cout << sim::CalibrationTable(*results);
  }
  return 0;
}

int RunSimulate(const SimulateArgs& a) {
  if (a.calibration) return RunCalibrationCommand(a);
  if (a.module.empty() || a.system.empty()) {
    std::cerr << "weave simulate: a module and --system are required (or --calibration)\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(a.module);
  if (!module.ok()) {
    std::cerr << "weave simulate: " << module.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<sim::SystemSpec> system = sim::LoadSystem(a.system);
  if (!system.ok()) {
    std::cerr << "weave simulate: " << system.status().message() << "\n";
    // An unknown name is a usage error; a system file that does not load is invalid input.
    return absl::IsNotFound(system.status()) ? 2 : 1;
  }
  for (const std::string& o : a.overrides) {
    system = sim::OverrideSystemValue(*system, o);
    if (!system.ok()) {
      std::cerr << "weave simulate: " << system.status().message() << "\n";
      return 2;
    }
  }
  sim::SimOptions options;
  options.gemm_efficiency = a.gemm_efficiency;
  options.link_efficiency = a.link_efficiency;
  options.hbm_efficiency = a.hbm_efficiency;
  options.latency_us = a.latency_us;
  options.contention = a.contention;
  if (!a.gemm_model.empty()) options.gemm_tiled = a.gemm_model == "tiled";
  options.serial_sub_wave_gemms = a.serial_sub_wave_gemms;
  options.record_trace = !a.trace.empty();
  absl::StatusOr<sim::SimResult> result = sim::SimulateModule(**module, *system, options);
  if (!result.ok()) {
    std::cerr << "weave simulate: " << a.module << ": " << result.status().message() << "\n";
    return absl::IsInvalidArgument(result.status()) &&
                   result.status().message().find("must be in") != std::string_view::npos
               ? 2
               : 1;
  }
  if (!a.trace.empty()) {
    std::ofstream out(a.trace);
    if (!out) {
      std::cerr << "weave simulate: cannot write trace file " << a.trace << "\n";
      return 1;
    }
    out << sim::SimResultToChromeTrace(*result);
  }
  if (a.json) {
    nlohmann::json j = nlohmann::json::parse(sim::SimResultToJson(*result));
    j["module"] = {{"file", a.module},
                   {"name", (*module)->name()},
                   {"num_partitions", (*module)->num_partitions}};
    if (!a.trace.empty()) j["trace_file"] = a.trace;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "module: " << a.module << " (" << (*module)->name() << ", num_partitions="
              << (*module)->num_partitions << ")\n";
    std::cout << sim::SimResultToText(*result);
    if (!a.trace.empty()) std::cout << "trace: " << a.trace << " (Chrome trace format)\n";
  }
  return 0;
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* sub = app.add_subcommand(
      "simulate",
      "Estimate the execution time of one partition of a partitioned module on a GPU system "
      "(performance model: GEMMs by FLOPs, other instructions by HBM bytes, collectives by ring "
      "bytes over NVLink; no fusion modelled)");
  sub->add_option("module", args->module, "HLO text module (- for stdin)");
  sub->add_option("--system", args->system,
                  "h100x8, h200x8, b200x8, a100x8, h800x8, a800x8 (built in) or a system JSON file");
  sub->add_flag("--calibration", args->calibration,
                "Print the model against the published measurements C1-C5 "
                "(performance-model.md): published, predicted, ratio");
  sub->add_option("--write-modules", args->write_modules,
                  "With --calibration: write the rows' modules (base and decomposed) to DIR");
  sub->add_option("--hbm-efficiency", args->hbm_efficiency,
                  "fraction of HBM bandwidth kernels reach")
      ->check(CLI::Range(1e-6, 1.0));
  sub->add_option("--gemm-efficiency", args->gemm_efficiency,
                  "fraction of peak a large GEMM reaches (overrides the system file)")
      ->check(CLI::Range(1e-6, 1.0));
  sub->add_option("--link-efficiency", args->link_efficiency,
                  "fraction of link bandwidth collectives reach")
      ->check(CLI::Range(1e-6, 1.0));
  sub->add_option("--latency-us", args->latency_us, "latency per collective ring step (us)")
      ->check(NonNegative());
  sub->add_option("--contention", args->contention,
                  "compute slowdown while communication runs: time x (1 + C)")
      ->check(NonNegative());
  sub->add_option("--gemm-model", args->gemm_model,
                  "tiled (wave quantization, tile padding, per-GEMM overhead) or roofline")
      ->check(CLI::IsMember({"tiled", "roofline"}));
  sub->add_option("--set", args->overrides,
                  "override any system value by JSON path, e.g. --set hbm_gbps=3000 "
                  "--set matmul_tflops.bf16=900 (repeatable)");
  sub->add_flag("--serial-sub-wave-gemms", args->serial_sub_wave_gemms,
               "GEMMs of less than one wave on the main stream (operation_queue_id ignored): the "
               "cost gate's conservative bound for windowed einsum loops");
  sub->add_flag("--json", args->json, "print the result as JSON");
  sub->add_option("--trace", args->trace,
                  "write a Chrome trace event file (one track per stream; open in Perfetto)");
  sub->callback([args, exit_code] { *exit_code = RunSimulate(*args); });
}

}  // namespace weave::tools
