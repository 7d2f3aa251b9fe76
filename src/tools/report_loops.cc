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

namespace {

// What a loop body holds (its own instructions and those it runs inline): its GEMMs (the fp8
// ones among them), its permutes, the element types they send (the wire types) and the rings
// their source_target_pairs form.
struct BodyCensus {
  int64_t gemms = 0, fp8 = 0, permutes = 0;
  std::set<std::string> wire;
  Rings rings;
  int64_t first_device = -1;  // the first source device of the first permute; -1 without one
};

// Counts the GEMMs and permutes of `instrs` and joins the permutes' devices into rings.
BodyCensus TakeBodyCensus(const std::vector<const HloInstruction*>& instrs) {
  BodyCensus census;
  for (const HloInstruction* i : instrs) {
    if (IsDotOrGemmCall(*i)) {
      ++census.gemms;
      if (IsFp8GemmCustomCall(*i)) ++census.fp8;
    }
    if (IsPermute(*i)) {
      ++census.permutes;
      if (i->operand_count() > 0) {
        PrimitiveType t = FirstArrayType(i->operand(0)->shape());
        if (t != PrimitiveType::kInvalid) census.wire.insert(std::string(PrimitiveTypeName(t)));
      }
      for (const auto& [s, d] : i->source_target_pairs()) {
        census.rings.Union(s, d);
        if (census.first_device < 0) census.first_device = s;
      }
    }
  }
  return census;
}

// Fills `info` from the shared matcher's description of the loop `w` and the body's census.
void DescribeMatchedLoop(const HloInstruction& w, const HloComputation* body,
                         const WindowedLoop& matched, const BodyCensus& census,
                         WindowedLoopInfo* info) {
  info->name = w.name();
  info->body = body->name();
  info->kind = std::string(WindowedLoopKindName(matched.kind));
  info->trip_count = matched.trip_count;
  info->ring_size = matched.ring_size;
  info->dots = census.gemms;
  info->fp8_gemms = census.fp8;
  info->unrolled = matched.layout != WindowedLoopLayout::kRolled;
  info->layout = std::string(WindowedLoopLayoutName(matched.layout));
  info->wire_type = absl::StrJoin(census.wire, "+");
  if (matched.cache_index) info->cache_index = *matched.cache_index;
}

// Whether the body carries XLA's name hint for a windowed einsum loop (rolled or unrolled).
bool HasWindowedDotGeneralName(const HloComputation* body) {
  return body->name().rfind("windowed_dot_general", 0) == 0 ||
         body->name().rfind("unrolled_windowed_dot_general", 0) == 0;  // XLA's unrolled name
}

// Whether `i` is a permute or runs one inline (see DescendsInto).
bool HoldsPermute(const HloInstruction* i) {
  if (IsPermute(*i)) return true;
  if (!DescendsInto(*i)) return false;
  std::vector<const HloInstruction*> inner;
  std::set<const HloComputation*> s2;
  for (const HloComputation* c : i->called_computations()) CollectInline(c, &inner, &s2);
  return std::any_of(inner.begin(), inner.end(),
                     [](const HloInstruction* x) { return IsPermute(*x); });
}

// Data flow inside the body (its own instructions; callees are summarised by their caller).
struct BodyDataFlow {
  std::vector<HloInstruction*> order;  // the body's post order
  // Whether a body value depends on a permute / a GEMM.
  std::unordered_map<const HloInstruction*, bool> dep_perm, dep_gemm;
  bool rs_link = false;  // a permute reads a value that depends on a GEMM (reduce-scatter)
  bool ag_link = false;  // a GEMM reads a value carried around the ring (all-gather)
};

// Fills order, dep_perm, dep_gemm and rs_link of `flow` for `body`.
void TracePermuteAndGemmDependence(const HloComputation* body, BodyDataFlow* flow) {
  auto& dep_perm = flow->dep_perm;
  auto& dep_gemm = flow->dep_gemm;
  flow->order = body->MakeInstructionPostOrder();
  for (const HloInstruction* i : flow->order) {
    bool p = false, g = false;
    for (const HloInstruction* o : i->operands()) {
      p = p || dep_perm[o];
      g = g || dep_gemm[o];
    }
    bool is_perm = HoldsPermute(i);
    if (is_perm && g) flow->rs_link = true;
    dep_perm[i] = p || is_perm;
    dep_gemm[i] = g || IsDotOrGemmCall(*i);
  }
}

// Sets ag_link of `flow` (after TracePermuteAndGemmDependence): whether a GEMM reads a value
// that depends on a permute or on a tuple element carried around the ring.
void TraceRingDependence(const HloInstruction* root, BodyDataFlow* flow) {
  auto& dep_perm = flow->dep_perm;
  // Tuple elements carried around the ring: root operands that depend on a permute.
  std::set<int64_t> ring_index;
  if (root && root->opcode() == HloOpcode::kTuple) {
    for (int64_t k = 0; k < root->operand_count(); ++k) {
      if (dep_perm[root->operand(k)]) ring_index.insert(k);
    }
  }
  std::unordered_map<const HloInstruction*, bool> dep_ring;
  for (const HloInstruction* i : flow->order) {
    bool r = dep_perm[i];
    if (i->opcode() == HloOpcode::kGetTupleElement && i->operand_count() == 1 &&
        i->operand(0)->opcode() == HloOpcode::kParameter && ring_index.count(i->tuple_index)) {
      r = true;
    }
    for (const HloInstruction* o : i->operands()) r = r || dep_ring[o];
    dep_ring[i] = r;
    if (IsDotOrGemmCall(*i)) {
      for (const HloInstruction* o : i->operands()) flow->ag_link = flow->ag_link || dep_ring[o];
    }
  }
}

// Fills `info` for a loop the matcher did not recognise, from the body's census and data flow:
// the kind from the links, the layout "ring" (IsRingReduceScatter) or "unrecognised".
void DescribeLoopFromDataFlow(const HloInstruction& w, const HloComputation* body,
                              BodyCensus* census, BodyDataFlow* flow, WindowedLoopInfo* info) {
  const int64_t gemms = census->gemms;
  info->layout = IsRingReduceScatter(flow->order, flow->dep_perm, flow->dep_gemm, gemms, w)
                     ? "ring"
                     : "unrecognised";
  info->name = w.name();
  info->body = body->name();
  info->kind = flow->rs_link ? "reduce-scatter" : "all-gather";
  std::optional<int64_t> trips = sim::WhileTripCount(w);
  info->trip_count = trips.value_or(-1);
  info->dots = gemms;
  info->fp8_gemms = census->fp8;
  info->unrolled = gemms > 1;
  info->wire_type = absl::StrJoin(census->wire, "+");
  int64_t ring = census->first_device >= 0 ? census->rings.SizeOf(census->first_device) : 0;
  if (flow->rs_link && trips && *trips > 0) ring = std::max(ring, *trips * gemms);
  info->ring_size = ring;
}

// Without the matcher's cache index: sets info->cache_index to the element the body fills with a
// chain of dynamic-update-slices of values that are not GEMM results (the output buffer's updates
// are). Leaves it unset when there is none.
void FindCacheFromUpdates(const HloInstruction* root,
                          std::unordered_map<const HloInstruction*, bool>& dep_gemm,
                          WindowedLoopInfo* info) {
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

// Whether the chain of dynamic-update-slices ending in `x` writes any GEMM result.
bool UpdatedWithGemmResults(const HloInstruction* x,
                            std::unordered_map<const HloInstruction*, bool>& dep_gemm) {
  bool from_gemm = false;
  while (x->opcode() == HloOpcode::kDynamicUpdateSlice && x->operand_count() >= 2) {
    from_gemm = from_gemm || dep_gemm[x->operand(1)];
    x = x->operand(0);
  }
  return from_gemm;
}

// Adds to `consumers` the GEMMs reading `u` through at most 8 layout and elementwise steps
// (converts, scalings, reshapes, slices, ...).
void AddGemmReaders(const HloInstruction* u, std::set<const HloInstruction*>* consumers) {
  std::vector<std::pair<const HloInstruction*, int>> stack{{u, 0}};
  std::set<const HloInstruction*> visited;
  while (!stack.empty()) {
    auto [x, depth] = stack.back();
    stack.pop_back();
    if (!visited.insert(x).second) continue;
    for (const HloInstruction* y : x->users()) {
      if (IsDotOrGemmCall(*y)) {
        consumers->insert(y);
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

// Cache consumers: GEMMs outside reading the cache element (or, when it is unknown, tuple
// elements >= 5 that are arrays of rank >= 1). Sets info->cache_consumers(_fp8).
void CountCacheConsumers(const HloInstruction& w, const HloInstruction* root,
                         std::unordered_map<const HloInstruction*, bool>& dep_gemm,
                         WindowedLoopInfo* info) {
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
      if (UpdatedWithGemmResults(root->operand(u->tuple_index), dep_gemm)) continue;
    }
    if (!u->shape().IsArray() || u->shape().rank() == 0) continue;
    AddGemmReaders(u, &consumers);
  }
  info->cache_consumers = static_cast<int64_t>(consumers.size());
  for (const HloInstruction* c : consumers) info->cache_consumers_fp8 += IsFp8GemmCustomCall(*c);
}

}  // namespace

bool AnalyzeLoop(const HloInstruction& w, WindowedStepScan* steps, WindowedLoopInfo* info) {
  if (!steps->IsWindowedEinsumLoop(w)) return false;
  const HloComputation* body = w.while_body();
  std::vector<const HloInstruction*> instrs;
  std::set<const HloComputation*> seen;
  CollectInline(body, &instrs, &seen);
  BodyCensus census = TakeBodyCensus(instrs);

  // The shared structural matcher (windowed_einsum/windowed_loop.h) decides when it recognises the loop; the
  // data-flow test below is the fallback for layouts it does not know, only for loops whose body
  // carries XLA's name hint.
  std::string why_not;
  std::optional<WindowedLoop> matched =
      MatchWindowedLoop(&w, &why_not,
                        WindowedLoopMatchOptions{/*gemm_custom_calls=*/true});
  if (matched) {
    DescribeMatchedLoop(w, body, *matched, census, info);
  } else if (!HasWindowedDotGeneralName(body)) {
    return false;
  }

  BodyDataFlow flow;
  TracePermuteAndGemmDependence(body, &flow);
  const HloInstruction* root = body->root();
  TraceRingDependence(root, &flow);
  if (!matched && !flow.rs_link && !flow.ag_link) return false;
  if (!matched) DescribeLoopFromDataFlow(w, body, &census, &flow, info);

  if (info->cache_index < 0 && info->kind == "all-gather" && root &&
      root->opcode() == HloOpcode::kTuple) {
    FindCacheFromUpdates(root, flow.dep_gemm, info);
  }
  CountCacheConsumers(w, root, flow.dep_gemm, info);
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
