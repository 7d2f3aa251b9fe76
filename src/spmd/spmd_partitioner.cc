// spmd-partitioner: the driver (see spmd_partitioner.h); per-op rules in partition_ops.cc and
// partition_dot.cc.
#include "spmd/spmd_partitioner.h"
#include "spmd/partition_expand.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hlo/block_scaled_call.h"
#include "spmd/partitioner_internal.h"
#include "spmd/sharding_import.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

const Sharding& ReplicatedSharding() {
  static const Sharding* r = new Sharding(Sharding::Replicated());
  return *r;
}

bool IsCall(const HloInstruction& h, std::string_view target) {
  return h.opcode() == HloOpcode::kCustomCall && h.custom_call_target() == target;
}

// A collective the user wrote inside a partially manual region (its sharding has a manual
// subgroup) may only join devices that differ in their manual index: the other devices of a
// replica group run the same manual program on other data. XLA's partitioner refuses the rest
// ("manual all-reduce across devices that belong to different manual subgroups").
absl::Status CheckManualSubgroupCollective(const HloInstruction& h, const Sharding& s) {
  if (!IsCollective(h.opcode()) || !s.IsTiled() || !s.HasManualSubgroup() || !h.replica_groups) {
    return absl::OkStatus();
  }
  const int64_t mdim = s.SubgroupArrayDim(SubgroupType::kManual);
  for (const std::vector<int64_t>& group : h.replica_groups->groups) {
    std::optional<std::vector<int64_t>> first;
    for (int64_t d : group) {
      std::optional<std::vector<int64_t>> idx = s.ArrayIndex(d);
      if (!idx) continue;
      (*idx)[static_cast<size_t>(mdim)] = 0;
      if (!first) {
        first = std::move(idx);
      } else if (*idx != *first) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spmd-partitioner: '", h.name(), "': manual ", std::string(HloOpcodeString(h.opcode())),
            " across devices that belong to different manual subgroups: replica group {",
            absl::StrJoin(group, ","), "} joins devices that hold different tiles of ", s.ToString()));
      }
    }
  }
  return absl::OkStatus();
}

