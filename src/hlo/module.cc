// HloModule's mutation API (hlo/ir.h): computations, names, channel ids, cloning.
#include "hlo/ir.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weave {

// ---------------------------------------------------------------- HloModule

std::vector<HloComputation*> HloModule::computations() const {
  std::vector<HloComputation*> out;
  for (const auto& c : comps_) out.push_back(c.get());
  return out;
}

std::vector<HloComputation*> HloModule::MakeComputationPostOrder() const {
  std::vector<HloComputation*> order;
  absl::flat_hash_map<const HloComputation*, int> state;
  std::vector<std::pair<HloComputation*, std::vector<HloComputation*>>> stack;
  auto callees = [](HloComputation* c) {
    std::vector<HloComputation*> out;
    for (const auto& i : c->instrs_) {
      if (i == nullptr) continue;
      for (HloComputation* cc : i->called_) out.push_back(cc);
    }
    std::reverse(out.begin(), out.end());  // popped from the back: first callee first
    return out;
  };
  auto visit = [&](HloComputation* start) {
    if (state[start] != 0) return;
    state[start] = 1;
    stack.push_back({start, callees(start)});
    while (!stack.empty()) {
      auto& [c, pending] = stack.back();
      if (!pending.empty()) {
        HloComputation* next = pending.back();
        pending.pop_back();
        if (next != nullptr && state[next] == 0) {
          state[next] = 1;
          stack.push_back({next, callees(next)});
        }
        continue;
      }
      state[c] = 2;
      order.push_back(c);
      stack.pop_back();
    }
  };
  for (const auto& c : comps_) {
    if (c.get() != entry_) visit(c.get());
  }
  if (entry_ != nullptr) visit(entry_);
  // Keep the entry last.
  if (entry_ != nullptr) {
    auto it = std::find(order.begin(), order.end(), entry_);
    if (it != order.end() && it + 1 != order.end()) {
      order.erase(it);
      order.push_back(entry_);
    }
  }
  return order;
}

