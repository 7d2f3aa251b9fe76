#include "passes/dot_merger.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"
#include "passes/fp8_operand.h"
#include "passes/gpu_backend_config.h"

namespace weave {
namespace {

// XLA's canonical dot: batch dims are 0..nb-1 on both sides, one contracting dim per side and
// operands of rank nb+2.
bool IsCanonicalDot(const HloInstruction* dot) {
  if (dot->opcode() != HloOpcode::kDot || dot->operand_count() != 2 || !dot->shape().IsArray()) {
    return false;
  }
  const DotDims& d = dot->dot_dims();
  const int64_t nb = static_cast<int64_t>(d.lhs_batch.size());
  if (static_cast<int64_t>(d.rhs_batch.size()) != nb || d.lhs_contracting.size() != 1 ||
      d.rhs_contracting.size() != 1) {
    return false;
  }
  auto is_iota = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] != static_cast<int64_t>(i)) return false;
    }
    return true;
  };
  return is_iota(d.lhs_batch) && is_iota(d.rhs_batch) && dot->operand(0)->shape().rank() == nb + 2 &&
         dot->operand(1)->shape().rank() == nb + 2;
}

int64_t DotBytes(const HloInstruction* dot) {
  int64_t bytes = dot->shape().ByteSize();
  for (const HloInstruction* op : dot->operands()) bytes += op->shape().ByteSize();
  return bytes;
}

// Computations reachable from `comp` through called computations (including itself).
void CollectCalled(const HloComputation* comp, std::unordered_set<const HloComputation*>* seen) {
  if (!seen->insert(comp).second) return;
  for (const HloInstruction* i : comp->instructions()) {
    for (const HloComputation* c : i->called_computations()) CollectCalled(c, seen);
  }
}

// A windowed einsum loop: a while whose body (or what it calls) holds a collective-permute and a
// dot.
bool IsWindowedLoop(const HloInstruction* w) {
  if (w->opcode() != HloOpcode::kWhile || w->called_computations().size() < 2) return false;
  std::unordered_set<const HloComputation*> comps;
  CollectCalled(w->while_body(), &comps);
  bool permute = false, dot = false;
  for (const HloComputation* c : comps) {
    for (const HloInstruction* i : c->instructions()) {
      permute |= i->opcode() == HloOpcode::kCollectivePermute ||
                 i->opcode() == HloOpcode::kCollectivePermuteStart;
      dot |= i->opcode() == HloOpcode::kDot || i->opcode() == HloOpcode::kCustomCall;
    }
  }
  return permute && dot;
}

