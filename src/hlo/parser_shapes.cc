// HLO text parser: shapes (arrays, tuples, layouts with tiles and memory spaces) and literals
// (constant values, nested to the shape's rank). See parser_internal.h.
#include "hlo/parser_internal.h"

namespace weave::parser_internal {

bool RoundsPastLargest(PrimitiveType t, double v);  // below, beside ParseFloatToken


// ------------------------------------------------------------------ shapes
// `allow_layout` is false where a `{` after the shape starts something else (the result shape
// of a computation signature).
bool Parser::ParseShape(Shape* s, bool allow_layout) {
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
  if (t == "b" && Peek() == '(') {  // buffer shape `b(shape)`
    DepthGuard guard(this);
    if (depth_ > kMaxNesting) return Error(b, "shapes nested too deeply");
    ++pos_;
    if (!ParseShape(s, allow_layout)) return false;
    if (!s->IsArray()) return Error(b, "a buffer shape b(...) holds an array");
    s->buffer = true;
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
  if (!ParseShapeDims(s)) return false;
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
  if (allow_layout && Peek() == '{') return ParseLayout(s);
  pos_ = save;
  return true;
}

bool Parser::ParseShapeDims(Shape* s) {
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
  return true;
}

bool Parser::ParseLayout(Shape* s) {
  ++pos_;
  Layout layout;
  const size_t layout_pos = pos_;
  if (Peek() != ':' && Peek() != '}') {
    do {
      int64_t v;
      if (!ParseInt(&v, "a layout dimension")) return false;
      layout.minor_to_major.push_back(v);
    } while (Consume(','));
  }
  if (!CheckLayoutDims(*s, layout, layout_pos)) return false;
  if (Consume(':')) layout.suffix = ScanLayoutSuffix();
  if (!Expect('}')) return false;
  s->layout = std::move(layout);
  return true;
}

bool Parser::CheckLayoutDims(const Shape& s, const Layout& layout, size_t layout_pos) {
  // XLA's parser and LayoutUtil::ValidateLayoutInShape: a layout lists each dim of the shape
  // once (`{}` stays accepted as the default layout).
  if (!layout.minor_to_major.empty()) {
    const int64_t rank = s.rank();
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    if (static_cast<int64_t>(layout.minor_to_major.size()) != rank) {
      return Error(layout_pos, Cat("layout of ", s.ToString(false), " lists ",
                                   static_cast<int64_t>(layout.minor_to_major.size()),
                                   " dims for rank ", rank));
    }
    for (int64_t d : layout.minor_to_major) {
      if (d < 0 || d >= rank || seen[static_cast<size_t>(d)]) {
        return Error(layout_pos, Cat("layout of ", s.ToString(false), " must list each dim in [0, ",
                                     rank, ") once; ", d,
                                     d < 0 || d >= rank ? " is out of range" : " repeats"));
      }
      seen[static_cast<size_t>(d)] = true;
    }
  }
  return true;
}

std::string Parser::ScanLayoutSuffix() {
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
  return std::string(TrimView(src_.substr(sb, pos_ - sb)));
}

// ------------------------------------------------------------------ literals
// After `constant(`: captures the literal text up to the matching `)` and decodes its values.
bool Parser::ParseLiteral(Literal* lit) {
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
  return DecodeLiteral(text, b, lit);
}

bool Parser::ScanShapedLiteral(std::string_view* out) {
  SkipWs();
  const size_t b = pos_;
  // A tuple literal is kept as its text (balanced parentheses), as tuple constants are.
  if (Peek() == '(') return ScanRawValue(out);
  Literal lit;
  if (!ParseShape(&lit.shape)) return false;
  SkipWs();
  const size_t vb = pos_;
  if (Peek() == '{') {
    std::string_view braces;
    if (!ScanBraces(&braces)) return false;
  } else {
    const size_t n = src_.size();
    while (pos_ < n && src_[pos_] != ',' && src_[pos_] != ' ' && src_[pos_] != '\n' &&
           src_[pos_] != '\r' && src_[pos_] != '\t' && src_[pos_] != '}' && src_[pos_] != ')') {
      if (src_[pos_] == '(') {  // nan(0x...)
        const size_t close = src_.find(')', pos_);
        pos_ = close == std::string_view::npos ? n : close + 1;
        break;
      }
      ++pos_;
    }
    if (pos_ == vb) return Expected(Cat("a value for the literal of shape ", lit.shape.ToString()));
  }
  if (!DecodeLiteral(src_.substr(vb, pos_ - vb), vb, &lit)) return false;
  *out = src_.substr(b, pos_ - b);
  return true;
}

namespace {

// The end (exclusive) of the value token that starts at text[p]: up to a separator, or through
// the `(...)` payload of a `nan(0x...)`.
size_t LiteralTokenEnd(std::string_view text, size_t p) {
  const size_t tn = text.size();
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
  return e;
}

}  // namespace

bool Parser::DecodeLiteral(std::string_view text, size_t b, Literal* lit) {
  const Shape& shape = lit->shape;
  if (shape.IsTuple()) return true;  // tuple literals are kept as text only
  if (text == "{...}") {
    lit->elided = true;
    return true;
  }
  if (!shape.IsArray()) return Error(b, "constant of a non-array shape");
  int64_t count = 1;
  if (!LiteralElementCount(shape, b, &count)) return false;
  const PrimitiveType t = shape.element_type;
  const bool is_complex = IsComplex(t);
  const bool is_float = IsFloatingPoint(t) || is_complex;
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
      size_t e = LiteralTokenEnd(text, p);
      std::string_view tok = text.substr(p, e - p);
      if (values >= want) {
        return Error(b, Cat("constant has more values than its shape ",
                                     shape.ToString(), " holds (", count, " elements)"));
      }
      size_t tok_pos = b + static_cast<size_t>(tok.data() - text.data());
      if (!DecodeLiteralValue(tok, tok_pos, lit)) return false;
      ++values;
      p = e;
    }
  }
  return CheckLiteralValues(b, count, values, max_depth, lit);
}