// A custom call's operand_layout_constraints={T[dims]{layout}, ...} rewritten with its operands'
// (local) shapes, each layout kept; left as it is when it does not list one shape per operand.
void LocalLayoutConstraints(HloInstruction* c) {
  for (auto& [name, value] : *c->mutable_raw_attributes()) {
    if (name != "operand_layout_constraints") continue;
    std::vector<std::string> layouts;
    size_t pos = 0;
    while ((pos = value.find(']', pos)) != std::string::npos) {
      ++pos;
      std::string layout;
      if (pos < value.size() && value[pos] == '{') {
        const size_t end = value.find('}', pos);
        if (end == std::string::npos) return;
        layout = value.substr(pos, end - pos + 1);
        pos = end + 1;
      }
      layouts.push_back(layout);
    }
    if (static_cast<int64_t>(layouts.size()) != c->operand_count()) return;
    std::vector<std::string> parts;
    for (int64_t i = 0; i < c->operand_count(); ++i) {
      Shape s = c->operand(i)->shape();
      s.layout.reset();
      parts.push_back(s.ToString(false) + layouts[static_cast<size_t>(i)]);
    }
    value = absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
}

bool AllManual(const Sharding& s) {
  if (!s.IsTuple()) return s.IsManual();
  return !s.leaves().empty() &&
         std::all_of(s.leaves().begin(), s.leaves().end(), [](const Sharding& l) { return l.IsManual(); });
}

absl::Status CheckDevices(const Sharding& s, int64_t n, const HloInstruction& h) {
  if (s.IsTuple()) {
    for (const Sharding& l : s.leaves()) {
      RETURN_IF_ERROR(CheckDevices(l, n, h));
    }
    return absl::OkStatus();
  }
  if (s.IsMaximal() && (s.maximal_device() < 0 || s.maximal_device() >= n)) {
    return absl::InvalidArgumentError(absl::StrCat("spmd-partitioner: '", h.name(), "': sharding ",
                                                   s.ToString(), " names a device outside 0..",
                                                   n - 1, " (num_partitions=", n, ")"));
  }
  if (s.IsTiled()) {
    for (int64_t d : s.devices()) {
      if (d >= n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spmd-partitioner: '", h.name(), "': sharding ", s.ToString(),
            " uses device ", d, ", outside partitions 0..", n - 1, " (num_partitions=", n, ")"));
      }
    }
    if (static_cast<int64_t>(s.devices().size()) != n) {
      return absl::UnimplementedError(absl::StrCat(
          "spmd-partitioner: '", h.name(), "': sharding ", s.ToString(), " uses ",
          s.devices().size(), " of the ", n, " partitions (shardings over a subset of the "
          "devices are not supported)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const Sharding& ComputationPartitioner::Target(const HloInstruction* old) const {
  const int32_t slot = slots_.Slot(old);
  return slot < 0 ? ReplicatedSharding() : targets_[static_cast<size_t>(slot)];
}

const PValue& ComputationPartitioner::Value(const HloInstruction* old) const {
  // Operands come before their users in the post order: an operand's value is always there.
  static const PValue kNone;
  const int32_t slot = slots_.Slot(old);
  return slot < 0 ? kNone : values_[static_cast<size_t>(slot)];
}

absl::StatusOr<HloInstruction*> ComputationPartitioner::ValueIn(const HloInstruction* old,
                                                                const Sharding& s) {
  const PValue& v = Value(old);
  if (v.hlo == nullptr) {
    return absl::InternalError(
        absl::StrCat("spmd-partitioner: '", old->name(), "' read before it was partitioned"));
  }
  if (v.sharding == s) return v.hlo;
  const std::pair<const HloInstruction*, std::string> key(old, s.ToString());
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  absl::StatusOr<HloInstruction*> r = EmitReshard(v, s, *old);
  if (r.ok()) cache_[key] = *r;
  return r;
}

absl::StatusOr<HloInstruction*> ComputationPartitioner::Operand(const HloInstruction& h,
                                                                int64_t i, const Sharding& s) {
  return ValueIn(h.operand(i), s);
}

absl::StatusOr<HloInstruction*> ComputationPartitioner::Reshard(const PValue& v, const Sharding& s,
                                                                const HloInstruction& for_instr) {
  return EmitReshard(v, s, for_instr);
}

absl::StatusOr<HloInstruction*> ComputationPartitioner::EmitReshard(const PValue& v, const Sharding& s,
                                                                    const HloInstruction& at) {
  std::string remat;
  ReshardSummary summary;
  std::vector<HloInstruction*> created;
  if (remarks_) b_.set_log(&created);
  absl::StatusOr<HloInstruction*> r = spmd::Reshard(b_, v, s, &remat, &summary);
  b_.set_log(nullptr);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat("spmd-partitioner: '", at.name(), "': ", r.status().message()));
  }
  if (!remat.empty()) {
    ++remat_count_;
    if (remarks_) remarks_->push_back({"spmd-partitioner", at.name(), false, remat});
  }
  NoteReshard(at, v.sharding, s, summary, created);
  return r;
}

void ComputationPartitioner::NoteReshard(const HloInstruction& h, const Sharding& from, const Sharding& to,
                                         const ReshardSummary& summary,
                                         const std::vector<HloInstruction*>& created) {
  if (!remarks_ || summary.kinds.empty()) return;
  weave::Remark r{"spmd-partitioner", h.name(), false,
                  absl::StrCat("reshard ", from.ToString(), " -> ", to.ToString(), ": ", summary.kinds, ", about ",
                               static_cast<int64_t>(summary.bytes), " bytes received per device")};
  r.analysis = true;
  for (const HloInstruction* c : created) {
    if (IsCollective(c->opcode())) r.about.push_back(c->name());
  }
  remarks_->push_back(std::move(r));
}

void ComputationPartitioner::Remark(const HloInstruction& h, bool applied, std::string message) {
  if (remarks_) remarks_->push_back({"spmd-partitioner", h.name(), applied, std::move(message)});
}

void ComputationPartitioner::Analysis(const HloInstruction& h, std::string message) {
  if (!remarks_) return;
  weave::Remark r{"spmd-partitioner", h.name(), false, std::move(message)};
  r.analysis = true;
  remarks_->push_back(std::move(r));
}

HloInstruction* ComputationPartitioner::Clone(const HloInstruction& h, Shape shape,
                                              std::vector<HloInstruction*> operands) {
  auto c = h.CloneWithNewOperands(std::move(shape), std::move(operands));
  c->sharding.reset();
  for (auto it = c->frontend_attributes.begin(); it != c->frontend_attributes.end();) {
    if (absl::StartsWith(it->first, "_weave_") && it->first != "_weave_xla_window") {
      it = c->frontend_attributes.erase(it);
    } else {
      ++it;
    }
  }
  return fresh_->AddInstruction(std::move(c));
}

absl::StatusOr<PValue> ComputationPartitioner::Replicated(const HloInstruction& h,
                                                          const std::string& why) {
  bool sharded = Target(&h).IsTiled();
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const PValue& v = Value(h.operand(i));
    const Sharding rep = Sharding::Broadcast(Sharding::Replicated(), v.global);
    sharded |= Sharding::Broadcast(v.sharding, v.global) != rep && !v.sharding.IsUnset();
    ASSIGN_OR_RETURN(HloInstruction* o, ValueIn(h.operand(i), rep));
    ops.push_back(o);
  }
  if (sharded && !why.empty()) {
    ++remat_count_;
    Remark(h, false, absl::StrCat(why, ": computed replicated (involuntary full rematerialization)"));
  }
  PValue out;
  out.global = h.shape();
  out.sharding = Sharding::Broadcast(Sharding::Replicated(), h.shape());
  out.hlo = Clone(h, h.shape(), std::move(ops));
  return out;
}