// If `operand` reads (through movable ops and a dequantization) a get-tuple-element of a windowed
// loop, returns that get-tuple-element.
const HloInstruction* ReadsWindowedLoop(HloInstruction* operand) {
  HloInstruction* cur = operand;
  for (int guard = 0; guard < 64 && cur != nullptr; ++guard) {
    if (cur->opcode() == HloOpcode::kGetTupleElement && cur->operand_count() == 1 &&
        IsWindowedLoop(cur->operand(0))) {
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

// Why this dot must not be merged (empty: it may be). `ring_body` names the while body whose
// computations hold a collective-permute when the dot's computation is one of them (else null).
std::string GuardReason(HloInstruction* dot, const HloComputation* ring_body) {
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
    if (const HloInstruction* gte = ReadsWindowedLoop(op)) {
      return absl::StrCat("operand ", i, " '", op->name(), "' reads windowed loop '",
                          gte->operand(0)->name(), "' (element ", gte->tuple_index, ")");
    }
  }
  return "";
}

// Hand-written collective matmuls (XLA issues 10640, 19555): the steps of a ring written out
// without a while loop. An all-gather ring: dot(x, w), dot(cp(x), w), dot(cp(cp(x)), w), ...
// A reduce-scatter ring: each partial dot is added into an accumulator that a collective-permute
// sends on. Merging such dots puts every dot after (or before) every transfer: no overlap.

bool IsPermuteOp(const HloInstruction* i) {
  return i->opcode() == HloOpcode::kCollectivePermute ||
         i->opcode() == HloOpcode::kCollectivePermuteDone;
}

// Strips views, converts and dequantizations between a ring value and a dot operand.
HloInstruction* StripOperandOps(HloInstruction* v) {
  for (int guard = 0; guard < 16; ++guard) {
    if (auto m = MatchDequantize(v)) {
      v = m->q;
      continue;
    }
    switch (v->opcode()) {
      case HloOpcode::kConvert:
      case HloOpcode::kBitcast:
      case HloOpcode::kReshape:
      case HloOpcode::kCopy:
      case HloOpcode::kTranspose:
        v = v->operand(0);
        continue;
      default:
        return v;
    }
  }
  return v;
}

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

// For dots sharing operand `side`: the ones that are steps of a hand-written ring, with the
// reason (for the remark).
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

// True when `target` is reachable from `from` through operands / control predecessors.
bool DependsOn(const HloInstruction* from, const HloInstruction* target) {
  std::vector<const HloInstruction*> work = {from};
  std::unordered_set<const HloInstruction*> seen;
  while (!work.empty()) {
    const HloInstruction* i = work.back();
    work.pop_back();
    if (i == target) return true;
    if (!seen.insert(i).second) continue;
    for (const HloInstruction* op : i->operands()) work.push_back(op);
    for (const HloInstruction* op : i->control_predecessors()) work.push_back(op);
  }
  return false;
}

// Why a and b (canonical, sharing operand `side`) cannot be merged (empty: they can).
std::string Mismatch(const HloInstruction* a, const HloInstruction* b, int64_t side) {
  if (a->operand(0)->shape().element_type != b->operand(0)->shape().element_type ||
      a->operand(1)->shape().element_type != b->operand(1)->shape().element_type ||
      a->shape().element_type != b->shape().element_type) {
    return "element types differ";
  }
  if (!(a->dot_dims() == b->dot_dims())) return "dimension numbers differ";
  if (a->operand_precision() != b->operand_precision()) return "operand precisions differ";
  if (a->GetRawAttribute("algorithm") || b->GetRawAttribute("algorithm")) {
    return "a dot has an algorithm attribute";
  }
  const Shape& oa = a->operand(1 - side)->shape();
  const Shape& ob = b->operand(1 - side)->shape();
  const int64_t nb = static_cast<int64_t>(a->dot_dims().lhs_batch.size());
  const int64_t k = side == 0 ? a->dot_dims().rhs_contracting[0] : a->dot_dims().lhs_contracting[0];
  const int64_t outer = k == nb ? nb + 1 : nb;
  for (int64_t d = 0; d < oa.rank(); ++d) {
    if (d != outer && oa.dims[static_cast<size_t>(d)] != ob.dims[static_cast<size_t>(d)]) {
      return "the other operands differ in a dim other than the free one";
    }
  }
  if (oa.MinorToMajor() != ob.MinorToMajor()) return "the other operands have different layouts";
  return "";
}

// Merges a and b (sharing operand `side`); returns the merged dot.
HloInstruction* Merge(HloComputation* comp, HloInstruction* a, HloInstruction* b, int64_t side) {
  const int64_t nb = static_cast<int64_t>(a->dot_dims().lhs_batch.size());
  const int64_t k = side == 0 ? a->dot_dims().rhs_contracting[0] : a->dot_dims().lhs_contracting[0];
  const int64_t outer = k == nb ? nb + 1 : nb;
  HloInstruction* oa = a->operand(1 - side);
  HloInstruction* ob = b->operand(1 - side);
  Shape cs = oa->shape();
  cs.dims[static_cast<size_t>(outer)] += ob->shape().dims[static_cast<size_t>(outer)];
  HloInstruction* concat = comp->AddInstruction(HloOpcode::kConcatenate, cs, {oa, ob},
                                                a->name() + ".merge_operands");
  concat->dimensions = {outer};
  concat->has_dimensions_attr = true;
  // Output dims are [batch..., lhs free, rhs free].
  const int64_t rank = a->shape().rank();
  const int64_t slice_dim = side == 0 ? rank - 1 : rank - 2;
  Shape ms = a->shape();
  ms.dims[static_cast<size_t>(slice_dim)] += b->shape().dims[static_cast<size_t>(slice_dim)];
  std::vector<HloInstruction*> ops = {a->operand(0), a->operand(1)};
  ops[static_cast<size_t>(1 - side)] = concat;
  auto clone = a->CloneWithNewOperands(ms, ops, ".merged");
  clone->backend_config.clear();  // queue assignments of a do not hold for the merged dot
  HloInstruction* merged = comp->AddInstruction(std::move(clone));
  int64_t start = 0;
  for (HloInstruction* d : {a, b}) {
    HloInstruction* sl = comp->AddInstruction(HloOpcode::kSlice, d->shape(), {merged},
                                              d->name() + ".from_merged");
    for (int64_t i = 0; i < rank; ++i) {
      SliceDim sd{0, ms.dims[static_cast<size_t>(i)], 1};
      if (i == slice_dim) sd = SliceDim{start, start + d->shape().dims[static_cast<size_t>(i)], 1};
      sl->mutable_slice()->push_back(sd);
    }
    start += d->shape().dims[static_cast<size_t>(slice_dim)];
    (void)d->ReplaceAllUsesWith(sl);
  }
  return merged;
}

// Maps every computation of a while body that (with what it calls) holds a collective-permute
// to that body: the steps of a windowed einsum ring.
std::map<const HloComputation*, const HloComputation*> RingBodies(HloModule* module) {
  std::map<const HloComputation*, const HloComputation*> out;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    for (const HloInstruction* w : comp->instructions()) {
      if (w->opcode() != HloOpcode::kWhile || w->called_computations().size() < 2 ||
          w->while_body() == nullptr) {
        continue;
      }
      std::unordered_set<const HloComputation*> comps;
      CollectCalled(w->while_body(), &comps);
      bool permute = false;
      for (const HloComputation* c : comps) {
        for (const HloInstruction* i : c->instructions()) {
          permute |= i->opcode() == HloOpcode::kCollectivePermute ||
                     i->opcode() == HloOpcode::kCollectivePermuteStart;
        }
      }
      if (!permute) continue;
      for (const HloComputation* c : comps) out.emplace(c, w->while_body());
    }
  }
  return out;
}

}  // namespace

