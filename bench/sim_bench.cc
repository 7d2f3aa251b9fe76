// Performance-model speed: `SimulateModule` on modules of fully unrolled all-gather windowed loops
// (each loop: N=8 ring steps, 3 dots per step on their own operation queues, 7 permutes; about 80
// kernels per loop), and, as the baseline measured in the same run, parsing the same text.
// Target: 100 unrolled loops simulate in well under a second.
#include <memory>

#include "benchmark/benchmark.h"
#include "hlo/parser.h"
#include "sim/simulator.h"
#include "../tests/unit/sim/ring_modules.h"

namespace {

std::string ModuleText(int64_t loops) {
  weave::sim::testing::RingSpec r;
  r.loops = loops;
  return weave::sim::testing::WindowedAllGatherModule(r);
}

// Baseline: parse the module text.
void BM_ParseUnrolledLoops(benchmark::State& state) {
  std::string text = ModuleText(state.range(0));
  for (auto _ : state) {
    auto m = weave::ParseHloModule(text, "bench");
    if (!m.ok()) state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(m);
  }
  state.counters["bytes"] = static_cast<double>(text.size());
}

void BM_SimulateUnrolledLoops(benchmark::State& state) {
  auto m = weave::ParseHloModule(ModuleText(state.range(0)), "bench");
  auto sys = weave::sim::LoadSystem("h100x8");
  if (!m.ok() || !sys.ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  weave::sim::SimOptions opts;
  opts.record_trace = state.range(1) != 0;
  int64_t kernels = 0, loops = 0;
  for (auto _ : state) {
    auto r = weave::sim::SimulateModule(**m, *sys, opts);
    if (!r.ok()) {
      state.SkipWithError("simulation failed");
      break;
    }
    kernels = r->num_tasks;
    loops = static_cast<int64_t>(r->loops.size());
    benchmark::DoNotOptimize(r);
  }
  state.counters["kernels"] = static_cast<double>(kernels);
  state.counters["windowed_loops"] = static_cast<double>(loops);
  state.counters["kernels_per_s"] =
      benchmark::Counter(static_cast<double>(kernels), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_ParseUnrolledLoops)->Arg(1)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateUnrolledLoops)
    ->Args({1, 0})
    ->Args({100, 0})
    ->Args({100, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
