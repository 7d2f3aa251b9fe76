#include "differential.h"

#include <memory>
#include <set>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "analysis/verifier.h"
#include "eval/evaluator.h"
#include "eval/global_compare.h"
#include "hlo/parser.h"
#include "passes/pass.h"
#include "sim/cost_gate.h"
#include "sim/simulator.h"
#include "spmd/input_form.h"
#include "spmd/partition_pipeline.h"
#include "gpu/compile_pipeline.h"
#include "tools/report.h"

namespace weave::fuzz {

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "PASS";
    case Verdict::kMismatch: return "MISMATCH";
    case Verdict::kCrash: return "CRASH";
    case Verdict::kTimeout: return "TIMEOUT";
    case Verdict::kInvalid: return "INVALID";
  }
  return "?";
}

std::optional<Verdict> ParseVerdict(std::string_view name) {
  for (Verdict v : {Verdict::kPass, Verdict::kMismatch, Verdict::kCrash, Verdict::kTimeout,
                    Verdict::kInvalid}) {
    if (VerdictName(v) == name) return v;
  }
  return std::nullopt;
}

std::string CheckResult::Signature() const {
  return absl::StrCat(std::string(VerdictName(verdict)), " ", check);
}

namespace {

// The first `lines` lines of `s`.
std::string Head(const std::string& s, int lines) {
  std::string out;
  int n = 0;
  for (absl::string_view l : absl::StrSplit(s, '\n')) {
    if (n++ >= lines) {
      out += "...\n";
      break;
    }
    absl::StrAppend(&out, l, "\n");
  }
  return out;
}

// The first line where two texts differ, for messages.
std::string FirstDifference(const std::string& a, const std::string& b) {
  std::vector<std::string> la = absl::StrSplit(a, '\n'), lb = absl::StrSplit(b, '\n');
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "<end>";
    const std::string y = i < lb.size() ? lb[i] : "<end>";
    if (x != y) return absl::StrCat("line ", i + 1, ":\n  - ", x, "\n  + ", y);
  }
  return "identical";
}

struct Pipeline {
  std::vector<std::unique_ptr<HloPass>> passes;
  std::vector<std::string> names;
  std::unique_ptr<sim::SimCostOracle> oracle;
};

absl::StatusOr<Pipeline> MakePipeline(const CheckOptions& o,
                                      const std::vector<std::string>& names, bool gate) {
  PassOptions opts;
  for (const auto& [k, v] : o.pass_options) opts.Set(k, v);
  Pipeline p;
  for (const std::string& n : names) {
    auto pass = PassRegistry::Get().Create(n, opts);
    if (!pass.ok()) return pass.status();
    p.passes.push_back(*std::move(pass));
    p.names.push_back(n);
  }
  if (gate && !o.cost_gate_system.empty()) {
    absl::StatusOr<sim::SystemSpec> spec = sim::LoadSystem(o.cost_gate_system);
    if (!spec.ok()) return spec.status();
    sim::CostGateConfig config;
    config.system = *spec;
    config.pipeline = names;
    config.pass_options = opts;
    p.oracle = std::make_unique<sim::SimCostOracle>(std::move(config));
    for (auto& pass : p.passes) pass->set_cost_oracle(p.oracle.get());
  }
  return p;
}

class Checker {
 public:
  Checker(const CheckOptions& o, CheckResult* r) : o_(o), r_(r) {}

