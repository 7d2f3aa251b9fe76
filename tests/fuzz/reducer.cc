#include "reducer.h"

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "campaign.h"
#include "program_gen.h"

namespace weave::fuzz {
namespace {

// ---------------------------------------------------------------------------------------------
// A line model of the entry computation of a printed module.

struct Inst {
  bool root = false;
  std::string name;
  std::string shape;
  std::string opcode;
  std::string operand_text;           // inside the parentheses, as written
  std::vector<std::string> operands;  // referenced names (without '%'), in order
  bool literal = false;               // constant: operand_text is a literal
  std::string rest;                   // ", attr=..." after the parentheses
};

struct Module {
  std::vector<std::string> before;  // every line before the ENTRY header
  std::string header;               // the ENTRY line
  std::vector<Inst> insts;
  std::vector<std::string> after;   // the closing brace and anything after
};

// Index of the bracket closing the one at `open` (parentheses and braces, quotes skipped).
size_t MatchClose(const std::string& s, size_t open) {
  int depth = 0;
  bool quote = false;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == '"') quote = false;
      continue;
    }
    if (c == '"') quote = true;
    else if (c == '(' || c == '{' || c == '[') ++depth;
    else if (c == ')' || c == '}' || c == ']') {
      if (--depth == 0) return i;
    }
  }
  return std::string::npos;
}

