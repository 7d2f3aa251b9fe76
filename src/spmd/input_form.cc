// Input-form detection (see input_form.h).
#include "spmd/input_form.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weave::spmd {
namespace {

bool IsTarget(const HloInstruction* h, std::string_view target) {
  return h->opcode() == HloOpcode::kCustomCall && h->custom_call_target() == target;
}

bool StartsManual(const HloInstruction* h) {
  return IsTarget(h, "SPMDFullToShardShape") || IsTarget(h, "xla.sdy.GlobalToLocalShape");
}
bool EndsManual(const HloInstruction* h) {
  return IsTarget(h, "SPMDShardToFullShape") || IsTarget(h, "xla.sdy.LocalToGlobalShape");
}

// Instructions inside manual regions (see input_form.h).
absl::flat_hash_set<const HloInstruction*> ManualInstructions(const HloModule& m) {
  absl::flat_hash_set<const HloInstruction*> manual;
  std::set<const HloComputation*> manual_comps;
  std::vector<const HloComputation*> work;
  auto add_comp = [&](const HloComputation* c) {
    if (manual_comps.insert(c).second) work.push_back(c);
  };
  for (const HloComputation* c : m.MakeComputationPostOrder()) {
    if (absl::StartsWith(c->name(), "xla.sdy.manual_computation_body") ||
        absl::StartsWith(c->name(), "xla.sdy.inlinable_manual_computation_body")) {
      add_comp(c);
    }
  }
  for (const HloComputation* c : m.MakeComputationPostOrder()) {
    for (const HloInstruction* h : c->MakeInstructionPostOrder()) {
      bool in = StartsManual(h);
      if (!in && !EndsManual(h)) {
        for (const HloInstruction* o : h->operands()) in |= manual.contains(o);
      }
      if (in) {
        manual.insert(h);
        for (const HloComputation* callee : h->called_computations()) add_comp(callee);
      }
    }
  }
  while (!work.empty()) {
    const HloComputation* c = work.back();
    work.pop_back();
    for (const HloInstruction* h : c->instructions()) {
      manual.insert(h);
      for (const HloComputation* callee : h->called_computations()) add_comp(callee);
    }
  }
  return manual;
}

void CollectDevices(const HloSharding& s, std::vector<std::set<int64_t>>* sets) {
  switch (s.kind) {
    case HloSharding::Kind::kTuple:
      for (const HloSharding& e : s.tuple) CollectDevices(e, sets);
      break;
    case HloSharding::Kind::kTiled:
      sets->emplace_back(s.devices.begin(), s.devices.end());
      break;
    default:
      break;
  }
}

std::string Plural(int64_t n, std::string_view what) {
  return absl::StrCat(n, " ", absl::string_view(what.data(), what.size()), n == 1 ? "" : "s");
}

}  // namespace

std::string_view InputFormName(InputForm f) {
  switch (f) {
    case InputForm::kGlobal: return "global";
    case InputForm::kPartitioned: return "partitioned";
    case InputForm::kSingleDevice: return "unsharded";
    case InputForm::kAmbiguous: return "ambiguous";
  }
  return "?";
}

bool ParseInputForm(std::string_view text, InputForm* out) {
  if (text == "global") {
    *out = InputForm::kGlobal;
  } else if (text == "partitioned") {
    *out = InputForm::kPartitioned;
  } else {
    return false;
  }
  return true;
}

