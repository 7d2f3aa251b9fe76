// Why a collective was left alone, and why a required rewrite did not fire: the compile report's
// `collectives_left_alone[].reason` and `--require`'s message (report.h).
//
// A reason comes only from a pass that considered the collective: a missed remark located at it or
// naming it in Remark::about (the decomposer's remarks sit at the dot they decide on and name the
// all-gather / reduce-scatter / all-reduce, both halves of an async pair included). A remark about
// a neighbouring instruction (e.g. the FP8 GEMM rewriter's on the dot that reads an all-gather) is
// never borrowed. A collective no pass considered gets a structural reason: what reads it, what
// feeds it.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/report.h"

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

std::string ReasonFromRemarks(const HloInstruction& collective,
                              const std::vector<Remark>& remarks) {
  std::vector<std::string> names = {collective.name()};
  // An async -start is also known by its -done.
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
  auto is_about = [&](const Remark& r) {
    for (const std::string& n : names) {
      if (r.location == n) return true;
      for (const std::string& a : r.about) {
        if (a == n) return true;
      }
    }
    return false;
  };
  const Remark* best = nullptr;
  for (const Remark& r : remarks) {
    if (!r.missed() || !is_about(r)) continue;
    if (best == nullptr || Rank(r) < Rank(*best)) best = &r;
  }
  return best ? absl::StrCat(best->pass, ": ", best->message) : "";
}

std::string StructuralReason(const HloInstruction& c, const std::string& base) {
  std::vector<const HloInstruction*> readers;
  Readers(&c, 4, &readers);
  std::vector<const HloInstruction*> dots;
  for (const HloInstruction* r : readers) {
    if (r->opcode() == HloOpcode::kDot || IsGemmCustomCall(*r)) dots.push_back(r);
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

}  // namespace weave::tools
