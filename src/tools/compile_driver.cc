// The driver of `weave compile` (see compile_driver.h).
#include "tools/compile_driver.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "analysis/verifier.h"
#include "gpu/compile_pipeline.h"
#include "passes/pass.h"
#include "sim/cost_gate.h"
#include "sim/simulator.h"
#include "windowed_einsum/windowed_einsum_decomposer.h"
#include "tools/cli_util.h"
#include "tools/compile_input.h"
#include "tools/compile_numerics.h"
#include "tools/report.h"

namespace weave::tools {
namespace {

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
  if (!o.operand_bytes.empty()) {
    opts->Set("windowed-einsum-operand-bytes-threshold", o.operand_bytes);
  }
  if (!o.max_ring.empty()) opts->Set("windowed-einsum-max-ring", o.max_ring);
  if (o.duplicate_loops) opts->Set("windowed-einsum-duplicate-loops", "true");
  if (!o.unroll.empty()) opts->Set("windowed-einsum-unroll", o.unroll);
  if (!o.dot_merger_mb.empty()) opts->Set("dot-merger-threshold-mb", o.dot_merger_mb);
  if (!o.compute_capability.empty()) opts->Set("gpu-compute-capability", o.compute_capability);
  return true;
}

// The passes to run, after the --no-* switches and --disable-passes (gpu/compile_pipeline.h).
std::vector<std::string> PipelinePasses(const CompileOptions& o, std::string* error) {
  std::set<std::string> off_passes;
  for (absl::string_view p : absl::StrSplit(o.disable_passes, ',', absl::SkipWhitespace())) {
    off_passes.insert(std::string(p));
  }
  std::set<std::string> off_groups;
  if (o.no_decompose) off_groups.insert("decompose");
  if (o.no_handler) off_groups.insert("handler");
  if (o.no_quantize) off_groups.insert("quantize");
  if (o.no_dot_merger) off_groups.insert("dot-merger");
  if (o.no_fp8_gemm) off_groups.insert("fp8-gemm");
  if (o.no_cleanup) off_groups.insert("cleanup");
  absl::StatusOr<std::vector<std::string>> passes = CompilePipelinePassNames(off_groups, off_passes);
  if (!passes.ok()) {
    *error = absl::StrCat("--disable-passes: ", passes.status().message());
    return {};
  }
  return *std::move(passes);
}

}  // namespace

int64_t CountInstructions(const HloModule& m) {
  int64_t n = 0;
  for (const HloComputation* c : m.computations()) n += c->instruction_count();
  return n;
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One `--timing` line: the phase, its time, the instructions it worked on and their rate.
void PrintTiming(const std::string& phase, double seconds, int64_t instructions) {
  std::cerr << absl::StrFormat("timing: %-34s %10.3f ms  %8d instructions  %12.0f instructions/s\n",
                               phase, seconds * 1e3, instructions,
                               seconds > 0 ? static_cast<double>(instructions) / seconds : 0.0);
}

}  // namespace

