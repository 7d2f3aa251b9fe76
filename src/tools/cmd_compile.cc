// `weave compile` and `weave demo` (see commands.h for exit codes).
//
//   weave compile IN.hlo [-o OUT.hlo] [--verify-numerics[=SEED]] [--force] [--report FILE|-]
//                 [--system NAME|FILE] [--require=windowed,fp8-gemm,...] [-v]
//                 [--no-decompose] [--no-handler] [--no-quantize] [--no-dot-merger]
//                 [--no-fp8-gemm] [--no-cleanup] [--disable-passes=a,b]
//                 [--windowed-einsum-threshold-mib=M | --xla_gpu_threshold_for_windowed_einsum_mib=M]
//                 [--windowed-einsum-max-ring=R] [--windowed-einsum-duplicate-loops]
//                 [--windowed-einsum-unroll=B | --xla_gpu_multi_streamed_windowed_einsum=B]
//                 [--dot-merger-threshold-mb=M | --xla_gpu_dot_merger_threshold_mb=M]
//                 [--gpu-compute-capability=X.Y] [--<pass-option>=value ...]
//   weave demo [--out-dir DIR] [--system NAME] [--seed S] [-v]
//
// Pipeline: verify -> windowed-einsum-decomposer -> all-to-all-windowed-einsum ->
// windowed-einsum-handler -> windowed-einsum-consumers-in-ring -> collective-quantizer ->
// dot-merger -> fp8-gemm-rewriter -> cse ->
// dce -> tuple-simplifier ->
// while-loop-dead-tuple-elements -> verify.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "analysis/verifier.h"
#include "eval/evaluator.h"
#include "hlo/parser.h"
#include "passes/pass.h"
#include "sim/cost_gate.h"
#include "sim/simulator.h"
#include "spmd/input_form.h"
#include "spmd/windowed_einsum_decomposer.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/compile_pipeline.h"
#include "tools/demo_module.h"
#include "tools/demo_moe_module.h"
#include "tools/report.h"

namespace weave::tools {
namespace {

constexpr int kOk = 0;
constexpr int kInvalidInput = 1;
constexpr int kUsage = 2;
constexpr int kNumericsMismatch = 3;
constexpr int kRequiredMissing = 4;
// --verify-numerics was given but the check could not run (module too large without --force,
// or the evaluator cannot run the input).
constexpr int kNumericsNotVerified = 5;

// Modules whose evaluation is estimated above this are skipped by --verify-numerics unless
// --force is given.
constexpr int64_t kNumericsMemoryLimit = int64_t{2} << 30;

// The system the cost gate estimates on when --system is not given.
constexpr std::string_view kDefaultGateSystem = "h100x8";

struct Stage {
  const char* pass;
  const char* switch_name;  // the --no-<switch> flag that disables it
};
constexpr Stage kStages[] = {
    {"windowed-einsum-decomposer", "decompose"},
    {"all-to-all-windowed-einsum", "all-to-all"},
    {"windowed-einsum-handler", "handler"},
    {"windowed-einsum-consumers-in-ring", "handler"},
    {"collective-quantizer", "quantize"},
    {"dot-merger", "dot-merger"},
    {"fp8-gemm-rewriter", "fp8-gemm"},
    {"cse", "cleanup"},
    {"dce", "cleanup"},
    {"tuple-simplifier", "cleanup"},
    {"while-loop-dead-tuple-elements", "cleanup"},
};

struct CompileOptions {
  std::string command = "weave compile";  // for messages
  std::string input;
  std::string output;
  std::string report;
  std::string system;
  std::string require;
  std::string verify_seed;  // empty: numerics not requested
  bool force = false;
  bool verbose = false;
  bool quiet = false;
  bool verify_each = false;
  int64_t num_partitions = 0;
  std::optional<double> rtol, atol, norm_ulps;
  bool no_decompose = false, no_handler = false, no_quantize = false, no_dot_merger = false,
       no_fp8_gemm = false, no_cleanup = false;
  std::string disable_passes;
  std::string input_form;  // --input-form=global|partitioned
  std::string threshold_mib, max_ring, unroll, dot_merger_mb, compute_capability;
  // --cost-gate: "" (default: on unless --windowed-einsum-threshold-mib is given), "on", "off".
  std::string cost_gate;
  // weave demo: the numerics record of a scaled copy, reported instead of running the check.
  std::optional<NumericsRecord> numerics_from_copy;
  std::string cost_gate_dump;  // --cost-gate-dump DIR
  // weave demo: instead of the model, replay these decisions (location -> chosen variant).
  std::optional<std::map<std::string, int>> replay_decisions;
  bool duplicate_loops = false;
  std::vector<std::string> extras;
  std::vector<std::string> flag_names;  // long names of the command's own flags (suggestions)
};

int64_t CountInstructions(const HloModule& m) {
  int64_t n = 0;
  for (const HloComputation* c : m.computations()) n += c->instruction_count();
  return n;
}

// Whether the module still needs SPMD partitioning: sharding annotations on non-parameter
// instructions or `Sharding` custom calls, no partitioned collectives, more than one partition.
// On true, *why holds the message.
bool NeedsPartitioning(const HloModule& m, std::string* why) {
  int64_t sharding_calls = 0, annotated = 0, collectives = 0;
  bool tiled = false;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() == HloOpcode::kCustomCall &&
          (i->custom_call_target == "Sharding" ||
           i->custom_call_target == "SPMDFullToShardShape" ||
           i->custom_call_target == "SPMDShardToFullShape")) {
        ++sharding_calls;
      }
      if (i->sharding && i->opcode() != HloOpcode::kParameter && !i->IsRoot()) ++annotated;
      if (i->sharding && i->sharding->kind == HloSharding::Kind::kTiled) tiled = true;
      if (IsCollective(i->opcode())) ++collectives;
    }
  }
  const bool multi = m.num_partitions > 1 || tiled;
  if ((sharding_calls == 0 && annotated == 0) || collectives > 0 || !multi) return false;
  *why = absl::StrFormat(
      "module '%s' still needs SPMD partitioning: it has %d `Sharding`/SPMD custom calls and %d "
      "sharding annotations on non-parameter instructions, no partitioned collectives, and "
      "num_partitions=%d. weave compile takes partitioned modules (XLA's output after SPMD "
      "partitioning, e.g. a dump after the `spmd-partitioning` pass, or modules like "
      "../shared/examples); Weave has no SPMD partitioner yet",
      m.name(), sharding_calls, annotated, m.num_partitions);
  return true;
}

