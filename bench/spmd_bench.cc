// SPMD partitioning speed on the DeepSeek dump (../shared/real/nv_maxtext_deepseek_..., 3.6 MB,
// ~16k instructions, 4 partitions), against its parse + print time measured in the same run
// (target: propagation + partitioning within 3x of parse + print).
//
// The dump has 9 CustomSPMDPartitioning calls, which `weave partition` declines by name (their
// partitioner is a Python callback of the tracing process). To time the whole module, the
// benchmark renames their target to an opaque one, which the partitioner computes replicated
// with a remark; everything else is the dump as is.
//
//   BM_ParsePrint          parse the text and print it back (the baseline)
//   BM_Propagate           sharding-import + spmd-prepare + sharding-propagation on a parsed clone
//   BM_PropagatePartition  the whole pipeline of `weave partition` (import, prepare,
//                          propagation, partitioner, dce, tuple-simplifier) on a parsed clone
// Each reports `x_parse_print`: its time over parse + print, both timed in the same iterations.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "benchmark/benchmark.h"
#include "hlo/parser.h"
#include "spmd/partition_pipeline.h"

namespace {

namespace fs = std::filesystem;

const std::string& DeepSeekText() {
  static const std::string* text = [] {
    const fs::path p = fs::path(WEAVE_SHARED_DIR) / "real" /
                       "nv_maxtext_deepseek_1n4g_jit_train_step_before_optimization.hlo";
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    const std::string from = "custom_call_target=\"CustomSPMDPartitioning\"";
    const std::string to = "custom_call_target=\"bench_opaque_call\"";
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos)) {
      s.replace(pos, from.size(), to);
      pos += to.size();
    }
    return new std::string(std::move(s));
  }();
  return *text;
}

void BM_ParsePrint(benchmark::State& state) {
  const std::string& text = DeepSeekText();
  if (text.empty()) {
    state.SkipWithError("the DeepSeek dump is not in ../shared/real");
    return;
  }
  size_t bytes = 0;
  for (auto _ : state) {
    auto m = weave::ParseHloModule(text, "deepseek");
    if (!m.ok()) {
      state.SkipWithError(std::string(m.status().message()).c_str());
      return;
    }
    std::string out = (*m)->ToString();
    bytes += out.size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(text.size() * state.iterations()));
}

// Each iteration times, one after the other on the same text, the baseline (parse + print) and
// the pipeline on a parsed clone; the ratio is of the two sums over the same iterations, so that
// the machine's drift (a shared 2-core VM) hits both alike.
void Pipeline(benchmark::State& state, bool propagate_only) {
  const std::string& text = DeepSeekText();
  auto parsed = weave::ParseHloModule(text, "deepseek");
  if (!parsed.ok()) {
    state.SkipWithError(std::string(parsed.status().message()).c_str());
    return;
  }
  weave::spmd::PartitionOptions options;
  options.num_partitions = 4;
  options.propagate_only = propagate_only;
  double total = 0, baseline = 0;
  int64_t instructions = 0;
  for (auto _ : state) {
    state.PauseTiming();
    {
      const auto b0 = std::chrono::steady_clock::now();
      auto again = weave::ParseHloModule(text, "deepseek");
      std::string out = again.ok() ? (*again)->ToString() : std::string();
      benchmark::DoNotOptimize(out);
      baseline += std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
    }
    std::unique_ptr<weave::HloModule> m = (*parsed)->Clone();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = weave::spmd::PartitionModule(m.get(), options);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
    state.PauseTiming();
    instructions = 0;
    for (const weave::HloComputation* c : m->computations()) instructions += c->instruction_count();
    m.reset();
    state.ResumeTiming();
  }
  if (baseline > 0) state.counters["x_parse_print"] = total / baseline;
  state.counters["parse_print_ms"] =
      1e3 * baseline / static_cast<double>(std::max<int64_t>(state.iterations(), 1));
  state.counters["instructions_out"] = static_cast<double>(instructions);
}

void BM_Propagate(benchmark::State& state) { Pipeline(state, true); }
void BM_PropagatePartition(benchmark::State& state) { Pipeline(state, false); }

BENCHMARK(BM_ParsePrint)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_Propagate)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_PropagatePartition)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
