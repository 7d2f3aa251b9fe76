// Hand-written parser for XLA's HLO text format (../shared/specs/hlo-text-format.md).
//
// Design: a single-pass recursive-descent parser working directly on the characters of the input
// (no separate token stream, no regular expressions). Names are resolved through hash maps, so the
// parser is linear in the input size. Every failure records the first error as
// `file:line:column: message` and unwinds through `false` returns; the line and column are only
// computed when an error happens.
//
// This file: the module, its computations, instructions and operands, and the entry points;
// the other jobs are in parser_lexer.cc, parser_shapes.cc, parser_attributes.cc and
// parser_sharding.cc (see parser_internal.h).
#include "hlo/parser.h"
#include "hlo/shape_inference.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "hlo/async_chain.h"
#include "hlo/parser_internal.h"
#include "hlo/text_cursor.h"

namespace weave::parser_internal {

// ------------------------------------------------------------------ module
namespace {

// A shape index `{}` / `{0,1}` at c.
bool ShapeIndex(hlo_internal::TextCursor& c) {
  if (!c.Consume('{')) return false;
  if (c.Consume('}')) return true;
  do {
    int64_t v;
    if (!c.Int(&v) || v < 0) return false;
  } while (c.Consume(','));
  return c.Consume('}');
}

}  // namespace

// XLA's header syntax: input_output_alias={ {out}: (param, {in}[, may-alias|must-alias]), ... },
// buffer_donor={ (param, {in}), ... }. An empty string when `value` follows it, else what is
// wrong.
std::string AliasingSyntaxError(std::string_view value, bool donor) {
  hlo_internal::TextCursor c(value);
  if (!c.Consume('{')) return "expected '{'";
  if (c.Consume('}')) return c.AtEnd() ? "" : "unexpected text after '}'";
  do {
    if (!donor) {
      if (!ShapeIndex(c)) return "expected an output shape index such as {0}";
      if (!c.Consume(':')) return "expected ':' after the output shape index";
    }
    if (!c.Consume('(')) return "expected '(' before the parameter number";
    int64_t param;
    if (!c.Int(&param) || param < 0) return "expected a parameter number";
    if (!c.Consume(',')) return "expected ',' after the parameter number";
    if (!ShapeIndex(c)) return "expected a parameter shape index such as {0}";
    if (!donor && c.Consume(',')) {
      if (!c.ConsumeStr("may-alias") && !c.ConsumeStr("must-alias")) {
        return "expected may-alias or must-alias";
      }
    }
    if (!c.Consume(')')) return "expected ')'";
  } while (c.Consume(','));
  if (!c.Consume('}')) return "expected ',' or '}'";
  return c.AtEnd() ? "" : "unexpected text after '}'";
}

bool Parser::ParseModule() {
  SkipWs();
  if (!status_.ok()) return false;
  if (AtEnd()) return Error(pos_, "empty input: expected 'HloModule' or a computation");
  std::string module_name = "module";
  bool has_header = false;
  if (PeekIdent() == "HloModule") {
    pos_ += 9;
    has_header = true;
    SkipWs();
    size_t b = pos_;
    if (pos_ < src_.size() && src_[pos_] == '%') ++pos_;
    while (pos_ < src_.size() && IsIdentChar(src_[pos_])) ++pos_;
    if (pos_ == b) return Expected("a module name");
    module_name = std::string(src_.substr(b, pos_ - b));
    if (module_name[0] == '%') module_name.erase(0, 1);
    // XLA's parser also reads the older header form `HloModule name:`.
    SkipWs();
    if (Peek() == ':') ++pos_;
  }
  module_ = std::make_unique<HloModule>(module_name);
  if (!has_header && SingleInstructionAhead()) return ParseSingleInstruction();
  if (has_header && !ParseHeaderAttributes()) return false;
  if (!ParseStackTables()) return false;
  while (!AtEnd()) {
    if (!ParseComputation()) return false;
  }
  if (!status_.ok()) return false;
  if (module_->computations().empty()) {
    return Error(pos_, "expected at least one computation");
  }
  if (!entry_) entry_ = last_comp_;
  module_->set_entry(entry_);
  return status_.ok();
}

bool Parser::ParseHeaderAttributes() {
  small_names_.clear();
  while (Consume(',')) {
    SkipWs();
    size_t apos = pos_;
    std::string_view name;
    if (!ParseIdent(&name, "a module attribute name")) return false;
    if (!Expect('=')) return false;
    for (std::string_view seen : small_names_) {
      if (seen == name) return Error(apos, Cat("duplicate module attribute '", name, "'"));
    }
    small_names_.push_back(name);
    if (name == "is_scheduled") {
      if (!ParseBool(&module_->is_scheduled)) return false;
    } else if (name == "num_partitions" || name == "replica_count") {
      int64_t v;
      size_t vpos = pos_;
      if (!ParseInt(&v)) return false;
      if (v < 1) return Error(vpos, Cat(name, " must be positive, found ", v));
      if (name == "num_partitions") {
        module_->num_partitions = v;
        module_->has_num_partitions = true;
      } else {
        module_->replica_count = v;
      }
    } else {
      std::string_view value;
      const size_t vpos = pos_;
      if (!ScanRawValue(&value)) return false;
      if (name == "input_output_alias" || name == "buffer_donor") {
        const std::string why = AliasingSyntaxError(value, name == "buffer_donor");
        if (!why.empty()) return Error(vpos, Cat(name, ": ", why));
      }
      module_->header_attributes.emplace_back(std::string(name), std::string(value));
    }
  }
  return true;
}

// FileNames / FunctionNames / FileLocations / StackFrames tables, kept verbatim.
bool Parser::ParseStackTables() {
  auto is_table = [](std::string_view w) {
    return w == "FileNames" || w == "FunctionNames" || w == "FileLocations" ||
           w == "StackFrames";
  };
  if (!is_table(PeekIdent())) return true;
  size_t b = pos_;
  size_t end = pos_;
  while (true) {
    std::string_view w = PeekIdent();
    if (is_table(w)) {
      pos_ += w.size();
    } else if (IsDigit(Peek())) {
      int64_t id;
      if (!ParseInt(&id)) return false;
      char c = Peek();
      std::string_view v;
      if (c == '"' || c == '\'') {
        if (!ScanString(&v)) return false;
      } else if (c == '{') {
        if (!ScanBraces(&v)) return false;
      } else {
        return Expected("a string or '{' in a stack-frame table row");
      }
    } else {
      break;
    }
    end = pos_;
  }
  module_->stack_tables = std::string(TrimView(src_.substr(b, end - b)));
  return true;
}

// ------------------------------------------------------------------ computations
bool Parser::ParseComputation() {
  SkipWs();
  bool is_entry = false;
  if (PeekIdent() == "ENTRY") {
    pos_ += 5;
    is_entry = true;
  }
  SkipWs();
  size_t name_pos = pos_;
  std::string_view name;
  if (!ParseName(&name, "a computation name")) return false;
  if (comps_.contains(name)) {
    return Error(name_pos, Cat("duplicate computation name '", name, "'"));
  }
  int64_t sig_params = -1;
  Shape declared_result;
  bool has_declared_result = false;
  if (Peek() == '(') {  // signature
    ++pos_;
    sig_params = 0;
    if (!Consume(')')) {
      do {
        std::string_view pname;
        if (!ParseName(&pname, "a parameter name")) return false;
        if (!Expect(':')) return false;
        Shape ignored;
        if (!ParseShape(&ignored)) return false;
        ++sig_params;
      } while (Consume(','));
      if (!Expect(')')) return false;
    }
    SkipWs();
    if (src_.substr(pos_, 2) != "->") return Expected("'->' in computation signature");
    pos_ += 2;
    if (!ParseShape(&declared_result, /*allow_layout=*/false)) return false;
    has_declared_result = true;
  }
  if (Peek() != '{') return Expected("'{'");
  // A computation written earlier inline under this name (its name was made up) gives it up.
  if (HloComputation* prev = module_->GetComputation(name); prev && inline_comps_.contains(prev)) {
    RenameInlineComputation(prev);
  }
  auto owned = std::make_unique<HloComputation>(std::string(name));
  HloComputation* comp = module_->AddComputation(std::move(owned));
  if (comp->name() != name) comp->set_name(std::string(name));
  comps_.emplace(name, comp);
  if (is_entry) {
    if (entry_) return Error(name_pos, "more than one ENTRY computation");
    entry_ = comp;
  }
  last_comp_ = comp;

  if (!ParseInstructionList(comp, name_pos)) return false;
  // The signature's result must be the root's shape (layouts aside), as XLA's parser requires.
  if (has_declared_result && !declared_result.Compatible(comp->root()->shape())) {
    return Error(name_pos, Cat("the signature of computation '", name, "' gives the result ",
                               declared_result.ToString(false), ", but its root '", comp->root()->name(),
                               "' is ", comp->root()->shape().ToString(false)));
  }
  // `main() -> ...`: XLA's parser takes an empty parameter list whatever the computation's
  // parameters (its partitioner tests write it); a list that names parameters must match.
  if (sig_params > 0 && sig_params != static_cast<int64_t>(comp->parameters().size())) {
    return Error(name_pos, Cat("signature of computation '", name, "' lists ",
                                        sig_params, " parameters but it has ", comp->parameters().size()));
  }
  // Optional `, execution_thread="..."`.
  size_t save = pos_;
  if (Consume(',')) {
    if (PeekIdent() == "execution_thread") {
      pos_ += 16;
      if (!Expect('=')) return false;
      std::string_view v;
      if (!ScanString(&v)) return false;
      comp->execution_thread = std::string(v);
    } else {
      pos_ = save;
      return Expected("'execution_thread=' or a computation");
    }
  }
  return true;
}

bool Parser::ParseInstructionList(HloComputation* comp, size_t name_pos) {
  const std::string& name = comp->name();
  if (!Expect('{')) return false;
  CompState st;
  st.comp = comp;
  while (true) {
    if (AtEnd()) return Error(pos_, Cat("unexpected end of input in computation '",
                                                 name, "' (missing '}')"));
    if (Peek() == '}') {
      ++pos_;
      break;
    }
    if (!ParseInstruction(st)) return false;
  }
  return FinishInstructionList(st, name_pos);
}

bool Parser::FinishInstructionList(CompState& st, size_t name_pos) {
  HloComputation* comp = st.comp;
  const std::string& name = comp->name();
  if (st.last == nullptr) {
    return Error(name_pos, Cat("computation '", name, "' has no instructions"));
  }
  comp->set_root(st.root ? st.root : st.last);
  for (int64_t i = 0; i < static_cast<int64_t>(st.param_seen.size()); ++i) {
    if (!st.param_seen[static_cast<size_t>(i)]) {
      return Error(name_pos, Cat("computation '", name, "' has no parameter(", i,
                                          ") but has parameter(", st.param_seen.size() - 1,
                                          ")"));
    }
  }
  // Control predecessors may name instructions defined later in the computation.
  for (auto& pc : st.control) {
    for (auto& [n, p] : pc.names) {
      auto it = st.by_name.find(n);
      if (it == st.by_name.end()) {
        return Error(p, Cat("control predecessor '", n, "' is not defined in '",
                                     name, "'"));
      }
      it->second->AddControlDependencyTo(pc.instr);
    }
  }
  return true;
}

// Registers `instr` (already added to the computation) under `name` in the computation scope.
// Parsed names are kept exactly as written; `generated` marks instructions the parser created
// itself (nested operands, compact get-tuple-elements), whose names may be changed if the text
// later defines the same name.
bool Parser::Register(CompState& st, HloInstruction* instr, std::string_view name, size_t name_pos,
              bool generated) {
  auto [it, inserted] = st.by_name.try_emplace(std::string(name), instr);
  if (!inserted) {
    HloInstruction* prev = it->second;
    if (generated_.contains(prev)) {
      // A name we invented earlier clashes with one written later: rename ours.
      std::string fresh = module_->UniqueName(prev->opcode() == HloOpcode::kGetTupleElement
                                                  ? std::string_view("get-tuple-element")
                                                  : HloOpcodeString(prev->opcode()));
      prev->set_name(fresh);
      it->second = instr;
      st.by_name.emplace(std::move(fresh), prev);
    } else {
      return Error(name_pos, Cat("duplicate instruction name '", name, "' in '",
                                          st.comp->name(), "'"));
    }
  }
  if (instr->name() != name) {
    // AddInstruction made the name module-unique (the same name is used in another
    // computation): keep it as written.
    instr->set_name(std::string(name));
    module_->ReserveName(instr->name());
  }
  if (generated) generated_.insert(instr);
  return true;
}

bool Parser::ParseInstruction(CompState& st) {
  SkipWs();
  size_t name_pos = pos_;
  std::string_view name;
  if (!ParseName(&name, "an instruction name or '}'")) return false;
  bool is_root = false;
  if (name == "ROOT" && src_[name_pos] != '%' && Peek() != '=') {
    is_root = true;
    SkipWs();
    name_pos = pos_;
    if (!ParseName(&name, "an instruction name after ROOT")) return false;
  }
  if (!Expect('=')) return false;
  Shape shape;
  SkipWs();
  const size_t shape_pos = pos_;
  // `name = opcode(...)`: no result shape written (an identifier followed by '(' is an opcode;
  // a shape is a type followed by '[' or a '(' tuple).
  const std::string_view first = PeekIdent();
  // `b(...)` is a buffer shape, not an opcode.
  const bool infer = !first.empty() && first != "b" && pos_ + first.size() < src_.size() &&
                     src_[pos_ + first.size()] == '(';
  if (!infer) {
    shape_owner_ = name;
    const bool shape_ok = ParseShape(&shape);
    shape_owner_ = {};
    if (!shape_ok) return false;
    if (!shape.CheckedByteSize()) {  // a tuple whose element byte sizes sum past int64
      return Error(shape_pos, Cat("shape of instruction '", name,
                                  "' is too large: its byte size overflows int64"));
    }
  }
  HloInstruction* instr = nullptr;
  if (!ParseInstructionBody(st, std::move(shape), name, /*top_level=*/true, &instr, infer)) {
    return false;
  }
  if (!Register(st, instr, name, name_pos, /*generated=*/false)) return false;
  if (is_root) {
    if (st.root) {
      return Error(name_pos, Cat("computation '", st.comp->name(),
                                          "' has more than one ROOT"));
    }
    st.root = instr;
  }
  st.last = instr;
  return true;
}

namespace {

// What the messages about a missing result shape call an instruction (`name` empty: a nested
// operand).
std::string MissingShapeSubject(std::string_view name, std::string_view opname) {
  return name.empty() ? Cat("nested operand '", opname, "(...)'")
                      : Cat("instruction '", name, "'");
}

}  // namespace

// Parses `opcode(operands) [, attributes]` and adds the instruction to the computation.
// Nested operands (test style) have no attributes.
bool Parser::ParseInstructionBody(CompState& st, Shape shape, std::string_view name, bool top_level,
                          HloInstruction** out, bool infer_shape) {
  SkipWs();
  size_t op_pos = pos_;
  std::string_view opname;
  if (!ParseIdent(&opname, "an opcode")) return false;
  std::optional<HloOpcode> op;
  std::string_view sugar;
  HloOpcode attr_op = HloOpcode::kTuple;
  if (!ResolveOpcode(opname, op_pos, &op, &sugar, &attr_op)) return false;
  if (infer_shape && (*op == HloOpcode::kParameter || *op == HloOpcode::kConstant)) {
    return Error(op_pos, Cat(MissingShapeSubject(name, opname), " has no result shape: a ", opname,
                             " must write its shape"));
  }
  if (!Expect('(')) return false;

  std::vector<HloInstruction*> operands;
  int64_t param_number = -1;
  std::optional<Literal> literal;
  if (*op == HloOpcode::kParameter) {
    if (!ParseParameterNumber(st, &param_number)) return false;
  } else if (*op == HloOpcode::kConstant) {
    literal.emplace();
    literal->shape = shape;
    if (!ParseLiteral(&*literal)) return false;
  } else if (!Consume(')')) {
    do {
      HloInstruction* operand = nullptr;
      if (!ParseOperand(st, &operand)) return false;
      operands.push_back(operand);
    } while (Consume(','));
    if (!Expect(')')) return false;
  }

  std::unique_ptr<HloInstruction> owned =
      HloInstruction::Create(*op, std::move(shape), std::move(operands));
  HloInstruction* instr = owned.get();
  instr->set_name(std::string(name));
  instr->parameter_number = param_number;
  if (literal) instr->literal = std::move(literal);
  if (!sugar.empty()) instr->set_async_sugar(std::string(sugar));

  CalledSlots called;
  if (top_level) {
    small_names_.clear();
    while (Peek() == ',') {
      ++pos_;
      if (!ParseAttribute(st, instr, attr_op, called)) return false;
    }
  }
  if (!AssembleCalled(*op, attr_op, !sugar.empty(), called, instr, op_pos)) return false;
  // An async computation written inline runs on the thread its async-start names (XLA's parser
  // creates it on that thread).
  if (*op == HloOpcode::kAsyncStart && instr->called_computations().size() == 1 &&
      inline_comps_.contains(instr->called_computations()[0])) {
    if (const std::string* t = instr->GetRawAttribute("async_execution_thread"); t != nullptr) {
      if (ExecutionThreadName(*t) != "main") instr->called_computations()[0]->execution_thread = *t;  // as written
    }
  }
  if (infer_shape) {
    std::optional<Shape> inferred = sugar.empty() ? InferResultShape(*instr) : std::nullopt;
    if (!inferred) {
      return Error(op_pos, Cat(MissingShapeSubject(name, opname),
                               " has no result shape and Weave cannot infer one for ",
                               opname, " on these operands: write its shape"));
    }
    if (!inferred->CheckedByteSize()) {
      return Error(op_pos, Cat("inferred shape of instruction '", name,
                               "' is too large: its byte size overflows int64"));
    }
    instr->set_shape(std::move(*inferred));
  }
  *out = st.comp->AddInstruction(std::move(owned));
  return true;
}

bool Parser::ResolveOpcode(std::string_view opname, size_t op_pos, std::optional<HloOpcode>* op,
                           std::string_view* sugar, HloOpcode* attr_op) {
  *op = ParseHloOpcode(opname);
  if (*op) {
    *attr_op = **op;
    return true;
  }
  // Sugared async form `X-start/-update/-done`.
  static constexpr std::pair<std::string_view, HloOpcode> kSuffixes[] = {
      {"-start", HloOpcode::kAsyncStart},
      {"-update", HloOpcode::kAsyncUpdate},
      {"-done", HloOpcode::kAsyncDone}};
  for (const auto& [suffix, async_op] : kSuffixes) {
    if (opname.size() > suffix.size() &&
        opname.substr(opname.size() - suffix.size()) == suffix) {
      std::string_view base = opname.substr(0, opname.size() - suffix.size());
      std::optional<HloOpcode> wrapped = ParseHloOpcode(base);
      // XLA's parser wraps no collective, copy, send or recv this way (they have their own
      // -start/-done opcodes or none): `send-start`, `all-gather-update` are unknown opcodes.
      if (wrapped && (*wrapped == HloOpcode::kAllGather || *wrapped == HloOpcode::kAllReduce ||
                      *wrapped == HloOpcode::kCollectivePermute || *wrapped == HloOpcode::kCopy ||
                      *wrapped == HloOpcode::kRecv || *wrapped == HloOpcode::kSend)) {
        return Error(op_pos, Cat("unknown opcode '", opname, "' (", base, " has no async wrapped form)"));
      }
      if (wrapped) {
        *op = async_op;
        *sugar = base;
        *attr_op = *wrapped;
      }
      break;
    }
  }
  if (!*op) return Error(op_pos, Cat("unknown opcode '", opname, "'"));
  return true;
}

bool Parser::ParseParameterNumber(CompState& st, int64_t* param_number) {
  SkipWs();
  size_t ppos = pos_;
  if (!ParseInt(param_number, "a parameter number")) return false;
  if (*param_number < 0 || *param_number > kMaxParameterNumber) {
    return Error(ppos, Cat("invalid parameter number ", *param_number));
  }
  if (static_cast<size_t>(*param_number) >= st.param_seen.size()) {
    st.param_seen.resize(static_cast<size_t>(*param_number) + 1, false);
  }
  if (st.param_seen[static_cast<size_t>(*param_number)]) {
    return Error(ppos, Cat("duplicate parameter(", *param_number, ") in '",
                                    st.comp->name(), "'"));
  }
  st.param_seen[static_cast<size_t>(*param_number)] = true;
  ++st.param_count;
  return Expect(')');
}

bool Parser::AssembleCalled(HloOpcode op, HloOpcode attr_op, bool sugared, CalledSlots& c,
                    HloInstruction* instr, size_t op_pos) {
  auto& v = *instr->mutable_called_computations();
  if (op == HloOpcode::kWhile) {
    if (!c.condition || !c.body) {
      return Error(op_pos, "while needs both condition= and body=");
    }
    v = {c.condition, c.body};
  } else if (op == HloOpcode::kConditional) {
    if (c.true_comp || c.false_comp) {
      if (!c.true_comp || !c.false_comp || !c.branches.empty()) {
        return Error(op_pos, "conditional needs true_computation= and false_computation= "
                             "(or branch_computations=)");
      }
      instr->conditional_is_pred = true;
      v = {c.true_comp, c.false_comp};
    } else {
      if (c.branches.empty()) {
        return Error(op_pos, "conditional needs branch_computations= or "
                             "true_computation=/false_computation=");
      }
      if (instr->operand_count() > 0 && instr->operand(0)->shape().IsArray() &&
          instr->operand(0)->shape().element_type == PrimitiveType::PRED) {
        return Error(op_pos, "a conditional on a pred[] branch index takes true_computation= and "
                             "false_computation=, not branch_computations= (XLA's parser)");
      }
      v = c.branches;
    }
  } else if (attr_op == HloOpcode::kSelectAndScatter && (c.select || c.scatter)) {
    if (!c.select || !c.scatter) return Error(op_pos, "select-and-scatter needs select= and scatter=");
    v = {c.select, c.scatter};
  } else {
    (void)sugared;
    v.insert(v.end(), c.to_apply.begin(), c.to_apply.end());
    v.insert(v.end(), c.calls.begin(), c.calls.end());
    v.insert(v.end(), c.called.begin(), c.called.end());
    if (c.condition) v.push_back(c.condition);
    if (c.body) v.push_back(c.body);
    if (c.select) v.push_back(c.select);
    if (c.scatter) v.push_back(c.scatter);
    v.insert(v.end(), c.branches.begin(), c.branches.end());
  }
  return true;
}

// `shape? name('#' index)*` or `shape? opcode(operands)` (nested, test style).
bool Parser::ParseOperand(CompState& st, HloInstruction** out) {
  SkipWs();
  size_t b = pos_;
  std::optional<Shape> shape;
  char c = Peek();
  if (c == '(') {
    shape.emplace();
    if (!ParseShape(&*shape)) return false;
  } else if (IsIdentStart(c)) {
    std::string_view w = PeekIdent();
    size_t after = pos_ + w.size();
    if (after < src_.size() && ((src_[after] == '[' && ParsePrimitiveType(w)) || (w == "b" && src_[after] == '('))) {
      shape.emplace();
      if (!ParseShape(&*shape)) return false;
    }
  }
  SkipWs();
  size_t npos = pos_;
  HloInstruction* v = nullptr;
  // A single-instruction text may give an operand's shape alone: a parameter of that shape.
  if (shape && single_op_ == &st && (Peek() == ',' || Peek() == ')')) {
    if (!AddOperandParameter(st, *shape, "", b, &v)) return false;
    *out = v;
    return true;
  }
  std::string_view name;
  if (!ParseName(&name, "an operand")) return false;
  if (src_[npos] != '%' && Peek() == '(') {
    // Nested instruction; without a written shape, its shape is inferred.
    pos_ = npos;
    DepthGuard guard(this);
    if (depth_ > kMaxNesting) return Error(npos, "nested operands nested too deeply");
    const bool infer = !shape.has_value();
    if (!ParseInstructionBody(st, infer ? Shape() : std::move(*shape), "", /*top_level=*/false,
                              &v, infer)) {
      return false;
    }
    if (!Register(st, v, v->name(), npos, /*generated=*/true)) return false;
  } else {
    auto it = st.by_name.find(name);
    if (it != st.by_name.end()) {
      v = it->second;
      // A shape written before the operand's name must be the operand's (XLA's parser checks it).
      if (shape && Peek() != '#' && !shape->Compatible(v->shape())) {
        return Error(b, Cat("the declared operand shape ", shape->ToString(), " is not compatible with '", name,
                            "''s shape ", v->shape().ToString()));
      }
    } else if (single_op_ == &st && shape) {
      if (!AddOperandParameter(st, *shape, name, npos, &v)) return false;
    } else if (single_op_ == &st) {
      return Error(npos, Cat("operand '", name, "' is not defined and has no shape: in a "
                             "single-instruction text, write the operand's shape (f32[2] ",
                             name, ") to make it a parameter"));
    } else {
      return Error(npos, Cat("use of undefined value '", name, "'"));
    }
  }
  while (Peek() == '#') {  // compact get-tuple-element chain
    ++pos_;
    SkipWs();
    size_t ipos = pos_;
    int64_t index;
    if (!ParseInt(&index, "a tuple index")) return false;
    if (!v->shape().IsTuple()) {
      return Error(ipos, Cat("'", v->name(), "' is not a tuple; cannot take #",
                                      index));
    }
    int64_t n = static_cast<int64_t>(v->shape().tuple_shapes.size());
    if (index < 0 || index >= n) {
      return Error(ipos, Cat("tuple index ", index, " is out of range for '",
                                      v->name(), "' with ", n, " elements"));
    }
    auto key = std::make_pair(v, index);
    auto it = st.gte_cache.find(key);
    if (it != st.gte_cache.end()) {
      v = it->second;
      continue;
    }
    auto gte = HloInstruction::Create(HloOpcode::kGetTupleElement,
                                      v->shape().tuple_shapes[static_cast<size_t>(index)], {v});
    gte->tuple_index = index;
    HloInstruction* g = st.comp->AddInstruction(std::move(gte));
    if (!Register(st, g, g->name(), ipos, /*generated=*/true)) {
      return false;
    }
    st.gte_cache.emplace(key, g);
    v = g;
  }
  *out = v;
  return true;
}

}  // namespace weave::parser_internal

namespace weave {

absl::StatusOr<std::unique_ptr<HloModule>> ParseHloModule(std::string_view text,
                                                          std::string_view filename) {
  parser_internal::Parser p(text, filename);
  return p.Run();
}

absl::StatusOr<std::unique_ptr<HloModule>> ParseHloModuleFile(const std::string& path) {
  std::string data;
  if (path == "-") {
    data.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return ParseHloModule(data, "<stdin>");
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(hlo_internal::Cat(path, ": is a directory, not an HLO text file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(hlo_internal::Cat(path, ": cannot open file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  data = std::move(ss).str();
  return ParseHloModule(data, path);
}

}  // namespace weave
