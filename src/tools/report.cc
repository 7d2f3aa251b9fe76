// The compile report: module summaries, windowed loops, collectives left alone, JSON and table.
#include "tools/report.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/cost.h"
#include "gpu/windowed_loop.h"
#include "sim/simulator.h"
#include "tools/cli_util.h"

namespace weave::tools {
namespace {

constexpr const char* kFp8GemmTarget = "__cublas$lt$matmul$f8";

// Base opcode name for counting: -start forms under their plain name.
std::string CollectiveBaseName(const HloInstruction& instr) {
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
      for (const char* base : {"all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                               "ragged-all-to-all", "collective-permute",
                               "collective-broadcast"}) {
        if (instr.async_sugar == base) return base;
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

int64_t GroupSize(const HloInstruction& instr, int64_t default_group) {
  if (instr.replica_groups && !instr.replica_groups->groups.empty() &&
      !instr.replica_groups->groups[0].empty()) {
    return static_cast<int64_t>(instr.replica_groups->groups[0].size());
  }
  return std::max<int64_t>(default_group, 1);
}

bool IsPermute(const HloInstruction& i) {
  return i.opcode() == HloOpcode::kCollectivePermute ||
         i.opcode() == HloOpcode::kCollectivePermuteStart;
}

bool IsGemm(const HloInstruction& i) {
  return i.opcode() == HloOpcode::kDot || IsGemmCustomCall(i);
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

// Per-computation totals, loop-expanded.
struct Totals {
  int64_t bytes = 0;
  std::map<std::string, int64_t> by_collective, by_type, executed;
  double flops = 0, fp8_flops = 0;
  bool unknown_trip = false;

  void Add(const Totals& o, int64_t mult) {
    bytes += o.bytes * mult;
    for (const auto& [k, v] : o.by_collective) by_collective[k] += v * mult;
    for (const auto& [k, v] : o.by_type) by_type[k] += v * mult;
    for (const auto& [k, v] : o.executed) executed[k] += v * mult;
    flops += o.flops * static_cast<double>(mult);
    fp8_flops += o.fp8_flops * static_cast<double>(mult);
    unknown_trip = unknown_trip || o.unknown_trip;
  }
};

class TotalsCache {
 public:
  explicit TotalsCache(int64_t default_group) : default_group_(default_group) {}

  const Totals& Of(const HloComputation* c) {
    auto it = cache_.find(c);
    if (it != cache_.end()) return it->second;
    // Guard against (malformed) recursion: an in-progress computation counts as empty.
    cache_[c] = Totals{};
    Totals t;
    for (const HloInstruction* i : c->instructions()) t.Add(OfInstruction(*i), 1);
    cache_[c] = t;
    return cache_[c];
  }

  Totals OfInstruction(const HloInstruction& i) {
    Totals t;
    int64_t sent = CollectiveBytesSent(i, default_group_);
    std::string base = CollectiveBaseName(i);
    if (!base.empty()) {
      t.executed[base] += 1;
      t.bytes += sent;
      t.by_collective[base] += sent;
      const HloInstruction* src = i.operand_count() > 0 ? i.operand(0) : nullptr;
      PrimitiveType ty = src ? FirstArrayType(src->shape()) : PrimitiveType::kInvalid;
      if (ty != PrimitiveType::kInvalid) t.by_type[std::string(PrimitiveTypeName(ty))] += sent;
    }
    double f = GemmFlops(i);
    t.flops += f;
    if (IsFp8GemmCustomCall(i)) t.fp8_flops += f;
    if (i.opcode() == HloOpcode::kWhile && i.called_computations().size() >= 2) {
      std::optional<int64_t> trips = sim::WhileTripCount(i);
      int64_t n = trips.value_or(1);
      if (!trips) t.unknown_trip = true;
      t.Add(Of(i.while_body()), std::max<int64_t>(n, 0));
    } else if (i.opcode() == HloOpcode::kConditional) {
      const Totals* best = nullptr;
      for (const HloComputation* b : i.called_computations()) {
        const Totals& bt = Of(b);
        if (!best || bt.bytes > best->bytes || (bt.bytes == best->bytes && bt.flops > best->flops)) {
          best = &bt;
        }
      }
      if (best) t.Add(*best, 1);
    } else if (DescendsInto(i)) {
      for (const HloComputation* c : i.called_computations()) t.Add(Of(c), 1);
    }
    return t;
  }

 private:
  int64_t default_group_;
  std::unordered_map<const HloComputation*, Totals> cache_;
};

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

// Union-find over device ids.
struct Rings {
  std::map<int64_t, int64_t> parent;
  int64_t Find(int64_t x) {
    if (!parent.count(x)) parent[x] = x;
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  }
  void Union(int64_t a, int64_t b) { parent[Find(a)] = Find(b); }
  int64_t SizeOf(int64_t x) {
    int64_t root = Find(x), n = 0;
    std::vector<int64_t> keys;
    for (const auto& kv : parent) keys.push_back(kv.first);
    for (int64_t k : keys) n += Find(k) == root ? 1 : 0;
    return n;
  }
};

// Analyses one while; returns false if it is not a windowed loop.
bool AnalyzeLoop(const HloInstruction& w, WindowedLoopInfo* info) {
  if (w.opcode() != HloOpcode::kWhile || w.called_computations().size() < 2) return false;
  const HloComputation* body = w.while_body();
  std::vector<const HloInstruction*> instrs;
  std::set<const HloComputation*> seen;
  CollectInline(body, &instrs, &seen);
  int64_t gemms = 0, fp8 = 0, permutes = 0;
  std::set<std::string> wire;
  Rings rings;
  int64_t first_device = -1;
  for (const HloInstruction* i : instrs) {
    if (IsGemm(*i)) {
      ++gemms;
      if (IsFp8GemmCustomCall(*i)) ++fp8;
    }
    if (IsPermute(*i)) {
      ++permutes;
      if (i->operand_count() > 0) {
        PrimitiveType t = FirstArrayType(i->operand(0)->shape());
        if (t != PrimitiveType::kInvalid) wire.insert(std::string(PrimitiveTypeName(t)));
      }
      for (const auto& [s, d] : i->source_target_pairs) {
        rings.Union(s, d);
        if (first_device < 0) first_device = s;
      }
    }
  }
  if (gemms == 0 || permutes == 0) return false;

  // The shared structural matcher (gpu/windowed_loop.h) decides when it recognises the loop; the
  // data-flow test below is the fallback for layouts it does not know, only for loops whose body
  // carries XLA's name hint.
  std::string why_not;
  std::optional<WindowedLoop> matched =
      MatchWindowedLoop(const_cast<HloInstruction*>(&w), &why_not,
                        WindowedLoopMatchOptions{/*gemm_custom_calls=*/true});
  if (matched) {
    info->name = w.name();
    info->body = body->name();
    info->kind = std::string(WindowedLoopKindName(matched->kind));
    info->trip_count = matched->trip_count;
    info->ring_size = matched->ring_size;
    info->dots = gemms;
    info->fp8_gemms = fp8;
    info->unrolled = matched->layout != WindowedLoopLayout::kRolled;
    info->layout = std::string(WindowedLoopLayoutName(matched->layout));
    info->wire_type = absl::StrJoin(wire, "+");
    if (matched->cache_index) info->cache_index = *matched->cache_index;
  } else if (body->name().rfind("windowed_dot_general", 0) != 0 &&
             body->name().rfind("unrolled_windowed_dot_general", 0) != 0) {  // XLA's unrolled name
    return false;
  }

  // Data flow inside the body (its own instructions; callees are summarised by their caller).
  std::unordered_map<const HloInstruction*, bool> dep_perm, dep_gemm;
  auto holds_permute = [&](const HloInstruction* i) {
    if (IsPermute(*i)) return true;
    if (!DescendsInto(*i)) return false;
    std::vector<const HloInstruction*> inner;
    std::set<const HloComputation*> s2;
    for (const HloComputation* c : i->called_computations()) CollectInline(c, &inner, &s2);
    return std::any_of(inner.begin(), inner.end(), [](const HloInstruction* x) { return IsPermute(*x); });
  };
  bool rs_link = false;
  std::vector<HloInstruction*> order = body->MakeInstructionPostOrder();
  for (const HloInstruction* i : order) {
    bool p = false, g = false;
    for (const HloInstruction* o : i->operands()) {
      p = p || dep_perm[o];
      g = g || dep_gemm[o];
    }
    bool is_perm = holds_permute(i);
    if (is_perm && g) rs_link = true;
    dep_perm[i] = p || is_perm;
    dep_gemm[i] = g || IsGemm(*i);
  }
  // Tuple elements carried around the ring: root operands that depend on a permute.
  std::set<int64_t> ring_index;
  const HloInstruction* root = body->root();
  if (root && root->opcode() == HloOpcode::kTuple) {
    for (int64_t k = 0; k < root->operand_count(); ++k) {
      if (dep_perm[root->operand(k)]) ring_index.insert(k);
    }
  }
  std::unordered_map<const HloInstruction*, bool> dep_ring;
  bool ag_link = false;
  for (const HloInstruction* i : order) {
    bool r = dep_perm[i];
    if (i->opcode() == HloOpcode::kGetTupleElement && i->operand_count() == 1 &&
        i->operand(0)->opcode() == HloOpcode::kParameter && ring_index.count(i->tuple_index)) {
      r = true;
    }
    for (const HloInstruction* o : i->operands()) r = r || dep_ring[o];
    dep_ring[i] = r;
    if (IsGemm(*i)) {
      for (const HloInstruction* o : i->operands()) ag_link = ag_link || dep_ring[o];
    }
  }
  if (!matched && !rs_link && !ag_link) return false;

  if (!matched) {
  info->layout = "unrecognised";
  info->name = w.name();
  info->body = body->name();
  info->kind = rs_link ? "reduce-scatter" : "all-gather";
  std::optional<int64_t> trips = sim::WhileTripCount(w);
  info->trip_count = trips.value_or(-1);
  info->dots = gemms;
  info->fp8_gemms = fp8;
  info->unrolled = gemms > 1;
  info->wire_type = absl::StrJoin(wire, "+");
  int64_t ring = first_device >= 0 ? rings.SizeOf(first_device) : 0;
  if (rs_link && trips && *trips > 0) ring = std::max(ring, *trips * gemms);
  info->ring_size = ring;
  }

  // Without the matcher's cache index: the cache is the element the body fills with a chain of
  // dynamic-update-slices of values that are not GEMM results (the output buffer's updates are).
  if (info->cache_index < 0 && info->kind == "all-gather" && root &&
      root->opcode() == HloOpcode::kTuple) {
    for (int64_t k = 0; k < root->operand_count() && info->cache_index < 0; ++k) {
      const HloInstruction* x = root->operand(k);
      int64_t updates = 0;
      bool from_gemm = false;
      while (x->opcode() == HloOpcode::kDynamicUpdateSlice && x->operand_count() >= 2) {
        ++updates;
        from_gemm = from_gemm || dep_gemm[x->operand(1)];
        x = x->operand(0);
      }
      if (updates > 0 && !from_gemm && x->opcode() == HloOpcode::kGetTupleElement &&
          x->tuple_index == k && x->operand(0)->opcode() == HloOpcode::kParameter) {
        info->cache_index = k;
      }
    }
  }

  // Cache consumers: GEMMs outside reading the cache element (or, when it is unknown, tuple
  // elements >= 5 that are arrays of rank >= 1).
  std::set<const HloInstruction*> consumers;
  for (const HloInstruction* u : w.users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) continue;
    if (info->cache_index >= 0 ? u->tuple_index != info->cache_index : u->tuple_index < 5) {
      continue;
    }
    if (info->cache_index < 0 && root && root->opcode() == HloOpcode::kTuple &&
        u->tuple_index < root->operand_count()) {
      // An output the body fills with GEMM results (e.g. a consumer computed in the ring,
      // windowed-einsum-consumers-in-ring) is not a cache.
      const HloInstruction* x = root->operand(u->tuple_index);
      bool from_gemm = false;
      while (x->opcode() == HloOpcode::kDynamicUpdateSlice && x->operand_count() >= 2) {
        from_gemm = from_gemm || dep_gemm[x->operand(1)];
        x = x->operand(0);
      }
      if (from_gemm) continue;
    }
    if (!u->shape().IsArray() || u->shape().rank() == 0) continue;
    std::vector<std::pair<const HloInstruction*, int>> stack{{u, 0}};
    std::set<const HloInstruction*> visited;
    while (!stack.empty()) {
      auto [x, depth] = stack.back();
      stack.pop_back();
      if (!visited.insert(x).second) continue;
      for (const HloInstruction* y : x->users()) {
        if (IsGemm(*y)) {
          consumers.insert(y);
          continue;
        }
        switch (y->opcode()) {
          case HloOpcode::kConvert: case HloOpcode::kMultiply: case HloOpcode::kDivide:
          case HloOpcode::kBroadcast: case HloOpcode::kBitcast: case HloOpcode::kReshape:
          case HloOpcode::kTranspose: case HloOpcode::kCopy: case HloOpcode::kSlice:
          case HloOpcode::kDynamicSlice: case HloOpcode::kPad: case HloOpcode::kSelect:
          case HloOpcode::kGetTupleElement:
            if (depth < 8) stack.push_back({y, depth + 1});
            break;
          default:
            break;
        }
      }
    }
  }
  info->cache_consumers = static_cast<int64_t>(consumers.size());
  for (const HloInstruction* c : consumers) info->cache_consumers_fp8 += IsFp8GemmCustomCall(*c);
  return true;
}

std::string Pct(double before, double after) {
  if (before == 0) return after == 0 ? "" : "new";
  return absl::StrFormat("%+.1f%%", 100.0 * (after - before) / before);
}

std::string FormatFlops(double f) {
  if (f >= 1e12) return absl::StrFormat("%.3f TFLOP", f / 1e12);
  if (f >= 1e9) return absl::StrFormat("%.3f GFLOP", f / 1e9);
  if (f >= 1e6) return absl::StrFormat("%.3f MFLOP", f / 1e6);
  if (f >= 1e3) return absl::StrFormat("%.1f kFLOP", f / 1e3);
  return absl::StrFormat("%.0f FLOP", f);
}

}  // namespace

bool IsGemmCustomCall(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kCustomCall) return false;
  const std::string& t = instr.custom_call_target;
  return t == kFp8GemmTarget || t == "__cublas$lt$matmul" || t == "__cublas$gemm";
}

bool IsFp8GemmCustomCall(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.custom_call_target == kFp8GemmTarget;
}

int64_t CollectiveBytesSent(const HloInstruction& instr, int64_t default_group) {
  std::string base = CollectiveBaseName(instr);
  if (base.empty() || instr.operand_count() == 0) return 0;
  if (IsPermute(instr) && instr.source_target_pairs.empty()) return 0;
  // The shared accounting of analysis/cost.h (the same numbers `weave stats` prints); it has no
  // formula for collective-broadcast, and takes the module's sizes for empty replica groups.
  if (std::optional<CollectiveCost> c = CollectiveBytes(instr); c.has_value()) return c->bytes;
  int64_t g = GroupSize(instr, default_group), operand_bytes = 0;
  for (const HloInstruction* o : instr.operands()) operand_bytes += ArrayBytes(o->shape());
  return (g - 1) * operand_bytes / g;
}

double GemmFlops(const HloInstruction& instr) {
  if (instr.opcode() == HloOpcode::kDot) return static_cast<double>(DotFlops(instr));
  if (!IsGemmCustomCall(instr) || instr.operand_count() < 2) return 0;
  const Shape& out = instr.shape().IsTuple() && !instr.shape().tuple_shapes.empty()
                         ? instr.shape().tuple_shapes[0]
                         : instr.shape();
  const Shape& lhs = instr.operand(0)->shape();
  if (!out.IsArray() || !lhs.IsArray() || lhs.rank() == 0) return 0;
  std::vector<int64_t> contracting;
  nlohmann::json cfg = nlohmann::json::parse(instr.backend_config, nullptr, false);
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
  if (contracting.empty()) contracting.push_back(lhs.rank() - 1);
  double k = 1;
  for (int64_t d : contracting) {
    if (d >= 0 && d < lhs.rank()) k *= static_cast<double>(lhs.dims[d]);
  }
  return 2.0 * static_cast<double>(out.ElementCount()) * k;
}

ModuleSummary SummarizeModule(const HloModule& module, int64_t num_partitions) {
  ModuleSummary s;
  for (const HloComputation* c : module.computations()) {
    s.instructions += c->instruction_count();
    for (const HloInstruction* i : c->instructions()) {
      std::string base = CollectiveBaseName(*i);
      if (!base.empty()) s.collectives[base] += 1;
      if (i->opcode() == HloOpcode::kDot) ++s.dots;
      if (IsFp8GemmCustomCall(*i)) ++s.fp8_gemms;
      WindowedLoopInfo info;
      if (i->opcode() == HloOpcode::kWhile && AnalyzeLoop(*i, &info)) ++s.windowed_loops;
    }
  }
  s.windowed_loops += static_cast<int64_t>(FindAllToAllWindowLoops(module, 1).size());
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

std::vector<WindowedLoopInfo> FindWindowedLoops(const HloModule& module) {
  std::vector<WindowedLoopInfo> out;
  TotalsCache cache(DefaultGroup(module, 0));
  for (const HloComputation* c : module.MakeComputationPostOrder()) {
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      WindowedLoopInfo info;
      if (i->opcode() == HloOpcode::kWhile && AnalyzeLoop(*i, &info)) {
        Totals t = cache.OfInstruction(*i);
        info.bytes_sent = t.bytes;
        auto it = t.executed.find("collective-permute");
        info.permutes = it == t.executed.end() ? 0 : it->second;
        // The shift after a reduce-scatter loop belongs to it.
        for (const HloInstruction* g : i->users()) {
          for (const HloInstruction* p : g->users()) {
            if (g->opcode() == HloOpcode::kGetTupleElement && IsPermute(*p)) {
              info.bytes_sent += CollectiveBytesSent(*p, DefaultGroup(module, 0));
              info.permutes += 1;
            }
          }
        }
        out.push_back(std::move(info));
      }
    }
  }
  for (WindowedLoopInfo& info : FindAllToAllWindowLoops(module, DefaultGroup(module, 0))) {
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<LeftAlone> FindCollectivesLeftAlone(const HloModule& module,
                                                const std::vector<Remark>& remarks) {
  // Computations that belong to windowed loops.
  std::set<const HloComputation*> in_loops;
  std::set<const HloInstruction*> loop_shifts;  // permutes of a windowed loop's results
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      WindowedLoopInfo info;
      if (i->opcode() == HloOpcode::kWhile && AnalyzeLoop(*i, &info)) {
        for (const HloInstruction* g : i->users()) {
          if (g->opcode() != HloOpcode::kGetTupleElement) continue;
          for (const HloInstruction* p : g->users()) {
            if (IsPermute(*p)) loop_shifts.insert(p);
          }
        }
        std::vector<const HloInstruction*> ignored;
        CollectInline(i->while_body(), &ignored, &in_loops);
        CollectInline(i->while_condition(), &ignored, &in_loops);
      }
    }
  }
  // The chunk exchanges of all-to-all windowed einsums are part of their window.
  for (const HloInstruction* a : AllToAllWindowExchanges(module)) loop_shifts.insert(a);
  // Computations an async-start wraps: their collective is listed as the async-start.
  std::set<const HloComputation*> wrapped;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() != HloOpcode::kAsyncStart || !i->async_sugar.empty()) continue;
      for (const HloComputation* w : i->called_computations()) wrapped.insert(w);
    }
  }
  int64_t default_group = DefaultGroup(module, 0);
  std::vector<LeftAlone> out;
  for (const HloComputation* c : module.MakeComputationPostOrder()) {
    if (in_loops.count(c) || wrapped.count(c)) continue;
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      std::string base = CollectiveBaseName(*i);
      const HloInstruction* wrapped_root = nullptr;
      if (base.empty() && i->opcode() == HloOpcode::kAsyncStart && i->async_sugar.empty() &&
          !i->called_computations().empty() && i->called_computations()[0]->root() != nullptr) {
        wrapped_root = i->called_computations()[0]->root();
        base = CollectiveBaseName(*wrapped_root);
      }
      if (base.empty() || loop_shifts.count(i)) continue;
      LeftAlone la;
      la.name = i->name();
      la.opcode = std::string(HloOpcodeString(i->opcode()));
      la.shape = i->shape().ToString(false);
      la.bytes_sent = CollectiveBytesSent(wrapped_root ? *wrapped_root : *i, default_group);
      la.reason = ReasonFromRemarks(*i, remarks);
      if (la.reason.empty() && wrapped_root != nullptr) {
        la.reason = ReasonFromRemarks(*wrapped_root, remarks);
      }
      if (la.reason.empty()) la.reason = StructuralReason(*i, base);
      out.push_back(std::move(la));
    }
  }
  return out;
}

