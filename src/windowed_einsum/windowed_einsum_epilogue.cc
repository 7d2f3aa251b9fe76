#include "windowed_einsum/windowed_einsum_epilogue.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/builders.h"
#include "windowed_einsum/loop_state.h"
#include "windowed_einsum/windowed_loop.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

bool IsEpilogueOp(HloOpcode op) {
  switch (op) {
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kMultiply:
    case HloOpcode::kDivide:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kTanh:
    case HloOpcode::kExp:
    case HloOpcode::kNegate:
    case HloOpcode::kAbs:
      return true;
    default:
      return false;
  }
}

// The epilogue region after the loop's output element `out` (see the header). Fills `region`
// (in post order), `sink` and `invariants` (the values under the region's broadcasts), or
// returns why not.
std::string FindRegion(HloInstruction* out, const std::set<int64_t>& block_dims,
                       std::vector<HloInstruction*>* region, HloInstruction** sink,
                       std::vector<HloInstruction*>* invariants) {
  const Shape& s = out->shape();
  std::unordered_set<HloInstruction*> in;
  std::vector<HloInstruction*> work(out->users().begin(), out->users().end());
  while (!work.empty()) {
    HloInstruction* i = work.back();
    work.pop_back();
    if (in.count(i)) continue;
    if (!IsEpilogueOp(i->opcode()) || !i->shape().IsArray() || i->shape().dims != s.dims ||
        i->shape().element_type != s.element_type) {
      bool reads_out = false;
      for (const HloInstruction* o : i->operands()) reads_out |= o == out;
      if (reads_out) {
        return absl::StrCat("'", i->name(), "' (", std::string(HloOpcodeString(i->opcode())),
                            ") reads the result and is not an elementwise epilogue op of its "
                            "shape and type");
      }
      continue;  // a reader after the epilogue
    }
    in.insert(i);
    for (HloInstruction* u : i->users()) work.push_back(u);
    if (in.size() > 64) return "the elementwise region after the loop has more than 64 ops";
  }
  if (in.empty()) return "nothing reads the loop's result";
  // Operands, and the single sink.
  *sink = nullptr;
  std::set<HloInstruction*> inv;
  for (HloInstruction* i : in) {
    for (HloInstruction* o : i->operands()) {
      if (o == out || in.count(o)) continue;
      if (o->opcode() == HloOpcode::kConstant) continue;
      if (o->opcode() == HloOpcode::kBroadcast && o->operand_count() == 1) {
        for (int64_t d : o->dimensions) {
          if (block_dims.count(d)) {
            return absl::StrCat("'", o->name(), "' is broadcast along dim ", d,
                                ", which the steps write in blocks");
          }
        }
        // A broadcast constant is rebuilt in the body; any other value is passed in.
        if (o->operand(0)->opcode() != HloOpcode::kConstant) inv.insert(o->operand(0));
        continue;
      }
      return absl::StrCat("'", i->name(), "' reads '", o->name(),
                          "', which is neither a constant nor a broadcast");
    }
    bool read_outside = i->IsRoot();
    for (HloInstruction* u : i->users()) read_outside |= !in.count(u);
    if (read_outside) {
      if (*sink != nullptr) {
        return absl::StrCat("both '", (*sink)->name(), "' and '", i->name(),
                            "' are read after the epilogue");
      }
      *sink = i;
    }
  }
  if (*sink == nullptr) return "the epilogue's result is not read";
  // Post order of the region (operands first).
  std::vector<HloInstruction*> order;
  std::unordered_set<HloInstruction*> done;
  std::function<void(HloInstruction*)> visit = [&](HloInstruction* i) {
    if (!in.count(i) || done.count(i)) return;
    done.insert(i);
    for (HloInstruction* o : i->operands()) visit(o);
    order.push_back(i);
  };
  for (HloInstruction* i : in) visit(i);
  *region = order;
  invariants->assign(inv.begin(), inv.end());
  std::sort(invariants->begin(), invariants->end(),
            [](const HloInstruction* a, const HloInstruction* b) {
              return a->unique_id() < b->unique_id();
            });
  return "";
}

// An all-gather loop's output element and the elementwise epilogue reading it after the loop.
struct EpilogueSite {
  HloInstruction* root = nullptr;        // the body's root tuple
  int64_t index = -1;                    // the output element's tuple index
  std::vector<HloInstruction*> writes;   // its dynamic-update-slices, the root's operand first
  std::set<int64_t> block_dims;          // the dims the steps write in blocks
  HloInstruction* out = nullptr;         // get-tuple-element(loop, index) after the loop
  std::vector<HloInstruction*> region;   // the epilogue, in post order
  HloInstruction* sink = nullptr;        // its instruction read after it
  std::vector<HloInstruction*> invariants;  // the values under its broadcasts
};