// Builds the pass options from the named flags and the extras.
bool BuildPassOptions(const CompileOptions& o, PassOptions* opts, std::string* error) {
  for (size_t i = 0; i < o.extras.size(); ++i) {
    const std::string& a = o.extras[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      *error = absl::StrCat("unexpected argument '", a,
                            "' (pass options are written --name=value)");
      return false;
    }
    std::string body = a.substr(2);
    size_t eq = body.find('=');
    if (eq == std::string::npos) {
      opts->Set(body, "true");
    } else {
      opts->Set(body.substr(0, eq), body.substr(eq + 1));
    }
  }
  if (!o.threshold_mib.empty()) opts->Set("windowed-einsum-threshold-mib", o.threshold_mib);
  if (!o.max_ring.empty()) opts->Set("windowed-einsum-max-ring", o.max_ring);
  if (o.duplicate_loops) opts->Set("windowed-einsum-duplicate-loops", "true");
  if (!o.unroll.empty()) opts->Set("windowed-einsum-unroll", o.unroll);
  if (!o.dot_merger_mb.empty()) opts->Set("dot-merger-threshold-mb", o.dot_merger_mb);
  if (!o.compute_capability.empty()) opts->Set("gpu-compute-capability", o.compute_capability);
  return true;
}

// The passes to run, after the --no-* switches and --disable-passes.
std::vector<std::string> PipelinePasses(const CompileOptions& o, std::string* error) {
  std::set<std::string> disabled;
  for (absl::string_view p : absl::StrSplit(o.disable_passes, ',', absl::SkipWhitespace())) {
    disabled.insert(std::string(p));
  }
  std::set<std::string> known;
  for (const Stage& s : kStages) known.insert(s.pass);
  for (const std::string& d : disabled) {
    if (!known.count(d)) {
      *error = absl::StrCat("--disable-passes: '", d, "' is not a pass of the compile pipeline (",
                            absl::StrJoin(known, ", "), ")");
      return {};
    }
  }
  std::vector<std::string> out;
  for (const Stage& s : kStages) {
    std::string sw = s.switch_name;
    bool off = disabled.count(s.pass) || (sw == "decompose" && o.no_decompose) ||
               (sw == "handler" && o.no_handler) || (sw == "quantize" && o.no_quantize) ||
               (sw == "dot-merger" && o.no_dot_merger) || (sw == "fp8-gemm" && o.no_fp8_gemm) ||
               (sw == "cleanup" && o.no_cleanup);
    if (!off) out.push_back(s.pass);
  }
  return out;
}

