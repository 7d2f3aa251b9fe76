// The compile report's accounting (report.h): bytes one partition sends per collective (XLA's ring
// algorithms, analysis/cost.h), GEMM FLOPs, and the loop-expanded totals of a module.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "analysis/cost.h"
#include "hlo/block_scaled_call.h"
#include "hlo/gemm_call.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"
#include "tools/json_path_scan.h"
#include "tools/report_internal.h"

namespace weave::tools {
namespace {


int64_t GroupSize(const HloInstruction& instr, int64_t default_group) {
  if (instr.replica_groups && !instr.replica_groups->groups.empty() &&
      !instr.replica_groups->groups[0].empty()) {
    return static_cast<int64_t>(instr.replica_groups->groups[0].size());
  }
  return std::max<int64_t>(default_group, 1);
}

}  // namespace

// Base opcode name for counting: -start forms under their plain name.
std::string_view CollectiveBaseName(const HloInstruction& instr) {
  switch (instr.opcode()) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
      return "all-gather";
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
      return "all-reduce";
    case HloOpcode::kReduceScatter:
      return "reduce-scatter";
    case HloOpcode::kAllToAll:
      return "all-to-all";
    case HloOpcode::kRaggedAllToAll:
      return "ragged-all-to-all";
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
      return "collective-permute";
    case HloOpcode::kCollectiveBroadcast:
      return "collective-broadcast";
    case HloOpcode::kAsyncStart:
      // The sugared form (reduce-scatter-start, all-to-all-start) is the collective itself; an
      // unsugared async-start is counted through the computation it wraps.
      for (std::string_view base : {"all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                                    "ragged-all-to-all", "collective-permute",
                                    "collective-broadcast"}) {
        if (instr.async_sugar() == base) return base;
      }
      return "";
    default:
      return "";
  }
}

int64_t ArrayBytes(const Shape& s) {
  if (s.IsTuple()) {
    int64_t total = 0;
    for (const Shape& e : s.tuple_shapes) total += ArrayBytes(e);
    return total;
  }
  if (!s.IsArray()) return 0;
  return s.ByteSize();
}

PrimitiveType FirstArrayType(const Shape& s) {
  if (s.IsTuple()) {
    for (const Shape& e : s.tuple_shapes) {
      PrimitiveType t = FirstArrayType(e);
      if (t != PrimitiveType::kInvalid) return t;
    }
    return PrimitiveType::kInvalid;
  }
  return s.IsArray() ? s.element_type : PrimitiveType::kInvalid;
}

bool IsPermute(const HloInstruction& i) {
  return i.opcode() == HloOpcode::kCollectivePermute ||
         i.opcode() == HloOpcode::kCollectivePermuteStart;
}

// Computations an instruction runs "inline" for the purposes of a loop body: conditional
// branches, calls, fusions, async wrappers (not nested while loops, not reducers).
bool DescendsInto(const HloInstruction& i) {
  switch (i.opcode()) {
    case HloOpcode::kConditional:
    case HloOpcode::kCall:
    case HloOpcode::kFusion:
    case HloOpcode::kAsyncStart:
      return true;
    default:
      return false;
  }
}

int64_t DefaultGroup(const HloModule& m, int64_t num_partitions) {
  if (num_partitions > 0) return num_partitions;
  return std::max<int64_t>(m.num_partitions, 1) * std::max<int64_t>(m.replica_count, 1);
}

// Every instruction of `c` and of the computations it runs inline (see DescendsInto).
void CollectInline(const HloComputation* c, std::vector<const HloInstruction*>* out,
                   std::set<const HloComputation*>* seen) {
  if (!seen->insert(c).second) return;
  for (const HloInstruction* i : c->instructions()) {
    out->push_back(i);
    if (DescendsInto(*i)) {
      for (const HloComputation* cc : i->called_computations()) CollectInline(cc, out, seen);
    }
  }
}

bool IsFp8GemmCustomCall(const HloInstruction& instr) {
  if (IsBlockScaledGemm(instr)) return IsFp8(instr.operand(0)->shape().element_type);
  return IsCublasLtMatmulF8Call(instr);
}

bool IsBlockScaledGemm(const HloInstruction& instr) {
  const BlockScaledKind k = BlockScaledKindOf(instr);
  return (k == BlockScaledKind::kDot || k == BlockScaledKind::kCudnnDot) && instr.operand_count() >= 3;
}

int64_t CollectiveBytesSent(const HloInstruction& instr, int64_t default_group) {
  const std::string_view base = CollectiveBaseName(instr);
  if (base.empty() || instr.operand_count() == 0) return 0;
  if (IsPermute(instr) && instr.source_target_pairs().empty()) return 0;
  // The shared accounting of analysis/cost.h (the same numbers `weave stats` prints); it has no
  // formula for collective-broadcast, and takes the module's sizes for empty replica groups.
  if (std::optional<CollectiveCost> c = CollectiveBytes(instr); c.has_value()) return c->bytes;
  int64_t g = GroupSize(instr, default_group), operand_bytes = 0;
  for (const HloInstruction* o : instr.operands()) operand_bytes += ArrayBytes(o->shape());
  return (g - 1) * operand_bytes / g;
}

