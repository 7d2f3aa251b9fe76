// HLO text throughput: parse, verify and print, on the largest real dump in ../shared/real
// (the 3.6 MB DeepSeek module) and on generated modules of 10k, 100k and 1M instructions.
// Reported: bytes/s (MB/s of HLO text) and items/s (instructions/s); `s_per_instr` shows that
// time per instruction stays flat as modules grow (linear total time). Targets: parsing at
// >= 100 MB/s, and a parse + print round trip of the DeepSeek dump well under a second.
//
// Baseline measured in the same run: BM_CopyText copies the same bytes (memory bandwidth bound),
// so the parse figures can be read as a ratio against a plain copy on the machine at hand.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "analysis/verifier.h"
#include "benchmark/benchmark.h"
#include "hlo/parser.h"

namespace {

namespace fs = std::filesystem;

std::string LargestRealFile() {
  std::string best;
  uintmax_t best_size = 0;
  fs::path dir = fs::path(WEAVE_SHARED_DIR) / "real";
  if (!fs::exists(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".hlo") continue;
    if (e.file_size() > best_size) {
      best_size = e.file_size();
      best = e.path().string();
    }
  }
  return best;
}

const std::string& RealText() {
  static const std::string* text = [] {
    std::ifstream in(LargestRealFile(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return new std::string(ss.str());
  }();
  return *text;
}

// A module of `n` instructions in XLA dump style: a reduction computation and an entry whose
// body cycles through elementwise ops, broadcasts, dots and reduces, each with metadata. Operands
// are recent values (bounded fan-out, as in real dumps). Note: a value with a huge number of
// users (e.g. one parameter read by 100k instructions) currently costs O(users) per added user
// in HloInstruction::AddUser (ir.cc), so such modules parse in quadratic time.
std::string GenerateModule(int64_t n) {
  std::string s;
  s.reserve(static_cast<size_t>(n) * 150 + 1024);
  s += "HloModule generated, entry_computation_layout={(f32[64,64]{1,0}, f32[64,64]{1,0})->"
       "f32[64,64]{1,0}}\n\n";
  s += "%sum (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
       "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n";
  s += "ENTRY %main (p0: f32[64,64], p1: f32[64,64]) -> f32[64,64] {\n";
  s += "  %p0 = f32[64,64]{1,0} parameter(0)\n  %p1 = f32[64,64]{1,0} parameter(1)\n";
  std::string prev = "p0", prev2 = "p1";
  for (int64_t i = 0; i + 4 < n; ++i) {
    std::string name = "v." + std::to_string(i);
    s += "  %" + name + " = ";
    switch (i % 6) {
      case 0:
        s += "f32[64,64]{1,0} add(%" + prev + ", %" + prev2 + ")";
        break;
      case 1:
        s += "f32[64,64]{1,0} multiply(%" + prev + ", %" + prev + ")";
        break;
      case 2:
        s += "f32[64,64]{1,0} dot(%" + prev + ", %" + prev2 +
             "), lhs_contracting_dims={1}, rhs_contracting_dims={0}";
        break;
      case 3: {
        std::string r = "r." + std::to_string(i);
        std::string z = "z." + std::to_string(i);
        s += "f32[] constant(0)\n  %" + z + " = ";  // the line above names the init value
        s += "f32[64]{0} reduce(%" + prev + ", %" + name + "), dimensions={1}, to_apply=%sum";
        s += ", metadata={op_name=\"jit(step)/reduce_sum\" source_file=\"model.py\" "
             "source_line=" + std::to_string(i % 997) + "}\n";
        s += "  %" + r + " = f32[64,64]{1,0} broadcast(%" + z + "), dimensions={0}";
        name = r;
        ++i;
        break;
      }
      case 4:
        s += "f32[64,64]{1,0} negate(%" + prev + ")";
        break;
      default:
        s += "f32[64,64]{1,0} maximum(%" + prev + ", %" + prev2 + ")";
        break;
    }
    s += ", metadata={op_name=\"jit(step)/op\" source_file=\"model.py\" source_line=" +
         std::to_string(i % 997) + "}\n";
    prev2 = prev;
    prev = name;
  }
  s += "  ROOT %out = f32[64,64]{1,0} copy(%" + prev + ")\n}\n";
  return s;
}

// Keeps one generated text at a time (the 1M-instruction text is ~150 MB).
const std::string& GeneratedText(int64_t n) {
  static int64_t cached_n = -1;
  static std::string cached;
  if (cached_n != n) {
    cached = GenerateModule(n);
    cached_n = n;
  }
  return cached;
}

int64_t InstructionCount(const weave::HloModule& m) {
  int64_t k = 0;
  for (const auto* c : m.computations()) k += c->instruction_count();
  return k;
}

void Finish(benchmark::State& state, size_t bytes, int64_t instrs) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * instrs);
  state.counters["instructions"] = static_cast<double>(instrs);
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  // Seconds per instruction (printed with an SI suffix: 250n = 250 ns).
  state.counters["s_per_instr"] = benchmark::Counter(
      static_cast<double>(instrs) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

const std::string& TextFor(int64_t arg) { return arg == 0 ? RealText() : GeneratedText(arg); }

void BM_CopyText(benchmark::State& state) {
  const std::string& text = TextFor(state.range(0));
  for (auto _ : state) {
    std::string copy = text;
    benchmark::DoNotOptimize(copy.data());
  }
  Finish(state, text.size(), 1);
}

void BM_Parse(benchmark::State& state) {
  const std::string& text = TextFor(state.range(0));
  if (text.empty()) {
    state.SkipWithError("no input text");
    return;
  }
  int64_t instrs = 0;
  for (auto _ : state) {
    auto m = weave::ParseHloModule(text, "bench.hlo");
    if (!m.ok()) {
      state.SkipWithError(std::string(m.status().message()).c_str());
      return;
    }
    instrs = InstructionCount(**m);
    state.PauseTiming();  // freeing the module is not parsing
    m->reset();
    state.ResumeTiming();
  }
  Finish(state, text.size(), instrs);
}

void BM_Print(benchmark::State& state) {
  auto m = weave::ParseHloModule(TextFor(state.range(0)), "bench.hlo");
  if (!m.ok()) {
    state.SkipWithError("parse failed");
    return;
  }
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = (*m)->ToString();
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  Finish(state, bytes, InstructionCount(**m));
}

void BM_Verify(benchmark::State& state) {
  const std::string& text = TextFor(state.range(0));
  auto m = weave::ParseHloModule(text, "bench.hlo");
  if (!m.ok()) {
    state.SkipWithError("parse failed");
    return;
  }
  for (auto _ : state) {
    absl::Status s = weave::VerifyModule(**m);
    benchmark::DoNotOptimize(s);
  }
  Finish(state, text.size(), InstructionCount(**m));
}

// Parse + print: the `weave opt` round trip without file I/O.
void BM_RoundTrip(benchmark::State& state) {
  const std::string& text = TextFor(state.range(0));
  int64_t instrs = 0;
  for (auto _ : state) {
    auto m = weave::ParseHloModule(text, "bench.hlo");
    if (!m.ok()) {
      state.SkipWithError("parse failed");
      return;
    }
    std::string out = (*m)->ToString();
    benchmark::DoNotOptimize(out.data());
    instrs = InstructionCount(**m);
  }
  Finish(state, text.size(), instrs);
}

// Arg 0 = the largest real dump; otherwise the number of generated instructions.
void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(0)->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_CopyText)->Apply(Sizes);
BENCHMARK(BM_Parse)->Apply(Sizes);
BENCHMARK(BM_Print)->Apply(Sizes);
BENCHMARK(BM_Verify)->Apply(Sizes);
BENCHMARK(BM_RoundTrip)->Apply(Sizes);

}  // namespace

BENCHMARK_MAIN();