absl::StatusOr<HloComputation*> ComputationPartitioner::PartitionCallee(
    const HloComputation* callee, const std::vector<Sharding>& params, const Sharding* root) {
  auto fresh = std::make_unique<HloComputation>(callee->name() + ".spmd");
  HloComputation* c = ctx_->module->AddComputation(std::move(fresh));
  ComputationPartitioner sub(callee, c, ctx_, remarks_);
  RETURN_IF_ERROR(sub.Run(params, root));
  remat_count_ += sub.remat_count();
  return c;
}

namespace {

// An instruction of a manual region (its target manual in every leaf) cloned as it is, on its
// operands' values; Unimplemented when an operand is neither manual, replicated nor a tuple.
absl::StatusOr<PValue> CloneManual(ComputationPartitioner& cp, const HloInstruction& h,
                                   const Sharding& target) {
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    const PValue& v = cp.Value(h.operand(i));
    if (!v.sharding.IsManual() && !v.sharding.IsReplicated() && !v.global.IsTuple()) {
      return absl::UnimplementedError(absl::StrCat(
          "spmd-partitioner: '", h.name(), "' is manual but its operand '",
          h.operand(i)->name(), "' is ", v.sharding.ToString(), ": enter manual regions through "
          "SPMDFullToShardShape"));
    }
    ops.push_back(v.hlo);
  }
  return PValue{cp.Clone(h, h.shape(), std::move(ops)), target, h.shape()};
}

// XLA's HandleAllReduce: elementwise where it stays within the partitions' values, on the
// whole value when replicated across partitions, else computed replicated with a remark.
absl::StatusOr<PValue> PartitionAllReduce(ComputationPartitioner& cp, const HloInstruction& h,
                                          const Sharding& target) {
  // An all-reduce of one operand across replicas (no channel), or across partitions in
  // replicated or (partially) manual code (its groups kept within a manual subgroup by
  // CheckManualSubgroupCollective, which Partition runs first), is elementwise over the
  // partitions.
  if (h.operand_count() == 1 && (!h.channel_id.has_value() || target.HasManualSubgroup())) {
    return PartitionElementwise(cp, h);
  }
  // Replicated across partitions: on the whole value, as XLA computes it (not a remat).
  if (h.operand_count() == 1 && Sharding::Broadcast(target, h.shape()).IsReplicated()) return cp.Replicated(h, "");
  return cp.Replicated(h, "all-reduce across partitions of a tiled value outside manual code "
                          "(XLA's partitioner rejects it)");
}

