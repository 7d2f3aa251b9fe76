// `weave partition`: a global module (global shapes + sharding annotations) to the partitioned
// module every device runs (src/spmd/partition_pipeline.h).
//
//   weave partition IN.hlo -o OUT.hlo [--num-partitions N] [--input-form=global|partitioned]
//                   [--remarks] [--timing] [--verify-each]
//
// Exit codes: 0 written; 1 invalid input (parse/verify errors, a partitioned module, a declined
// construct such as CustomSPMDPartitioning); 2 usage (including an input whose form is unclear:
// then --input-form is asked for).
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "analysis/verifier.h"
#include "hlo/parser.h"
#include "spmd/input_form.h"
#include "spmd/partition_pipeline.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace weave::tools {
namespace {

struct PartitionArgs {
  std::string input, output = "-";
  int64_t num_partitions = 0;
  std::string input_form;
  bool remarks = false, timing = false, verify_each = false, enzyme_comms_opt = false;
};

int DoPartition(const PartitionArgs& a) {
  spmd::InputForm forced = spmd::InputForm::kAmbiguous;
  if (!a.input_form.empty() && !spmd::ParseInputForm(a.input_form, &forced)) {
    std::cerr << "weave partition: --input-form must be 'global' or 'partitioned', not '"
              << a.input_form << "'\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModuleFile(a.input);
  if (!m.ok()) {
    std::cerr << m.status().message() << "\n";
    return 1;
  }
  HloModule& module = **m;
  const spmd::InputFormReport form = spmd::DetectInputForm(module);
  spmd::InputForm f = a.input_form.empty() ? form.form : forced;
  if (f == spmd::InputForm::kAmbiguous) {
    std::cerr << "weave partition: " << a.input << ": " << form.Describe() << "\n";
    return 2;
  }
  if (f == spmd::InputForm::kPartitioned) {
    std::cerr << "weave partition: " << a.input << ": "
              << (a.input_form.empty() ? form.Describe() : std::string("--input-form=partitioned"))
              << ": it is already partitioned, nothing to do\n";
    return 1;
  }
  if (absl::Status st = VerifyModule(module); !st.ok()) {
    std::cerr << a.input << ": verifier failed on the input: " << st.message() << "\n";
    return 1;
  }
  absl::StatusOr<int64_t> n = spmd::ResolvePartitionCount(module, form, a.num_partitions);
  if (!n.ok()) {
    std::cerr << "weave partition: " << a.input << ": " << n.status().message() << "\n";
    return 2;
  }
  spmd::PartitionOptions options;
  options.num_partitions = *n;
  options.verify_each = a.verify_each;
  options.enzyme_comms_opt = a.enzyme_comms_opt;
  std::vector<Remark> remarks;
  std::vector<PassTiming> timings;
  absl::Status st = spmd::PartitionModule(&module, options, &remarks, &timings);
  if (a.remarks) {
    for (const Remark& r : remarks) std::cerr << r.ToString() << "\n";
  }
  if (a.timing) {
    for (const PassTiming& t : timings) {
      std::cerr << absl::StrFormat("timing: %s %.3f ms%s\n", t.pass, t.seconds * 1e3,
                                   t.changed ? " (changed)" : "");
    }
  }
  if (!st.ok()) {
    std::cerr << a.input << ": " << st.message() << "\n";
    return 1;
  }
  if (absl::Status v = VerifyModule(module); !v.ok()) {
    std::cerr << a.input << ": the partitioned module does not verify (a Weave bug): "
              << v.message() << "\n";
    return 1;
  }
  if (absl::Status w = WriteFileAtomically(a.output, module.ToString()); !w.ok()) {
    std::cerr << "weave partition: " << w.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterPartitionCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PartitionArgs>();
  CLI::App* cmd = app.add_subcommand(
      "partition",
      "Partition a global module (sharding annotations, global shapes) for N devices: "
      "sharding-import, spmd-prepare, sharding-propagation, spmd-partitioner, cleanup");
  cmd->add_option("module", args->input, "HLO text module (global form)")->required();
  cmd->add_option("-o,--output", args->output, "Partitioned module (- = stdout, the default)");
  cmd->add_option("--num-partitions", args->num_partitions,
                  "Partitions (default: the module's num_partitions, else the shardings' "
                  "device set)")
      ->check(Positive());
  cmd->add_option("--input-form", args->input_form,
                  "global|partitioned, when the module does not say which it is");
  cmd->add_flag("--remarks", args->remarks, "Print every pass's remarks to stderr");
  cmd->add_flag("--timing", args->timing, "Print each pass's time to stderr");
  cmd->add_flag("--verify-each", args->verify_each, "Verify after every pass");
  cmd->add_flag("--xla_enable_enzyme_comms_opt", args->enzyme_comms_opt,
                "XLA's option of that name: a dynamic-update-slice at constant starts along tiled "
                "dims moves its update by halo exchange (default off, as in XLA)");
  cmd->callback([args, exit_code] { *exit_code = DoPartition(*args); });
}

}  // namespace weave::tools