namespace {

// The lhs contracting dimensions a GEMM custom call's backend_config names
// (gemm_backend_config.dot_dimension_numbers.lhs_contracting_dimensions: strings or integers),
// or none. Read by ScanJsonArray (tools/json_path_scan.h), which builds no document; a config
// outside the plain JSON it reads (\u escapes, non-ASCII text, invalid JSON) is parsed by
// nlohmann, with the same result. The report reads every GEMM's config in two views (the
// summary's totals and the loop table's): a full parse of each ~1 KB config cost as much as the
// rest of the report's work on the instruction.
std::vector<int64_t> GemmContractingDims(const std::string& config) {
  static const std::vector<std::string_view> kPath = {
      "gemm_backend_config", "dot_dimension_numbers", "lhs_contracting_dimensions"};
  std::vector<int64_t> contracting;
  if (std::optional<JsonArrayScan> scan = ScanJsonArray(config, kPath)) {
    for (const JsonScalar& v : scan->elements) {
      if (v.kind == JsonScalar::kString) contracting.push_back(std::atoll(v.text.c_str()));
      else if (v.kind == JsonScalar::kInteger) contracting.push_back(v.value);
    }
    return contracting;
  }
  nlohmann::json cfg = nlohmann::json::parse(config, nullptr, false);
  if (!cfg.is_discarded() && cfg.is_object()) {
    const nlohmann::json* g = nullptr;
    if (cfg.contains("gemm_backend_config")) g = &cfg["gemm_backend_config"];
    if (g && g->is_object() && g->contains("dot_dimension_numbers")) {
      const nlohmann::json& dn = (*g)["dot_dimension_numbers"];
      if (dn.is_object() && dn.contains("lhs_contracting_dimensions") &&
          dn["lhs_contracting_dimensions"].is_array()) {
        for (const auto& v : dn["lhs_contracting_dimensions"]) {
          if (v.is_string()) contracting.push_back(std::atoll(v.get<std::string>().c_str()));
          else if (v.is_number_integer()) contracting.push_back(v.get<int64_t>());
        }
      }
    }
  }
  return contracting;
}

}  // namespace

double GemmFlops(const HloInstruction& instr) {
  if (instr.opcode() == HloOpcode::kDot) return static_cast<double>(DotFlops(instr));
  if (IsBlockScaledGemm(instr)) {
    // Contracting dim last (hlo/block_scaled_call.h); the cuDNN form's result is padded.
    const Shape& out = instr.shape().IsTuple() && !instr.shape().tuple_shapes.empty() ? instr.shape().tuple_shapes[0]
                                                                                     : instr.shape();
    const Shape& lhs = instr.operand(0)->shape();
    if (!out.IsArray() || !lhs.IsArray() || lhs.rank() == 0) return 0;
    return 2.0 * static_cast<double>(out.ElementCount()) * static_cast<double>(lhs.dims.back());
  }
  if (!IsCublasGemmCall(instr) || instr.operand_count() < 2) return 0;
  const Shape& out = instr.shape().IsTuple() && !instr.shape().tuple_shapes.empty()
                         ? instr.shape().tuple_shapes[0]
                         : instr.shape();
  const Shape& lhs = instr.operand(0)->shape();
  if (!out.IsArray() || !lhs.IsArray() || lhs.rank() == 0) return 0;
  std::vector<int64_t> contracting = GemmContractingDims(instr.backend_config);
  if (contracting.empty()) contracting.push_back(lhs.rank() - 1);
  double k = 1;
  for (int64_t d : contracting) {
    if (d >= 0 && d < lhs.rank()) k *= static_cast<double>(lhs.dims[d]);
  }
  return 2.0 * static_cast<double>(out.ElementCount()) * k;
}

ModuleSummary SummarizeModule(const HloModule& module, int64_t num_partitions) {
  return SummarizeModule(module, num_partitions, ScanLoops(module));
}

ModuleSummary SummarizeModule(const HloModule& module, int64_t num_partitions,
                              const LoopScan& scan) {
  ModuleSummary s;
  for (const HloComputation* c : module.computations()) {
    s.instructions += c->instruction_count();
    for (const HloInstruction* i : c->instructions()) {
      const std::string_view base = CollectiveBaseName(*i);
      if (!base.empty()) s.collectives[std::string(base)] += 1;
      if (i->opcode() == HloOpcode::kDot) ++s.dots;
      if (IsFp8GemmCustomCall(*i)) ++s.fp8_gemms;
    }
  }
  s.windowed_loops = static_cast<int64_t>(scan.loops.size() + scan.all_to_all.size());
  if (!module.entry()) return s;
  TotalsCache cache(DefaultGroup(module, num_partitions));
  const Totals& t = cache.Of(module.entry());
  s.bytes_sent = t.bytes;
  s.bytes_by_collective = t.by_collective;
  s.bytes_by_type = t.by_type;
  s.flops = t.flops;
  s.fp8_flops = t.fp8_flops;
  if (t.unknown_trip) {
    s.notes.push_back("a while loop has no known trip count: its body was counted once");
  }
  return s;
}

}  // namespace weave::tools
