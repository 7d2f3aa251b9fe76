// A small builder of HLO module text for the random program generator: it names values, writes
// one instruction per line with its result shape, emits each reduction computation once, and
// assembles the module. It knows nothing about semantics: the generator computes every shape
// itself, and `weave verify` (the IR's verifier, run by the differential driver on every
// program) checks them; a program that does not verify is a generator bug (class INVALID).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weave::fuzz {

// An array value of the entry computation: its name, element type and dims.
struct Val {
  std::string name;
  std::string type;            // "bf16", "f8e4m3fn", "s32", ...
  std::vector<int64_t> dims;
  int64_t Elements() const;
  std::string Shape() const;   // "bf16[4,8]"
};

std::string ShapeText(const std::string& type, const std::vector<int64_t>& dims);
std::string IntList(const std::vector<int64_t>& v);  // "1,0,2"
bool IsFp8Type(const std::string& type);

class HloTextBuilder {
 public:
  // `prefix` starts every value name (e.g. "m0.").
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  // A new entry parameter; `sharding` is the attribute value without `sharding=` ("" for none).
  Val Param(const std::string& type, const std::vector<int64_t>& dims,
            const std::string& sharding = "", const std::string& hint = "p");
  // Appends `text` to the last instruction written (e.g. ", frontend_attributes={..}").
  void AppendToLastLine(const std::string& text) { lines_.back() += text; }
  // `name = type[dims] opcode(operands)[, attrs]`.
  Val Op(const std::string& opcode, const std::string& type, const std::vector<int64_t>& dims,
         const std::vector<Val>& operands, const std::string& attrs = "",
         const std::string& hint = "");
  // An instruction whose result is not an array (async-start tuples): `shape` is its full shape
  // text. Returns the instruction name.
  std::string OpRaw(const std::string& opcode, const std::string& shape,
                    const std::vector<std::string>& operands, const std::string& attrs,
                    const std::string& hint);
  Val ScalarConstant(const std::string& type, const std::string& literal,
                     const std::string& hint = "c");
  // broadcast of a scalar constant to `dims`.
  Val Splat(const std::string& type, const std::string& literal, const std::vector<int64_t>& dims);
  // The name of a two-parameter scalar computation `kind` ("add", "maximum") over `type`,
  // emitted once per (kind, type).
  std::string Reducer(const std::string& kind, const std::string& type);
  // A whole extra computation (e.g. an async wrapper); `text` is its full text.
  std::string AddComputation(const std::string& hint, const std::string& body_lines,
                             const std::string& root_line_name);
  // The same under a name already made by FreshName.
  void AddNamedComputation(const std::string& name, const std::string& body_lines);
  std::string FreshName(const std::string& hint);
  int64_t NextChannel() { return next_channel_++; }
  // Extra module header attributes after num_partitions (e.g. "frontend_attributes={...}").
  void set_header_attributes(std::string attrs) { header_attributes_ = std::move(attrs); }
  int64_t num_params() const { return num_params_; }

  // The module: header, computations, then ENTRY with the instructions and the root: a tuple of
  // `outputs` when `tuple_root` or there are several, else the single output. A module with an
  // even number (>= 2) of entry parameters numbers them in reverse text order (the first written
  // is the last parameter), as hand-written and XLA test modules may: every pass and the
  // partitioner must keep numbers, not text positions. No choice is drawn for it, so a seed's
  // program is otherwise the same.
  std::string Module(const std::string& name, int64_t num_partitions,
                     const std::vector<Val>& outputs, bool tuple_root,
                     const std::string& comment) const;

 private:
  std::string prefix_;
  std::string header_attributes_;
  std::vector<std::string> lines_;
  std::vector<size_t> param_lines_;  // index in lines_ of each parameter, in creation order
  std::vector<std::string> computations_;
  std::map<std::string, std::string> reducers_;
  std::map<std::string, int> used_;
  int64_t num_params_ = 0;
  int64_t next_channel_ = 1;
};

}  // namespace weave::fuzz