void RunNumerics(const CompileOptions& o, const HloModule& before, const HloModule& after,
                 CompileReport* report) {
  NumericsRecord& n = report->numerics;
  n.requested = true;
  uint64_t seed = 0;
  try {
    seed = std::stoull(o.verify_seed);
  } catch (...) {
    seed = 0;
  }
  n.seed = seed;
  eval::CompareOptions copts;
  copts.eval.num_partitions = o.num_partitions;
  copts.eval.seed = seed;
  copts.rtol = o.rtol;
  copts.atol = o.atol;
  copts.norm_ulps = o.norm_ulps;
  n.num_partitions = eval::ResolvedNumPartitions(before, copts.eval);
  int64_t devices = n.num_partitions * eval::ResolvedReplicaCount(before, copts.eval);
  n.estimated_bytes = std::max(eval::EstimateMemoryBytes(before, devices),
                               eval::EstimateMemoryBytes(after, devices));
  if (n.estimated_bytes > kNumericsMemoryLimit && !o.force) {
    n.skipped = absl::StrFormat(
        "the module is too large to evaluate here: about %s on %s (limit %s); "
        "--force runs it anyway",
        FormatBytes(n.estimated_bytes), CountOf(devices, "device", "devices"), FormatBytes(kNumericsMemoryLimit));
    return;
  }
  copts.eval.max_memory_bytes = o.force ? std::numeric_limits<int64_t>::max()
                                        : kNumericsMemoryLimit;
  absl::StatusOr<eval::CompareReport> cmp = eval::CompareModules(before, after, copts);
  if (!cmp.ok()) {
    std::string msg(cmp.status().message());
    if (msg.rfind("module B", 0) == 0) {
      // The input runs but the output does not: the rewrite produced something unrunnable.
      n.ran = true;
      n.pass = false;
      n.summary = msg;
      n.skipped.clear();
      report->numerics.summary = absl::StrCat("the compiled module could not be evaluated: ", msg);
      return;
    }
    n.skipped = absl::StrCat("the evaluator cannot run the input: ", msg);
    return;
  }
  n.ran = true;
  n.pass = cmp->pass;
  n.summary = cmp->ToString();
  for (const eval::OutputComparison& c : cmp->outputs) {
    n.max_abs_error = std::max(n.max_abs_error, c.max_abs_error);
    n.max_rel_error = std::max(n.max_rel_error, c.max_rel_error);
    n.mismatches += c.mismatches;
  }
}

void RunSimulation(const std::string& system, const HloModule& before, const HloModule& after,
                   CompileReport* report) {
  SimRecord& s = report->sim;
  s.requested = true;
  absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(system);
  if (!spec.ok()) {
    s.system = system;
    s.error = std::string(spec.status().message());
    return;
  }
  s.system = spec->name.empty() ? system : spec->name;
  sim::SimOptions options;
  absl::StatusOr<sim::SimResult> b = sim::SimulateModule(before, *spec, options);
  absl::StatusOr<sim::SimResult> a = sim::SimulateModule(after, *spec, options);
  if (!b.ok() || !a.ok()) {
    s.error = std::string((!b.ok() ? b.status() : a.status()).message());
    return;
  }
  s.ran = true;
  s.before_us = b->total_us;
  s.after_us = a->total_us;
  s.before_exposed_comm_us = b->exposed_comm_us;
  s.after_exposed_comm_us = a->exposed_comm_us;
}