  void Run(const std::string& text) {
    Progress("parse");
    auto parsed = ParseHloModule(text, "fuzz.hlo");
    if (!parsed.ok()) return Fail(Verdict::kInvalid, "parse", std::string(parsed.status().message()));
    input_ = *std::move(parsed);
    if (absl::Status st = VerifyModule(*input_); !st.ok()) {
      return Fail(Verdict::kInvalid, "verify", std::string(st.message()));
    }
    if (o_.round_trip && !RoundTrip(*input_, "round-trip:input")) return;
    // 1b. A global module (GSPMD / Shardy shardings): partitioned first, as `weave compile`
    // does, and compared with the global program; the checks below then run on the partitioned
    // module.
    if (spmd::DetectInputForm(*input_).form == spmd::InputForm::kGlobal && !Partition()) return;
    eo_.seed = o_.numerics_seed;
    eo_.num_partitions = eval::ResolvedNumPartitions(*input_, eo_);
    eo_.replica_count = eval::ResolvedReplicaCount(*input_, eo_);
    eo_.max_memory_bytes = int64_t{2} << 30;
    Progress("evaluate input");
    auto in = eval::MakeInputs(*input_, eo_);
    if (!in.ok()) return Fail(Verdict::kInvalid, "evaluate", std::string(in.status().message()));
    inputs_ = *std::move(in);
    auto ra = eval::RunModule(*input_, eo_, &inputs_);
    if (!ra.ok()) return Fail(Verdict::kInvalid, "evaluate", std::string(ra.status().message()));
    reference_ = *std::move(ra);
    {
      eval::CompareOptions co;
      co.eval = eo_;
      auto mag = eval::RingMagnitudes(*input_, eo_, inputs_, co);
      if (!mag.ok()) return Fail(Verdict::kInvalid, "evaluate", std::string(mag.status().message()));
      magnitudes_ = *std::move(mag);
    }

    std::vector<std::string> names =
        o_.pipeline.empty() ? CompilePipelinePassNames() : o_.pipeline;
    // 2. The pipeline, comparing each changed intermediate module.
    auto compiled = RunPipeline(*input_, names, "", o_.after_each_pass, &remarks_, true);
    if (!compiled) return;
    if (!Compare(**compiled, "numerics:pipeline")) return;
    Analyze(**compiled);
    // 3. Each pass alone.
    if (o_.each_pass_alone) {
      for (const std::string& p : names) {
        auto alone = RunPipeline(*input_, {p}, absl::StrCat(":alone"), false, nullptr, false);
        if (!alone) return;
        if (changed_ && !Compare(**alone, absl::StrCat("numerics:alone:", p))) return;
      }
    }
    const std::string out_text = (*compiled)->ToString();
    // 4. Idempotence.
    if (o_.idempotence) {
      auto again = RunPipeline(**compiled, names, ":again", false, nullptr, true);
      if (!again) return;
      const std::string again_text = (*again)->ToString();
      if (again_text != out_text) {
        return Fail(Verdict::kMismatch, "idempotence",
                    absl::StrCat("compiling the output again changes it; first difference at ",
                                 FirstDifference(out_text, again_text)));
      }
    }
    // 5. Round trip of the output.
    if (o_.round_trip && !RoundTrip(**compiled, "round-trip:output")) return;
    // 6. A global input: the compiled module against the global program too.
    if (global_ != nullptr && !CompareGlobal(**compiled, "numerics:global:compiled")) return;
    if (o_.findings_fatal && !r_->findings.empty()) {
      return Fail(Verdict::kMismatch, absl::StrCat("finding:", r_->findings[0].first),
                  r_->findings[0].second);
    }
  }