// The sub-byte type an operand is upcast from through transposes, reshapes, bitcasts and
// converts (XLA's HasSubByteUpcast), or "".
std::string SubByteUpcast(const HloInstruction* x) {
  while (x != nullptr && (x->opcode() == HloOpcode::kTranspose || x->opcode() == HloOpcode::kReshape ||
                          x->opcode() == HloOpcode::kBitcast || x->opcode() == HloOpcode::kConvert)) {
    if (x->opcode() == HloOpcode::kConvert && x->operand_count() == 1) {
      const PrimitiveType t = x->operand(0)->shape().element_type;
      if (t != PrimitiveType::PRED && BitWidth(t) > 0 && BitWidth(t) < 8) return std::string(PrimitiveTypeName(t));
    }
    x = x->operand_count() > 0 ? x->operand(0) : nullptr;
  }
  return "";
}

absl::StatusOr<bool> DotMerger::Run(HloModule* module) {
  bool changed = false;
  const std::map<const HloComputation*, const HloComputation*> ring_bodies = RingBodies(module);
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    auto ring_it = ring_bodies.find(comp);
    const HloComputation* ring_body = ring_it == ring_bodies.end() ? nullptr : ring_it->second;
    // operand (side) -> canonical dots using it on that side, in creation order.
    std::map<std::pair<int64_t, int64_t>, std::vector<HloInstruction*>> groups;
    std::map<int64_t, HloInstruction*> by_id;
    for (HloInstruction* i : comp->MakeInstructionPostOrder()) {
      if (!IsCanonicalDot(i)) continue;
      if (!i->control_predecessors().empty() || !i->control_successors().empty()) {
        // The merged dot and its slices would not carry the ordering edge (XLA's
        // NoMergeControlPredecessor): left alone, and said so.
        AddRemark(i->name(), false,
                  absl::StrCat("not merged: it has control ",
                               i->control_predecessors().empty() ? "successors" : "predecessors",
                               " (a merge would drop the ordering edge)"));
        continue;
      }
      std::string sub_byte;
      for (int64_t k = 0; k < i->operand_count() && sub_byte.empty(); ++k) sub_byte = SubByteUpcast(i->operand(k));
      if (!sub_byte.empty()) {
        // As XLA's merger, which skips such dots (its NoMergeSubByteUpcast test).
        AddRemark(i->name(), false, absl::StrCat("not merged: an operand is upcast from ", sub_byte));
        continue;
      }
      for (int64_t side = 0; side < 2; ++side) {
        groups[{i->operand(side)->unique_id(), side}].push_back(i);
      }
    }
    std::unordered_set<HloInstruction*> dead;
    std::map<HloInstruction*, std::string> refused;  // remark once per dot
    for (auto& [key, dots] : groups) {
      if (dots.size() < 2) continue;
      const int64_t side = key.second;
      std::sort(dots.begin(), dots.end(), [](const HloInstruction* x, const HloInstruction* y) {
        return x->unique_id() < y->unique_id();
      });
      // Guard and size first, one remark per refused dot.
      const std::map<const HloInstruction*, std::string> ring_steps =
          HandWrittenRingSteps(dots, side);
      for (HloInstruction*& d : dots) {
        std::string reason = GuardReason(d, ring_body);
        if (auto it = ring_steps.find(d); reason.empty() && it != ring_steps.end()) {
          reason = it->second;
        }
        if (reason.empty() && DotBytes(d) > threshold_bytes_) {
          reason = absl::StrCat(DotBytes(d), " bytes exceed --dot-merger-threshold-mb (",
                                threshold_bytes_, " bytes)");
        }
        if (!reason.empty()) {
          if (refused.emplace(d, reason).second) AddRemark(d->name(), false, "not merged: " + reason);
          d = nullptr;
        }
      }
      for (size_t i = 0; i < dots.size(); ++i) {
        for (size_t j = i + 1; j < dots.size(); ++j) {
          HloInstruction* a = dots[i];
          HloInstruction* b = dots[j];
          if (a == nullptr || b == nullptr || dead.count(a) || dead.count(b)) continue;
          if (DotBytes(a) > threshold_bytes_) continue;  // a merged dot grew past the limit
          std::string why = Mismatch(a, b, side);
          if (why.empty() && (DependsOn(a, b) || DependsOn(b, a))) why = "one depends on the other";
          if (!why.empty()) {
            AddRemark(b->name(), false, absl::StrCat("not merged with '", a->name(), "': ", why));
            continue;
          }
          HloInstruction* merged = Merge(comp, a, b, side);
          AddRemark(a->name(), true,
                    absl::StrCat("merged with '", b->name(), "' into '", merged->name(),
                                 "' (shared ", side == 0 ? "lhs" : "rhs", " '",
                                 merged->operand(side)->name(), "')"));
          dead.insert(a);
          dead.insert(b);
          dots[i] = merged;
          dots[j] = nullptr;
          changed = true;
        }
      }
    }
    for (HloInstruction* d : dead) {
      absl::Status s = comp->RemoveInstruction(d);
      if (!s.ok()) return s;
    }
  }
  return changed;
}

namespace {
absl::StatusOr<std::unique_ptr<HloPass>> MakeDotMerger(const PassOptions& options) {
  absl::StatusOr<double> mb = options.GetDouble("dot-merger-threshold-mb", 32);
  if (!mb.ok()) return mb.status();
  if (*mb < 0) return absl::InvalidArgumentError("--dot-merger-threshold-mb must be >= 0");
  return std::unique_ptr<HloPass>(new DotMerger(static_cast<int64_t>(*mb * 1024 * 1024)));
}
}  // namespace

WEAVE_REGISTER_PASS("dot-merger", MakeDotMerger);

}  // namespace weave
