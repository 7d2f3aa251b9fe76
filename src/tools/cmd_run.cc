// `weave run` and `weave compare`: the reference evaluator on the command line.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/verifier.h"
#include "eval/evaluator.h"
#include "eval/global_compare.h"
#include "eval/npy.h"
#include "hlo/parser.h"
#include "nlohmann/json.hpp"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "hlo/status_macros.h"

namespace weave::tools {
namespace {

struct RunArgs {
  std::string module;
  std::string module_b;
  int64_t num_partitions = 0;
  int64_t replica_count = 0;
  uint64_t seed = 0;
  std::string save_inputs, save_outputs;
  std::vector<std::string> inputs;
  bool replicate_unsharded = false;  // the default now; kept as a no-op flag
  bool vary_unsharded = false;
  bool json = false;
  double max_memory_gib = 8.0;
  double rtol = -1, atol = -1, norm_ulps = -1;
};

void AddCommonOptions(CLI::App* cmd, RunArgs* a) {
  cmd->add_option("--num-partitions", a->num_partitions,
                  "Partitions to simulate (default: the module's num_partitions, else 1)")
      ->check(Positive());
  cmd->add_option("--replica-count", a->replica_count,
                  "Replicas to simulate (default: the module's replica_count, else 1)")
      ->check(Positive());
  cmd->add_option("--seed", a->seed, "Seed of the generated inputs");
  CLI::Option* same = cmd->add_flag("--replicate-unsharded", a->replicate_unsharded,
                "Give parameters without sharding the same values on every partition (the "
                "default: XLA's SPMD partitioner treats unannotated instructions as replicated)");
  cmd->add_flag("--vary-unsharded", a->vary_unsharded,
                "Give parameters without sharding independent values on each partition (the "
                "behaviour before 2026-12)")
      ->excludes(same);
  cmd->add_flag("--json", a->json, "Print a JSON report");
  cmd->add_option("--max-memory-gib", a->max_memory_gib,
                  "Refuse modules whose estimated memory exceeds this (GiB)");
}

// Checksum of one output: sum of values (real parts) and an FNV-1a hash of the stored values.
std::pair<double, uint64_t> Checksum(const eval::Value& v) {
  double sum = 0;
  uint64_t h = 1469598103934665603ull;
  const int64_t n = v.size();
  for (int64_t k = 0; k < n; ++k) {
    const double x = v.GetDouble(k);
    if (std::isfinite(x)) sum += x;
    uint64_t bits;
    if (v.storage() == eval::Storage::kInt) {
      bits = static_cast<uint64_t>(v.i[static_cast<size_t>(k)]);
    } else {
      double y = std::isnan(x) ? std::nan("") : x;
      std::memcpy(&bits, &y, 8);
    }
    for (int b = 0; b < 8; ++b) {
      h ^= (bits >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
    if (v.storage() == eval::Storage::kComplex) {  // the imaginary part too
      double y = v.c[static_cast<size_t>(k)].imag();
      if (std::isnan(y)) y = std::nan("");
      std::memcpy(&bits, &y, 8);
      for (int b = 0; b < 8; ++b) {
        h ^= (bits >> (8 * b)) & 0xff;
        h *= 1099511628211ull;
      }
    }
  }
  return {sum, h};
}

absl::Status ParseInputSpecs(const eval::EvalOptions& opts, const HloModule& m,
                             const std::vector<std::string>& specs,
                             std::vector<eval::InputOverride>* out) {
  const HloComputation* entry = m.entry();
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--input '", spec,
                                                     "': expected I=FILE.npy or pP.I=FILE.npy"));
    }
    std::string key = spec.substr(0, eq);
    const std::string file = spec.substr(eq + 1);
    eval::InputOverride o;
    if (!key.empty() && key[0] == 'p' && key.find('.') != std::string::npos) {
      const size_t dot = key.find('.');
      if (!absl::SimpleAtoi(key.substr(1, dot - 1), &o.device)) {
        return absl::InvalidArgumentError(absl::StrCat("--input '", spec, "': bad partition"));
      }
      key = key.substr(dot + 1);
    }
    if (!absl::SimpleAtoi(key, &o.parameter)) {
      return absl::InvalidArgumentError(absl::StrCat("--input '", spec, "': bad parameter index"));
    }
    if (o.parameter < 0 || o.parameter >= entry->num_parameters()) {
      return absl::InvalidArgumentError(absl::StrCat("--input '", spec, "': the entry has ",
                                                     entry->num_parameters(), " parameters"));
    }
    const int64_t devices = eval::ResolvedNumPartitions(m, opts) * eval::ResolvedReplicaCount(m, opts);
    if (o.device >= devices) {
      return absl::InvalidArgumentError(absl::StrCat("--input '", spec, "': only ",
                                                     CountOf(devices, "partition", "partitions"),
                                                     " run"));
    }
    for (const eval::InputOverride& prev : *out) {
      if (prev.parameter == o.parameter && prev.device == o.device) {
        return absl::InvalidArgumentError(absl::StrCat("--input '", spec,
                                                       "': parameter given twice"));
      }
    }
    ASSIGN_OR_RETURN(auto v, eval::ReadNpy(file, entry->parameter(o.parameter)->shape().element_type));
    o.value = eval::Share(std::move(v));
    out->push_back(std::move(o));
  }
  return absl::OkStatus();
}

