// Weave's performance model: estimates the execution time of one partition of a partitioned HLO
// module on a GPU system (H100/H200/A100/H800/A800 x8), before and after windowed-einsum rewrites.
//
// Facts, formulas and the published measurements it is calibrated against (rows C1-C5):
// ../shared/specs/performance-model.md; `weave simulate --calibration` prints the comparison
// (calibration.h). The model, in short:
//  - GEMMs (`dot`, cuBLAS custom calls `__cublas$lt$matmul$f8`, `__cublas$lt$matmul`,
//    `__cublas$gemm`, fusions holding a dot) are cut into output tiles (tile_m x tile_n); one tile
//    takes tau = 2 tile_m tile_n K / (peak / SMs x efficiency) on one SM. A GEMM alone runs its
//    full waves of tiles on every SM, then its last partial wave of r tiles on r SMs for one more
//    tau: alone it takes ceil(tiles / SMs) tau (wave quantization), and its last wave leaves
//    SMs idle that a concurrent kernel may use. Each phase also moves its share of the GEMM's
//    bytes (operands, result, and the accumulator it adds into) over HBM: a phase takes at least
//    its bytes / (HBM bandwidth x hbm_efficiency) (the roofline's memory floor; this is why a
//    GEMM chunked to small M re-reads its weights and loses). A fixed overhead is added per GEMM.
//    The "roofline" GEMM model (gemm.tiled=false) is the closed form of performance-model.md
//    instead: FLOPs / (peak x efficiency), no waves, no memory floor, no overhead.
//  - Every other instruction costs the bytes it reads and writes over HBM, except the loop glue
//    XLA folds away: an `add` of a GEMM's result (its only use) into an accumulator is folded into
//    the GEMM's epilogue (beta = 1: the GEMM reads the accumulator instead), a broadcast of a
//    constant feeding only such adds is free (beta = 0), and a dynamic-update-slice writes its
//    update in place (update bytes read and written). Fusion instructions already in the module
//    are costed as one kernel; nothing else is fused.
//  - Collectives use ring algorithms over the per-direction link bandwidth x link efficiency, plus
//    a latency per ring step: all-gather / reduce-scatter move (N-1)/N of the full data in N-1
//    steps, all-reduce twice that, collective-permute one transfer of its operand in one step;
//    all-to-all moves (N-1)/N of its operand in ONE step (G-1 concurrent point-to-point
//    transfers, as NCCL does it: sim/all_to_all_cost.h).
//  - A list scheduler runs the dependency graph on a main compute stream, one compute stream per
//    distinct backend_config `operation_queue_id`, and one communication stream. Each stream runs
//    one kernel at a time. Concurrent compute kernels share the GPU in *issue order*: the kernel
//    that started first takes the SMs and HBM bandwidth it can use, later ones get what is left
//    (so a GEMM that fills the SMs runs at full rate, and a kernel issued behind it runs in its
//    last wave). While a collective runs, compute gets 1 / (1 + contention) of the GPU, where the
//    contention depends on how the system moves data (`collective_engine`: "sm" for NCCL's
//    SM-driven kernels, "copy_engine" for copy-engine transfers). Among a stream's ready kernels
//    `force_earliest_schedule` ones issue first, then the one on the longest remaining path
//    (critical path), then program order. `wait_on_operation_queues` waits for the latest work
//    issued (in program order) on those queues.
//  - while loops are expanded trip-count times (backend_config known_trip_count, or the counter
//    pattern of the condition), conditionals take their costlier branch, calls are inlined.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"
#include "hlo/types.h"