namespace {

// What one compile runs: the pass options, the pipeline (gpu/compile_pipeline.h, after the
// switches) with its passes created, the rewrites --require names, and the cost gate.
struct CompilePlan {
  PassOptions options;
  std::vector<std::string> passes;    // the pipeline's names after the switches
  std::vector<std::string> required;  // --require, in the order given
  std::unique_ptr<HloPassPipeline> pipeline;  // the passes created from `passes`
  std::unique_ptr<CostOracle> oracle;
};

// Stage 1: the options, the passes and --require; a usage error (kUsage, message printed) for an
// unknown pass, option, rewrite or --system.
int Configure(const CompileOptions& o, CompileReport* report, CompilePlan* plan) {
  std::string error;
  if (!BuildPassOptions(o, &plan->options, &error)) {
    std::cerr << "weave compile: " << error << "\n";
    return kUsage;
  }
  plan->passes = PipelinePasses(o, &error);
  if (!error.empty()) {
    std::cerr << "weave compile: " << error << "\n";
    return kUsage;
  }
  for (absl::string_view r : absl::StrSplit(o.require, ',', absl::SkipWhitespace())) {
    std::string name(r);
    const auto& known = RewriteNames();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::cerr << "weave compile: --require: unknown rewrite '" << name << "' (known: "
                << absl::StrJoin(known, ", ") << ")\n";
      return kUsage;
    }
    if (std::find(plan->required.begin(), plan->required.end(), name) == plan->required.end()) {
      plan->required.push_back(name);
    }
  }
  // Create the passes first: their factories read the options, and an option that none of
  // them read (and that is no compile flag) is a usage error, reported before any work.
  std::vector<std::string> unavailable;
  absl::StatusOr<std::unique_ptr<HloPassPipeline>> pipeline =
      MakeCompilePipeline(plan->passes, plan->options, &unavailable);
  for (const std::string& name : unavailable) {
    std::cerr << "weave compile: warning: pass '" << name
              << "' is not available in this build; skipped\n";
    report->after.notes.push_back(absl::StrCat("pass ", name, " not available: skipped"));
  }
  if (!pipeline.ok()) {
    std::cerr << "weave compile: " << pipeline.status().message() << "\n";
    return kUsage;
  }
  plan->pipeline = *std::move(pipeline);
  // Only the free-form `--key[=value]` arguments are checked: the named flags set option keys
  // too, but those are compile flags even when their pass is switched off.
  std::set<std::string> extra_keys;
  for (const std::string& a : o.extras) {
    extra_keys.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos
                                                                    : a.find('=') - 2));
  }
  std::vector<std::string> unread;
  for (const std::string& k : plan->options.Unread()) {
    if (extra_keys.count(k)) unread.push_back(k);
  }
  if (!unread.empty()) {
    std::vector<std::string> known = KnownPassOptionNames();
    known.insert(known.end(), o.flag_names.begin(), o.flag_names.end());
    std::cerr << "weave compile: "
              << UnknownOptionsMessage(unread,
                                       "not a compile flag, and no pass in the pipeline reads it",
                                       plan->passes, known)
              << "\n";
    return kUsage;
  }
  if (!o.system.empty()) {
    // Checked up front: a --system that does not load is an error, not a line in the table.
    if (absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(o.system); !spec.ok()) {
      std::cerr << o.command << ": --system: " << spec.status().message() << "\n";
      return absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
    }
  }
  return kOk;
}

