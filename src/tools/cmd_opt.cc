// `weave opt`, `weave verify` and `weave stats` (see commands.h for exit codes).
//
//   weave opt IN.hlo [--passes=a,b,c] [-o OUT.hlo] [--verify-each] [--remarks] [--timing]
//             [--<pass-option>=value | --<pass-option> value ...]
//   weave verify IN.hlo
//   weave stats IN.hlo [--json]
//
// `-` reads stdin / writes stdout. Unknown `--key[=value]` arguments of `opt` become PassOptions
// (a bare `--key` means "true"); an option that no pass in --passes reads is a usage error
// (exit 2, with the closest known name when one is near). The output file is
// written only on success, through a temporary file renamed into place.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "analysis/cost.h"
#include "analysis/verifier.h"
#include "hlo/parser.h"
#include "nlohmann/json.hpp"
#include "passes/pass.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace weave::tools {
namespace {

constexpr int kOk = 0;
constexpr int kInvalidInput = 1;
constexpr int kUsage = 2;


// Parses extras of `weave opt` into pass options. Returns false (with *error) on a stray
// positional argument.
bool ParseExtras(const std::vector<std::string>& extras, PassOptions* options,
                 std::string* error) {
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& a = extras[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      *error = absl::StrCat("unexpected argument '", a,
                            "' (pass options are written --name=value)");
      return false;
    }
    const std::string body = a.substr(2);
    const size_t eq = body.find('=');
    if (eq != std::string::npos) {
      options->Set(body.substr(0, eq), body.substr(eq + 1));
    } else if (i + 1 < extras.size() && extras[i + 1].compare(0, 2, "--") != 0) {
      options->Set(body, extras[i + 1]);
      ++i;
    } else {
      options->Set(body, "true");
    }
  }
  return true;
}

