// SPMD instruction builders (see spmd_builder.h).
#include "spmd/spmd_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weave::spmd {

ReplicaGroups MakeReplicaGroups(std::vector<std::vector<int64_t>> groups) {
  ReplicaGroups rg;
  std::vector<int64_t> flat;
  for (const auto& g : groups) flat.insert(flat.end(), g.begin(), g.end());
  if (!groups.empty()) {
    if (auto iota = DetectIota(flat)) {
      IotaList l;
      l.dims = {static_cast<int64_t>(groups.size()), static_cast<int64_t>(groups[0].size())};
      l.reshape = iota->first;
      if (iota->first.size() > 1) l.perm = iota->second;
      rg.iota = std::move(l);
    }
  }
  rg.groups = std::move(groups);
  return rg;
}

HloInstruction* SpmdBuilder::Add(HloOpcode op, const Shape& s, std::vector<HloInstruction*> ops,
                                 const std::string& name) {
  HloInstruction* h = c_->AddInstruction(op, s, std::move(ops), name);
  if (log_ != nullptr) log_->push_back(h);
  return h;
}

HloInstruction* SpmdBuilder::Constant(Literal lit, const std::string& name) {
  HloInstruction* c = Add(HloOpcode::kConstant, lit.shape, {}, name);
  c->literal = std::move(lit);
  return c;
}

HloInstruction* SpmdBuilder::ScalarConst(PrimitiveType t, double v) {
  return Constant(IsFloatingPoint(t) ? Literal::Scalar(t, v)
                                     : Literal::ScalarInt(t, static_cast<int64_t>(v)));
}

HloInstruction* SpmdBuilder::Splat(HloInstruction* scalar, const Shape& shape) {
  Shape s(scalar->shape().element_type, shape.dims);
  HloInstruction* b = Add(HloOpcode::kBroadcast, s, {scalar}, "broadcast");
  return b;
}

HloInstruction* SpmdBuilder::Zeros(const Shape& shape) {
  return Splat(ScalarConst(shape.element_type, 0), shape);
}

HloInstruction* SpmdBuilder::PartitionId() {
  if (pid_ == nullptr) {
    pid_ = Add(HloOpcode::kPartitionId, Shape::Scalar(PrimitiveType::U32), {}, "partition-id");
  }
  return pid_;
}

HloInstruction* SpmdBuilder::TableLookup(const std::vector<int64_t>& table) {
  auto it = tables_.find(table);
  if (it != tables_.end()) return it->second;
  HloInstruction* out;
  if (std::all_of(table.begin(), table.end(), [&](int64_t v) { return v == table[0]; })) {
    out = Constant(Literal::ScalarInt(PrimitiveType::S32, table.empty() ? 0 : table[0]));
  } else {
    HloInstruction* t = Constant(Literal::Vector(PrimitiveType::S32, table));
    HloInstruction* ds = Add(HloOpcode::kDynamicSlice, Shape(PrimitiveType::S32, {1}),
                             {t, PartitionId()}, "dynamic-slice");
    ds->set_dynamic_slice_sizes({1});
    out = Add(HloOpcode::kReshape, Shape::Scalar(PrimitiveType::S32), {ds}, "offset");
  }
  tables_[table] = out;
  return out;
}

std::vector<int64_t> SpmdBuilder::OffsetTable(const Sharding& s, const Shape& global,
                                              int64_t dim) const {
  std::vector<int64_t> t(static_cast<size_t>(num_partitions()), 0);
  for (int64_t p = 0; p < num_partitions(); ++p) {
    t[static_cast<size_t>(p)] = TileOffset(s, p, dim, global.dims[static_cast<size_t>(dim)]);
  }
  return t;
}

HloInstruction* SpmdBuilder::Reshape(HloInstruction* x, const std::vector<int64_t>& dims) {
  if (x->shape().dims == dims) return x;
  return Add(HloOpcode::kReshape, Shape(x->shape().element_type, dims), {x}, "reshape");
}

