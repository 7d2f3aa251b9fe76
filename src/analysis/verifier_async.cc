// The verifier's async and aliasing rules (analysis/verifier_checker.h), after XLA's
// ShapeVerifier async checks (CheckAsyncOp: the async shape, the wrapped computation's
// parameters and result, operands bound at the start or later by async-update, the done's
// result) and its aliasing checks (output_to_operand_aliasing of fusion, custom-call,
// async-start and async-update), and its rule that an async computation on the main thread
// holds a single instruction besides its parameters.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/async_chain.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {
namespace {

// XLA's ShapeUtil::IsPrefix: equal shapes; an empty tuple; or tuples whose leading elements are
// each a prefix of the other's.
bool IsShapePrefix(const Shape& prefix, const Shape& shape) {
  if (ShapesMatch(prefix, shape)) return true;
  if (!prefix.IsTuple()) return false;
  if (prefix.tuple_shapes.empty()) return true;
  if (!shape.IsTuple() || prefix.tuple_shapes.size() > shape.tuple_shapes.size()) return false;
  for (size_t i = 0; i < prefix.tuple_shapes.size(); ++i) {
    if (!IsShapePrefix(prefix.tuple_shapes[i], shape.tuple_shapes[i])) return false;
  }
  return true;
}

// The subshape at `index`, or nullptr when the index leaves the shape.
const Shape* Subshape(const Shape& s, const std::vector<int64_t>& index) {
  const Shape* cur = &s;
  for (int64_t i : index) {
    if (!cur->IsTuple() || i < 0 || i >= static_cast<int64_t>(cur->tuple_shapes.size())) return nullptr;
    cur = &cur->tuple_shapes[static_cast<size_t>(i)];
  }
  return cur;
}

std::string IndexText(const std::vector<int64_t>& v) { return Dims(v); }

class AliasReader {
 public:
  explicit AliasReader(std::string_view s) : s_(s) {}

  // nullopt when the text is not `{entry, ...}`.
  std::optional<std::vector<AliasEntry>> Read() {
    std::vector<AliasEntry> out;
    if (!Eat('{')) return std::nullopt;
    if (Eat('}')) return End() ? std::optional(out) : std::nullopt;
    do {
      AliasEntry e;
      if (!Index(&e.output) || !Eat(':') || !Eat('(') || !Int(&e.operand) || !Eat(',') ||
          !Index(&e.operand_index)) {
        return std::nullopt;
      }
      if (Eat(',')) {  // the alias kind: may-alias / must-alias
        Skip();
        while (p_ < s_.size() && s_[p_] != ')') ++p_;
      }
      if (!Eat(')')) return std::nullopt;
      out.push_back(std::move(e));
    } while (Eat(','));
    if (!Eat('}') || !End()) return std::nullopt;
    return out;
  }

 private:
  void Skip() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n' || s_[p_] == '\t' || s_[p_] == '\r')) ++p_;
  }
  bool Eat(char c) {
    Skip();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool End() {
    Skip();
    return p_ == s_.size();
  }
  bool Int(int64_t* v) {
    Skip();
    bool neg = false;
    if (p_ < s_.size() && s_[p_] == '-') {
      neg = true;
      ++p_;
    }
    if (p_ >= s_.size() || s_[p_] < '0' || s_[p_] > '9') return false;
    int64_t x = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      if (x > (int64_t{1} << 50)) return false;
      x = x * 10 + (s_[p_++] - '0');
    }
    *v = neg ? -x : x;
    return true;
  }
  bool Index(std::vector<int64_t>* out) {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    do {
      int64_t v = 0;
      if (!Int(&v)) return false;
      out->push_back(v);
    } while (Eat(','));
    return Eat('}');
  }

  std::string_view s_;
  size_t p_ = 0;
};

const HloComputation* Wrapped(const HloInstruction& h) {
  return h.called_computations().empty() ? nullptr : h.called_computations()[0];
}

// (params...) of a computation, as a tuple shape.
Shape ParamTuple(const HloComputation& c) {
  std::vector<Shape> params;
  for (const HloInstruction* p : c.parameters()) params.push_back(p->shape());
  return Shape::Tuple(std::move(params));
}

