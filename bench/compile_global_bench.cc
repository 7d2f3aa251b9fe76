// `weave compile` on a global module of ~30k instructions, against its parse + print time
// measured in the same run (target: within 4x).
//
// The module: L = 880 chained pre-norm FP8 MLP layers in global form, as JAX emits a sharded
// jit function for 4 devices (tokens sharded, column- then row-parallel FP8 weights with
// per-tensor scales, `sharding=` on the dots): per layer 34 instructions (4 parameters), 64
// tokens, width 64, MLP width 128; 29,920 instructions in all. Compiling it partitions it (each
// layer: an all-gather of the dequantized activation, an all-reduce + dynamic-slice of the
// partial sums) and runs the windowed einsum pipeline.
//
//   BM_ParsePrint            parse the text and print it back (the baseline)
//   BM_CompileGlobal         CompileModule with --cost-gate=off --windowed-einsum-threshold-mib=0:
//                            partitioning, then every all-gather and reduce-scatter windowed,
//                            FP8 on the wire, FP8 GEMMs, cleanup, report
//   BM_CompileGlobalGated    CompileModule with the defaults: the cost gate decides every
//                            candidate on h100x8 (at these small widths it windows none), so
//                            the time is partitioning, the FP8 GEMMs, cleanup and the report
//   BM_PartitionOnly         the SPMD pipeline alone (what `weave partition` does)
//   BM_CloneOutput           a copy (HloModule::Clone) of BM_CompileGlobal's output, 4.1x the
//                            input's instructions: the cost of only building what the compile
//                            must build, with no decision and no text, as a floor under it
// Each reports `x_parse_print`, its time over BM_ParsePrint's (run BM_ParsePrint first), and the
// instruction counts.
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "benchmark/benchmark.h"
#include "hlo/parser.h"
#include "spmd/partition_pipeline.h"
#include "tools/compile_driver.h"
#include "tools/huge_page_heap.h"
#include "tools/report.h"