// Runs the whole of `weave compile` on a parsed module. Prints the table (to `table` unless
// quiet) and messages (to stderr), writes the output and the report. Returns the exit code.
int CompileModule(const CompileOptions& o, std::unique_ptr<HloModule> input,
                  std::ostream& table, CompileReport* report,
                  std::unique_ptr<HloModule>* compiled = nullptr) {
  report->input = o.input;
  report->output = o.output;
  report->module = input->name();
  report->num_partitions = o.num_partitions > 0 ? o.num_partitions
                                                : std::max<int64_t>(input->num_partitions, 1);
  if (o.num_partitions <= 0 && !input->has_num_partitions && input->replica_count == 1) {
    const int64_t addressed = DevicesAddressedByCollectives(*input);
    if (addressed > report->num_partitions) {
      report->num_partitions = addressed;
      report->num_partitions_inferred = true;
    }
  }

  std::string error;
  PassOptions options;
  if (!BuildPassOptions(o, &options, &error)) {
    std::cerr << "weave compile: " << error << "\n";
    return kUsage;
  }
  std::vector<std::string> passes = PipelinePasses(o, &error);
  if (!error.empty()) {
    std::cerr << "weave compile: " << error << "\n";
    return kUsage;
  }
  std::vector<std::string> required;  // in the order given
  for (absl::string_view r : absl::StrSplit(o.require, ',', absl::SkipWhitespace())) {
    std::string name(r);
    const auto& known = RewriteNames();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::cerr << "weave compile: --require: unknown rewrite '" << name << "' (known: "
                << absl::StrJoin(known, ", ") << ")\n";
      return kUsage;
    }
    if (std::find(required.begin(), required.end(), name) == required.end()) {
      required.push_back(name);
    }
  }

  // Create the passes first: their factories read the options, and an option that none of
  // them read (and that is no compile flag) is a usage error, reported before any work.
  std::vector<std::pair<std::string, std::unique_ptr<HloPass>>> created;
  for (const std::string& name : passes) {
    absl::StatusOr<std::unique_ptr<HloPass>> pass = PassRegistry::Get().Create(name, options);
    if (!pass.ok()) {
      if (absl::IsNotFound(pass.status())) {
        std::cerr << "weave compile: warning: pass '" << name
                  << "' is not available in this build; skipped\n";
        report->after.notes.push_back(absl::StrCat("pass ", name, " not available: skipped"));
        continue;
      }
      std::cerr << "weave compile: " << name << ": " << pass.status().message() << "\n";
      return kUsage;
    }
    created.emplace_back(name, *std::move(pass));
  }
  {
    // Only the free-form `--key[=value]` arguments are checked: the named flags set option
    // keys too, but those are compile flags even when their pass is switched off.
    std::set<std::string> extra_keys;
    for (const std::string& a : o.extras) {
      extra_keys.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos
                                                                      : a.find('=') - 2));
    }
    std::vector<std::string> unread;
    for (const std::string& k : options.Unread()) {
      if (extra_keys.count(k)) unread.push_back(k);
    }
    if (!unread.empty()) {
      std::vector<std::string> known = KnownPassOptionNames();
      known.insert(known.end(), o.flag_names.begin(), o.flag_names.end());
      std::cerr << "weave compile: "
                << UnknownOptionsMessage(
                       unread, "not a compile flag, and no pass in the pipeline reads it",
                       passes, known)
                << "\n";
      return kUsage;
    }
  }

  if (!o.system.empty()) {
    // Checked up front: a --system that does not load is an error, not a line in the table.
    if (absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(o.system); !spec.ok()) {
      std::cerr << o.command << ": --system: " << spec.status().message() << "\n";
      return absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
    }
  }

  // The cost gate (passes/cost_oracle.h): the performance model decides every candidate on
  // --system (default h100x8), unless --cost-gate=off, or XLA's byte threshold was given
  // explicitly (then that threshold decides, as XLA users expect; --cost-gate=on adds the model).
  std::unique_ptr<CostOracle> oracle;
  const bool gate_on =
      o.cost_gate == "on" || (o.cost_gate.empty() && o.threshold_mib.empty());
  report->cost_gate.mode = gate_on ? "model" : o.threshold_mib.empty() ? "off" : "threshold";
  if (o.replay_decisions) {
    // weave demo's scaled copy: the decisions the gate took on the full-size block, by location.
    const std::map<std::string, int> decisions = *o.replay_decisions;
    oracle = std::make_unique<FunctionCostOracle>(
        [decisions](const CostQuery& q) -> absl::StatusOr<std::vector<double>> {
          auto it = decisions.find(q.location);
          if (it == decisions.end()) {
            return absl::NotFoundError(absl::StrCat("no decision for '", q.location, "' to replay"));
          }
          std::vector<double> us(q.variants.size(), 1.0);
          if (it->second >= 0 && it->second < static_cast<int>(us.size())) {
            us[static_cast<size_t>(it->second)] = 0.0;
          }
          return us;
        },
        "the full-size block's decisions");
    report->cost_gate.mode = "replay";
    report->cost_gate.system = oracle->SystemName();
    for (auto& entry : created) entry.second->set_cost_oracle(oracle.get());
  } else if (gate_on) {
    const std::string name = o.system.empty() ? std::string(kDefaultGateSystem) : o.system;
    absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(name);
    if (!spec.ok()) {
      std::cerr << o.command << ": --system: " << spec.status().message() << "\n";
      return absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
    }
    sim::CostGateConfig config;
    config.system = *spec;
    config.pipeline = passes;
    config.pass_options = options;
    config.dump_dir = o.cost_gate_dump;
    if (!o.cost_gate_dump.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o.cost_gate_dump, ec);
      if (ec) {
        std::cerr << o.command << ": --cost-gate-dump: cannot create " << o.cost_gate_dump << ": "
                  << ec.message() << "\n";
        return kInvalidInput;
      }
    }
    oracle = std::make_unique<sim::SimCostOracle>(std::move(config));
    report->cost_gate.system = oracle->SystemName();
    for (auto& entry : created) entry.second->set_cost_oracle(oracle.get());
  }

  // Input form (spec §0): a global module still needs SPMD partitioning (`weave partition`);
  // one that does not say which it is needs --input-form.
  const spmd::InputFormReport form = spmd::DetectInputForm(*input);
  spmd::InputForm input_form = form.form;
  if (!o.input_form.empty() && !spmd::ParseInputForm(o.input_form, &input_form)) {
    std::cerr << o.command << ": --input-form must be 'global' or 'partitioned', not '"
              << o.input_form << "'\n";
    return kUsage;
  }
  if (input_form == spmd::InputForm::kAmbiguous) {
    std::cerr << "weave compile: " << o.input << ": " << form.Describe() << "\n";
    return kUsage;
  }
  if (input_form == spmd::InputForm::kGlobal) {
    std::string why;
    if (!NeedsPartitioning(*input, &why)) {
      why = absl::StrCat("module '", input->name(), "' is a ", form.Describe(),
                         ": it still needs SPMD partitioning");
    }
    std::cerr << "weave compile: " << o.input << ": " << why
              << "; partition it first: weave partition " << o.input << " -o OUT.hlo\n";
    return kInvalidInput;
  }
  if (absl::Status st = VerifyModule(*input); !st.ok()) {
    std::cerr << "weave compile: " << o.input << ": the input does not verify: " << st.message()
              << "\n";
    return kInvalidInput;
  }

  std::unique_ptr<HloModule> module = input->Clone();
  for (auto& [name, pass] : created) {
    report->pipeline.push_back(name);
    PassRecord rec;
    rec.pass = name;
    rec.instructions_before = CountInstructions(*module);
    size_t first_remark = report->remarks.size();
    pass->set_remarks(&report->remarks);
    auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<bool> changed = pass->Run(module.get());
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!changed.ok()) {
      std::cerr << "weave compile: " << o.input << ": pass " << name << " failed: "
                << changed.status().message() << "\n";
      return kInvalidInput;
    }
    rec.changed = *changed;
    rec.instructions_after = CountInstructions(*module);
    for (size_t k = first_remark; k < report->remarks.size(); ++k) {
      if (report->remarks[k].applied) ++rec.remarks_applied;
      if (report->remarks[k].missed()) ++rec.remarks_missed;
    }
    if (o.verbose) {
      std::cerr << absl::StrFormat(
          "  %-32s %9.3f ms  %-9s instructions %d -> %d  remarks: %d applied, %d missed\n", name,
          rec.seconds * 1e3, rec.changed ? "changed" : "unchanged", rec.instructions_before,
          rec.instructions_after, rec.remarks_applied, rec.remarks_missed);
    }
    report->passes.push_back(rec);
    if (o.verify_each) {
      if (absl::Status st = VerifyModule(*module); !st.ok()) {
        std::cerr << "weave compile: the module does not verify after " << name << ": "
                  << st.message() << "\n";
        return kInvalidInput;
      }
    }
  }
  if (absl::Status st = VerifyModule(*module); !st.ok()) {
    std::cerr << "weave compile: the compiled module does not verify: " << st.message() << "\n";
    return kInvalidInput;
  }

  if (oracle) report->cost_gate.decisions = oracle->decisions();

  std::vector<std::string> pending_notes = report->after.notes;
  AnalyzeCompile(*input, *module, report);
  for (const std::string& n : pending_notes) report->after.notes.push_back(n);

  if (!o.verify_seed.empty()) {
    RunNumerics(o, *input, *module, report);
  } else if (o.numerics_from_copy) {
    report->numerics = *o.numerics_from_copy;
  }
  if (!o.system.empty()) RunSimulation(o.system, *input, *module, report);

  int code = kOk;
  std::vector<std::string> missing;
  for (const std::string& r : required) {
    if (!report->fired[r]) missing.push_back(r);
  }
  if (report->numerics.ran && !report->numerics.pass) {
    code = kNumericsMismatch;
    report->status = "numerics-mismatch";
  } else if (!missing.empty()) {
    code = kRequiredMissing;
    report->status = "required-missing";
  } else if (report->numerics.requested && !report->numerics.ran) {
    code = kNumericsNotVerified;
    report->status = "numerics-not-verified";
  }
  report->exit_code = code;

  if (!o.quiet) {
    table << ReportToTable(*report, o.verbose ? 0 : 20);
    if (report->numerics.ran && !report->numerics.pass) {
      table << report->numerics.summary << "\n";
      if (report->after.fp8_gemms > report->before.fp8_gemms) {
        table << "note: FP8 GEMM custom calls apply both scales to the f32 accumulator, while the "
                 "input rounds each dequantized operand to its wide type first (bf16/f16): "
                 "differences of a few ulps of the output type are expected there; --norm-ulps, "
                 "--atol and --rtol widen the tolerance, --no-fp8-gemm checks the rest of the "
                 "pipeline alone\n";
      }
    }
    table.flush();
  }
  if (!o.report.empty()) {
    std::string json = ReportToJson(*report).dump(2) + "\n";
    if (absl::Status st = WriteFileAtomically(o.report, json); !st.ok()) {
      std::cerr << "weave compile: --report: " << st.message() << "\n";
      return kInvalidInput;
    }
  }
  if (code == kNumericsMismatch) {
    std::cerr << "weave compile: numerics: the compiled module differs from the input beyond "
                 "tolerance; the output was not written\n";
    return code;
  }
  if (code == kRequiredMissing) {
    std::cerr << "weave compile: --require: " << absl::StrJoin(missing, ", ")
              << " did not fire anywhere in " << o.input << ". The output was not written\n";
    for (const std::string& m : missing) {
      std::cerr << "  " << m << ": " << ExplainMissingRewrite(m, report->remarks) << "\n";
    }
    return code;
  }
  if (code == kNumericsNotVerified) {
    std::cerr << "weave compile: --verify-numerics: the numerics could not be verified: "
              << report->numerics.skipped << ". The output was not written\n";
    return code;
  }
  if (!o.output.empty()) {
    if (absl::Status st = WriteFileAtomically(o.output, module->ToString()); !st.ok()) {
      std::cerr << "weave compile: " << st.message() << "\n";
      return kInvalidInput;
    }
  }
  if (compiled) *compiled = std::move(module);
  return kOk;
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
  CompileOptions o = demo;
  o.command = "weave demo";
  o.input = (dir / "input.hlo").string();
  o.output = (dir / "output.hlo").string();
  o.report = (dir / "report.json").string();
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