// What one step of matching an epilogue found: nothing to move (no remark), the site, or a
// reason the epilogue stays after the loop (*why).
enum class SiteMatch { kNone, kFound, kDeclined };

SiteMatch Declined(std::string reason, std::string* why) {
  *why = std::move(reason);
  return SiteMatch::kDeclined;
}

// The output element of `loop` in the body: the chain of dynamic-update-slices the dots write
// through (fills root, index, writes and block_dims). kNone when the loop has none (its dots
// accumulate).
SiteMatch FindOutputWrites(const WindowedLoop& loop, EpilogueSite* site, std::string* why) {
  HloComputation* body = loop.body;
  HloInstruction* root = body->root();
  HloInstruction* first = loop.dots[0].merge;
  if (first == nullptr || first->opcode() != HloOpcode::kDynamicUpdateSlice ||
      root->opcode() != HloOpcode::kTuple) {
    return SiteMatch::kNone;  // contracting-dim windowing: the steps accumulate
  }
  site->root = root;
  int64_t index = -1;
  for (int64_t k = 0; k < root->operand_count() && index < 0; ++k) {
    HloInstruction* v = root->operand(k);
    while (v->opcode() == HloOpcode::kDynamicUpdateSlice && v != first) v = v->operand(0);
    if (v == first) index = k;
  }
  if (index < 0) return SiteMatch::kNone;
  site->index = index;
  HloInstruction* v = root->operand(index);
  while (v->opcode() == HloOpcode::kDynamicUpdateSlice) {
    site->writes.push_back(v);
    const Shape& part = v->operand(1)->shape();
    for (int64_t d = 0; d < part.rank(); ++d) {
      if (part.dims[static_cast<size_t>(d)] != v->shape().dims[static_cast<size_t>(d)]) {
        site->block_dims.insert(d);
      }
    }
    v = v->operand(0);
  }
  if (!(v->opcode() == HloOpcode::kGetTupleElement && v->operand(0) == body->parameter(0) &&
        v->tuple_index == index)) {
    return Declined("the output element is not written only by dynamic-update-slices of the dots",
                    why);
  }
  if (site->writes.size() != loop.dots.size()) {
    return Declined("the output element's writes are not one per dot", why);
  }
  return SiteMatch::kFound;
}

// After loop `w`: the one get-tuple-element of the output element and the epilogue region it
// alone reads (fills out, region, sink and invariants). kNone when nothing after the loop is to
// be moved.
SiteMatch FindEpilogueAfterLoop(HloInstruction* w, EpilogueSite* site, std::string* why) {
  HloInstruction* out = nullptr;
  bool other_reader = false;
  for (HloInstruction* g : w->users()) {
    if (g->opcode() != HloOpcode::kGetTupleElement) {
      other_reader = true;
    } else if (g->tuple_index == site->index) {
      if (out != nullptr) other_reader = true;
      out = g;
    }
  }
  if (out == nullptr || w->IsRoot()) return SiteMatch::kNone;
  if (other_reader) return Declined("the loop's result is read whole or more than once", why);
  if (out->IsRoot() || out->user_count() == 0) return SiteMatch::kNone;
  site->out = out;
  std::string not_region =
      FindRegion(out, site->block_dims, &site->region, &site->sink, &site->invariants);
  if (!not_region.empty()) return Declined(std::move(not_region), why);
  return SiteMatch::kFound;
}

// Passes the site's invariants into loop `w` (appended to its state and passed through by the
// body's root); returns the body's get-tuple-element of each. Errors: the IR refuses an edit.
absl::StatusOr<std::unordered_map<const HloInstruction*, HloInstruction*>> PassInvariants(
    HloInstruction* w, HloComputation* body, const EpilogueSite& site) {
  ASSIGN_OR_RETURN(int64_t base, AppendLoopState(w, site.invariants, ".epilogue"));
  HloInstruction* param = body->parameter(0);
  const Shape state = w->shape();
  std::unordered_map<const HloInstruction*, HloInstruction*> inv_gte;
  for (size_t k = 0; k < site.invariants.size(); ++k) {
    HloInstruction* g = AddGetTupleElement(body, param, base + static_cast<int64_t>(k),
                                           site.invariants[k]->name() + ".epilogue");
    inv_gte[site.invariants[k]] = g;
    site.root->AppendOperand(g);
  }
  site.root->set_shape(state);
  site.root->sharding.reset();
  return inv_gte;
}

// The body's copy of constant `c` (made on first use, kept in *body_constants).
HloInstruction* BodyConstant(HloComputation* body, HloInstruction* c,
                             std::unordered_map<const HloInstruction*, HloInstruction*>*
                                 body_constants) {
  HloInstruction*& copy = (*body_constants)[c];
  if (copy == nullptr) {
    copy = body->AddInstruction(c->CloneWithNewOperands(c->shape(), {}, ".epilogue"));
  }
  return copy;
}

