// `weave demo`: the built-in modules compiled end to end with the compile driver
// (compile_driver.h).
//
//   weave demo [--out-dir DIR] [--system NAME] [--seed S] [-v] [--moe | --mx]
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "hlo/parser.h"
#include "sim/simulator.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/compile_driver.h"
#include "tools/demo_global_module.h"
#include "tools/demo_module.h"
#include "tools/demo_moe_module.h"
#include "tools/demo_mx_module.h"
#include "tools/report.h"

namespace weave::tools {
namespace {

// The options of one built-in block's compile: the demo's own, its files in `dir`.
CompileOptions DemoFiles(const CompileOptions& demo, const std::filesystem::path& dir) {
  CompileOptions o = demo;
  o.command = "weave demo";
  o.input = (dir / "input.hlo").string();
  o.output = (dir / "output.hlo").string();
  o.report = (dir / "report.json").string();
  return o;
}

// `weave demo --moe`: the expert-parallel FP8 MoE FFN block, compiled once with its numerics
// verified (the all-to-all windowed einsum forced with XLA's flag: at this size the cost gate
// keeps the plain exchanges).
int RunMoeDemo(const CompileOptions& demo, const std::filesystem::path& dir, uint64_t seed) {
  std::string text(MoeDemoModuleText());
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModule(text, "<weave demo module>");
  if (!module.ok()) {
    std::cerr << "weave demo: the built-in module does not parse: " << module.status().message()
              << "\n";
    return kInvalidInput;
  }
  CompileOptions o = DemoFiles(demo, dir);
  o.verify_seed = absl::StrCat(seed);
  // At this size (chosen so the numerics verify in a second) the cost gate predicts no gain
  // for splitting the exchanges: force the rewrite with XLA's flag, as an XLA user would.
  o.extras.push_back("--xla_gpu_experimental_enable_alltoall_windowed_einsum=true");
  o.require = "windowed,fp8-gemm,fp8-wire";
  if (absl::Status st = WriteFileAtomically(o.input, text); !st.ok()) {
    std::cerr << "weave demo: " << st.message() << "\n";
    return kInvalidInput;
  }
  std::cout << "weave demo --moe: an expert-parallel FP8 MoE FFN block on 4 partitions "
               "(dispatch all-to-all -> FP8 expert matmuls -> combine all-to-all), each "
               "exchange split into chunks that overlap the expert matmuls "
               "(--xla_gpu_experimental_enable_alltoall_windowed_einsum=true: at this small "
               "size the cost gate would keep the plain exchanges)\n\n";
  CompileReport report;
  int code = CompileModule(o, std::move(*module), std::cout, &report);
  std::cout << "\nwrote " << o.input << " (input), "
            << (code == kOk ? o.output + " (compiled), " : std::string()) << o.report
            << " (report)\n";
  if (code == kOk) {
    std::cout << "try: weave compare " << o.input << " " << o.output << " --num-partitions 4\n";
  }
  return code;
}

// `weave demo --mx`: the MXFP8 MLP block for Blackwell (compute capability 10.0, b200x8 unless
// --system says otherwise). The full block ([8192,4096] tokens, hidden 16384) is compiled with
// the cost gate; its numerics are verified on a scaled copy ([256,256], hidden 512) compiled
// with every loop built (--cost-gate=off), against the global program.
int RunMxDemo(const CompileOptions& demo, const std::filesystem::path& dir, uint64_t seed) {
  const std::string text = MxDemoModuleText(8192, 4096, 16384);
  const std::string small_text = MxDemoModuleText(256, 256, 512);
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModule(text, "<weave demo module>");
  absl::StatusOr<std::unique_ptr<HloModule>> small = ParseHloModule(small_text, "<weave demo module, scaled copy>");
  if (!module.ok() || !small.ok()) {
    std::cerr << "weave demo: the built-in module does not parse: "
              << (!module.ok() ? module.status() : small.status()).message() << "\n";
    return kInvalidInput;
  }
  CompileOptions o = DemoFiles(demo, dir);
  o.partitioned_output = (dir / "partitioned.hlo").string();
  if (o.system.empty()) o.system = "b200x8";
  if (o.compute_capability.empty()) o.compute_capability = "10.0";
  o.input_form = "global";
  o.require = "windowed";
  CompileOptions so = o;
  so.input = (dir / "scaled_input.hlo").string();
  so.output = (dir / "scaled_output.hlo").string();
  so.report.clear();
  so.partitioned_output.clear();
  so.verify_seed = absl::StrCat(seed);
  so.cost_gate = "off";
  for (const auto& [path, body] : {std::pair<std::string, const std::string*>{o.input, &text}, {so.input, &small_text}}) {
    if (absl::Status st = WriteFileAtomically(path, *body); !st.ok()) {
      std::cerr << "weave demo: " << st.message() << "\n";
      return kInvalidInput;
    }
  }
  std::cout << "weave demo --mx: a tensor-parallel MLP block in MXFP8 (f8e4m3fn data, one E8M0 "
               "scale per 32 elements) on 4 partitions, compiled for compute capability "
            << o.compute_capability << " with the cost gate on " << o.system
            << ": where the model predicts a gain, the FP8 data and its scales go round the ring "
               "under the block-scaled GEMMs (cuDNN's at 10.0); XLA never windows these dots\n\n";
  CompileReport report;
  int code = CompileModule(o, std::move(*module), std::cout, &report);
  std::cout << "\nwrote " << o.input << " (input), " << o.partitioned_output << " (partitioned), "
            << (code == kOk ? o.output + " (compiled), " : std::string()) << o.report << " (report)\n";
  if (code != kOk) return code;
  // The numerics, on the scaled copy with every loop built.
  std::ostringstream small_log;
  CompileReport small_report;
  const int small_code = CompileModule(so, std::move(*small), small_log, &small_report);
  std::istringstream lines(small_log.str());
  std::string line;
  std::cout << "\nscaled copy (" << so.input << ", every loop built, --cost-gate=off):\n";
  while (std::getline(lines, line)) {
    if (line.rfind("Numerics:", 0) == 0 || line.find("block-scaled-windowed-einsum: ") != std::string::npos) {
      std::cout << "  " << line << "\n";
    }
  }
  if (small_code == kOk) std::cout << "wrote " << so.output << " (scaled copy, compiled)\n";
  return small_code;
}

// The options of the transformer block's scaled copy: the demo's own, its files in `dir`, its
// numerics verified with `seed`, quiet, on no system (the gate's decisions are replayed).
CompileOptions ScaledCopyOptions(const CompileOptions& demo, const std::filesystem::path& dir,
                                 uint64_t seed) {
  CompileOptions c = demo;
  c.command = "weave demo";
  c.input = (dir / "scaled_input.hlo").string();
  c.output = (dir / "scaled_output.hlo").string();
  c.verify_seed = absl::StrCat(seed);
  c.quiet = true;
  c.system.clear();
  return c;
}

// The transformer demo's opening line: the block (global or partitioned form), its size and the
// system the cost gate decides on.
void PrintTransformerDemoIntro(bool global, const DemoSize& full, const std::string& system) {
  if (global) {
    std::cout << "weave demo: an FP8 transformer block as JAX emits it for 4 partitions "
                 "(global shapes; tokens, heads and MLP columns sharded), "
              << full.ToString()
              << ": global -> partitioned (weave's SPMD partitioner: Q/K/V read one "
                 "all-gather, gate/up another) -> windowed loops (each decided by the cost "
                 "gate on "
              << system
              << ") -> FP8 on the wire and FP8 GEMMs, verified against the global program\n\n";
  } else {
    std::cout << "weave demo: a tensor-parallel FP8 transformer block on 4 partitions "
                 "(Q/K/V share one all-gather, gate/up share one, output and down projections "
                 "reduce-scattered), "
              << full.ToString() << "; every loop decided by the cost gate on " << system
              << "\n\n";
  }
}

// Compiles a clone of the full block with the options `o` of its compile, quietly and writing
// nothing, and fills `decisions` with the cost gate's choices by ReplayKey. Returns the
// compile's exit code (kOk, or the failure, with `decisions` left empty).
int ProbeGateDecisions(const CompileOptions& o, const HloModule& module,
                       std::map<std::string, int>* decisions) {
  CompileOptions probe = o;
  probe.output.clear();
  probe.report.clear();
  probe.partitioned_output.clear();
  probe.require.clear();
  probe.quiet = true;
  probe.system = o.system;
  CompileReport probe_report;
  if (int code = CompileModule(probe, module.Clone(), std::cout, &probe_report); code != kOk) {
    return code;
  }
  for (const CostDecision& d : probe_report.cost_gate.decisions) {
    (*decisions)[ReplayKey(d.pass, d.location)] = d.estimate.chosen;
  }
  return kOk;
}

// The number of windowed loops of each kind in a report.
std::map<std::string, int> LoopKinds(const CompileReport& r) {
  std::map<std::string, int> k;
  for (const WindowedLoopInfo& l : r.loops) ++k[l.kind];
  return k;
}

// The transformer demo's closing lines: the files written and, after a successful compile, the
// commands to try next.
void PrintTransformerDemoFiles(bool global, int exit_code, const CompileOptions& o,
                               const CompileOptions& c) {
  std::cout << "\nwrote " << o.input << (global ? " (input, global), " : " (input), ")
            << (global ? o.partitioned_output + " (partitioned), " : std::string())
            << (exit_code == kOk ? o.output + " (compiled), " : std::string()) << o.report
            << " (report), " << c.input << " and " << c.output << " (the scaled copy)\n";
  if (exit_code == kOk) {
    std::cout << "try: weave compare " << c.input << " " << c.output
              << " --num-partitions 4; weave simulate " << o.output << " --system " << o.system
              << "\n";
  }
}

// `weave demo` (without --moe or --mx): the FP8 transformer block at two sizes. The full one is
// compiled with the cost gate (the performance model decides every loop on the system); its
// numerics are verified on a scaled copy that takes the same decisions (replayed by pass and
// location) and must fire the same rewrites. `global`: start from the global module (else the
// partitioned form). Returns the exit code.
int RunTransformerDemo(const CompileOptions& demo, const std::filesystem::path& dir,
                       uint64_t seed, bool global) {
  const DemoSize full = DemoSize::Full();
  const DemoSize small = DemoSize::Small();
  const std::string text = global ? DemoGlobalModuleText(full) : DemoModuleText(full);
  const std::string small_text = global ? DemoGlobalModuleText(small) : DemoModuleText(small);
  absl::StatusOr<std::unique_ptr<HloModule>> module =
      ParseHloModule(text, "<weave demo module>");
  absl::StatusOr<std::unique_ptr<HloModule>> small_module =
      ParseHloModule(small_text, "<weave demo module, scaled copy>");
  if (!module.ok() || !small_module.ok()) {
    std::cerr << "weave demo: the built-in module does not parse: "
              << (!module.ok() ? module.status() : small_module.status()).message() << "\n";
    return kInvalidInput;
  }
  CompileOptions o = DemoFiles(demo, dir);
  o.require = "windowed,fp8-gemm";
  if (global) o.partitioned_output = (dir / "partitioned.hlo").string();
  if (o.system.empty()) o.system = std::string(kDefaultGateSystem);
  CompileOptions c = ScaledCopyOptions(demo, dir, seed);
  for (const auto& [file, body] : {std::pair<std::string, std::string>{o.input, text},
                                   std::pair<std::string, std::string>{c.input, small_text}}) {
    if (absl::Status st = WriteFileAtomically(file, body); !st.ok()) {
      std::cerr << "weave demo: " << st.message() << "\n";
      return kInvalidInput;
    }
  }
  PrintTransformerDemoIntro(global, full, o.system);
  // The gate's decisions on the full block, replayed on the copy.
  std::map<std::string, int> decisions;
  if (int code = ProbeGateDecisions(o, **module, &decisions); code != kOk) return code;
  c.replay_decisions = decisions;
  c.cost_gate.clear();
  CompileReport copy_report;
  const int copy_code = CompileModule(c, std::move(*small_module), std::cout, &copy_report);
  if (copy_code != kOk && copy_code != kNumericsMismatch) {
    std::cerr << "weave demo: the scaled copy (" << small.ToString()
              << ") did not compile (exit " << copy_code << ")\n";
    return copy_code;
  }
  o.numerics_from_copy = copy_report.numerics;
  o.numerics_from_copy->scaled_copy = absl::StrCat(
      small.ToString(), ", compiled with the cost gate's decisions for the full block (",
      copy_report.loops.size(), " windowed loops), files ", c.input, " and ", c.output);
  CompileReport report;
  int exit_code = CompileModule(o, std::move(*module), std::cout, &report);
  // The copy verifies the rewrites the full block got only if it got the same ones.
  if (exit_code == kOk && (LoopKinds(report) != LoopKinds(copy_report) ||
                           report.fired != copy_report.fired)) {
    std::cerr << "weave demo: the scaled copy's rewrites differ from the full block's, so its "
                 "numerics do not verify them\n";
    exit_code = kNumericsNotVerified;
  }
  PrintTransformerDemoFiles(global, exit_code, o, c);
  return exit_code;
}

// The demo subcommand's flags besides the compile options.
struct DemoFlags {
  std::string out_dir;
  bool out_dir_given = false;  // --out-dir was on the command line
  uint64_t seed = 0;
  bool moe = false, mx = false, from_partitioned = false;
};

// `weave demo`: checks the arguments before anything is created on disk, creates the output
// directory and runs the block the flags name. Returns the exit code (kUsage for a bad system
// name or both --moe and --mx, kInvalidInput for a system that does not load or a directory
// that cannot be created).
int RunDemo(const CompileOptions& demo, const DemoFlags& flags) {
  if (!demo.system.empty()) {
    if (absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(demo.system); !spec.ok()) {
      std::cerr << "weave demo: --system: " << spec.status().message() << "\n";
      return absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
    }
  }
  std::filesystem::path dir(flags.out_dir);
  if (flags.moe && flags.mx) {
    std::cerr << "weave demo: --moe and --mx name different blocks; give one\n";
    return kUsage;
  }
  if (flags.moe && !flags.out_dir_given) dir = "weave-demo-moe";
  if (flags.mx && !flags.out_dir_given) dir = "weave-demo-mx";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "weave demo: cannot create " << dir.string() << ": " << ec.message() << "\n";
    return kInvalidInput;
  }
  if (flags.moe) return RunMoeDemo(demo, dir, flags.seed);
  if (flags.mx) return RunMxDemo(demo, dir, flags.seed);
  return RunTransformerDemo(demo, dir, flags.seed, !flags.from_partitioned);
}

}  // namespace

