// Hand-written parser for XLA's HLO text format (../shared/specs/hlo-text-format.md).
//
// Design: a single-pass recursive-descent parser working directly on the characters of the input
// (no separate token stream, no regular expressions). Names are resolved through hash maps, so the
// parser is linear in the input size. Every failure records the first error as
// `file:line:column: message` and unwinds through `false` returns; the line and column are only
// computed when an error happens.
#include "hlo/parser.h"
#include "hlo/str_util.h"

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

namespace weave {
namespace {

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

std::string_view TrimView(std::string_view s) {
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
struct CalledSlots {
  std::vector<HloComputation*> to_apply, calls, called, branches;
  HloComputation* condition = nullptr;
  HloComputation* body = nullptr;
  HloComputation* true_comp = nullptr;
  HloComputation* false_comp = nullptr;
  HloComputation* select = nullptr;
  HloComputation* scatter = nullptr;
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
  bool Error(size_t pos, std::string_view msg) {
    if (!status_.ok()) return false;
    pos = std::min(pos, src_.size());
    int64_t line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; ++i) {
      if (src_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    status_ = absl::InvalidArgumentError(
        Cat(file_, ":", line, ":", pos - line_start + 1, ": ", msg));
    return false;
  }
  // A short description of the token at `pos` for messages.
  std::string TokenAt(size_t pos) {
    if (pos >= src_.size()) return "end of input";
    size_t e = pos;
    if (src_[pos] == '%' || IsIdentChar(src_[pos])) {
      e = pos + 1;
      while (e < src_.size() && IsIdentChar(src_[e]) && e - pos < 40) ++e;
    } else {
      e = pos + 1;
    }
    std::string_view t = src_.substr(pos, e - pos);
    std::string out = "'";
    for (char c : t) {
      unsigned char u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f) {
        Append(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
      } else {
        out += c;
      }
    }
    out += "'";
    return out;
  }
  bool Expected(std::string_view what) {
    SkipWs();
    return Error(pos_, Cat("expected ", what, ", found ", TokenAt(pos_)));
  }

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
        size_t e = src_.find('\n', pos_);
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
  bool ParseIdent(std::string_view* out, std::string_view what) {
    *out = PeekIdent();
    if (out->empty()) return Expected(what);
    pos_ += out->size();
    return true;
  }
  // `%name` or `name`.
  bool ParseName(std::string_view* out, std::string_view what = "a name") {
    SkipWs();
    if (pos_ < src_.size() && src_[pos_] == '%') {
      size_t b = ++pos_;
      while (pos_ < src_.size() && IsIdentChar(src_[pos_])) ++pos_;
      if (pos_ == b) return Error(b - 1, "expected a name after '%'");
      *out = src_.substr(b, pos_ - b);
      return true;
    }
    return ParseIdent(out, what);
  }
  // Decimal integer (optionally negative) that must fit in int64.
  bool ParseInt(int64_t* v, std::string_view what = "an integer") {
    SkipWs();
    size_t p = pos_;
    bool neg = false;
    if (p < src_.size() && src_[p] == '-') {
      neg = true;
      ++p;
    }
    if (p >= src_.size() || !IsDigit(src_[p])) return Expected(what);
    uint64_t acc = 0;
    const uint64_t limit = neg ? uint64_t{1} << 63 : static_cast<uint64_t>(INT64_MAX);
    size_t b = pos_;
    while (p < src_.size() && IsDigit(src_[p])) {
      uint64_t d = static_cast<uint64_t>(src_[p] - '0');
      if (acc > (limit - d) / 10) {
        while (p < src_.size() && IsDigit(src_[p])) ++p;
        return Error(b, Cat("integer ", src_.substr(b, p - b),
                                     " does not fit in 64 bits"));
      }
      acc = acc * 10 + d;
      ++p;
    }
    pos_ = p;
    *v = neg ? static_cast<int64_t>(0 - acc) : static_cast<int64_t>(acc);
    return true;
  }
  bool ParseBool(bool* v) {
    std::string_view w = PeekIdent();
    if (w == "true" || w == "false") {
      *v = w == "true";
      pos_ += w.size();
      return true;
    }
    return Expected("'true' or 'false'");
  }
  // `{1,2,3}` or `{}`.
  bool ParseIntList(std::vector<int64_t>* out) {
    out->clear();
    if (!Expect('{')) return false;
    if (Consume('}')) return true;
    do {
      int64_t v;
      if (!ParseInt(&v)) return false;
      out->push_back(v);
    } while (Consume(','));
    return Expect('}');
  }
  // A quoted string (`"..."` or `'...'`) with C escapes; returns the span including quotes.
  bool ScanString(std::string_view* out) {
    SkipWs();
    size_t b = pos_;
    if (pos_ >= src_.size() || (src_[pos_] != '"' && src_[pos_] != '\'')) {
      return Expected("a string");
    }
    char q = src_[pos_++];
    while (pos_ < src_.size() && src_[pos_] != q) {
      if (src_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    if (pos_ >= src_.size()) return Error(b, "unterminated string");
    ++pos_;
    *out = src_.substr(b, pos_ - b);
    return true;
  }
  bool ParseString(std::string* out) {
    std::string_view q;
    size_t b = pos_;
    if (!ScanString(&q)) return false;
    std::string err;
    if (!absl::CUnescape(A(q.substr(1, q.size() - 2)), out, &err)) {
      return Error(b, Cat("bad escape in string: ", err));
    }
    return true;
  }
  // Brace-matched `{...}` (double-quoted strings skipped); returns the span including braces.
  bool ScanBraces(std::string_view* out) {
    SkipWs();
    size_t b = pos_;
    if (pos_ >= src_.size() || src_[pos_] != '{') return Expected("'{'");
    int64_t depth = 0;
    const size_t n = src_.size();
    while (pos_ < n) {
      char c = src_[pos_++];
      if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (--depth == 0) {
          *out = src_.substr(b, pos_ - b);
          return true;
        }
      } else if (c == '"') {
        while (pos_ < n && src_[pos_] != '"') pos_ += src_[pos_] == '\\' ? 2 : 1;
        ++pos_;
      }
    }
    pos_ = n;
    return Error(b, "unterminated '{' (no matching '}')");
  }
  // Value of an attribute Weave does not model: a `{...}` blob, a string, or a bare token
  // (which may contain balanced (), [] groups).
  bool ScanRawValue(std::string_view* out) {
    char c = Peek();
    if (c == '{') return ScanBraces(out);
    if (c == '"' || c == '\'') return ScanString(out);
    size_t b = pos_;
    int64_t depth = 0;
    const size_t n = src_.size();
    while (pos_ < n) {
      char ch = src_[pos_];
      if (ch == '(' || ch == '[' || ch == '{') {
        ++depth;
      } else if (ch == ')' || ch == ']' || ch == '}') {
        if (depth == 0) break;
        --depth;
      } else if (ch == '"') {
        std::string_view s;
        if (!ScanString(&s)) return false;
        continue;
      } else if (depth == 0 && (ch == ',' || ch == ' ' || ch == '\n' || ch == '\r' ||
                                ch == '\t')) {
        break;
      }
      ++pos_;
    }
    if (depth != 0) return Error(b, "unbalanced brackets in attribute value");
    if (pos_ == b) return Expected("an attribute value");
    *out = src_.substr(b, pos_ - b);
    return true;
  }

  // ------------------------------------------------------------------ shapes
  // `allow_layout` is false where a `{` after the shape starts something else (the result shape
  // of a computation signature).
  bool ParseShape(Shape* s, bool allow_layout = true) {
    SkipWs();
    size_t b = pos_;
    if (Peek() == '(') {
      DepthGuard guard(this);
      if (depth_ > kMaxNesting) return Error(b, "tuple shapes nested too deeply");
      ++pos_;
      s->element_type = PrimitiveType::TUPLE;
      if (Consume(')')) return true;
      do {
        s->tuple_shapes.emplace_back();
        if (!ParseShape(&s->tuple_shapes.back(), allow_layout)) return false;
      } while (Consume(','));
      return Expect(')');
    }
    std::string_view t;
    if (!ParseIdent(&t, "a shape")) return false;
    if (t == "b" && Peek() == '(') {  // buffer shape `b(shape)`: keep the inner shape
      DepthGuard guard(this);
      if (depth_ > kMaxNesting) return Error(b, "shapes nested too deeply");
      ++pos_;
      if (!ParseShape(s, allow_layout)) return false;
      return Expect(')');
    }
    auto type = ParsePrimitiveType(t);
    if (!type || *type == PrimitiveType::TUPLE) {
      return Error(b, Cat("unknown element type '", t, "'"));
    }
    s->element_type = *type;
    if (!IsArrayType(*type)) {  // `token[]` / `opaque[]`; the brackets may be omitted
      if (src_.substr(pos_, 2) == "[]") pos_ += 2;
      return true;
    }
    if (pos_ >= src_.size() || src_[pos_] != '[') return Expected("'[' after element type");
    ++pos_;
    if (!Consume(']')) {
      do {
        SkipWs();
        size_t dpos = pos_;
        int64_t d;
        bool dyn = false;
        if (Consume('?')) {
          d = -1;
          dyn = true;
        } else {
          if (pos_ + 1 < src_.size() && src_[pos_] == '<' && src_[pos_ + 1] == '=') {
            pos_ += 2;
            dyn = true;
          }
          if (!ParseInt(&d, "a dimension size")) return false;
          if (d < 0) return Error(dpos, Cat("negative dimension size ", d));
        }
        if (dyn && s->dynamic.size() < s->dims.size()) s->dynamic.assign(s->dims.size(), false);
        if (dyn || !s->dynamic.empty()) s->dynamic.push_back(dyn);
        s->dims.push_back(d);
      } while (Consume(','));
      if (!Expect(']')) return false;
    }
    if (!s->CheckedByteSize()) {  // XLA's ShapeUtil::ValidateShape refuses these too
      return Error(b, Cat("shape ", s->ToString(false),
                          shape_owner_.empty() ? std::string()
                                               : Cat(" of instruction '", shape_owner_, "'"),
                          s->CheckedElementCount()
                              ? " is too large: its byte size overflows int64"
                              : " has too many elements: the element count overflows int64"));
    }
    // Layout: `{` directly after the shape (whitespace allowed).
    size_t save = pos_;
    if (allow_layout && Peek() == '{') {
      ++pos_;
      Layout layout;
      if (Peek() != ':' && Peek() != '}') {
        do {
          int64_t v;
          if (!ParseInt(&v, "a layout dimension")) return false;
          layout.minor_to_major.push_back(v);
        } while (Consume(','));
      }
      if (Consume(':')) {
        size_t sb = pos_;
        int64_t depth = 0;
        while (pos_ < src_.size()) {
          char c = src_[pos_];
          if (c == '(' || c == '{' || c == '[') {
            ++depth;
          } else if (c == ')' || c == ']') {
            --depth;
          } else if (c == '}') {
            if (depth == 0) break;
            --depth;
          }
          ++pos_;
        }
        layout.suffix = std::string(TrimView(src_.substr(sb, pos_ - sb)));
      }
      if (!Expect('}')) return false;
      s->layout = std::move(layout);
    } else {
      pos_ = save;
    }
    return true;
  }

  // ------------------------------------------------------------------ module
  bool ParseModule() {
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
    }
    module_ = std::make_unique<HloModule>(module_name);
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

  bool ParseHeaderAttributes() {
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
        if (!ScanRawValue(&value)) return false;
        module_->header_attributes.emplace_back(std::string(name), std::string(value));
      }
    }
    return true;
  }

  // FileNames / FunctionNames / FileLocations / StackFrames tables, kept verbatim.
  bool ParseStackTables() {
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
  bool ParseComputation() {
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
      Shape ignored;
      if (!ParseShape(&ignored, /*allow_layout=*/false)) return false;
    }
    if (!Expect('{')) return false;
    auto owned = std::make_unique<HloComputation>(std::string(name));
    HloComputation* comp = module_->AddComputation(std::move(owned));
    if (comp->name() != name) comp->set_name(std::string(name));
    comps_.emplace(name, comp);
    if (is_entry) {
      if (entry_) return Error(name_pos, "more than one ENTRY computation");
      entry_ = comp;
    }
    last_comp_ = comp;

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
    if (sig_params >= 0 && sig_params != st.param_count) {
      return Error(name_pos, Cat("signature of computation '", name, "' lists ",
                                          sig_params, " parameters but it has ", st.param_count));
    }
    // Control predecessors may name instructions defined later in the computation.
    for (auto& pc : st.control) {
      for (auto& [n, p] : pc.names) {
        auto it = st.by_name.find(n);
        if (it == st.by_name.end()) {
          return Error(p, Cat("control predecessor '", n, "' is not defined in '",
                                       name, "'"));
        }
        pc.instr->control_predecessors.push_back(it->second);
      }
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

  // Registers `instr` (already added to the computation) under `name` in the computation scope.
  // Parsed names are kept exactly as written; `generated` marks instructions the parser created
  // itself (nested operands, compact get-tuple-elements), whose names may be changed if the text
  // later defines the same name.
  bool Register(CompState& st, HloInstruction* instr, std::string_view name, size_t name_pos,
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

  bool ParseInstruction(CompState& st) {
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
    shape_owner_ = name;
    const bool shape_ok = ParseShape(&shape);
    shape_owner_ = {};
    if (!shape_ok) return false;
    if (!shape.CheckedByteSize()) {  // a tuple whose element byte sizes sum past int64
      return Error(shape_pos, Cat("shape of instruction '", name,
                                  "' is too large: its byte size overflows int64"));
    }
    HloInstruction* instr = nullptr;
    if (!ParseInstructionBody(st, std::move(shape), name, /*top_level=*/true, &instr)) {
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

  // Parses `opcode(operands) [, attributes]` and adds the instruction to the computation.
  // Nested operands (test style) have no attributes.
  bool ParseInstructionBody(CompState& st, Shape shape, std::string_view name, bool top_level,
                            HloInstruction** out) {
    SkipWs();
    size_t op_pos = pos_;
    std::string_view opname;
    if (!ParseIdent(&opname, "an opcode")) return false;
    std::optional<HloOpcode> op = ParseHloOpcode(opname);
    std::string_view sugar;
    HloOpcode attr_op = HloOpcode::kTuple;
    if (op) {
      attr_op = *op;
    } else {
      // Sugared async form `X-start/-update/-done`.
      static constexpr std::pair<std::string_view, HloOpcode> kSuffixes[] = {
          {"-start", HloOpcode::kAsyncStart},
          {"-update", HloOpcode::kAsyncUpdate},
          {"-done", HloOpcode::kAsyncDone}};
      for (const auto& [suffix, async_op] : kSuffixes) {
        if (opname.size() > suffix.size() &&
            opname.substr(opname.size() - suffix.size()) == suffix) {
          std::string_view base = opname.substr(0, opname.size() - suffix.size());
          if (auto wrapped = ParseHloOpcode(base)) {
            op = async_op;
            sugar = base;
            attr_op = *wrapped;
          }
          break;
        }
      }
      if (!op) return Error(op_pos, Cat("unknown opcode '", opname, "'"));
    }
    if (!Expect('(')) return false;

    std::vector<HloInstruction*> operands;
    int64_t param_number = -1;
    std::optional<Literal> literal;
    if (*op == HloOpcode::kParameter) {
      SkipWs();
      size_t ppos = pos_;
      if (!ParseInt(&param_number, "a parameter number")) return false;
      if (param_number < 0 || param_number > kMaxParameterNumber) {
        return Error(ppos, Cat("invalid parameter number ", param_number));
      }
      if (static_cast<size_t>(param_number) >= st.param_seen.size()) {
        st.param_seen.resize(static_cast<size_t>(param_number) + 1, false);
      }
      if (st.param_seen[static_cast<size_t>(param_number)]) {
        return Error(ppos, Cat("duplicate parameter(", param_number, ") in '",
                                        st.comp->name(), "'"));
      }
      st.param_seen[static_cast<size_t>(param_number)] = true;
      ++st.param_count;
      if (!Expect(')')) return false;
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
    if (!sugar.empty()) instr->async_sugar = std::string(sugar);

    CalledSlots called;
    if (top_level) {
      small_names_.clear();
      while (Peek() == ',') {
        ++pos_;
        if (!ParseAttribute(st, instr, attr_op, called)) return false;
      }
    }
    if (!AssembleCalled(*op, attr_op, !sugar.empty(), called, instr, op_pos)) return false;
    *out = st.comp->AddInstruction(std::move(owned));
    return true;
  }

  bool AssembleCalled(HloOpcode op, HloOpcode attr_op, bool sugared, CalledSlots& c,
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
  bool ParseOperand(CompState& st, HloInstruction** out) {
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
      if (after < src_.size() && src_[after] == '[' && ParsePrimitiveType(w)) {
        shape.emplace();
        if (!ParseShape(&*shape)) return false;
      }
    }
    SkipWs();
    size_t npos = pos_;
    std::string_view name;
    if (!ParseName(&name, "an operand")) return false;
    HloInstruction* v = nullptr;
    if (src_[npos] != '%' && Peek() == '(') {
      // Nested instruction; its shape must be written.
      if (!shape) return Error(b, Cat("nested operand '", name, "(...)' needs a shape"));
      pos_ = npos;
      DepthGuard guard(this);
      if (depth_ > kMaxNesting) return Error(npos, "nested operands nested too deeply");
      if (!ParseInstructionBody(st, std::move(*shape), "", /*top_level=*/false, &v)) {
        return false;
      }
      if (!Register(st, v, v->name(), npos, /*generated=*/true)) return false;
    } else {
      auto it = st.by_name.find(name);
      if (it == st.by_name.end()) {
        return Error(npos, Cat("use of undefined value '", name, "'"));
      }
      v = it->second;
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

  bool ParseComputationRef(HloComputation** out) {
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
  bool ParseComputationList(std::vector<HloComputation*>* out) {
    if (Peek() != '{') {
      HloComputation* c;
      if (!ParseComputationRef(&c)) return false;
      out->push_back(c);
      return true;
    }
    ++pos_;
    if (Consume('}')) return true;
    do {
      HloComputation* c;
      if (!ParseComputationRef(&c)) return false;
      out->push_back(c);
    } while (Consume(','));
    return Expect('}');
  }

  // ------------------------------------------------------------------ attributes
  bool ParseAttribute(CompState& st, HloInstruction* instr, HloOpcode op, CalledSlots& called) {
    SkipWs();
    size_t apos = pos_;
    std::string_view name;
    if (!ParseIdent(&name, "an attribute name")) return false;
    for (std::string_view seen : small_names_) {
      if (seen == name) return Error(apos, Cat("duplicate attribute '", name, "'"));
    }
    small_names_.push_back(name);
    if (!Expect('=')) return false;
    SkipWs();
    size_t vpos = pos_;
    if (name == "metadata") {
      std::string_view v;
      if (!ScanBraces(&v)) return false;
      instr->metadata = std::string(v.substr(1, v.size() - 2));
      return true;
    }
    if (name == "dimensions") {
      instr->has_dimensions_attr = true;
      return ParseIntList(&instr->dimensions);
    }
    if (name == "index" && op == HloOpcode::kGetTupleElement) {
      if (!ParseInt(&instr->tuple_index)) return false;
      if (instr->operand_count() == 1) {
        const Shape& ts = instr->operand(0)->shape();
        int64_t n = ts.IsTuple() ? static_cast<int64_t>(ts.tuple_shapes.size()) : 0;
        if (!ts.IsTuple() || instr->tuple_index < 0 || instr->tuple_index >= n) {
          return Error(vpos, Cat("tuple index ", instr->tuple_index,
                                          " is out of range for operand '",
                                          instr->operand(0)->name(), "' with ", n,
                                          " elements"));
        }
      }
      return true;
    }
    if (name == "to_apply") return ParseComputationList(&called.to_apply);
    if (name == "calls") return ParseComputationList(&called.calls);
    if (name == "called_computations") return ParseComputationList(&called.called);
    if (name == "branch_computations") return ParseComputationList(&called.branches);
    if (name == "condition") return ParseComputationRef(&called.condition);
    if (name == "body") return ParseComputationRef(&called.body);
    if (name == "true_computation") return ParseComputationRef(&called.true_comp);
    if (name == "false_computation") return ParseComputationRef(&called.false_comp);
    if (op == HloOpcode::kSelectAndScatter) {
      if (name == "select") return ParseComputationRef(&called.select);
      if (name == "scatter") return ParseComputationRef(&called.scatter);
    }
    if (name == "sharding") {
      std::string_view v;
      if (!ScanBraces(&v)) return false;
      auto s = ParseSharding(v);
      if (!s.ok()) return Error(vpos, Cat("bad sharding: ", s.status().message()));
      instr->sharding = *std::move(s);
      return true;
    }
    if (name == "backend_config") {
      std::string_view v;
      if (!ScanRawValue(&v)) return false;
      instr->backend_config = std::string(v);
      return true;
    }
    if (name == "frontend_attributes") return ParseFrontendAttributes(instr);
    if (name == "control-predecessors") {
      if (!Expect('{')) return false;
      CompState::PendingControl pc{instr, {}};
      if (!Consume('}')) {
        do {
          SkipWs();
          size_t p = pos_;
          std::string_view n;
          if (!ParseName(&n, "an instruction name")) return false;
          pc.names.emplace_back(n, p);
        } while (Consume(','));
        if (!Expect('}')) return false;
      }
      st.control.push_back(std::move(pc));
      return true;
    }
    if (name == "channel_id") {
      int64_t v;
      if (!ParseInt(&v)) return false;
      instr->channel_id = v;
      return true;
    }
    if (name == "replica_groups") return ParseReplicaGroupsAttr(instr);
    if (name == "use_global_device_ids") return ParseBool(&instr->use_global_device_ids);
    if (name == "constrain_layout") return ParseBool(&instr->constrain_layout);
    if (name == "source_target_pairs") {
      if (!Expect('{')) return false;
      if (!Consume('}')) {
        do {
          std::vector<int64_t> pair;
          SkipWs();
          size_t p = pos_;
          if (!ParseIntList(&pair)) return false;
          if (pair.size() != 2) return Error(p, "a source-target pair needs two ids");
          instr->source_target_pairs.emplace_back(pair[0], pair[1]);
        } while (Consume(','));
        if (!Expect('}')) return false;
      }
      return true;
    }
    if (op == HloOpcode::kDot || op == HloOpcode::kRaggedDot) {
      if (name == "lhs_batch_dims") return ParseIntList(&instr->dot_dims.lhs_batch);
      if (name == "lhs_contracting_dims") return ParseIntList(&instr->dot_dims.lhs_contracting);
      if (name == "rhs_batch_dims") return ParseIntList(&instr->dot_dims.rhs_batch);
      if (name == "rhs_contracting_dims") return ParseIntList(&instr->dot_dims.rhs_contracting);
    }
    if (name == "operand_precision") {
      if (!Expect('{')) return false;
      if (!Consume('}')) {
        do {
          std::string_view p;
          if (!ParseIdent(&p, "a precision")) return false;
          instr->operand_precision.push_back(absl::AsciiStrToLower(A(p)));
        } while (Consume(','));
        if (!Expect('}')) return false;
      }
      return true;
    }
    if (name == "slice" && op == HloOpcode::kSlice) return ParseSliceAttr(instr);
    if (name == "dynamic_slice_sizes") return ParseIntList(&instr->dynamic_slice_sizes);
    if (name == "padding" && op == HloOpcode::kPad) return ParsePaddingAttr(instr);
    if (name == "iota_dimension" && op == HloOpcode::kIota) {
      return ParseInt(&instr->iota_dimension);
    }
    if (op == HloOpcode::kCompare && name == "direction") {
      std::string_view d;
      if (!ParseIdent(&d, "a comparison direction")) return false;
      std::string u = absl::AsciiStrToUpper(A(d));
      static constexpr std::pair<std::string_view, ComparisonDirection> kDirs[] = {
          {"EQ", ComparisonDirection::kEq}, {"NE", ComparisonDirection::kNe},
          {"LT", ComparisonDirection::kLt}, {"LE", ComparisonDirection::kLe},
          {"GT", ComparisonDirection::kGt}, {"GE", ComparisonDirection::kGe}};
      for (const auto& [s, dir] : kDirs) {
        if (u == s) {
          instr->comparison_direction = dir;
          return true;
        }
      }
      return Error(vpos, Cat("unknown comparison direction '", d, "'"));
    }
    if (op == HloOpcode::kCompare && name == "type") {
      std::string_view t;
      if (!ParseIdent(&t, "a comparison type")) return false;
      instr->comparison_type = absl::AsciiStrToUpper(A(t));
      return true;
    }
    if (op == HloOpcode::kCustomCall && name == "custom_call_target") {
      return ParseString(&instr->custom_call_target);
    }
    if (op == HloOpcode::kFusion && name == "kind") {
      std::string_view k;
      if (!ParseIdent(&k, "a fusion kind")) return false;
      instr->fusion_kind = std::string(k);
      return true;
    }
    if (op == HloOpcode::kReducePrecision && name == "exponent_bits") {
      return ParseInt(&instr->exponent_bits);
    }
    if (op == HloOpcode::kReducePrecision && name == "mantissa_bits") {
      return ParseInt(&instr->mantissa_bits);
    }
    // Anything else is kept verbatim.
    std::string_view v;
    if (!ScanRawValue(&v)) return false;
    instr->raw_attributes.emplace_back(std::string(name), std::string(v));
    return true;
  }

  bool ParseFrontendAttributes(HloInstruction* instr) {
    if (!Expect('{')) return false;
    if (Consume('}')) return true;
    do {
      SkipWs();
      std::string key;
      if (Peek() == '"' || Peek() == '\'') {
        if (!ParseString(&key)) return false;
      } else {
        std::string_view k;
        if (!ParseIdent(&k, "a frontend attribute name")) return false;
        key = std::string(k);
      }
      if (!Expect('=')) return false;
      std::string_view v;
      if (!ScanRawValue(&v)) return false;
      instr->frontend_attributes[key] = std::string(v);
    } while (Consume(','));
    return Expect('}');
  }

  bool ParseReplicaGroupsAttr(HloInstruction* instr) {
    SkipWs();
    size_t b = pos_;
    char c = Peek();
    if (c == '{') {
      std::string_view v;
      if (!ScanBraces(&v)) return false;
    } else if (c == '[') {
      // [G,S]<=[dims]T(perm)
      auto skip_group = [&](char open, char close) {
        if (pos_ >= src_.size() || src_[pos_] != open) return false;
        size_t e = src_.find(close, pos_);
        if (e == std::string_view::npos) return false;
        pos_ = e + 1;
        return true;
      };
      if (!skip_group('[', ']')) return Error(b, "malformed iota replica groups");
      SkipWs();
      if (src_.substr(pos_, 2) != "<=") return Expected("'<=' in iota replica groups");
      pos_ += 2;
      SkipWs();
      if (!skip_group('[', ']')) return Error(b, "malformed iota replica groups");
      if (pos_ < src_.size() && src_[pos_] == 'T') {
        ++pos_;
        if (!skip_group('(', ')')) return Error(b, "malformed iota replica groups transpose");
      }
    } else if (PeekIdent() == "mesh" || PeekIdent() == "maximal_mesh") {
      pos_ += PeekIdent().size();
      if (Peek() != '[') return Expected("'[' after mesh");
      size_t e = src_.find(']', pos_);
      if (e == std::string_view::npos) return Error(b, "malformed mesh replica groups");
      pos_ = e + 1;
      // Optional `, device_ids=(...)` (XLA's Mesh::ToString for a non-iota mesh).
      const size_t save = pos_;
      if (Consume(',') && PeekIdent() == "device_ids") {
        size_t close = src_.find(')', pos_);
        if (close == std::string_view::npos) return Error(b, "malformed mesh device_ids");
        pos_ = close + 1;
      } else {
        pos_ = save;
      }
      if (Peek() == '{') {
        std::string_view v;
        if (!ScanBraces(&v)) return false;
      }
    } else {
      return Expected("replica groups");
    }
    auto rg = ParseReplicaGroups(src_.substr(b, pos_ - b));
    if (!rg.ok()) return Error(b, Cat("bad replica_groups: ", rg.status().message()));
    instr->replica_groups = *std::move(rg);
    return true;
  }

  bool ParseSliceAttr(HloInstruction* instr) {
    if (!Expect('{')) return false;
    if (Consume('}')) return true;
    do {
      if (!Expect('[')) return false;
      SliceDim d;
      if (!ParseInt(&d.start) || !Expect(':') || !ParseInt(&d.limit)) return false;
      if (Consume(':') && !ParseInt(&d.stride)) return false;
      if (!Expect(']')) return false;
      instr->slice.push_back(d);
    } while (Consume(','));
    return Expect('}');
  }

  // `lo_hi[_interior]x...` with no spaces inside.
  bool ParsePaddingAttr(HloInstruction* instr) {
    SkipWs();
    while (true) {
      PadDim d;
      int64_t* parts[3] = {&d.lo, &d.hi, &d.interior};
      for (int k = 0; k < 3; ++k) {
        if (k > 0) {
          if (pos_ < src_.size() && src_[pos_] == '_') {
            ++pos_;
          } else if (k == 1) {
            return Expected("'_' in padding");
          } else {
            break;
          }
        }
        if (pos_ >= src_.size() || (!IsDigit(src_[pos_]) && src_[pos_] != '-')) {
          return Expected("a padding amount");
        }
        if (!ParseInt(parts[k])) return false;
      }
      instr->padding.push_back(d);
      if (pos_ < src_.size() && src_[pos_] == 'x') {
        ++pos_;
        continue;
      }
      return true;
    }
  }

  // ------------------------------------------------------------------ literals
  // After `constant(`: captures the literal text up to the matching `)` and decodes its values.
  bool ParseLiteral(Literal* lit) {
    SkipWs();
    size_t b = pos_;
    int64_t depth = 0;
    const size_t n = src_.size();
    while (pos_ < n) {
      char c = src_[pos_];
      if (c == '(' || c == '{') {
        ++depth;
      } else if (c == ')' || c == '}') {
        if (depth == 0) break;
        --depth;
      } else if (c == '"') {
        std::string_view s;
        if (!ScanString(&s)) return false;
        continue;
      }
      ++pos_;
    }
    if (pos_ >= n) return Error(b, "unterminated constant (missing ')')");
    if (src_[pos_] != ')') return Error(pos_, "unbalanced '}' in constant");
    std::string_view text = TrimView(src_.substr(b, pos_ - b));
    ++pos_;  // ')'
    lit->text = std::string(text);
    if (text.empty()) return Error(b, "empty constant");
    const Shape& shape = lit->shape;
    if (shape.IsTuple()) return true;  // tuple literals are kept as text only
    if (text == "{...}") {
      lit->elided = true;
      return true;
    }
    if (!shape.IsArray()) return Error(b, "constant of a non-array shape");
    // Element count, with overflow checks.
    int64_t count = 1;
    for (int64_t d : shape.dims) {
      if (d < 0) return Error(b, "constant with a dynamic dimension");
      if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) {
        return Error(b, "constant shape has too many elements");
      }
      count *= d;
    }
    const PrimitiveType t = shape.element_type;
    const bool is_complex = IsComplex(t);
    const bool is_float = IsFloatingPoint(t) || is_complex;
    const bool is_pred = t == PrimitiveType::PRED;
    const bool is_unsigned = IsUnsignedInteger(t);
    int64_t max_depth = 0, cur_depth = 0, values = 0;
    const int64_t want = is_complex ? 2 * count : count;
    if (is_float) {
      lit->f.reserve(static_cast<size_t>(std::min<int64_t>(want, 1 << 20)));
    } else {
      lit->i.reserve(static_cast<size_t>(std::min<int64_t>(want, 1 << 20)));
    }
    size_t p = 0;
    const size_t tn = text.size();
    while (p < tn) {
      char c = text[p];
      if (c == '{') {
        ++cur_depth;
        max_depth = std::max(max_depth, cur_depth);
        ++p;
      } else if (c == '}') {
        --cur_depth;
        ++p;
      } else if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '(' ||
                 c == ')') {
        ++p;
      } else if (c == '/' && p + 1 < tn && text[p + 1] == '*') {
        size_t e = text.find("*/", p + 2);
        if (e == std::string_view::npos) return Error(b + p, "unterminated comment in constant");
        p = e + 2;
      } else {
        size_t e = p;
        while (e < tn && text[e] != ',' && text[e] != '}' && text[e] != ' ' && text[e] != '\n' &&
               text[e] != ')' && text[e] != '\r' && text[e] != '\t') {
          if (text[e] == '(') {  // nan(0x...)
            size_t close = text.find(')', e);
            if (close == std::string_view::npos) break;
            e = close + 1;
            break;
          }
          ++e;
        }
        std::string_view tok = text.substr(p, e - p);
        if (values >= want) {
          return Error(b, Cat("constant has more values than its shape ",
                                       shape.ToString(), " holds (", count, " elements)"));
        }
        size_t tok_pos = b + static_cast<size_t>(tok.data() - text.data());
        if (is_float) {
          double v;
          if (!ParseFloatToken(tok, &v)) {
            return Error(tok_pos, Cat("invalid floating-point value '", tok, "'"));
          }
          lit->f.push_back(v);
        } else if (is_pred) {
          if (tok == "true" || tok == "1") {
            lit->i.push_back(1);
          } else if (tok == "false" || tok == "0") {
            lit->i.push_back(0);
          } else {
            return Error(tok_pos, Cat("invalid pred value '", tok, "'"));
          }
        } else {
          int64_t v;
          const int bits = BitWidth(t);
          bool in_range = ParseIntToken(tok, is_unsigned, &v);
          if (in_range && bits > 0 && bits < 64) {
            in_range = is_unsigned ? (v >= 0 && v < (int64_t{1} << bits))
                                   : (v >= -(int64_t{1} << (bits - 1)) &&
                                      v < (int64_t{1} << (bits - 1)));
          }
          if (!in_range) {
            return Error(tok_pos, Cat("invalid integer value '", tok, "' for ",
                                      PrimitiveTypeName(t)));
          }
          lit->i.push_back(v);
        }
        ++values;
        p = e;
      }
    }
    if (values != want) {
      return Error(b, Cat("constant has ", values, " values but its shape ",
                                   shape.ToString(), " holds ", count, " elements"));
    }
    if (count > 0 && !shape.dims.empty() && max_depth != shape.rank()) {
      return Error(b, Cat("constant is nested ", max_depth,
                                   " levels deep but its shape has rank ", shape.rank()));
    }
    if (shape.dims.empty() && max_depth != 0) {
      return Error(b, "scalar constant written with braces");
    }
    return true;
  }

  static bool ParseFloatToken(std::string_view tok, double* v) {
    bool neg = false;
    std::string_view t = tok;
    if (!t.empty() && (t[0] == '-' || t[0] == '+')) {
      neg = t[0] == '-';
      t.remove_prefix(1);
    }
    if (t == "inf") {
      *v = neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return true;
    }
    if (t.substr(0, 3) == "nan") {
      if (t.size() > 3 && (t[3] != '(' || t.back() != ')')) return false;
      *v = neg ? -std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (t.empty() || t[0] == '-' || t[0] == '+') return false;
    auto r = std::from_chars(t.data(), t.data() + t.size(), *v);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars reports overflow/underflow; follow strtod's saturation instead.
      std::string s(t);
      *v = std::strtod(s.c_str(), nullptr);
    } else if (r.ec != std::errc() || r.ptr != t.data() + t.size()) {
      return false;
    }
    if (neg) *v = -*v;
    return true;
  }

  static bool ParseIntToken(std::string_view tok, bool is_unsigned, int64_t* v) {
    if (is_unsigned) {
      uint64_t u;
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), u);
      if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) return false;
      *v = static_cast<int64_t>(u);
      return true;
    }
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), *v);
    return r.ec == std::errc() && r.ptr == tok.data() + tok.size();
  }

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
  std::vector<std::string_view> small_names_;  // attribute names of the current instruction
};

}  // namespace

absl::StatusOr<std::unique_ptr<HloModule>> ParseHloModule(std::string_view text,
                                                          std::string_view filename) {
  Parser p(text, filename);
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
    return absl::InvalidArgumentError(Cat(path, ": is a directory, not an HLO text file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(Cat(path, ": cannot open file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  data = std::move(ss).str();
  return ParseHloModule(data, path);
}

}  // namespace weave
