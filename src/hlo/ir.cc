// Mutation API of the HLO IR (printing lives in printer.cc, parsing in parser.cc).
#include "hlo/ir.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weave {
namespace {

std::atomic<int64_t> g_next_instruction_id{0};

bool UsesFloatStorage(PrimitiveType t) { return IsFloatingPoint(t) || IsComplex(t); }

}  // namespace

// ---------------------------------------------------------------- Literal

Literal Literal::Scalar(PrimitiveType t, double v) {
  Literal l;
  l.shape = Shape::Scalar(t);
  if (UsesFloatStorage(t)) {
    l.f.push_back(v);
  } else {
    l.i.push_back(static_cast<int64_t>(v));
  }
  return l;
}

Literal Literal::ScalarInt(PrimitiveType t, int64_t v) {
  Literal l;
  l.shape = Shape::Scalar(t);
  if (UsesFloatStorage(t)) {
    l.f.push_back(static_cast<double>(v));
  } else {
    l.i.push_back(v);
  }
  return l;
}

Literal Literal::Vector(PrimitiveType t, const std::vector<int64_t>& values) {
  Literal l;
  l.shape = Shape(t, {static_cast<int64_t>(values.size())});
  if (UsesFloatStorage(t)) {
    for (int64_t v : values) l.f.push_back(static_cast<double>(v));
  } else {
    l.i = values;
  }
  return l;
}

double Literal::GetAsDouble(int64_t index) const {
  if (!f.empty()) return f.at(static_cast<size_t>(index));
  if (shape.element_type == PrimitiveType::U64) {
    return static_cast<double>(static_cast<uint64_t>(i.at(static_cast<size_t>(index))));
  }
  return static_cast<double>(i.at(static_cast<size_t>(index)));
}

int64_t Literal::GetAsInt(int64_t index) const {
  if (!i.empty()) return i.at(static_cast<size_t>(index));
  double v = f.at(static_cast<size_t>(index));
  if (std::isnan(v)) return 0;
  return static_cast<int64_t>(v);
}

std::string_view ComparisonDirectionString(ComparisonDirection d) {
  switch (d) {
    case ComparisonDirection::kEq: return "EQ";
    case ComparisonDirection::kNe: return "NE";
    case ComparisonDirection::kLt: return "LT";
    case ComparisonDirection::kLe: return "LE";
    case ComparisonDirection::kGt: return "GT";
    case ComparisonDirection::kGe: return "GE";
  }
  return "EQ";
}

// ---------------------------------------------------------------- HloInstruction

std::unique_ptr<HloInstruction> HloInstruction::Create(HloOpcode op, const Shape& shape,
                                                       std::vector<HloInstruction*> operands) {
  auto instr = std::unique_ptr<HloInstruction>(new HloInstruction());
  instr->opcode_ = op;
  instr->shape_ = shape;
  instr->operands_ = std::move(operands);
  instr->unique_id_ = g_next_instruction_id++;
  return instr;
}

bool HloInstruction::HasSideEffect() const {
  switch (opcode_) {
    case HloOpcode::kSend:
    case HloOpcode::kSendDone:
    case HloOpcode::kRecv:
    case HloOpcode::kRecvDone:
    case HloOpcode::kInfeed:
    case HloOpcode::kOutfeed:
    case HloOpcode::kRng:
    case HloOpcode::kRngGetAndUpdateState:
    case HloOpcode::kAfterAll:
    case HloOpcode::kParameter:
      return true;
    case HloOpcode::kCustomCall: {
      const std::string* v = GetRawAttribute("custom_call_has_side_effect");
      return v != nullptr && *v == "true";
    }
    default:
      return false;
  }
}

bool HloInstruction::IsRemovableWhenUnused() const {
  switch (opcode_) {
    case HloOpcode::kCustomCall:
    case HloOpcode::kWhile:
    case HloOpcode::kConditional:
    case HloOpcode::kCall:
    case HloOpcode::kRngBitGenerator:
    case HloOpcode::kAddDependency:
    case HloOpcode::kOptimizationBarrier:
      return false;
    default:
      return !HasSideEffect();
  }
}

bool HloInstruction::IsRoot() const { return parent_ != nullptr && parent_->root() == this; }

void HloInstruction::AddUser(HloInstruction* u) {
  if (std::find(users_.begin(), users_.end(), u) == users_.end()) users_.push_back(u);
}

void HloInstruction::RemoveUser(HloInstruction* u) {
  auto it = std::find(users_.begin(), users_.end(), u);
  if (it != users_.end()) users_.erase(it);
}

namespace {
void EraseAll(std::vector<HloInstruction*>* v, const HloInstruction* x) {
  v->erase(std::remove(v->begin(), v->end(), x), v->end());
}

// A removed parameter leaves its number's slot empty; trailing empty slots go.
void ForgetParameter(std::vector<HloInstruction*>* params, const HloInstruction* p) {
  for (auto& q : *params) {
    if (q == p) q = nullptr;
  }
  while (!params->empty() && params->back() == nullptr) params->pop_back();
}
}  // namespace

void HloInstruction::Invalidate(HloComputation* c) {
  if (c != nullptr) c->InvalidatePostOrder();
}

void HloInstruction::AddControlDependencyTo(HloInstruction* successor) {
  Invalidate(parent_);
  Invalidate(successor->parent_);
  successor->control_preds_.push_back(this);
  control_succs_.push_back(successor);
}

void HloInstruction::RemoveControlDependencyTo(HloInstruction* successor) {
  Invalidate(parent_);
  Invalidate(successor->parent_);
  EraseAll(&successor->control_preds_, this);
  EraseAll(&control_succs_, successor);
}

