#include "eval/random_outputs.h"

#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "eval/ops.h"

namespace weave::eval {
namespace {


// Whether a computation (or one it calls) holds an rng: the first one found, memoized.
class RngFinder {
 public:
  const HloInstruction* InComputation(const HloComputation* c) {
    auto it = memo_.find(c);
    if (it != memo_.end()) return it->second;
    memo_[c] = nullptr;  // a cycle (not valid HLO) ends here
    const HloInstruction* found = nullptr;
    for (const HloInstruction* h : c->instructions()) {
      if ((found = InInstruction(h)) != nullptr) break;
    }
    memo_[c] = found;
    return found;
  }
  const HloInstruction* InInstruction(const HloInstruction* h) {
    if (h->opcode() == HloOpcode::kRng) return h;
    for (const HloComputation* c : h->called_computations()) {
      if (const HloInstruction* r = InComputation(c)) return r;
    }
    return nullptr;
  }

 private:
  absl::flat_hash_map<const HloComputation*, const HloInstruction*> memo_;
};

// The first rng in the backward slice of `root` (operands, and everything a called computation
// holds).
const HloInstruction* RngInSlice(const HloInstruction* root, RngFinder* finder) {
  std::vector<const HloInstruction*> stack = {root};
  absl::flat_hash_set<const HloInstruction*> seen = {root};
  while (!stack.empty()) {
    const HloInstruction* h = stack.back();
    stack.pop_back();
    if (const HloInstruction* r = finder->InInstruction(h)) return r;
    for (const HloInstruction* o : h->operands()) {
      if (seen.insert(o).second) stack.push_back(o);
    }
  }
  return nullptr;
}

// The rng whose draw `h` is, through range-keeping data movement; nullptr otherwise.
const HloInstruction* DirectDraw(const HloInstruction* h) {
  while (h != nullptr) {
    switch (h->opcode()) {
      case HloOpcode::kRng:
        return h;
      case HloOpcode::kCopy:
      case HloOpcode::kReshape:
      case HloOpcode::kTranspose:
      case HloOpcode::kSlice:
      case HloOpcode::kReverse:
      case HloOpcode::kBroadcast:
        h = h->operand(0);
        break;
      default:
        return nullptr;
    }
  }
  return nullptr;
}

void Leaves(const HloInstruction* h, RngFinder* finder, std::vector<RandomOutput>* out) {
  if (h->opcode() == HloOpcode::kTuple) {
    for (const HloInstruction* o : h->operands()) Leaves(o, finder, out);
    return;
  }
  const HloInstruction* rng = RngInSlice(h, finder);
  const HloInstruction* direct = h->shape().IsTuple() ? nullptr : DirectDraw(h);
  for (int64_t k = h->shape().LeafCount(); k > 0; --k) {
    out->push_back(RandomOutput{rng, direct != nullptr && direct == rng});
  }
}

// A bound of the global module's entry rng: a constant or an entry parameter's value.
std::optional<Value> Bound(const HloInstruction* b, const std::vector<ValuePtr>& inputs) {
  if (b->opcode() == HloOpcode::kParameter && b->parameter_number >= 0 &&
      b->parameter_number < static_cast<int64_t>(inputs.size()) &&
      inputs[static_cast<size_t>(b->parameter_number)]->shape.IsArray() &&
      inputs[static_cast<size_t>(b->parameter_number)]->size() == 1) {
    return *inputs[static_cast<size_t>(b->parameter_number)];
  }
  if (b->opcode() == HloOpcode::kConstant && b->literal.has_value() && b->shape().rank() == 0) {
    absl::StatusOr<Value> v = ops::FromLiteral(*b->literal, b->shape());
    if (v.ok()) return *std::move(v);
  }
  return std::nullopt;
}

}  // namespace

std::vector<RandomOutput> RandomOutputs(const HloModule& global) {
  std::vector<RandomOutput> out;
  const HloComputation* entry = global.entry();
  if (entry == nullptr || entry->root() == nullptr) return out;
  RngFinder finder;
  Leaves(entry->root(), &finder, &out);
  return out;
}

OutputComparison CompareRandomOutput(const RandomOutput& r, const Value& reference,
                                     const Value& assembled,
                                     const std::vector<ValuePtr>& global_inputs) {
  OutputComparison c;
  c.shape = reference.shape.ToString(false);
  c.elements = assembled.size();
  c.path = absl::StrCat("random: depends on rng '", r.rng->name(),
                        "'; compared on shape and the agreement of its copies");
  if (!reference.shape.Compatible(assembled.shape)) {
    c.pass = false;
    c.mismatches = c.elements;
    absl::StrAppend(&c.path, "; the shapes differ (", assembled.shape.ToString(false), ")");
    return c;
  }
  const std::string* dist = r.rng->GetRawAttribute("distribution");
  if (!r.direct || dist == nullptr || *dist != "rng_uniform" ||
      r.rng->parent() != r.rng->parent()->parent()->entry() || r.rng->operand_count() != 2) {
    return c;
  }
  const std::optional<Value> a = Bound(r.rng->operand(0), global_inputs);
  const std::optional<Value> b = Bound(r.rng->operand(1), global_inputs);
  if (!a || !b) return c;
  const bool is_int = assembled.storage() == Storage::kInt;
  for (int64_t k = 0; k < assembled.size(); ++k) {
    bool in = false;
    if (is_int) {
      const int64_t lo = a->GetInt(0), hi = b->GetInt(0), x = assembled.GetInt(k);
      const bool u = IsUnsignedInteger(assembled.shape.element_type);
      in = u ? (static_cast<uint64_t>(hi) <= static_cast<uint64_t>(lo)
                    ? x == lo
                    : static_cast<uint64_t>(x) >= static_cast<uint64_t>(lo) &&
                          static_cast<uint64_t>(x) < static_cast<uint64_t>(hi))
             : (hi <= lo ? x == lo : x >= lo && x < hi);
    } else {
      const double lo = a->GetDouble(0), hi = b->GetDouble(0), x = assembled.GetDouble(k);
      in = x >= lo && (x < hi || (hi <= lo && x == lo));
    }
    if (!in) ++c.mismatches;
  }
  c.pass = c.mismatches == 0;
  absl::StrAppend(&c.path, is_int ? absl::StrFormat(", and on its range [%d, %d)", a->GetInt(0), b->GetInt(0))
                                  : absl::StrFormat(", and on its range [%g, %g)", a->GetDouble(0), b->GetDouble(0)),
                  c.pass ? "" : absl::StrCat(": ", c.mismatches, " element(s) outside it"));
  return c;
}

}  // namespace weave::eval