namespace weave::sim {

// Parameters of the GEMM efficiency model (JSON object "gemm" of a system file).
struct GemmModel {
  // Fraction of the datasheet peak a large, well-tiled GEMM reaches (0 < e <= 1).
  double efficiency = 0.75;
  // Whether wave quantization and tile padding apply ("tiled" model); false = roofline
  // FLOPs / (peak x efficiency) only.
  bool tiled = true;
  // Output tile (tile_m x tile_n elements) and k-block (tile_k) of one work unit.
  int64_t tile_m = 128, tile_n = 128, tile_k = 64;
  // Fixed cost added to every GEMM (launch and pipeline ramp), microseconds.
  double overhead_us = 1.0;
};

// One GPU system: per-GPU figures of an N-GPU node. All rates are dense, per GPU.
struct SystemSpec {
  std::string name;         // e.g. "h100x8"
  std::string description;  // free text
  std::string source;       // datasheet references
  std::string origin;       // "built-in systems/h100x8.json" or the file path it was read from
  int64_t num_gpus = 8;
  int64_t sm_count = 132;
  // Dense matrix-multiply peak, TFLOP/s (1e12 FLOP/s). f32 is the TF32 tensor-core rate (XLA's
  // default precision on Ampere and later); fp8_tflops == 0 means no FP8 tensor cores (FP8 GEMMs
  // then run at the f16 rate, as XLA converts their operands to f16).
  double bf16_tflops = 0, f16_tflops = 0, f32_tflops = 0, fp8_tflops = 0, f64_tflops = 0;
  // FP4 (f4e2m1fn, NVFP4 / MXFP4) tensor-core peak; 0: none, FP4 GEMMs run at the fp8 rate (the
  // f16 rate without FP8). FP6 and block-scaled MXFP8 GEMMs run at the fp8 rate (Blackwell's
  // datasheets give FP6 = FP8).
  double fp4_tflops = 0;
  double hbm_gbps = 0;         // HBM bandwidth, GB/s (1e9 bytes/s)
  double link_gbps = 0;        // NVLink bandwidth per direction per GPU, GB/s
  double latency_us = 0;       // latency per collective ring step, microseconds
  double link_efficiency = 1;  // fraction of link bandwidth collectives reach (0 < e <= 1)
  double hbm_efficiency = 1;   // fraction of HBM bandwidth kernels reach (0 < e <= 1)
  // How collectives move data: "sm" (NCCL kernels on the SMs) or "copy_engine".
  std::string collective_engine = "sm";
  // Compute slowdown while communication runs, per engine (JSON "contention": {"sm": x,
  // "copy_engine": y}, or one number for both): compute gets 1 / (1 + c) of the GPU.
  double contention_sm = 0, contention_copy_engine = 0;
  // The value in effect: contention_sm or contention_copy_engine by collective_engine (or the
  // --contention override).
  double contention = 0;
  GemmModel gemm;
  // Where each constant comes from (JSON "sources": key -> text, e.g. "hbm_gbps" -> the
  // datasheet line), for the built-in systems every key of the file.
  std::map<std::string, std::string> sources;
  std::string json;  // the JSON text the spec was parsed from (after overrides)

