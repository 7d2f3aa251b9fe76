// InstructionIndex: dense slots 0..n-1 for a set of instructions (say a computation's post
// order), looked up by instruction in O(1).
//
// Instructions made together have nearby unique ids (one process-wide counter; a module's
// parsed instructions are consecutive), so the index is usually a table over the set's id range,
// one int32 per id: a load, no hashing. Where the ids are spread out (over 4x the set's size: a
// module cloned and extended many times in a long-running process, whose new instructions take
// ids far from its parsed ones), a hash map is used instead, so that the memory stays linear in
// the set, not in the ids the process has made.
//
// Slot() of an instruction not in the set is -1 (the table's slot is checked against the
// instruction, so an instruction of another module with the same id is not taken for the one in
// the set; a set holding two instructions with one id is indexed by the hash map).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "hlo/ir.h"

namespace weave {

class InstructionIndex {
 public:
  InstructionIndex() = default;
  // Slot k is instrs[k]. Instructions listed twice keep the first slot.
  explicit InstructionIndex(const std::vector<HloInstruction*>& instrs) { Reset(instrs); }

  void Reset(const std::vector<HloInstruction*>& instrs) {
    instrs_.assign(instrs.begin(), instrs.end());
    table_.clear();
    map_.clear();
    base_ = 0;
    if (instrs.empty()) return;
    int64_t lo = instrs[0]->unique_id(), hi = lo;
    for (const HloInstruction* h : instrs) {
      lo = std::min(lo, h->unique_id());
      hi = std::max(hi, h->unique_id());
    }
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (lo >= 0 && span <= 4 * static_cast<uint64_t>(instrs.size()) + 64) {
      base_ = lo;
      table_.assign(static_cast<size_t>(span), -1);
      bool clash = false;
      for (size_t k = 0; k < instrs.size() && !clash; ++k) {
        int32_t& entry = table_[static_cast<size_t>(instrs[k]->unique_id() - lo)];
        if (entry < 0) {
          entry = static_cast<int32_t>(k);
        } else {
          // Two instructions with one id (copies of one module's instructions): the map.
          clash = instrs_[static_cast<size_t>(entry)] != instrs[k];
        }
      }
      if (!clash) return;
      table_.clear();
    }
    map_.reserve(instrs.size());
    for (size_t k = 0; k < instrs.size(); ++k) map_.try_emplace(instrs[k], static_cast<int32_t>(k));
  }

  // The slot of `h`, or -1 if `h` is not in the set.
  int32_t Slot(const HloInstruction* h) const {
    if (h == nullptr) return -1;
    if (!table_.empty()) {
      const int64_t k = h->unique_id() - base_;
      if (k < 0 || k >= static_cast<int64_t>(table_.size())) return -1;
      const int32_t slot = table_[static_cast<size_t>(k)];
      return slot >= 0 && instrs_[static_cast<size_t>(slot)] == h ? slot : -1;
    }
    auto it = map_.find(h);
    return it == map_.end() ? -1 : it->second;
  }

  size_t size() const { return instrs_.size(); }
  HloInstruction* at(size_t slot) const { return instrs_[slot]; }

 private:
  std::vector<HloInstruction*> instrs_;
  int64_t base_ = 0;
  std::vector<int32_t> table_;
  absl::flat_hash_map<const HloInstruction*, int32_t> map_;
};

}  // namespace weave