 private:
  // Partitions the global module input_ (spmd/partition_pipeline.h, verifying after every
  // pass) and compares the result with it (eval/global_compare.h); input_ becomes the
  // partitioned module, global_ the global one. False after a failure.
  bool Partition() {
    Progress("partition");
    global_ = std::move(input_);
    const spmd::InputFormReport form = spmd::DetectInputForm(*global_);
    auto n = spmd::ResolvePartitionCount(*global_, form, 0);
    if (!n.ok()) {
      Fail(Verdict::kInvalid, "partition-count", std::string(n.status().message()));
      return false;
    }
    input_ = global_->Clone();
    spmd::PartitionOptions po;
    po.num_partitions = *n;
    po.verify_each = true;
    // Half the programs (by their module name, so a saved program replays the same way) run
    // with XLA's xla_enable_enzyme_comms_opt: a dynamic-update-slice spanning tiles then moves
    // its update by halo exchange instead of gathering.
    uint32_t name_hash = 2166136261u;
    for (char ch : global_->name()) name_hash = (name_hash ^ static_cast<uint8_t>(ch)) * 16777619u;
    po.enzyme_comms_opt = (name_hash & 1) != 0;
    if (absl::Status st = spmd::PartitionModule(input_.get(), po, &remarks_); !st.ok()) {
      Fail(Verdict::kCrash, "error:partition",
           absl::StrCat("the SPMD pipeline failed on a valid global module: ", st.message()));
      return false;
    }
    if (absl::Status st = VerifyModule(*input_); !st.ok()) {
      Fail(Verdict::kCrash, "verify-after:partition",
           absl::StrCat("the partitioned module does not verify: ", st.message()));
      return false;
    }
    partitioned_ = input_.get();
    if (!CompareGlobal(*input_, "numerics:global:partitioned")) return false;
    return !o_.round_trip || RoundTrip(*input_, "round-trip:partitioned");
  }

  bool CompareGlobal(const HloModule& partitioned, const std::string& check) {
    Progress(absl::StrCat("compare ", check));
    eval::CompareOptions co;
    co.eval.seed = o_.numerics_seed;
    co.eval.max_memory_bytes = int64_t{2} << 30;
    // The compiled module's windowed loops sum each device's partial products in its own ring
    // order: its copies of a tile agree within tolerance, not bit for bit.
    auto report = eval::CompareGlobalWithPartitioned(*global_, partitioned, co,
                                                     /*exact_copies=*/&partitioned == partitioned_);
    if (!report.ok()) {
      Fail(Verdict::kMismatch, check, std::string(report.status().message()));
      return false;
    }
    for (const auto& c : report->compare.outputs) {
      r_->max_rel_error = std::max(r_->max_rel_error, c.max_rel_error);
    }
    if (!report->pass) {
      Fail(Verdict::kMismatch, check, Head(report->ToString(), 12));
      return false;
    }
    return true;
  }

  void Progress(const std::string& what) {
    if (o_.progress) o_.progress(what);
  }

  void Fail(Verdict v, std::string check, std::string detail) {
    if (r_->verdict != Verdict::kPass) return;
    r_->verdict = v;
    r_->check = std::move(check);
    r_->detail = std::move(detail);
  }

  bool RoundTrip(const HloModule& m, const std::string& check) {
    Progress(check);
    const std::string p1 = m.ToString();
    auto m2 = ParseHloModule(p1, "printed.hlo");
    if (!m2.ok()) {
      Fail(Verdict::kMismatch, check,
           absl::StrCat("the printed module does not parse: ", m2.status().message()));
      return false;
    }
    if (absl::Status st = VerifyModule(**m2); !st.ok()) {
      Fail(Verdict::kMismatch, check,
           absl::StrCat("the printed module parses but does not verify: ", st.message()));
      return false;
    }
    const std::string p2 = (*m2)->ToString();
    if (p1 != p2) {
      Fail(Verdict::kMismatch, check,
           absl::StrCat("print(parse(print(m))) != print(m) at ", FirstDifference(p1, p2)));
      return false;
    }
    return true;
  }

