// `weave compile` (compile_driver.h has the pipeline, exit codes and the report).
//
//   weave compile IN.hlo [-o OUT.hlo] [--verify-numerics[=SEED]] [--force] [--report FILE|-]
//                 [--system NAME|FILE] [--require=windowed,fp8-gemm,...] [-v]
//                 [--input-form=global|partitioned] [--num-partitions N]
//                 [--partitioned-output FILE]
//                 [--no-decompose] [--no-handler] [--no-quantize] [--no-dot-merger]
//                 [--no-fp8-gemm] [--no-cleanup] [--disable-passes=a,b]
//                 [--windowed-einsum-threshold-mib=M | --xla_gpu_threshold_for_windowed_einsum_mib=M]
//                 [--windowed-einsum-operand-bytes-threshold=B |
//                  --xla_gpu_operand_bytes_threshold_for_windowed_einsum=B]
//                 [--windowed-einsum-max-ring=R] [--windowed-einsum-duplicate-loops]
//                 [--windowed-einsum-unroll=B | --xla_gpu_multi_streamed_windowed_einsum=B]
//                 [--dot-merger-threshold-mb=M | --xla_gpu_dot_merger_threshold_mb=M]
//                 [--gpu-compute-capability=X.Y] [--<pass-option>=value ...]
//
// The input is a partitioned module (XLA's output after SPMD partitioning) or a global one (as
// JAX emits it: global shapes and sharding annotations), which is partitioned first.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "gpu/compile_pipeline.h"
#include "hlo/parser.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/compile_driver.h"
#include "tools/report.h"

