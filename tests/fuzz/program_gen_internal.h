// What the generator's motifs share (program_gen.cc implements it; motifs in other files, such
// as motif_xla_loops.cc, use it). Not part of the generator's interface.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "choice_source.h"
#include "hlo_text_builder.h"
#include "program_gen.h"

namespace weave::fuzz {

// The replica groups of one collective.
struct Groups {
  int64_t n = 1;                              // group size (the ring)
  std::vector<std::vector<int64_t>> groups;   // partition ids, in group order
  std::string text;                           // the replica_groups value
  bool global_ids = true;                     // use_global_device_ids=true (else channel only)
  std::string form;                           // for the motif line

  // source_target_pairs for the rotation where position i of every group sends to position
  // (i + shift) mod n, as "{{a,b},{c,d}}".
  std::string ShiftPairs(int64_t shift) const;
  // u32[P] table of every partition's position in its group, as a literal "{...}"; empty when
  // positions equal partition ids (one group 0..P-1 in order).
  std::string PositionTable(int64_t num_partitions) const;
};

std::string GroupsListText(const std::vector<std::vector<int64_t>>& groups);

// The generator's services for a motif.
class MotifContext {
 public:
  virtual ~MotifContext() = default;
  virtual ChoiceSource& choices() = 0;
  virtual HloTextBuilder& builder() = 0;
  virtual const GenOptions& options() const = 0;
  virtual int64_t num_partitions() const = 0;
  // A small dim size, a block length, a wide float type, a dot result type for it.
  virtual int64_t Size() = 0;
  virtual int64_t Block() = 0;
  virtual std::string Wide() = 0;
  virtual std::string ResultType(const std::string& wide) = 0;
  // A ring size dividing the partition count, and replica groups of that size.
  virtual int64_t Ring() = 0;
  virtual Groups MakeGroups(int64_t n, bool allow_empty, bool allow_channel_only) = 0;
  // A value of `wide` type and `dims` (parameter, dequantization, views, ...); *desc says which.
  virtual Val Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
                      int view_percent, std::string* desc) = 0;
  // An epilogue after a dot (bias, ReLU, FP8 output, ...) or the value itself.
  virtual Val Epilogue(Val v) = 0;
  virtual void AddOutput(const Val& v) = 0;
  virtual void AddMotif(const std::string& line) = 0;
};

// Windowed einsum loops as XLA's SPMD partitioner emits them (spmd-windowed-einsum.md §2-3, §5):
// the handler's own input, written independently of the decomposer.
void MotifXlaLoop(MotifContext& ctx);

// Sizes of global-module dims that tile well over meshes of 2, 3, 4, 6 and 8 devices
// (motif_global.cc).
int64_t GlobalSize(ChoiceSource& c);

}  // namespace weave::fuzz
