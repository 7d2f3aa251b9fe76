// The windowed einsum guard of the dot-merger (dot_merge_guard.h) and the pipeline's
// "dot-merger": the dots the merger must leave alone so that windowed einsum steps keep their
// overlap and FP8 dots stay for fp8-gemm-rewriter.
#include "windowed_einsum/dot_merge_guard.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"
#include "passes/fp8_operand.h"
#include "passes/gpu_backend_config.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// Computations reachable from `comp` through called computations (including itself).
void CollectCalled(const HloComputation* comp, std::unordered_set<const HloComputation*>* seen) {
  if (!seen->insert(comp).second) return;
  for (const HloInstruction* i : comp->instructions()) {
    for (const HloComputation* c : i->called_computations()) CollectCalled(c, seen);
  }
}

// If `operand` reads (through movable ops and a dequantization) a get-tuple-element of a windowed
// loop, returns that get-tuple-element.
const HloInstruction* ReadsWindowedLoop(HloInstruction* operand, WindowedStepScan* scan) {
  HloInstruction* cur = operand;
  for (int guard = 0; guard < 64 && cur != nullptr; ++guard) {
    if (cur->opcode() == HloOpcode::kGetTupleElement && cur->operand_count() == 1 &&
        scan->IsWindowedEinsumLoop(*cur->operand(0))) {
      return cur;
    }
    if (std::optional<DequantMatch> dq = MatchDequantize(cur)) {
      cur = dq->q;
    } else if ((IsMovableFp8Op(cur->opcode()) || cur->opcode() == HloOpcode::kConvert) &&
               cur->operand_count() >= 1) {
      cur = cur->opcode() == HloOpcode::kSelect ? cur->operand(1) : cur->operand(0);
    } else {
      break;
    }
  }
  return nullptr;
}

// The stream annotation of `dot`'s backend_config that pins it (empty: none): a non-zero
// "operation_queue_id" or "force_earliest_schedule": true, both read by the backend-config editor
// (passes/gpu_backend_config.h) as the passes that assign streams read them: a queue id that is
// no decimal integer (such as "12abc") is the main stream there, so it pins nothing here either.
std::string StreamAnnotation(const HloInstruction* dot) {
  const std::string& cfg = dot->backend_config;
  if (cfg.empty() || cfg[0] != '{') return "";
  // The queue as the editor reads it, without building the document (OperationQueueId, which
  // skips a config that names no queue: a windowed loop's unrolled dots all name one, and a parse
  // per dot cost more than the rest of the pass).
  if (const int64_t q = OperationQueueId(*dot); q != 0) {
    return absl::StrCat("operation_queue_id=", q);
  }
  // No force_earliest_schedule in the text (nor an escape that could spell it): none, unparsed.
  if (cfg.find('\\') == std::string::npos &&
      cfg.find("force_earliest_schedule") == std::string::npos) {
    return "";
  }
  // Reading the stream fields does not depend on the schema version.
  absl::StatusOr<GpuBackendConfigEditor> config =
      GpuBackendConfigEditor::Of(*dot, XlaBackendConfigVersion::k2026);
  if (!config.ok()) return "";
  if (config->force_earliest_schedule()) return "force_earliest_schedule=true";
  return "";
}

// Why `dot` must not be merged by the per-dot guards (empty: it may be): a stream annotation, a
// step of a windowed einsum loop body (`ring_body`: the while body whose computations hold a
// collective-permute when the dot's computation is one of them, else null), an operand deriving
// from FP8 (left for fp8-gemm-rewriter) or reading a windowed loop's cache.
std::string GuardReason(HloInstruction* dot, const HloComputation* ring_body,
                        WindowedStepScan* scan) {
  if (std::string stream = StreamAnnotation(dot); !stream.empty()) {
    return absl::StrCat("'", dot->name(), "' carries a stream annotation (backend_config ", stream,
                        "): a windowed einsum step that wait_on_operation_queues may name");
  }
  if (ring_body != nullptr) {
    return absl::StrCat("'", dot->name(), "' is a step of the windowed einsum loop body '",
                        ring_body->name(),
                        "' (its computation circulates values with collective-permute)");
  }
  for (int64_t i = 0; i < 2; ++i) {
    HloInstruction* op = dot->operand(i);
    if (ReachesFp8(op)) {
      return absl::StrCat("operand ", i, " '", op->name(),
                          "' derives from FP8: left for fp8-gemm-rewriter");
    }
    if (const HloInstruction* gte = ReadsWindowedLoop(op, scan)) {
      return absl::StrCat("operand ", i, " '", op->name(), "' reads windowed loop '",
                          gte->operand(0)->name(), "' (element ", gte->tuple_index, ")");
    }
  }
  return "";
}