namespace weave::tools {
namespace {

void AddCompileFlags(CLI::App* cmd, CompileOptions* o) {
  cmd->add_flag("--verify-numerics{0}", o->verify_seed,
                "Run the reference and the output on the reference evaluator with the same "
                "inputs (seed SEED, default 0); the reference is the input, or for a global "
                "input the global program on one device; exit 3 if they differ beyond tolerance, 5 if the check "
                "cannot run (module too large without --force, or not evaluable)");
  cmd->add_flag("--force", o->force, "Verify numerics even when the module looks too large");
  cmd->add_option_function<double>(
         "--numerics-memory-gib",
         [o](double gib) {
           // Clamped to 2^60 bytes (a billion GiB: no limit in practice).
           o->numerics_memory_bytes =
               gib >= static_cast<double>(int64_t{1} << 30) ? int64_t{1} << 60
                                                           : static_cast<int64_t>(gib * (1 << 30));
         },
         "Memory limit of --verify-numerics in GiB: a module whose evaluation is estimated above "
         "it is not checked (exit 5) unless --force (default 2)")
      ->check(Positive());
  cmd->add_option("--num-partitions", o->num_partitions,
                  "Global input: the partition count (default: the module's num_partitions, else "
                  "the shardings' device set); partitioned input: the partitions of "
                  "--verify-numerics (default: the module's num_partitions)")
      ->check(Positive());
  cmd->add_option("--input-form", o->input_form,
                  "global|partitioned, when the module does not say which it is (a module with "
                  "shardings only on parameters and root, and no collectives)");
  cmd->add_flag("--xla_enable_enzyme_comms_opt", o->enzyme_comms_opt,
                "Global input: XLA's option of that name for the SPMD partitioner: a "
                "dynamic-update-slice at constant starts along tiled dims moves its update by halo "
                "exchange (default off, as in XLA)");
  cmd->add_option("--rtol", o->rtol,
                  "Relative tolerance of --verify-numerics (default: per output type)")
      ->check(NonNegative());
  cmd->add_option("--atol", o->atol,
                  "Absolute tolerance of --verify-numerics (default: per output type)")
      ->check(NonNegative());
  cmd->add_option("--norm-ulps", o->norm_ulps,
                  "Norm-wise term of --verify-numerics: an element also passes within this many "
                  "ulps of the output type at the output's largest magnitude (default 4; 0 = "
                  "element-wise only)")
      ->check(NonNegative());
  cmd->add_option("--report", o->report, "Write the JSON report to FILE ('-' = stdout)");
  cmd->add_option("--system", o->system,
                  "Add the simulator's estimated time before and after, and the system the cost "
                  "gate estimates on (default h100x8): h100x8, h200x8, b200x8, a100x8, h800x8, a800x8 "
                  "or a system JSON file");
  cmd->add_flag("-v,--verbose", o->verbose, "Time and changes per pass");
  cmd->add_flag("--timing", o->timing,
                "Print to stderr the time of each phase (parse, every pass, verify, analysis, "
                "print) with its instructions per second");
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the report table");
  cmd->add_flag("--verify-each", o->verify_each, "Verify the module after every pass");
}

}  // namespace

void RegisterCompileCommands(CLI::App& app, int* exit_code) {
  // ---- compile ----
  auto opts = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile",
      std::string("Windowed einsum + FP8 pipeline on a partitioned or global module (a global "
                  "one is partitioned first, as by weave partition, and --verify-numerics "
                  "compares with it): ") +
          CompilePipelineSummary());
  cmd->add_option("input", opts->input, "Partitioned or global HLO module ('-' = stdin)")
      ->required();
  cmd->add_option("--partitioned-output", opts->partitioned_output,
                  "Global input: also write the partitioned module (before the windowed einsum "
                  "passes) to FILE");
  cmd->add_option("-o,--output", opts->output, "Where to write the compiled module ('-' = stdout)");
  AddCompileFlags(cmd, opts.get());
  cmd->add_option("--require", opts->require,
                  "Comma list of rewrites that must fire (windowed, fp8-gemm, fp8-wire, cache, "
                  "dot-merger, windowed-in-ring, windowed-ring-rs); exit 4 otherwise");
  cmd->add_flag("--no-decompose", opts->no_decompose, "Skip windowed-einsum-decomposer and block-scaled-windowed-einsum");
  cmd->add_flag("--no-handler", opts->no_handler, "Skip windowed-einsum-handler");
  cmd->add_flag("--no-quantize", opts->no_quantize, "Skip collective-quantizer");
  cmd->add_flag("--no-dot-merger", opts->no_dot_merger, "Skip dot-merger");
  cmd->add_flag("--no-fp8-gemm", opts->no_fp8_gemm, "Skip block-scaling-rewriter and fp8-gemm-rewriter");
  cmd->add_flag("--no-cleanup", opts->no_cleanup,
                "Skip dce, tuple-simplifier and while-loop-dead-tuple-elements");
  cmd->add_option("--disable-passes", opts->disable_passes, "Comma list of passes to skip");
  cmd->add_option("--windowed-einsum-threshold-mib,--xla_gpu_threshold_for_windowed_einsum_mib",
                  opts->threshold_mib,
                  "Decompose only collectives whose gathered operand / dot output (global "
                  "shape) has at least this many MiB (default 0: every match)");
  cmd->add_option(
      "--windowed-einsum-operand-bytes-threshold,"
      "--xla_gpu_operand_bytes_threshold_for_windowed_einsum",
      opts->operand_bytes,
      "Decompose only dots whose two operands (global sizes, FP8 at 1 byte per element) total "
      "at least this many bytes; replaces --windowed-einsum-threshold-mib (XLA PR 18271; "
      "default -1: unset)");
  cmd->add_option("--cost-gate", opts->cost_gate,
                  "on: rewrite a candidate only where the performance model predicts it is "
                  "faster on --system (default h100x8); off: rewrite every match. Default: on, "
                  "unless --windowed-einsum-threshold-mib is given (XLA's byte threshold)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--cost-gate-dump", opts->cost_gate_dump,
                  "Write every region the cost gate estimated, per variant and after the passes, "
                  "to DIR (for weave simulate)");
  cmd->add_option("--windowed-einsum-max-ring", opts->max_ring,
                  "Longest ring to decompose (XLA's max_windowed_einsum_iteration, default 32)");
  cmd->add_flag("--windowed-einsum-duplicate-loops", opts->duplicate_loops,
                "Give every dot on one all-gather its own loop instead of sharing one");
  cmd->add_option("--windowed-einsum-unroll,--xla_gpu_multi_streamed_windowed_einsum",
                  opts->unroll, "Fully unroll windowed loops and give each dot a stream (true)");
  cmd->add_option("--dot-merger-threshold-mb,--xla_gpu_dot_merger_threshold_mb",
                  opts->dot_merger_mb, "dot-merger size limit in MB");
  cmd->add_option("--gpu-compute-capability", opts->compute_capability,
                  "Target GPU for FP8 GEMMs: CUDA compute capability (default 9.0; below 8.9 no "
                  "FP8 GEMM) or a ROCm arch (gfx942: FNUZ FP8, gfx950/gfx12: E4M3FN/E5M2)");
  cmd->allow_extras();
  cmd->callback([opts, cmd, exit_code]() {
    opts->extras = cmd->remaining();
    opts->flag_names.clear();
    for (const CLI::Option* opt : cmd->get_options()) {
      for (const std::string& n : opt->get_lnames()) opts->flag_names.push_back(n);
    }
    if (opts->output == "-" && opts->report == "-") {
      std::cerr << "weave compile: -o - and --report - would both write to stdout; send one of "
                   "them to a file\n";
      *exit_code = kUsage;
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(opts->input);
    if (!module.ok()) {
      std::cerr << "weave compile: " << module.status().message() << "\n";
      *exit_code = kInvalidInput;
      return;
    }
    opts->parse_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CompileReport report;
    std::unique_ptr<HloModule> compiled;
    *exit_code = CompileModule(*opts, std::move(*module), std::cerr, &report, &compiled);
    KeepUntilExit(std::move(compiled));  // the command ends here: no need to free it
  });
}

}  // namespace weave::tools
