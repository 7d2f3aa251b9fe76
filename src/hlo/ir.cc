// Mutation API of the HLO IR: literals and instructions (computations in computation.cc, modules in
// module.cc; printing lives in printer.cc, parsing in parser.cc).
#include "hlo/ir.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "hlo/status_macros.h"

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

std::unique_ptr<HloInstruction> HloInstruction::Create(HloOpcode op, Shape shape,
                                                       std::vector<HloInstruction*> operands) {
  auto instr = std::unique_ptr<HloInstruction>(new HloInstruction());
  instr->opcode_ = op;
  instr->shape_ = std::move(shape);
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
        RETURN_IF_ERROR(user->ReplaceOperandWith(k, v));
      }
    }
    user->ReplaceControlPredecessor(this, v);
  }
  return absl::OkStatus();
}

absl::Status HloInstruction::ReplaceAllUsesWith(HloInstruction* v) {
  if (v == this) return absl::InvalidArgumentError("cannot replace an instruction by itself");
  std::vector<HloInstruction*> users = users_;
  RETURN_IF_ERROR(ReplaceUsesWith(users, v));
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

void HloInstruction::SetRawAttribute(std::string_view key, std::string value) {
  RawAttributes* attrs = mutable_raw_attributes();
  for (auto& [k, v] : *attrs) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  attrs->emplace_back(std::string(key), std::move(value));
}

int64_t HloInstruction::OperandIndex(const HloInstruction* v) const {
  for (size_t i = 0; i < operands_.size(); ++i) {
    if (operands_[i] == v) return static_cast<int64_t>(i);
  }
  return -1;
}

std::unique_ptr<HloInstruction> HloInstruction::CloneWithNewOperands(
    Shape shape, std::vector<HloInstruction*> operands, std::string_view name_suffix) const {
  // The copy has no edges (EdgeList): it is in no computation yet, and nobody points at it.
  auto c = std::unique_ptr<HloInstruction>(new HloInstruction(*this));
  c->shape_ = std::move(shape);
  c->operands_ = std::move(operands);
  c->parent_ = nullptr;
  c->slot_ = -1;
  c->unique_id_ = g_next_instruction_id++;
  if (!name_suffix.empty()) c->name_ = name_ + std::string(name_suffix);
  return c;
}

}  // namespace weave