  // Runs `names` on a clone of `m`, verifying after each pass; with `compare_each`, compares each
  // changed intermediate with the input. Sets changed_. nullopt after a failure.
  std::optional<std::unique_ptr<HloModule>> RunPipeline(const HloModule& m,
                                                        const std::vector<std::string>& names,
                                                        const std::string& tag,
                                                        bool compare_each,
                                                        std::vector<Remark>* remarks, bool gate) {
    auto pipeline = MakePipeline(o_, names, gate);
    if (!pipeline.ok()) {
      Fail(Verdict::kInvalid, "pipeline", std::string(pipeline.status().message()));
      return std::nullopt;
    }
    std::unique_ptr<HloModule> module = m.Clone();
    changed_ = false;
    for (size_t i = 0; i < pipeline->passes.size(); ++i) {
      HloPass& pass = *pipeline->passes[i];
      const std::string& name = pipeline->names[i];
      Progress(absl::StrCat("pass ", name, tag));
      std::vector<Remark> local;
      pass.set_remarks(remarks != nullptr ? remarks : &local);
      auto changed = pass.Run(module.get());
      if (!changed.ok()) {
        Fail(Verdict::kCrash, absl::StrCat("error:", name),
             absl::StrCat("pass ", name, tag, " failed on a valid module: ", changed.status().message()));
        return std::nullopt;
      }
      if (absl::Status st = VerifyModule(*module); !st.ok()) {
        Fail(Verdict::kCrash, absl::StrCat("verify-after:", name),
             absl::StrCat("the module does not verify after ", name, tag, ": ", st.message()));
        return std::nullopt;
      }
      changed_ |= *changed;
      if (compare_each && *changed && i + 1 < pipeline->passes.size() &&
          !Compare(*module, absl::StrCat("numerics:after:", name))) {
        return std::nullopt;
      }
    }
    return module;
  }

  bool Compare(const HloModule& b, const std::string& check) {
    Progress(absl::StrCat("compare ", check));
    auto rb = eval::RunModule(b, eo_, &inputs_);
    if (!rb.ok()) {
      Fail(Verdict::kMismatch, check,
           absl::StrCat("the rewritten module cannot be evaluated: ", rb.status().message()));
      return false;
    }
    eval::CompareOptions co;
    co.eval = eo_;
    auto report = eval::CompareResults(*input_, reference_, b, *rb, co,
                                       magnitudes_.outputs.empty() ? nullptr : &magnitudes_);
    if (!report.ok()) {
      Fail(Verdict::kMismatch, check, std::string(report.status().message()));
      return false;
    }
    for (const auto& c : report->outputs) r_->max_rel_error = std::max(r_->max_rel_error, c.max_rel_error);
    if (!report->pass) {
      std::string failing;
      for (const auto& c : report->outputs) {
        if (c.pass) continue;
        absl::StrAppend(&failing, "  output ", c.output, " partition ", c.device, " ", c.shape,
                        ": ", c.mismatches, "/", c.elements, " mismatches, max_abs_err=",
                        c.max_abs_error, " max_rel_err=", c.max_rel_error, " (rtol=", c.rtol,
                        " atol=", c.atol, " norm_atol=", c.norm_atol, ")\n");
      }
      Fail(Verdict::kMismatch, check, Head(failing, 8));
      return false;
    }
    return true;
  }

