// Collectives in XLA's async forms for the windowed einsum decomposer
// (windowed_einsum_plan.h: CollectiveAttributes, CollectiveKind, CollectiveInput, AsyncStartOf).
// Dumps after XLA's async conversion write all-gather-start/-done, all-reduce-start/-done, and
// reduce-scatter / all-to-all either sugared (reduce-scatter-start/-done) or as async-start/-done
// wrapping a computation whose root is the collective (../shared/specs/hlo-text-format.md,
// "Async"). The decomposer treats such a pair like the synchronous collective: the -done is the
// value the program reads, the -start (or the wrapped root) holds the attributes.
#include "absl/strings/str_cat.h"
#include "windowed_einsum/windowed_einsum_plan.h"

namespace weave::windowed_einsum {

HloInstruction* AsyncStartOf(HloInstruction* v) {
  if (v == nullptr) return nullptr;
  switch (v->opcode()) {
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAllReduceDone:
    case HloOpcode::kAsyncDone:
      break;
    default:
      return nullptr;
  }
  if (v->operand_count() != 1) return nullptr;
  HloInstruction* s = v->operand(0);
  for (int guard = 0; guard < 16 && s->opcode() == HloOpcode::kAsyncUpdate; ++guard) {
    if (s->operand_count() != 1) return nullptr;
    s = s->operand(0);
  }
  switch (s->opcode()) {
    case HloOpcode::kAllGatherStart:
      return v->opcode() == HloOpcode::kAllGatherDone ? s : nullptr;
    case HloOpcode::kAllReduceStart:
      return v->opcode() == HloOpcode::kAllReduceDone ? s : nullptr;
    case HloOpcode::kAsyncStart:
      return v->opcode() == HloOpcode::kAsyncDone ? s : nullptr;
    default:
      return nullptr;
  }
}

const HloInstruction* CollectiveAttributes(const HloInstruction* v) {
  if (v == nullptr) return nullptr;
  switch (v->opcode()) {
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllToAll:
      return v;
    default:
      break;
  }
  const HloInstruction* s = AsyncStartOf(const_cast<HloInstruction*>(v));
  if (s == nullptr) return nullptr;
  if (s->opcode() != HloOpcode::kAsyncStart || !s->async_sugar().empty()) return s;
  // Unsugared: the wrapped computation's root, a collective of the computation's parameters.
  if (s->called_computations().empty()) return nullptr;
  const HloComputation* c = s->called_computations()[0];
  const HloInstruction* root = c->root();
  if (root == nullptr || root->operand_count() != s->operand_count()) return nullptr;
  for (int64_t i = 0; i < root->operand_count(); ++i) {
    const HloInstruction* o = root->operand(i);
    if (o->opcode() != HloOpcode::kParameter || o->parameter_number != i) return nullptr;
  }
  return root;
}

HloOpcode CollectiveKind(const HloInstruction* v) {
  const HloInstruction* a = CollectiveAttributes(v);
  if (a == nullptr) return HloOpcode::kTuple;
  switch (a->opcode()) {
    case HloOpcode::kAllGatherStart:
      return HloOpcode::kAllGather;
    case HloOpcode::kAllReduceStart:
      return HloOpcode::kAllReduce;
    case HloOpcode::kAsyncStart: {
      std::optional<HloOpcode> op = ParseHloOpcode(a->async_sugar());
      return op ? *op : HloOpcode::kTuple;
    }
    default:
      return a->opcode();
  }
}

HloInstruction* CollectiveInput(HloInstruction* v) {
  HloInstruction* s = AsyncStartOf(v);
  HloInstruction* c = s != nullptr ? s : v;
  return c->operand_count() == 1 ? c->operand(0) : nullptr;
}

std::vector<std::string> CollectiveNames(const HloInstruction* v) {
  std::vector<std::string> out = {v->name()};
  HloInstruction* s = AsyncStartOf(const_cast<HloInstruction*>(v));
  if (s != nullptr) out.push_back(s->name());
  const HloInstruction* a = CollectiveAttributes(v);
  if (a != nullptr && a != v && a != s) out.push_back(a->name());
  return out;
}

std::string CollectiveText(const HloInstruction* v) {
  HloInstruction* s = AsyncStartOf(const_cast<HloInstruction*>(v));
  std::string kind(HloOpcodeString(CollectiveKind(v)));
  if (s == nullptr) return absl::StrCat(kind, " '", v->name(), "'");
  return absl::StrCat("async ", kind, " '", s->name(), "'/'", v->name(), "'");
}

}  // namespace weave::windowed_einsum