const std::vector<std::string>& RewriteNames() {
  static const std::vector<std::string> names = {"windowed", "fp8-gemm", "fp8-wire", "cache",
                                                 "dot-merger", "windowed-in-ring",
                                                 "windowed-ring-rs"};
  return names;
}

void AnalyzeCompile(const HloModule& before, const HloModule& after, CompileReport* report) {
  report->module = after.name();
  report->before = SummarizeModule(before, report->num_partitions);
  report->after = SummarizeModule(after, report->num_partitions);
  report->loops = FindWindowedLoops(after);
  report->left_alone = FindCollectivesLeftAlone(after, report->remarks);
  auto applied_by = [&](const std::string& pass) {
    return std::any_of(report->remarks.begin(), report->remarks.end(),
                       [&](const Remark& r) { return r.applied && r.pass == pass; });
  };
  auto fp8_bytes = [](const ModuleSummary& s) {
    int64_t n = 0;
    for (const auto& [t, b] : s.bytes_by_type) {
      std::optional<PrimitiveType> pt = ParsePrimitiveType(t);
      if (pt && IsFp8(*pt)) n += b;
    }
    return n;
  };
  auto cache_users = [](const std::vector<WindowedLoopInfo>& loops) {
    int64_t n = 0;
    for (const auto& l : loops) n += l.cache_consumers;
    return n;
  };
  std::vector<WindowedLoopInfo> loops_before = FindWindowedLoops(before);
  report->fired["windowed"] = applied_by("windowed-einsum-decomposer") ||
                              applied_by("all-to-all-windowed-einsum") ||
                              applied_by("windowed-einsum-handler") ||
                              report->after.windowed_loops > report->before.windowed_loops;
  report->fired["fp8-gemm"] = report->after.fp8_gemms > report->before.fp8_gemms;
  int64_t fb = fp8_bytes(report->before), fa = fp8_bytes(report->after);
  double share_b = report->before.bytes_sent ? double(fb) / double(report->before.bytes_sent) : 0;
  double share_a = report->after.bytes_sent ? double(fa) / double(report->after.bytes_sent) : 0;
  report->fired["fp8-wire"] = applied_by("collective-quantizer") || share_a > share_b;
  // Also when the loop whose cache serves the all-gathers lost its dots to the cleanup (its own
  // result unread: only the ring and the cache remain, no longer a windowed loop in the table).
  const bool cache_remark = std::any_of(
      report->remarks.begin(), report->remarks.end(), [](const Remark& r) {
        return r.applied && r.pass == "windowed-einsum-handler" &&
               r.message.rfind("all-gather replaced by the activation cache", 0) == 0;
      });
  report->fired["cache"] = cache_users(report->loops) > cache_users(loops_before) || cache_remark;
  report->fired["dot-merger"] = applied_by("dot-merger");
  // Every consumer of an all-gather computed in the ring (windowed-einsum-consumers-in-ring), and
  // reduce-scatter loops in the ring layout (N-1 transfers; spmd/windowed_einsum_rs_ring.h).
  report->fired["windowed-in-ring"] = applied_by("windowed-einsum-consumers-in-ring");
  bool ring_rs = false;
  for (const WindowedLoopInfo& l : report->loops) {
    ring_rs |= l.body.find("windowed_dot_general_body_rs_ring") != std::string::npos;
  }
  report->fired["windowed-ring-rs"] = ring_rs;
}

