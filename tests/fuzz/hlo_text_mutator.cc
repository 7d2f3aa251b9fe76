#include "hlo_text_mutator.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hlo/opcodes.h"

namespace weave::fuzz {
namespace {

enum class Kind { kWord, kNumber, kOther };

struct Token {
  size_t begin = 0, end = 0;
  Kind kind = Kind::kOther;
};

bool WordStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '%'; }
bool WordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '%';
}
bool Digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

std::vector<Token> Tokenize(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    Token t;
    t.begin = i;
    if (WordStart(s[i])) {
      while (i < s.size() && WordChar(s[i])) ++i;
      t.kind = Kind::kWord;
    } else if (Digit(s[i]) || (s[i] == '-' && i + 1 < s.size() && Digit(s[i + 1]))) {
      ++i;
      while (i < s.size() && Digit(s[i])) ++i;
      t.kind = Kind::kNumber;
    } else if (std::isspace(static_cast<unsigned char>(s[i]))) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      t.begin = t.end = i;  // whitespace is not a token
      continue;
    } else {
      ++i;
    }
    t.end = i;
    out.push_back(t);
  }
  return out;
}

// Words a mutant may bring in that the text may not hold.
const std::vector<std::string>& Dictionary() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> w;
#define WEAVE_FUZZ_OPCODE_NAME(e, s) w.emplace_back(s);
    WEAVE_HLO_OPCODES(WEAVE_FUZZ_OPCODE_NAME)
#undef WEAVE_FUZZ_OPCODE_NAME
    for (const char* t : {"pred", "s4", "s8", "s16", "s32", "s64", "u8", "u32", "u64", "f16", "bf16", "f32",
                          "f64", "f8e4m3fn", "f8e5m2", "f8e8m0fnu", "f4e2m1fn", "c64", "token", "tuple"}) {
      w.emplace_back(t);
    }
    for (const char* a : {"dimensions", "slice", "padding", "window", "dim_labels", "to_apply", "calls",
                          "body", "condition", "replica_groups", "channel_id", "source_target_pairs",
                          "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims",
                          "rhs_batch_dims", "dynamic_slice_sizes", "index_vector_dim",
                          "offset_dims", "collapsed_slice_dims", "start_index_map", "slice_sizes",
                          "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                          "iota_dimension", "direction", "distribution", "is_stable",
                          "use_global_device_ids", "custom_call_target", "sharding", "split_dimension",
                          "branch_computations", "true_computation", "false_computation",
                          "feature_group_count", "batch_group_count", "exponent_bits", "mantissa_bits",
                          "LT", "GT", "EQ", "NE", "GE", "LE", "TOTALORDER", "replicated", "maximal",
                          "devices", "manual", "last_tile_dim_replicate", "true", "false"}) {
      w.emplace_back(a);
    }
    return w;
  }();
  return words;
}

std::string Replace(std::string_view s, size_t begin, size_t end, std::string_view with) {
  std::string out(s.substr(0, begin));
  out += with;
  out += s.substr(end);
  return out;
}

// [begin, end) of each line.
std::vector<std::pair<size_t, size_t>> Lines(std::string_view s) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find('\n', b);
    if (e == std::string_view::npos) e = s.size();
    out.emplace_back(b, e);
    b = e + 1;
  }
  return out;
}

// One mutation drawn from `rng` (it may give the text back unchanged: a word replaced by itself).
std::string MutateOnce(std::string_view text, std::mt19937& rng) {
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<Token> tokens = Tokenize(text);
  if (tokens.empty()) return {};
  std::vector<size_t> words, numbers;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].kind == Kind::kWord) words.push_back(i);
    if (tokens[i].kind == Kind::kNumber) numbers.push_back(i);
  }
  auto str = [&](size_t i) { return text.substr(tokens[i].begin, tokens[i].end - tokens[i].begin); };
  for (int attempt = 0; attempt < 4; ++attempt) {
    switch (pick(8)) {
      case 0:
      case 1: {  // a number changed
        if (numbers.empty()) break;
        const Token& t = tokens[numbers[pick(numbers.size())]];
        int64_t v = 0;
        try {
          v = std::stoll(std::string(text.substr(t.begin, t.end - t.begin)));
        } catch (...) {
          v = 1;
        }
        static const int64_t kSmall[] = {0, 1, 2, 3, 4, 8, 16, -1};
        // Numbers the text holds may be any int64: keep the arithmetic in range.
        constexpr int64_t kLarge = int64_t{1} << 40;
        v = std::clamp<int64_t>(v, -kLarge, kLarge);
        int64_t nv = 0;
        switch (pick(5)) {
          case 0: nv = v + 1; break;
          case 1: nv = v - 1; break;
          case 2: nv = v * 2; break;
          case 3: nv = v / 2; break;
          default: nv = kSmall[pick(8)];
        }
        return Replace(text, t.begin, t.end, std::to_string(nv));
      }
      case 2: {  // two numbers swapped
        if (numbers.size() < 2) break;
        size_t a = numbers[pick(numbers.size())], b = numbers[pick(numbers.size())];
        if (a == b) break;
        if (a > b) std::swap(a, b);
        std::string out = Replace(text, tokens[b].begin, tokens[b].end, str(a));
        return Replace(out, tokens[a].begin, tokens[a].end, str(b));
      }
      case 3: {  // a word replaced by another of the text
        if (words.size() < 2) break;
        const Token& t = tokens[words[pick(words.size())]];
        return Replace(text, t.begin, t.end, str(words[pick(words.size())]));
      }
      case 4: {  // a word replaced by a dictionary word
        if (words.empty()) break;
        const Token& t = tokens[words[pick(words.size())]];
        const std::vector<std::string>& dict = Dictionary();
        return Replace(text, t.begin, t.end, dict[pick(dict.size())]);
      }
      case 5: {  // a token deleted or repeated
        const size_t i = pick(tokens.size());
        const Token& t = tokens[i];
        if (rng() % 2) return Replace(text, t.begin, t.end, "");
        // A word repeats as a list element (an extra operand); punctuation as itself.
        const std::string one(str(i));
        return Replace(text, t.begin, t.end, one + (t.kind == Kind::kOther ? "" : ", ") + one);
      }
      case 6: {  // a line deleted
        const auto lines = Lines(text);
        if (lines.size() < 2) break;
        const auto [b, e] = lines[pick(lines.size())];
        return Replace(text, b, std::min(e + 1, text.size()), "");
      }
      default: {  // a definition replaced by another line's
        const auto lines = Lines(text);
        std::vector<std::pair<size_t, size_t>> defs;  // (offset after " = ", line end)
        for (const auto& [b, e] : lines) {
          const size_t eq = text.substr(b, e - b).find(" = ");
          if (eq != std::string_view::npos) defs.emplace_back(b + eq + 3, e);
        }
        if (defs.size() < 2) break;
        const auto [db, de] = defs[pick(defs.size())];
        const auto [sb, se] = defs[pick(defs.size())];
        if (db == sb) break;
        return Replace(text, db, de, text.substr(sb, se - sb));
      }
    }
  }
  const Token& t = tokens[pick(tokens.size())];
  return Replace(text, t.begin, t.end, "");
}

}  // namespace

std::string MutateHloText(std::string_view text, unsigned int seed) {
  std::mt19937 rng(seed);
  std::string out;
  for (int attempt = 0; attempt < 8; ++attempt) {
    out = MutateOnce(text, rng);
    if (out != text) break;
  }
  return out;
}

}  // namespace weave::fuzz