// An outfeed sending each device's tile of its data operand, its outfeed_shape the local data's;
// InvalidArgument when its sharding does not read.
absl::StatusOr<PValue> PartitionOutfeed(ComputationPartitioner& cp, const HloInstruction& h,
                                        const Sharding& target) {
  // XLA's outfeed sharding lays out its data operand (ShapeOfSharding): each device sends
  // its tile; the token passes as it is.
  Sharding data = Sharding::Replicated();
  if (h.sharding) {
    absl::StatusOr<Sharding> s = Sharding::FromHlo(*h.sharding, ShapeOfSharding(h));
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spmd-partitioner: '", h.name(), "': ", s.status().message()));
    }
    data = *std::move(s);
  }
  std::vector<HloInstruction*> ops;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o,
                     cp.Operand(h, i,
                                i == 0 ? Sharding::Broadcast(data, h.operand(0)->shape())
                                       : Sharding::Replicated()));
    ops.push_back(o);
  }
  HloInstruction* local = cp.Clone(h, h.shape(), std::move(ops));
  // `outfeed_shape` names what is sent: the local data (XLA's verifier wants them equal).
  for (auto& [key, value] : *local->mutable_raw_attributes()) {
    if (key == "outfeed_shape") value = local->operand(0)->shape().ToString(true);
  }
  return PValue{local, target, h.shape()};
}

// A tuple of its operands, each resharded to its element of the target.
absl::StatusOr<PValue> PartitionTuple(ComputationPartitioner& cp, const HloInstruction& h,
                                      const Sharding& target) {
  std::vector<HloInstruction*> ops;
  std::vector<Shape> shapes;
  for (int64_t i = 0; i < h.operand_count(); ++i) {
    ASSIGN_OR_RETURN(HloInstruction* o,
                     cp.Operand(h, i, Sharding::ElementOf(target, h.shape(), i)));
    ops.push_back(o);
    shapes.push_back(o->shape());
  }
  return PValue{cp.Clone(h, Shape::Tuple(shapes), std::move(ops)),
                Sharding::Broadcast(target, h.shape()), h.shape()};
}

// The element of the tuple operand's value, in that element's sharding.
PValue PartitionGetTupleElement(ComputationPartitioner& cp, const HloInstruction& h) {
  const PValue& v = cp.Value(h.operand(0));
  const Sharding s = Sharding::ElementOf(v.sharding, v.global, h.tuple_index);
  HloInstruction* g = cp.Clone(
      h, v.hlo->shape().tuple_shapes.at(static_cast<size_t>(h.tuple_index)), {v.hlo});
  return PValue{g, s, h.shape()};
}

// A while loop in its target sharding: the init resharded to it, the condition and body
// partitioned with it (the condition's root replicated). Errors: the reshard's, the callees'.
absl::StatusOr<PValue> PartitionWhile(ComputationPartitioner& cp, const HloInstruction& h,
                                      const Sharding& target) {
  const Sharding s = Sharding::Broadcast(target, h.shape());
  ASSIGN_OR_RETURN(HloInstruction* init, cp.Operand(h, 0, s));
  const Sharding pred = Sharding::Replicated();
  ASSIGN_OR_RETURN(HloComputation* cond, cp.PartitionCallee(h.while_condition(), {s}, &pred));
  ASSIGN_OR_RETURN(HloComputation* body, cp.PartitionCallee(h.while_body(), {s}, &s));
  HloInstruction* w = cp.Clone(h, init->shape(), {init});
  *w->mutable_called_computations() = {cond, body};
  return PValue{w, s, h.shape()};
}

// A conditional in its target sharding: the selector replicated, each branch operand in its
// branch parameter's sharding, each branch partitioned with its root in the target.
absl::StatusOr<PValue> PartitionConditional(ComputationPartitioner& cp, const HloInstruction& h,
                                            const Sharding& target) {
  const Sharding s = Sharding::Broadcast(target, h.shape());
  ASSIGN_OR_RETURN(HloInstruction* selector, cp.Operand(h, 0, Sharding::Replicated()));
  std::vector<HloInstruction*> ops = {selector};
  std::vector<HloComputation*> branches;
  for (size_t b = 0; b < h.called_computations().size(); ++b) {
    const HloComputation* branch = h.called_computations()[b];
    const int64_t i = static_cast<int64_t>(b) + 1;
    const Sharding ps =
        branch->num_parameters() == 1 && branch->parameter(0)->sharding
            ? Sharding::FromHlo(*branch->parameter(0)->sharding, branch->parameter(0)->shape())
                  .value_or(Sharding::Replicated())
            : Sharding::Replicated();
    ASSIGN_OR_RETURN(HloInstruction* o, cp.Operand(h, i, ps));
    ops.push_back(o);
    ASSIGN_OR_RETURN(HloComputation* c, cp.PartitionCallee(branch, {ps}, &s));
    branches.push_back(c);
  }
  HloInstruction* c = cp.Clone(h, LocalShape(h.shape(), s), std::move(ops));
  *c->mutable_called_computations() = branches;
  return PValue{c, s, h.shape()};
}

