// windowed-einsum-handler, step 3b: loops that contract the windowed dim
// (../shared/specs/windowed-einsum-handler.md §8, XLA's MoveAccumulationOutsideLoop).
//
// In an all-gather loop whose gathered dim is contracted, every step adds its partial product
// into one accumulator: acc = add(...add(add(acc0, d0), d1)..., dN-1). Once the GEMM rewriter
// folds each add into its GEMM (beta = 1), every dot waits for the previous one. After full
// unrolling the partial products are collected outside that chain instead:
//
//   body:   buffer = concatenate(reshape(convert_f32(d0)), ..., reshape(convert_f32(dN-1)))  [N, ...]
//           appended to the loop state (init: zeros)
//   after:  acc = convert(reduce(get-tuple-element(loop, buffer), 0, dims={0}, add_f32))
//           (+ acc0 when the accumulator does not start at zero)
//
// and every reader of the accumulator after the loop reads `acc`. The partials and their sum are
// f32 (converted once to the accumulator's type), so the result is at least as exact as the
// chain. The chain itself stays in the body, unread; while-loop-dead-tuple-elements removes it.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "windowed_einsum/windowed_einsum_handler_internal.h"
#include "hlo/status_macros.h"

namespace weave::handler_internal {

namespace {

// The accumulation chain of root operand `a`: add(...add(gte(param, a), d0)..., dN-1) where each
// addend is one of `dots` (or convert(dot)); the dots in chain order, or empty if it is not one.
std::vector<HloInstruction*> AccumulationChain(const HloComputation* body, int64_t a,
                                               const absl::flat_hash_set<HloInstruction*>& dots) {
  std::vector<HloInstruction*> chain;
  HloInstruction* v = body->root()->operand(a);
  const HloInstruction* param = body->parameter(0);
  while (v->opcode() == HloOpcode::kAdd && v->operand_count() == 2) {
    HloInstruction* d = nullptr;
    HloInstruction* rest = nullptr;
    for (int k = 0; k < 2 && d == nullptr; ++k) {
      HloInstruction* x = v->operand(k);
      if (x->opcode() == HloOpcode::kConvert && x->operand_count() == 1) x = x->operand(0);
      if (dots.count(x)) {
        d = x;
        rest = v->operand(1 - k);
      }
    }
    if (d == nullptr) return {};
    chain.push_back(d);
    v = rest;
  }
  if (v->opcode() != HloOpcode::kGetTupleElement || v->operand(0) != param || v->tuple_index != a) {
    return {};
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

bool IsZeroBroadcast(const HloInstruction* v) {
  if (v->opcode() == HloOpcode::kBroadcast && v->operand_count() == 1) v = v->operand(0);
  return v->opcode() == HloOpcode::kConstant && v->literal && !v->literal->elided &&
         v->literal->IsScalar() && v->literal->GetAsDouble(0) == 0.0;
}

// The root operand of `body` that already concatenates (reshaped, converted) `dots`: the tuple
// index of a buffer an earlier run collected, or -1.
int64_t CollectedIndex(const HloComputation* body, int64_t n_elems,
                       const absl::flat_hash_set<HloInstruction*>& dots) {
  const HloInstruction* R = body->root();
  for (int64_t j = 0; j < n_elems; ++j) {
    const HloInstruction* v = R->operand(j);
    if (v->opcode() != HloOpcode::kConcatenate || v->operand_count() == 0) continue;
    const HloInstruction* x = v->operand(0);
    if (x->opcode() == HloOpcode::kReshape) x = x->operand(0);
    if (x->opcode() == HloOpcode::kConvert) x = x->operand(0);
    if (dots.count(const_cast<HloInstruction*>(x))) return j;
  }
  return -1;
}

// The accumulator of loop L: the first root element (not the counter, not an operand) built by
// an add chain over at least two of `dots`; its tuple index (*chain: the dots in chain order),
// or -1.
int64_t FindAccumulator(const WindowedLoop& L, int64_t n_elems,
                        const absl::flat_hash_set<HloInstruction*>& dots,
                        std::vector<HloInstruction*>* chain) {
  int64_t a = -1;
  for (int64_t j = 0; j < n_elems && a < 0; ++j) {
    if (j == L.counter_index || j == 0 || j == 1) continue;
    std::vector<HloInstruction*> c = AccumulationChain(L.body, j, dots);
    if (c.size() >= 2) {
      a = j;
      *chain = std::move(c);
    }
  }
  return a;
}

// Whether the partial products of accumulator `a` (chain `chain`) of loop `w` can be collected:
// the loop fully unrolled and read only by get-tuple-elements (*readers: those of `a`, at least
// one), the accumulator floating-point with each dot's shape. When not, false with *msg set
// (left as it is for an accumulator that is not floating-point).
bool CanCollect(HloInstruction* w, const WindowedLoop& L, int64_t a,
                const std::vector<HloInstruction*>& chain, std::vector<HloInstruction*>* readers,
                std::string* msg) {
  if (L.layout != WindowedLoopLayout::kFullyUnrolled) {
    *msg = "contracting-dim accumulation left in the add chain: the partial products are "
           "collected only in a fully unrolled loop (windowed-einsum-unroll=false)";
    return false;
  }
  if (w->IsRoot()) {
    *msg = "contracting-dim accumulation left in the add chain: the loop result is the root";
    return false;
  }
  for (HloInstruction* u : w->users()) {
    if (u->opcode() != HloOpcode::kGetTupleElement) {
      *msg = absl::StrCat("contracting-dim accumulation left in the add chain: the loop is read "
                          "by '",
                          u->name(), "', not only by get-tuple-element");
      return false;
    }
    if (u->tuple_index == a) readers->push_back(u);
  }
  if (readers->empty()) {
    *msg = "contracting-dim accumulation left in the add chain: nothing reads the accumulator "
           "after the loop";
    return false;
  }
  const Shape& acc_shape = w->shape().tuple_shapes[static_cast<size_t>(a)];
  if (!acc_shape.IsArray() || !IsFloatingPoint(acc_shape.element_type)) return false;
  for (HloInstruction* d : chain) {
    if (!d->shape().IsArray() || d->shape().dims != acc_shape.dims) {
      *msg = absl::StrCat("contracting-dim accumulation left in the add chain: dot '", d->name(),
                          "' has shape ", d->shape().ToString(false), ", the accumulator ",
                          acc_shape.ToString(false));
      return false;
    }
  }
  return true;
}

// In `body`: the partial products `chain` in f32, each reshaped to `one` ([1, ...]) and stacked
// on the leading dim into `stacked` ("partials").
HloInstruction* StackPartials(HloComputation* body, const std::vector<HloInstruction*>& chain,
                              const Shape& one, const Shape& stacked) {
  const PrimitiveType f32 = PrimitiveType::F32;
  std::vector<HloInstruction*> parts;
  for (HloInstruction* d : chain) {
    HloInstruction* p = d;
    if (d->shape().element_type != f32) {
      p = body->AddInstruction(HloOpcode::kConvert, d->shape().WithElementType(f32), {d},
                               absl::StrCat(d->name(), ".f32"));
    }
    parts.push_back(body->AddInstruction(HloOpcode::kReshape, one, {p},
                                         absl::StrCat(d->name(), ".partial")));
  }
  HloInstruction* buffer = body->AddInstruction(HloOpcode::kConcatenate, stacked, parts, "partials");
  buffer->dimensions = {0};
  return buffer;
}

}  // namespace

HloComputation* Handler::ScalarAddComputation(PrimitiveType t) {
  auto it = add_computations_.find(t);
  if (it != add_computations_.end()) return it->second;
  auto c = std::make_unique<HloComputation>(
      absl::StrCat("add_", std::string(PrimitiveTypeName(t))));
  HloComputation* add = module_->AddComputation(std::move(c));
  NoteComputation(add);
  HloInstruction* x = add->AddParameter(Shape::Scalar(t), "x");
  HloInstruction* y = add->AddParameter(Shape::Scalar(t), "y");
  add->set_root(add->AddInstruction(HloOpcode::kAdd, Shape::Scalar(t), {x, y}, "sum"));
  add_computations_[t] = add;
  callers_[add] = 0;
  return add;
}

absl::StatusOr<bool> Handler::CollectPartials(HloInstruction* w, const WindowedLoop& L,
                                              std::string* msg) {
  HloComputation* body = L.body;
  HloComputation* comp = w->parent();
  if (L.kind != WindowedLoopKind::kAllGather) return false;
  absl::flat_hash_set<HloInstruction*> dots;
  for (const WindowedDot& d : L.dots) dots.insert(d.dot);
  const int64_t n_elems = static_cast<int64_t>(w->shape().tuple_shapes.size());
  HloInstruction* R = body->root();
  if (const int64_t j = CollectedIndex(body, n_elems, dots); j >= 0) {
    *msg = absl::StrFormat("partial products already collected at tuple index %d", j);
    return false;
  }
  std::vector<HloInstruction*> chain;
  const int64_t a = FindAccumulator(L, n_elems, dots, &chain);
  if (a < 0) return false;  // not a contracting-dim loop: nothing to say
  std::vector<HloInstruction*> readers;  // get-tuple-element(loop, a)
  if (!CanCollect(w, L, a, chain, &readers, msg)) return false;
  const Shape acc_shape = w->shape().tuple_shapes[static_cast<size_t>(a)];

  // Body: the partials in f32, stacked on a new leading dim.
  const PrimitiveType f32 = PrimitiveType::F32;
  const int64_t n = static_cast<int64_t>(chain.size());
  Shape one(f32, acc_shape.dims);
  one.dims.insert(one.dims.begin(), 1);
  one.SetDefaultLayout();
  Shape stacked = one;
  stacked.dims[0] = n;
  HloInstruction* buffer = StackPartials(body, chain, one, stacked);

  // Loop state: append the buffer (zeros on entry).
  std::vector<Shape> elems = w->shape().tuple_shapes;
  elems.push_back(stacked);
  const Shape state = Shape::Tuple(elems);
  std::vector<HloInstruction*> ops = L.init->operands();
  ops.push_back(AddZeros(comp, stacked, "partials_init"));
  HloInstruction* acc0 = L.init->operand(a);
  RETURN_IF_ERROR(ReplaceInit(w, state, ops, &rename_));
  body->parameter(0)->set_shape(state);
  L.condition->parameter(0)->set_shape(state);
  R->AppendOperand(buffer);
  R->set_shape(state);

  // After the loop: one f32 reduction, then the accumulator's type.
  HloInstruction* out = AddGetTupleElement(comp, w, n_elems, "partials_out");
  HloInstruction* zero = AddScalarConstant(comp, f32, 0, "partials_zero");
  Shape reduced(f32, acc_shape.dims);
  reduced.SetDefaultLayout();
  HloInstruction* sum = comp->AddInstruction(HloOpcode::kReduce, reduced, {out, zero},
                                             "partials_sum");
  sum->dimensions = {0};
  sum->mutable_called_computations()->push_back(ScalarAddComputation(f32));
  ++callers_[sum->called_computations()[0]];
  const bool zero_start = IsZeroBroadcast(acc0);
  if (!zero_start) {
    HloInstruction* a0 = acc0;
    if (acc0->shape().element_type != f32) {
      a0 = comp->AddInstruction(HloOpcode::kConvert, reduced, {acc0}, "partials_start");
    }
    sum = comp->AddInstruction(HloOpcode::kAdd, reduced, {a0, sum}, "partials_sum_start");
  }
  HloInstruction* result = sum;
  if (acc_shape.element_type != f32) {
    result = comp->AddInstruction(HloOpcode::kConvert, acc_shape, {sum}, "partials_acc");
  }
  for (HloInstruction* g : readers) {
    std::vector<HloInstruction*> users = g->users();
    RETURN_IF_ERROR(ReplaceUses(g, users, result));
  }
  *msg = absl::StrFormat(
      "contracting-dim loop: the %d partial products are collected outside the add chain in "
      "%s at tuple index %d and reduced in f32 after the loop%s (XLA's "
      "MoveAccumulationOutsideLoop), so the dots no longer wait for each other",
      n, stacked.ToString(false), n_elems,
      zero_start ? "" : absl::StrCat(", added to the accumulator's start '", acc0->name(), "'"));
  return true;
}

}  // namespace weave::handler_internal
