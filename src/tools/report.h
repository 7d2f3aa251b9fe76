// The report of `weave compile` / `weave demo`: what the pipeline changed in a partitioned module,
// what it is worth in bytes on the wire and FLOPs, and why collectives were left alone.
//
// Vocabulary is XLA's: a *windowed loop* is a `while` whose body (with its callees) holds
// `collective-permute`s and GEMMs (`dot` or cuBLAS custom calls), i.e. a windowed einsum /
// collective matmul loop as XLA's SPMD partitioner emits it
// (../shared/specs/spmd-windowed-einsum.md §2-3).
//
// Bytes are "bytes one partition sends over its links", counted per executed collective with
// XLA's ring algorithms, G = size of the collective's replica group:
//   all-gather        (G-1) x operand bytes         (each step forwards one shard)
//   reduce-scatter    (G-1) x result bytes          ((G-1)/G of the unreduced operand)
//   all-reduce        2 (G-1)/G x operand bytes     (reduce-scatter + all-gather)
//   all-to-all        (G-1)/G x operand bytes       (everything except the own block)
//   collective-permute operand bytes                (one transfer; 0 if no pair has a source)
//   collective-broadcast (G-1)/G x operand bytes
// Collectives inside a `while` count trip-count times (sim::WhileTripCount; unknown = 1, noted),
// conditionals count their costlier branch, calls/fusions/async wrappers count once. The `-done`
// halves of async pairs count nothing.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hlo/ir.h"
#include "nlohmann/json.hpp"
#include "passes/cost_oracle.h"
#include "passes/pass.h"