// SPMDFullToShardShape / SPMDShardToFullShape: a copy of the operand in its own sharding
// (FullToShard zeroes its padding); InvalidArgument when the shard shape is not the local one.
absl::StatusOr<PValue> PartitionShardShapeCopy(ComputationPartitioner& cp, const HloInstruction& h,
                                               const Sharding& target) {
  SpmdBuilder& b = cp.b();
  const bool to_shard = IsCall(h, "SPMDFullToShardShape");
  // The operand in its own sharding; FullToShard zeroes its padding.
  const PValue& v = cp.Value(h.operand(0));
  HloInstruction* x = v.hlo;
  if (to_shard) {
    std::vector<int64_t> dims(static_cast<size_t>(v.global.rank()));
    for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
    x = b.MaskPadding(x, v.sharding, v.global, dims,
                      b.ScalarConst(v.global.element_type, 0));
  }
  HloInstruction* c = b.Add(HloOpcode::kCopy, to_shard ? h.shape() : x->shape(), {x}, "copy");
  if (c->shape().dims != x->shape().dims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spmd-partitioner: '", h.name(), "': the shard shape ", h.shape().ToString(false),
        " differs from the operand's local shape ", x->shape().ToString(false)));
  }
  // FullToShard: a manual value (its shape is already per device); ShardToFull: the
  // global value in its (target) sharding, whose local shape is the manual shape.
  return PValue{c, target, h.shape()};
}

// A custom call by its target: the manual-region boundaries, LayoutConstraint, TopK and the
// block-scaling calls by their rules; the rest (and where a rule does not apply) replicated.
absl::StatusOr<PValue> PartitionCustomCall(ComputationPartitioner& cp, const HloInstruction& h,
                                           const Sharding& target) {
  if (IsCall(h, "SPMDFullToShardShape") || IsCall(h, "SPMDShardToFullShape")) {
    return PartitionShardShapeCopy(cp, h, target);
  }
  // XLA's HandleCustomCall: a LayoutConstraint is elementwise (an identity on values); its
  // operand_layout_constraints name the local operand shape, the layout kept.
  if (IsCall(h, "LayoutConstraint") && h.operand_count() == 1 && h.shape().IsArray()) {
    absl::StatusOr<PValue> r = PartitionElementwise(cp, h);
    if (r.ok()) LocalLayoutConstraints(r->hlo);
    return r;
  }
  if (IsCall(h, "TopK")) {
    absl::StatusOr<PValue> r = PartitionTopK(cp, h);
    if (r.ok() || r.status().code() != absl::StatusCode::kUnimplemented) return r;
    return cp.Replicated(h, absl::StrCat("TopK: ", r.status().message()));
  }
  if (BlockScaledKindOf(h) != BlockScaledKind::kNone &&
      BlockScaledKindOf(h) != BlockScaledKind::kCudnnDot) {
    absl::StatusOr<PValue> r = PartitionBlockScaled(cp, h);
    if (r.ok() || r.status().code() != absl::StatusCode::kUnimplemented) return r;
    return cp.Replicated(h, absl::StrCat(h.custom_call_target(), ": ", r.status().message()));
  }
  return cp.Replicated(h, absl::StrCat("custom-call target \"", h.custom_call_target(),
                                       "\" has no partitioning rule"));
}

}  // namespace

absl::Status ComputationPartitioner::SumPartialOperands(const HloInstruction& h) {
  const HloOpcode op = h.opcode();
  // Partial values (unreduced shardings: each device of an addend group holds an addend) pass
  // only through tuples and elementwise ops (whose rule keeps them where the op is linear);
  // every other op reads its partial operands summed and computes the whole value.
  if (IsElementwise(op) || op == HloOpcode::kCopy || op == HloOpcode::kTuple ||
      op == HloOpcode::kGetTupleElement) {
    return absl::OkStatus();
  }
  for (const HloInstruction* o : h.operands()) {
    const int32_t slot = slots_.Slot(o);
    if (slot < 0 || !HoldsAddends(values_[static_cast<size_t>(slot)].sharding)) continue;
    PValue& v = values_[static_cast<size_t>(slot)];
    const Sharding whole = Summed(v.sharding);
    ASSIGN_OR_RETURN(HloInstruction* summed, Reshard(v, whole, h));
    v = PValue{summed, whole, v.global};
  }
  const int32_t own = slots_.Slot(&h);
  if (own >= 0 && HoldsAddends(targets_[static_cast<size_t>(own)])) {
    targets_[static_cast<size_t>(own)] = Summed(targets_[static_cast<size_t>(own)]);
  }
  return absl::OkStatus();
}

