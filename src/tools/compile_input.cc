// The front end of `weave compile` (see compile_input.h).
#include "tools/compile_input.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/verifier.h"
#include "spmd/partition_pipeline.h"
#include "spmd/spmd_partitioner.h"
#include "tools/cli_util.h"

namespace weave::tools {

int PrepareCompileInput(const CompileOptions& o, std::unique_ptr<HloModule> input,
                        CompileReport* report, CompileInput* out) {
  const spmd::InputFormReport form = spmd::DetectInputForm(*input);
  spmd::InputForm input_form = form.form;
  if (!o.input_form.empty() && !spmd::ParseInputForm(o.input_form, &input_form)) {
    std::cerr << o.command << ": --input-form must be 'global' or 'partitioned', not '"
              << o.input_form << "'\n";
    return kUsage;
  }
  if (input_form == spmd::InputForm::kAmbiguous) {
    std::cerr << o.command << ": " << o.input << ": " << form.Describe() << "\n";
    return kUsage;
  }
  out->form = input_form;
  report->input_form = std::string(spmd::InputFormName(input_form));
  if (input_form != spmd::InputForm::kGlobal) {
    if (absl::Status st = VerifyModule(*input); !st.ok()) {
      std::cerr << o.command << ": " << o.input << ": the input does not verify: "
                << st.message() << "\n";
      return kInvalidInput;
    }
    out->partitioned = std::move(input);
    return kOk;
  }

  // Global: the declines first (all listed at once, before any other work), then the SPMD
  // pipeline of `weave partition` on a copy.
  if (absl::Status st = spmd::CheckDeclinedCalls(*input); !st.ok()) {
    std::cerr << o.command << ": " << o.input << ": " << st.message() << "\n";
    return kInvalidInput;
  }
  if (absl::Status st = VerifyModule(*input); !st.ok()) {
    std::cerr << o.command << ": " << o.input << ": the input does not verify: " << st.message()
              << "\n";
    return kInvalidInput;
  }
  absl::StatusOr<int64_t> n = spmd::ResolvePartitionCount(*input, form, o.num_partitions);
  if (!n.ok()) {
    std::cerr << o.command << ": " << o.input << ": " << n.status().message() << "\n";
    return kUsage;
  }
  // The global module stays the reference of --verify-numerics; without it, no copy is made.
  std::unique_ptr<HloModule> partitioned;
  if (o.verify_seed.empty()) {
    partitioned = std::move(input);
  } else {
    partitioned = input->Clone();
  }
  spmd::PartitionOptions options;
  options.num_partitions = *n;
  options.verify_each = o.verify_each;
  options.enzyme_comms_opt = o.enzyme_comms_opt;
  std::vector<Remark> remarks;
  std::vector<PassTiming> timings;
  const int64_t instructions_before = CountInstructions(*partitioned);
  absl::Status st = spmd::PartitionModule(partitioned.get(), options, &remarks, &timings);
  for (const PassTiming& t : timings) {
    PassRecord rec;
    rec.pass = t.pass;
    rec.seconds = t.seconds;
    rec.changed = t.changed;
    report->pipeline.push_back(t.pass);
    report->passes.push_back(rec);
    if (o.verbose) {
      std::cerr << absl::StrFormat("  %-32s %9.3f ms  %s\n", t.pass, t.seconds * 1e3,
                                   t.changed ? "changed" : "unchanged");
    }
  }
  if (!report->passes.empty()) {
    report->passes.front().instructions_before = instructions_before;
    report->passes.back().instructions_after = CountInstructions(*partitioned);
  }
  for (Remark& r : remarks) report->remarks.push_back(std::move(r));
  if (!st.ok()) {
    std::cerr << o.command << ": " << o.input << ": SPMD partitioning failed: " << st.message()
              << "\n";
    return kInvalidInput;
  }
  if (absl::Status v = VerifyModule(*partitioned); !v.ok()) {
    std::cerr << o.command << ": " << o.input
              << ": the partitioned module does not verify (a Weave bug): " << v.message()
              << "\n";
    return kInvalidInput;
  }
  report->partitioned_from_global = true;
  if (!o.partitioned_output.empty()) {
    if (absl::Status w = WriteFileAtomically(o.partitioned_output, partitioned->ToString());
        !w.ok()) {
      std::cerr << o.command << ": --partitioned-output: " << w.message() << "\n";
      return kInvalidInput;
    }
  }
  out->from_global = true;
  out->global = std::move(input);  // null unless numerics were requested
  out->partitioned = std::move(partitioned);
  return kOk;
}

}  // namespace weave::tools