// Applies the region to the block each write `s` of the site stores, and makes the write store
// the sink's value instead. Errors: the IR refuses an edit.
absl::Status ComputeEpilogueInSteps(
    HloComputation* body, const EpilogueSite& site,
    const std::unordered_map<const HloInstruction*, HloInstruction*>& inv_gte) {
  std::unordered_map<const HloInstruction*, HloInstruction*> body_constants;
  for (size_t s = 0; s < site.writes.size(); ++s) {
    HloInstruction* dus = site.writes[s];
    HloInstruction* part = dus->operand(1);
    const Shape& ps = part->shape();
    std::unordered_map<const HloInstruction*, HloInstruction*> map;
    map[site.out] = part;
    for (HloInstruction* i : site.region) {
      std::vector<HloInstruction*> ops;
      for (HloInstruction* o : i->operands()) {
        if (auto it = map.find(o); it != map.end()) {
          ops.push_back(it->second);
        } else if (o->opcode() == HloOpcode::kConstant) {
          ops.push_back(BodyConstant(body, o, &body_constants));
        } else {  // a broadcast (of an invariant or a constant), rebuilt at the block's shape
          HloInstruction* x = o->operand(0);
          HloInstruction* src = x->opcode() == HloOpcode::kConstant
                                    ? BodyConstant(body, x, &body_constants)
                                    : inv_gte.at(x);
          HloInstruction* b =
              AddBroadcast(body, src, Shape(o->shape().element_type, ps.dims), o->dimensions,
                           absl::StrCat(o->name(), ".step", s));
          ops.push_back(b);
        }
      }
      auto clone = i->CloneWithNewOperands(Shape(i->shape().element_type, ps.dims), ops,
                                           absl::StrCat(".step", s));
      clone->sharding.reset();
      map[i] = body->AddInstruction(std::move(clone));
    }
    RETURN_IF_ERROR(dus->ReplaceOperandWith(1, map.at(site.sink)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> WindowedEinsumEpilogue::Run(HloModule* module) {
  bool changed = false;
  const std::vector<HloInstruction*> whiles = CollectWhiles(module);
  for (HloInstruction* w : whiles) {
    std::optional<WindowedLoop> loop = MatchWindowedLoop(w);
    if (!loop || loop->kind != WindowedLoopKind::kAllGather || loop->dots.empty()) continue;
    HloComputation* body = loop->body;
    EpilogueSite site;
    std::string why;
    SiteMatch found = FindOutputWrites(*loop, &site, &why);
    if (found == SiteMatch::kFound) found = FindEpilogueAfterLoop(w, &site, &why);
    if (found == SiteMatch::kNone) continue;
    if (found == SiteMatch::kDeclined) {
      AddRemark(w->name(), false, "epilogue left after the loop: " + why);
      continue;
    }
    HloComputation* comp = w->parent();
    // The loop state gains the invariants; each step applies the region to its block.
    ASSIGN_OR_RETURN(auto inv_gte, PassInvariants(w, body, site));
    RETURN_IF_ERROR(ComputeEpilogueInSteps(body, site, inv_gte));
    // Names for the remark, taken before the region is removed.
    std::vector<std::string> names;
    for (const HloInstruction* i : site.region) names.push_back(absl::StrCat("'", i->name(), "'"));
    // After the loop, the sink is the loop's output.
    HloInstruction* sink = site.sink;
    HloInstruction* out = site.out;
    if (sink->sharding && !out->sharding) out->sharding = sink->sharding;
    RETURN_IF_ERROR(sink->ReplaceAllUsesWith(out));
    RETURN_IF_ERROR(comp->RemoveUnusedChains(
        {sink}, [](const HloInstruction* x) { return x->IsRemovableWhenUnused(); }));
    changed = true;
    const size_t writes = site.writes.size(), invariants = site.invariants.size();
    AddRemark(w->name(), true,
              absl::StrCat("epilogue ", absl::StrJoin(names, ", "), " computed by every step on "
                           "the block it writes (", writes, " write",
                           writes == 1 ? "" : "s", " in the body, ", loop->trip_count,
                           " iteration", loop->trip_count == 1 ? "" : "s", "; ",
                           invariants, " loop-invariant operand",
                           invariants == 1 ? "" : "s", " passed in), instead of after the "
                           "loop"));
  }
  return changed;
}

namespace {
absl::StatusOr<std::unique_ptr<HloPass>> MakeWindowedEinsumEpilogue(const PassOptions&) {
  return std::unique_ptr<HloPass>(new WindowedEinsumEpilogue());
}
}  // namespace

WEAVE_REGISTER_PASS("windowed-einsum-epilogue", MakeWindowedEinsumEpilogue);

}  // namespace weave
