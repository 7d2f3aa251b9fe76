// weave-fuzz: the differential testing driver of issue 14.
//
//   weave-fuzz run --seeds A:B [--jobs J] [--timeout S] [--out DIR] [--findings-fatal]
//                  [--summary FILE.json] [--allow=check,...] [--quick] [-v]
//                  [--mutant NAME --expect-failure] [--pass-option KEY=VALUE ...]
//       generates the program of every seed in [A, B), checks it (differential.h) in a child
//       process, prints one line per non-PASS seed (every seed with -v) and a summary: seeds
//       per verdict, per failed check, per rewrite fired, per finding. Exit 0 when every seed
//       passed (or failed only checks named by --allow), 1 otherwise. Failing programs are
//       written to DIR/seed-<n>.hlo. With --mutant, a deliberately wrong pass replaces a stage
//       (mutants.h); --expect-failure stops at the first numerics MISMATCH and exits 0, or 1
//       when the run ends without one (the mutation check).
//   weave-fuzz print SEED           the program of SEED (HLO text) on stdout
//   weave-fuzz check FILE.hlo       the checks on a module file; prints the verdict; exit 0 on
//                                   PASS, 1 otherwise
//   weave-fuzz corpus --seeds A:B DIR    writes each seed's decisions as libFuzzer input bytes
//                                        (the pipeline fuzzer's seed corpus)
//   weave-fuzz reduce (--seed S | FILE.hlo) -o OUT.hlo [--timeout S]
//       shrinks a failing program while it fails the same way (reducer.h)
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "campaign.h"
#include "differential.h"
#include "hlo_text_mutator.h"
#include "run_check.h"
#include "gpu/compile_pipeline.h"
#include "nlohmann/json.hpp"
#include "program_gen.h"
#include "mutants.h"
#include "reducer.h"