// The thread an async link runs on (its async_execution_thread=, else main).
std::string AsyncThread(const HloInstruction& h) {
  const std::string* written = h.GetRawAttribute("async_execution_thread");
  return ExecutionThreadName(written == nullptr ? std::string_view() : std::string_view(*written));
}

}  // namespace

std::optional<std::vector<AliasEntry>> ReadAliasing(std::string_view text) { return AliasReader(text).Read(); }

absl::Status Checker::AliasingConfig() const {
  const std::string* raw = h_.GetRawAttribute("output_to_operand_aliasing");
  if (raw == nullptr) return absl::OkStatus();
  std::optional<std::vector<AliasEntry>> entries = ReadAliasing(*raw);
  if (!entries) return Err(absl::StrCat("output_to_operand_aliasing=", *raw, " is not {{index}: (operand, {index}), ...}"));
  const HloOpcode op = h_.opcode();
  const HloComputation* wrapped = Wrapped(h_);
  // XLA's async shape: ((wrapped parameters), wrapped result, context...).
  Shape async_shape;
  if (op == HloOpcode::kAsyncStart && wrapped != nullptr && wrapped->root() != nullptr && h_.shape().IsTuple()) {
    std::vector<Shape> parts = {ParamTuple(*wrapped), wrapped->root()->shape()};
    for (size_t i = 2; i < h_.shape().tuple_shapes.size(); ++i) parts.push_back(h_.shape().tuple_shapes[i]);
    async_shape = Shape::Tuple(std::move(parts));
  }
  for (const AliasEntry& e : *entries) {
    const Shape* out = nullptr;
    const Shape* in = nullptr;
    switch (op) {
      case HloOpcode::kAsyncStart: {
        if (wrapped == nullptr) return absl::OkStatus();
        if (e.operand < 0) return Err("output_to_operand_aliasing: negative operand number");
        if (e.operand >= wrapped->num_parameters()) {
          return Err(absl::StrCat("output_to_operand_aliasing: operand ", e.operand, " is out of bounds (",
                                  wrapped->num_parameters(), " parameters)"));
        }
        in = Subshape(wrapped->parameters()[static_cast<size_t>(e.operand)]->shape(), e.operand_index);
        if (in == nullptr) return Err(absl::StrCat("output_to_operand_aliasing: operand index ", IndexText(e.operand_index), " is not in operand ", e.operand));
        if (e.output.empty()) return Err("output_to_operand_aliasing: the output index is empty");
        out = Subshape(async_shape, e.output);
        break;
      }
      case HloOpcode::kAsyncUpdate: {
        // Only the context (index 2) of the previous async value may alias.
        if (e.operand != 0) {
          return Err(absl::StrCat("output_to_operand_aliasing: operand ", e.operand,
                                  "; an async-update aliases only operand 0 (the previous async value)"));
        }
        if (e.operand_index.empty() || e.operand_index.front() != 2 ||
            (in = Subshape(Op(0), e.operand_index)) == nullptr) {
          return Err(absl::StrCat("output_to_operand_aliasing: operand index ", IndexText(e.operand_index),
                                  " is not in the previous async value's context {2, ...}"));
        }
        if (e.output.empty() || e.output.front() != 2) {
          return Err(absl::StrCat("output_to_operand_aliasing: output index ", IndexText(e.output),
                                  " is not in the context {2, ...}"));
        }
        out = Subshape(h_.shape(), e.output);
        break;
      }
      default: {
        if (e.operand < 0 || e.operand >= h_.operand_count()) {
          return Err(absl::StrCat("output_to_operand_aliasing: operand ", e.operand, " is out of bounds (",
                                  h_.operand_count(), " operands)"));
        }
        in = Subshape(Op(e.operand), e.operand_index);
        if (in == nullptr) {
          return Err(absl::StrCat("output_to_operand_aliasing: operand index ", IndexText(e.operand_index),
                                  " is not in operand ", e.operand));
        }
        out = Subshape(h_.shape(), e.output);
        break;
      }
    }
    if (out == nullptr) {
      return Err(absl::StrCat("output_to_operand_aliasing: output index ", IndexText(e.output), " is not in the result"));
    }
    if (op == HloOpcode::kCustomCall && h_.frontend_attributes.count("xla_skip_custom_call_alias_shape_check")) {
      continue;
    }
    // A custom-call other than Pin / Unpin aliases buffers to buffers only (XLA compares the
    // buffer marker there).
    const bool buffer_kinds_differ = op == HloOpcode::kCustomCall && in->buffer != out->buffer &&
                                     h_.custom_call_target() != "Pin" && h_.custom_call_target() != "Unpin";
    if (!ShapesMatch(*in, *out) || buffer_kinds_differ) {
      return Err(absl::StrCat("output_to_operand_aliasing: output ", IndexText(e.output), " ", ShapeText(*out),
                              " and operand ", e.operand, " ", IndexText(e.operand_index), " ", ShapeText(*in),
                              " differ"));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncOp() {
  const HloOpcode op = h_.opcode();
  const Shape& s = h_.shape();
  if (op != HloOpcode::kAsyncDone) {
    if (!s.IsTuple() || s.tuple_shapes.size() < 2 || !s.tuple_shapes[0].IsTuple()) {
      return Err(absl::StrCat("result ", ShapeText(s), " is not ((operands...), result, context...)"));
    }
  }
  // A sugared form (`reduce-scatter-start`, ...) calls its op's reducer, not a wrapped
  // computation: the computation rules below do not apply to it.
  const bool sugared = !AsyncWrapsComputation(h_);
  const HloComputation* wrapped = sugared ? nullptr : Wrapped(h_);
  // A link that does not name its computation wraps its chain's (the async-start's).
  const HloComputation* chained = AsyncChainComputation(h_);
  if (chained != nullptr && chained->root() != nullptr && op != HloOpcode::kAsyncDone) {
    RETURN_IF_ERROR(AsyncShapeFitsComputation(*chained));
  }
  if (wrapped != nullptr && wrapped->root() != nullptr) {
    RETURN_IF_ERROR(AsyncWrappedComputation(*wrapped));
  }
  if (op == HloOpcode::kAsyncStart) return AsyncStartOperands(sugared);
  if (op == HloOpcode::kAsyncDone) {
    RETURN_IF_ERROR(OperandCount(1));
  } else if (h_.operand_count() < 1) {
    return Err("expects at least 1 operand (the async value), got 0");
  }
  const Shape& x = Op(0);
  const HloOpcode from = h_.operand(0)->opcode();
  // The async value may also come through a loop (XLA's loop-crossing async: a parameter, a
  // get-tuple-element of one, or the loop's result carry it).
  const bool carried = from == HloOpcode::kParameter || from == HloOpcode::kGetTupleElement ||
                       from == HloOpcode::kWhile;
  if (from != HloOpcode::kAsyncStart && from != HloOpcode::kAsyncUpdate && !carried) {
    return Err(absl::StrCat("operand '", h_.operand(0)->name(), "' is ", std::string(HloOpcodeString(from)),
                            ", not async-start or async-update"));
  }
  if (!x.IsTuple() || x.tuple_shapes.size() < 2 || !x.tuple_shapes[0].IsTuple()) {
    return Err(absl::StrCat("operand '", h_.operand(0)->name(), "' ", ShapeText(x), " is not an async value"));
  }
  if (!carried) RETURN_IF_ERROR(AsyncChainLink());
  if (op == HloOpcode::kAsyncDone) return AsyncDoneResult(chained);
  if (sugared) return ResultIs(x, "its operand's shape");
  return AsyncUpdateOperands();
}

absl::Status Checker::AsyncShapeFitsComputation(const HloComputation& chained) const {
  const Shape& s = h_.shape();
  const Shape params = ParamTuple(chained);
  if (!IsShapePrefix(s.tuple_shapes[0], params)) {
    return Err(absl::StrCat("operands ", ShapeText(s.tuple_shapes[0]), " are not a prefix of computation '",
                            chained.name(), "''s parameters ", ShapeText(params)));
  }
  if (!IsShapePrefix(s.tuple_shapes[1], chained.root()->shape())) {
    return Err(absl::StrCat("result ", ShapeText(s.tuple_shapes[1]), " is not a prefix of computation '",
                            chained.name(), "''s result ", ShapeText(chained.root()->shape())));
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncWrappedComputation(const HloComputation& wrapped) const {
  const HloOpcode op = h_.opcode();
  const Shape& s = h_.shape();
  // The wrapped computation's thread is the op's; on the main thread it holds one
  // instruction besides its parameters (XLA: unless a collectives group or a barrier).
  const std::string mine = AsyncThread(h_);
  const std::string theirs = ExecutionThreadName(wrapped.execution_thread);
  if (mine != theirs) {
    return Err(absl::StrCat("runs on thread \"", mine, "\", but its computation '", wrapped.name(), "' on \"",
                            theirs, "\""));
  }
  if (op == HloOpcode::kAsyncStart && theirs == "main" && !h_.frontend_attributes.count("_collectives_group")) {
    bool single = true, barrier = true;
    for (const HloInstruction* i : wrapped.instructions()) {
      if (i == wrapped.root() || i->opcode() == HloOpcode::kParameter) continue;
      single = false;
      barrier &= i->opcode() == HloOpcode::kGetTupleElement;
    }
    if (!single && !barrier) {
      return Err(absl::StrCat("its computation '", wrapped.name(),
                              "' holds more than its root and parameters (an async computation wraps one op)"));
    }
  }
  if (op == HloOpcode::kAsyncDone && !ShapesMatch(s, wrapped.root()->shape())) {
    return Err(absl::StrCat("result ", ShapeText(s), " is not computation '", wrapped.name(), "''s result ",
                            ShapeText(wrapped.root()->shape())));
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncStartOperands(bool sugared) const {
  const Shape& s = h_.shape();
  if (sugared) {
    // A sugared reduction (`all-reduce-start`, `reduce-scatter-start` written as async sugar)
    // calls its reducer: the same rule as the plain op's (XLA verifies the wrapped op).
    const std::optional<HloOpcode> base = ParseHloOpcode(h_.async_sugar());
    if (base && (*base == HloOpcode::kAllReduce || *base == HloOpcode::kReduceScatter) &&
        h_.operand_count() > 0) {
      RETURN_IF_ERROR(Reducer({Op(0).element_type}));
    }
    return AliasingConfig();
  }
  const Shape& bound = s.tuple_shapes[0];
  if (h_.operand_count() != static_cast<int64_t>(bound.tuple_shapes.size())) {
    return Err(absl::StrCat("binds ", bound.tuple_shapes.size(), " operands in ", ShapeText(s), ", but has ",
                            h_.operand_count()));
  }
  for (int64_t i = 0; i < h_.operand_count(); ++i) {
    if (!ShapesMatch(Op(i), bound.tuple_shapes[static_cast<size_t>(i)])) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(Op(i)), " is not the bound operand ",
                              ShapeText(bound.tuple_shapes[static_cast<size_t>(i)])));
    }
  }
  return AliasingConfig();
}

absl::Status Checker::AsyncChainLink() const {
  // The chain wraps one op, one computation, on one thread (XLA's parser checks each link
  // against the one before; the computation is the start's when a link does not name it).
  const HloInstruction& prev = *h_.operand(0);
  if (!h_.async_sugar().empty() && !prev.async_sugar().empty() && h_.async_sugar() != prev.async_sugar()) {
    return Err(absl::StrCat("wraps ", h_.async_sugar(), ", but '", prev.name(), "' wraps ", prev.async_sugar()));
  }
  const HloInstruction* start = &prev;
  while (start->opcode() == HloOpcode::kAsyncUpdate && start->operand_count() > 0 &&
         (start->operand(0)->opcode() == HloOpcode::kAsyncStart ||
          start->operand(0)->opcode() == HloOpcode::kAsyncUpdate)) {
    start = start->operand(0);
  }
  const HloInstruction* named = &prev;
  while (Wrapped(*named) == nullptr && named != start) named = named->operand(0);
  if (Wrapped(h_) != nullptr && Wrapped(*named) != nullptr && Wrapped(h_) != Wrapped(*named)) {
    return Err(absl::StrCat("calls '", Wrapped(h_)->name(), "', but '", named->name(), "' calls '",
                            Wrapped(*named)->name(), "'"));
  }
  const std::string* mine = h_.GetRawAttribute("async_execution_thread");
  const std::string* theirs = start->GetRawAttribute("async_execution_thread");
  const std::string started = theirs == nullptr ? std::string("\"main\"") : *theirs;
  if (mine != nullptr && *mine != started) {
    return Err(absl::StrCat("runs on async_execution_thread=", *mine, ", but its async-start '", start->name(),
                            "' on ", started));
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncDoneResult(const HloComputation* chained) const {
  const Shape& s = h_.shape();
  const Shape& x = Op(0);
  // The operands are all bound by now (XLA: AreOperandsAndOutputFullyBound at {0}).
  const HloComputation* c = chained;
  if (c != nullptr && x.tuple_shapes[0].tuple_shapes.size() != static_cast<size_t>(c->num_parameters())) {
    return Err(absl::StrCat("its async value binds ", x.tuple_shapes[0].tuple_shapes.size(), " of computation '",
                            c->name(), "''s ", c->num_parameters(), " operands (all must be bound by the done)"));
  }
  if (c == nullptr) return ResultIs(x.tuple_shapes[1], "the async-start's result");
  if (c->root() != nullptr && !ShapesMatch(s, c->root()->shape())) {
    return Err(absl::StrCat("result ", ShapeText(s), " is not computation '", c->name(), "''s result ",
                            ShapeText(c->root()->shape())));
  }
  return absl::OkStatus();
}

absl::Status Checker::AsyncUpdateOperands() const {
  const Shape& s = h_.shape();
  const Shape& x = Op(0);
  // async-update: the previous value's operands and result are a prefix of its own; its extra
  // operands bind the next parameters.
  if (!IsShapePrefix(x.tuple_shapes[0], s.tuple_shapes[0]) || !IsShapePrefix(x.tuple_shapes[1], s.tuple_shapes[1])) {
    return Err(absl::StrCat("result ", ShapeText(s), " does not extend its operand's ", ShapeText(x)));
  }
  const int64_t before = static_cast<int64_t>(x.tuple_shapes[0].tuple_shapes.size());
  const int64_t after = static_cast<int64_t>(s.tuple_shapes[0].tuple_shapes.size());
  if (h_.operand_count() - 1 != after - before) {
    return Err(absl::StrCat("has ", h_.operand_count() - 1, " new operands, but its result binds ", after - before,
                            " more"));
  }
  for (int64_t i = 1; i < h_.operand_count(); ++i) {
    const Shape& want = s.tuple_shapes[0].tuple_shapes[static_cast<size_t>(before + i - 1)];
    if (!ShapesMatch(Op(i), want)) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(Op(i)), " is not the bound operand ", ShapeText(want)));
    }
  }
  return AliasingConfig();
}

absl::Status Checker::AllGatherStartDone() {
  if (h_.opcode() == HloOpcode::kAllGatherStart) {
    // XLA: (operand, gathered) for one operand; ((operands...), (gathered...)) for several.
    const Shape& s = h_.shape();
    if (!s.IsTuple() || s.tuple_shapes.size() != 2) {
      return Err(absl::StrCat("result ", ShapeText(s), " is not a tuple (operand, gathered result)"));
    }
    if (h_.operand_count() == 1 && !ShapesMatch(s.tuple_shapes[0], Op(0))) {
      return Err(absl::StrCat("result element 0 ", ShapeText(s.tuple_shapes[0]), " is not its operand ",
                              ShapeText(Op(0))));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(OperandCount(1));
  if (!Op(0).IsTuple() || Op(0).tuple_shapes.size() != 2) {
    return Err(absl::StrCat("operand ", ShapeText(Op(0)), " is not an all-gather-start's (operand, result)"));
  }
  return ResultIs(Op(0).tuple_shapes[1], "the all-gather-start's gathered result");
}

}  // namespace weave::verifier_internal
