// Internals of the HLO text parser (hlo/parser.h), shared by its files, one per job:
//   parser.cc             module, computations, instructions, operands; the entry points
//   parser_lexer.cc       errors, names, integers, strings, raw braces/values
//   parser_shapes.cc      shapes and layouts, literals (constants)
//   parser_attributes.cc  instruction attributes (`name=value` after the operands)
//   parser_sharding.cc    sharding and replica-group attributes
//   parser_inline.cc      computation references, computations written inline in an attribute
//   parser_single_op.cc   a text of one instruction, wrapped into a module
// Not an API: include only from those files.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "hlo/parser.h"
#include "hlo/str_util.h"

namespace weave::parser_internal {

using hlo_internal::A;
using hlo_internal::Append;
using hlo_internal::Cat;


inline bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool IsIdentChar(char c) {
  return IsIdentStart(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Largest parameter number accepted (keeps malformed input from allocating huge tables).
constexpr int64_t kMaxParameterNumber = int64_t{1} << 20;

inline std::string_view TrimView(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' ||
                        s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Transparent std::string_view hashing for maps keyed by std::string.
struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct SvEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};
template <typename V>
using NameMap = absl::flat_hash_map<std::string, V, SvHash, SvEq>;

// Per-computation parse state.
struct CompState {
  HloComputation* comp = nullptr;
  NameMap<HloInstruction*> by_name;
  HloInstruction* root = nullptr;
  HloInstruction* last = nullptr;
  std::vector<bool> param_seen;
  int64_t param_count = 0;
  // Compact GTE cache: (tuple instruction, index) -> get-tuple-element.
  absl::flat_hash_map<std::pair<HloInstruction*, int64_t>, HloInstruction*> gte_cache;
  struct PendingControl {
    HloInstruction* instr;
    std::vector<std::pair<std::string_view, size_t>> names;  // name, source position
  };
  std::vector<PendingControl> control;
};

// Called-computation attributes of one instruction, assembled per opcode at the end.
// The made-up name of a computation written inline: `<owner>.<attribute>`.
struct InlineName {
  std::string_view owner;      // the instruction's name
  std::string_view attribute;  // to_apply, calls, condition, ...
};

struct CalledSlots {
  std::vector<HloComputation*> to_apply, calls, called, branches;
  HloComputation* condition = nullptr;
  HloComputation* body = nullptr;
  HloComputation* true_comp = nullptr;
  HloComputation* false_comp = nullptr;
  HloComputation* select = nullptr;
  HloComputation* scatter = nullptr;
};

// One `name=value` attribute of an instruction being parsed: where its value goes, and the source
// position of the value (for errors).
struct AttrSite {
  CompState& st;
  HloInstruction* instr;
  HloOpcode op;
  CalledSlots& called;
  std::string_view name;
  size_t vpos;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view filename) : src_(text), file_(filename) {}

  absl::StatusOr<std::unique_ptr<HloModule>> Run() {
    if (!ParseModule()) return status_;
    return std::move(module_);
  }

 private:
  // ------------------------------------------------------------------ errors
  bool Error(size_t pos, std::string_view msg);
  // A short description of the token at `pos` for messages.
  std::string TokenAt(size_t pos);
  bool Expected(std::string_view what);

  // ------------------------------------------------------------------ lexing
  void SkipWs() {
    const size_t n = src_.size();
    while (pos_ < n) {
      char c = src_[pos_];
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < n && src_[pos_ + 1] == '*') {
        size_t e = src_.find("*/", pos_ + 2);
        if (e == std::string_view::npos) {
          Error(pos_, "unterminated '/*' comment");
          pos_ = n;
          return;
        }
        pos_ = e + 2;
      } else if (c == '/' && pos_ + 1 < n && src_[pos_ + 1] == '/') {
        // To the end of the line: '\n', or '\r' alone (old Mac line ends; XLA's lexer too).
        size_t e = src_.find_first_of("\n\r", pos_);
        pos_ = e == std::string_view::npos ? n : e + 1;
      } else {
        return;
      }
    }
  }
  char Peek() {
    SkipWs();
    return pos_ < src_.size() ? src_[pos_] : '\0';
  }
  bool AtEnd() {
    SkipWs();
    return pos_ >= src_.size();
  }
  bool Consume(char c) {
    if (Peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expect(char c) {
    if (Consume(c)) return true;
    return Expected(Cat("'", std::string_view(&c, 1), "'"));
  }
  // Identifier at the cursor without consuming it (empty if none).
  std::string_view PeekIdent() {
    SkipWs();
    size_t e = pos_;
    if (e < src_.size() && IsIdentStart(src_[e])) {
      ++e;
      while (e < src_.size() && IsIdentChar(src_[e])) ++e;
    }
    return src_.substr(pos_, e - pos_);
  }
  bool ParseIdent(std::string_view* out, std::string_view what);
  // `%name` or `name`.
  bool ParseName(std::string_view* out, std::string_view what = "a name");
  // Decimal integer (optionally negative) that must fit in int64.
  bool ParseInt(int64_t* v, std::string_view what = "an integer");
  bool ParseBool(bool* v);
  // `{1,2,3}` or `{}`.
  bool ParseIntList(std::vector<int64_t>* out);
  // A quoted string (`"..."` or `'...'`) with C escapes; returns the span including quotes.
  bool ScanString(std::string_view* out);
  bool ParseString(std::string* out);
  // Brace-matched `{...}` (double-quoted strings skipped); returns the span including braces.
  bool ScanBraces(std::string_view* out);
  // Value of an attribute Weave does not model: a `{...}` blob, a string, or a bare token
  // (which may contain balanced (), [] groups).
  bool ScanRawValue(std::string_view* out);

  // ------------------------------------------------------------------ shapes
  // `allow_layout` is false where a `{` after the shape starts something else (the result shape
  // of a computation signature).
  bool ParseShape(Shape* s, bool allow_layout = true);
  // `[d0,?,<=d2,...]` after an array element type: the dims of `s` (and which are dynamic).
  bool ParseShapeDims(Shape* s);
  // At the `{` after an array shape: its layout `{minor_to_major[:suffix]}` into s->layout.
  bool ParseLayout(Shape* s);
  // An error (at `layout_pos`) unless the layout is empty or lists each dim of `s` once.
  bool CheckLayoutDims(const Shape& s, const Layout& layout, size_t layout_pos);
  // After `:` in a layout: the suffix text (tiles, memory space, ...) up to the closing `}`,
  // trimmed and kept verbatim.
  std::string ScanLayoutSuffix();

  // ------------------------------------------------------------------ module
  bool ParseModule();

  bool ParseHeaderAttributes();

  // ------------------------------------------------------------------ single instruction
  // (parser_single_op.cc) Whether the text (no `HloModule` header) is one instruction
  // (`[ROOT] name = ...` or `shape opcode(...)`) rather than computations.
  bool SingleInstructionAhead();
  // Parses the one instruction into the entry computation of module_.
  bool ParseSingleInstruction();
  // In a single-instruction text, an operand that names no instruction (or no name at all) becomes
  // the next parameter of the entry computation, with the operand's written shape.
  bool AddOperandParameter(CompState& st, const Shape& shape, std::string_view name, size_t pos,
                           HloInstruction** out);

  // FileNames / FunctionNames / FileLocations / StackFrames tables, kept verbatim.
  bool ParseStackTables();

  // ------------------------------------------------------------------ computations
  bool ParseComputation();

  // `{ instruction+ }`: the instructions of `comp` (already added to the module), its root,
  // parameter numbering and control predecessors. `name_pos` locates errors about the whole
  // computation.
  bool ParseInstructionList(HloComputation* comp, size_t name_pos);
  // After the instructions of st.comp: sets the root (the ROOT one, else the last) and checks
  // parameter numbering and control predecessors.
  bool FinishInstructionList(CompState& st, size_t name_pos);

  // Registers `instr` (already added to the computation) under `name` in the computation scope.
  // Parsed names are kept exactly as written; `generated` marks instructions the parser created
  // itself (nested operands, compact get-tuple-elements), whose names may be changed if the text
  // later defines the same name.
  bool Register(CompState& st, HloInstruction* instr, std::string_view name, size_t name_pos,
                bool generated);

  bool ParseInstruction(CompState& st);

  // Parses `opcode(operands) [, attributes]` and adds the instruction to the computation.
  // Nested operands (test style) have no attributes. `infer_shape`: the text gave no result
  // shape; it is inferred from the operands and attributes (hlo/shape_inference.h) or an error.
  bool ParseInstructionBody(CompState& st, Shape shape, std::string_view name, bool top_level,
                            HloInstruction** out, bool infer_shape = false);

  // The opcode written `opname` (at `op_pos`): *op and *attr_op that opcode; or, for the sugared
  // async form `X-start/-update/-done`, the async opcode, *sugar = "X" and *attr_op = X's opcode.
  // An error for an unknown opcode.
  bool ResolveOpcode(std::string_view opname, size_t op_pos, std::optional<HloOpcode>* op,
                     std::string_view* sugar, HloOpcode* attr_op);
  // After `parameter(`: the parameter number and `)`, counted in `st` (a duplicate is an error).
  bool ParseParameterNumber(CompState& st, int64_t* param_number);

  bool AssembleCalled(HloOpcode op, HloOpcode attr_op, bool sugared, CalledSlots& c,
                      HloInstruction* instr, size_t op_pos);

  // `shape? name('#' index)*` or `shape? opcode(operands)` (nested, test style).
  bool ParseOperand(CompState& st, HloInstruction** out);

  // ------------------------------------------------------------------ called computations
  // (parser_inline.cc) A computation operand of an attribute: its name, or its instructions
  // written inline in braces (a new computation named after `hint`, the instruction and the
  // attribute).
  bool ParseComputationRef(HloComputation** out, const InlineName& hint);
  // A name, an inline computation, or a braced list of those.
  bool ParseComputationList(std::vector<HloComputation*>* out, const InlineName& hint);
  // At '{': whether an inline computation starts here (`{ [ROOT] name =`), not a list of names.
  bool InlineComputationAhead();
  bool ParseInlineComputation(HloComputation** out, const InlineName& hint);
  // Gives an inline computation a fresh name (a computation written later takes its name).
  void RenameInlineComputation(HloComputation* c);

  // ------------------------------------------------------------------ attributes
  bool ParseAttribute(CompState& st, HloInstruction* instr, HloOpcode op, CalledSlots& called);

  // Parses the value of one modelled attribute (the cursor after `=`); false after an error.
  using AttrParseFn = bool (*)(Parser&, const AttrSite&);
  // The parser of attribute `name` on an instruction of opcode `op`, or null when Weave does not
  // model it there (the value is then kept verbatim).
  static AttrParseFn AttributeParser(std::string_view name, HloOpcode op);
  // `index=N` of a get-tuple-element, in range of its tuple operand's elements.
  bool ParseTupleIndexAttr(const AttrSite& a);
  // to_apply, calls, condition, body, ...: computation references into a.called.
  bool ParseCalledComputationAttr(const AttrSite& a);
  // `{name, ...}`: instruction names, resolved once the computation is parsed.
  bool ParseControlPredecessorsAttr(const AttrSite& a);
  // `{{source, target}, ...}`.
  bool ParseSourceTargetPairsAttr(const AttrSite& a);
  // `{precision, ...}`, kept lower-case.
  bool ParseOperandPrecisionAttr(const AttrSite& a);
  // EQ, NE, LT, LE, GT or GE (any case).
  bool ParseComparisonDirectionAttr(const AttrSite& a);
  // `{true, false, ...}`: one flag per leaf buffer of the shape; kept verbatim.
  bool ParseParameterReplicationAttr(const AttrSite& a);
  // A custom-call's CustomCallApiVersion name (not UNSPECIFIED); kept verbatim.
  bool ParseApiVersionAttr(const AttrSite& a);
  // An attribute Weave does not model: its raw value, kept verbatim (result_accuracy is checked).
  bool ParseVerbatimAttr(const AttrSite& a);

  bool ParseFrontendAttributes(HloInstruction* instr);

  bool ParseReplicaGroupsAttr(HloInstruction* instr);
  // `sharding={...}` (the value after `=`).
  bool ParseShardingAttr(HloInstruction* instr);

  bool ParseSliceAttr(HloInstruction* instr);

  // `lo_hi[_interior]x...` with no spaces inside.
  bool ParsePaddingAttr(HloInstruction* instr);

  // ------------------------------------------------------------------ literals
  // After `constant(`: captures the literal text up to the matching `)` and decodes its values.
  bool ParseLiteral(Literal* lit);
  // The values of `text` (a literal of shape lit->shape, starting at source position `b`) into
  // `lit`; tuple literals are not decoded.
  bool DecodeLiteral(std::string_view text, size_t b, Literal* lit);
  // Multiplies *count by the dims of `shape`; an error at `b` for a dynamic dim or an overflow.
  bool LiteralElementCount(const Shape& shape, size_t b, int64_t* count);
  // Appends the value token `tok` (at source position `tok_pos`) to lit->f or lit->i as its
  // element type reads it; an error if it is not a value of that type or out of its range.
  bool DecodeLiteralValue(std::string_view tok, size_t tok_pos, Literal* lit);
  // After the values of a literal of `count` elements were read (`values` of them, braces nested
  // `max_depth` deep): expands one scalar written for an array, else checks the value count and
  // nesting against the shape (errors at `b`).
  bool CheckLiteralValues(size_t b, int64_t count, int64_t values, int64_t max_depth,
                          Literal* lit);
  // `shape value` after `literal=` (custom-call): a shaped literal, `s32[2] {1, 2}`,
  // `f32[] 0.5` or a tuple `(s32[1] {3}, pred[] true)`; returns its text in `out`.
  bool ScanShapedLiteral(std::string_view* out);

  static bool ParseFloatToken(std::string_view tok, double* v);

  static bool ParseIntToken(std::string_view tok, bool is_unsigned, int64_t* v);

  // Recursion depth of nested tuple shapes and nested operands (bounded so that hostile input
  // cannot overflow the stack).
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) { ++p->depth_; }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };
  static constexpr int kMaxNesting = 256;
  int depth_ = 0;
  // Name of the instruction whose result shape ParseShape is reading (for size errors).
  std::string_view shape_owner_;

  std::string_view src_;
  std::string file_;
  size_t pos_ = 0;
  absl::Status status_;
  std::unique_ptr<HloModule> module_;
  NameMap<HloComputation*> comps_;
  HloComputation* entry_ = nullptr;
  HloComputation* last_comp_ = nullptr;
  absl::flat_hash_set<const HloInstruction*> generated_;
  // The scope of a single-instruction text (null when parsing computations): operands it does not
  // define become parameters.
  CompState* single_op_ = nullptr;
  // Computations written inline in attributes (their names were made up by the parser).
  absl::flat_hash_set<const HloComputation*> inline_comps_;
  std::vector<std::string_view> small_names_;  // attribute names of the current instruction
};

}  // namespace weave::parser_internal