void RunOpt(const std::string& input, const std::string& output, const std::string& passes,
            bool verify_each, bool remarks, bool timing, const std::vector<std::string>& extras,
            const std::vector<std::string>& flag_names, int* exit_code) {
  PassOptions options;
  std::string error;
  if (!ParseExtras(extras, &options, &error)) {
    std::cerr << "weave opt: " << error << "\n";
    *exit_code = kUsage;
    return;
  }
  HloPassPipeline pipeline;
  if (absl::Status st = pipeline.AddPassesByName(passes, options); !st.ok()) {
    std::cerr << "weave opt: " << st.message() << "\n";
    *exit_code = kUsage;
    return;
  }
  // The factories have read their options: anything left is a misspelling or a flag of
  // another command.
  if (const std::vector<std::string> unread = options.Unread(); !unread.empty()) {
    std::vector<std::string> pass_names;
    for (absl::string_view p : absl::StrSplit(passes, ',', absl::SkipWhitespace())) {
      pass_names.emplace_back(absl::StripAsciiWhitespace(p));
    }
    std::vector<std::string> known = KnownPassOptionNames();
    known.insert(known.end(), flag_names.begin(), flag_names.end());
    std::cerr << "weave opt: "
              << UnknownOptionsMessage(unread,
                                       "not an opt flag, and no pass in --passes reads it",
                                       pass_names, known)
              << "\n";
    *exit_code = kUsage;
    return;
  }
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(input);
  if (!module.ok()) {
    std::cerr << module.status().message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  if (verify_each) {
    if (absl::Status st = VerifyModule(**module); !st.ok()) {
      std::cerr << input << ": verifier failed on the input: " << st.message() << "\n";
      *exit_code = kInvalidInput;
      return;
    }
  }
  std::vector<Remark> remark_sink;
  std::vector<PassTiming> timings;
  pipeline.set_verify_each(verify_each);
  pipeline.set_remarks(&remark_sink);
  absl::StatusOr<bool> changed = pipeline.Run(module->get(), &timings);
  if (remarks) {
    for (const Remark& r : remark_sink) std::cerr << r.ToString() << "\n";
  }
  if (timing) {
    for (const PassTiming& t : timings) {
      std::cerr << absl::StrFormat("timing: %s %.3f ms%s\n", t.pass, t.seconds * 1e3,
                                   t.changed ? " (changed)" : "");
    }
  }
  if (!changed.ok()) {
    std::cerr << input << ": " << changed.status().message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  if (absl::Status st = WriteFileAtomically(output, (*module)->ToString()); !st.ok()) {
    std::cerr << "weave opt: " << st.message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  KeepUntilExit(*std::move(module));  // the command ends here: no need to free it
  *exit_code = kOk;
}

void RunVerify(const std::string& input, const VerifyOptions& options, int* exit_code) {
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(input);
  if (!module.ok()) {
    std::cerr << module.status().message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  if (absl::Status st = VerifyModule(**module, options); !st.ok()) {
    std::cerr << input << ": " << st.message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  int64_t instructions = 0;
  const std::vector<HloComputation*> comps = (*module)->computations();
  for (const HloComputation* c : comps) instructions += c->instruction_count();
  std::cout << "OK: module " << (*module)->name() << " verified (" << comps.size()
            << " computations, " << instructions << " instructions)\n";
  *exit_code = kOk;
}

void RunStats(const std::string& input, bool json, int* exit_code) {
  absl::StatusOr<std::unique_ptr<HloModule>> module = ParseHloModuleFile(input);
  if (!module.ok()) {
    std::cerr << module.status().message() << "\n";
    *exit_code = kInvalidInput;
    return;
  }
  const HloModule& m = **module;
  std::map<std::string, int64_t> histogram;
  nlohmann::json collectives = nlohmann::json::array();
  nlohmann::json dots = nlohmann::json::array();
  int64_t instructions = 0, total_flops = 0, total_bytes = 0;
  const std::vector<HloComputation*> comps = m.MakeComputationPostOrder();
  for (const HloComputation* c : comps) {
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      ++instructions;
      ++histogram[std::string(HloOpcodeString(i->opcode()))];
      if (std::optional<CollectiveCost> cost = CollectiveBytes(*i)) {
        total_bytes += cost->bytes;
        collectives.push_back({{"name", i->name()},
                               {"computation", c->name()},
                               {"opcode", i->async_sugar().empty()
                                              ? std::string(HloOpcodeString(i->opcode()))
                                              : i->async_sugar() + "-start"},
                               {"shape", i->shape().ToString(false)},
                               {"group_size", cost->group_size},
                               {"bytes_per_partition", cost->bytes}});
      }
      if (i->opcode() == HloOpcode::kDot) {
        const int64_t flops = DotFlops(*i);
        total_flops += flops;
        std::string operands;
        for (const HloInstruction* o : i->operands()) {
          absl::StrAppend(&operands, operands.empty() ? "" : " x ", o->shape().ToString(false));
        }
        dots.push_back({{"name", i->name()},
                        {"computation", c->name()},
                        {"operands", operands},
                        {"shape", i->shape().ToString(false)},
                        {"flops", flops}});
      }
    }
  }
  if (json) {
    nlohmann::json j;
    j["module"] = m.name();
    j["num_partitions"] = m.num_partitions;
    j["replica_count"] = m.replica_count;
    j["computations"] = comps.size();
    j["instructions"] = instructions;
    j["opcodes"] = histogram;
    j["collectives"] = collectives;
    j["dots"] = dots;
    j["total_collective_bytes_per_partition"] = total_bytes;
    j["total_dot_flops"] = total_flops;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "module " << m.name() << ": " << comps.size() << " computations, " << instructions
              << " instructions, num_partitions=" << m.num_partitions
              << ", replica_count=" << m.replica_count << "\n";
    std::cout << "opcodes:\n";
    for (const auto& [op, n] : histogram) std::cout << absl::StrFormat("  %-28s %d\n", op, n);
    std::cout << "collectives: " << collectives.size() << "\n";
    for (const auto& c : collectives) {
      std::cout << absl::StrFormat("  %s %s in %s: %s, group size %d, %d bytes per partition\n",
                                   c["opcode"].get<std::string>(), c["name"].get<std::string>(),
                                   c["computation"].get<std::string>(),
                                   c["shape"].get<std::string>(), c["group_size"].get<int64_t>(),
                                   c["bytes_per_partition"].get<int64_t>());
    }
    std::cout << "dots: " << dots.size() << "\n";
    for (const auto& d : dots) {
      std::cout << absl::StrFormat("  dot %s in %s: %s -> %s, %d FLOPs\n",
                                   d["name"].get<std::string>(),
                                   d["computation"].get<std::string>(),
                                   d["operands"].get<std::string>(), d["shape"].get<std::string>(),
                                   d["flops"].get<int64_t>());
    }
    std::cout << "total collective bytes per partition: " << total_bytes << "\n";
    std::cout << "total dot FLOPs: " << total_flops << "\n";
  }
  *exit_code = kOk;
}

}  // namespace

void RegisterOptCommand(CLI::App& app, int* exit_code) {
  // opt
  CLI::App* opt = app.add_subcommand("opt", "Run passes on an HLO module and print the result");
  opt->allow_extras();
  auto input = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>("-");
  auto passes = std::make_shared<std::string>();
  auto verify_each = std::make_shared<bool>(false);
  auto remarks = std::make_shared<bool>(false);
  auto timing = std::make_shared<bool>(false);
  opt->add_option("input", *input, "HLO text file ('-' for stdin)")->required();
  opt->add_option("-o,--output", *output, "output file ('-' for stdout, the default)");
  opt->add_option("--passes", *passes, "comma-separated pass names, run in order")
      ->check(
          [](const std::string& v) -> std::string {
            // `--passes= -o x` must not take `-o` as the pass list.
            if (v.empty() || v[0] == '-') {
              return "no passes given (write --passes=a,b; omit --passes to run none)";
            }
            return "";
          },
          "PASSES");
  opt->add_flag("--verify-each", *verify_each, "verify the input and the module after each pass");
  opt->add_flag("--remarks", *remarks, "print every pass decision to stderr");
  opt->add_flag("--timing", *timing, "print the time of each pass to stderr");
  opt->footer(
      "Other --name=value arguments are pass options (e.g. --windowed-einsum-threshold-mib=0).\n"
      "Known passes: " +
      [] {
        std::string s;
        for (const std::string& n : PassRegistry::Get().Names()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }());
  opt->callback([=]() {
    std::vector<std::string> flag_names;
    for (const CLI::Option* o : opt->get_options()) {
      for (const std::string& n : o->get_lnames()) flag_names.push_back(n);
    }
    RunOpt(*input, *output, *passes, *verify_each, *remarks, *timing, opt->remaining(),
           flag_names, exit_code);
  });

  // verify
  CLI::App* verify = app.add_subcommand("verify", "Parse and verify an HLO module");
  auto verify_input = std::make_shared<std::string>();
  verify->add_option("input", *verify_input, "HLO text file ('-' for stdin)")->required();
  auto verify_options = std::make_shared<VerifyOptions>();
  verify->add_flag("--allow-mixed-precision", verify_options->allow_mixed_precision,
                   "XLA's allow_mixed_precision verifier option: float operands and results may differ in "
                   "precision (select, rng, map, reducers, results against their inferred shape)");
  verify->callback([=]() { RunVerify(*verify_input, *verify_options, exit_code); });

  // stats
  CLI::App* stats = app.add_subcommand(
      "stats", "Opcode histogram, collective bytes per partition and dot FLOPs of a module");
  auto stats_input = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  stats->add_option("input", *stats_input, "HLO text file ('-' for stdin)")->required();
  stats->add_flag("--json", *json, "print JSON");
  stats->callback([=]() { RunStats(*stats_input, *json, exit_code); });
}

}  // namespace weave::tools
