#include "hlo_text_builder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weave::fuzz {

int64_t Val::Elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Val::Shape() const { return ShapeText(type, dims); }

std::string ShapeText(const std::string& type, const std::vector<int64_t>& dims) {
  return absl::StrCat(type, "[", absl::StrJoin(dims, ","), "]");
}

std::string IntList(const std::vector<int64_t>& v) { return absl::StrJoin(v, ","); }

bool IsFp8Type(const std::string& type) { return type.rfind("f8", 0) == 0; }

std::string HloTextBuilder::FreshName(const std::string& hint) {
  std::string base = absl::StrCat(prefix_, hint.empty() ? "v" : hint);
  int& n = used_[base];
  std::string name = n == 0 ? base : absl::StrCat(base, ".", n);
  ++n;
  return name;
}

Val HloTextBuilder::Param(const std::string& type, const std::vector<int64_t>& dims,
                          const std::string& sharding, const std::string& hint) {
  Val v{FreshName(hint), type, dims};
  std::string line = absl::StrCat(v.name, " = ", v.Shape(), " parameter(", num_params_++, ")");
  if (!sharding.empty()) absl::StrAppend(&line, ", sharding=", sharding);
  param_lines_.push_back(lines_.size());
  lines_.push_back(std::move(line));
  return v;
}

Val HloTextBuilder::Op(const std::string& opcode, const std::string& type,
                       const std::vector<int64_t>& dims, const std::vector<Val>& operands,
                       const std::string& attrs, const std::string& hint) {
  Val v{FreshName(hint.empty() ? opcode : hint), type, dims};
  std::vector<std::string> names;
  for (const Val& o : operands) names.push_back(o.name);
  std::string line =
      absl::StrCat(v.name, " = ", v.Shape(), " ", opcode, "(", absl::StrJoin(names, ", "), ")");
  if (!attrs.empty()) absl::StrAppend(&line, ", ", attrs);
  lines_.push_back(std::move(line));
  return v;
}

std::string HloTextBuilder::OpRaw(const std::string& opcode, const std::string& shape,
                                  const std::vector<std::string>& operands,
                                  const std::string& attrs, const std::string& hint) {
  std::string name = FreshName(hint);
  std::string line =
      absl::StrCat(name, " = ", shape, " ", opcode, "(", absl::StrJoin(operands, ", "), ")");
  if (!attrs.empty()) absl::StrAppend(&line, ", ", attrs);
  lines_.push_back(std::move(line));
  return name;
}

Val HloTextBuilder::ScalarConstant(const std::string& type, const std::string& literal,
                                   const std::string& hint) {
  Val v{FreshName(hint), type, {}};
  lines_.push_back(absl::StrCat(v.name, " = ", v.Shape(), " constant(", literal, ")"));
  return v;
}

Val HloTextBuilder::Splat(const std::string& type, const std::string& literal,
                          const std::vector<int64_t>& dims) {
  Val c = ScalarConstant(type, literal);
  return Op("broadcast", type, dims, {c}, "dimensions={}", "splat");
}

std::string HloTextBuilder::Reducer(const std::string& kind, const std::string& type) {
  const std::string key = absl::StrCat(kind, "_", type);
  auto it = reducers_.find(key);
  if (it != reducers_.end()) return it->second;
  const std::string name = absl::StrCat(prefix_, key);
  computations_.push_back(absl::StrCat(name, " {\n  a = ", type, "[] parameter(0)\n  b = ", type,
                                       "[] parameter(1)\n  ROOT r = ", type, "[] ", kind,
                                       "(a, b)\n}\n"));
  reducers_[key] = name;
  return name;
}

std::string HloTextBuilder::AddComputation(const std::string& hint, const std::string& body_lines,
                                           const std::string& root_line_name) {
  (void)root_line_name;
  const std::string name = FreshName(hint);
  computations_.push_back(absl::StrCat(name, " {\n", body_lines, "}\n"));
  return name;
}

void HloTextBuilder::AddNamedComputation(const std::string& name, const std::string& body_lines) {
  computations_.push_back(absl::StrCat(name, " {\n", body_lines, "}\n"));
}

std::string HloTextBuilder::Module(const std::string& name, int64_t num_partitions,
                                   const std::vector<Val>& outputs, bool tuple_root,
                                   const std::string& comment) const {
  std::string s;
  if (!comment.empty()) absl::StrAppend(&s, "// ", comment, "\n");
  absl::StrAppend(&s, "HloModule ", name, ", num_partitions=", num_partitions);
  if (!header_attributes_.empty()) absl::StrAppend(&s, ", ", header_attributes_);
  absl::StrAppend(&s, "\n\n");
  for (const std::string& c : computations_) absl::StrAppend(&s, c, "\n");
  absl::StrAppend(&s, "ENTRY ", prefix_, "main {\n");
  const bool tuple = tuple_root || outputs.size() != 1;
  std::vector<std::string> lines = lines_;
  if (num_params_ >= 2 && num_params_ % 2 == 0) {
    for (size_t k = 0; k < param_lines_.size(); ++k) {
      std::string& l = lines[param_lines_[k]];
      const std::string from = absl::StrCat(" parameter(", k, ")");
      const size_t at = l.find(from);
      if (at == std::string::npos) continue;
      l.replace(at, from.size(),
                absl::StrCat(" parameter(", num_params_ - 1 - static_cast<int64_t>(k), ")"));
    }
  }
  for (const std::string& l : lines) {
    // A single output is the root itself (ROOT need not be the last line).
    const bool root = !tuple && l.compare(0, outputs[0].name.size() + 3,
                                          absl::StrCat(outputs[0].name, " = ")) == 0;
    absl::StrAppend(&s, root ? "  ROOT " : "  ", l, "\n");
  }
  if (tuple) {
    std::vector<std::string> shapes, names;
    for (const Val& o : outputs) {
      shapes.push_back(o.Shape());
      names.push_back(o.name);
    }
    absl::StrAppend(&s, "  ROOT ", prefix_, "result = (", absl::StrJoin(shapes, ", "), ") tuple(",
                    absl::StrJoin(names, ", "), ")\n");
  }
  absl::StrAppend(&s, "}\n");
  return s;
}

}  // namespace weave::fuzz
