// `weave simulate MODULE.hlo --system=h100x8|h200x8|a100x8|FILE.json [...]`: the performance
// model (src/sim/simulator.h) on one partitioned module.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hlo/parser.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"
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
};

int RunSimulate(const SimulateArgs& a) {
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
  options.latency_us = a.latency_us;
  options.contention = a.contention;
  if (!a.gemm_model.empty()) options.gemm_tiled = a.gemm_model == "tiled";
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
  sub->add_option("module", args->module, "HLO text module (- for stdin)")->required();
  sub->add_option("--system", args->system,
                  "h100x8, h200x8, a100x8 (built in) or a system JSON file")
      ->required();
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
  sub->add_flag("--json", args->json, "print the result as JSON");
  sub->add_option("--trace", args->trace,
                  "write a Chrome trace event file (one track per stream; open in Perfetto)");
  sub->callback([args, exit_code] { *exit_code = RunSimulate(*args); });
}

}  // namespace weave::tools