// Stage 2: the cost gate (passes/cost_oracle.h). The performance model decides every candidate
// on --system (default h100x8), unless --cost-gate=off, or XLA's byte threshold was given
// explicitly (then that threshold decides, as XLA users expect; --cost-gate=on adds the model);
// weave demo's scaled copy replays the full-size block's decisions.
int AttachCostGate(const CompileOptions& o, CompileReport* report, CompilePlan* plan) {
  // XLA's operand-bytes threshold is an explicit byte threshold too, unless it is -1 (unset).
  const bool xla_threshold =
      !o.threshold_mib.empty() || (!o.operand_bytes.empty() && o.operand_bytes != "-1");
  const bool gate_on = o.cost_gate == "on" || (o.cost_gate.empty() && !xla_threshold);
  report->cost_gate.mode = gate_on ? "model" : !xla_threshold ? "off" : "threshold";
  if (o.replay_decisions) {
    // weave demo's scaled copy: the decisions the gate took on the full-size block, by location.
    const std::map<std::string, int> decisions = *o.replay_decisions;
    plan->oracle = std::make_unique<FunctionCostOracle>(
        [decisions](const CostQuery& q) -> absl::StatusOr<std::vector<double>> {
          auto it = decisions.find(ReplayKey(q.pass, q.location));
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
  } else if (gate_on) {
    const std::string name = o.system.empty() ? std::string(kDefaultGateSystem) : o.system;
    absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(name);
    if (!spec.ok()) {
      std::cerr << o.command << ": --system: " << spec.status().message() << "\n";
      return absl::IsNotFound(spec.status()) ? kUsage : kInvalidInput;
    }
    sim::CostGateConfig config;
    config.system = *spec;
    config.pipeline = plan->pipeline->pass_names();
    config.pass_options = plan->options;
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
    plan->oracle = std::make_unique<sim::SimCostOracle>(std::move(config));
  }
  if (plan->oracle) {
    report->cost_gate.system = plan->oracle->SystemName();
    plan->pipeline->set_cost_oracle(plan->oracle.get());
  }
  return kOk;
}

// Stage 3: the pipeline on `module`, each pass recorded in the report (and printed with -v and
// --timing), then the final verify. kInvalidInput (message printed) when a pass fails or the
// module does not verify.
int RunPasses(const CompileOptions& o, CompilePlan* plan, HloModule* module,
              CompileReport* report) {
  PassRecord rec;
  size_t first_remark = 0;
  PassHooks hooks;
  hooks.before = [&](const HloPass& pass, const HloModule& m) {
    report->pipeline.emplace_back(pass.name());
    rec = PassRecord();
    rec.pass = std::string(pass.name());
    rec.instructions_before = CountInstructions(m);
    first_remark = report->remarks.size();
  };
  hooks.after = [&](const HloPass&, const HloModule& m, const PassTiming& timing) {
    rec.seconds = timing.seconds;
    rec.changed = timing.changed;
    rec.instructions_after = CountInstructions(m);
    for (size_t k = first_remark; k < report->remarks.size(); ++k) {
      if (report->remarks[k].applied) ++rec.remarks_applied;
      if (report->remarks[k].missed()) ++rec.remarks_missed;
    }
    if (o.verbose) {
      std::cerr << absl::StrFormat(
          "  %-32s %9.3f ms  %-9s instructions %d -> %d  remarks: %d applied, %d missed\n",
          rec.pass, rec.seconds * 1e3, rec.changed ? "changed" : "unchanged",
          rec.instructions_before, rec.instructions_after, rec.remarks_applied,
          rec.remarks_missed);
    }
    if (o.timing) PrintTiming(rec.pass, rec.seconds, rec.instructions_before);
    report->passes.push_back(rec);
  };
  plan->pipeline->set_hooks(std::move(hooks));
  plan->pipeline->set_remarks(&report->remarks);
  plan->pipeline->set_verify_each(o.verify_each);
  if (absl::StatusOr<bool> changed = plan->pipeline->Run(module); !changed.ok()) {
    std::cerr << "weave compile: " << o.input << ": " << changed.status().message() << "\n";
    return kInvalidInput;
  }
  const int64_t compiled_instructions = o.timing ? CountInstructions(*module) : 0;
  const auto t_verify = std::chrono::steady_clock::now();
  if (absl::Status st = VerifyModule(*module); !st.ok()) {
    std::cerr << "weave compile: the compiled module does not verify: " << st.message() << "\n";
    return kInvalidInput;
  }
  if (o.timing) PrintTiming("verify", SecondsSince(t_verify), compiled_instructions);
  return kOk;
}

// Stage 5: the exit code from the numerics and --require, the table and the JSON report, and the
// message of a failed compile (the output is then not written).
int Conclude(const CompileOptions& o, const std::vector<std::string>& required,
             CompileReport* report, std::ostream& table) {
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
  } else if (code == kRequiredMissing) {
    std::cerr << "weave compile: --require: " << absl::StrJoin(missing, ", ")
              << " did not fire anywhere in " << o.input << ". The output was not written\n";
    for (const std::string& m : missing) {
      std::cerr << "  " << m << ": " << ExplainMissingRewrite(m, report->remarks) << "\n";
    }
  } else if (code == kNumericsNotVerified) {
    std::cerr << "weave compile: --verify-numerics: the numerics could not be verified: "
              << report->numerics.skipped << ". The output was not written\n";
  }
  return code;
}

}  // namespace

