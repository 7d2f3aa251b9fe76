// HloComputation's mutation API (hlo/ir.h): adding, removing and ordering instructions.
#include "hlo/ir.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

// A removed parameter leaves its number's slot empty; trailing empty slots go.
void ForgetParameter(std::vector<HloInstruction*>* params, const HloInstruction* p) {
  for (auto& q : *params) {
    if (q == p) q = nullptr;
  }
  while (!params->empty() && params->back() == nullptr) params->pop_back();
}

}  // namespace

// ---------------------------------------------------------------- HloComputation

bool HloComputation::IsEntry() const { return parent_ != nullptr && parent_->entry() == this; }

std::vector<HloInstruction*> HloComputation::instructions() const {
  std::vector<HloInstruction*> out;
  out.reserve(instrs_.size());
  for (const auto& i : instrs_) {
    if (i != nullptr) out.push_back(i.get());
  }
  return out;
}

bool HloComputation::Holds(const HloInstruction* h) const {
  if (h == nullptr || h->parent_ != this || h->slot_ < 0) return false;
  const size_t slot = static_cast<size_t>(h->slot_);
  return slot < instrs_.size() && instrs_[slot].get() == h;
}

std::vector<HloInstruction*> HloComputation::MakeInstructionPostOrder() const {
  if (post_order_valid_) return post_order_;
  std::vector<HloInstruction*> order;
  order.reserve(instrs_.size());
  // An instruction is marked when it is first pushed (on the stack or done). Marks are indexed
  // by the instruction's slot in instrs_ (every instruction of this computation has one), so a
  // visit costs one array access per edge and no hashing.
  std::vector<uint8_t> visited(instrs_.size(), 0);
  auto mark = [&visited](const HloInstruction* h) {
    uint8_t& v = visited[static_cast<size_t>(h->slot_)];
    const bool fresh = v == 0;
    v = 1;
    return fresh;
  };
  std::vector<std::pair<HloInstruction*, size_t>> stack;
  for (const auto& root : instrs_) {
    HloInstruction* start = root.get();
    if (start == nullptr || !mark(start)) continue;
    stack.push_back({start, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      const size_t n_ops = node->operands_.size();
      const size_t n_all = n_ops + node->control_preds_.size();
      if (next < n_all) {
        HloInstruction* dep = next < n_ops ? node->operands_[next]
                                           : node->control_preds_[next - n_ops];
        ++next;
        if (dep->parent_ == this && mark(dep)) stack.push_back({dep, 0});
        continue;
      }
      order.push_back(node);
      stack.pop_back();
    }
  }
  post_order_ = order;
  post_order_valid_ = true;
  return order;
}

HloInstruction* HloComputation::GetInstruction(std::string_view name) const {
  for (const auto& i : instrs_) {
    if (i != nullptr && i->name() == name) return i.get();
  }
  return nullptr;
}

HloInstruction* HloComputation::AddInstruction(std::unique_ptr<HloInstruction> instr) {
  HloInstruction* raw = instr.get();
  raw->parent_ = this;
  if (raw->name_.empty()) raw->name_ = std::string(HloOpcodeString(raw->opcode_));
  if (parent_ != nullptr) parent_->UniquifyName(&raw->name_);
  // A new instruction is nobody's user yet: only a repeated operand (multiply(x, x)) can
  // already hold it, as its last user. This keeps building a value with many users linear.
  for (HloInstruction* op : raw->operands_) {
    if (op->users_.empty() || op->users_.back() != raw) op->users_.push_back(raw);
  }
  if (raw->opcode_ == HloOpcode::kParameter) {
    if (raw->parameter_number < 0) raw->parameter_number = num_parameters();
    size_t n = static_cast<size_t>(raw->parameter_number);
    if (params_.size() <= n) params_.resize(n + 1, nullptr);
    params_[n] = raw;
  }
  raw->slot_ = static_cast<int64_t>(instrs_.size());
  instrs_.push_back(std::move(instr));
  // Every operand of the new instruction in this computation is placed already: when nothing
  // in it reads the new one yet, a fresh walk would put it last. A user (or control successor)
  // added before it would make the walk place it earlier: then the kept order is dropped.
  if (post_order_valid_) {
    if (raw->users_.empty() && raw->control_succs_.empty()) {
      post_order_.push_back(raw);
    } else {
      InvalidatePostOrder();
    }
  }
  ++live_count_;
  return raw;
}

HloInstruction* HloComputation::AddInstruction(HloOpcode op, Shape shape,
                                               std::vector<HloInstruction*> operands,
                                               std::string_view name) {
  auto instr = HloInstruction::Create(op, std::move(shape), std::move(operands));
  instr->name_ = std::string(name);
  return AddInstruction(std::move(instr));
}

HloInstruction* HloComputation::AddParameter(Shape shape, std::string_view name) {
  auto instr = HloInstruction::Create(HloOpcode::kParameter, std::move(shape));
  instr->parameter_number = num_parameters();
  instr->name_ = std::string(name);
  return AddInstruction(std::move(instr));
}

absl::Status HloComputation::RemoveInstruction(HloInstruction* instr) {
  if (instr == nullptr || instr->parent_ != this) {
    return absl::InvalidArgumentError("instruction is not in this computation");
  }
  if (!instr->users_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove ", instr->name(), ": it still has users"));
  }
  if (instr == root_) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot remove ", instr->name(), ": it is the root of ", name_));
  }
  for (HloInstruction* op : instr->operands_) op->RemoveUser(instr);
  instr->DropAllControlDeps();
  if (instr->opcode_ == HloOpcode::kParameter) {
    ForgetParameter(&params_, instr);
  }
  FreeSlot(instr);
  return absl::OkStatus();
}

