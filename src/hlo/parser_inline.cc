// HLO text parser: the computation operands of attributes (`to_apply=`, `calls=`, `condition=`,
// `branch_computations={...}`, ...). See parser_internal.h.
//
// Contract: a computation operand is either the name of a computation defined earlier in the
// text, or the computation itself written inline in braces, `to_apply={ x = f32[] parameter(0)
// ROOT n = f32[] negate(x) }`, as XLA's parser reads it (ParseHloComputation). An inline
// computation has a scope of its own: its instructions see neither the caller's names nor each
// other's across computations, and it can have no signature and no `execution_thread`. It becomes
// an ordinary computation of the module, named `<instruction>.<attribute>` (made unique; a list
// element adds its index), so the module prints in the canonical form, every computation
// defined on its own and referred to by name; printing that again gives the same text. The name
// is made up: a computation written later under the same name keeps it, and the inline one is
// renamed.
#include "hlo/parser_internal.h"

namespace weave::parser_internal {

bool Parser::InlineComputationAhead() {
  const size_t save = pos_;
  bool inline_body = false;
  if (Peek() == '{') {
    ++pos_;
    SkipWs();
    if (PeekIdent() == "ROOT") {
      pos_ += 4;
      SkipWs();
    }
    const bool percent = pos_ < src_.size() && src_[pos_] == '%';
    if (percent) ++pos_;
    const std::string_view name = PeekIdent();
    if (!name.empty()) {
      pos_ += name.size();
      // `name =`; or an instruction without its name, `f32[] add(...)`, which the instruction
      // parser then reports as such.
      inline_body = Peek() == '=' || (!percent && pos_ < src_.size() && src_[pos_] == '[' &&
                                      ParsePrimitiveType(name));
    }
  }
  pos_ = save;
  return inline_body;
}

bool Parser::ParseInlineComputation(HloComputation** out, const InlineName& hint) {
  SkipWs();
  const size_t open_pos = pos_;
  DepthGuard guard(this);
  if (depth_ > kMaxNesting) return Error(open_pos, "inline computations nested too deeply");
  std::string name = Cat(hint.owner.empty() ? std::string_view("computation") : hint.owner, ".",
                         hint.attribute);
  // A computation written later under this name takes it (RenameInlineComputation); one written
  // earlier keeps it, and AddComputation makes this one's unique.
  HloComputation* comp = module_->AddComputation(std::make_unique<HloComputation>(name));
  inline_comps_.insert(comp);
  // The instructions of the inline computation reset the per-instruction attribute names; the
  // instruction that owns the attribute still needs its own.
  std::vector<std::string_view> owner_attributes = std::move(small_names_);
  small_names_.clear();
  const bool ok = ParseInstructionList(comp, open_pos);
  small_names_ = std::move(owner_attributes);
  if (!ok) return false;
  *out = comp;
  return true;
}

void Parser::RenameInlineComputation(HloComputation* c) {
  const std::string base = c->name();
  for (int64_t k = 1;; ++k) {
    std::string fresh = Cat(base, ".", k);
    if (module_->GetComputation(fresh) == nullptr && !comps_.contains(fresh)) {
      c->set_name(std::move(fresh));
      return;
    }
  }
}

bool Parser::ParseComputationRef(HloComputation** out, const InlineName& hint) {
  if (Peek() == '{') {
    if (!InlineComputationAhead()) {
      return Expected("a computation name or an inline computation '{ name = ... }'");
    }
    return ParseInlineComputation(out, hint);
  }
  SkipWs();
  size_t p = pos_;
  std::string_view name;
  if (!ParseName(&name, "a computation name")) return false;
  auto it = comps_.find(name);
  if (it == comps_.end()) {
    return Error(p, Cat("unknown computation '", name, "'"));
  }
  *out = it->second;
  return true;
}

bool Parser::ParseComputationList(std::vector<HloComputation*>* out, const InlineName& hint) {
  if (Peek() != '{' || InlineComputationAhead()) {
    HloComputation* c;
    if (!ParseComputationRef(&c, hint)) return false;
    out->push_back(c);
    return true;
  }
  ++pos_;
  if (Consume('}')) return true;
  // Inline elements are named `<instruction>.<attribute>.<index>`.
  std::string indexed;
  do {
    indexed = Cat(hint.attribute, ".", out->size());
    HloComputation* c;
    if (!ParseComputationRef(&c, InlineName{hint.owner, indexed})) return false;
    out->push_back(c);
  } while (Consume(','));
  return Expect('}');
}

}  // namespace weave::parser_internal