absl::StatusOr<PValue> ComputationPartitioner::Partition(const HloInstruction& h) {
  const HloOpcode op = h.opcode();
  RETURN_IF_ERROR(SumPartialOperands(h));
  const Sharding& target = Target(&h);
  RETURN_IF_ERROR(CheckManualSubgroupCollective(h, target));
  // Manual regions are already per device: clone as is (a tuple manual in every leaf too, such
  // as a manual loop's state).
  if (AllManual(target) && !IsCall(h, "SPMDFullToShardShape")) return CloneManual(*this, h, target);
  if (IsElementwise(op) || op == HloOpcode::kCopy) return PartitionElementwise(*this, h);
  switch (op) {
    case HloOpcode::kParameter: {
      // Handled by Run.
      return absl::InternalError("parameter partitioned twice");
    }
    case HloOpcode::kConstant:
      return PartitionConstant(*this, h);
    case HloOpcode::kIota:
      return PartitionIota(*this, h);
    case HloOpcode::kBroadcast:
      return PartitionBroadcast(*this, h);
    case HloOpcode::kTranspose:
      return PartitionTranspose(*this, h);
    case HloOpcode::kReshape:
      return PartitionReshape(*this, h);
    case HloOpcode::kReduce:
      return PartitionReduce(*this, h);
    case HloOpcode::kDot:
      return PartitionDot(*this, h);
    case HloOpcode::kScan: {
      absl::StatusOr<PValue> r = PartitionScan(*this, h);
      if (r.ok() || r.status().code() != absl::StatusCode::kUnimplemented) return r;
      return Replicated(h, absl::StrCat("scan: ", r.status().message()));
    }
    case HloOpcode::kRaggedDot: {
      absl::StatusOr<PValue> r = PartitionRaggedDot(*this, h);
      if (r.ok() || r.status().code() != absl::StatusCode::kUnimplemented) return r;
      return Replicated(h, absl::StrCat("ragged-dot: ", r.status().message()));
    }
    case HloOpcode::kConvolution:
      return PartitionConvolution(*this, h);
    case HloOpcode::kGather:
      return PartitionGather(*this, h);
    case HloOpcode::kScatter:
      return PartitionScatter(*this, h);
    case HloOpcode::kAllReduce:
      return PartitionAllReduce(*this, h, target);
    case HloOpcode::kSlice:
    case HloOpcode::kPad:
    case HloOpcode::kConcatenate:
    case HloOpcode::kReverse:
    case HloOpcode::kSort:
    case HloOpcode::kReduceWindow:
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
    case HloOpcode::kSelectAndScatter:
    case HloOpcode::kFft:
      return PartitionAlongUntiledDims(*this, h);
    case HloOpcode::kOutfeed:
      return PartitionOutfeed(*this, h, target);
    case HloOpcode::kDynamicSlice:
      return PartitionDynamicSlice(*this, h);
    case HloOpcode::kDynamicUpdateSlice:
      return PartitionDynamicUpdateSlice(*this, h);
    case HloOpcode::kTuple:
      return PartitionTuple(*this, h, target);
    case HloOpcode::kGetTupleElement:
      return PartitionGetTupleElement(*this, h);
    case HloOpcode::kWhile:
      return PartitionWhile(*this, h, target);
    case HloOpcode::kConditional:
      return PartitionConditional(*this, h, target);
    case HloOpcode::kCustomCall:
      return PartitionCustomCall(*this, h, target);
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kRng:
      return PartitionRng(*this, h);
    case HloOpcode::kAfterAll:
    case HloOpcode::kRngBitGenerator:
      return Replicated(h, "");
    default:
      return Replicated(h, absl::StrCat("no partitioning rule for ", std::string(HloOpcodeString(op))));
  }
}