HloComputation* HloModule::GetComputation(std::string_view name) const {
  for (const auto& c : comps_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

void HloModule::NoteComputationName(const std::string& name, int64_t delta) {
  auto it = comp_names_.find(name);
  if (it == comp_names_.end()) {
    if (delta > 0) comp_names_.emplace(name, delta);
    return;
  }
  it->second += delta;
  if (it->second > 0) return;
  comp_names_.erase(it);
  // A freed `base.k` is again the least free suffix of `base` if it is below the hint.
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 >= name.size() || name[dot + 1] == '0') return;
  int64_t k = 0;
  for (size_t p = dot + 1; p < name.size(); ++p) {
    if (!std::isdigit(static_cast<unsigned char>(name[p])) || k > (int64_t{1} << 40)) return;
    k = k * 10 + (name[p] - '0');
  }
  auto hint = comp_suffix_.find(absl::string_view(name.data(), dot));
  if (hint != comp_suffix_.end() && k < hint->second) hint->second = k;
}

HloComputation* HloModule::AddComputation(std::unique_ptr<HloComputation> c) {
  HloComputation* raw = c.get();
  std::string base = raw->name_.empty() ? std::string("computation") : raw->name_;
  // The name index answers each probe in O(1) (it was a scan of every computation per add).
  std::string name = base;
  if (comp_names_.contains(name)) {
    int64_t& k = comp_suffix_.try_emplace(base, 1).first->second;
    do {
      name = absl::StrCat(base, ".", k++);
    } while (comp_names_.contains(name));
  }
  raw->name_ = name;
  raw->parent_ = this;
  NoteComputationName(name, +1);
  for (const auto& i : raw->instrs_) {
    if (i != nullptr) UniquifyName(&i->name_);
  }
  comps_.push_back(std::move(c));
  return raw;
}

HloComputation* HloModule::CloneComputation(const HloComputation* c, std::string_view name_hint) {
  auto clone = std::make_unique<HloComputation>(std::string(name_hint));
  HloComputation* raw = AddComputation(std::move(clone));
  absl::flat_hash_map<const HloInstruction*, HloInstruction*> map;
  for (HloInstruction* i : c->MakeInstructionPostOrder()) {
    std::vector<HloInstruction*> ops;
    for (HloInstruction* op : i->operands()) ops.push_back(map.at(op));
    auto ni = i->CloneWithNewOperands(i->shape(), std::move(ops));
    HloInstruction* added = raw->AddInstruction(std::move(ni));
    map[i] = added;
  }
  for (HloInstruction* i : c->instructions()) {
    for (HloInstruction* p : i->control_preds_) map.at(p)->AddControlDependencyTo(map.at(i));
  }
  if (c->root() != nullptr) raw->set_root(map.at(c->root()));
  raw->execution_thread = c->execution_thread;
  return raw;
}

bool HloModule::RemoveUnusedComputations() {
  if (entry_ == nullptr) return false;
  absl::flat_hash_set<const HloComputation*> reachable;
  std::vector<HloComputation*> work = {entry_};
  reachable.insert(entry_);
  while (!work.empty()) {
    HloComputation* c = work.back();
    work.pop_back();
    for (const auto& i : c->instrs_) {
      if (i == nullptr) continue;
      for (HloComputation* cc : i->called_) {
        if (cc != nullptr && reachable.insert(cc).second) work.push_back(cc);
      }
    }
  }
  size_t before = comps_.size();
  for (const auto& c : comps_) {
    if (!reachable.count(c.get())) NoteComputationName(c->name_, -1);
  }
  comps_.erase(std::remove_if(comps_.begin(), comps_.end(),
                              [&](const auto& c) { return !reachable.count(c.get()); }),
               comps_.end());
  return comps_.size() != before;
}

absl::Status HloModule::RemoveComputation(HloComputation* c) {
  if (c == entry_) return absl::FailedPreconditionError("cannot remove the entry computation");
  auto it = std::find_if(comps_.begin(), comps_.end(),
                         [&](const auto& p) { return p.get() == c; });
  if (it == comps_.end()) return absl::NotFoundError("computation not in module");
  NoteComputationName(c->name_, -1);
  comps_.erase(it);
  return absl::OkStatus();
}

void HloModule::UpdateEntryComputationLayout() {
  if (entry_ == nullptr) return;
  for (auto& [k, v] : header_attributes) {
    if (k != "entry_computation_layout") continue;
    std::string text = "{(";
    for (int64_t p = 0; p < entry_->num_parameters(); ++p) {
      if (p > 0) text += ", ";
      if (p > 0 && p % 5 == 0) absl::StrAppend(&text, "/*index=", p, "*/");
      const HloInstruction* param = entry_->parameter(p);
      if (param != nullptr) text += param->shape().ToString(true);
    }
    text += ")->";
    if (entry_->root() != nullptr) text += entry_->root()->shape().ToString(true);
    text += "}";
    v = text;
  }
}

std::string HloModule::UniqueName(std::string_view base) {
  std::string name(base);
  UniquifyName(&name);
  return name;
}

void HloModule::UniquifyName(std::string* name) {
  // One probe when the name is free (the usual case); then one per suffix tried, each base
  // remembering where its suffixes stopped, so names are made in time linear overall.
  auto [it, inserted] = names_.try_emplace(*name, 1);
  if (inserted) return;
  // base + "." once; each probe rewrites only the suffix. `it` stays valid: a probe that finds
  // the name taken inserts nothing.
  name->push_back('.');
  const size_t stem = name->size();
  while (true) {
    name->resize(stem);
    absl::StrAppend(name, it->second++);
    if (names_.try_emplace(*name, 1).second) return;
  }
}

void HloModule::ReserveName(const std::string& name) { names_.emplace(name, 1); }

void HloModule::ReserveNames(size_t more) { names_.reserve(names_.size() + more); }

int64_t HloModule::NextChannelId() const {
  int64_t next = 1;
  for (const auto& c : comps_) {
    for (const auto& i : c->instrs_) {
      if (i != nullptr && i->channel_id) next = std::max(next, *i->channel_id + 1);
    }
  }
  return next;
}

std::unique_ptr<HloModule> HloModule::Clone() const {
  auto m = std::make_unique<HloModule>(name_);
  m->num_partitions = num_partitions;
  m->replica_count = replica_count;
  m->has_num_partitions = has_num_partitions;
  m->is_scheduled = is_scheduled;
  m->header_attributes = header_attributes;
  m->stack_tables = stack_tables;
  m->names_ = names_;
  m->comp_names_ = comp_names_;
  m->comp_suffix_ = comp_suffix_;
  absl::flat_hash_map<const HloComputation*, HloComputation*> cmap;
  absl::flat_hash_map<const HloInstruction*, HloInstruction*> imap;
  for (HloComputation* c : MakeComputationPostOrder()) {
    auto nc = std::make_unique<HloComputation>(c->name());
    HloComputation* raw = nc.get();
    raw->parent_ = m.get();
    raw->execution_thread = c->execution_thread;
    m->comps_.push_back(std::move(nc));
    cmap[c] = raw;
    // Keep the original instruction order (and exact names).
    for (const auto& i : c->instrs_) {
      if (i == nullptr) continue;
      // The copy's edge lists start empty (EdgeList); they are filled below, mapped.
      auto ni = std::unique_ptr<HloInstruction>(new HloInstruction(*i));
      ni->parent_ = raw;
      ni->slot_ = static_cast<int64_t>(raw->instrs_.size());
      ++raw->live_count_;
      imap[i.get()] = ni.get();
      if (ni->opcode_ == HloOpcode::kParameter) {
        size_t n = static_cast<size_t>(ni->parameter_number);
        if (raw->params_.size() <= n) raw->params_.resize(n + 1, nullptr);
        raw->params_[n] = ni.get();
      }
      raw->instrs_.push_back(std::move(ni));
    }
    size_t k = 0;  // raw->instrs_[k] is the copy of the k-th live instruction of c
    for (const auto& i : c->instrs_) {
      if (i == nullptr) continue;
      HloInstruction* ni = raw->instrs_[k++].get();
      ni->operands_.reserve(i->operands_.size());
      for (HloInstruction* op : i->operands_) {
        HloInstruction* mapped = imap.at(op);
        ni->operands_.push_back(mapped);
        mapped->AddUser(ni);
      }
      for (HloInstruction* p : i->control_preds_) ni->control_preds_.push_back(imap.at(p));
      for (HloInstruction* q : i->control_succs_) ni->control_succs_.push_back(imap.at(q));
      for (auto& cc : ni->called_) {
        if (cc != nullptr) cc = cmap.at(cc);
      }
    }
    if (c->root_ != nullptr) raw->root_ = imap.at(c->root_);
  }
  if (entry_ != nullptr) m->entry_ = cmap.at(entry_);
  return m;
}

}  // namespace weave