InputFormReport DetectInputForm(const HloModule& m) {
  InputFormReport r;
  const auto manual = ManualInstructions(m);
  std::map<std::string, int64_t> calls;  // global custom-call targets -> count
  int64_t annotated = 0;
  std::string first_annotated;
  std::vector<std::set<int64_t>> device_sets;
  int64_t partitioned_items = 0;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (h->sharding) CollectDevices(*h->sharding, &device_sets);
      if (h->opcode() == HloOpcode::kCustomCall) {
        const std::string& t = h->custom_call_target();
        // CustomSPMDPartitioning: XLA's partitioner replaces it by the user's partitioned
        // program, so it only exists before partitioning.
        if (t == "Sharding" || t == "SPMDFullToShardShape" || t == "SPMDShardToFullShape" ||
            t == "CustomSPMDPartitioning" || absl::StartsWith(t, "xla.sdy.")) {
          ++calls[t];
        }
      }
      if (h->sharding && h->opcode() != HloOpcode::kParameter && !h->IsRoot() &&
          h->opcode() != HloOpcode::kCustomCall) {
        if (annotated++ == 0) first_annotated = h->name();
      }
      if (manual.contains(h)) continue;
      const bool cross_partition =
          (IsCollective(h->opcode()) && h->channel_id.has_value()) ||
          h->opcode() == HloOpcode::kPartitionId;
      if (cross_partition) {
        if (partitioned_items++ < 3) {
          r.partitioned_evidence.push_back(
              h->opcode() == HloOpcode::kPartitionId
                  ? absl::StrCat("partition-id '", h->name(), "'")
                  : absl::StrCat(std::string(HloOpcodeString(h->opcode())), " '", h->name(),
                                 "' (channel_id=", *h->channel_id, ")"));
        }
      }
    }
  }
  if (partitioned_items > 3) {
    r.partitioned_evidence.push_back(absl::StrCat("and ", partitioned_items - 3, " more"));
  }
  for (const auto& [t, n] : calls) {
    r.global_evidence.push_back(absl::StrCat(Plural(n, "`" + t + "` custom call")));
  }
  if (annotated > 0) {
    r.global_evidence.push_back(absl::StrCat(
        Plural(annotated, "sharding annotation"), " on instructions other than parameters and "
        "roots (first: '", first_annotated, "')"));
  }
  // allow_spmd_sharding_propagation_to_*: XLA prints them after partitioning too (the real
  // post-SPMD llama3 dump has them, all false), so they only decide when nothing says
  // partitioned.
  std::vector<std::string> weak;
  for (const auto& [name, value] : m.header_attributes) {
    if (name == "allow_spmd_sharding_propagation_to_parameters" ||
        name == "allow_spmd_sharding_propagation_to_output") {
      weak.push_back(absl::StrCat("the header's ", name));
    } else if (name == "frontend_attributes" && absl::StrContains(value, "xla.sdy.meshes")) {
      r.global_evidence.push_back("xla.sdy.meshes in the module's frontend attributes");
    }
  }
  // Partition count.
  if (m.has_num_partitions) {
    r.num_partitions = m.num_partitions;
    r.num_partitions_source = absl::StrCat("num_partitions=", m.num_partitions, " in the header");
  } else if (!device_sets.empty()) {
    bool same = std::all_of(device_sets.begin(), device_sets.end(),
                            [&](const std::set<int64_t>& s) { return s == device_sets[0]; });
    const std::set<int64_t>& s = device_sets[0];
    if (same && !s.empty() && *s.begin() == 0 &&
        *s.rbegin() == static_cast<int64_t>(s.size()) - 1) {
      r.num_partitions = static_cast<int64_t>(s.size());
      r.num_partitions_source =
          absl::StrCat("the shardings' device set (devices 0..", s.size() - 1, ")");
    }
  }
  // ... and only for modules with shardings or partitions at all (XLA prints them for
  // single-device programs too: the dlrm dump has them, all true).
  if (r.partitioned_evidence.empty() && (!device_sets.empty() || m.num_partitions > 1)) {
    r.global_evidence.insert(r.global_evidence.end(), weak.begin(), weak.end());
  }
  const bool g = !r.global_evidence.empty();
  const bool p = !r.partitioned_evidence.empty();
  if (g && !p) {
    r.form = InputForm::kGlobal;
  } else if (p && !g) {
    r.form = InputForm::kPartitioned;
  } else if (!g && !p && device_sets.empty()) {
    r.form = InputForm::kSingleDevice;
  } else {
    r.form = InputForm::kAmbiguous;
  }
  return r;
}

std::string InputFormReport::Describe() const {
  std::string s;
  auto list = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string("none") : absl::StrJoin(v, "; ");
  };
  switch (form) {
    case InputForm::kGlobal:
      s = absl::StrCat("global module (", list(global_evidence), ")");
      break;
    case InputForm::kPartitioned:
      s = absl::StrCat("partitioned module (", list(partitioned_evidence), ")");
      break;
    case InputForm::kSingleDevice:
      s = "unsharded module (no tiled or maximal sharding, no cross-partition collective): read "
          "as global or as partitioned, every partition runs the same program";
      break;
    case InputForm::kAmbiguous:
      if (!global_evidence.empty()) {
        s = absl::StrCat("the module shows both forms: global (", list(global_evidence),
                         ") and partitioned (", list(partitioned_evidence), ")");
      } else {
        s = absl::StrCat(
            "the module does not say whether it is global or partitioned: no sharding "
            "annotation beyond parameters and roots, no Sharding/Shardy calls, no "
            "cross-partition collective or partition-id, ",
            num_partitions > 1 ? absl::StrCat("and ", num_partitions, " partitions")
                               : std::string("and sharded parameters"),
            " (parameter shardings survive XLA's partitioning, so they prove nothing)");
      }
      s += "; say which with --input-form=global|partitioned";
      break;
  }
  return s;
}

}  // namespace weave::spmd
