// The cost gate's oracle on the simulator (see cost_gate.h).
#include "sim/cost_gate.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <filesystem>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/replication.h"
#include "hlo/parser.h"

namespace weave::sim {
namespace {

// Producers pulled into a region instead of becoming parameters: index arithmetic, constants,
// layout changes and the element-wise steps of a dequantization.
bool IsCheapProducer(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kConstant:
    case HloOpcode::kIota:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kBroadcast:
    case HloOpcode::kConvert:
    case HloOpcode::kReshape:
    case HloOpcode::kBitcast:
    case HloOpcode::kCopy:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kMultiply:
    case HloOpcode::kDivide:
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kClamp:
    case HloOpcode::kCompare:
    case HloOpcode::kSelect:
      return true;
    default:
      return false;
  }
}

constexpr int kProducerDepth = 4;

void CollectCalled(const HloComputation* c, absl::flat_hash_set<const HloComputation*>* out) {
  if (c == nullptr || !out->insert(c).second) return;
  for (const HloInstruction* i : c->instructions()) {
    for (const HloComputation* cc : i->called_computations()) CollectCalled(cc, out);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HloModule>> ExtractCostRegion(
    const std::vector<const HloInstruction*>& seeds) {
  if (seeds.empty() || seeds[0] == nullptr) {
    return absl::InvalidArgumentError("no instructions in the candidate");
  }
  const HloComputation* comp = seeds[0]->parent();
  if (comp == nullptr || comp->parent() == nullptr) {
    return absl::InvalidArgumentError("the candidate is not in a module");
  }
  absl::flat_hash_set<const HloInstruction*> region;
  for (const HloInstruction* s : seeds) {
    if (s == nullptr || s->parent() != comp) {
      return absl::InvalidArgumentError("the candidate's instructions are not in one computation");
    }
    region.insert(s);
  }
  // Instructions on paths between seeds: reachable forward from a seed and backward from one.
  absl::flat_hash_set<const HloInstruction*> fwd, bwd;
  {
    std::vector<const HloInstruction*> work(seeds.begin(), seeds.end());
    while (!work.empty()) {
      const HloInstruction* i = work.back();
      work.pop_back();
      for (const HloInstruction* u : i->users()) {
        if (fwd.insert(u).second) work.push_back(u);
      }
    }
    work.assign(seeds.begin(), seeds.end());
    while (!work.empty()) {
      const HloInstruction* i = work.back();
      work.pop_back();
      for (const HloInstruction* o : i->operands()) {
        if (bwd.insert(o).second) work.push_back(o);
      }
    }
  }
  for (const HloInstruction* i : fwd) {
    if (bwd.contains(i)) region.insert(i);
  }
  // Cheap producers of the operands.
  {
    std::deque<std::pair<const HloInstruction*, int>> work;
    for (const HloInstruction* i : region) work.emplace_back(i, 0);
    while (!work.empty()) {
      auto [i, depth] = work.front();
      work.pop_front();
      if (depth >= kProducerDepth) continue;
      for (const HloInstruction* o : i->operands()) {
        if (region.contains(o) || !IsCheapProducer(o)) continue;
        region.insert(o);
        work.emplace_back(o, depth + 1);
      }
    }
  }
  // The elements of a region's tuple (a loop's state) the rest of the computation reads: their
  // get-tuple-elements join the region and become its outputs, so that the passes run on the
  // region keep what the module keeps (a loop's own result), and may still drop what nobody
  // reads (a dead state element).
  {
    std::vector<const HloInstruction*> gtes;
    for (const HloInstruction* i : region) {
      for (const HloInstruction* u : i->users()) {
        if (!region.contains(u) && u->opcode() == HloOpcode::kGetTupleElement) gtes.push_back(u);
      }
    }
    region.insert(gtes.begin(), gtes.end());
  }
  // The text: called computations (callees first), then the entry.
  const HloModule* module = comp->parent();
  absl::flat_hash_set<const HloComputation*> called;
  for (const HloInstruction* i : region) {
    for (const HloComputation* c : i->called_computations()) CollectCalled(c, &called);
  }
  std::string text = absl::StrCat("HloModule cost_region, num_partitions=",
                                  std::max<int64_t>(module->num_partitions, 1),
                                  ", replica_count=", std::max<int64_t>(module->replica_count, 1),
                                  "\n\n");
  for (const HloComputation* c : module->MakeComputationPostOrder()) {
    if (called.contains(c)) absl::StrAppend(&text, c->ToString(), "\n\n");
  }
  std::string entry_name = "cost_region";
  while (module->GetComputation(entry_name) != nullptr) entry_name += "_";
  absl::StrAppend(&text, "ENTRY %", entry_name, " {\n");
  absl::flat_hash_set<const HloInstruction*> params;
  int64_t next_param = 0;
  ReplicationAnalysis replication(*module);  // one walk for all the region's parameters
  std::vector<const HloInstruction*> outputs;
  for (const HloInstruction* i : comp->MakeInstructionPostOrder()) {
    if (!region.contains(i)) continue;
    for (const HloInstruction* o : i->operands()) {
      if (region.contains(o) || !params.insert(o).second) continue;
      // A value proven equal on every partition stays so (an FP8 scale must be, for the
      // quantizer and the FP8 GEMM rewriter to fire on the region as on the module).
      absl::StrAppend(&text, "  %", o->name(), " = ", o->shape().ToString(), " parameter(",
                      next_param++, ")",
                      replication.IsSame(o) ? ", sharding={replicated}" : "", "\n");
    }
    std::unique_ptr<HloInstruction> copy =
        i->CloneWithNewOperands(i->shape(), i->operands());  // without control predecessors
    absl::StrAppend(&text, "  ", copy->ToString(), "\n");
    // An output: a value the rest of the computation reads (or its root), or that nobody in the
    // region reads.
    bool read_inside = false, read_outside = i == comp->root();
    for (const HloInstruction* u : i->users()) {
      (region.contains(u) ? read_inside : read_outside) = true;
    }
    if (!read_inside || read_outside) outputs.push_back(i);
  }
  std::vector<std::string> names, shapes;
  for (const HloInstruction* o : outputs) {
    names.push_back(absl::StrCat("%", o->name()));
    shapes.push_back(o->shape().ToString());
  }
  std::string root = "cost_region_root";
  while (comp->GetInstruction(root) != nullptr) root += "_";
  absl::StrAppend(&text, "  ROOT %", root, " = (", absl::StrJoin(shapes, ", "), ") tuple(",
                  absl::StrJoin(names, ", "), ")\n}\n");
  absl::StatusOr<std::unique_ptr<HloModule>> parsed = ParseHloModule(text, "<cost region>");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the candidate's region does not stand alone: ", parsed.status().message()));
  }
  return parsed;
}

std::string CanonicalRegionText(const HloModule& module) {
  std::unique_ptr<HloModule> copy = module.Clone();
  int64_t n = 0, c = 0;
  for (HloComputation* comp : copy->MakeComputationPostOrder()) {
    comp->set_name(absl::StrCat("c", c++));
    for (HloInstruction* i : comp->MakeInstructionPostOrder()) i->set_name(absl::StrCat("i", n++));
  }
  copy->set_name("region");
  return copy->ToString();
}

absl::StatusOr<double> SimCostOracle::EstimateVariant(const HloModule& region,
                                                      const std::string& pass,
                                                      const CostVariant& variant) {
  absl::StatusOr<std::pair<double, double>> r = EstimateVariantBound(region, pass, variant, false);
  if (!r.ok()) return r.status();
  return r->first;
}

absl::StatusOr<std::pair<double, double>> SimCostOracle::EstimateVariantBound(
    const HloModule& region, const std::string& pass, const CostVariant& variant,
    bool one_stream_bound) {
  std::unique_ptr<HloModule> m = region.Clone();
  auto run = [&](const std::string& name, const PassOptions& options) -> absl::Status {
    absl::StatusOr<std::unique_ptr<HloPass>> p = PassRegistry::Get().Create(name, options);
    if (!p.ok()) return p.status();
    absl::StatusOr<bool> changed = (*p)->Run(m.get());
    if (!changed.ok()) {
      return absl::InternalError(absl::StrCat(name, ": ", changed.status().message()));
    }
    return absl::OkStatus();
  };
  if (variant.rewrite) {
    PassOptions options = c_.pass_options;
    for (const auto& [k, v] : variant.options) options.Set(k, v);
    if (absl::Status st = run(pass, options); !st.ok()) return st;
  }
  auto at = std::find(c_.pipeline.begin(), c_.pipeline.end(), pass);
  auto begin = at == c_.pipeline.end() ? c_.pipeline.begin() : at + 1;
  for (auto it = begin; it != c_.pipeline.end(); ++it) {
    if (*it == pass) continue;
    if (absl::Status st = run(*it, c_.pass_options); !st.ok()) return st;
  }
  if (!c_.dump_dir.empty() && !dump_name_.empty()) {
    std::ofstream out(std::filesystem::path(c_.dump_dir) / (dump_name_ + ".hlo"));
    out << m->ToString();
  }
  absl::StatusOr<SimResult> r = SimulateModule(*m, c_.system, c_.sim_options);
  if (!r.ok()) return r.status();
  if (!one_stream_bound) return std::make_pair(r->total_us, r->total_us);
  SimOptions serial = c_.sim_options;
  serial.serial_sub_wave_gemms = true;
  absl::StatusOr<SimResult> s = SimulateModule(*m, c_.system, serial);
  if (!s.ok()) return s.status();
  return std::make_pair(std::max(r->total_us, s->total_us), r->total_us);
}

absl::StatusOr<std::vector<double>> SimCostOracle::Estimate(const CostQuery& query) {
  absl::StatusOr<std::unique_ptr<HloModule>> region = ExtractCostRegion(query.seeds);
  if (!region.ok()) return region.status();
  std::string key_base = absl::StrCat(query.pass, "\n", CanonicalRegionText(**region));
  std::vector<double> out, concurrent;
  for (const CostVariant& v : query.variants) {
    std::string key = absl::StrCat(v.rewrite ? "rewrite" : "leave",
                                   query.one_stream_bound ? " one-stream-bound" : "", "\n");
    if (v.rewrite) {
      for (const auto& [k, val] : v.options) absl::StrAppend(&key, k, "=", val, "\n");
    }
    absl::StrAppend(&key, key_base);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.push_back(it->second.first);
      concurrent.push_back(it->second.second);
      continue;
    }
    if (!c_.dump_dir.empty()) {
      std::string label = v.label;
      for (char& ch : label) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      dump_name_ = absl::StrCat(dumped_++, ".", query.location, ".", label);
    }
    absl::StatusOr<std::pair<double, double>> us =
        EstimateVariantBound(**region, query.pass, v, query.one_stream_bound);
    if (!us.ok()) return us.status();
    cache_[key] = *us;
    out.push_back(us->first);
    concurrent.push_back(us->second);
  }
  if (query.one_stream_bound) concurrent_us_ = std::move(concurrent);
  return out;
}

}  // namespace weave::sim
