// A small cursor over attribute text (shardings, replica groups, meshes, Shardy attributes):
// whitespace and /*...*/ comments are skipped before every token. Never reads past the end.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weave::hlo_internal {

class TextCursor {
 public:
  explicit TextCursor(std::string_view s) : s_(s) {}
  void SkipWs() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*') {
        size_t e = s_.find("*/", pos_ + 2);
        pos_ = e == std::string_view::npos ? s_.size() : e + 2;
      } else {
        break;
      }
    }
  }
  bool AtEnd() {
    SkipWs();
    return pos_ >= s_.size();
  }
  char Peek() {
    SkipWs();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool Consume(char c) {
    if (Peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ConsumeStr(std::string_view w) {
    SkipWs();
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }
  // ConsumeStr for a whole word: `w` not followed by an identifier character.
  bool ConsumeWord(std::string_view w) {
    SkipWs();
    if (s_.substr(pos_, w.size()) != w) return false;
    const size_t e = pos_ + w.size();
    if (e < s_.size() && IsWordChar(s_[e])) return false;
    pos_ = e;
    return true;
  }
  static bool IsWordChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  }
  // Identifier made of [A-Za-z0-9_.-]; empty if none.
  std::string_view Word() {
    SkipWs();
    size_t b = pos_;
    while (pos_ < s_.size() && IsWordChar(s_[pos_])) ++pos_;
    return s_.substr(b, pos_ - b);
  }
  // A '...' or "..." string (backslash escapes \" \' \\ kept as the escaped character).
  // With `allow_escaped_quotes`, \"...\" (a string inside an escaped string) is accepted too.
  bool QuotedString(std::string* out, bool allow_escaped_quotes = false) {
    SkipWs();
    size_t p = pos_;
    bool escaped = false;
    if (allow_escaped_quotes && p + 1 < s_.size() && s_[p] == '\\' &&
        (s_[p + 1] == '"' || s_[p + 1] == '\'')) {
      escaped = true;
      ++p;
    }
    if (p >= s_.size() || (s_[p] != '"' && s_[p] != '\'')) return false;
    const char q = s_[p++];
    out->clear();
    while (p < s_.size()) {
      char c = s_[p];
      if (escaped && c == '\\' && p + 1 < s_.size() && s_[p + 1] == q) {
        pos_ = p + 2;
        return true;
      }
      if (!escaped && c == q) {
        pos_ = p + 1;
        return true;
      }
      if (c == '\\' && p + 1 < s_.size()) {
        out->push_back(s_[p + 1]);
        p += 2;
        continue;
      }
      out->push_back(c);
      ++p;
    }
    return false;
  }
  bool Int(int64_t* v) {
    SkipWs();
    size_t p = pos_;
    bool neg = false;
    if (p < s_.size() && s_[p] == '-') {
      neg = true;
      ++p;
    }
    if (p >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[p]))) return false;
    uint64_t acc = 0;
    while (p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p]))) {
      uint64_t d = static_cast<uint64_t>(s_[p] - '0');
      if (acc > (static_cast<uint64_t>(INT64_MAX) - d) / 10) return false;
      acc = acc * 10 + d;
      ++p;
    }
    pos_ = p;
    *v = neg ? -static_cast<int64_t>(acc) : static_cast<int64_t>(acc);
    return true;
  }
  // `<open>a,b,c<close>` (possibly empty).
  bool IntList(char open, char close, std::vector<int64_t>* out) {
    if (!Consume(open)) return false;
    out->clear();
    if (Consume(close)) return true;
    do {
      int64_t v;
      if (!Int(&v)) return false;
      out->push_back(v);
    } while (Consume(','));
    return Consume(close);
  }
  // Skips a brace-balanced `{...}` group (strings respected).
  bool SkipBraces() {
    if (Peek() != '{') return false;
    int depth = 0;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"' || c == '\'') {
        while (pos_ < s_.size() && s_[pos_] != c) pos_ += s_[pos_] == '\\' ? 2 : 1;
        ++pos_;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (--depth == 0) return true;
      }
    }
    return false;
  }
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  std::string_view rest() const { return s_.substr(std::min(pos_, s_.size())); }
  std::string_view text() const { return s_; }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace weave::hlo_internal