bool Parser::LiteralElementCount(const Shape& shape, size_t b, int64_t* count) {
  // Element count, with overflow checks.
  for (int64_t d : shape.dims) {
    if (d < 0) return Error(b, "constant with a dynamic dimension");
    if (d != 0 && *count > std::numeric_limits<int64_t>::max() / d) {
      return Error(b, "constant shape has too many elements");
    }
    *count *= d;
  }
  return true;
}

bool Parser::DecodeLiteralValue(std::string_view tok, size_t tok_pos, Literal* lit) {
  const PrimitiveType t = lit->shape.element_type;
  const bool is_float = IsFloatingPoint(t) || IsComplex(t);
  const bool is_pred = t == PrimitiveType::PRED;
  const bool is_unsigned = IsUnsignedInteger(t);
  if (is_float) {
    double v;
    if (!ParseFloatToken(tok, &v)) {
      return Error(tok_pos, Cat("invalid floating-point value '", tok, "'"));
    }
    // A finite value that rounds past the type's largest finite one is out of range (XLA's
    // parser), and so is one beyond a double's.
    const bool written_inf_or_nan = tok.find("inf") != std::string_view::npos ||
                                    tok.find("nan") != std::string_view::npos;
    if (!written_inf_or_nan && (!std::isfinite(v) || RoundsPastLargest(t, v))) {
      return Error(tok_pos, Cat("value '", tok, "' is out of range for ", PrimitiveTypeName(t)));
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
    // A negative value of an unsigned type wraps modulo 2^64, as XLA's parser reads it: in
    // range for u64 only (u64 -1 is 2^64-1); in u8..u32 it wraps past the type's largest.
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
  return true;
}

bool Parser::CheckLiteralValues(size_t b, int64_t count, int64_t values, int64_t max_depth,
                                Literal* lit) {
  const Shape& shape = lit->shape;
  const bool is_complex = IsComplex(shape.element_type);
  const bool is_float = IsFloatingPoint(shape.element_type) || is_complex;
  const int64_t want = is_complex ? 2 * count : count;
  if (values == 1 && max_depth == 0 && count > 1 && !is_complex) {
    // One scalar written for an array constant, `f32[5,1024] constant(1)`: every element takes
    // it (XLA's parser accepts this form; its partitioner tests use it).
    if (count > (int64_t{1} << 28)) {
      return Error(b, Cat("constant ", shape.ToString(), " written as one value has ", count,
                          " elements: more than Weave expands (2^28)"));
    }
    if (is_float) {
      lit->f.assign(static_cast<size_t>(count), lit->f[0]);
    } else {
      lit->i.assign(static_cast<size_t>(count), lit->i[0]);
    }
    return true;
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

// Whether a finite value `v` written for float type `t` (a complex type: its component's) rounds
// past the type's largest finite value (to inf, or NaN in types without one): XLA's parser
// rejects those, and takes values that round down to the largest (3.40282347e+38 for f32).
bool RoundsPastLargest(PrimitiveType t, double v) {
  struct Range {
    double largest, half_ulp;
    bool tie_overflows;  // the largest's significand is odd: a tie rounds up, past it
  };
  Range r;
  switch (t) {
    case PrimitiveType::F16: r = {65504.0, 16.0, true}; break;
    case PrimitiveType::BF16: r = {3.3895313892515355e38, std::ldexp(1.0, 119), true}; break;
    case PrimitiveType::F32:
    case PrimitiveType::C64:
      r = {static_cast<double>(std::numeric_limits<float>::max()), std::ldexp(1.0, 103), true};
      break;
    case PrimitiveType::F8E5M2:
    case PrimitiveType::F8E5M2FNUZ: r = {57344.0, 4096.0, true}; break;
    case PrimitiveType::F8E4M3FN: r = {448.0, 16.0, false}; break;
    case PrimitiveType::F8E4M3FNUZ:
    case PrimitiveType::F8E4M3: r = {240.0, 8.0, true}; break;
    case PrimitiveType::F8E4M3B11FNUZ: r = {30.0, 1.0, true}; break;
    case PrimitiveType::F8E3M4: r = {15.5, 0.25, true}; break;
    default: return false;  // f64, c128 (a double holds them), and types this table lacks
  }
  const double a = std::fabs(v);
  const double edge = r.largest + r.half_ulp;
  return a > edge || (a == edge && r.tie_overflows);
}

bool Parser::ParseFloatToken(std::string_view tok, double* v) {
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

bool Parser::ParseIntToken(std::string_view tok, bool is_unsigned, int64_t* v) {
  if (is_unsigned && !tok.empty() && tok[0] != '-') {
    uint64_t u;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), u);
    if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  auto r = std::from_chars(tok.data(), tok.data() + tok.size(), *v);
  return r.ec == std::errc() && r.ptr == tok.data() + tok.size();
}

}  // namespace weave::parser_internal