absl::Status ComputationPartitioner::Run(const std::vector<Sharding>& params,
                                         const Sharding* root) {
  const int64_t n = ctx_->num_partitions;
  const std::vector<HloInstruction*> order = old_->MakeInstructionPostOrder();
  slots_.Reset(order);
  targets_.resize(order.size());
  values_.resize(order.size());
  for (size_t slot = 0; slot < order.size(); ++slot) {
    HloInstruction* h = order[slot];
    Sharding s = Sharding::Broadcast(Sharding::Replicated(), h->shape());
    if (h->opcode() == HloOpcode::kParameter && h->parameter_number < static_cast<int64_t>(params.size())) {
      s = params[static_cast<size_t>(h->parameter_number)];
    } else if (h->sharding && h->opcode() != HloOpcode::kOutfeed) {
      absl::StatusOr<Sharding> p = Sharding::FromHlo(*h->sharding, h->shape());
      if (!p.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("spmd-partitioner: '", h->name(), "': ", p.status().message()));
      }
      s = *std::move(p);
    }
    if (s.IsUnset() || s.IsUnknown()) s = Sharding::Replicated();
    s = Sharding::Broadcast(s, h->shape());
    RETURN_IF_ERROR(CheckDevices(s, n, *h));
    targets_[slot] = std::move(s);
  }
  // Each local instruction that is some old instruction's value, with the first such old one
  // (whose name it takes at the end).
  std::vector<std::pair<HloInstruction*, const HloInstruction*>> main_of;
  absl::flat_hash_set<const HloInstruction*> claimed;
  claimed.reserve(order.size());
  for (size_t slot = 0; slot < order.size(); ++slot) {
    HloInstruction* h = order[slot];
    const Sharding& target = targets_[slot];
    PValue v;
    if (h->opcode() == HloOpcode::kParameter) {
      // The local parameter keeps its number: parameters may be written in any order, and the
      // caller (XLA's runtime, a while loop, `weave compare`) passes arguments by number.
      auto param = HloInstruction::Create(HloOpcode::kParameter, LocalShape(h->shape(), target));
      param->parameter_number = h->parameter_number;
      param->set_name(h->name());
      HloInstruction* p = fresh_->AddInstruction(std::move(param));
      p->metadata = h->metadata;
      v = PValue{p, target, h->shape()};
    } else {
      ASSIGN_OR_RETURN(PValue r, Partition(*h));
      v = std::move(r);
    }
    if (claimed.insert(v.hlo).second && v.hlo->parent() == fresh_) {
      main_of.emplace_back(v.hlo, h);
      if (v.hlo->metadata.empty()) v.hlo->metadata = h->metadata;
    }
    // Into the target sharding.
    const Sharding vs = Sharding::Broadcast(v.sharding, v.global);
    if (vs != target) {
      ASSIGN_OR_RETURN(HloInstruction* r, Reshard(v, target, *h));
      v = PValue{r, target, h->shape()};
    }
    values_[slot] = std::move(v);
  }
  if (old_->root() == nullptr || Value(old_->root()).hlo == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spmd-partitioner: computation '", old_->name(), "' has no root"));
  }
  PValue rv = Value(old_->root());
  if (root != nullptr && Sharding::Broadcast(*root, rv.global) != Sharding::Broadcast(rv.sharding, rv.global)) {
    ASSIGN_OR_RETURN(HloInstruction* r, Reshard(rv, *root, *old_->root()));
    rv.hlo = r;
  }
  fresh_->set_root(rv.hlo);
  // Names: each old instruction's main local op takes its name once the old computation is gone.
  for (auto& [local, old] : main_of) {
    local->set_name(old->name());
  }
  return absl::OkStatus();
}