namespace weave::fuzz {
namespace {

struct Stats {
  int64_t seeds = 0;
  std::map<std::string, int64_t> verdicts, checks, fired, findings, finding_seeds, motifs;
  double seconds = 0;
};

// The contents of `path`, or nullopt after "weave-fuzz: cannot read [what ]PATH" on stderr.
std::optional<std::string> ReadFile(const std::string& path, const std::string& what = "") {
  std::ifstream f(path);
  if (!f) {
    std::cerr << "weave-fuzz: cannot read " << what << (what.empty() ? "" : " ") << path << "\n";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f);
}

bool ParseSeeds(const std::string& spec, uint64_t* a, uint64_t* b) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  try {
    if (parts.size() == 1) {
      *a = std::stoull(parts[0]);
      *b = *a + 1;
    } else if (parts.size() == 2) {
      *a = std::stoull(parts[0]);
      *b = std::stoull(parts[1]);
    } else {
      return false;
    }
  } catch (...) {
    return false;
  }
  return *b > *a;
}

std::string StatsText(const Stats& s) {
  std::string t = absl::StrCat("weave-fuzz: ", s.seeds, " programs in ", static_cast<int64_t>(s.seconds),
                               " s\n  verdicts:");
  for (const char* v : {"PASS", "MISMATCH", "CRASH", "TIMEOUT", "INVALID"}) {
    auto it = s.verdicts.find(v);
    absl::StrAppend(&t, " ", v, "=", it == s.verdicts.end() ? 0 : it->second);
  }
  absl::StrAppend(&t, "\n  fired (programs):");
  for (const auto& [k, v] : s.fired) absl::StrAppend(&t, " ", k, "=", v);
  absl::StrAppend(&t, "\n  motifs:");
  for (const auto& [k, v] : s.motifs) absl::StrAppend(&t, " ", k, "=", v);
  absl::StrAppend(&t, "\n");
  if (!s.checks.empty()) {
    absl::StrAppend(&t, "  failed checks:\n");
    for (const auto& [k, v] : s.checks) absl::StrAppend(&t, "    ", v, "  ", k, "\n");
  }
  if (!s.findings.empty()) {
    absl::StrAppend(&t, "  findings (programs / occurrences):\n");
    for (const auto& [k, v] : s.findings) {
      absl::StrAppend(&t, "    ", s.finding_seeds.at(k), " / ", v, "  ", k, "\n");
    }
  }
  return t;
}

nlohmann::json StatsJson(const Stats& s) {
  nlohmann::json j;
  j["seeds"] = s.seeds;
  j["seconds"] = s.seconds;
  j["verdicts"] = s.verdicts;
  j["failed_checks"] = s.checks;
  j["fired"] = s.fired;
  j["findings"] = s.findings;
  j["finding_programs"] = s.finding_seeds;
  j["motifs"] = s.motifs;
  return j;
}

int CmdRun(const std::string& seeds, int jobs, double timeout, const std::string& out_dir,
           const std::string& summary, bool findings_fatal, bool verbose, bool quick,
           const std::string& mutant, bool expect_failure, const std::string& allow,
           const GenOptions& gen, const std::string& cost_gate,
           const std::vector<std::string>& pass_options) {
  // Allowed failures: (seed or -1 for any, failed-check prefix), from --allow entries and
  // @FILE lines "<seed|*> <check-prefix>  # reason".
  std::vector<std::pair<int64_t, std::string>> allowed;
  for (absl::string_view a : absl::StrSplit(allow, ',', absl::SkipEmpty())) {
    if (!absl::StartsWith(a, "@")) {
      allowed.emplace_back(-1, std::string(a));
      continue;
    }
    const std::optional<std::string> read = ReadFile(std::string(a.substr(1)));
    if (!read) {
      return 2;
    }
    const std::string& text = *read;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
      if (line.empty()) continue;
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (f.size() != 2) {
        std::cerr << "weave-fuzz: bad line in " << a.substr(1) << ": " << line << "\n";
        return 2;
      }
      int64_t seed = -1;
      if (f[0] != "*" && !absl::SimpleAtoi(f[0], &seed)) {
        std::cerr << "weave-fuzz: bad seed in " << a.substr(1) << ": " << line << "\n";
        return 2;
      }
      allowed.emplace_back(seed, f[1]);
    }
  }
  auto is_allowed = [&](uint64_t seed, const CheckResult& r) {
    for (const auto& [s, prefix] : allowed) {
      if ((s < 0 || static_cast<uint64_t>(s) == seed) && r.check.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  int64_t allowed_failures = 0;
  std::vector<uint64_t> seed_list;
  for (absl::string_view part : absl::StrSplit(seeds, ',', absl::SkipEmpty())) {
    uint64_t a = 0, b = 0;
    std::string spec(part);
    if (spec.rfind("@", 0) == 0) {  // @FILE: seeds listed one per line (# comments)
      const std::optional<std::string> read = ReadFile(spec.substr(1), "seed list");
      if (!read) {
        return 2;
      }
      const std::string& text = *read;
      for (absl::string_view line : absl::StrSplit(text, '\n')) {
        line = line.substr(0, line.find('#'));
        line = absl::StripAsciiWhitespace(line);
        if (line.empty()) continue;
        if (!ParseSeeds(std::string(line), &a, &b)) {
          std::cerr << "weave-fuzz: bad line in " << spec.substr(1) << ": " << line << "\n";
          return 2;
        }
        for (uint64_t x = a; x < b; ++x) seed_list.push_back(x);
      }
      continue;
    }
    if (!ParseSeeds(spec, &a, &b)) {
      std::cerr << "weave-fuzz: --seeds wants A:B (A < B), one seed, @FILE, or a comma list of those\n";
      return 2;
    }
    for (uint64_t x = a; x < b; ++x) seed_list.push_back(x);
  }
  CheckOptions options;
  options.findings_fatal = findings_fatal;
  options.cost_gate_system = cost_gate;
  for (const std::string& kv : pass_options) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "weave-fuzz: --pass-option wants KEY=VALUE, got '" << kv << "'\n";
      return 2;
    }
    options.pass_options.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (quick) {
    options.each_pass_alone = false;
  }
  if (!mutant.empty()) {
    options.pipeline = PipelineWithMutant(CompilePipelinePassNames(), mutant);
    if (options.pipeline.empty()) {
      std::cerr << "weave-fuzz: unknown mutant '" << mutant << "' (known:";
      for (const MutantInfo& m : Mutants()) std::cerr << " " << m.name;
      std::cerr << ")\n";
      return 2;
    }
  }
  int64_t first_failure = -1;
  std::vector<TextMaker> makers;
  std::vector<GeneratedProgram> programs;
  for (uint64_t s : seed_list) {
    makers.push_back([s, gen] { return GenerateFromSeed(s, gen).text; });
  }
  Stats st;
  const auto t0 = std::chrono::steady_clock::now();
  RunInChildren(makers, options, jobs, timeout, [&](size_t i, const ChildResult& r) {
    const uint64_t seed = seed_list[i];
    ++st.seeds;
    ++st.verdicts[std::string(VerdictName(r.check.verdict))];
    for (const auto& [k, v] : r.check.fired) {
      if (v) ++st.fired[k];
    }
    std::set<std::string> kinds;
    for (const auto& [k, v] : r.check.findings) {
      ++st.findings[k];
      kinds.insert(k);
    }
    for (const std::string& k : kinds) ++st.finding_seeds[k];
    GeneratedProgram p = GenerateFromSeed(seed, gen);
    std::set<std::string> mk;
    for (const std::string& m : p.motifs) mk.insert(m.substr(0, m.find(' ')));
    for (const std::string& m : mk) ++st.motifs[m];
    if (r.check.verdict != Verdict::kPass) ++st.checks[r.check.Signature()];
    const bool allowed_failure = r.check.verdict != Verdict::kPass && is_allowed(seed, r.check);
    if (allowed_failure) ++allowed_failures;
    if (verbose || (r.check.verdict != Verdict::kPass && !allowed_failure)) {
      std::cout << "seed " << seed << ": " << VerdictName(r.check.verdict)
                << (r.check.check.empty() ? "" : " ") << r.check.check << " ("
                << static_cast<int64_t>(r.seconds * 1000) << " ms)\n";
      if (r.check.verdict != Verdict::kPass) {
        std::cout << "  " << absl::StrJoin(absl::StrSplit(r.check.detail, '\n'), "\n  ") << "\n";
        for (const std::string& m : p.motifs) std::cout << "  motif: " << m << "\n";
      }
      if (verbose) {
        for (const auto& [k, v] : r.check.findings) std::cout << "  finding " << k << ": " << v << "\n";
      }
      std::cout.flush();
    }
    if (!out_dir.empty() && r.check.verdict != Verdict::kPass) {
      WriteFile(absl::StrCat(out_dir, "/seed-", seed, ".hlo"), p.text);
    }
    if (r.check.verdict == Verdict::kMismatch && r.check.check.rfind("numerics:", 0) == 0 &&
        first_failure < 0) {
      first_failure = static_cast<int64_t>(seed);
    }
    return !(expect_failure && first_failure >= 0);
  });
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << StatsText(st);
  if (!summary.empty()) WriteFile(summary, StatsJson(st).dump(2) + "\n");
  if (expect_failure) {
    // The mutation check: a deliberately wrong pipeline must be caught (a MISMATCH).
    if (first_failure >= 0) {
      std::cout << "weave-fuzz: " << (mutant.empty() ? "the pipeline" : "mutant " + mutant)
                << " caught at seed " << first_failure << " after " << st.seeds << " programs\n";
      return 0;
    }
    std::cout << "weave-fuzz: " << (mutant.empty() ? "the pipeline" : "mutant " + mutant)
              << " was NOT caught in " << st.seeds << " programs\n";
    return 1;
  }
  if (allowed_failures > 0) {
    std::cout << "  " << allowed_failures << " failure(s) allowed by --allow=" << allow
              << " (known open bugs)\n";
  }
  return st.verdicts["PASS"] + allowed_failures == st.seeds ? 0 : 1;
}

int CmdCheck(const std::string& path, double timeout, bool findings_fatal) {
  const std::optional<std::string> read = ReadFile(path);
  if (!read) {
    return 2;
  }
  const std::string& text = *read;
  CheckOptions options;
  options.findings_fatal = findings_fatal;
  ChildResult r = RunOneInChild([text] { return text; }, options, timeout);
  std::cout << path << ": " << VerdictName(r.check.verdict) << (r.check.check.empty() ? "" : " ")
            << r.check.check << "\n";
  if (!r.check.detail.empty()) std::cout << r.check.detail << "\n";
  for (const auto& [k, v] : r.check.findings) std::cout << "finding " << k << ": " << v << "\n";
  std::cout << "fired:";
  for (const auto& [k, v] : r.check.fired) std::cout << " " << k << "=" << (v ? "yes" : "no");
  std::cout << "\n";
  return r.check.verdict == Verdict::kPass ? 0 : 1;
}

int CmdReduce(const std::string& input, int64_t seed, bool have_seed, const std::string& output,
              double timeout, bool findings_fatal, const GenOptions& gen) {
  CheckOptions options;
  options.findings_fatal = findings_fatal;
  ReduceOptions ro;
  ro.timeout_s = timeout;
  ro.log = [](const std::string& s) { std::cerr << s << "\n"; };
  absl::StatusOr<ReduceResult> r;
  if (have_seed) {
    r = ReduceSeed(static_cast<uint64_t>(seed), options, ro, gen);
  } else {
    const std::optional<std::string> read = ReadFile(input);
    if (!read) {
      return 2;
    }
    const std::string& text = *read;
    r = ReduceText(text, options, ro);
  }
  if (!r.ok()) {
    std::cerr << "weave-fuzz: " << r.status().message() << "\n";
    return 1;
  }
  std::cerr << "weave-fuzz: reduced to " << r->instructions << " instructions (" << r->signature
            << ")\n";
  if (output.empty() || output == "-") {
    std::cout << r->text;
  } else if (!WriteFile(output, r->text)) {
    std::cerr << "weave-fuzz: cannot write " << output << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace weave::fuzz

int main(int argc, char** argv) {
  using namespace weave::fuzz;
  RegisterMutants();
  CLI::App app{"weave-fuzz: random programs, every pass checked against the evaluator"};
  app.require_subcommand(1);
  int code = 0;

  std::string seeds = "0:100", out_dir, summary;
  int jobs = 1;
  double timeout = 30;
  bool findings_fatal = false, verbose = false, quick = false, expect_failure = false;
  std::string mutant, allow, cost_gate;
  std::vector<std::string> pass_options;
  GenOptions gen;
  bool no_async = false;
  app.add_flag("--no-async", no_async, "Generate synchronous collectives only (every command)");
  bool loops_as_plain = false, no_xla_loops = false, global = false;
  app.add_flag("--global", global,
               "Generate global modules with random GSPMD / Shardy shardings (every command): "
               "partitioned by the SPMD pipeline and compared with the global program first");
  app.add_flag("--xla-loops-as-plain", loops_as_plain,
               "Emit each XLA-form windowed loop's plain equivalent instead (to check the loops)");
  app.add_flag("--no-xla-loops", no_xla_loops, "Generate no XLA-form windowed loops");
  CLI::App* run = app.add_subcommand("run", "Generate and check the programs of a seed range");
  run->add_option("--seeds", seeds,
                  "A:B (A inclusive, B exclusive), one seed, @FILE (one per line), or a comma "
                  "list of those");
  run->add_option("-j,--jobs", jobs, "Programs checked at once (child processes)");
  run->add_option("--timeout", timeout, "Seconds per program before TIMEOUT");
  run->add_option("--out", out_dir, "Write failing programs to DIR/seed-<n>.hlo");
  run->add_option("--summary", summary, "Write the summary as JSON to FILE");
  run->add_flag("--findings-fatal", findings_fatal, "Missed-rewrite findings count as MISMATCH");
  run->add_flag("--quick", quick, "Skip the each-pass-alone checks");
  run->add_flag("-v,--verbose", verbose, "One line per seed, with findings");
  run->add_option("--mutant", mutant,
                  "Put a deliberately wrong pass into the pipeline (dequant-unproven, "
                  "ring-reversed, drop-last-step, wide-cache-unscaled)");
  run->add_option("--pass-option", pass_options,
                  "KEY=VALUE pass option for every pass of every check (repeatable), e.g. "
                  "windowed-einsum-cache-type=wide");
  run->add_option("--allow", allow,
                  "Comma list of failed-check prefixes (e.g. idempotence) that do not fail the "
                  "run, or @FILE with lines '<seed|*> <check-prefix> # reason': known open "
                  "bugs while their fixes land");
  run->add_option("--cost-gate", cost_gate,
                  "Run the pipeline with weave compile's cost gate on this system (e.g. h100x8); "
                  "default: no gate, every rewrite applies");
  run->add_flag("--expect-failure", expect_failure,
                "Mutation check: stop at the first numerics MISMATCH and exit 0; exit 1 if none");
  run->callback([&] {
    code = CmdRun(seeds, jobs, timeout, out_dir, summary, findings_fatal, verbose, quick, mutant,
                  expect_failure, allow, gen, cost_gate, pass_options);
  });

  uint64_t print_seed = 0;
  CLI::App* print = app.add_subcommand("print", "Print the program of a seed");
  print->add_option("seed", print_seed)->required();
  print->callback([&] {
    GeneratedProgram p = GenerateFromSeed(print_seed, gen);
    std::cout << p.text;
  });

  std::string path;
  CLI::App* check = app.add_subcommand("check", "Check one module file");
  check->add_option("file", path)->required();
  check->add_option("--timeout", timeout, "Seconds before TIMEOUT");
  check->add_flag("--findings-fatal", findings_fatal, "Missed-rewrite findings count as MISMATCH");
  check->callback([&] { code = CmdCheck(path, timeout, findings_fatal); });

  // The run fuzzer's check and mutator (fuzz/run_fuzzer.cc), for replaying its findings and
  // testing its pieces: each file's stage, one line per file; a crash is the failure.
  std::vector<std::string> run_files;
  CLI::App* run_check = app.add_subcommand(
      "run-check", "Parse, verify and (if small) evaluate HLO files as the run fuzzer does");
  run_check->add_option("files", run_files)->required();
  run_check->callback([&] {
    static const char* kStage[] = {"parse-error", "verify-error", "over-budget", "ran"};
    for (const std::string& f : run_files) {
      const std::optional<std::string> read = ReadFile(f);
      if (!read) {
        code = 2;
        return;
      }
      const std::string& text = *read;
      std::cout << f << ": " << kStage[static_cast<int>(weave::fuzz::CheckParseVerifyRun(text))] << "\n";
    }
  });
  uint64_t mutate_seed = 0;
  CLI::App* mutate = app.add_subcommand("mutate", "Print the run fuzzer's mutant of an HLO file");
  mutate->add_option("file", path)->required();
  mutate->add_option("--seed", mutate_seed, "The mutation's seed");
  mutate->callback([&] {
    const std::optional<std::string> read = ReadFile(path);
    if (!read) {
      code = 2;
      return;
    }
    const std::string& text = *read;
    std::cout << weave::fuzz::MutateHloText(text, static_cast<unsigned int>(mutate_seed));
  });

  std::string corpus_seeds = "0:64", corpus_dir;
  CLI::App* corpus = app.add_subcommand("corpus", "Write seeds' decisions as libFuzzer inputs");
  corpus->add_option("--seeds", corpus_seeds, "A:B");
  corpus->add_option("dir", corpus_dir)->required();
  corpus->callback([&] {
    uint64_t a = 0, b = 0;
    if (!ParseSeeds(corpus_seeds, &a, &b)) {
      std::cerr << "weave-fuzz: --seeds wants A:B\n";
      code = 2;
      return;
    }
    for (uint64_t s = a; s < b; ++s) {
      SeededChoices c(s);
      GenerateProgram(c, gen, "corpus");
      // ByteChoices reads ceil(log256(n)) little-endian bytes per draw of bound n; the trace
      // keeps the values, not the bounds, so each value is written in the fewest bytes that
      // hold it and padded to 1: exact for bounds up to 256, the common case.
      std::string bytes;
      for (uint64_t v : c.trace()) {
        do {
          bytes += static_cast<char>(v & 0xff);
          v >>= 8;
        } while (v > 0);
      }
      if (!WriteFile(absl::StrCat(corpus_dir, "/seed-", s), bytes)) {
        std::cerr << "weave-fuzz: cannot write to " << corpus_dir << "\n";
        code = 1;
        return;
      }
    }
  });

  std::string output;
  int64_t reduce_seed = -1;
  CLI::App* reduce = app.add_subcommand("reduce", "Shrink a failing program");
  reduce->add_option("file", path, "A failing module (or use --seed)");
  reduce->add_option("--seed", reduce_seed, "Reduce the program of this seed");
  reduce->add_option("-o,--output", output, "Where to write the reduced module (default stdout)");
  reduce->add_option("--timeout", timeout, "Seconds per candidate before TIMEOUT");
  reduce->add_flag("--findings-fatal", findings_fatal, "Missed-rewrite findings count as failures");
  reduce->callback([&] {
    code = CmdReduce(path, reduce_seed, reduce_seed >= 0, output, timeout, findings_fatal, gen);
  });

  app.parse_complete_callback([&] {
    gen.async_forms = !no_async;
    gen.xla_loops_as_plain = loops_as_plain;
    gen.xla_loops = !no_xla_loops;
    if (global) gen.mode = GenOptions::Mode::kGlobal;
  });
  CLI11_PARSE(app, argc, argv);
  return code;
}