bool IsPermuteOp(const HloInstruction* i) {
  return i->opcode() == HloOpcode::kCollectivePermute ||
         i->opcode() == HloOpcode::kCollectivePermuteDone;
}

// Views, converts and dequantizations between a ring value and a dot operand.
HloInstruction* StripOperandOps(HloInstruction* v) { return StripDequantizeAndViews(v, false); }

// The value a chain of collective-permutes starts from (`v` itself if it is not a permute) and
// the number of permutes on the way; the first permute in *first (null if none).
const HloInstruction* RingOrigin(HloInstruction* v, int* steps, const HloInstruction** first) {
  *steps = 0;
  *first = nullptr;
  v = StripOperandOps(v);
  for (int guard = 0; guard < 4096 && IsPermuteOp(v); ++guard) {
    HloInstruction* next = v->operand(0);
    if (next->opcode() == HloOpcode::kCollectivePermuteStart) next = next->operand(0);
    ++*steps;
    *first = v;
    v = StripOperandOps(next);
  }
  return v;
}

// The collective-permute a dot's result reaches through add / convert / views (at most 4 ops).
const HloInstruction* SentByPermute(const HloInstruction* dot) {
  std::vector<std::pair<const HloInstruction*, int>> work{{dot, 0}};
  while (!work.empty()) {
    auto [v, depth] = work.back();
    work.pop_back();
    for (const HloInstruction* u : v->users()) {
      if (u->opcode() == HloOpcode::kCollectivePermute ||
          u->opcode() == HloOpcode::kCollectivePermuteStart) {
        return u;
      }
      if (depth < 4 && (u->opcode() == HloOpcode::kAdd || u->opcode() == HloOpcode::kConvert ||
                        u->opcode() == HloOpcode::kBitcast || u->opcode() == HloOpcode::kReshape ||
                        u->opcode() == HloOpcode::kCopy)) {
        work.push_back({u, depth + 1});
      }
    }
  }
  return nullptr;
}

// The collective-permute whose (received) result is added to `dot`'s result: the last step of a
// hand-written reduce-scatter ring, add(collective-permute(partial sum), dot), through converts
// and views on either side (at most 4 ops).
const HloInstruction* ReceivedByPermute(const HloInstruction* dot) {
  auto strip = [](const HloInstruction* v) {
    for (int k = 0; k < 4; ++k) {
      const HloOpcode op = v->opcode();
      if ((op == HloOpcode::kConvert || op == HloOpcode::kBitcast || op == HloOpcode::kReshape ||
           op == HloOpcode::kCopy || op == HloOpcode::kCollectivePermuteDone) &&
          v->operand_count() == 1) {
        v = v->operand(0);
        continue;
      }
      break;
    }
    return v;
  };
  std::vector<std::pair<const HloInstruction*, int>> work{{dot, 0}};
  while (!work.empty()) {
    auto [v, depth] = work.back();
    work.pop_back();
    for (const HloInstruction* u : v->users()) {
      if (u->opcode() == HloOpcode::kAdd && u->operand_count() == 2) {
        for (const HloInstruction* o : u->operands()) {
          const HloInstruction* src = strip(o);
          if (src != v && (src->opcode() == HloOpcode::kCollectivePermute ||
                           src->opcode() == HloOpcode::kCollectivePermuteStart)) {
            return src;
          }
        }
      }
      if (depth < 4 && (u->opcode() == HloOpcode::kConvert || u->opcode() == HloOpcode::kBitcast ||
                        u->opcode() == HloOpcode::kReshape || u->opcode() == HloOpcode::kCopy)) {
        work.push_back({u, depth + 1});
      }
    }
  }
  return nullptr;
}

