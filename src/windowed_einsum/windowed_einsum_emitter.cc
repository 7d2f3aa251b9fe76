#include "windowed_einsum/windowed_einsum_emitter.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "hlo/builders.h"

namespace weave::windowed_einsum {

Shape WithDim(const Shape& s, int64_t dim, int64_t size) {
  Shape r = s;
  r.dims[static_cast<size_t>(dim)] = size;
  return r;
}

HloInstruction* Emitter::Add(HloOpcode op, const Shape& s, std::vector<HloInstruction*> ops,
                             const std::string& name) {
  return c_->AddInstruction(op, s, std::move(ops), name);
}

HloInstruction* Emitter::Param(const Shape& s, const std::string& name) {
  return c_->AddParameter(s, name);
}

HloInstruction* Emitter::Gte(HloInstruction* t, int64_t i, const std::string& name) {
  return AddGetTupleElement(c_, t, i, name);
}

HloInstruction* Emitter::ConstInt(PrimitiveType t, int64_t v, const std::string& name) {
  return AddScalarConstant(c_, t, v, name);
}

HloInstruction* Emitter::ConstVec(PrimitiveType t, const std::vector<int64_t>& v,
                                  const std::string& name) {
  HloInstruction* c =
      Add(HloOpcode::kConstant, Shape(t, {static_cast<int64_t>(v.size())}), {}, name);
  c->literal = Literal::Vector(t, v);
  return c;
}

HloInstruction* Emitter::Zeros(const Shape& s, const std::string& name) {
  return AddZeros(c_, s, name);
}

HloInstruction* Emitter::Binary(HloOpcode op, HloInstruction* a, HloInstruction* b,
                                const std::string& name) {
  return Add(op, a->shape(), {a, b}, name);
}

HloInstruction* Emitter::Permute(HloInstruction* v, std::vector<std::pair<int64_t, int64_t>> pairs,
                                 int64_t channel, const std::string& name) {
  HloInstruction* p = Add(HloOpcode::kCollectivePermute, v->shape(), {v}, name);
  p->channel_id = channel;
  p->set_source_target_pairs(std::move(pairs));
  return p;
}

HloInstruction* Emitter::TableLookup(HloInstruction* table, HloInstruction* index,
                                     const std::string& name) {
  PrimitiveType t = table->shape().element_type;
  HloInstruction* ds =
      Add(HloOpcode::kDynamicSlice, Shape(t, {1}), {table, index}, absl::StrCat(name, ".ds"));
  ds->set_dynamic_slice_sizes({1});
  return Add(HloOpcode::kReshape, Shape::Scalar(t), {ds}, name);
}

HloInstruction* Emitter::DynamicSlice(HloInstruction* v, std::vector<HloInstruction*> offsets,
                                      std::vector<int64_t> sizes, const std::string& name) {
  Shape s = v->shape();
  s.dims = sizes;
  std::vector<HloInstruction*> ops = {v};
  ops.insert(ops.end(), offsets.begin(), offsets.end());
  HloInstruction* ds = Add(HloOpcode::kDynamicSlice, s, std::move(ops), name);
  ds->set_dynamic_slice_sizes(std::move(sizes));
  return ds;
}

HloInstruction* Emitter::Dus(HloInstruction* buf, HloInstruction* upd,
                             std::vector<HloInstruction*> offsets, const std::string& name) {
  std::vector<HloInstruction*> ops = {buf, upd};
  ops.insert(ops.end(), offsets.begin(), offsets.end());
  return Add(HloOpcode::kDynamicUpdateSlice, buf->shape(), std::move(ops), name);
}

HloInstruction* Emitter::DotLike(const HloInstruction& proto, HloInstruction* lhs,
                                 HloInstruction* rhs, PrimitiveType t, const std::string& name) {
  HloInstruction* d = AddDot(c_, lhs, rhs, proto.dot_dims(), t, name, proto.shape().layout);
  d->set_operand_precision(proto.operand_precision());
  d->metadata = proto.metadata;
  d->frontend_attributes = proto.frontend_attributes;
  d->set_raw_attributes(proto.raw_attributes());
  return d;
}

HloInstruction* Emitter::Compare(HloInstruction* a, HloInstruction* b, ComparisonDirection dir,
                                 const std::string& name) {
  HloInstruction* c = Add(HloOpcode::kCompare, Shape::Scalar(PrimitiveType::PRED), {a, b}, name);
  c->comparison_direction = dir;
  return c;
}

HloInstruction* Emitter::Tuple(std::vector<HloInstruction*> ops, const std::string& name) {
  std::vector<Shape> shapes;
  for (HloInstruction* o : ops) shapes.push_back(o->shape());
  return Add(HloOpcode::kTuple, Shape::Tuple(std::move(shapes)), std::move(ops), name);
}

HloComputation* NewComputation(HloModule* m, const std::string& name) {
  return m->AddComputation(std::make_unique<HloComputation>(std::string(name)));
}

RingValues EmitRingValues(Emitter& e, const PartitionRing& ring, int64_t block) {
  RingValues v;
  HloInstruction* pid =
      e.Add(HloOpcode::kPartitionId, Shape::Scalar(PrimitiveType::U32), {}, "pid");
  if (ring.IsIdentity()) {
    v.position = pid;
  } else {
    HloInstruction* tbl =
        e.ConstVec(PrimitiveType::U32, ring.index_in_group, "ring_position_table");
    v.position = e.TableLookup(tbl, pid, "ring_position");
  }
  v.n = e.ConstInt(PrimitiveType::U32, ring.size(), "nparts");
  std::vector<int64_t> offs;
  for (int64_t i = 0; i < ring.size(); ++i) offs.push_back(i * block);
  v.table = e.ConstVec(PrimitiveType::S32, offs, "offset_table");
  v.zero = e.ConstInt(PrimitiveType::S32, 0, "zero");
  v.one = e.ConstInt(PrimitiveType::U32, 1, "one");
  return v;
}

HloInstruction* EmitBlockOffset(Emitter& e, const RingValues& v, HloInstruction* k,
                                const std::string& tag) {
  HloInstruction* kp = e.Binary(HloOpcode::kAdd, k, v.position, absl::StrCat("k", tag, "p"));
  HloInstruction* q = e.Binary(HloOpcode::kRemainder, kp, v.n, absl::StrCat("blk", tag));
  return e.TableLookup(v.table, q, absl::StrCat("off", tag));
}

// Offsets vector of rank `rank` with `off` at `dim` and s32 0 elsewhere.
std::vector<HloInstruction*> OffsetsAt(const RingValues& v, int64_t rank, int64_t dim,
                                       HloInstruction* off) {
  std::vector<HloInstruction*> o(static_cast<size_t>(rank), v.zero);
  o[static_cast<size_t>(dim)] = off;
  return o;
}

// `conditional(more, window, window)` whose true branch permutes the window and whose false branch
// (the last iteration) passes it through.
HloInstruction* EmitGuardedPermute(HloModule* m, Emitter& e, HloInstruction* more,
                                   HloInstruction* window,
                                   std::vector<std::pair<int64_t, int64_t>> pairs, int64_t channel,
                                   const std::string& name) {
  HloComputation* tc = NewComputation(m, "window_collective_permute");
  {
    Emitter te(tc);
    HloInstruction* p = te.Param(window->shape(), "window");
    tc->set_root(te.Permute(p, std::move(pairs), channel, "permuted_window"));
  }
  HloComputation* fc = NewComputation(m, "last_iteration_noop");
  {
    Emitter fe(fc);
    fc->set_root(fe.Param(window->shape(), "window"));
  }
  HloInstruction* c = e.Add(HloOpcode::kConditional, window->shape(), {more, window, window}, name);
  c->conditional_is_pred = true;
  c->mutable_called_computations()->push_back(tc);
  c->mutable_called_computations()->push_back(fc);
  return c;
}

Shape WindowedLoopStateShape(const HloInstruction* lhs0, const HloInstruction* rhs0,
                             const Shape& acc_shape, const std::vector<HloInstruction*>& scales) {
  std::vector<Shape> elems = {lhs0->shape(), rhs0->shape(), acc_shape, acc_shape,
                              Shape::Scalar(PrimitiveType::U32)};
  for (const HloInstruction* s : scales) elems.push_back(s->shape());
  return Shape::Tuple(elems);
}

WindowedLoopStateReads ReadWindowedLoopState(Emitter& b, const Shape& state_shape,
                                             const std::string& acc_name,
                                             const std::vector<HloInstruction*>& scale_inits) {
  WindowedLoopStateReads s;
  HloInstruction* param = b.Param(state_shape, "param");
  s.lhs = b.Gte(param, kStateLhs, "lhs");
  s.rhs = b.Gte(param, kStateRhs, "rhs");
  s.acc = b.Gte(param, kStateAcc, acc_name);
  s.extra = b.Gte(param, kStateExtraAcc, "extra");
  s.k = b.Gte(param, kStateCounter, "k");
  for (size_t i = 0; i < scale_inits.size(); ++i) {
    s.scales.push_back(b.Gte(param, kStateFirstScale + static_cast<int64_t>(i),
                             scale_inits[i]->name() + ".gte"));
  }
  return s;
}

HloInstruction* EmitWindowedLoop(Emitter& e, HloInstruction* lhs0, HloInstruction* rhs0,
                                 const Shape& acc_shape, const std::string& acc_init_name,
                                 const std::vector<HloInstruction*>& scales,
                                 const Shape& state_shape, HloComputation* cond,
                                 HloComputation* body) {
  HloInstruction* z = e.Zeros(acc_shape, acc_init_name);
  HloInstruction* z2 = e.Zeros(acc_shape, "windowed_extra_init");
  HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
  std::vector<HloInstruction*> init_ops = {lhs0, rhs0, z, z2, k0};
  init_ops.insert(init_ops.end(), scales.begin(), scales.end());
  HloInstruction* init = e.Tuple(init_ops, "windowed_init");
  HloInstruction* loop = e.Add(HloOpcode::kWhile, state_shape, {init}, "windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  return loop;
}

// cond: compare(get-tuple-element(param, 4), u32 trips), direction=LT.
HloComputation* EmitCondition(HloModule* m, const std::string& name, const Shape& tuple_shape,
                              int64_t trips) {
  HloComputation* c = NewComputation(m, name);
  Emitter e(c);
  HloInstruction* p = e.Param(tuple_shape, "param");
  HloInstruction* k = e.Gte(p, 4, "k");
  HloInstruction* t = e.ConstInt(PrimitiveType::U32, trips, "trips");
  c->set_root(e.Compare(k, t, ComparisonDirection::kLt, "more"));
  return c;
}

bool IsSumComputation(const HloComputation* c) {
  if (c == nullptr || c->num_parameters() != 2 || c->root() == nullptr) return false;
  const HloInstruction* r = c->root();
  if (r->opcode() != HloOpcode::kAdd || r->operand_count() != 2) return false;
  const HloInstruction* a = r->operand(0);
  const HloInstruction* b = r->operand(1);
  return a->opcode() == HloOpcode::kParameter && b->opcode() == HloOpcode::kParameter && a != b;
}

}  // namespace weave::windowed_einsum