  void Analyze(const HloModule& out) {
    tools::CompileReport report;
    report.remarks = remarks_;
    tools::AnalyzeCompile(*input_, out, &report);
    r_->fired = report.fired;
    if (global_ != nullptr) r_->fired["partitioned"] = true;
    r_->windowed_loops = static_cast<int64_t>(report.loops.size());
    bool shift = false;
    for (const Remark& rm : remarks_) {
      if (rm.applied && rm.pass == "windowed-einsum-handler" &&
          absl::StrContains(rm.message, "FP8 dequantization shifted")) {
        shift = true;
      }
    }
    r_->fired["fp8-shift"] = shift;
    bool wide_cache = false;
    for (const Remark& rm : remarks_) {
      wide_cache |= rm.applied && rm.pass == "windowed-einsum-handler" &&
                    absl::StrContains(rm.message, "wide activation cache added");
    }
    r_->fired["wide-cache"] = wide_cache;
    bool a2a = false;
    for (const Remark& rm : remarks_) a2a |= rm.applied && rm.pass == "all-to-all-windowed-einsum";
    r_->fired["a2a-window"] = a2a;
    // Known bug 1: a dot left "for the handler's cache" whose all-gather stays in the output.
    static const std::regex kDeferred("all-gather '([^']+)' already feeds windowed loop");
    for (const Remark& rm : remarks_) {
      std::smatch m;
      if (rm.pass != "windowed-einsum-decomposer" || rm.applied) continue;
      if (!std::regex_search(rm.message, m, kDeferred)) continue;
      const std::string ag = m[1];
      for (const HloComputation* c : out.computations()) {
        const HloInstruction* i = c->GetInstruction(ag);
        if (i != nullptr && (i->opcode() == HloOpcode::kAllGather ||
                             i->opcode() == HloOpcode::kAllGatherStart ||
                             i->opcode() == HloOpcode::kAllGatherDone)) {
          r_->findings.emplace_back("deferred-uncached",
                                    absl::StrCat("dot '", rm.location, "' was left for the cache of a loop, but all-gather '",
                                                 ag, "' is still in the output"));
        }
      }
    }
    // Which decomposer rewrite made each loop (for the known-bug tags below).
    static const std::regex kMade("(AG|RS) loop '([^']+)'");
    std::map<std::string, std::string> made;  // loop name -> decomposer remark
    for (const Remark& rm : remarks_) {
      std::smatch m;
      if (rm.pass == "windowed-einsum-decomposer" && rm.applied &&
          std::regex_search(rm.message, m, kMade)) {
        made[m[2]] = rm.message;
      }
    }
    // Loops the decomposer made that the handler does not recognise. Known bugs 2 (two-partition
    // reduce-scatter loops) and 3 (reduce-scatter loops over a batch dim) get their own names.
    std::set<std::string> unrecognised;
    for (const Remark& rm : remarks_) {
      if (rm.pass != "windowed-einsum-handler" || !rm.missed() || !made.count(rm.location) ||
          !absl::StrContains(rm.message, "not a windowed einsum loop")) {
        continue;
      }
      const std::string& why = made[rm.location];
      std::string name = "loop-not-recognised";
      if (absl::StrContains(why, "RS loop") && absl::StrContains(why, "sliced on batch dims")) {
        name = "loop-not-recognised:rs-batch";
      } else if (absl::StrContains(why, "RS loop") && absl::StrContains(why, " of 2 partitions")) {
        name = "loop-not-recognised:rs-ring-2";
      }
      unrecognised.insert(rm.location);
      r_->findings.emplace_back(name, absl::StrCat("the handler does not recognise loop '", rm.location,
                                                   "' made by the decomposer: ", rm.message));
    }
    for (const tools::WindowedLoopInfo& l : report.loops) {
      if (l.trip_count != 1 && !unrecognised.count(l.name)) {
        r_->findings.emplace_back(
            "loop-not-unrolled",
            absl::StrCat(l.kind, " loop '", l.name, "' (N=", l.ring_size, ", layout ", l.layout,
                         ") still runs ", l.trip_count, " trips"));
      }
      if (l.layout == "unrecognised" && !unrecognised.count(l.name)) {
        r_->findings.emplace_back("layout-unrecognised",
                                  absl::StrCat(l.kind, " loop '", l.name, "' (", l.fp8_gemms,
                                               " FP8 GEMMs): report layout 'unrecognised'"));
      }
    }
  }

  const CheckOptions& o_;
  CheckResult* r_;
  std::unique_ptr<HloModule> input_;
  std::unique_ptr<HloModule> global_;  // a global input (input_ is then its partitioned module)
  const HloModule* partitioned_ = nullptr;
  eval::EvalOptions eo_;
  eval::Inputs inputs_;
  eval::EvalResult reference_;
  eval::EvalResult magnitudes_;  // the ring magnitude run of the input
  std::vector<Remark> remarks_;
  bool changed_ = false;
};

}  // namespace

CheckResult CheckModuleText(const std::string& text, const CheckOptions& options) {
  CheckResult r;
  Checker c(options, &r);
  c.Run(text);
  return r;
}

}  // namespace weave::fuzz