  // Dense GEMM peak for operands of type `t` in TFLOP/s (fp8 types -> fp8 rate, or f16 rate
  // when the system has no FP8; integer types -> bf16 rate).
  double MatmulTflops(PrimitiveType t) const;
  // One-line summary of every value used (for the CLI output).
  std::string Summary() const;
};

// Names of the built-in systems ("a100x8", "a800x8", "b200x8", "h100x8", "h200x8", "h800x8").
std::vector<std::string> BuiltinSystemNames();
// JSON text of a built-in system (identical to systems/<name>.json in the repository), or
// nullopt for an unknown name.
std::optional<std::string_view> BuiltinSystemJson(std::string_view name);
// Parses a system file's JSON. `origin` is recorded in SystemSpec::origin. InvalidArgument on
// malformed JSON, missing or non-positive required values.
absl::StatusOr<SystemSpec> ParseSystemJson(std::string_view json_text, std::string_view origin);
// A built-in name (embedded in the binary, works from any directory) or a path to a JSON file.
// NotFound for an unknown name / missing file, InvalidArgument for a bad file.
absl::StatusOr<SystemSpec> LoadSystem(std::string_view name_or_path);
// Overrides one value by its JSON path with dots, e.g. "hbm_gbps=3000",
// "matmul_tflops.bf16=900", "gemm.tiled=false". The value is parsed as JSON (numbers, true/false),
// else taken as a string. InvalidArgument for an unknown key or a value of the wrong kind.
absl::StatusOr<SystemSpec> OverrideSystemValue(const SystemSpec& spec, std::string_view assignment);

// Overrides on top of the system file (the CLI flags).
struct SimOptions {
  std::optional<double> gemm_efficiency;  // --gemm-efficiency
  std::optional<double> link_efficiency;  // --link-efficiency
  std::optional<double> hbm_efficiency;   // --hbm-efficiency
  std::optional<double> latency_us;       // --latency-us
  std::optional<double> contention;       // --contention
  std::optional<bool> gemm_tiled;         // --gemm-model=tiled|roofline
  // Every GEMM of less than one wave (fewer output tiles than SMs: it leaves SMs idle that only
  // a concurrent kernel could use) runs on the main compute stream, whatever its
  // operation_queue_id: such GEMMs run one after another while collectives still overlap them,
  // the structure of PyTorch's async TP that row C3 measured at small M. The cost gate's
  // conservative bound for windowed einsum loops (cost_gate.h); `weave simulate
  // --serial-sub-wave-gemms`.
  bool serial_sub_wave_gemms = false;
  // Record per-instruction trace events (needed for --trace; costs memory on big modules).
  bool record_trace = false;
  // Upper bound on the instructions executed after expanding loops (ResourceExhausted beyond).
  int64_t max_tasks = 5'000'000;
};

// Applies the options to a system (validating ranges). InvalidArgument on out-of-range values.
absl::StatusOr<SystemSpec> ApplySimOptions(const SystemSpec& spec, const SimOptions& options);

// Per windowed loop (a while whose body, with its callees, holds collective-permutes and GEMMs).
struct WindowedLoopReport {
  std::string name;          // the while instruction's name
  std::string body;          // body computation name
  int64_t instances = 0;     // times the while ran (more than 1 inside an outer loop)
  int64_t trip_count = 0;    // iterations per instance
  int64_t ring_size = 0;     // N: partitions in the permute ring
  int64_t num_permutes = 0;  // collective-permutes executed per instance
  double t_gemm_us = 0;      // per ring step: the loop's GEMM time / N
  double t_comm_us = 0;      // per ring step: mean collective-permute time
  double simulated_us = 0;   // span of the loop in the schedule (summed over instances)
  double ideal_us = 0;       // t_gemm + (N-1) max(t_gemm, t_comm) (summed over instances)
  double ratio = 0;          // simulated / ideal
};

// One span on one stream (Chrome trace "X" event).
struct TraceEvent {
  std::string name;      // instruction name
  std::string category;  // "gemm", "memory", "collective"
  int32_t stream = 0;    // index into SimResult::stream_names
  double start_us = 0, duration_us = 0;
};

struct SimResult {
  double total_us = 0;         // makespan of the entry computation
  double compute_us = 0;       // sum of compute kernel times at full speed (GEMMs + memory ops)
  double gemm_us = 0;          // the GEMM part of compute_us
  double comm_us = 0;          // sum of collective times
  double exposed_comm_us = 0;  // wall time with communication running and no compute running
  int64_t num_tasks = 0;       // instructions executed (after loop expansion)
  std::vector<WindowedLoopReport> loops;
  std::vector<std::string> stream_names;  // "compute", "compute:queue3", "comm"
  std::vector<TraceEvent> trace;          // when SimOptions::record_trace
  std::vector<std::string> warnings;      // assumptions made (unknown trip counts, ...)
  SystemSpec system;                      // the values used (options applied)
};

// Simulates one partition of `module` on `system` with `options` applied.
// InvalidArgument for a module the model cannot interpret (e.g. a while with no trip count is
// assumed to run once, with a warning, rather than failing); ResourceExhausted when loop
// expansion exceeds options.max_tasks.
absl::StatusOr<SimResult> SimulateModule(const HloModule& module, const SystemSpec& system,
                                         const SimOptions& options);

// ---- Cost functions (exposed for tests and for other tools) ----
// GEMM time alone on the GPU in microseconds for batch x [m,k] x [k,n] with operands of type
// `t` moving `bytes` over HBM (0: no memory floor): the tiled phases above, summed.
double GemmTimeUs(const SystemSpec& s, PrimitiveType t, int64_t batch, int64_t m, int64_t n,
                  int64_t k, double bytes = 0);
// Time of a memory-bound kernel moving `bytes` (read + written) at hbm_gbps x hbm_efficiency,
// microseconds.
double MemoryTimeUs(const SystemSpec& s, double bytes);
// Ring collective time in microseconds. `bytes` is the full (gathered / unreduced) data for
// all-gather, reduce-scatter and all-reduce, the operand for all-to-all and collective-permute;
// `group_size` is N.
double CollectiveTimeUs(const SystemSpec& s, HloOpcode op, double bytes, int64_t group_size);
// Trip count of a while loop (known_trip_count in backend_config, or the condition's
// compare(gte(param, i), constant) with constant init and add-by-constant step); nullopt if
// unknown.
std::optional<int64_t> WhileTripCount(const HloInstruction& while_instr);

// ---- Output ----
std::string SimResultToText(const SimResult& r);
std::string SimResultToJson(const SimResult& r);  // fields include total_us, compute_us, ...
// Chrome trace event format (JSON object with "traceEvents"), one track (tid) per stream.
std::string SimResultToChromeTrace(const SimResult& r);

}  // namespace weave::sim
