#include "spmd/partition_ring.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weave {

bool PartitionRing::IsIdentity() const {
  if (groups.size() != 1 || size() != num_partitions) return false;
  for (int64_t i = 0; i < size(); ++i) {
    if (groups[0][static_cast<size_t>(i)] != i) return false;
  }
  return true;
}

std::vector<std::pair<int64_t, int64_t>> PartitionRing::ShiftPairs(int64_t shift) const {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  const int64_t n = size();
  if (n == 0) return pairs;
  for (const auto& g : groups) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = ((i + shift) % n + n) % n;
      pairs.emplace_back(g[static_cast<size_t>(i)], g[static_cast<size_t>(t)]);
    }
  }
  // XLA prints pairs sorted by source.
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

absl::StatusOr<PartitionRing> AnalyzePartitionRing(const HloInstruction& collective,
                                                   int64_t num_partitions,
                                                   int64_t replica_count) {
  auto fail = [](std::string msg) { return absl::FailedPreconditionError(std::move(msg)); };
  if (num_partitions <= 1) {
    return fail("module is not partitioned (num_partitions=1)");
  }
  if (replica_count != 1) {
    return fail(absl::StrCat("replica_count=", replica_count,
                             ": rings over replicas and partitions are not supported"));
  }
  if (!collective.use_global_device_ids && !collective.channel_id.has_value()) {
    return fail(absl::StrCat("'", collective.name(),
                             "' has no channel_id: a cross-replica collective, its groups name "
                             "replicas, not partitions"));
  }
  PartitionRing ring;
  ring.num_partitions = num_partitions;
  if (collective.replica_groups.has_value()) {
    const ReplicaGroups& rg = *collective.replica_groups;
    ring.groups = rg.groups;
    ring.groups_text = rg.ToString();
  }
  if (ring.groups.empty()) {
    std::vector<int64_t> all(static_cast<size_t>(num_partitions));
    for (int64_t i = 0; i < num_partitions; ++i) all[static_cast<size_t>(i)] = i;
    ring.groups.push_back(std::move(all));
    if (ring.groups_text.empty()) ring.groups_text = "{}";
  }
  const size_t n = ring.groups[0].size();
  ring.index_in_group.assign(static_cast<size_t>(num_partitions), -1);
  for (const auto& g : ring.groups) {
    if (g.size() != n) {
      return fail(absl::StrCat("'", collective.name(), "' has replica groups of different sizes (",
                               ring.groups_text, ")"));
    }
    for (size_t i = 0; i < g.size(); ++i) {
      int64_t id = g[i];
      if (id < 0 || id >= num_partitions) {
        return fail(absl::StrCat("'", collective.name(), "' names partition ", id,
                                 " outside num_partitions=", num_partitions));
      }
      if (ring.index_in_group[static_cast<size_t>(id)] != -1) {
        return fail(absl::StrCat("'", collective.name(), "' lists partition ", id, " twice"));
      }
      ring.index_in_group[static_cast<size_t>(id)] = static_cast<int64_t>(i);
    }
  }
  for (int64_t p = 0; p < num_partitions; ++p) {
    if (ring.index_in_group[static_cast<size_t>(p)] == -1) {
      return fail(absl::StrCat("'", collective.name(), "' replica groups ", ring.groups_text,
                               " leave out partition ", p));
    }
  }
  return ring;
}

namespace {

std::optional<int64_t> Eval(const HloInstruction* h, int64_t pid, int depth) {
  if (h == nullptr || depth > 64 || !h->shape().IsArray()) return std::nullopt;
  if (h->shape().ElementCount() != 1) {
    return std::nullopt;
  }
  auto operand = [&](int64_t i) { return Eval(h->operand(i), pid, depth + 1); };
  switch (h->opcode()) {
    case HloOpcode::kPartitionId:
      return pid;
    case HloOpcode::kReplicaId:
      return 0;
    case HloOpcode::kConstant:
      if (!h->literal.has_value() || h->literal->elided) return std::nullopt;
      if (!IsInteger(h->shape().element_type)) return std::nullopt;
      return h->literal->GetAsInt(0);
    case HloOpcode::kConvert:
    case HloOpcode::kReshape:
    case HloOpcode::kBitcast:
    case HloOpcode::kCopy:
      if (!IsInteger(h->shape().element_type) || h->operand_count() != 1 ||
          h->operand(0)->shape().ElementCount() != 1) {
        return std::nullopt;
      }
      return operand(0);
    case HloOpcode::kDynamicSlice: {
      const HloInstruction* table = h->operand(0);
      if (h->operand_count() != 2 || table->opcode() != HloOpcode::kConstant ||
          !table->literal.has_value() || table->literal->elided ||
          table->shape().rank() != 1 || !IsInteger(table->shape().element_type)) {
        return std::nullopt;
      }
      auto idx = operand(1);
      if (!idx) return std::nullopt;
      int64_t n = table->shape().dims[0];
      int64_t i = std::clamp<int64_t>(*idx, 0, n - 1);
      return table->literal->GetAsInt(i);
    }
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kMultiply:
    case HloOpcode::kDivide:
    case HloOpcode::kRemainder:
    case HloOpcode::kMinimum:
    case HloOpcode::kMaximum: {
      if (!IsInteger(h->shape().element_type) || h->operand_count() != 2) return std::nullopt;
      auto a = operand(0);
      auto b = operand(1);
      if (!a || !b) return std::nullopt;
      switch (h->opcode()) {
        case HloOpcode::kAdd: return *a + *b;
        case HloOpcode::kSubtract: return *a - *b;
        case HloOpcode::kMultiply: return *a * *b;
        case HloOpcode::kDivide:
          if (*b == 0) return std::nullopt;
          return *a / *b;
        case HloOpcode::kRemainder:
          if (*b == 0) return std::nullopt;
          return *a % *b;
        case HloOpcode::kMinimum: return std::min(*a, *b);
        default: return std::max(*a, *b);
      }
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

std::optional<int64_t> EvaluateForPartition(const HloInstruction* value, int64_t pid) {
  return Eval(value, pid, 0);
}

}  // namespace weave