namespace {

constexpr int kLayers = 880;
constexpr int kT = 64, kD = 64, kF = 128;

const std::string& GlobalText() {
  static const std::string* text = [] {
    std::string s = absl::StrFormat(
        "HloModule bench_global_fp8_mlp_stack, num_partitions=4\n\n"
        "sum_f32 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\n\n"
        "ENTRY main {\n"
        "  resid = bf16[%d,%d] parameter(0), sharding={devices=[4,1]<=[4]}\n"
        "  zero = f32[] constant(0)\n  lo = f32[] constant(-448)\n  hi = f32[] constant(448)\n",
        kT, kD);
    int param = 1;
    std::string prev = "resid";
    // One layer; {i} is the layer index, {p} the first parameter number, {prev} the input.
    constexpr absl::string_view kLayer = R"hlo(  sa{i} = f32[] parameter({p0}), sharding={replicated}
  w1q{i} = f8e4m3fn[{D},{F}] parameter({p1}), sharding={devices=[1,4]<=[4]}
  w1s{i} = f32[] parameter({p2}), sharding={replicated}
  w2q{i} = f8e4m3fn[{F},{D}] parameter({p3}), sharding={devices=[4,1]<=[4]}
  x{i} = f32[{T},{D}] convert({prev})
  sq{i} = f32[{T},{D}] multiply(x{i}, x{i})
  ss{i} = f32[{T}] reduce(sq{i}, zero), dimensions={1}, to_apply=sum_f32
  rs{i} = f32[{T}] rsqrt(ss{i})
  rsb{i} = f32[{T},{D}] broadcast(rs{i}), dimensions={0}
  n{i} = f32[{T},{D}] multiply(x{i}, rsb{i})
  sb{i} = f32[{T},{D}] broadcast(sa{i}), dimensions={}
  lob{i} = f32[{T},{D}] broadcast(lo), dimensions={}
  hib{i} = f32[{T},{D}] broadcast(hi), dimensions={}
  d{i} = f32[{T},{D}] divide(n{i}, sb{i})
  c{i} = f32[{T},{D}] clamp(lob{i}, d{i}, hib{i})
  q{i} = f8e4m3fn[{T},{D}] convert(c{i})
  qc{i} = f32[{T},{D}] convert(q{i})
  dq{i} = f32[{T},{D}] multiply(qc{i}, sb{i})
  w1c{i} = f32[{D},{F}] convert(w1q{i})
  w1b{i} = f32[{D},{F}] broadcast(w1s{i}), dimensions={}
  w1{i} = f32[{D},{F}] multiply(w1c{i}, w1b{i})
  h{i} = f32[{T},{F}] dot(dq{i}, w1{i}), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
  g{i} = f32[{T},{F}] tanh(h{i})
  gsb{i} = f32[{T},{F}] broadcast(sa{i}), dimensions={}
  gq{i} = f8e4m3fn[{T},{F}] convert(g{i})
  gqc{i} = f32[{T},{F}] convert(gq{i})
  gdq{i} = f32[{T},{F}] multiply(gqc{i}, gsb{i})
  w2c{i} = f32[{F},{D}] convert(w2q{i})
  w2b{i} = f32[{F},{D}] broadcast(w1s{i}), dimensions={}
  w2{i} = f32[{F},{D}] multiply(w2c{i}, w2b{i})
  o{i} = f32[{T},{D}] dot(gdq{i}, w2{i}), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[4,1]<=[4]}
  a{i} = f32[{T},{D}] add(x{i}, o{i})
  r{i} = bf16[{T},{D}] convert(a{i})
)hlo";
    for (int i = 0; i < kLayers; ++i) {
      const std::vector<std::pair<std::string, std::string>> subs = {
                  {"{i}", absl::StrCat(i)},
                   {"{p0}", absl::StrCat(param)},
                   {"{p1}", absl::StrCat(param + 1)},
                   {"{p2}", absl::StrCat(param + 2)},
                   {"{p3}", absl::StrCat(param + 3)},
                   {"{prev}", prev},
                   {"{T}", absl::StrCat(kT)},
                   {"{D}", absl::StrCat(kD)},
                   {"{F}", absl::StrCat(kF)}};
      s += absl::StrReplaceAll(kLayer, subs);
      param += 4;
      prev = absl::StrCat("r", i);
    }
    absl::StrAppendFormat(&s, "  ROOT out = bf16[%d,%d] copy(%s), sharding={devices=[4,1]<=[4]}\n}\n",
                          kT, kD, prev);
    return new std::string(std::move(s));
  }();
  return *text;
}

int64_t Instructions(const weave::HloModule& m) {
  int64_t n = 0;
  for (const weave::HloComputation* c : m.computations()) n += c->instruction_count();
  return n;
}

double& ParsePrintSeconds() {
  static double s = 0;
  return s;
}

void BM_ParsePrint(benchmark::State& state) {
  const std::string& text = GlobalText();
  double total = 0;
  int64_t instructions = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = weave::ParseHloModule(text, "bench");
    if (!m.ok()) {
      state.SkipWithError(std::string(m.status().message()).c_str());
      return;
    }
    std::string out = (*m)->ToString();
    benchmark::DoNotOptimize(out);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    instructions = Instructions(**m);
  }
  ParsePrintSeconds() = total / static_cast<double>(state.iterations());
  state.counters["instructions"] = static_cast<double>(instructions);
  state.SetBytesProcessed(static_cast<int64_t>(text.size() * state.iterations()));
}

// The global module, parsed; null (and the benchmark skipped) if it does not parse.
std::unique_ptr<weave::HloModule> ParsedGlobal(benchmark::State& state) {
  auto parsed = weave::ParseHloModule(GlobalText(), "bench");
  if (!parsed.ok()) {
    state.SkipWithError(std::string(parsed.status().message()).c_str());
    return nullptr;
  }
  return *std::move(parsed);
}