// Hand-written collective matmuls (XLA issues 10640, 19555): the steps of a ring written out
// without a while loop, among `dots` sharing operand `side`, with the reason for the remark. An
// all-gather ring: dot(x, w), dot(cp(x), w), dot(cp(cp(x)), w), ... A reduce-scatter ring: each
// partial dot is added into an accumulator that a collective-permute sends on. Merging such dots
// puts every dot after (or before) every transfer: no overlap.
std::map<const HloInstruction*, std::string> HandWrittenRingSteps(
    const std::vector<HloInstruction*>& dots, int64_t side) {
  std::map<const HloInstruction*, std::string> out;
  // All-gather rings: other operands that come from one value through 0, 1, 2, ... permutes.
  std::map<const HloInstruction*, std::vector<std::pair<HloInstruction*, int>>> by_origin;
  std::map<const HloInstruction*, const HloInstruction*> first_permute;
  for (HloInstruction* d : dots) {
    int steps = 0;
    const HloInstruction* first = nullptr;
    const HloInstruction* origin = RingOrigin(d->operand(1 - side), &steps, &first);
    by_origin[origin].push_back({d, steps});
    if (first != nullptr) first_permute[d] = first;
  }
  for (const auto& [origin, members] : by_origin) {
    if (members.size() < 2) continue;
    bool any_permuted = false;
    for (const auto& [d, steps] : members) any_permuted |= steps > 0;
    if (!any_permuted) continue;
    for (const auto& [d, steps] : members) {
      out[d] = absl::StrCat(
          "'", d->name(), "' is step ", steps, " of a hand-written collective matmul: it reads '",
          origin->name(), "' after ", steps, " collective-permute", steps == 1 ? "" : "s",
          first_permute.count(d) ? absl::StrCat(" ('", first_permute[d]->name(), "', ...)") : "",
          ", like ", members.size() - 1, " other dot", members.size() == 2 ? "" : "s",
          " sharing its ", side == 0 ? "lhs" : "rhs",
          "; merging them would run every dot after the last transfer (no overlap)");
    }
  }
  // Reduce-scatter rings: partial dots whose results are sent on by collective-permutes, and the
  // last step, whose result is added to the partial sum a permute received (on a ring of 2 that
  // is the only other step).
  struct RsStep {
    HloInstruction* dot;
    const HloInstruction* cp;
    bool sent;
  };
  std::vector<RsStep> steps;
  bool any_sent = false;
  for (HloInstruction* d : dots) {
    if (const HloInstruction* cp = SentByPermute(d)) {
      steps.push_back({d, cp, true});
      any_sent = true;
    } else if (const HloInstruction* rcp = ReceivedByPermute(d)) {
      steps.push_back({d, rcp, false});
    }
  }
  if (steps.size() >= 2 && any_sent) {
    for (const RsStep& st : steps) {
      if (out.count(st.dot)) continue;
      out[st.dot] = absl::StrCat(
          "'", st.dot->name(), "' is a step of a hand-written collective matmul: ",
          st.sent ? "its result is sent on by collective-permute '"
                  : "its result is added to what collective-permute '",
          st.cp->name(), st.sent ? "'" : "' received", ", like ", steps.size() - 1, " other dot",
          steps.size() == 2 ? "" : "s", " sharing its ", side == 0 ? "lhs" : "rhs",
          "; merging them would run every dot before the first transfer (no overlap)");
    }
  }
  return out;
}


}  // namespace

void WindowedEinsumDotMergeGuard::Prepare(const HloModule& module) {
  ring_bodies_.clear();
  scan_ = WindowedStepScan();
  for (HloComputation* comp : module.MakeComputationPostOrder()) {
    for (const HloInstruction* w : comp->instructions()) {
      if (w->opcode() != HloOpcode::kWhile || w->called_computations().size() < 2 ||
          !scan_.HoldsPermute(w->while_body())) {
        continue;
      }
      std::unordered_set<const HloComputation*> comps;
      CollectCalled(w->while_body(), &comps);
      for (const HloComputation* c : comps) ring_bodies_.emplace(c, w->while_body());
    }
  }
}

std::map<const HloInstruction*, std::string> WindowedEinsumDotMergeGuard::Refusals(
    const std::vector<HloInstruction*>& dots, int64_t side) {
  std::map<const HloInstruction*, std::string> out = HandWrittenRingSteps(dots, side);
  for (HloInstruction* dot : dots) {
    auto ring = ring_bodies_.find(dot->parent());
    std::string reason =
        GuardReason(dot, ring == ring_bodies_.end() ? nullptr : ring->second, &scan_);
    if (!reason.empty()) out[dot] = std::move(reason);  // before a hand-written ring's reason
  }
  return out;
}

namespace {
absl::StatusOr<std::unique_ptr<HloPass>> MakeDotMerger(const PassOptions& options) {
  ASSIGN_OR_RETURN(int64_t threshold, DotMerger::ThresholdBytes(options));
  return std::unique_ptr<HloPass>(new DotMerger(
      threshold, [](const HloInstruction& dot) { return OperationQueueId(dot); },
      std::make_shared<WindowedEinsumDotMergeGuard>()));
}
}  // namespace

// The pipeline's dot-merger (weave compile, weave opt --passes=dot-merger): XLA's merger with the
// GPU backend's operation queues and this guard.
WEAVE_REGISTER_PASS("dot-merger", MakeDotMerger);

}  // namespace weave
