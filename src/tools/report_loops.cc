// Windowed loops in a module, for the compile report (report.h): which `while`s are windowed einsum
// loops (the shared matcher windowed_einsum/windowed_loop.h, with a data-flow fallback for XLA-named bodies),
// their ring, wire type, GEMMs, activation cache and its consumers, and their bytes on the wire.
#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include "absl/strings/str_join.h"
#include "hlo/gemm_call.h"
#include "windowed_einsum/windowed_loop.h"
#include "sim/simulator.h"
#include "tools/report_internal.h"

namespace weave::tools {
namespace {

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

}  // namespace

// Analyses one while; returns false if it is not a windowed loop.
// The ring layout of the reduce-scatter loop (windowed_einsum/windowed_einsum_rs_ring.h): one trip; N-1
// synchronous collective-permutes, each sending one GEMM's partial block straight to its owner
// (it depends on a GEMM and on no other permute: XLA's layouts pass accumulators from permute to
// permute), each a permutation without fixed points; N GEMMs (one partial block per position).
// `dep_perm` / `dep_gemm`: whether a body value depends on a permute / a GEMM.
bool IsRingReduceScatter(const std::vector<HloInstruction*>& order,
                         std::unordered_map<const HloInstruction*, bool>& dep_perm,
                         std::unordered_map<const HloInstruction*, bool>& dep_gemm, int64_t gemms,
                         const HloInstruction& w) {
  std::optional<int64_t> trips = sim::WhileTripCount(w);
  if (!trips || *trips != 1) return false;
  std::vector<const HloInstruction*> permutes;
  for (const HloInstruction* i : order) {
    if (i->opcode() == HloOpcode::kCollectivePermute && i->operand_count() == 1) {
      permutes.push_back(i);
    } else if (IsPermute(*i)) {
      return false;  // async or guarded permutes belong to other layouts
    }
  }
  if (permutes.empty() || gemms != static_cast<int64_t>(permutes.size()) + 1) return false;
  for (const HloInstruction* p : permutes) {
    if (!dep_gemm[p->operand(0)] || dep_perm[p->operand(0)]) return false;
    // A permutation of its partitions that moves every one of them (the block goes to its owner).
    std::set<int64_t> from, to;
    for (const auto& [s, d] : p->source_target_pairs()) {
      if (s == d || !from.insert(s).second || !to.insert(d).second) return false;
    }
    if (from != to) return false;
  }
  return true;
}

bool AnalyzeLoop(const HloInstruction& w, WindowedStepScan* steps, WindowedLoopInfo* info) {
  if (!steps->IsWindowedEinsumLoop(w)) return false;
  const HloComputation* body = w.while_body();
  std::vector<const HloInstruction*> instrs;
  std::set<const HloComputation*> seen;
  CollectInline(body, &instrs, &seen);
  int64_t gemms = 0, fp8 = 0, permutes = 0;
  std::set<std::string> wire;
  Rings rings;
  int64_t first_device = -1;
  for (const HloInstruction* i : instrs) {
    if (IsDotOrGemmCall(*i)) {
      ++gemms;
      if (IsFp8GemmCustomCall(*i)) ++fp8;
    }
    if (IsPermute(*i)) {
      ++permutes;
      if (i->operand_count() > 0) {
        PrimitiveType t = FirstArrayType(i->operand(0)->shape());
        if (t != PrimitiveType::kInvalid) wire.insert(std::string(PrimitiveTypeName(t)));
      }
      for (const auto& [s, d] : i->source_target_pairs()) {
        rings.Union(s, d);
        if (first_device < 0) first_device = s;
      }
    }
  }

  // The shared structural matcher (windowed_einsum/windowed_loop.h) decides when it recognises the loop; the
  // data-flow test below is the fallback for layouts it does not know, only for loops whose body
  // carries XLA's name hint.
  std::string why_not;
  std::optional<WindowedLoop> matched =
      MatchWindowedLoop(&w, &why_not,
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
    dep_gemm[i] = g || IsDotOrGemmCall(*i);
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
    if (IsDotOrGemmCall(*i)) {
      for (const HloInstruction* o : i->operands()) ag_link = ag_link || dep_ring[o];
    }
  }
  if (!matched && !rs_link && !ag_link) return false;

  if (!matched) {
  info->layout = IsRingReduceScatter(order, dep_perm, dep_gemm, gemms, w)
                     ? "ring"
                     : "unrecognised";
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
        if (IsDotOrGemmCall(*y)) {
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

LoopScan ScanLoops(const HloModule& module) {
  LoopScan scan;
  WindowedStepScan steps;
  for (const HloComputation* c : module.MakeComputationPostOrder()) {
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      WindowedLoopInfo info;
      if (i->opcode() == HloOpcode::kWhile && AnalyzeLoop(*i, &steps, &info)) {
        scan.loops.emplace_back(i, std::move(info));
      }
    }
    for (AllToAllWindow& w : FindAllToAllWindows(*c)) scan.all_to_all.push_back(std::move(w));
  }
  return scan;
}

std::vector<WindowedLoopInfo> FindWindowedLoops(const HloModule& module) {
  return FindWindowedLoops(module, ScanLoops(module));
}

std::vector<WindowedLoopInfo> FindWindowedLoops(const HloModule& module, const LoopScan& scan) {
  std::vector<WindowedLoopInfo> out;
  TotalsCache cache(DefaultGroup(module, 0));
  for (const auto& [i, analysis] : scan.loops) {
    WindowedLoopInfo info = analysis;
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
  for (WindowedLoopInfo& info : AllToAllWindowLoops(scan.all_to_all, DefaultGroup(module, 0))) {
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace weave::tools