namespace weave::tools {

// Totals for one module (per partition).
struct ModuleSummary {
  int64_t instructions = 0;       // over every computation
  int64_t bytes_sent = 0;         // bytes one partition sends, all collectives, loops expanded
  // bytes_sent split by collective opcode name ("all-gather", "collective-permute", ...; the
  // -start forms are counted under their base name) and by element type name ("bf16", ...).
  std::map<std::string, int64_t> bytes_by_collective;
  std::map<std::string, int64_t> bytes_by_type;
  // Static count of collective instructions by base opcode name (not loop-expanded).
  std::map<std::string, int64_t> collectives;
  double flops = 0;               // dot + GEMM custom-call FLOPs per partition (2*M*N*K), loops
                                  // expanded
  double fp8_flops = 0;           // the part of `flops` done by FP8 GEMM custom calls
  int64_t dots = 0;               // static count of `dot` instructions
  int64_t fp8_gemms = 0;          // static count of `__cublas$lt$matmul$f8` custom calls
  int64_t windowed_loops = 0;     // static count of windowed loops
  std::vector<std::string> notes; // assumptions (unknown trip counts, ...)
};

// Computes the summary of `module`. `num_partitions` is used for collectives with empty
// replica_groups (0 = the module's num_partitions).
ModuleSummary SummarizeModule(const HloModule& module, int64_t num_partitions = 0);

// Bytes one partition sends for one execution of collective `instr` (see the file comment);
// 0 for non-collectives and `-done` ops. `default_group` is the group size used for empty
// replica_groups.
int64_t CollectiveBytesSent(const HloInstruction& instr, int64_t default_group);

// FLOPs of one execution of a `dot` (2 x output elements x contracted size) or of a cuBLAS GEMM
// custom call (`__cublas$lt$matmul$f8`, `__cublas$lt$matmul`, `__cublas$gemm`: contracting dims
// from backend_config's gemm_backend_config, falling back to lhs dim 1); 0 otherwise.
double GemmFlops(const HloInstruction& instr);

// True for a custom call to the FP8 cuBLASLt GEMM (or a block-scaled GEMM on FP8 data: JAX's
// "__op$block_scaled_dot" or XLA's "__cudnn$blockScaledDot"). Any cuBLAS GEMM: IsCublasGemmCall
// (hlo/gemm_call.h).
bool IsFp8GemmCustomCall(const HloInstruction& instr);
// True for a block-scaled GEMM call (hlo/block_scaled_call.h), FP8 or FP4 data.
bool IsBlockScaledGemm(const HloInstruction& instr);

// One windowed loop found in a module.
struct WindowedLoopInfo {
  std::string name;              // the while instruction
  std::string body;              // its body computation
  std::string kind;              // "all-gather", "reduce-scatter"
  int64_t ring_size = 0;         // partitions in the ring (0 if not determined)
  int64_t trip_count = -1;       // iterations (-1 unknown)
  bool unrolled = false;         // more than one GEMM per iteration
  std::string layout;            // "unrolled-by-2", "rolled", "fully-unrolled", ... (matcher's)
  int64_t cache_index = -1;      // tuple index of the all-gather cache (-1: none / unknown)
  std::string wire_type;         // element type(s) the collective-permutes carry, e.g. "f8e4m3fn"
  int64_t permutes = 0;          // collective-permutes executed per run of the loop
  int64_t dots = 0;              // GEMMs (dot + custom-call) in the body and its callees
  int64_t fp8_gemms = 0;         // of which FP8 GEMM custom calls
  int64_t cache_consumers = 0;   // GEMMs outside the loop that read its all-gather cache
                                 // (through get-tuple-element(cache_index), or any array element
                                 // >= 5 when the matcher did not name one)
  int64_t cache_consumers_fp8 = 0;  // of which FP8 GEMM custom calls
  int64_t bytes_sent = 0;        // bytes one partition sends in one run of the loop
  // kind "all-to-all" (all-to-all windowed einsum, windowed_einsum/all_to_all_windowed_einsum.h): the number
  // of chunks (each one all-to-all and one partial GEMM; 0 for while loops); layout is
  // "all-to-all->dot" (rewrite A) or "dot->all-to-all" (rewrite B), ring_size the group size,
  // trip_count 1, name the add that sums the chunks.
  int64_t chunks = 0;
};

// Finds the windowed loops of a module, in post order, then its all-to-all windows.
std::vector<WindowedLoopInfo> FindWindowedLoops(const HloModule& module);

// The all-to-all windowed einsums of a module (report_all_to_all.cc), as windowed loops of kind
// "all-to-all"; `default_group` sizes collectives with empty replica groups.
std::vector<WindowedLoopInfo> FindAllToAllWindowLoops(const HloModule& module,
                                                      int64_t default_group);
// The chunk all-to-alls of those windows (not "left alone").
std::set<const HloInstruction*> AllToAllWindowExchanges(const HloModule& module);

// A collective of the output that no rewrite took, and why.
struct LeftAlone {
  std::string name;
  std::string opcode;
  std::string shape;
  int64_t bytes_sent = 0;  // per execution
  std::string reason;      // the pass remark that declined it, or a structural reason
  // When the SPMD partitioner emitted it for a reshard: "at 'x': {from} -> {to}: kinds, about N
  // bytes received per device", x the instruction whose value, or whose operand, was resharded
  // (the reshard's analysis remark, which names the collectives it emitted in Remark::about);
  // empty otherwise.
  std::string reshard;
};

// Collectives of `module` outside windowed loops (async pairs listed once, by their -start), each
// with the reason from the remarks of a pass that considered it (ReasonFromRemarks), or a
// structural reason when no pass did (StructuralReason).
std::vector<LeftAlone> FindCollectivesLeftAlone(const HloModule& module,
                                                const std::vector<Remark>& remarks);

// report_reasons.cc. The reason a collective was left alone, from the missed remarks located at it
// (or at the -done of its async pair) or naming it in Remark::about, never from a remark about a
// neighbour: the decomposer's decision first, then the handler's, then the decomposer's deferral
// to the handler's cache, then the collective quantizer's, then any other pass's. "" when no pass
// considered it.
std::string ReasonFromRemarks(const HloInstruction& collective, const std::vector<Remark>& remarks);
// A structural reason for a collective no pass considered (`base`: "all-gather", ...): what reads
// it, what feeds it.
std::string StructuralReason(const HloInstruction& collective, const std::string& base);
// For `compile --require`: the missed remark ("pass: location: [missed] message") that best
// explains why `rewrite` (a RewriteNames() entry) fired nowhere, or a sentence saying there was
// no candidate.
std::string ExplainMissingRewrite(const std::string& rewrite, const std::vector<Remark>& remarks);

// Per pass of the pipeline (for -v and the report).
struct PassRecord {
  std::string pass;
  double seconds = 0;
  bool changed = false;
  int64_t instructions_before = 0, instructions_after = 0;
  int64_t remarks_applied = 0, remarks_missed = 0;
};

// The result of checking numerics.
struct NumericsRecord {
  bool requested = false;
  bool ran = false;
  bool pass = false;
  uint64_t seed = 0;
  int64_t num_partitions = 0;
  int64_t estimated_bytes = 0;
  std::string skipped;   // why it did not run (too large, evaluator error), empty if it ran
  std::string summary;   // the comparison table
  double max_abs_error = 0, max_rel_error = 0;
  int64_t mismatches = 0;
  // Set when the check ran on a scaled copy of the module (weave demo): what was verified.
  std::string scaled_copy;
  // What the compiled module was compared with: "the input" (a partitioned input, on the same
  // partitions) or "the global module on 1 device" (a global input: the program as written).
  std::string reference;
  // Outputs compared otherwise than value for value with one reassembled array: "output 0:
  // random: depends on rng 'r'; compared on shape ...", "output 1: manual: ...".
  std::vector<std::string> notes;
};

// report_numerics.cc: the `numerics` JSON object and the table's "Numerics:" line.
nlohmann::json NumericsToJson(const NumericsRecord& numerics);
std::string NumericsToTable(const NumericsRecord& numerics);

struct SimRecord {
  bool requested = false;
  bool ran = false;
  std::string system;   // name and origin
  std::string error;
  double before_us = 0, after_us = 0;
  double before_exposed_comm_us = 0, after_exposed_comm_us = 0;
};

// report_numerics.cc: the `simulation` JSON object and the table's estimated-time rows.
nlohmann::json SimToJson(const SimRecord& sim);
std::string SimToTable(const SimRecord& sim);

// The cost gate of `weave compile` (passes/cost_oracle.h, sim/cost_gate.h): how candidates were
// decided, and every decision with its estimates.
struct CostGateRecord {
  // "model" (the performance model decides each candidate), "threshold" (XLA's byte threshold:
  // --windowed-einsum-threshold-mib was given), "off" (--cost-gate=off: every match).
  std::string mode = "off";
  std::string system;                   // the system estimated on ("h100x8"), when mode=model
  std::vector<CostDecision> decisions;  // in the order the passes asked
};
// JSON object `cost_gate` and the table's "Cost gate" section (report_cost_gate.cc).
nlohmann::json CostGateToJson(const CostGateRecord& gate);
std::string CostGateToTable(const CostGateRecord& gate, int max_rows);

struct CompileReport {
  std::string input;
  std::string output;
  std::string module;
  int64_t num_partitions = 1;
  // The header has no num_partitions and num_partitions above is the device count its
  // use_global_device_ids collectives address (DevicesAddressedByCollectives).
  bool num_partitions_inferred = false;
  // The input form (spmd/input_form.h): "global", "partitioned" or "unsharded"; empty when not
  // decided. A global input was partitioned by Weave's SPMD pipeline first
  // (partitioned_from_global); `before` then describes the partitioned module.
  std::string input_form;
  bool partitioned_from_global = false;
  std::vector<std::string> pipeline;   // passes run, in order
  std::vector<PassRecord> passes;
  ModuleSummary before, after;
  std::vector<WindowedLoopInfo> loops;
  std::vector<LeftAlone> left_alone;
  std::vector<Remark> remarks;
  NumericsRecord numerics;
  SimRecord sim;
  CostGateRecord cost_gate;
  // Which rewrites fired anywhere: "windowed" (a windowed loop exists in the output that the
  // pipeline created or changed), "fp8-gemm" (an FP8 GEMM custom call was formed), "fp8-wire"
  // (a collective carries FP8 that carried a wider type before), "cache" (a GEMM reads a loop's
  // all-gather cache), "dot-merger" (dots were merged), "windowed-in-ring" (the consumers of an all-gather
  // compute inside its loop), "windowed-ring-rs" (a reduce-scatter loop in the ring layout).
  std::map<std::string, bool> fired;
  // FP8 GEMM calls that took epilogues in (fp8-gemm-rewriter's applied remarks), and the HBM
  // bytes the folds save per execution of those calls: each call's wide result, which a separate
  // epilogue kernel would write and read back (2 x elements x bytes of the dot's type).
  int64_t epilogue_gemms = 0;
  int64_t epilogue_bytes_saved = 0;
  std::string status = "ok";           // "ok", "numerics-mismatch", "required-missing", ...
  int exit_code = 0;
};

// report.cc; the pieces of the report are in report_summary.cc, report_loops.cc,
// report_reasons.cc, report_all_to_all.cc, report_cost_gate.cc, report_numerics.cc,
// report_json.cc and report_table.cc.
// The known names for `--require` (keys of CompileReport::fired).
const std::vector<std::string>& RewriteNames();

// Fills loops, left_alone, before/after and fired from the two modules and the remarks.
void AnalyzeCompile(const HloModule& before, const HloModule& after, CompileReport* report);

// The same in two halves, so that a compile need not keep a copy of its input for the report:
// AnalyzeCompileInput fills report->before from the module the pipeline starts from (with
// report->num_partitions already set) and returns what the second half needs of it;
// AnalyzeCompileOutput fills the rest from the compiled module and the remarks. Together they give
// exactly what AnalyzeCompile gives.
struct CompileInputAnalysis {
  int64_t cache_consumers = 0;  // all-gathers served by an activation cache, in the input's loops
};
CompileInputAnalysis AnalyzeCompileInput(const HloModule& before, CompileReport* report);
void AnalyzeCompileOutput(const CompileInputAnalysis& before, const HloModule& after,
                          CompileReport* report);

// The JSON object of the report (stable field names; see README "The report"; report_json.cc).
nlohmann::json ReportToJson(const CompileReport& report);
// The readable table (what `weave compile` prints on stderr; report_table.cc). `max_rows` limits the collectives
// left alone and the remarks listed (0 = all).
std::string ReportToTable(const CompileReport& report, int max_rows = 20);

// "12.0 KiB (12288 B)" style formatting of a byte count.
std::string FormatBytes(int64_t bytes);

}  // namespace weave::tools