void HloComputation::FreeSlot(HloInstruction* instr) {
  InvalidatePostOrder();
  instrs_[static_cast<size_t>(instr->slot_)].reset();
  --live_count_;
  const int64_t holes = static_cast<int64_t>(instrs_.size()) - live_count_;
  if (holes > 64 && holes > live_count_) Compact();
}

void HloComputation::Compact() {
  size_t out = 0;
  for (size_t k = 0; k < instrs_.size(); ++k) {
    if (instrs_[k] == nullptr) continue;
    instrs_[k]->slot_ = static_cast<int64_t>(out);
    if (out != k) instrs_[out] = std::move(instrs_[k]);
    ++out;
  }
  instrs_.resize(out);
}

bool HloComputation::RemoveDeadCode() {
  // Mark live instructions from the root and side-effecting instructions. Marks are indexed by
  // the instruction's slot in instrs_ (as in MakeInstructionPostOrder): a sweep over a large
  // computation costs an array access per edge, not a hash-set probe.
  std::vector<uint8_t> live(instrs_.size(), 0);
  int64_t live_marked = 0;
  std::vector<HloInstruction*> work;
  auto mark = [&](HloInstruction* i) {
    if (i == nullptr || i->parent_ != this) return;
    uint8_t& m = live[static_cast<size_t>(i->slot_)];
    if (m != 0) return;
    m = 1;
    ++live_marked;
    work.push_back(i);
  };
  auto is_live = [&live](const HloInstruction* i) {
    return live[static_cast<size_t>(i->slot_)] != 0;
  };
  mark(root_);
  for (const auto& i : instrs_) {
    if (i != nullptr && i->HasSideEffect()) mark(i.get());
  }
  while (!work.empty()) {
    HloInstruction* i = work.back();
    work.pop_back();
    for (HloInstruction* op : i->operands_) mark(op);
    for (HloInstruction* op : i->control_preds_) mark(op);
  }
  if (live_marked == live_count_) return false;
  InvalidatePostOrder();
  // Drop dead instructions: first detach them from their operands and control edges, then erase.
  for (const auto& i : instrs_) {
    if (i == nullptr || is_live(i.get())) continue;
    for (HloInstruction* op : i->operands_) op->RemoveUser(i.get());
    i->DropAllControlDeps();
  }
  for (auto& i : instrs_) {
    if (i != nullptr && !is_live(i.get())) {
      i.reset();
      --live_count_;
    }
  }
  Compact();
  return true;
}

absl::Status HloComputation::RemoveUnusedChains(
    const std::vector<HloInstruction*>& seeds,
    const std::function<bool(const HloInstruction*)>& removable) {
  // `removed` is checked before anything is dereferenced: an instruction can be reached again
  // after it was taken out (an operand that appears twice, as in multiply(x, x), or a seed that
  // an earlier chain removed). Seeds are taken in the order given. Each removed instruction
  // leaves its operands' user lists and its control edges at once (so that the chain sees who
  // lost its last user, and `removable` sees each instruction as one removal at a time would
  // leave it); the instructions are freed at the end: the cost is the chains, not the
  // computation.
  absl::flat_hash_set<const HloInstruction*> removed;
  std::vector<HloInstruction*> work(seeds.rbegin(), seeds.rend());
  while (!work.empty()) {
    HloInstruction* i = work.back();
    work.pop_back();
    if (removed.count(i)) continue;
    if (i->parent_ != this || !i->users_.empty() || i == root_) continue;
    if (!removable(i)) continue;
    for (HloInstruction* op : i->operands_) op->RemoveUser(i);
    i->DropAllControlDeps();
    if (i->opcode_ == HloOpcode::kParameter) {
      ForgetParameter(&params_, i);
    }
    removed.insert(i);
    for (HloInstruction* op : i->operands_) work.push_back(op);
  }
  for (const HloInstruction* r : removed) FreeSlot(const_cast<HloInstruction*>(r));
  return absl::OkStatus();
}

absl::Status HloComputation::ReplaceInstruction(HloInstruction* old, HloInstruction* replacement) {
  RETURN_IF_ERROR(old->ReplaceAllUsesWith(replacement));
  // Remove `old` and whatever became dead because of it (not side-effecting instructions).
  return RemoveUnusedChains({old}, [](const HloInstruction* i) { return !i->HasSideEffect(); });
}

void HloComputation::set_name(std::string n) {
  if (parent_ != nullptr) {
    parent_->NoteComputationName(name_, -1);
    parent_->NoteComputationName(n, +1);
  }
  name_ = std::move(n);
}

void HloComputation::set_root(HloInstruction* r) {
  if (root_ != nullptr && r != nullptr && root_ != r && root_->sharding && !r->sharding &&
      root_->opcode() != HloOpcode::kOutfeed && root_->shape().Compatible(r->shape())) {
    r->sharding = root_->sharding;
  }
  root_ = r;
}

}  // namespace weave
