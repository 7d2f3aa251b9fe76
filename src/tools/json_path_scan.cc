// See json_path_scan.h.
#include "tools/json_path_scan.h"

#include <charconv>
#include <system_error>

namespace weave::tools {
namespace {

constexpr int kMaxDepth = 64;

class Scanner {
 public:
  Scanner(std::string_view text, const std::vector<std::string_view>& path)
      : t_(text), path_(path) {}

  std::optional<JsonArrayScan> Run() {
    SkipWs();
    // The top level is on the path (depth 0) when it is an object.
    if (!Value(/*on_path=*/0, /*depth=*/0)) return std::nullopt;
    SkipWs();
    if (p_ != t_.size()) return std::nullopt;
    return out_;
  }

 private:
  bool AtEnd() const { return p_ >= t_.size(); }
  char Peek() const { return t_[p_]; }

  void SkipWs() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) ++p_;
  }

  // A value. `on_path`: how many path keys lead here (-1: not on the path). When on_path equals
  // the path's length, this is the value sought: an array is collected.
  bool Value(int on_path, int depth) {
    if (depth > kMaxDepth || AtEnd()) return false;
    const char ch = Peek();
    if (ch == '{') return Object(on_path, depth);
    if (ch == '[') return Array(on_path == static_cast<int>(path_.size()), depth);
    if (ch == '"') return String(nullptr);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return Number(nullptr);
    return Literal("true") || Literal("false") || Literal("null");
  }

  bool Literal(std::string_view word) {
    if (t_.substr(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  bool Object(int on_path, int depth) {
    ++p_;  // '{'
    // Is this object on the path, with a key still to follow?
    const bool follows = on_path >= 0 && on_path < static_cast<int>(path_.size());
    bool seen_key = false;
    if (Take('}')) return true;
    for (bool more = true; more;) {
      SkipWs();
      std::string& key = key_;
      key.clear();
      if (AtEnd() || Peek() != '"' || !String(follows ? &key : nullptr)) return false;
      if (!Take(':')) return false;
      SkipWs();
      int child = -1;
      if (follows && key == path_[static_cast<size_t>(on_path)]) {
        if (seen_key) return false;  // a repeated key: the full reader keeps the last one
        seen_key = true;
        child = on_path + 1;
      }
      if (!Value(child, depth + 1)) return false;
      if (!NextOrClose('}', &more)) return false;
    }
    return true;
  }

  bool Array(bool collect, int depth) {
    ++p_;  // '['
    if (collect) out_.found = true;
    if (Take(']')) return true;
    for (bool more = true; more;) {
      SkipWs();
      if (AtEnd()) return false;
      if (collect) {
        JsonScalar e;
        const char ch = Peek();
        if (ch == '"') {
          e.kind = JsonScalar::kString;
          if (!String(&e.text)) return false;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
          bool integer = false;
          if (!Number(&integer, &e.value)) return false;
          e.kind = integer ? JsonScalar::kInteger : JsonScalar::kOther;
        } else if (!Value(-1, depth + 1)) {
          return false;
        }
        out_.elements.push_back(std::move(e));
      } else if (!Value(-1, depth + 1)) {
        return false;
      }
      if (!NextOrClose(']', &more)) return false;
    }
    return true;
  }

  // Takes `ch` (after any whitespace) when it comes next.
  bool Take(char ch) {
    SkipWs();
    if (AtEnd() || Peek() != ch) return false;
    ++p_;
    return true;
  }

  // After a member or an element: a ',' (*more = true) or the closing `close` (*more = false);
  // false for anything else.
  bool NextOrClose(char close, bool* more) {
    SkipWs();
    if (AtEnd()) return false;
    if (Peek() != ',' && Peek() != close) return false;
    *more = Peek() == ',';
    ++p_;
    return true;
  }

  // A string at its opening quote; its decoded text into `out` when given. Runs of plain
  // characters are appended whole.
  bool String(std::string* out) {
    ++p_;  // '"'
    while (!AtEnd()) {
      const size_t run = p_;
      while (p_ < t_.size()) {
        const unsigned char ch = static_cast<unsigned char>(t_[p_]);
        if (ch == '"' || ch == '\\' || ch < 0x20 || ch > 0x7e) break;
        ++p_;
      }
      if (out != nullptr) out->append(t_.data() + run, p_ - run);
      if (AtEnd()) return false;
      const unsigned char ch = static_cast<unsigned char>(Peek());
      if (ch == '"') {
        ++p_;
        return true;
      }
      if (ch != '\\') return false;  // control characters, or not plain ASCII
      if (p_ + 1 >= t_.size()) return false;
      char decoded;
      switch (t_[p_ + 1]) {
        case '"': decoded = '"'; break;
        case '\\': decoded = '\\'; break;
        case '/': decoded = '/'; break;
        case 'b': decoded = '\b'; break;
        case 'f': decoded = '\f'; break;
        case 'n': decoded = '\n'; break;
        case 'r': decoded = '\r'; break;
        case 't': decoded = '\t'; break;
        default: return false;  // \u escapes (and invalid ones): the full reader's business
      }
      if (out != nullptr) out->push_back(decoded);
      p_ += 2;
    }
    return false;
  }

  bool Digits() {
    const size_t start = p_;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') ++p_;
    return p_ > start;
  }

  // A number, in JSON's grammar. `integer` (when given): whether it has no fraction and no
  // exponent; then its value into `value`.
  bool Number(bool* integer, int64_t* value = nullptr) {
    const size_t start = p_;
    const bool negative = Peek() == '-';
    if (negative) ++p_;
    if (AtEnd()) return false;
    const size_t int_start = p_;
    if (Peek() == '0') {
      ++p_;
    } else if (!Digits()) {
      return false;
    }
    const size_t int_end = p_;
    bool plain = true;
    if (!AtEnd() && Peek() == '.') {
      ++p_;
      if (!Digits()) return false;
      plain = false;
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++p_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++p_;
      if (!Digits()) return false;
      plain = false;
    }
    // A number a double cannot hold (1e400, or an integer of 309 digits) makes the full reader
    // reject the whole text: declined (as is an underflow, 1e-400, which it would read as 0).
    if (!plain || int_end - int_start > 18) {
      double d = 0;
      const std::from_chars_result r = std::from_chars(t_.data() + start, t_.data() + p_, d);
      if (r.ec != std::errc() || r.ptr != t_.data() + p_) return false;
    }
    if (integer == nullptr) return true;
    *integer = plain;
    if (plain) {
      if (int_end - int_start > 18) return false;  // near the int64 range: the full reader's call
      int64_t v = 0;
      for (size_t k = int_start; k < int_end; ++k) v = v * 10 + (t_[k] - '0');
      *value = negative ? -v : v;
    }
    return true;
  }

  std::string_view t_;
  const std::vector<std::string_view>& path_;
  size_t p_ = 0;
  JsonArrayScan out_;
  std::string key_;  // the key being read (only on the path: elsewhere keys are not kept)
};

}  // namespace

std::optional<JsonArrayScan> ScanJsonArray(std::string_view text,
                                           const std::vector<std::string_view>& path) {
  return Scanner(text, path).Run();
}

}  // namespace weave::tools
