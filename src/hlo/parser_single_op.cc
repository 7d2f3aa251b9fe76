// HLO text parser: a text that is one instruction, not a module. See parser_internal.h.
//
// Contract (XLA's ParseAndReturnUnverifiedModule reads such texts the same way): without an
// `HloModule` header, a text that starts `[ROOT] name = ...` or with a shape (`f32[2] add(...)`,
// no name) is one instruction. It becomes the root of the module's only computation, the entry,
// named `_`; an instruction written without a name is named `_` too. Each operand that names no
// instruction defined before it, or gives only a shape (`add(f32[2], f32[2] %y)`), becomes the
// next parameter of the entry, with the operand's shape and name (`_<number>` when it has none);
// an operand that repeats a name uses the same parameter. Nested operands (`add(f32[2]
// negate(f32[2] %x), ...)`) read the same way; computations written inline in its attributes do
// not: their operands must be their own instructions. The module is scheduled (the instruction
// order is its schedule), as XLA's is. Anything after the instruction is an error.
#include "hlo/parser_internal.h"

namespace weave::parser_internal {

bool Parser::SingleInstructionAhead() {
  const size_t save = pos_;
  bool single = false;
  const char c = Peek();
  if (c == '(') {  // a tuple result shape
    single = true;
  } else if (c == '%' || IsIdentStart(c)) {
    std::string_view w = PeekIdent();
    const size_t after = pos_ + w.size();
    if (c != '%' && after < src_.size() && src_[after] == '[' && ParsePrimitiveType(w)) {
      single = true;  // `f32[2] opcode(...)`
    } else {
      if (c != '%' && w == "ROOT") {
        pos_ = after;
        const char n = Peek();
        if (n == '%' || IsIdentStart(n)) single = true;  // `ROOT name = ...`
      }
      if (!single) {
        if (Peek() == '%') ++pos_;  // Peek: the text may end after `ROOT`
        pos_ += PeekIdent().size();
        single = Peek() == '=';  // `name = ...`
      }
    }
  }
  pos_ = save;
  return single;
}

bool Parser::ParseSingleInstruction() {
  module_->is_scheduled = true;
  HloComputation* comp = module_->AddComputation(std::make_unique<HloComputation>("_"));
  CompState st;
  st.comp = comp;
  single_op_ = &st;
  SkipWs();
  const size_t start = pos_;
  bool ok;
  const std::string_view first = PeekIdent();
  if (Peek() == '(' ||
      (ParsePrimitiveType(first) && src_.substr(pos_ + first.size(), 1) == "[")) {
    // No name: `shape opcode(operands), attributes`.
    Shape shape;
    ok = ParseShape(&shape);
    if (ok && !shape.CheckedByteSize()) {
      ok = Error(start, "shape of the instruction is too large: its byte size overflows int64");
    }
    HloInstruction* instr = nullptr;
    ok = ok && ParseInstructionBody(st, std::move(shape), "_", /*top_level=*/true, &instr) &&
         Register(st, instr, "_", start, /*generated=*/false);
    if (ok) st.last = instr;
  } else {
    ok = ParseInstruction(st);
  }
  single_op_ = nullptr;
  if (!ok) return false;
  if (!AtEnd()) {
    return Error(pos_, "expected the end of the text after its one instruction (a text of several "
                       "instructions needs them in a computation, `name { ... }`)");
  }
  if (!FinishInstructionList(st, start)) return false;
  module_->set_entry(comp);
  return status_.ok();
}

bool Parser::AddOperandParameter(CompState& st, const Shape& shape, std::string_view name,
                                 size_t pos, HloInstruction** out) {
  const int64_t number = static_cast<int64_t>(st.param_seen.size());
  std::string pname = name.empty() ? Cat("_", number) : std::string(name);
  auto param = HloInstruction::Create(HloOpcode::kParameter, shape, {});
  param->parameter_number = number;
  param->set_name(pname);
  HloInstruction* raw = st.comp->AddInstruction(std::move(param));
  st.param_seen.push_back(true);
  ++st.param_count;
  if (!Register(st, raw, pname, pos, /*generated=*/false)) return false;
  *out = raw;
  return true;
}

}  // namespace weave::parser_internal