// The compile's options: the cost gate off and every candidate windowed, or the defaults.
weave::tools::CompileOptions GlobalCompileOptions(bool gated) {
  weave::tools::CompileOptions o;
  o.input = "<bench>";
  o.quiet = true;
  if (!gated) {
    o.cost_gate = "off";
    o.threshold_mib = "0";
  }
  return o;
}

// CompileModule on a copy of the parsed module per iteration (the copy not timed).
void CompileGlobal(benchmark::State& state, bool gated) {
  std::unique_ptr<weave::HloModule> parsed = ParsedGlobal(state);
  if (parsed == nullptr) return;
  const weave::tools::CompileOptions o = GlobalCompileOptions(gated);
  double total = 0;
  int64_t out_instructions = 0, loops = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<weave::HloModule> m = parsed->Clone();
    weave::tools::CompileReport report;
    std::unique_ptr<weave::HloModule> compiled;
    std::ostringstream table;
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const int code = weave::tools::CompileModule(o, std::move(m), table, &report, &compiled);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (code != 0 || !compiled) {
      state.SkipWithError(absl::StrFormat("compile exited %d", code).c_str());
      return;
    }
    state.PauseTiming();
    out_instructions = Instructions(*compiled);
    loops = static_cast<int64_t>(report.loops.size());
    compiled.reset();
    state.ResumeTiming();
  }
  const double per = total / static_cast<double>(state.iterations());
  if (ParsePrintSeconds() > 0) state.counters["x_parse_print"] = per / ParsePrintSeconds();
  state.counters["instructions_out"] = static_cast<double>(out_instructions);
  state.counters["windowed_loops"] = static_cast<double>(loops);
}

void BM_CompileGlobal(benchmark::State& state) { CompileGlobal(state, /*gated=*/false); }
void BM_CompileGlobalGated(benchmark::State& state) { CompileGlobal(state, /*gated=*/true); }

void BM_PartitionOnly(benchmark::State& state) {
  std::unique_ptr<weave::HloModule> parsed = ParsedGlobal(state);
  if (parsed == nullptr) return;
  weave::spmd::PartitionOptions options;
  options.num_partitions = 4;
  double total = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<weave::HloModule> m = parsed->Clone();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = weave::spmd::PartitionModule(m.get(), options);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
    state.PauseTiming();
    m.reset();
    state.ResumeTiming();
  }
  const double per = total / static_cast<double>(state.iterations());
  if (ParsePrintSeconds() > 0) state.counters["x_parse_print"] = per / ParsePrintSeconds();
}

void BM_CloneOutput(benchmark::State& state) {
  std::unique_ptr<weave::HloModule> parsed = ParsedGlobal(state);
  if (parsed == nullptr) return;
  weave::tools::CompileReport report;
  std::unique_ptr<weave::HloModule> compiled;
  std::ostringstream table;
  if (weave::tools::CompileModule(GlobalCompileOptions(/*gated=*/false), std::move(parsed), table,
                                  &report, &compiled) != 0 ||
      !compiled) {
    state.SkipWithError("compile failed");
    return;
  }
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<weave::HloModule> copy = compiled->Clone();
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(copy.get());
    state.PauseTiming();
    copy.reset();
    state.ResumeTiming();
  }
  const double per = total / static_cast<double>(state.iterations());
  if (ParsePrintSeconds() > 0) state.counters["x_parse_print"] = per / ParsePrintSeconds();
  state.counters["instructions_out"] = static_cast<double>(Instructions(*compiled));
}

BENCHMARK(BM_ParsePrint)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CompileGlobal)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CompileGlobalGated)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_PartitionOnly)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_CloneOutput)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  weave::tools::UseHugePageHeap();  // as the weave binary's heap (tools/huge_page_heap.h)
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