std::string FormatBytes(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  if (b < 1024.0 * 1024) return absl::StrFormat("%.1f KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024));
  return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024 * 1024));
}

nlohmann::json ReportToJson(const CompileReport& r) {
  using nlohmann::json;
  auto summary = [](const ModuleSummary& s) {
    json j;
    j["instructions"] = s.instructions;
    j["bytes_sent_per_partition"] = s.bytes_sent;
    j["bytes_by_collective"] = s.bytes_by_collective;
    j["bytes_by_type"] = s.bytes_by_type;
    j["collectives"] = s.collectives;
    j["flops_per_partition"] = s.flops;
    j["fp8_flops_per_partition"] = s.fp8_flops;
    j["dots"] = s.dots;
    j["fp8_gemms"] = s.fp8_gemms;
    j["windowed_loops"] = s.windowed_loops;
    j["notes"] = s.notes;
    return j;
  };
  json j;
  j["input"] = r.input;
  j["output"] = r.output;
  j["module"] = r.module;
  j["num_partitions"] = r.num_partitions;
  j["num_partitions_inferred"] = r.num_partitions_inferred;
  j["status"] = r.status;
  j["exit_code"] = r.exit_code;
  j["pipeline"] = r.pipeline;
  json passes = json::array();
  for (const PassRecord& p : r.passes) {
    passes.push_back({{"pass", p.pass},
                      {"seconds", p.seconds},
                      {"changed", p.changed},
                      {"instructions_before", p.instructions_before},
                      {"instructions_after", p.instructions_after},
                      {"remarks_applied", p.remarks_applied},
                      {"remarks_missed", p.remarks_missed}});
  }
  j["passes"] = passes;
  j["before"] = summary(r.before);
  j["after"] = summary(r.after);
  json loops = json::array();
  for (const WindowedLoopInfo& l : r.loops) {
    loops.push_back({{"name", l.name},
                     {"body", l.body},
                     {"kind", l.kind},
                     {"ring_size", l.ring_size},
                     {"trip_count", l.trip_count},
                     {"unrolled", l.unrolled},
                     {"layout", l.layout},
                     {"cache_index", l.cache_index},
                     {"wire_type", l.wire_type},
                     {"permutes", l.permutes},
                     {"dots", l.dots},
                     {"fp8_gemms", l.fp8_gemms},
                     {"cache_consumers", l.cache_consumers},
                     {"cache_consumers_fp8", l.cache_consumers_fp8},
                     {"bytes_sent_per_partition", l.bytes_sent}});
    if (l.kind == "all-to-all") loops.back()["chunks"] = l.chunks;
  }
  j["windowed_loops"] = loops;
  json left = json::array();
  for (const LeftAlone& l : r.left_alone) {
    left.push_back({{"name", l.name},
                    {"opcode", l.opcode},
                    {"shape", l.shape},
                    {"bytes_sent_per_partition", l.bytes_sent},
                    {"reason", l.reason}});
  }
  j["collectives_left_alone"] = left;
  json remarks = json::array();
  for (const Remark& m : r.remarks) {
    json rm = {{"pass", m.pass},
               {"location", m.location},
               {"applied", m.applied},
               {"kind", m.applied ? "applied" : m.analysis ? "analysis" : "missed"},
               {"message", m.message}};
    if (!m.about.empty()) rm["about"] = m.about;
    remarks.push_back(rm);
  }
  j["remarks"] = remarks;
  j["fired"] = r.fired;
  j["cost_gate"] = CostGateToJson(r.cost_gate);
  json num;
  num["requested"] = r.numerics.requested;
  num["ran"] = r.numerics.ran;
  if (r.numerics.ran) {
    num["pass"] = r.numerics.pass;
    num["max_abs_error"] = r.numerics.max_abs_error;
    num["max_rel_error"] = r.numerics.max_rel_error;
    num["mismatches"] = r.numerics.mismatches;
  }
  num["seed"] = r.numerics.seed;
  num["num_partitions"] = r.numerics.num_partitions;
  num["estimated_bytes"] = r.numerics.estimated_bytes;
  if (!r.numerics.skipped.empty()) num["skipped"] = r.numerics.skipped;
  if (!r.numerics.scaled_copy.empty()) num["scaled_copy"] = r.numerics.scaled_copy;
  if (!r.numerics.reference.empty()) num["reference"] = r.numerics.reference;
  j["numerics"] = num;
  if (!r.input_form.empty()) j["input_form"] = r.input_form;
  j["partitioned_from_global"] = r.partitioned_from_global;
  if (r.sim.requested) {
    json s;
    s["system"] = r.sim.system;
    s["ran"] = r.sim.ran;
    if (r.sim.ran) {
      s["before_us"] = r.sim.before_us;
      s["after_us"] = r.sim.after_us;
      s["before_exposed_comm_us"] = r.sim.before_exposed_comm_us;
      s["after_exposed_comm_us"] = r.sim.after_exposed_comm_us;
      s["speedup"] = r.sim.after_us > 0 ? r.sim.before_us / r.sim.after_us : 0.0;
    }
    if (!r.sim.error.empty()) s["error"] = r.sim.error;
    j["simulation"] = s;
  }
  return j;
}