int CompileModule(const CompileOptions& o, std::unique_ptr<HloModule> given,
                  std::ostream& table, CompileReport* report,
                  std::unique_ptr<HloModule>* compiled) {
  const auto t_start = std::chrono::steady_clock::now();
  if (o.timing && o.parse_seconds >= 0) {
    PrintTiming("parse", o.parse_seconds, CountInstructions(*given));
  }
  report->input = o.input;
  report->output = o.output;
  report->module = given->name();

  CompilePlan plan;
  if (int code = Configure(o, report, &plan); code != kOk) return code;
  if (int code = AttachCostGate(o, report, &plan); code != kOk) return code;

  // Stage 4: the input. A global module is partitioned first (compile_input.h, spec §0); the
  // windowed einsum pipeline starts from the partitioned module.
  CompileInput prepared;
  const int64_t given_instructions = o.timing ? CountInstructions(*given) : 0;
  const auto t_prepare = std::chrono::steady_clock::now();
  if (int code = PrepareCompileInput(o, std::move(given), report, &prepared); code != kOk) {
    return code;
  }
  if (o.timing) PrintTiming("input (verify, partition)", SecondsSince(t_prepare), given_instructions);
  const HloModule* global = prepared.global.get();
  std::unique_ptr<HloModule> input = std::move(prepared.partitioned);
  report->num_partitions = prepared.from_global || o.num_partitions <= 0
                               ? std::max<int64_t>(input->num_partitions, 1)
                               : o.num_partitions;
  if (!prepared.from_global && o.num_partitions <= 0 && !input->has_num_partitions &&
      input->replica_count == 1) {
    const int64_t addressed = DevicesAddressedByCollectives(*input);
    if (addressed > report->num_partitions) {
      report->num_partitions = addressed;
      report->num_partitions_inferred = true;
    }
  }

  // The report's view of the input is taken now, so that the pipeline can run on the input
  // itself: a copy is kept only for the numerics and the simulation, which run both modules.
  const auto t_analyze_input = std::chrono::steady_clock::now();
  const CompileInputAnalysis input_analysis = AnalyzeCompileInput(*input, report);
  const double analyze_input_seconds = SecondsSince(t_analyze_input);
  const bool keep_input = !o.verify_seed.empty() || !o.system.empty();
  std::unique_ptr<HloModule> module = keep_input ? input->Clone() : std::move(input);
  if (int code = RunPasses(o, &plan, module.get(), report); code != kOk) return code;
  const int64_t compiled_instructions = o.timing ? CountInstructions(*module) : 0;

  // The verified module's text is made on a second thread while this one analyses it (the
  // report, the numerics, the simulation): all only read it. The one state a read may write, a
  // computation's kept post order (HloComputation::MakeInstructionPostOrder), is made here
  // first, so that the threads only copy it. The text is written out at the end, only if the
  // compile succeeds; a return before that waits for the thread (the future's destructor) and
  // drops the text.
  double print_seconds = 0;
  std::future<std::string> printed;
  if (!o.output.empty()) {
    for (const HloComputation* c : module->computations()) c->MakeInstructionPostOrder();
    printed = std::async(std::launch::async, [m = module.get(), &print_seconds] {
      const auto t_print = std::chrono::steady_clock::now();
      std::string text = m->ToString();
      print_seconds = SecondsSince(t_print);
      return text;
    });
  }

  if (plan.oracle) report->cost_gate.decisions = plan.oracle->decisions();

  std::vector<std::string> pending_notes = report->after.notes;
  const auto t_analyze = std::chrono::steady_clock::now();
  AnalyzeCompileOutput(input_analysis, *module, report);
  if (o.timing) {
    PrintTiming("analysis (report)", analyze_input_seconds + SecondsSince(t_analyze),
                compiled_instructions);
  }
  for (const std::string& n : pending_notes) report->after.notes.push_back(n);

  if (!o.verify_seed.empty()) {
    RunNumerics(o, global, *input, *module, report);
  } else if (o.numerics_from_copy) {
    report->numerics = *o.numerics_from_copy;
  }
  if (!o.system.empty()) RunSimulation(o.system, *input, *module, report);

  if (int code = Conclude(o, plan.required, report, table); code != kOk) return code;
  if (!o.output.empty()) {
    const auto t_wait = std::chrono::steady_clock::now();
    std::string text = printed.get();
    if (o.timing) {
      PrintTiming("print (beside the analysis)", print_seconds, compiled_instructions);
      PrintTiming("print: waited for", SecondsSince(t_wait), compiled_instructions);
    }
    if (absl::Status st = WriteFileAtomically(o.output, text); !st.ok()) {
      std::cerr << "weave compile: " << st.message() << "\n";
      return kInvalidInput;
    }
  }
  if (o.timing) {
    const double parse = std::max(o.parse_seconds, 0.0);
    PrintTiming("total (parse to output written)", parse + SecondsSince(t_start),
                given_instructions);
  }
  if (compiled) *compiled = std::move(module);
  return kOk;
}

}  // namespace weave::tools