HloInstruction* SpmdBuilder::Transpose(HloInstruction* x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity &= perm[k] == static_cast<int64_t>(k);
  if (identity) return x;
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x->shape().dims[static_cast<size_t>(p)]);
  HloInstruction* t =
      Add(HloOpcode::kTranspose, Shape(x->shape().element_type, dims), {x}, "transpose");
  t->dimensions = perm;
  return t;
}

HloInstruction* SpmdBuilder::Slice(HloInstruction* x, const std::vector<int64_t>& limits) {
  if (x->shape().dims == limits) return x;
  HloInstruction* s = Add(HloOpcode::kSlice, Shape(x->shape().element_type, limits), {x}, "slice");
  for (int64_t l : limits) s->mutable_slice()->push_back(SliceDim{0, l, 1});
  return s;
}

HloInstruction* SpmdBuilder::PadHigh(HloInstruction* x, const std::vector<int64_t>& dims) {
  if (x->shape().dims == dims) return x;
  HloInstruction* zero = ScalarConst(x->shape().element_type, 0);
  HloInstruction* p = Add(HloOpcode::kPad, Shape(x->shape().element_type, dims), {x, zero}, "pad");
  for (size_t d = 0; d < dims.size(); ++d) {
    p->mutable_padding()->push_back(PadDim{0, dims[d] - x->shape().dims[d], 0});
  }
  return p;
}

HloInstruction* SpmdBuilder::DynamicSlice(HloInstruction* x,
                                          const std::vector<HloInstruction*>& offsets,
                                          const std::vector<int64_t>& sizes) {
  if (x->shape().dims == sizes) return x;
  std::vector<HloInstruction*> ops = {x};
  ops.insert(ops.end(), offsets.begin(), offsets.end());
  HloInstruction* ds =
      Add(HloOpcode::kDynamicSlice, Shape(x->shape().element_type, sizes), std::move(ops),
          "dynamic-slice");
  ds->set_dynamic_slice_sizes(sizes);
  return ds;
}

HloInstruction* SpmdBuilder::Select(HloInstruction* pred, HloInstruction* a, HloInstruction* b) {
  return Add(HloOpcode::kSelect, a->shape(), {pred, a, b}, "select");
}

HloInstruction* SpmdBuilder::MaskPadding(HloInstruction* x, const Sharding& s, const Shape& global,
                                         const std::vector<int64_t>& dims, HloInstruction* value) {
  if (!s.IsTiled()) return x;
  HloInstruction* mask = nullptr;
  const Shape pred_shape(PrimitiveType::PRED, x->shape().dims);
  const Shape s32_shape(PrimitiveType::S32, x->shape().dims);
  for (int64_t d : dims) {
    const int64_t size = global.dims[static_cast<size_t>(d)];
    if (d >= s.rank() || s.tile(d) == 1 || size % s.tile(d) == 0) continue;
    HloInstruction* iota = Add(HloOpcode::kIota, s32_shape, {}, "iota");
    iota->iota_dimension = d;
    HloInstruction* index = Add(HloOpcode::kAdd, s32_shape,
                                {iota, Splat(TableLookup(OffsetTable(s, global, d)), s32_shape)},
                                "index");
    HloInstruction* limit = Splat(Constant(Literal::ScalarInt(PrimitiveType::S32, size)), s32_shape);
    HloInstruction* in = Add(HloOpcode::kCompare, pred_shape, {index, limit}, "in_bounds");
    in->comparison_direction = ComparisonDirection::kLt;
    mask = mask == nullptr ? in : Add(HloOpcode::kAnd, pred_shape, {mask, in}, "and");
  }
  if (mask == nullptr) return x;
  return Select(mask, x, Splat(value, x->shape()));
}

ReplicaGroups SpmdBuilder::GlobalGroups(const std::vector<std::vector<int64_t>>& groups) const {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < ctx_->replica_count; ++r) {
    for (const auto& g : groups) {
      out.emplace_back();
      for (int64_t p : g) out.back().push_back(r * ctx_->num_partitions + p);
    }
  }
  return MakeReplicaGroups(std::move(out));
}