// Splits at commas outside brackets.
std::vector<std::string> SplitTop(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(' || c == '{' || c == '[') ++depth;
    if (c == ')' || c == '}' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!absl::StripAsciiWhitespace(cur).empty()) out.push_back(std::string(absl::StripAsciiWhitespace(cur)));
  return out;
}

std::optional<Inst> ParseInst(std::string line) {
  Inst in;
  absl::string_view s = absl::StripAsciiWhitespace(line);
  if (absl::ConsumePrefix(&s, "ROOT ")) in.root = true;
  const size_t eq = s.find(" = ");
  if (eq == absl::string_view::npos) return std::nullopt;
  in.name = std::string(absl::StripPrefix(s.substr(0, eq), "%"));
  std::string r(s.substr(eq + 3));
  size_t pos = 0;
  if (!r.empty() && r[0] == '(') {
    const size_t close = MatchClose(r, 0);
    if (close == std::string::npos) return std::nullopt;
    in.shape = r.substr(0, close + 1);
    pos = close + 1;
  } else {
    pos = r.find(' ');
    if (pos == std::string::npos) return std::nullopt;
    in.shape = r.substr(0, pos);
  }
  while (pos < r.size() && r[pos] == ' ') ++pos;
  const size_t open = r.find('(', pos);
  if (open == std::string::npos) return std::nullopt;
  in.opcode = r.substr(pos, open - pos);
  const size_t close = MatchClose(r, open);
  if (close == std::string::npos) return std::nullopt;
  in.operand_text = r.substr(open + 1, close - open - 1);
  in.rest = r.substr(close + 1);
  in.literal = in.opcode == "constant" || in.opcode == "parameter" || in.opcode == "iota" ||
               in.opcode == "partition-id" || in.opcode == "replica-id";
  if (!in.literal) {
    for (const std::string& op : SplitTop(in.operand_text)) {
      absl::string_view t = op;
      const size_t sp = t.rfind(' ');
      if (sp != absl::string_view::npos) t = t.substr(sp + 1);
      in.operands.push_back(std::string(absl::StripPrefix(t, "%")));
    }
  }
  return in;
}

std::string InstText(const Inst& in) {
  std::string ops = in.operand_text;
  if (!in.literal) {
    std::vector<std::string> names;
    for (const std::string& o : in.operands) names.push_back(absl::StrCat("%", o));
    ops = absl::StrJoin(names, ", ");
  }
  return absl::StrCat("  ", in.root ? "ROOT " : "", "%", in.name, " = ", in.shape, " ", in.opcode,
                      "(", ops, ")", in.rest);
}

std::optional<Module> ParseModule(const std::string& text) {
  Module m;
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t i = 0;
  for (; i < lines.size(); ++i) {
    if (absl::StartsWith(lines[i], "ENTRY ")) break;
    m.before.push_back(lines[i]);
  }
  if (i == lines.size()) return std::nullopt;
  m.header = lines[i++];
  for (; i < lines.size(); ++i) {
    if (absl::StartsWith(lines[i], "}")) break;
    if (absl::StripAsciiWhitespace(lines[i]).empty()) continue;
    auto in = ParseInst(lines[i]);
    if (!in) return std::nullopt;
    m.insts.push_back(*std::move(in));
  }
  for (; i < lines.size(); ++i) m.after.push_back(lines[i]);
  return m;
}

std::string ModuleText(const Module& m) {
  std::vector<std::string> lines = m.before;
  lines.push_back(m.header);
  for (const Inst& in : m.insts) lines.push_back(InstText(in));
  lines.insert(lines.end(), m.after.begin(), m.after.end());
  return absl::StrJoin(lines, "\n");
}

// Names of the entry instructions that something reads (operands, and %names in attributes
// such as control-predecessors).
std::set<std::string> UsedNames(const Module& m) {
  std::set<std::string> used;
  for (const Inst& in : m.insts) {
    for (const std::string& o : in.operands) used.insert(o);
    size_t p = 0;
    while ((p = in.rest.find('%', p)) != std::string::npos) {
      size_t e = p + 1;
      while (e < in.rest.size() && (std::isalnum(static_cast<unsigned char>(in.rest[e])) ||
                                    in.rest[e] == '_' || in.rest[e] == '.' || in.rest[e] == '-')) {
        ++e;
      }
      used.insert(in.rest.substr(p + 1, e - p - 1));
      p = e;
    }
  }
  return used;
}

void CleanModule(Module& m) {
  // The header's entry_computation_layout and the entry signature are optional: drop them, so
  // that parameter and root changes need no bookkeeping there.
  for (std::string& l : m.before) {
    if (!absl::StartsWith(l, "HloModule ")) continue;
    const size_t p = l.find(", entry_computation_layout=");
    if (p == std::string::npos) continue;
    const size_t open = l.find('{', p);
    const size_t close = open == std::string::npos ? std::string::npos : MatchClose(l, open);
    if (close != std::string::npos) l.erase(p, close + 1 - p);
  }
  {
    const size_t open = m.header.find('(');
    if (open != std::string::npos) {
      const size_t brace = m.header.rfind('{');
      std::string name = m.header.substr(0, open);
      while (!name.empty() && name.back() == ' ') name.pop_back();
      if (brace != std::string::npos && brace > open) m.header = absl::StrCat(name, " {");
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    const std::set<std::string> used = UsedNames(m);
    for (size_t i = m.insts.size(); i-- > 0;) {
      if (!m.insts[i].root && !used.count(m.insts[i].name)) {
        m.insts.erase(m.insts.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
      }
    }
  }
  int64_t k = 0;
  for (Inst& in : m.insts) {
    if (in.opcode == "parameter") in.operand_text = absl::StrCat(k++);
  }
}

Inst* Find(Module& m, const std::string& name) {
  for (Inst& in : m.insts) {
    if (in.name == name) return &in;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The search.

class Reducer {
 public:
  Reducer(const CheckOptions& check, const ReduceOptions& o, const GenOptions& gen = {})
      : check_(check), o_(o), gen_(gen) {}

  // Checks `text` in a child; true when it fails with the target signature.
  bool Fails(const std::string& text) {
    ++candidates_;
    ChildResult r = RunOneInChild([text] { return text; }, check_, o_.timeout_s);
    return r.check.verdict != Verdict::kPass && r.check.Signature() == target_;
  }
  bool Budget() const { return candidates_ < o_.max_candidates; }
  void Log(const std::string& s) const {
    if (o_.log) o_.log(s);
  }

  absl::Status SetTarget(const std::string& text) {
    ChildResult r = RunOneInChild([text] { return text; }, check_, o_.timeout_s);
    if (r.check.verdict == Verdict::kPass) {
      return absl::FailedPreconditionError("the program passes every check: nothing to reduce");
    }
    target_ = r.check.Signature();
    Log(absl::StrCat("reduce: target '", target_, "'"));
    return absl::OkStatus();
  }

  std::string ReduceTrace(std::vector<uint64_t> trace) {
    auto text_of = [this](const std::vector<uint64_t>& t) {
      ReplayChoices c(t);
      return GenerateProgram(c, gen_, "fuzz_reduced").text;
    };
    auto try_trace = [&](const std::vector<uint64_t>& t) { return Budget() && Fails(text_of(t)); };
    // Delete chunks, halving the chunk size.
    for (size_t k = std::max<size_t>(1, trace.size() / 2); k >= 1 && Budget(); k /= 2) {
      for (size_t i = 0; i + k <= trace.size() && Budget();) {
        std::vector<uint64_t> t = trace;
        t.erase(t.begin() + static_cast<std::ptrdiff_t>(i), t.begin() + static_cast<std::ptrdiff_t>(i + k));
        if (try_trace(t)) {
          trace = std::move(t);
          Log(absl::StrCat("reduce: trace ", trace.size(), " draws"));
        } else {
          i += k;
        }
      }
      if (k == 1) break;
    }
    // Zero chunks, then lower single values.
    for (size_t k = 8; k >= 1 && Budget(); k /= 2) {
      for (size_t i = 0; i < trace.size() && Budget(); i += k) {
        std::vector<uint64_t> t = trace;
        bool any = false;
        for (size_t j = i; j < std::min(trace.size(), i + k); ++j) {
          any |= t[j] != 0;
          t[j] = 0;
        }
        if (any && try_trace(t)) trace = std::move(t);
      }
      if (k == 1) break;
    }
    for (size_t i = 0; i < trace.size() && Budget(); ++i) {
      if (trace[i] <= 1) continue;
      std::vector<uint64_t> t = trace;
      t[i] /= 2;
      if (try_trace(t)) {
        trace = std::move(t);
        --i;  // try halving again
      }
    }
    return text_of(trace);
  }

  std::string ReduceInstructions(std::string text) {
    for (bool progress = true; progress && Budget();) {
      progress = false;
      auto m = ParseModule(text);
      if (!m) return text;
      // Root tuple elements: halves, then one at a time.
      const Inst* root = nullptr;
      for (const Inst& in : m->insts) {
        if (in.root) root = &in;
      }
      if (root != nullptr && root->opcode == "tuple" && root->operands.size() > 1) {
        const int n = static_cast<int>(root->operands.size());
        for (int chunk = n / 2; chunk >= 1 && !progress && Budget(); chunk /= 2) {
          for (int start = 0; start + chunk <= n && !progress && Budget(); start += chunk) {
            std::string cand = text;
            for (int i = start + chunk - 1; i >= start && !cand.empty(); --i) cand = DropRootElement(cand, i);
            if (!cand.empty() && cand != text && Fails(cand)) {
              text = cand;
              progress = true;
            }
          }
        }
        if (progress) continue;
      }
      // Cut or bypass one instruction at a time, from the root upwards.
      std::vector<std::string> names;
      for (const Inst& in : m->insts) {
        if (in.opcode != "parameter") names.push_back(in.name);
      }
      for (size_t k = names.size(); k-- > 0 && !progress && Budget();) {
        std::string cand = CutInstruction(text, names[k]);
        if (!cand.empty() && cand != text && Fails(cand)) {
          text = cand;
          progress = true;
          break;
        }
        for (int op = 0; op < 3 && !progress && Budget(); ++op) {
          cand = BypassInstruction(text, names[k], op);
          if (!cand.empty() && cand != text && Fails(cand)) {
            text = cand;
            progress = true;
          }
        }
      }
      if (progress) Log(absl::StrCat("reduce: ", CountEntryInstructions(text), " instructions"));
    }
    return text;
  }

  int64_t candidates() const { return candidates_; }
  const std::string& target() const { return target_; }

 private:
  const CheckOptions& check_;
  const ReduceOptions& o_;
  GenOptions gen_;
  std::string target_;
  int64_t candidates_ = 0;
};

}  // namespace

std::string CleanUp(const std::string& text) {
  auto m = ParseModule(text);
  if (!m) return text;
  CleanModule(*m);
  return ModuleText(*m);
}

int64_t CountEntryInstructions(const std::string& text) {
  auto m = ParseModule(text);
  return m ? static_cast<int64_t>(m->insts.size()) : 0;
}

std::string CutInstruction(const std::string& text, const std::string& name) {
  auto m = ParseModule(text);
  if (!m) return "";
  Inst* in = Find(*m, name);
  if (in == nullptr || in->opcode == "parameter" || in->shape.empty() || in->shape[0] == '(') {
    return "";
  }
  in->opcode = "parameter";
  in->operand_text = "0";
  in->operands.clear();
  in->literal = true;
  in->rest.clear();
  CleanModule(*m);
  return ModuleText(*m);
}

std::string BypassInstruction(const std::string& text, const std::string& name, int operand) {
  auto m = ParseModule(text);
  if (!m) return "";
  Inst* in = Find(*m, name);
  if (in == nullptr || in->root || operand >= static_cast<int>(in->operands.size())) return "";
  const std::string repl = in->operands[static_cast<size_t>(operand)];
  const Inst* src = Find(*m, repl);
  if (src == nullptr || src->shape != in->shape) return "";
  for (Inst& u : m->insts) {
    for (std::string& o : u.operands) {
      if (o == name) o = repl;
    }
  }
  CleanModule(*m);
  return ModuleText(*m);
}

std::string DropRootElement(const std::string& text, int index) {
  auto m = ParseModule(text);
  if (!m) return "";
  Inst* root = nullptr;
  for (Inst& in : m->insts) {
    if (in.root) root = &in;
  }
  if (root == nullptr || root->opcode != "tuple" || index >= static_cast<int>(root->operands.size()) ||
      root->shape.size() < 2) {
    return "";
  }
  std::vector<std::string> shapes = SplitTop(root->shape.substr(1, root->shape.size() - 2));
  if (shapes.size() != root->operands.size()) return "";
  shapes.erase(shapes.begin() + index);
  root->operands.erase(root->operands.begin() + index);
  if (root->operands.empty()) return "";
  if (root->operands.size() == 1) {
    // The single survivor becomes the root.
    const std::string survivor = root->operands[0];
    Inst* s = Find(*m, survivor);
    if (s == nullptr) return "";
    root->root = false;
    s->root = true;
  } else {
    root->shape = absl::StrCat("(", absl::StrJoin(shapes, ", "), ")");
  }
  CleanModule(*m);
  return ModuleText(*m);
}

namespace {

// The reduced text with a first line saying how it fails (the generator's motif comment no
// longer describes it).
std::string Annotated(const std::string& text, const std::string& signature,
                      const std::string& origin) {
  std::string out = absl::StrCat("// reduced by weave-fuzz from ", origin, ": ", signature, "\n");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "// weave-fuzz program:") || absl::StartsWith(line, "// reduced by weave-fuzz")) {
      continue;
    }
    absl::StrAppend(&out, line, "\n");
  }
  while (absl::EndsWith(out, "\n\n")) out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<ReduceResult> ReduceSeed(uint64_t seed, const CheckOptions& check,
                                        const ReduceOptions& options, const GenOptions& gen) {
  SeededChoices c(seed);
  GeneratedProgram p = GenerateProgram(c, gen, absl::StrCat("fuzz_", seed));
  Reducer r(check, options, gen);
  if (absl::Status st = r.SetTarget(p.text); !st.ok()) return st;
  std::string text = r.ReduceTrace(c.trace());
  text = r.ReduceInstructions(CleanUp(text));
  ReduceResult out;
  out.text = Annotated(text, r.target(), absl::StrCat("seed ", seed));
  out.signature = r.target();
  out.instructions = CountEntryInstructions(text);
  out.candidates = r.candidates();
  return out;
}

absl::StatusOr<ReduceResult> ReduceText(const std::string& text, const CheckOptions& check,
                                        const ReduceOptions& options) {
  Reducer r(check, options);
  if (absl::Status st = r.SetTarget(text); !st.ok()) return st;
  std::string out_text = r.ReduceInstructions(CleanUp(text));
  ReduceResult out;
  out.text = Annotated(out_text, r.target(), "a module");
  out.signature = r.target();
  out.instructions = CountEntryInstructions(out_text);
  out.candidates = r.candidates();
  return out;
}

}  // namespace weave::fuzz
