#include "analysis/cost.h"

namespace weave {

int64_t DotFlops(const HloInstruction& dot) {
  if (dot.opcode() != HloOpcode::kDot || dot.operand_count() < 1) return 0;
  const Shape& lhs = dot.operand(0)->shape();
  if (!lhs.IsArray() || !dot.shape().IsArray()) return 0;
  int64_t k = 1;
  for (int64_t d : dot.dot_dims().lhs_contracting) {
    if (d < 0 || d >= lhs.rank()) return 0;
    k *= lhs.dims[static_cast<size_t>(d)];
  }
  return 2 * dot.shape().ElementCount() * k;
}

int64_t CollectiveGroupSize(const HloInstruction& instr) {
  if (instr.replica_groups.has_value() && !instr.replica_groups->groups.empty()) {
    return static_cast<int64_t>(instr.replica_groups->groups[0].size());
  }
  if (instr.opcode() == HloOpcode::kCollectivePermute ||
      instr.opcode() == HloOpcode::kCollectivePermuteStart) {
    return 2;  // pairs: one sender, one receiver
  }
  const HloModule* module = instr.parent() ? instr.parent()->parent() : nullptr;
  if (module == nullptr) return 1;
  if (!instr.channel_id.has_value()) return module->replica_count;
  if (instr.use_global_device_ids) return module->num_partitions * module->replica_count;
  return module->num_partitions;
}

namespace {
int64_t OperandBytes(const HloInstruction& instr) {
  int64_t b = 0;
  for (const HloInstruction* o : instr.operands()) b += o->shape().ByteSize();
  return b;
}
}  // namespace

std::optional<CollectiveCost> CollectiveBytes(const HloInstruction& instr) {
  CollectiveCost c;
  c.group_size = CollectiveGroupSize(instr);
  const int64_t n = c.group_size < 1 ? 1 : c.group_size;
  switch (instr.opcode()) {
    case HloOpcode::kAllGather:
      c.data_bytes = instr.shape().ByteSize();
      c.bytes = c.data_bytes * (n - 1) / n;
      return c;
    case HloOpcode::kAllGatherStart: {
      // Shape (operands..., results...) as a tuple: the results are the second half.
      const Shape& s = instr.shape();
      if (s.IsTuple() && s.tuple_shapes.size() == 2) {
        c.data_bytes = s.tuple_shapes[1].ByteSize();
      } else {
        c.data_bytes = s.ByteSize() - OperandBytes(instr);
      }
      c.bytes = c.data_bytes * (n - 1) / n;
      return c;
    }
    case HloOpcode::kReduceScatter:
      c.data_bytes = OperandBytes(instr);
      c.bytes = c.data_bytes * (n - 1) / n;
      return c;
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
      c.data_bytes = OperandBytes(instr);
      c.bytes = 2 * c.data_bytes * (n - 1) / n;
      return c;
    case HloOpcode::kAllToAll:
    case HloOpcode::kRaggedAllToAll:
      c.data_bytes = OperandBytes(instr);
      c.bytes = c.data_bytes * (n - 1) / n;
      return c;
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
      c.data_bytes = instr.operand_count() > 0 ? instr.operand(0)->shape().ByteSize() : 0;
      c.bytes = c.data_bytes;
      return c;
    case HloOpcode::kAsyncStart: {
      // Sugared async collective (`reduce-scatter-start` ...): shape ((operands), result, ...).
      const Shape& s = instr.shape();
      const std::string& kind = instr.async_sugar();
      const int64_t in = OperandBytes(instr);
      const int64_t out = s.IsTuple() && s.tuple_shapes.size() >= 2 ? s.tuple_shapes[1].ByteSize() : 0;
      if (kind == "all-gather") {
        c.data_bytes = out;
        c.bytes = out * (n - 1) / n;
      } else if (kind == "reduce-scatter" || kind == "all-to-all") {
        c.data_bytes = in;
        c.bytes = in * (n - 1) / n;
      } else if (kind == "all-reduce") {
        c.data_bytes = in;
        c.bytes = 2 * in * (n - 1) / n;
      } else if (kind == "collective-permute") {
        c.data_bytes = in;
        c.bytes = in;
      } else {
        return std::nullopt;
      }
      return c;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace weave