HloInstruction* SpmdBuilder::AllGather(HloInstruction* x, int64_t dim,
                                       const std::vector<std::vector<int64_t>>& groups) {
  Shape s = x->shape();
  s.layout.reset();
  s.dims[static_cast<size_t>(dim)] *= static_cast<int64_t>(groups.at(0).size());
  HloInstruction* ag = Add(HloOpcode::kAllGather, s, {x}, "all-gather");
  ag->channel_id = ctx_->next_channel_id++;
  ag->replica_groups = GlobalGroups(groups);
  ag->dimensions = {dim};
  ag->use_global_device_ids = true;
  return ag;
}

HloInstruction* SpmdBuilder::AllReduce(HloInstruction* x,
                                       const std::vector<std::vector<int64_t>>& groups,
                                       HloComputation* reducer) {
  HloInstruction* ar = Add(HloOpcode::kAllReduce, x->shape(), {x}, "all-reduce");
  ar->channel_id = ctx_->next_channel_id++;
  ar->replica_groups = GlobalGroups(groups);
  ar->use_global_device_ids = true;
  ar->mutable_called_computations()->push_back(reducer);
  return ar;
}

HloInstruction* SpmdBuilder::AllToAll(HloInstruction* x, int64_t dim,
                                      const std::vector<std::vector<int64_t>>& groups) {
  HloInstruction* a = Add(HloOpcode::kAllToAll, x->shape(), {x}, "all-to-all");
  a->channel_id = ctx_->next_channel_id++;
  a->replica_groups = MakeReplicaGroups(groups);
  a->dimensions = {dim};
  return a;
}

HloInstruction* SpmdBuilder::CollectivePermute(
    HloInstruction* x, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  HloInstruction* p = Add(HloOpcode::kCollectivePermute, x->shape(), {x}, "collective-permute");
  p->channel_id = ctx_->next_channel_id++;
  p->set_source_target_pairs(pairs);
  return p;
}

HloComputation* SpmdBuilder::Reducer(HloOpcode op, PrimitiveType t) {
  const std::string key = absl::StrCat(std::string(HloOpcodeString(op)), ".", std::string(PrimitiveTypeName(t)));
  auto it = ctx_->reducers.find(key);
  if (it != ctx_->reducers.end()) return it->second;
  auto comp = std::make_unique<HloComputation>(key);
  const Shape s = Shape::Scalar(t);
  HloInstruction* a = comp->AddParameter(s, "lhs");
  HloInstruction* b = comp->AddParameter(s, "rhs");
  HloComputation* raw = ctx_->module->AddComputation(std::move(comp));
  HloInstruction* r = raw->AddInstruction(op, s, {a, b}, std::string(HloOpcodeString(op)));
  raw->set_root(r);
  ctx_->reducers[key] = raw;
  return raw;
}

HloComputation* SpmdBuilder::SumReducer(PrimitiveType t) {
  return Reducer(t == PrimitiveType::PRED ? HloOpcode::kOr : HloOpcode::kAdd, t);
}

HloInstruction* SpmdBuilder::AllGatherTrimmed(HloInstruction* x, int64_t dim,
                                              const std::vector<std::vector<int64_t>>& groups, int64_t size) {
  x = AllGather(x, dim, groups);
  if (x->shape().dims[static_cast<size_t>(dim)] <= size) return x;
  std::vector<int64_t> limits = x->shape().dims;
  limits[static_cast<size_t>(dim)] = size;
  return Slice(x, limits);
}

HloInstruction* SpmdBuilder::AllReduceInto(HloInstruction* x, const Shape& whole, int64_t dim,
                                           const std::vector<int64_t>& offsets,
                                           const std::vector<std::vector<int64_t>>& groups) {
  HloInstruction* placed = x;
  if (x->shape().dims != whole.dims) {
    std::vector<HloInstruction*> ops = {Zeros(whole), x};
    for (int64_t k = 0; k < whole.rank(); ++k) {
      ops.push_back(k == dim ? TableLookup(offsets) : ScalarConst(PrimitiveType::S32, 0));
    }
    placed = Add(HloOpcode::kDynamicUpdateSlice, whole, ops, "dynamic-update-slice");
  }
  return AllReduce(placed, groups, SumReducer(whole.element_type));
}

}  // namespace weave::spmd