void RegisterDemoCommand(CLI::App& app, int* exit_code) {
  auto demo = std::make_shared<CompileOptions>();
  auto out_dir = std::make_shared<std::string>("weave-demo");
  auto seed = std::make_shared<uint64_t>(0);
  CLI::App* dcmd = app.add_subcommand(
      "demo",
      "Compile the built-in FP8 transformer block, written as JAX emits it (global shapes, "
      "sharded parameters, 4 partitions): partitioned, windowed and FP8 with the cost gate, "
      "its numerics verified against the global program on a scaled copy; prints the report "
      "and writes input.hlo, partitioned.hlo, output.hlo, report.json and the scaled copy's "
      "scaled_input.hlo, scaled_output.hlo");
  dcmd->add_option("--out-dir", *out_dir, "Directory for the files (default ./weave-demo)");
  dcmd->add_option("--seed", *seed, "Seed of the numerics check (default 0)");
  dcmd->add_option("--system", demo->system,
                   "The system the cost gate and the estimated times are for (default h100x8)");
  dcmd->add_flag("-v,--verbose", demo->verbose, "Time and changes per pass");
  auto from_partitioned = std::make_shared<bool>(false);
  dcmd->add_flag("--from-partitioned", *from_partitioned,
                 "Start from the same block as XLA's SPMD partitioner leaves it (partitioned "
                 "form, written by hand) instead of the global module");
  auto moe = std::make_shared<bool>(false);
  dcmd->add_flag("--moe", *moe,
                 "Compile the built-in expert-parallel FP8 MoE FFN block instead (dispatch "
                 "all-to-all, FP8 expert matmuls, combine all-to-all; default out dir "
                 "./weave-demo-moe)");
  auto mx = std::make_shared<bool>(false);
  dcmd->add_flag("--mx", *mx,
                 "Compile the built-in MXFP8 MLP block instead (block-scaled FP8 with E8M0 "
                 "scales, windowed with the scales on the ring where the cost gate predicts a "
                 "gain; compute capability 10.0 and b200x8 unless given; numerics verified on a "
                 "scaled copy; default out dir ./weave-demo-mx)");
  dcmd->callback([demo, out_dir, seed, moe, mx, from_partitioned, exit_code, dcmd]() {
    DemoFlags flags;
    flags.out_dir = *out_dir;
    flags.out_dir_given = dcmd->count("--out-dir") != 0;
    flags.seed = *seed;
    flags.moe = *moe;
    flags.mx = *mx;
    flags.from_partitioned = *from_partitioned;
    *exit_code = RunDemo(*demo, flags);
  });
}

}  // namespace weave::tools