std::string ReportToTable(const CompileReport& r, int max_rows) {
  std::string o;
  absl::StrAppendFormat(&o, "weave compile: %s -> %s  (module %s, %s)\n",
                        r.input, r.output.empty() ? "(not written)" : r.output, r.module,
                        r.num_partitions_inferred
                            ? absl::StrCat(r.num_partitions,
                                           " partitions: not in the header, inferred from the "
                                           "device ids of its collectives")
                            : CountOf(r.num_partitions, "partition", "partitions"));
  if (r.partitioned_from_global) {
    absl::StrAppend(&o, "input: a global module, partitioned by Weave's SPMD pipeline first; "
                        "'before' below is the partitioned module\n");
  }
  if (!r.passes.empty()) {
    std::vector<std::string> names;
    for (const PassRecord& p : r.passes) names.push_back(p.changed ? p.pass : p.pass + "(-)");
    absl::StrAppend(&o, "pipeline: ", absl::StrJoin(names, " > "), "   ((-) = no change)\n");
  }

  absl::StrAppendFormat(&o, "\nWindowed loops: %d\n", r.loops.size());
  if (!r.loops.empty()) {
    absl::StrAppendFormat(&o, "  %-28s %-15s %4s %5s %-10s %4s %4s %11s %12s\n", "loop", "kind",
                          "ring", "trips", "wire", "dots", "fp8", "cache users", "sent/part");
    for (const WindowedLoopInfo& l : r.loops) {
      std::string cache =
          l.cache_consumers ? absl::StrFormat("%d (%d fp8)", l.cache_consumers,
                                              l.cache_consumers_fp8)
                            : "0";
      absl::StrAppendFormat(&o, "  %-28s %-15s %4d %5s %-10s %4d %4d %11s %12s\n", l.name, l.kind,
                            l.ring_size,
                            l.kind == "all-to-all" ? absl::StrCat(l.chunks, "ch")
                            : l.trip_count < 0     ? "?"
                                                   : absl::StrCat(l.trip_count),
                            l.wire_type, l.dots, l.fp8_gemms, cache, FormatBytes(l.bytes_sent));
    }
  }

  if (std::any_of(r.loops.begin(), r.loops.end(),
                  [](const WindowedLoopInfo& l) { return l.kind == "all-to-all"; })) {
    absl::StrAppend(&o, "  (all-to-all rows: ring = group size, trips = chunks, each one "
                        "all-to-all and one partial GEMM on its own stream)\n");
  }
  absl::StrAppendFormat(&o, "\nCollectives left alone: %d\n", r.left_alone.size());
  int shown = 0;
  for (const LeftAlone& l : r.left_alone) {
    if (max_rows > 0 && shown >= max_rows) {
      absl::StrAppendFormat(&o, "  ... %d more (see --report)\n",
                            static_cast<int>(r.left_alone.size()) - shown);
      break;
    }
    absl::StrAppendFormat(&o, "  %-28s %-18s %s\n      why: %s\n", l.name, l.opcode, l.shape,
                          l.reason);
    ++shown;
  }

  absl::StrAppend(&o, "\nPer partition                        before          after   change\n");
  auto row = [&](const std::string& label, int64_t b, int64_t a) {
    absl::StrAppendFormat(&o, "  %-30s %12s %14s   %s\n", label, FormatBytes(b), FormatBytes(a),
                          Pct(static_cast<double>(b), static_cast<double>(a)));
  };
  row("bytes sent", r.before.bytes_sent, r.after.bytes_sent);
  std::set<std::string> keys;
  for (const auto& kv : r.before.bytes_by_collective) keys.insert(kv.first);
  for (const auto& kv : r.after.bytes_by_collective) keys.insert(kv.first);
  auto get = [](const std::map<std::string, int64_t>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? int64_t{0} : it->second;
  };
  for (const std::string& k : keys) {
    row("  " + k, get(r.before.bytes_by_collective, k), get(r.after.bytes_by_collective, k));
  }
  keys.clear();
  for (const auto& kv : r.before.bytes_by_type) keys.insert(kv.first);
  for (const auto& kv : r.after.bytes_by_type) keys.insert(kv.first);
  for (const std::string& k : keys) {
    row("  as " + k, get(r.before.bytes_by_type, k), get(r.after.bytes_by_type, k));
  }
  absl::StrAppendFormat(&o, "  %-30s %12s %14s   %s\n", "FLOPs", FormatFlops(r.before.flops),
                        FormatFlops(r.after.flops), Pct(r.before.flops, r.after.flops));
  absl::StrAppendFormat(&o, "  %-30s %12s %14s\n", "  in FP8 GEMMs",
                        FormatFlops(r.before.fp8_flops), FormatFlops(r.after.fp8_flops));
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "FP8 GEMMs (custom calls)",
                        r.before.fp8_gemms, r.after.fp8_gemms);
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "dots", r.before.dots, r.after.dots);
  absl::StrAppendFormat(&o, "  %-30s %12d %14d\n", "instructions", r.before.instructions,
                        r.after.instructions);
  for (const std::string& n : r.after.notes) absl::StrAppend(&o, "  note: ", n, "\n");
  if (r.after.fp8_gemms > 0) {
    absl::StrAppend(&o, "  note: FP8 GEMM FLOPs count the custom calls' operands as padded to "
                        "multiples of 16 (the work cuBLASLt does)\n");
  }

  if (r.sim.requested) {
    if (r.sim.ran) {
      absl::StrAppendFormat(&o, "  %-30s %9.1f us %11.1f us   %s\n",
                            absl::StrCat("est. time (", r.sim.system, ")"), r.sim.before_us,
                            r.sim.after_us, Pct(r.sim.before_us, r.sim.after_us));
      absl::StrAppendFormat(&o, "  %-30s %9.1f us %11.1f us\n", "  exposed communication",
                            r.sim.before_exposed_comm_us, r.sim.after_exposed_comm_us);
    } else {
      absl::StrAppend(&o, "  estimated time: not available: ", r.sim.error, "\n");
    }
  }

  absl::StrAppend(&o, CostGateToTable(r.cost_gate, max_rows));

  std::vector<std::string> fired;
  for (const auto& [k, v] : r.fired) fired.push_back(absl::StrCat(k, v ? "=yes" : "=no"));
  absl::StrAppend(&o, "\nRewrites: ", absl::StrJoin(fired, "  "), "\n");

  if (r.numerics.requested) {
    if (r.numerics.ran) {
      absl::StrAppendFormat(
          &o, "Numerics: %s on %s, seed %d (max abs error %.3g, max rel error %.3g, "
              "%d mismatches)\n",
          r.numerics.pass ? "PASS" : "FAIL",
          CountOf(r.numerics.num_partitions, "partition", "partitions"), r.numerics.seed,
          r.numerics.max_abs_error, r.numerics.max_rel_error, r.numerics.mismatches);
      if (!r.numerics.scaled_copy.empty()) {
        absl::StrAppend(&o, "  on a scaled copy: ", r.numerics.scaled_copy, "\n");
      }
      if (!r.numerics.reference.empty()) {
        absl::StrAppend(&o, "  compared with ", r.numerics.reference, "\n");
      }
    } else {
      absl::StrAppend(&o, "Numerics: skipped: ", r.numerics.skipped, "\n");
    }
  } else {
    absl::StrAppend(&o, "Numerics: not checked (use --verify-numerics)\n");
  }

  int64_t applied = 0, missed = 0, analysis = 0;
  for (const Remark& m : r.remarks) (m.applied ? applied : m.analysis ? analysis : missed)++;
  absl::StrAppendFormat(&o, "\nRemarks: %d (%d applied, %d missed, %d analysis)\n",
                        r.remarks.size(), applied, missed, analysis);
  shown = 0;
  // Per pass counts, then the missed remarks (why something did not fire), then the applied
  // ones, each in pipeline order and limited to max_rows.
  std::vector<std::string> order;
  std::map<std::string, std::pair<int64_t, int64_t>> per_pass;
  for (const Remark& m : r.remarks) {
    if (!per_pass.count(m.pass)) order.push_back(m.pass);
    auto& counts = per_pass[m.pass];  // created here, so each pass is listed once
    if (m.applied) ++counts.first;
    if (m.missed()) ++counts.second;
  }
  for (const std::string& p : order) {
    absl::StrAppendFormat(&o, "  %-32s %4d applied %4d missed\n", p, per_pass[p].first,
                          per_pass[p].second);
  }
  for (int kind = 0; kind < 2; ++kind) {
    const bool want_applied = kind == 1;
    int64_t total = want_applied ? applied : missed;
    if (total == 0) continue;
    absl::StrAppend(&o, want_applied ? "  applied:\n" : "  missed (why something did not fire):\n");
    shown = 0;
    for (const Remark& m : r.remarks) {
      if (m.applied != want_applied || m.analysis) continue;
      if (max_rows > 0 && shown >= max_rows) break;
      absl::StrAppend(&o, "    ", m.ToString(), "\n");
      ++shown;
    }
    if (shown < total) {
      absl::StrAppendFormat(&o, "    ... %d more (see --report, or -v)\n", total - shown);
    }
  }
  return o;
}

}  // namespace weave::tools
