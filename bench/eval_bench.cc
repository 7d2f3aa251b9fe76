// Reference evaluator benchmarks (sizes in the names):
//  - dot throughput through the evaluator (RunModule on a one-dot module, 1 partition) against
//    cblas_sgemm called directly on the same shapes in the same run: counter `vs_blas` is
//    evaluator GFLOP/s divided by direct-BLAS GFLOP/s (targets: >= 0.8 for f32, >= 0.5 for bf16
//    and for FP8 operands with their converts);
//  - elementwise throughput (elements/s) for f32 add and bf16 multiply;
//  - `weave run` of ../shared/examples/ag_fp8_two_consumers.hlo on 4 partitions (parse excluded).
#include <cblas.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "eval/evaluator.h"
#include "hlo/parser.h"

namespace weave::eval {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> RandomFloats(size_t n) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void BM_BlasSgemmDirect(benchmark::State& state) {
  const int64_t s = state.range(0);
  std::vector<float> a = RandomFloats(static_cast<size_t>(s * s)), b = RandomFloats(static_cast<size_t>(s * s));
  std::vector<float> c(static_cast<size_t>(s * s));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s), static_cast<int>(s),
                static_cast<int>(s), 1.0f, a.data(), static_cast<int>(s), b.data(), static_cast<int>(s),
                0.0f, c.data(), static_cast<int>(s));
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * s * s * s, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}
BENCHMARK(BM_BlasSgemmDirect)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

// dot of [s,s] x [s,s] with operand type `in` (converted to `mid` first when they differ) and
// result type `out`, through RunModule.
void DotThroughEvaluator(benchmark::State& state, const char* in, const char* mid, const char* out) {
  const int64_t s = state.range(0);
  std::string body;
  if (std::string(in) == mid) {
    body = absl::StrCat("  ROOT d = ", out, "[", s, ",", s, "] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
  } else {
    body = absl::StrCat("  ac = ", mid, "[", s, ",", s, "] convert(a)\n  bc = ", mid, "[", s, ",", s,
                        "] convert(b)\n  ROOT d = ", out, "[", s, ",", s,
                        "] dot(ac, bc), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
  }
  const std::string text = absl::StrCat("HloModule dot\nENTRY e {\n  a = ", in, "[", s, ",", s,
                                        "] parameter(0)\n  b = ", in, "[", s, ",", s,
                                        "] parameter(1)\n", body, "}\n");
  auto m = ParseHloModule(text, "bench");
  if (!m.ok()) {
    state.SkipWithError(std::string(m.status().message()).c_str());
    return;
  }
  EvalOptions o;
  auto inputs = MakeInputs(**m, o);
  if (!inputs.ok()) {
    state.SkipWithError("inputs");
    return;
  }
  // The direct-BLAS baseline runs interleaved with the evaluator (one call each per iteration),
  // so that load changes on a shared machine affect both alike.
  std::vector<float> a = RandomFloats(static_cast<size_t>(s * s)), b = RandomFloats(static_cast<size_t>(s * s));
  std::vector<float> c(static_cast<size_t>(s * s));
  double secs = 0, blas_secs = 0;
  int64_t iters = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto r = RunModule(**m, o, &*inputs);
    const auto t1 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s), static_cast<int>(s),
                static_cast<int>(s), 1.0f, a.data(), static_cast<int>(s), b.data(),
                static_cast<int>(s), 0.0f, c.data(), static_cast<int>(s));
    benchmark::DoNotOptimize(c.data());
    blas_secs += std::chrono::duration<double>(Clock::now() - t1).count();
    secs += std::chrono::duration<double>(t1 - t0).count();
    ++iters;
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(r->outputs);
  }
  const double gflops = 2.0 * s * s * s * iters / secs / 1e9;
  const double blas = 2.0 * s * s * s * iters / blas_secs / 1e9;
  state.counters["GFLOPS"] = gflops;
  state.counters["blas_GFLOPS"] = blas;
  state.counters["vs_blas"] = gflops / blas;
}

void BM_EvalDotF32(benchmark::State& state) { DotThroughEvaluator(state, "f32", "f32", "f32"); }
void BM_EvalDotBf16(benchmark::State& state) { DotThroughEvaluator(state, "bf16", "bf16", "bf16"); }
void BM_EvalDotFp8ConvertBf16(benchmark::State& state) {
  DotThroughEvaluator(state, "f8e4m3fn", "bf16", "bf16");
}
BENCHMARK(BM_EvalDotF32)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EvalDotBf16)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EvalDotFp8ConvertBf16)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

void Elementwise(benchmark::State& state, const char* type, const char* op) {
  const int64_t n = state.range(0);
  const std::string text = absl::StrCat("HloModule ew\nENTRY e {\n  a = ", type, "[", n, "] parameter(0)\n  b = ", type, "[", n,
                                        "] parameter(1)\n  ROOT c = ", type, "[", n, "] ", op, "(a, b)\n}\n");
  auto m = ParseHloModule(text, "bench");
  if (!m.ok()) {
    state.SkipWithError("parse");
    return;
  }
  EvalOptions o;
  auto inputs = MakeInputs(**m, o);
  for (auto _ : state) {
    auto r = RunModule(**m, o, &*inputs);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * n);
}
void BM_ElementwiseAddF32(benchmark::State& state) { Elementwise(state, "f32", "add"); }
void BM_ElementwiseMultiplyBf16(benchmark::State& state) { Elementwise(state, "bf16", "multiply"); }
BENCHMARK(BM_ElementwiseAddF32)->Arg(1 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ElementwiseMultiplyBf16)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

void BM_RunAgFp8TwoConsumers4Partitions(benchmark::State& state) {
  auto m = ParseHloModuleFile(std::string(WEAVE_SHARED_DIR) + "/examples/ag_fp8_two_consumers.hlo");
  if (!m.ok()) {
    state.SkipWithError(std::string(m.status().message()).c_str());
    return;
  }
  EvalOptions o;
  o.num_partitions = 4;
  for (auto _ : state) {
    auto r = RunModule(**m, o);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(r->outputs);
  }
}
BENCHMARK(BM_RunAgFp8TwoConsumers4Partitions)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace weave::eval

BENCHMARK_MAIN();
