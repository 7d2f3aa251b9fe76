// Why a collective was left alone, and why a required rewrite did not fire: the compile report's
// `collectives_left_alone[].reason` and `--require`'s message (report.h).
//
// A reason comes only from a pass that considered the collective: a missed remark located at it or
// naming it in Remark::about (the decomposer's remarks sit at the dot they decide on and name the
// all-gather / reduce-scatter / all-reduce, both halves of an async pair included). A remark about
// a neighbouring instruction (e.g. the FP8 GEMM rewriter's on the dot that reads an all-gather) is
// never borrowed. A collective no pass considered gets a structural reason: what reads it, what
// feeds it.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "hlo/gemm_call.h"
#include "tools/report.h"
#include "tools/report_internal.h"

namespace weave::tools {
namespace {

constexpr char kDecomposer[] = "windowed-einsum-decomposer";
constexpr char kHandler[] = "windowed-einsum-handler";
constexpr char kQuantizer[] = "collective-quantizer";

bool IsDeferral(const Remark& r) {
  return r.pass == kDecomposer && absl::StrContains(r.message, "left for the handler's cache");
}

// Lower is better: the decomposer's own decision, the handler's, the decomposer's deferral to the
// handler (the handler's remark then says what became of it), the collective quantizer, others.
int Rank(const Remark& r) {
  if (r.pass == kDecomposer) return IsDeferral(r) ? 2 : 0;
  if (r.pass == kHandler) return 1;
  if (r.pass == kQuantizer) return 3;
  return 4;
}

std::string Quote(const HloInstruction* i) {
  return absl::StrCat(std::string(HloOpcodeString(i->opcode())), " '", i->name(), "'");
}

// Readers of `v`, looking through views and converts (at most `depth` levels).
void Readers(const HloInstruction* v, int depth, std::vector<const HloInstruction*>* out) {
  for (const HloInstruction* u : v->users()) {
    switch (u->opcode()) {
      case HloOpcode::kReshape:
      case HloOpcode::kBitcast:
      case HloOpcode::kTranspose:
      case HloOpcode::kCopy:
      case HloOpcode::kConvert:
      case HloOpcode::kAllGatherDone:
      case HloOpcode::kAllReduceDone:
      case HloOpcode::kCollectivePermuteDone:
      case HloOpcode::kAsyncDone:
        if (depth > 0) {
          Readers(u, depth - 1, out);
          continue;
        }
        break;
      default:
        break;
    }
    out->push_back(u);
  }
}

std::string List(const std::vector<const HloInstruction*>& v) {
  std::vector<std::string> names;
  for (size_t i = 0; i < v.size() && i < 3; ++i) names.push_back(Quote(v[i]));
  if (v.size() > 3) names.push_back(absl::StrCat("and ", v.size() - 3, " more"));
  return absl::StrJoin(names, ", ");
}

}  // namespace

namespace {

// The missed remarks by the names they are located at or about (each remark index once per name,
// in order): a collective's candidates are then found without scanning every remark.
using RemarkIndex = absl::flat_hash_map<std::string_view, std::vector<size_t>>;

RemarkIndex IndexMissedRemarks(const std::vector<Remark>& remarks) {
  RemarkIndex index;
  for (size_t k = 0; k < remarks.size(); ++k) {
    const Remark& r = remarks[k];
    if (!r.missed()) continue;
    auto add = [&](const std::string& name) {
      std::vector<size_t>& v = index[name];
      if (v.empty() || v.back() != k) v.push_back(k);
    };
    add(r.location);
    for (const std::string& a : r.about) add(a);
  }
  return index;
}

// The collective's names: its own and, for an async -start, its -done's.
std::vector<std::string_view> CollectiveNames(const HloInstruction& collective) {
  std::vector<std::string_view> names = {collective.name()};
  for (const HloInstruction* u : collective.users()) {
    switch (u->opcode()) {
      case HloOpcode::kAllGatherDone:
      case HloOpcode::kAllReduceDone:
      case HloOpcode::kCollectivePermuteDone:
      case HloOpcode::kAsyncDone:
      case HloOpcode::kAsyncUpdate:
        names.push_back(u->name());
        break;
      default:
        break;
    }
  }
  return names;
}

// The best-ranked missed remark about any of `names` (the first of equal rank).
std::string ReasonFromIndex(const std::vector<std::string_view>& names,
                            const std::vector<Remark>& remarks, const RemarkIndex& index) {
  std::vector<size_t> cands;
  for (std::string_view n : names) {
    auto it = index.find(n);
    if (it != index.end()) cands.insert(cands.end(), it->second.begin(), it->second.end());
  }
  std::sort(cands.begin(), cands.end());
  const Remark* best = nullptr;
  for (size_t k : cands) {
    const Remark& r = remarks[k];
    if (best == nullptr || Rank(r) < Rank(*best)) best = &r;
  }
  return best ? absl::StrCat(best->pass, ": ", best->message) : "";
}

}  // namespace

std::string ReasonFromRemarks(const HloInstruction& collective,
                              const std::vector<Remark>& remarks) {
  return ReasonFromIndex(CollectiveNames(collective), remarks, IndexMissedRemarks(remarks));
}

std::string StructuralReason(const HloInstruction& c, const std::string& base) {
  std::vector<const HloInstruction*> readers;
  Readers(&c, 4, &readers);
  std::vector<const HloInstruction*> dots;
  for (const HloInstruction* r : readers) {
    if (IsDotOrGemmCall(*r)) dots.push_back(r);
  }
  const HloInstruction* src = c.operand_count() > 0 ? c.operand(0) : nullptr;
  if (base == "all-gather") {
    if (c.IsRoot()) return "its result is the computation's root: no dot reads the gathered value";
    if (dots.empty()) {
      return readers.empty()
                 ? "nothing reads the gathered value"
                 : absl::StrCat("no dot reads the gathered value (read by ", List(readers), ")");
    }
    return absl::StrCat(
        "read by ", List(dots),
        ", but no pass considered it (is windowed-einsum-decomposer switched off?)");
  }
  if (base == "reduce-scatter") {
    if (src != nullptr && src->opcode() != HloOpcode::kDot) {
      return absl::StrCat("its operand ", Quote(src), " is not a dot");
    }
    return "its operand is a dot, but no pass considered it (is windowed-einsum-decomposer "
           "switched off?)";
  }
  if (base == "all-reduce") {
    if (src == nullptr || src->opcode() != HloOpcode::kDot) {
      return absl::StrCat("all-reduce of ", src ? Quote(src) : std::string("nothing"),
                          ", not of a dot: nothing to window");
    }
    return "all-reduce of a dot's result not followed by a dynamic-slice at the partition's block "
           "(no reduce-scatter form)";
  }
  if (base == "collective-permute") {
    if (!dots.empty()) {
      return absl::StrCat("collective-permute outside a windowed loop, read by ", List(dots),
                          ": a step of a hand-written collective matmul, kept as written "
                          "(dot-merger leaves such steps unmerged)");
    }
    return "collective-permute outside a windowed loop: kept as is";
  }
  if (base == "all-to-all") {
    return dots.empty() && !(src && src->opcode() == HloOpcode::kDot)
               ? "no dot reads it and no dot feeds it: nothing to window"
               : "next to a dot, but no pass considered it (is all-to-all-windowed-einsum switched "
                 "off?)";
  }
  return absl::StrCat(base, ": Weave has no windowed form for it");
}

std::string ExplainMissingRewrite(const std::string& rewrite, const std::vector<Remark>& remarks) {
  auto first = [&](auto pred) -> const Remark* {
    for (const Remark& r : remarks) {
      if (r.missed() && pred(r)) return &r;
    }
    return nullptr;
  };
  const Remark* r = nullptr;
  std::string none;
  if (rewrite == "windowed") {
    r = first([](const Remark& m) { return m.pass == kDecomposer && !IsDeferral(m); });
    if (!r) r = first([](const Remark& m) { return m.pass == kHandler; });
    none =
        "no candidate: no all-gather read by a dot, reduce-scatter of a dot, or all-reduce + "
        "dynamic-slice of a dot (and no windowed loop to prepare)";
  } else if (rewrite == "fp8-gemm") {
    r = first([](const Remark& m) {
      return m.pass == "fp8-gemm-rewriter" && !absl::StartsWith(m.message, "epilogue:");
    });
    none = "no dot reads FP8-derived operands";
  } else if (rewrite == "fp8-wire") {
    r = first([](const Remark& m) {
      return (m.pass == kHandler && absl::StrContains(m.message, "FP8 shift")) ||
             m.pass == kQuantizer;
    });
    none = "no collective carries a value derived from FP8";
  } else if (rewrite == "cache") {
    r = first([](const Remark& m) {
      return m.pass == kHandler && absl::StrContains(m.message, "not cached");
    });
    if (!r) r = first(IsDeferral);
    none = "no second dot reads an all-gather that a windowed loop circulates";
  } else if (rewrite == "dot-merger") {
    r = first([](const Remark& m) { return m.pass == "dot-merger"; });
    none = "no two dots share an operand";
  }
  return r ? r->ToString() : none;
}

std::vector<LeftAlone> FindCollectivesLeftAlone(const HloModule& module,
                                                const std::vector<Remark>& remarks) {
  return FindCollectivesLeftAlone(module, remarks, ScanLoops(module));
}

std::vector<LeftAlone> FindCollectivesLeftAlone(const HloModule& module,
                                                const std::vector<Remark>& remarks,
                                                const LoopScan& scan) {
  // Computations that belong to windowed loops.
  std::set<const HloComputation*> in_loops;
  std::set<const HloInstruction*> loop_shifts;  // permutes of a windowed loop's results
  for (const auto& [i, info] : scan.loops) {
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
  // The chunk exchanges of all-to-all windowed einsums are part of their window.
  for (const AllToAllWindow& w : scan.all_to_all) {
    loop_shifts.insert(w.all_to_alls.begin(), w.all_to_alls.end());
  }
  // Computations an async-start wraps: their collective is listed as the async-start.
  std::set<const HloComputation*> wrapped;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->opcode() != HloOpcode::kAsyncStart || !i->async_sugar().empty()) continue;
      for (const HloComputation* w : i->called_computations()) wrapped.insert(w);
    }
  }
  int64_t default_group = DefaultGroup(module, 0);
  const RemarkIndex index = IndexMissedRemarks(remarks);
  // The partitioner's reshard remarks by the collectives each emitted.
  absl::flat_hash_map<std::string_view, const Remark*> reshards;
  for (const Remark& r : remarks) {
    if (r.pass != "spmd-partitioner" || !r.analysis || !absl::StartsWith(r.message, "reshard ")) {
      continue;
    }
    for (const std::string& a : r.about) reshards.emplace(a, &r);
  }
  std::vector<LeftAlone> out;
  for (const HloComputation* c : module.MakeComputationPostOrder()) {
    if (in_loops.count(c) || wrapped.count(c)) continue;
    for (const HloInstruction* i : c->MakeInstructionPostOrder()) {
      std::string_view base = CollectiveBaseName(*i);
      const HloInstruction* wrapped_root = nullptr;
      if (base.empty() && i->opcode() == HloOpcode::kAsyncStart && i->async_sugar().empty() &&
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
      la.reason = ReasonFromIndex(CollectiveNames(*i), remarks, index);
      if (la.reason.empty() && wrapped_root != nullptr) {
        la.reason = ReasonFromIndex(CollectiveNames(*wrapped_root), remarks, index);
      }
      if (la.reason.empty()) la.reason = StructuralReason(*i, std::string(base));
      auto rs = reshards.find(i->name());
      if (rs != reshards.end()) {
        la.reshard = absl::StrCat("at '", rs->second->location, "': ",
                                  absl::StripPrefix(rs->second->message, "reshard "));
      }
      out.push_back(std::move(la));
    }
  }
  return out;
}

}  // namespace weave::tools
