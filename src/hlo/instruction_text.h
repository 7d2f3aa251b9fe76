// One instruction's line of HLO text, as a copy of it outside any computation prints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "hlo/ir.h"

namespace weave {

// Appends to `out` the line HloInstruction::ToString() gives for a copy of `instr` that is in no
// computation (HloInstruction::CloneWithNewOperands with the same shape and operands): the same
// text without the "ROOT " marker and without `control-predecessors={...}`, and without making
// the copy. For the cost gate's region texts (sim/cost_gate.cc), which list a computation's
// instructions under a new entry and root of their own. Defined in printer.cc.
void AppendDetachedInstructionText(std::string* out, const HloInstruction& instr);

// The printer's canonical-names mode: text that is equal for two modules (or parts) that differ
// only in names, channel ids and source locations, without printing the text first and renaming
// it after. For the cost gate's region keys (sim/cost_gate.cc), where a repeated layer is one
// estimate. While a ScopedCanonicalNames is alive on a thread, the printer (ToString of
// instructions, computations and modules, AppendDetachedInstructionText) writes on that thread:
//  - every name it writes with a '%' (an instruction's own, its operands, control predecessors,
//    called computations, a computation's header) as `%n<k>`, k the rank of the name's first
//    appearance in all that was printed in the mode (AppendName; names are not otherwise read);
//  - a computation's header as its name alone, `%n<k> {` (the signature repeats the parameters
//    and the root the body lists);
//  - no `metadata={...}` (source locations);
//  - `channel_id=` as ChannelId(id).
// Everything else is written as usual: attribute values kept verbatim (raw attributes,
// frontend attributes, backend configs) keep any names they hold, as the module's own text does.
struct CanonicalNames {
  // Rank of each name written so far. Views of the names: what was printed must outlive the
  // mode (the names of a module's instructions while it is unchanged).
  absl::flat_hash_map<std::string_view, int64_t> ranks;
  // Appends `%n<k>` for `name`, giving it the next rank on its first appearance.
  void AppendName(std::string* out, std::string_view name);
  // The channel ids to write by rank (any order, repeats allowed).
  void SetChannels(std::vector<int64_t> ids);
  // The rank (from 1) of `id` among those set; an id not set is written as it is.
  int64_t ChannelId(int64_t id) const;

 private:
  std::vector<int64_t> channels_;  // sorted, distinct
};

// Installs `names` as this thread's canonical-names mode until destroyed (then the previous
// mode, usually none, is back). Not copyable.
class ScopedCanonicalNames {
 public:
  explicit ScopedCanonicalNames(CanonicalNames* names);
  ~ScopedCanonicalNames();
  ScopedCanonicalNames(const ScopedCanonicalNames&) = delete;
  ScopedCanonicalNames& operator=(const ScopedCanonicalNames&) = delete;

 private:
  CanonicalNames* previous_;
};

}  // namespace weave