absl::Status CheckDeclinedCalls(const HloModule& module) {
  std::vector<std::string> declined;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (IsCall(*h, "CustomSPMDPartitioning")) {
        std::string op_name;
        const size_t p = h->metadata.find("op_name=\"");
        if (p != std::string::npos) {
          const size_t e = h->metadata.find('"', p + 9);
          op_name = h->metadata.substr(p + 9, e == std::string::npos ? std::string::npos : e - p - 9);
        }
        declined.push_back(absl::StrCat("'", h->name(), "' (custom_call_target=\"",
                                        h->custom_call_target(), "\", op_name=\"", op_name, "\")"));
      }
    }
  }
  if (!declined.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "module '", module.name(), "' has ", declined.size(),
        " CustomSPMDPartitioning call", declined.size() == 1 ? "" : "s", ", whose partitioner is "
        "a Python callback of the tracing process (its backend_config is a process-local "
        "handle): ", absl::StrJoin(declined, ", "), ". Give Weave a dump taken after XLA's "
        "`spmd-partitioning` pass instead (--xla_dump_to with --xla_dump_hlo_pass_re=spmd-partitioning)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SpmdPartitioner::Run(HloModule* module) {
  HloComputation* entry = module->entry();
  if (entry == nullptr) return absl::InvalidArgumentError("module has no entry computation");
  RETURN_IF_ERROR(CheckDeclinedCalls(*module));
  for (auto& [name, message] : ExpandForPartitioning(module)) {
    if (remarks_) remarks_->push_back({"spmd-partitioner", name, true, std::move(message)});
  }
  SpmdContext ctx;
  ctx.module = module;
  ctx.num_partitions = std::max<int64_t>(1, module->num_partitions);
  ctx.replica_count = std::max<int64_t>(1, module->replica_count);
  ctx.next_channel_id = module->NextChannelId();
  ctx.xla_windowed_threshold_mib = xla_windowed_threshold_mib_;
  ctx.enzyme_comms_opt = enzyme_comms_opt_;
  std::vector<Sharding> params;
  for (int64_t i = 0; i < entry->num_parameters(); ++i) {
    const HloInstruction* p = entry->parameter(i);
    Sharding s = Sharding::Replicated();
    if (p->sharding) {
      absl::StatusOr<Sharding> ps = Sharding::FromHlo(*p->sharding, p->shape());
      if (!ps.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("spmd-partitioner: '", p->name(), "': ", ps.status().message()));
      }
      s = *ps;
    }
    params.push_back(Sharding::Broadcast(s, p->shape()));
  }
  Sharding root_sharding = Sharding::Replicated();
  if (entry->root()->sharding) {
    absl::StatusOr<Sharding> rs = Sharding::FromHlo(*entry->root()->sharding, entry->root()->shape());
    if (rs.ok()) root_sharding = *rs;
  }
  root_sharding = Sharding::Broadcast(root_sharding, entry->root()->shape());
  // Every instruction gets at least one local instruction, each with a name of its own.
  int64_t instructions = 0;
  for (const HloComputation* comp : module->computations()) instructions += comp->instruction_count();
  module->ReserveNames(static_cast<size_t>(instructions));
  auto fresh = std::make_unique<HloComputation>(entry->name() + ".spmd");
  HloComputation* c = module->AddComputation(std::move(fresh));
  const std::string entry_name = entry->name();
  ComputationPartitioner cp(entry, c, &ctx, remarks_);
  RETURN_IF_ERROR(cp.Run(params, &root_sharding));
  module->set_entry(c);
  RETURN_IF_ERROR(module->RemoveComputation(entry));
  module->RemoveUnusedComputations();
  // Computation names back to the originals; shardings only on entry parameters and root.
  for (HloComputation* comp : module->computations()) {
    if (absl::EndsWith(comp->name(), ".spmd")) comp->set_name(comp->name().substr(0, comp->name().size() - 5));
    for (HloInstruction* h : comp->instructions()) h->sharding.reset();
  }
  for (int64_t i = 0; i < c->num_parameters(); ++i) {
    c->parameter(i)->sharding = params[static_cast<size_t>(i)].ToHlo();
  }
  c->root()->sharding = root_sharding.ToHlo();
  // Header.
  module->num_partitions = ctx.num_partitions;
  module->has_num_partitions = ctx.num_partitions > 1 || module->has_num_partitions;
  auto& attrs = module->header_attributes;
  attrs.erase(std::remove_if(attrs.begin(), attrs.end(),
                             [](const auto& a) {
                               return absl::StartsWith(a.first, "allow_spmd_sharding_propagation");
                             }),
              attrs.end());
  module->UpdateEntryComputationLayout();
  AddAnalysisRemark(module->name(),
                    absl::StrCat("partitioned for ", ctx.num_partitions, " partitions; ",
                                 cp.remat_count(), " involuntary full rematerializations"));
  return true;
}

WEAVE_REGISTER_PASS(
    "spmd-partitioner", [](const PassOptions& o) -> absl::StatusOr<std::unique_ptr<HloPass>> {
      ASSIGN_OR_RETURN(double t, o.GetDouble("xla_gpu_threshold_for_windowed_einsum_mib", 100000));
      ASSIGN_OR_RETURN(bool enzyme, o.GetBool("xla_enable_enzyme_comms_opt", false));
      return std::make_unique<SpmdPartitioner>(t, enzyme);
    });

}  // namespace weave::spmd
