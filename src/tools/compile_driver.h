// The driver of `weave compile` (and of `weave demo`, which compiles built-in modules with it).
//
// CompileModule runs, on a parsed module:
//   input form (spmd/input_form.h: global | partitioned | unsharded; ambiguous -> exit 2) ->
//   [global only: the SPMD pipeline of `weave partition` (compile_input.h): sharding-import,
//    spmd-prepare, sharding-propagation, spmd-partitioner, cleanup; CustomSPMDPartitioning
//    calls are declined by name, exit 1] ->
//   verify -> the compile pipeline (gpu/compile_pipeline.h, defined there once, less the stages
//   the --no-* switches and --disable-passes turn off) -> verify,
// then the report (tools/report.h), --verify-numerics (compile_numerics.h: against the global
// program on one device when the input was global, against the input otherwise), the
// simulator's estimate (--system) and --require.
//
// Exit codes (commands.h): 0 written; 1 invalid input (parse/verify errors, declined
// constructs); 2 usage; 3 numerics mismatch; 4 a required rewrite did not fire; 5 numerics not
// verified. On any non-zero exit the output file is not written.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "hlo/ir.h"
#include "tools/report.h"

namespace weave::tools {

constexpr int kOk = 0;
constexpr int kInvalidInput = 1;
constexpr int kUsage = 2;
constexpr int kNumericsMismatch = 3;
constexpr int kRequiredMissing = 4;
// --verify-numerics was given but the check could not run (module too large without --force,
// or the evaluator cannot run the input).
constexpr int kNumericsNotVerified = 5;

// Modules whose evaluation is estimated above this (bytes) are skipped by --verify-numerics
// unless --force is given; --numerics-memory-gib sets another limit.
constexpr int64_t kNumericsMemoryLimit = int64_t{2} << 30;

// The system the cost gate estimates on when --system is not given.
constexpr std::string_view kDefaultGateSystem = "h100x8";

// The key of a replayed cost-gate decision: the asking pass and the remark location.
inline std::string ReplayKey(const std::string& pass, const std::string& location) {
  return pass + "/" + location;
}

struct CompileOptions {
  std::string command = "weave compile";  // for messages
  std::string input;
  std::string output;
  std::string report;
  std::string system;
  std::string require;
  std::string verify_seed;  // empty: numerics not requested
  bool force = false;
  // --numerics-memory-gib: the evaluator's memory limit of --verify-numerics, bytes
  // (kNumericsMemoryLimit by default).
  int64_t numerics_memory_bytes = kNumericsMemoryLimit;
  bool verbose = false;
  // --timing: each phase's time and instructions per second on stderr (parse, partitioning of a
  // global input, every pass, the final verify, the report's analysis, print, total).
  bool timing = false;
  double parse_seconds = -1;  // set by the command when it timed the parse (else not printed)
  bool quiet = false;
  bool verify_each = false;
  // Global input: XLA's xla_enable_enzyme_comms_opt for the SPMD partitioner (spmd_partitioner.h).
  bool enzyme_comms_opt = false;
  // Global input: the partition count (must agree with the header's num_partitions).
  // Partitioned input: the partitions of the numerics check.
  int64_t num_partitions = 0;
  std::optional<double> rtol, atol, norm_ulps;
  bool no_decompose = false, no_handler = false, no_quantize = false, no_dot_merger = false,
       no_fp8_gemm = false, no_cleanup = false;
  std::string disable_passes;
  std::string input_form;  // --input-form=global|partitioned
  std::string threshold_mib, operand_bytes, max_ring, unroll, dot_merger_mb, compute_capability;
  // --cost-gate: "" (default: on unless --windowed-einsum-threshold-mib is given), "on", "off".
  std::string cost_gate;
  // --partitioned-output FILE: where to write the partitioned module of a global input (before
  // the windowed einsum passes).
  std::string partitioned_output;
  // weave demo: the numerics record of a scaled copy, reported instead of running the check.
  std::optional<NumericsRecord> numerics_from_copy;
  std::string cost_gate_dump;  // --cost-gate-dump DIR
  // weave demo: instead of the model, replay these decisions (ReplayKey(pass, location) ->
  // chosen variant; one loop may be asked about by several passes).
  std::optional<std::map<std::string, int>> replay_decisions;
  bool duplicate_loops = false;
  std::vector<std::string> extras;
  std::vector<std::string> flag_names;  // long names of the command's own flags (suggestions)
};

// Instructions over every computation of `m`.
int64_t CountInstructions(const HloModule& m);

// Runs the whole of `weave compile` on a parsed module. Prints the table (to `table` unless
// quiet) and messages (to stderr), writes the output and the report. Returns the exit code.
// `compiled` (optional) receives the compiled module on success.
int CompileModule(const CompileOptions& o, std::unique_ptr<HloModule> input, std::ostream& table,
                  CompileReport* report, std::unique_ptr<HloModule>* compiled = nullptr);

}  // namespace weave::tools
