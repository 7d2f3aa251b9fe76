#include "analysis/pattern_matcher.h"

#include <utility>

#include "analysis/dequantize.h"

namespace weave::m {

bool Pattern::Match(HloInstruction* instr) const {
  if (instr == nullptr) return false;
  if (node_) {
    for (const auto& check : node_->checks) {
      if (!check(instr)) return false;
    }
    for (const auto& cap : node_->captures) cap(instr);
  }
  return true;
}

Pattern Pattern::With(std::function<bool(HloInstruction*)> check) const {
  auto n = node_ ? std::make_shared<Node>(*node_) : std::make_shared<Node>();
  n->checks.push_back(std::move(check));
  Pattern p;
  p.node_ = std::move(n);
  return p;
}

Pattern Pattern::Capture(HloInstruction** cap) const {
  auto n = node_ ? std::make_shared<Node>(*node_) : std::make_shared<Node>();
  n->captures.push_back([cap](HloInstruction* h) { *cap = h; });
  Pattern p;
  p.node_ = std::move(n);
  return p;
}

Pattern Pattern::Capture(const HloInstruction** cap) const {
  auto n = node_ ? std::make_shared<Node>(*node_) : std::make_shared<Node>();
  n->captures.push_back([cap](HloInstruction* h) { *cap = h; });
  Pattern p;
  p.node_ = std::move(n);
  return p;
}

Pattern Pattern::WithOpcode(HloOpcode op) const {
  return With([op](HloInstruction* h) { return h->opcode() == op; });
}

Pattern Pattern::WithOperands(std::vector<Pattern> operands) const {
  return With([ops = std::move(operands)](HloInstruction* h) {
    if (h->operand_count() != static_cast<int64_t>(ops.size())) return false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!ops[i].Match(h->operand(static_cast<int64_t>(i)))) return false;
    }
    return true;
  });
}

Pattern Pattern::WithOperand(int64_t i, Pattern p) const {
  return With([i, p = std::move(p)](HloInstruction* h) {
    return i >= 0 && i < h->operand_count() && p.Match(h->operand(i));
  });
}

Pattern Pattern::WithBinaryOperandsAnyOrder(Pattern a, Pattern b) const {
  return With([a = std::move(a), b = std::move(b)](HloInstruction* h) {
    if (h->operand_count() != 2) return false;
    if (a.Match(h->operand(0)) && b.Match(h->operand(1))) return true;
    return a.Match(h->operand(1)) && b.Match(h->operand(0));
  });
}

Pattern Pattern::WithOperandCount(int64_t n) const {
  return With([n](HloInstruction* h) { return h->operand_count() == n; });
}

Pattern Pattern::WithPredicate(std::function<bool(const HloInstruction*)> fn) const {
  return With([fn = std::move(fn)](HloInstruction* h) { return fn(h); });
}

Pattern Pattern::WithOneUser() const {
  return With([](HloInstruction* h) { return h->user_count() == 1 && !h->IsRoot(); });
}

Pattern Pattern::WithOneUse() const {
  return With([](HloInstruction* h) {
    if (h->user_count() != 1 || h->IsRoot()) return false;
    int uses = 0;
    for (const HloInstruction* o : h->users()[0]->operands()) uses += (o == h);
    return uses == 1;
  });
}

Pattern Pattern::WithElementType(PrimitiveType t) const {
  return With([t](HloInstruction* h) { return h->shape().element_type == t; });
}

Pattern Pattern::WithFp8ElementType() const {
  return With([](HloInstruction* h) {
    return h->shape().IsArray() && IsDequantizableFp8(h->shape().element_type);
  });
}

Pattern Pattern::WithShapeScalar() const {
  return With([](HloInstruction* h) { return h->shape().IsArray() && h->shape().rank() == 0; });
}

Pattern Pattern::WithRank(int64_t rank) const {
  return With([rank](HloInstruction* h) { return h->shape().IsArray() && h->shape().rank() == rank; });
}

Pattern Pattern::WithShapeCompatibleTo(const Shape& s) const {
  return With([s](HloInstruction* h) { return h->shape().Compatible(s); });
}

Pattern Pattern::WithTupleIndex(int64_t index) const {
  return With([index](HloInstruction* h) {
    return h->opcode() == HloOpcode::kGetTupleElement && h->tuple_index == index;
  });
}

Pattern Pattern::WithName(std::string_view name) const {
  return With([n = std::string(name)](HloInstruction* h) { return h->name() == n; });
}

Pattern Pattern::WithCustomCallTarget(std::string_view target) const {
  return With([t = std::string(target)](HloInstruction* h) {
    return h->opcode() == HloOpcode::kCustomCall && h->custom_call_target() == t;
  });
}

Pattern Pattern::WithParameterNumber(int64_t n) const {
  return With([n](HloInstruction* h) {
    return h->opcode() == HloOpcode::kParameter && h->parameter_number == n;
  });
}

Pattern Pattern::WithComparisonDirection(ComparisonDirection d) const {
  return With([d](HloInstruction* h) {
    return h->opcode() == HloOpcode::kCompare && h->comparison_direction == d;
  });
}

Pattern Opcode(HloOpcode op) { return Pattern().WithOpcode(op); }

Pattern Opcode(HloOpcode op, std::vector<Pattern> operands) {
  return Pattern().WithOpcode(op).WithOperands(std::move(operands));
}

Pattern AnyOrder(HloOpcode op, Pattern a, Pattern b) {
  return Pattern().WithOpcode(op).WithBinaryOperandsAnyOrder(std::move(a), std::move(b));
}

Pattern ConstantEffectiveScalar(double v) {
  return Constant().WithPredicate([v](const HloInstruction* h) {
    if (!h->literal.has_value() || h->literal->elided) return false;
    const Literal& lit = *h->literal;
    const int64_t n = lit.shape.IsArray() ? lit.shape.ElementCount() : 0;
    if (n == 0 || static_cast<int64_t>(lit.f.size() + lit.i.size()) < n) return false;
    const bool is_int = lit.f.empty() && !lit.i.empty();
    for (int64_t i = 0; i < n; ++i) {
      const double x = is_int ? static_cast<double>(lit.GetAsInt(i)) : lit.GetAsDouble(i);
      if (x != v) return false;
    }
    return true;
  });
}

}  // namespace weave::m
