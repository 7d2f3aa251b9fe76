// Reshard planning speed (spmd/reshard_steps.h): the A* search (uncached) over chains of slices,
// all-to-alls, all-gathers and a permute, for device counts 8 to 1536, against one linear pass
// over the devices measured in the same run (RefinesOnEveryDevice of the same pair: every
// device's tile along every dim, the unit the search repeats per sharding it reaches).
//
//   BM_PlanSteps/N         f32[1536,1536,96] from [A,B,1] to [1,A,B] on N = A*B devices
//                          (two all-to-alls), then [N,1,1] -> [1,A,1] x B replicas (an all-gather
//                          and an all-to-all)
//   BM_LinearPass/N        RefinesOnEveryDevice of the same pairs (the baseline)
// Each BM_PlanSteps reports `x_linear_pass`: its time over the baseline's, both measured here.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "spmd/reshard.h"
#include "spmd/reshard_steps.h"

namespace {

using weave::PrimitiveType;
using weave::Shape;
using weave::spmd::Sharding;

struct Pair {
  Sharding from, to;
};

std::vector<Pair> Pairs(int64_t n) {
  int64_t a = 1;
  while (a * a < n) a *= 2;
  const int64_t b = n / a;
  std::vector<Pair> out;
  out.push_back({Sharding::IotaTiled({a, b, 1}), Sharding::IotaTiled({1, a, b})});
  out.push_back({Sharding::IotaTiled({n, 1, 1}), Sharding::IotaTiled({1, a, 1}, b)});
  return out;
}

const Shape& Global() {
  static const Shape s(PrimitiveType::F32, {1536, 1536, 96});
  return s;
}

double LinearPassSeconds(const std::vector<Pair>& pairs, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  int reps = 0;
  bool sink = false;
  do {
    for (const Pair& p : pairs) sink ^= weave::spmd::RefinesOnEveryDevice(p.from, p.to, Global(), n);
    ++reps;
  } while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50));
  benchmark::DoNotOptimize(sink);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void BM_PlanSteps(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<Pair> pairs = Pairs(n);
  size_t steps = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const Pair& p : pairs) {
      auto plan = weave::spmd::SearchReshardSteps(p.from, p.to, Global(), n);  // uncached
      steps += plan ? plan->steps.size() : 0;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  benchmark::DoNotOptimize(steps);
  const double per_iteration = seconds / static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["x_linear_pass"] = per_iteration / LinearPassSeconds(pairs, n);
}

void BM_LinearPass(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<Pair> pairs = Pairs(n);
  bool sink = false;
  for (auto _ : state) {
    for (const Pair& p : pairs) sink ^= weave::spmd::RefinesOnEveryDevice(p.from, p.to, Global(), n);
  }
  benchmark::DoNotOptimize(sink);
}

}  // namespace

BENCHMARK(BM_PlanSteps)->Arg(8)->Arg(64)->Arg(512)->Arg(1536)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LinearPass)->Arg(8)->Arg(64)->Arg(512)->Arg(1536)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