void AddCompileFlags(CLI::App* cmd, CompileOptions* o) {
  cmd->add_flag("--verify-numerics{0}", o->verify_seed,
                "Run input and output on the reference evaluator with the same inputs (seed "
                "SEED, default 0); exit 3 if they differ beyond tolerance, 5 if the check "
                "cannot run (module too large without --force, or not evaluable)");
  cmd->add_flag("--force", o->force, "Verify numerics even when the module looks too large");
  cmd->add_option("--num-partitions", o->num_partitions,
                  "Partitions for --verify-numerics (default: the module's num_partitions)")
      ->check(Positive());
  cmd->add_option("--input-form", o->input_form,
                  "global|partitioned, when the module does not say which it is (a module with "
                  "shardings only on parameters and root, and no collectives)");
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
                  "gate estimates on (default h100x8): h100x8, h200x8, a100x8, h800x8, a800x8 "
                  "or a system JSON file");
  cmd->add_flag("-v,--verbose", o->verbose, "Time and changes per pass");
  cmd->add_flag("-q,--quiet", o->quiet, "Do not print the report table");
  cmd->add_flag("--verify-each", o->verify_each, "Verify the module after every pass");
}

}  // namespace

std::vector<std::string> CompilePipelinePassNames() {
  std::vector<std::string> names;
  for (const Stage& s : kStages) names.push_back(s.pass);
  return names;
}

