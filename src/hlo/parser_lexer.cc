// HLO text parser: errors with file:line:column, and the lexical pieces (names, integers,
// booleans, strings, balanced braces, raw attribute values). See parser_internal.h.
#include "hlo/parser_internal.h"

namespace weave::parser_internal {

// ------------------------------------------------------------------ errors
bool Parser::Error(size_t pos, std::string_view msg) {
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
std::string Parser::TokenAt(size_t pos) {
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

bool Parser::Expected(std::string_view what) {
  SkipWs();
  return Error(pos_, Cat("expected ", what, ", found ", TokenAt(pos_)));
}

bool Parser::ParseIdent(std::string_view* out, std::string_view what) {
  *out = PeekIdent();
  if (out->empty()) return Expected(what);
  pos_ += out->size();
  return true;
}

// `%name` or `name`.
bool Parser::ParseName(std::string_view* out, std::string_view what) {
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
bool Parser::ParseInt(int64_t* v, std::string_view what) {
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

bool Parser::ParseBool(bool* v) {
  std::string_view w = PeekIdent();
  if (w == "true" || w == "false") {
    *v = w == "true";
    pos_ += w.size();
    return true;
  }
  return Expected("'true' or 'false'");
}

// `{1,2,3}` or `{}`.
bool Parser::ParseIntList(std::vector<int64_t>* out) {
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
bool Parser::ScanString(std::string_view* out) {
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

bool Parser::ParseString(std::string* out) {
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
bool Parser::ScanBraces(std::string_view* out) {
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
bool Parser::ScanRawValue(std::string_view* out) {
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

}  // namespace weave::parser_internal
