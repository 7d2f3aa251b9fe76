// The `numerics` and `simulation` sections of the compile report (report.h): the evaluator check of
// --verify-numerics and the performance model's estimate of --simulate, as JSON and table lines.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/cli_util.h"
#include "tools/report_internal.h"

namespace weave::tools {

nlohmann::json NumericsToJson(const NumericsRecord& n) {
  nlohmann::json num;
  num["requested"] = n.requested;
  num["ran"] = n.ran;
  if (n.ran) {
    num["pass"] = n.pass;
    num["max_abs_error"] = n.max_abs_error;
    num["max_rel_error"] = n.max_rel_error;
    num["mismatches"] = n.mismatches;
  }
  num["seed"] = n.seed;
  num["num_partitions"] = n.num_partitions;
  num["estimated_bytes"] = n.estimated_bytes;
  if (!n.skipped.empty()) num["skipped"] = n.skipped;
  if (!n.scaled_copy.empty()) num["scaled_copy"] = n.scaled_copy;
  if (!n.reference.empty()) num["reference"] = n.reference;
  if (!n.notes.empty()) num["notes"] = n.notes;
  return num;
}

std::string NumericsToTable(const NumericsRecord& n) {
  std::string o;
  if (n.requested) {
    if (n.ran) {
      absl::StrAppendFormat(
          &o, "Numerics: %s on %s, seed %d (max abs error %.3g, max rel error %.3g, "
              "%d mismatches)\n",
          n.pass ? "PASS" : "FAIL",
          CountOf(n.num_partitions, "partition", "partitions"), n.seed,
          n.max_abs_error, n.max_rel_error, n.mismatches);
      if (!n.scaled_copy.empty()) {
        absl::StrAppend(&o, "  on a scaled copy: ", n.scaled_copy, "\n");
      }
      if (!n.reference.empty()) {
        absl::StrAppend(&o, "  compared with ", n.reference, "\n");
      }
      for (const std::string& note : n.notes) absl::StrAppend(&o, "  ", note, "\n");
    } else {
      absl::StrAppend(&o, "Numerics: skipped: ", n.skipped, "\n");
    }
  } else {
    absl::StrAppend(&o, "Numerics: not checked (use --verify-numerics)\n");
  }
  return o;
}

nlohmann::json SimToJson(const SimRecord& s) {
  nlohmann::json j;
  j["system"] = s.system;
  j["ran"] = s.ran;
  if (s.ran) {
    j["before_us"] = s.before_us;
    j["after_us"] = s.after_us;
    j["before_exposed_comm_us"] = s.before_exposed_comm_us;
    j["after_exposed_comm_us"] = s.after_exposed_comm_us;
    j["speedup"] = s.after_us > 0 ? s.before_us / s.after_us : 0.0;
  }
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

std::string SimToTable(const SimRecord& s) {
  std::string o;
  if (s.ran) {
    absl::StrAppendFormat(&o, "  %-30s %9.1f us %11.1f us   %s\n",
                          absl::StrCat("est. time (", s.system, ")"), s.before_us,
                          s.after_us, PercentChange(s.before_us, s.after_us));
    absl::StrAppendFormat(&o, "  %-30s %9.1f us %11.1f us\n", "  exposed communication",
                          s.before_exposed_comm_us, s.after_exposed_comm_us);
  } else {
    absl::StrAppend(&o, "  estimated time: not available: ", s.error, "\n");
  }
  return o;
}

}  // namespace weave::tools