void RegisterCompileCommands(CLI::App& app, int* exit_code) {
  // ---- compile ----
  auto opts = std::make_shared<CompileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compile",
      "Windowed einsum + FP8 pipeline on a partitioned module: verify, "
      "windowed-einsum-decomposer, all-to-all-windowed-einsum, windowed-einsum-handler, "
      "collective-quantizer, dot-merger, fp8-gemm-rewriter, cleanup, verify");
  cmd->add_option("input", opts->input, "Partitioned HLO module ('-' = stdin)")->required();
  cmd->add_option("-o,--output", opts->output, "Where to write the compiled module ('-' = stdout)");
  AddCompileFlags(cmd, opts.get());
  cmd->add_option("--require", opts->require,
                  "Comma list of rewrites that must fire (windowed, fp8-gemm, fp8-wire, cache, "
                  "dot-merger, windowed-in-ring, windowed-ring-rs); exit 4 otherwise");
  cmd->add_flag("--no-decompose", opts->no_decompose, "Skip windowed-einsum-decomposer");
  cmd->add_flag("--no-handler", opts->no_handler, "Skip windowed-einsum-handler");
  cmd->add_flag("--no-quantize", opts->no_quantize, "Skip collective-quantizer");
  cmd->add_flag("--no-dot-merger", opts->no_dot_merger, "Skip dot-merger");
  cmd->add_flag("--no-fp8-gemm", opts->no_fp8_gemm, "Skip fp8-gemm-rewriter");
  cmd->add_flag("--no-cleanup", opts->no_cleanup,
                "Skip dce, tuple-simplifier and while-loop-dead-tuple-elements");
  cmd->add_option("--disable-passes", opts->disable_passes, "Comma list of passes to skip");
  cmd->add_option("--windowed-einsum-threshold-mib,--xla_gpu_threshold_for_windowed_einsum_mib",
                  opts->threshold_mib,
                  "Decompose only collectives whose gathered operand / dot output (global "
                  "shape) has at least this many MiB (default 0: every match)");
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
    absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(opts->input);
    if (!module.ok()) {
      std::cerr << "weave compile: " << module.status().message() << "\n";
      *exit_code = kInvalidInput;
      return;
    }
    CompileReport report;
    *exit_code = CompileModule(*opts, std::move(*module), std::cerr, &report);
  });

  // ---- demo ----
  auto demo = std::make_shared<CompileOptions>();
  auto out_dir = std::make_shared<std::string>("weave-demo");
  auto seed = std::make_shared<uint64_t>(0);
  CLI::App* dcmd = app.add_subcommand(
      "demo",
      "Compile the built-in tensor-parallel FP8 transformer block (4 partitions) with the cost "
      "gate, verify its numerics on a scaled copy, print the report and write input.hlo, "
      "output.hlo, report.json and the scaled copy's scaled_input.hlo, scaled_output.hlo");
  dcmd->add_option("--out-dir", *out_dir, "Directory for the files (default ./weave-demo)");
  dcmd->add_option("--seed", *seed, "Seed of the numerics check (default 0)");
  dcmd->add_option("--system", demo->system,
                   "The system the cost gate and the estimated times are for (default h100x8)");
  dcmd->add_flag("-v,--verbose", demo->verbose, "Time and changes per pass");
  auto moe = std::make_shared<bool>(false);
  dcmd->add_flag("--moe", *moe,
                 "Compile the built-in expert-parallel FP8 MoE FFN block instead (dispatch "
                 "all-to-all, FP8 expert matmuls, combine all-to-all; default out dir "
                 "./weave-demo-moe)");
  dcmd->callback([demo, out_dir, seed, moe, exit_code, dcmd]() {
    // Check the arguments before anything is created on disk.
    if (!demo->system.empty()) {
      if (absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(demo->system); !spec.ok()) {
        std::cerr << "weave demo: --system: " << spec.status().message() << "\n";
        *exit_code = absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
        return;
      }
    }
    std::filesystem::path dir(*out_dir);
    if (*moe && dcmd->count("--out-dir") == 0) dir = "weave-demo-moe";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::cerr << "weave demo: cannot create " << dir.string() << ": " << ec.message() << "\n";
      *exit_code = kInvalidInput;
      return;
    }
    if (*moe) {
      *exit_code = RunMoeDemo(*demo, dir, *seed);
      return;
    }
    // The block at two sizes: the full one is compiled with the cost gate (the performance
    // model decides every loop on the system); its numerics are verified on a scaled copy that
    // takes the same decisions (replayed by location) and must fire the same rewrites.
    const DemoSize full = DemoSize::Full(), small = DemoSize::Small();
    const std::string text = DemoModuleText(full), small_text = DemoModuleText(small);
    absl::StatusOr<std::unique_ptr<HloModule>> module =
        ParseHloModule(text, "<weave demo module>");
    absl::StatusOr<std::unique_ptr<HloModule>> small_module =
        ParseHloModule(small_text, "<weave demo module, scaled copy>");
    if (!module.ok() || !small_module.ok()) {
      std::cerr << "weave demo: the built-in module does not parse: "
                << (!module.ok() ? module.status() : small_module.status()).message() << "\n";
      *exit_code = kInvalidInput;
      return;
    }
    CompileOptions o = *demo;
    o.command = "weave demo";
    o.input = (dir / "input.hlo").string();
    o.output = (dir / "output.hlo").string();
    o.report = (dir / "report.json").string();
    o.require = "windowed,fp8-gemm";
    if (o.system.empty()) o.system = std::string(kDefaultGateSystem);
    CompileOptions c = *demo;
    c.command = "weave demo";
    c.input = (dir / "scaled_input.hlo").string();
    c.output = (dir / "scaled_output.hlo").string();
    c.verify_seed = absl::StrCat(*seed);
    c.quiet = true;
    c.system.clear();
    for (const auto& [file, body] : {std::pair<std::string, std::string>{o.input, text},
                                     std::pair<std::string, std::string>{c.input, small_text}}) {
      if (absl::Status st = WriteFileAtomically(file, body); !st.ok()) {
        std::cerr << "weave demo: " << st.message() << "\n";
        *exit_code = kInvalidInput;
        return;
      }
    }
    std::cout << "weave demo: a tensor-parallel FP8 transformer block on 4 partitions "
                 "(Q/K/V share one all-gather, gate/up share one, output and down projections "
                 "reduce-scattered), "
              << full.ToString() << "; every loop decided by the cost gate on " << o.system
              << "\n\n";
    // The gate's decisions on the full block, replayed on the copy.
    CompileOptions probe = o;
    probe.output.clear();
    probe.report.clear();
    probe.require.clear();
    probe.quiet = true;
    probe.system = o.system;
    CompileReport probe_report;
    if (int code = CompileModule(probe, (*module)->Clone(), std::cout, &probe_report);
        code != kOk) {
      *exit_code = code;
      return;
    }
    std::map<std::string, int> decisions;
    for (const CostDecision& d : probe_report.cost_gate.decisions) {
      decisions[d.location] = d.estimate.chosen;
    }
    c.replay_decisions = decisions;
    c.cost_gate.clear();
    CompileReport copy_report;
    const int copy_code = CompileModule(c, std::move(*small_module), std::cout, &copy_report);
    if (copy_code != kOk && copy_code != kNumericsMismatch) {
      std::cerr << "weave demo: the scaled copy (" << small.ToString()
                << ") did not compile (exit " << copy_code << ")\n";
      *exit_code = copy_code;
      return;
    }
    o.numerics_from_copy = copy_report.numerics;
    o.numerics_from_copy->scaled_copy = absl::StrCat(
        small.ToString(), ", compiled with the cost gate's decisions for the full block (",
        copy_report.loops.size(), " windowed loops), files ", c.input, " and ", c.output);
    CompileReport report;
    *exit_code = CompileModule(o, std::move(*module), std::cout, &report);
    // The copy verifies the rewrites the full block got only if it got the same ones.
    auto kinds = [](const CompileReport& r) {
      std::map<std::string, int> k;
      for (const WindowedLoopInfo& l : r.loops) ++k[l.kind];
      return k;
    };
    if (*exit_code == kOk && (kinds(report) != kinds(copy_report) ||
                              report.fired != copy_report.fired)) {
      std::cerr << "weave demo: the scaled copy's rewrites differ from the full block's, so its "
                   "numerics do not verify them\n";
      *exit_code = kNumericsNotVerified;
    }
    std::cout << "\nwrote " << o.input << " (input), "
              << (*exit_code == kOk ? o.output + " (compiled), " : std::string()) << o.report
              << " (report), " << c.input << " and " << c.output << " (the scaled copy)\n";
    if (*exit_code == kOk) {
      std::cout << "try: weave compare " << c.input << " " << c.output
                << " --num-partitions 4; weave simulate " << o.output << " --system " << o.system
                << "\n";
    }
  });
}

}  // namespace weave::tools
