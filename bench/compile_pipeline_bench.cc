// Benchmark: `weave compile` is linear in the module size, and costs a small multiple of reading
// and printing the module.
//
// Module: the generated layer stack (tools/layer_stack_module.h) at Llama 3.1 8B's widths
// (8192 tokens, D 4096, F 14336, 4 partitions; every second layer FP8), with as many layers as
// give about 1k, 10k, 100k and 300k instructions. Each layer holds 4 windowed einsum
// candidates (an all-gather read by Q, K and V, one read by gate and up, the output and down
// projections reduce-scattered): about one candidate per 39 instructions (the public Llama 3.1 8B
// dump: one per 47).
//
// BM_Compile/N runs, per iteration and side by side, the two commands on the same file through
// the CLI: `weave opt IN --passes=, -o /dev/null` (read, parse, print: the round trip) and
// `weave compile IN -o /dev/null -q` (read, parse, verify, the whole pipeline with the cost gate
// on h100x8, verify, the report's analysis, print). The benchmark's time is the compile's.
// Counters: instructions (of the input), compile_us_per_instruction,
// roundtrip_us_per_instruction and compile_over_roundtrip (the ratio of the two times,
// measured in the same iterations). The compile writes a larger module than it reads (windowed
// loops unrolled, caches and FP8 GEMMs added: 2.6x the instructions, 4x the bytes at 30k), so
// each iteration also times `weave opt` of the compiled output (output_roundtrip_us_per_instruction,
// per input instruction) and reports compile_over_output_roundtrip: what the compile costs over
// only reading and writing what it produces. Linear means compile_us_per_instruction stays flat from 10k
// to 300k (the issue allows 1.5x, for the caches), and the ratio stays small (at most 3).
//
// `compile_pipeline_bench --write_module=FILE --instructions=N` writes the generated module
// instead (e.g. N=31855 for the size of the public Llama 3.1 8B dump) to time the commands by
// hand.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "hlo/parser.h"
#include "tools/commands.h"
#include "tools/huge_page_heap.h"
#include "tools/layer_stack_module.h"

namespace {

std::string ModuleFile(int64_t instructions) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string path =
      (dir / absl::StrCat("weave_compile_bench_", instructions, ".hlo")).string();
  std::ofstream out(path);
  out << weave::tools::LayerStackModuleText(weave::tools::LayerStackLayersFor(instructions),
                                            weave::tools::LayerStackSize::Llama8B());
  return path;
}

// Runs one `weave` command line in process; returns its exit code.
int RunWeave(std::vector<std::string> args) {
  CLI::App app{"weave"};
  app.require_subcommand(1);
  int exit_code = 0;
  weave::tools::RegisterOptCommand(app, &exit_code);
  weave::tools::RegisterCompileCommands(app, &exit_code);
  std::vector<const char*> argv = {"weave"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return 2;
  }
  return exit_code;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t CountInstructions(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<std::unique_ptr<weave::HloModule>> m = weave::ParseHloModule(text, path);
  if (!m.ok()) return 0;
  int64_t n = 0;
  for (const weave::HloComputation* c : (*m)->computations()) n += c->instruction_count();
  return n;
}

void BM_Compile(benchmark::State& state) {
  const std::string path = ModuleFile(state.range(0));
  const int64_t instructions = CountInstructions(path);
  if (instructions == 0) {
    state.SkipWithError("the generated module does not parse");
    return;
  }
  const std::string out_path = path + ".out.hlo";
  if (RunWeave({"compile", path, "-o", out_path, "-q"}) != 0) {
    state.SkipWithError("weave compile failed");
    std::filesystem::remove(path);
    std::filesystem::remove(out_path);
    return;
  }
  double compile_s = 0, roundtrip_s = 0, output_roundtrip_s = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    if (RunWeave({"opt", path, "--passes=,", "-o", "/dev/null"}) != 0) {
      state.SkipWithError("weave opt failed");
      break;
    }
    const double rt = Seconds(t0);
    t0 = std::chrono::steady_clock::now();
    if (RunWeave({"opt", out_path, "--passes=,", "-o", "/dev/null"}) != 0) {
      state.SkipWithError("weave opt of the compiled output failed");
      break;
    }
    const double ort = Seconds(t0);
    t0 = std::chrono::steady_clock::now();
    if (RunWeave({"compile", path, "-o", "/dev/null", "-q"}) != 0) {
      state.SkipWithError("weave compile failed");
      break;
    }
    const double c = Seconds(t0);
    state.SetIterationTime(c);
    compile_s += c;
    roundtrip_s += rt;
    output_roundtrip_s += ort;
  }
  std::filesystem::remove(path);
  std::filesystem::remove(out_path);
  const double iters = static_cast<double>(state.iterations());
  if (iters == 0) return;
  state.counters["instructions"] = static_cast<double>(instructions);
  state.counters["compile_us_per_instruction"] = compile_s / iters / instructions * 1e6;
  state.counters["roundtrip_us_per_instruction"] = roundtrip_s / iters / instructions * 1e6;
  state.counters["compile_over_roundtrip"] = compile_s / roundtrip_s;
  state.counters["output_roundtrip_us_per_instruction"] =
      output_roundtrip_s / iters / instructions * 1e6;
  state.counters["compile_over_output_roundtrip"] = compile_s / output_roundtrip_s;
}

BENCHMARK(BM_Compile)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(300000)
    ->UseManualTime()
    ->MinTime(2.0)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  weave::tools::UseHugePageHeap();  // as the weave binary's heap (tools/huge_page_heap.h)
  std::string write_module;
  int64_t instructions = 31855;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--write_module=", 0) == 0) {
      write_module = a.substr(15);
    } else if (a.rfind("--instructions=", 0) == 0) {
      instructions = std::atoll(a.c_str() + 15);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!write_module.empty()) {
    std::ofstream out(write_module);
    out << weave::tools::LayerStackModuleText(weave::tools::LayerStackLayersFor(instructions),
                                              weave::tools::LayerStackSize::Llama8B());
    return out ? 0 : 1;
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  if (benchmark::ReportUnrecognizedArguments(n, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