absl::Status SaveAll(const std::string& dir, const std::vector<std::vector<eval::ValuePtr>>& per,
                     const char* what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (size_t d = 0; d < per.size(); ++d) {
    for (size_t j = 0; j < per[d].size(); ++j) {
      std::vector<eval::ValuePtr> leaves;
      eval::FlattenLeaves(per[d][j], &leaves);
      if (leaves.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("cannot save tuple-shaped ", what, " ", j));
      }
      RETURN_IF_ERROR(eval::WriteNpy(absl::StrCat(dir, "/p", d, ".", what, j, ".npy"), *leaves[0]));
    }
  }
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return 1;
}

eval::EvalOptions MakeOptions(const RunArgs& a) {
  eval::EvalOptions o;
  o.num_partitions = a.num_partitions;
  o.replica_count = a.replica_count;
  o.seed = a.seed;
  o.replicate_unsharded = !a.vary_unsharded;
  o.max_memory_bytes = static_cast<int64_t>(a.max_memory_gib * (1 << 30));
  return o;
}

int DoRun(const RunArgs& a) {
  auto m = ParseHloModuleFile(a.module);
  if (!m.ok()) return Fail(m.status());
  // The evaluator's kernels assume a verified module (operand types agree, and so on).
  if (absl::Status v = VerifyModule(**m); !v.ok()) return Fail(v);
  eval::EvalOptions opts = MakeOptions(a);
  std::vector<eval::InputOverride> overrides;
  if (absl::Status s = ParseInputSpecs(opts, **m, a.inputs, &overrides); !s.ok()) return Fail(s);
  const int64_t n = eval::ResolvedNumPartitions(**m, opts);
  const int64_t r = eval::ResolvedReplicaCount(**m, opts);
  const int64_t est = eval::EstimateMemoryBytes(**m, n * r);
  if (est > opts.max_memory_bytes) {
    return Fail(absl::ResourceExhaustedError(absl::StrFormat(
        "module needs an estimated %.2f GiB on %s (limit %.2f GiB): refused",
        static_cast<double>(est) / (1 << 30), CountOf(n * r, "partition", "partitions"),
        a.max_memory_gib)));
  }
  auto inputs = eval::MakeInputs(**m, opts, overrides);
  if (!inputs.ok()) return Fail(inputs.status());
  auto res = eval::RunModule(**m, opts, &*inputs);
  if (!res.ok()) return Fail(res.status());
  for (const std::string& w : res->warnings) std::cerr << "warning: " << w << "\n";
  if (!a.save_inputs.empty()) {
    if (absl::Status s = SaveAll(a.save_inputs, res->inputs.per_device, "arg"); !s.ok()) return Fail(s);
  }
  if (!a.save_outputs.empty()) {
    std::vector<std::vector<eval::ValuePtr>> outs = res->outputs;
    if (absl::Status s = SaveAll(a.save_outputs, outs, "out"); !s.ok()) return Fail(s);
  }
  if (a.json) {
    nlohmann::json j;
    j["module"] = (*m)->name();
    j["num_partitions"] = n;
    j["replica_count"] = r;
    j["seed"] = a.seed;
    j["outputs"] = nlohmann::json::array();
    for (size_t d = 0; d < res->outputs.size(); ++d) {
      for (size_t k = 0; k < res->outputs[d].size(); ++k) {
        const eval::Value& v = *res->outputs[d][k];
        auto [sum, hash] = Checksum(v);
        std::vector<double> first;
        for (int64_t q = 0; q < v.size() && q < 8; ++q) first.push_back(v.GetDouble(q));
        j["outputs"].push_back({{"partition", d}, {"output", k},
                                {"shape", v.shape.ToString(false)}, {"sum", sum},
                                {"hash", absl::StrFormat("%016x", hash)}, {"values", first}});
      }
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("module %s: %d partition(s)%s, seed %d\n", (*m)->name(), n,
                               r > 1 ? absl::StrCat(" x ", r, " replicas") : "", a.seed);
  for (size_t d = 0; d < res->outputs.size(); ++d) {
    std::cout << (r > 1 ? absl::StrCat("device ", d) : absl::StrCat("partition ", d)) << ":\n";
    for (size_t k = 0; k < res->outputs[d].size(); ++k) {
      const eval::Value& v = *res->outputs[d][k];
      auto [sum, hash] = Checksum(v);
      std::cout << absl::StrFormat("  out%d %s sum=%.6g hash=%016x values=%s\n", k,
                                   v.shape.ToString(false), sum, hash,
                                   v.ToString(6).substr(v.shape.ToString(false).size() + 1));
    }
  }
  return 0;
}

int DoCompare(const RunArgs& a) {
  auto ma = ParseHloModuleFile(a.module);
  if (!ma.ok()) return Fail(ma.status());
  auto mb = ParseHloModuleFile(a.module_b);
  if (!mb.ok()) return Fail(mb.status());
  for (const auto* m : {ma->get(), mb->get()}) {
    if (absl::Status v = VerifyModule(*m); !v.ok()) return Fail(v);
  }
  eval::CompareOptions co;
  co.eval = MakeOptions(a);
  if (a.rtol >= 0) co.rtol = a.rtol;
  if (a.atol >= 0) co.atol = a.atol;
  if (a.norm_ulps >= 0) co.norm_ulps = a.norm_ulps;
  const int64_t n = eval::ResolvedNumPartitions(**ma, co.eval);
  const int64_t r = eval::ResolvedReplicaCount(**ma, co.eval);
  for (const auto* m : {ma->get(), mb->get()}) {
    const int64_t est = eval::EstimateMemoryBytes(*m, n * r);
    if (est > co.eval.max_memory_bytes) {
      return Fail(absl::ResourceExhaustedError(absl::StrFormat(
          "module %s needs an estimated %.2f GiB on %s (limit %.2f GiB): refused",
          m->name(), static_cast<double>(est) / (1 << 30),
          CountOf(n * r, "partition", "partitions"), a.max_memory_gib)));
    }
  }
  // A global module and its partitioned form: the global program on one device against the
  // partitioned one on N (src/eval/global_compare.h).
  if (eval::IsGlobalPartitionedPair(**ma, **mb)) {
    eval::CompareOptions gco = co;
    gco.eval.num_partitions = a.num_partitions;
    auto grep = eval::CompareGlobalWithPartitioned(**ma, **mb, gco);
    if (!grep.ok()) return Fail(grep.status());
    std::cout << (a.json ? grep->ToJson() + "\n" : grep->ToString());
    return grep->pass ? 0 : 3;
  }
  auto rep = eval::CompareModules(**ma, **mb, co);
  if (!rep.ok()) return Fail(rep.status());
  std::cout << (a.json ? rep->ToJson() + "\n" : rep->ToString());
  return rep->pass ? 0 : 3;
}

}  // namespace

void RegisterRunCommands(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", "Run a module on N simulated partitions with the reference evaluator");
  run->add_option("module", args->module, "HLO text module")->required();
  AddCommonOptions(run, args.get());
  run->add_option("--save-inputs", args->save_inputs, "Write inputs as DIR/p{P}.arg{I}.npy");
  run->add_option("--save-outputs", args->save_outputs, "Write outputs as DIR/p{P}.out{J}.npy");
  run->add_option("--input", args->inputs,
                  "I=FILE.npy (global array of parameter I) or pP.I=FILE.npy (partition P)");
  run->callback([args, exit_code] { *exit_code = DoRun(*args); });

  CLI::App* cmp = app.add_subcommand(
      "compare", "Run two modules on identical inputs and compare their outputs (exit 3 on FAIL)");
  cmp->add_option("a", args->module, "Reference module (its parameters define the inputs)")->required();
  cmp->add_option("b", args->module_b, "Module to check")->required();
  AddCommonOptions(cmp, args.get());
  cmp->add_option("--rtol", args->rtol, "Relative tolerance (default: by output type)")
      ->check(NonNegative());
  cmp->add_option("--atol", args->atol, "Absolute tolerance (default: by output type)")
      ->check(NonNegative());
  cmp->add_option("--norm-ulps", args->norm_ulps,
                  "An element also passes within this many ulps of the output type at the "
                  "output's largest magnitude (default 4; 0 = element-wise only)")
      ->check(NonNegative());
  cmp->callback([args, exit_code] { *exit_code = DoCompare(*args); });
}

}  // namespace weave::tools
