// Shape checks of the collectives: replica groups, all-gather, reduce-scatter, all-reduce,
// all-to-all, collective-permute (analysis/verifier_checker.h), after XLA's ShapeInference.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "analysis/verifier_checker.h"
#include "hlo/status_macros.h"

namespace weave::verifier_internal {

// Replica groups: every id at most once over all groups, groups of one size.
absl::Status Checker::Groups() const {
  // XLA's GetCollectiveOpGroupMode: global device ids need a channel.
  if (h_.use_global_device_ids && !h_.channel_id.has_value()) {
    return Err("use_global_device_ids=true needs a channel_id");
  }
  if (!h_.replica_groups.has_value() || h_.replica_groups->groups.empty()) {
    // XLA's CheckReplicaGroups: flattened ids (global device ids) name their groups.
    if (h_.use_global_device_ids) return Err("use_global_device_ids=true needs explicit replica_groups (flattened ids)");
    return absl::OkStatus();
  }
  const std::string text = h_.replica_groups->ToString();
  // As XLA's verifier (CheckReplicaGroups): no empty group; the ids are exactly 0..n-1 (n the
  // ids written); groups of one size, except for all-reduce ({{0},{1,3},{2}} is valid there).
  const HloOpcode op = h_.opcode();
  const bool uniform = op != HloOpcode::kAllReduce && op != HloOpcode::kAllReduceStart &&
                       op != HloOpcode::kCollectiveReduce;
  size_t n = 0, size = 0;
  for (const auto& g : h_.replica_groups->groups) {
    if (g.empty()) return Err(absl::StrCat("replica_groups=", text, " has an empty group"));
    if (size == 0) size = g.size();
    if (uniform && g.size() != size) {
      return Err(absl::StrCat("replica_groups=", text, " has groups of different sizes"));
    }
    n += g.size();
  }
  std::vector<bool> seen(n, false);
  for (const auto& g : h_.replica_groups->groups) {
    for (int64_t id : g) {
      if (id < 0 || id >= static_cast<int64_t>(n)) {
        return Err(absl::StrCat("replica_groups=", text, ": id ", id, " is outside [0, ", n,
                                ") (the groups must name ids 0 to ", n - 1, ")"));
      }
      if (seen[static_cast<size_t>(id)]) {
        return Err(absl::StrCat("replica_groups=", text, ": id ", id, " appears more than once"));
      }
      seen[static_cast<size_t>(id)] = true;
    }
  }
  // n is the count of the ids the mode names (XLA's CollectiveOpGroupMode): replicas without a
  // channel and, for the ops with a use_global_device_ids attribute (all-reduce, all-gather,
  // reduce-scatter), with a channel but no global ids; partitions for the others with a channel;
  // replicas x partitions with global ids. A count of 1 (unset) is not checked, as in XLA.
  const HloModule* m = h_.parent() != nullptr ? h_.parent()->parent() : nullptr;
  if (m == nullptr) return absl::OkStatus();
  const bool has_global_attr = op == HloOpcode::kAllReduce || op == HloOpcode::kAllReduceStart ||
                               op == HloOpcode::kAllGather || op == HloOpcode::kAllGatherStart ||
                               op == HloOpcode::kReduceScatter;
  int64_t want = m->replica_count;
  const char* what = "replicas";
  if (h_.use_global_device_ids) {
    want = m->replica_count * m->num_partitions;
    what = "devices (replica_count x num_partitions)";
  } else if (h_.channel_id.has_value() && !has_global_attr) {
    want = m->num_partitions;
    what = "partitions";
  }
  if (want != 1 && static_cast<int64_t>(n) != want) {
    return Err(absl::StrCat("replica_groups=", text, " names ", n, " ids, but the module has ", want, " ", what));
  }
  return absl::OkStatus();
}

// The devices one group holds, as XLA's GetSubgroupSize counts them per CollectiveOpGroupMode:
// explicit groups give their size, times the partition count in cross-replica-and-partition mode
// (a channel, no global ids, on an op with that attribute: each replica group spans every
// partition; with one replica, groups naming other ids than 0 are partition ids, Weave's
// leniency, and count as they are); empty groups mean every replica, every partition or every device, per the mode,
// and are counted only when the module states its partitions (`num_partitions=`), since `weave
// run --num-partitions` may set them otherwise. 0 when unknown.
int64_t Checker::KnownGroupSize() const {
  const HloOpcode op = h_.opcode();
  const bool has_global_attr = op == HloOpcode::kAllReduce || op == HloOpcode::kAllReduceStart ||
                               op == HloOpcode::kAllGather || op == HloOpcode::kAllGatherStart ||
                               op == HloOpcode::kReduceScatter;
  const bool channel = h_.channel_id.has_value();
  const bool replica_and_partition = channel && has_global_attr && !h_.use_global_device_ids;
  const HloModule* m = h_.parent() != nullptr ? h_.parent()->parent() : nullptr;
  if (h_.replica_groups.has_value() && !h_.replica_groups->groups.empty()) {
    const int64_t size = static_cast<int64_t>(h_.replica_groups->groups[0].size());
    if (!replica_and_partition) return size;
    if (m == nullptr) return 0;
    // With one replica, groups naming ids other than 0 are read as partition ids (the
    // evaluator's reading, evaluator_collectives.cc DeviceGroups): their own size.
    bool only_zero = true;
    for (const auto& g : h_.replica_groups->groups) {
      for (int64_t id : g) only_zero &= id == 0;
    }
    if (m->replica_count <= 1 && !only_zero) return size;
    return size * std::max<int64_t>(1, m->num_partitions);
  }
  if (m == nullptr || !m->has_num_partitions) return 0;
  const int64_t replicas = std::max<int64_t>(1, m->replica_count);
  const int64_t partitions = std::max<int64_t>(1, m->num_partitions);
  if (!channel) return replicas;
  if (h_.use_global_device_ids || replica_and_partition) return replicas * partitions;
  return partitions;
}

// Shapes of the result leaves (one per operand for multi-operand collectives).
absl::Status Checker::PerOperandResults(std::vector<const Shape*>* out) const {
  if (h_.operand_count() == 1 && !h_.shape().IsTuple()) {
    out->push_back(&h_.shape());
    return absl::OkStatus();
  }
  if (!h_.shape().IsTuple() ||
      static_cast<int64_t>(h_.shape().tuple_shapes.size()) != h_.operand_count()) {
    return Err(absl::StrCat("result ", ShapeText(h_.shape()), " must be a tuple of ",
                            h_.operand_count(), " arrays, one per operand"));
  }
  for (const Shape& s : h_.shape().tuple_shapes) out->push_back(&s);
  return absl::OkStatus();
}

absl::Status Checker::ScatterGather(bool gather) {
  if (h_.operand_count() < 1) return Err("expects at least one operand");
  RETURN_IF_ERROR(Groups());
  if (h_.dimensions.size() != 1) {
    return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
  }
  const int64_t d = h_.dimensions[0];
  std::vector<const Shape*> results;
  RETURN_IF_ERROR(PerOperandResults(&results));
  const int64_t n = KnownGroupSize();
  for (int64_t i = 0; i < h_.operand_count(); ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
    const Shape& in = Op(i);
    const Shape& out = *results[static_cast<size_t>(i)];
    if (d < 0 || d >= in.rank()) {
      return Err(absl::StrCat("dimension ", d, " is out of range for operand ", ShapeText(in)));
    }
    if (out.element_type != in.element_type || out.rank() != in.rank()) {
      return Err(absl::StrCat("result ", ShapeText(out), " does not match operand ",
                              ShapeText(in), " in element type or rank"));
    }
    for (int64_t k = 0; k < in.rank(); ++k) {
      const int64_t a = in.dims[static_cast<size_t>(k)], b = out.dims[static_cast<size_t>(k)];
      if (a < 0 || b < 0) continue;
      if (k != d) {
        if (a != b) {
          return Err(absl::StrCat("result ", ShapeText(out), " differs from operand ",
                                  ShapeText(in), " in dimension ", k));
        }
        continue;
      }
      if (gather) {
        if (n > 0 ? b != a * n : (a == 0 ? b != 0 : b % a != 0)) {
          return Err(absl::StrCat("result dimension ", d, " has size ", b, ", expected ", a,
                                  " x group size", n > 0 ? absl::StrCat(" ", n) : "", ""));
        }
      } else {
        if (n > 0 ? (a != b * n) : (b == 0 ? a != 0 : a % b != 0)) {
          return Err(absl::StrCat("operand dimension ", d, " has size ", a,
                                  ", expected result size ", b, " x group size",
                                  n > 0 ? absl::StrCat(" ", n) : ""));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::ReduceScatter() {
  RETURN_IF_ERROR(ScatterGather(false));
  std::vector<PrimitiveType> acc;
  for (const HloInstruction* o : h_.operands()) acc.push_back(o->shape().element_type);
  return Reducer({acc.empty() ? PrimitiveType::kInvalid : acc[0]});
}

absl::Status Checker::AllReduce() {
  if (h_.operand_count() < 1) return Err("expects at least one operand");
  RETURN_IF_ERROR(Groups());
  std::vector<const Shape*> results;
  RETURN_IF_ERROR(PerOperandResults(&results));
  for (int64_t i = 0; i < h_.operand_count(); ++i) {
    if (!ShapesMatch(*results[static_cast<size_t>(i)], Op(i))) {
      return Err(absl::StrCat("result ", ShapeText(*results[static_cast<size_t>(i)]),
                              " differs from operand ", i, " ", ShapeText(Op(i))));
    }
  }
  return Reducer({Op(0).element_type});
}

absl::Status Checker::AllToAll() {
  if (h_.operand_count() < 1) return Err("expects at least one operand");
  RETURN_IF_ERROR(Groups());
  if (h_.dimensions.empty()) {
    // The tuple form (XLA's InferAllToAllTupleShape and HandleAllToAll): one operand per group
    // member, all of one shape (layouts too, where both state one).
    for (int64_t i = 1; i < h_.operand_count(); ++i) {
      const bool layouts = Op(0).layout.has_value() && Op(i).layout.has_value();
      if (!ShapesMatch(Op(i), Op(0)) || (layouts && Op(i).MinorToMajor() != Op(0).MinorToMajor())) {
        return Err(absl::StrCat("operand ", i, " ", Op(i).ToString(true), " differs from operand 0 ",
                                Op(0).ToString(true), " (the tuple form takes operands of one shape)"));
      }
    }
    if (const int64_t n = KnownGroupSize(); n > 0 && h_.operand_count() != n) {
      return Err(absl::StrCat("the tuple form takes one operand per group member: ", h_.operand_count(),
                              " operands for a group of ", n));
    }
    std::vector<const Shape*> results;
    RETURN_IF_ERROR(PerOperandResults(&results));
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      if (!ShapesMatch(*results[static_cast<size_t>(i)], Op(i))) {
        return Err(absl::StrCat("result ", ShapeText(*results[static_cast<size_t>(i)]),
                                " differs from operand ", i, " ", ShapeText(Op(i))));
      }
    }
    return absl::OkStatus();
  }
  if (h_.dimensions.size() != 1) {
    return Err(absl::StrCat("dimensions=", Dims(h_.dimensions), " must name one dimension"));
  }
  RETURN_IF_ERROR(OperandCount(1));
  RETURN_IF_ERROR(ArrayOperand(0));
  const int64_t d = h_.dimensions[0];
  if (d < 0 || d >= Op(0).rank()) {
    return Err(absl::StrCat("split dimension ", d, " is out of range for ", ShapeText(Op(0))));
  }
  const int64_t n = KnownGroupSize();
  const int64_t size = Op(0).dims[static_cast<size_t>(d)];
  if (n > 0 && size >= 0 && size % n != 0) {
    return Err(absl::StrCat("split dimension ", d, " of size ", size,
                            " is not divisible by the group size ", n));
  }
  return ResultIs(Op(0), "operand shape");
}

namespace {

// XLA's CheckBufferOffset: the start indices of an in-place collective-permute's buffer of rank
// `rank` are a tuple of `rank` arrays (scalars), or a tuple of such tuples (one per pair a device
// takes part in).
std::string BufferOffsetError(const Shape& offset, int64_t rank) {
  if (!offset.IsTuple()) return "is not a tuple";
  bool arrays = true, tuples = true;
  for (const Shape& e : offset.tuple_shapes) {
    arrays = arrays && e.IsArray();
    tuples = tuples && e.IsTuple();
  }
  if (!arrays && !tuples) return "is neither a tuple of arrays nor a tuple of tuples";
  if (tuples) {
    for (const Shape& e : offset.tuple_shapes) {
      if (static_cast<int64_t>(e.tuple_shapes.size()) != rank) return "has a tuple whose length is not the buffer's rank";
    }
  } else if (static_cast<int64_t>(offset.tuple_shapes.size()) != rank) {
    return "does not hold one index per dimension of the buffer";
  }
  return "";
}

}  // namespace

// XLA's HandleCollectivePermute(Start): one or several array operands (combined; the result is
// the operand's shape or the tuple of them), or the in-place form (slice_sizes given): input,
// output, input and output start indices, the result the output buffer's shape. A device may
// be a source (and a target) once, or in the in-place form as many times as it has starts.
absl::Status Checker::CollectivePermute() {
  const bool in_place = h_.GetRawAttribute("slice_sizes") != nullptr;
  const bool start = h_.opcode() == HloOpcode::kCollectivePermuteStart;
  if (in_place && h_.operand_count() != 4) {
    return Err(absl::StrCat("the in-place form (slice_sizes) expects 4 operands (input, output, input and "
                            "output start indices), got ", h_.operand_count()));
  }
  if (h_.operand_count() < 1) return Err("expects at least one operand");
  int64_t allowed = 1;
  if (in_place) {
    const Shape& in = Op(0);
    const Shape& out = Op(1);
    if (in.IsArray() != out.IsArray() ||
        (in.IsTuple() && in.tuple_shapes.size() != out.tuple_shapes.size())) {
      return Err(absl::StrCat("input buffer ", ShapeText(in), " and output buffer ", ShapeText(out),
                              " do not match"));
    }
    for (int64_t k : {2, 3}) {
      const Shape& buffer = Op(k - 2);
      const Shape& offset = Op(k);
      std::string why;
      if (buffer.IsArray()) {
        why = BufferOffsetError(offset, buffer.rank());
      } else if (!offset.IsTuple() || offset.tuple_shapes.size() != buffer.tuple_shapes.size()) {
        why = "does not hold one entry per buffer";
      } else {
        for (size_t i = 0; i < buffer.tuple_shapes.size() && why.empty(); ++i) {
          why = BufferOffsetError(offset.tuple_shapes[i], buffer.tuple_shapes[i].rank());
        }
      }
      if (!why.empty()) {
        return Err(absl::StrCat(k == 2 ? "input" : "output", " start indices ", ShapeText(offset), " ", why));
      }
    }
    const Shape& first = Op(2);
    allowed = Op(0).IsArray() ? static_cast<int64_t>(first.tuple_shapes.size())
                              : (first.tuple_shapes.empty() ? 1 : static_cast<int64_t>(first.tuple_shapes[0].tuple_shapes.size()));
    allowed = std::max<int64_t>(allowed, 1);
  } else {
    for (int64_t i = 0; i < h_.operand_count(); ++i) {
      RETURN_IF_ERROR(ArrayOperand(i));
    }
  }
  // Partition ids with a channel, replica ids without (when the module states its counts; a
  // replica count above 1 is stated by being there).
  const HloModule* m = h_.parent() != nullptr ? h_.parent()->parent() : nullptr;
  int64_t limit = -1;
  if (m != nullptr && h_.channel_id.has_value()) {
    limit = m->has_num_partitions ? m->num_partitions : -1;
  } else if (m != nullptr) {
    limit = m->has_num_partitions || m->replica_count > 1 ? m->replica_count : -1;
  }
  std::map<int64_t, int64_t> sources, targets;
  for (const auto& [s, t] : h_.source_target_pairs()) {
    if (s < 0 || t < 0) {
      return Err(absl::StrCat("source_target_pairs has a negative id in {", s, ",", t, "}"));
    }
    if (limit > 0 && (s >= limit || t >= limit)) {
      return Err(absl::StrCat("source_target_pairs: {", s, ",", t, "} is out of range for ", limit,
                              h_.channel_id.has_value() ? " partitions" : " replicas"));
    }
    auto times = [&](int64_t allowed_times) {
      return allowed_times == 1 ? std::string("more than once") : absl::StrCat("more than ", allowed_times, " times");
    };
    if (++sources[s] > allowed) {
      return Err(absl::StrCat("source_target_pairs: source ", s, " appears ", times(allowed)));
    }
    if (++targets[t] > allowed) {
      return Err(absl::StrCat("source_target_pairs: target ", t, " appears ", times(allowed)));
    }
  }
  // The result: the output buffer (in place), the operand, or the tuple of the operands; a
  // -start wraps it as (sent, received, context...).
  Shape moved = in_place ? Op(1) : Op(0);
  if (!in_place && h_.operand_count() > 1) {
    std::vector<Shape> parts;
    for (int64_t i = 0; i < h_.operand_count(); ++i) parts.push_back(Op(i));
    moved = Shape::Tuple(std::move(parts));
  }
  if (!start) return ResultIs(moved, in_place ? "output buffer's shape" : "operand shape");
  const Shape& r = h_.shape();
  const Shape& sent = in_place ? Op(0) : moved;
  if (!r.IsTuple() || r.tuple_shapes.size() < 2 || !ShapesMatch(r.tuple_shapes[0], sent) ||
      !ShapesMatch(r.tuple_shapes[1], moved)) {
    return Err(absl::StrCat("result ", ShapeText(r), " is not (", ShapeText(sent), ", ", ShapeText(moved),
                            ", context...)"));
  }
  return absl::OkStatus();
}

// recv(token) -> (data, u32[] context, token[]) (XLA's HandleRecv); recv-done reads a recv.
absl::Status Checker::Recv() {
  const Shape& r = h_.shape();
  if (!r.IsTuple() || r.tuple_shapes.size() != 3 || r.tuple_shapes[2].element_type != PrimitiveType::TOKEN) {
    return Err(absl::StrCat("result ", ShapeText(r), " must be a tuple (data, u32[], token[])"));
  }
  return absl::OkStatus();
}

// collective-reduce(data..., [root indices]) (XLA's HandleCollectiveReduce and
// InferCollectiveReduceShape): groups of any size; array data operands; with
// has_dynamic_root=true a last s32[k] operand, one root per data operand; the result is the
// data operand's shape, or the tuple of them; the reducer is a scalar computation of the first
// data operand's type.
absl::Status Checker::CollectiveReduce() {
  RETURN_IF_ERROR(Groups());
  const std::string* dynamic = h_.GetRawAttribute("has_dynamic_root");
  const bool has_root = dynamic != nullptr && *dynamic == "true";
  const int64_t data = h_.operand_count() - (has_root ? 1 : 0);
  if (data < 1) return Err("expects at least one data operand");
  if (has_root) {
    const Shape& r = Op(data);
    if (!r.IsArray() || r.element_type != PrimitiveType::S32 || r.rank() != 1 || r.dims[0] != data) {
      return Err(absl::StrCat("with has_dynamic_root=true the last operand must be s32[", data, "], got ", ShapeText(r)));
    }
  }
  std::vector<Shape> parts;
  std::vector<PrimitiveType> types;
  for (int64_t i = 0; i < data; ++i) {
    RETURN_IF_ERROR(ArrayOperand(i));
    parts.push_back(Op(i));
    types.push_back(Op(i).element_type);
  }
  RETURN_IF_ERROR(ResultIs(data == 1 ? parts[0] : Shape::Tuple(parts), "data operands' shape"));
  return Reducer({types[0]});  // one scalar computation for every data operand, as all-reduce's
}

absl::Status Checker::RaggedAllToAll() {
  // XLA's InferRaggedAllToAllShape: (input, output, input_offsets, send_sizes, output_offsets,
  // recv_sizes); the four index operands are integer arrays of rank 1 or 2, of one shape; the
  // result is the output buffer's shape.
  RETURN_IF_ERROR(OperandCount(6));
  RETURN_IF_ERROR(Groups());
  for (int64_t i = 2; i < 6; ++i) {
    const Shape& s = Op(i);
    if (!s.IsArray() || (s.rank() != 1 && s.rank() != 2) || !IsInteger(s.element_type)) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(s), " must be an integer array of rank 1 or 2"));
    }
    if (!ShapesMatch(s, Op(2))) {
      return Err(absl::StrCat("operand ", i, " ", ShapeText(s), " differs from operand 2 ", ShapeText(Op(2)),
                              " (the offsets and sizes have one shape)"));
    }
  }
  return ResultIs(Op(1), "the output buffer's shape");
}

}  // namespace weave::verifier_internal