void HloInstruction::DropAllControlDeps() {
  if (control_preds_.empty() && control_succs_.empty()) return;
  Invalidate(parent_);
  for (HloInstruction* p : control_preds_) {
    if (p != this) EraseAll(&p->control_succs_, this);
  }
  for (HloInstruction* s : control_succs_) {
    Invalidate(s->parent_);
    if (s != this) EraseAll(&s->control_preds_, this);
  }
  control_preds_.clear();
  control_succs_.clear();
}

void HloInstruction::ReplaceControlPredecessor(HloInstruction* old, HloInstruction* v) {
  if (old == v) return;
  bool found = false;
  for (HloInstruction*& p : control_preds_) {
    if (p != old) continue;
    Invalidate(parent_);
    p = v;
    v->control_succs_.push_back(this);
    found = true;
  }
  if (found) EraseAll(&old->control_succs_, this);
}

absl::Status HloInstruction::ReplaceOperandWith(int64_t i, HloInstruction* v) {
  if (i < 0 || i >= operand_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("operand index ", i, " out of range for ", name_));
  }
  if (v == nullptr) return absl::InvalidArgumentError("null replacement operand");
  HloInstruction* old = operands_[static_cast<size_t>(i)];
  if (old == v) return absl::OkStatus();
  Invalidate(parent_);
  operands_[static_cast<size_t>(i)] = v;
  if (parent_ != nullptr) {
    if (std::find(operands_.begin(), operands_.end(), old) == operands_.end()) {
      old->RemoveUser(this);
    }
    v->AddUser(this);
  }
  return absl::OkStatus();
}

void HloInstruction::AppendOperand(HloInstruction* v) {
  Invalidate(parent_);
  operands_.push_back(v);
  if (parent_ != nullptr) v->AddUser(this);
}

absl::Status HloInstruction::ReplaceUsesWith(const std::vector<HloInstruction*>& users,
                                             HloInstruction* v) {
  if (v == this) return absl::InvalidArgumentError("cannot replace an instruction by itself");
  for (HloInstruction* user : users) {
    for (int64_t k = 0; k < user->operand_count(); ++k) {
      if (user->operands_[static_cast<size_t>(k)] == this) {
        absl::Status s = user->ReplaceOperandWith(k, v);
        if (!s.ok()) return s;
      }
    }
    user->ReplaceControlPredecessor(this, v);
  }
  return absl::OkStatus();
}

absl::Status HloInstruction::ReplaceAllUsesWith(HloInstruction* v) {
  if (v == this) return absl::InvalidArgumentError("cannot replace an instruction by itself");
  std::vector<HloInstruction*> users = users_;
  absl::Status s = ReplaceUsesWith(users, v);
  if (!s.ok()) return s;
  if (parent_ != nullptr && parent_->root() == this) parent_->set_root(v);
  return absl::OkStatus();
}

std::optional<std::string> HloInstruction::GetFrontendAttribute(std::string_view key) const {
  auto it = frontend_attributes.find(std::string(key));
  if (it == frontend_attributes.end()) return std::nullopt;
  const std::string& v = it->second;
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

void HloInstruction::SetFrontendAttribute(const std::string& key,
                                          const std::string& unquoted_value) {
  frontend_attributes[key] = absl::StrCat("\"", unquoted_value, "\"");
}

const std::string* HloInstruction::GetRawAttribute(std::string_view key) const {
  for (const auto& [k, v] : raw_attributes()) {
    if (k == key) return &v;
  }
  return nullptr;
}

int64_t HloInstruction::OperandIndex(const HloInstruction* v) const {
  for (size_t i = 0; i < operands_.size(); ++i) {
    if (operands_[i] == v) return static_cast<int64_t>(i);
  }
  return -1;
}

std::unique_ptr<HloInstruction> HloInstruction::CloneWithNewOperands(
    const Shape& shape, std::vector<HloInstruction*> operands, std::string_view name_suffix) const {
  auto c = std::unique_ptr<HloInstruction>(new HloInstruction(*this));
  c->shape_ = shape;
  c->operands_ = std::move(operands);
  c->users_.clear();
  c->parent_ = nullptr;
  c->control_preds_.clear();  // the copy is in no computation yet: nobody points at it
  c->control_succs_.clear();
  c->slot_ = -1;
  c->unique_id_ = g_next_instruction_id++;
  if (!name_suffix.empty()) c->name_ = name_ + std::string(name_suffix);
  return c;
}

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

HloInstruction* HloComputation::AddInstruction(HloOpcode op, const Shape& shape,
                                               std::vector<HloInstruction*> operands,
                                               std::string_view name) {
  auto instr = HloInstruction::Create(op, shape, std::move(operands));
  instr->name_ = std::string(name);
  return AddInstruction(std::move(instr));
}

HloInstruction* HloComputation::AddParameter(const Shape& shape, std::string_view name) {
  auto instr = HloInstruction::Create(HloOpcode::kParameter, shape);
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
  absl::Status s = old->ReplaceAllUsesWith(replacement);
  if (!s.ok()) return s;
  // Remove `old` and whatever became dead because of it (not side-effecting instructions).
  return RemoveUnusedChains({old}, [](const HloInstruction* i) { return !i->HasSideEffect(); });
}

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

void HloComputation::set_name(std::string n) {
  if (parent_ != nullptr) {
    parent_->NoteComputationName(name_, -1);
    parent_->NoteComputationName(n, +1);
  }
  name_ = std::move(n);
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
      auto ni = std::unique_ptr<HloInstruction>(new HloInstruction(*i));
      ni->users_.clear();
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
    for (const auto& ni : raw->instrs_) {
      for (auto& op : ni->operands_) {
        op = imap.at(op);
        op->AddUser(ni.get());
      }
      for (auto& p : ni->control_preds_) p = imap.at(p);
      for (auto& q : ni->control_succs_) q = imap.at(q);
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
