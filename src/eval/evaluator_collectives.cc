// The evaluator's collectives (eval/evaluator_internal.h): replica groups resolved to device ids
// (XLA's cross-replica / cross-partition / flattened modes), and each collective's per-device
// result computed once all devices meet (all-gather, all-reduce, reduce-scatter, all-to-all,
// collective-permute, collective-broadcast).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "eval/evaluator_internal.h"
#include "eval/numerics.h"
#include "eval/ops.h"
#include "hlo/status_macros.h"

namespace weave::eval::internal {

using absl::InvalidArgumentError;

namespace {

// Groups of device ids (device = replica * N + partition) for a collective.
absl::StatusOr<std::vector<std::vector<int64_t>>> DeviceGroups(const HloInstruction& instr,
                                                               HloOpcode kind, int64_t n,
                                                               int64_t r) {
  std::vector<std::vector<int64_t>> groups;
  if (instr.replica_groups.has_value()) {
    groups = instr.replica_groups->groups;
  }
  const bool has_channel = instr.channel_id.has_value();
  const bool has_global_attr = kind == HloOpcode::kAllReduce || kind == HloOpcode::kAllGather ||
                               kind == HloOpcode::kReduceScatter;
  enum Mode { kCrossReplica, kCrossPartition, kCrossReplicaAndPartition, kFlattened } mode;
  if (!has_channel) {
    mode = kCrossReplica;
  } else if (!has_global_attr) {
    mode = kCrossPartition;
  } else {
    mode = instr.use_global_device_ids ? kFlattened : kCrossReplicaAndPartition;
  }
  if (r == 1) {
    // Single replica: members are partition ids. A group list naming only replica 0, or none,
    // keeps XLA's meaning (cross-replica: each partition alone, so an all-reduce without a
    // channel_id is a no-op, as in XLA; cross-replica-and-partition: all partitions).
    bool only_zero = !groups.empty();
    for (const auto& g : groups) {
      for (int64_t id : g) only_zero &= id == 0;
    }
    std::vector<std::vector<int64_t>> out;
    if ((groups.empty() || only_zero) && mode == kCrossReplica) {
      for (int64_t p = 0; p < n; ++p) out.push_back({p});
      return out;
    }
    if (groups.empty() || (only_zero && mode == kCrossReplicaAndPartition)) {
      out.emplace_back();
      for (int64_t p = 0; p < n; ++p) out.back().push_back(p);
      return out;
    }
    for (const auto& g : groups) {
      for (int64_t id : g) {
        if (id < 0 || id >= n) {
          return InvalidArgumentError(absl::StrCat("replica group member ", id,
                                                   " is not a partition id (num_partitions=", n,
                                                   ")"));
        }
      }
    }
    return groups;
  }
  std::vector<std::vector<int64_t>> out;
  const int64_t limit = mode == kFlattened ? n * r
                        : (mode == kCrossPartition ? n : r);
  if (groups.empty()) {
    groups.emplace_back();
    for (int64_t k = 0; k < limit; ++k) groups.back().push_back(k);
  }
  for (const auto& g : groups) {
    for (int64_t id : g) {
      if (id < 0 || id >= limit) {
        return InvalidArgumentError(absl::StrCat("replica group member ", id, " out of range"));
      }
    }
  }
  switch (mode) {
    case kCrossReplica:
      for (int64_t p = 0; p < n; ++p) {
        for (const auto& g : groups) {
          out.emplace_back();
          for (int64_t id : g) out.back().push_back(id * n + p);
        }
      }
      break;
    case kCrossPartition:
      for (int64_t rep = 0; rep < r; ++rep) {
        for (const auto& g : groups) {
          out.emplace_back();
          for (int64_t id : g) out.back().push_back(rep * n + id);
        }
      }
      break;
    case kCrossReplicaAndPartition:
      for (const auto& g : groups) {
        out.emplace_back();
        for (int64_t id : g) {
          for (int64_t p = 0; p < n; ++p) out.back().push_back(id * n + p);
        }
      }
      break;
    case kFlattened: out = groups; break;
  }
  return out;
}

// For each device: (group index, position) or (-1, -1) when absent.
struct GroupIndex {
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::pair<int64_t, int64_t>> where;
};

absl::StatusOr<GroupIndex> IndexGroups(std::vector<std::vector<int64_t>> groups, int64_t devices,
                                       bool require_all) {
  GroupIndex gi;
  gi.where.assign(static_cast<size_t>(devices), {-1, -1});
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = 0; k < groups[g].size(); ++k) {
      const int64_t d = groups[g][k];
      if (gi.where[static_cast<size_t>(d)].first >= 0) {
        return InvalidArgumentError(absl::StrCat("device ", d, " appears in two replica groups"));
      }
      gi.where[static_cast<size_t>(d)] = {static_cast<int64_t>(g), static_cast<int64_t>(k)};
    }
  }
  if (require_all) {
    for (int64_t d = 0; d < devices; ++d) {
      if (gi.where[static_cast<size_t>(d)].first < 0) {
        return InvalidArgumentError(absl::StrCat("device ", d, " is in no replica group"));
      }
    }
  }
  gi.groups = std::move(groups);
  return gi;
}

// `{{a,b},{c,d}}` (or `{a,b}`): the lists of an in-place collective-permute's slice_sizes.
std::optional<std::vector<std::vector<int64_t>>> ParseSliceSizeLists(const std::string& text) {
  std::vector<std::vector<int64_t>> lists;
  std::vector<int64_t>* cur = nullptr;
  int depth = 0;
  const bool nested = absl::StrContains(text, "{{");
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{') {
      ++depth;
      if (depth == (nested ? 2 : 1)) cur = &lists.emplace_back();
    } else if (c == '}') {
      --depth;
      cur = nullptr;
    } else if ((std::isdigit(static_cast<unsigned char>(c)) || c == '-') && cur != nullptr) {
      size_t end = i + 1;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      int64_t v = 0;
      if (!absl::SimpleAtoi(text.substr(i, end - i), &v)) return std::nullopt;
      cur->push_back(v);
      i = end - 1;
    } else if (c != ',' && c != ' ') {
      return std::nullopt;
    }
  }
  if (depth != 0 || lists.empty()) return std::nullopt;
  return lists;
}

// Start indices of pair `k` from a collective-permute start-indices operand: a tuple of scalars
// (one start per dim, the same for every pair), a tuple of such tuples (one per pair), or an
// integer array of one start per dim.
absl::StatusOr<std::vector<int64_t>> PairStarts(const Value& v, int64_t k, int64_t rank) {
  const Value* starts = &v;
  if (v.shape.IsTuple() && !v.elements.empty() && v.elements[0]->shape.IsTuple()) {
    if (k >= static_cast<int64_t>(v.elements.size())) {
      return InvalidArgumentError(absl::StrCat("no start indices for a device's pair ", k + 1));
    }
    starts = v.elements[static_cast<size_t>(k)].get();
  }
  std::vector<int64_t> out;
  if (starts->shape.IsTuple()) {
    for (const ValuePtr& e : starts->elements) {
      if (e->shape.IsTuple() || e->size() != 1) return InvalidArgumentError("start indices must be scalars");
      out.push_back(e->GetInt(0));
    }
  } else {
    for (int64_t i = 0; i < starts->size(); ++i) out.push_back(starts->GetInt(i));
  }
  if (static_cast<int64_t>(out.size()) != rank) {
    return InvalidArgumentError(absl::StrCat(out.size(), " start indices for a rank-", rank, " buffer"));
  }
  return out;
}

// OK when device `device`'s contribution `v` can stand as a result leaf of shape `leaf`: an
// array of the same dims (all but `free_dim`, when >= 0) and storage. The verifier checks this
// from the shapes; the evaluator checks it again on the values, so that a module the verifier
// lets through (an unknown group size) is an error here, never a read past an array.
absl::Status FitsLeaf(const Value& v, const Shape& leaf, int64_t device, int64_t free_dim = -1) {
  bool ok = !v.shape.IsTuple() && !leaf.IsTuple() && v.shape.rank() == leaf.rank() &&
            StorageFor(v.shape.element_type) == StorageFor(leaf.element_type);
  for (int64_t q = 0; ok && q < leaf.rank(); ++q) {
    ok = q == free_dim || v.shape.dims[static_cast<size_t>(q)] == leaf.dims[static_cast<size_t>(q)];
  }
  if (ok) return absl::OkStatus();
  return InvalidArgumentError(absl::StrCat("device ", device, "'s operand ", v.shape.ToString(false),
                                           " does not fit the result ", leaf.ToString(false)));
}

// A collective's result shape: the leaf each operand j fills, and the wrapping of a device's
// leaves into its result (a tuple when the result is one).
struct ResultLeaves {
  const Shape& shape;
  const Shape& Leaf(size_t j) const {
    return shape.IsTuple() ? shape.tuple_shapes.at(j) : shape;
  }
  ValuePtr Wrap(std::vector<Value> leaves) const {
    if (!shape.IsTuple()) return Share(std::move(leaves.at(0)));
    Value t;
    t.shape = shape;
    for (Value& v : leaves) t.elements.push_back(Share(std::move(v)));
    return Share(std::move(t));
  }
};

// Each device's contributions, indexed by device (r * n + p), then by operand.
using Contributions = std::vector<std::vector<ValuePtr>>;

// A collective-permute's source_target_pairs over n partitions and r replicas: *source_of
// (devices entries, -1 where no pair targets the device) and, for the in-place form, *moves.
// Pairs name partition ids (with channel_id or a single replica), else replica ids; an error
// for a pair out of range.
absl::Status PermutePairs(const HloInstruction& in, int64_t n, int64_t r,
                          std::vector<int64_t>* source_of, std::vector<PermuteMove>* moves) {
  const int64_t devices = n * r;
  const bool by_partition = in.channel_id.has_value() || r == 1;
  std::vector<int64_t> sent(static_cast<size_t>(devices), 0), received(static_cast<size_t>(devices), 0);
  for (const auto& [src, dst] : in.source_target_pairs()) {
    const int64_t limit = by_partition ? n : r;
    if (src < 0 || src >= limit || dst < 0 || dst >= limit) {
      return InvalidArgumentError(absl::StrCat("source_target_pairs entry {", src, ",", dst,
                                               "} is out of range"));
    }
    for (int64_t other = 0; other < (by_partition ? r : n); ++other) {
      const int64_t s = by_partition ? other * n + src : src * n + other;
      const int64_t t = by_partition ? other * n + dst : dst * n + other;
      (*source_of)[static_cast<size_t>(t)] = s;
      moves->push_back({s, t, sent[static_cast<size_t>(s)]++, received[static_cast<size_t>(t)]++});
    }
  }
  return absl::OkStatus();
}

// A collective-permute's per-device results: each device gets its source's operands (zeros
// where no pair targets it); an error when a source's operand does not fit its leaf.
absl::StatusOr<std::vector<ValuePtr>> PermuteResults(const Contributions& contrib,
                                                     const std::vector<int64_t>& source_of,
                                                     const ResultLeaves& result) {
  const int64_t devices = static_cast<int64_t>(source_of.size());
  const size_t n_ops = contrib[0].size();
  std::vector<ValuePtr> results(static_cast<size_t>(devices));
  for (int64_t d = 0; d < devices; ++d) {
    std::vector<Value> leaves;
    for (size_t j = 0; j < n_ops; ++j) {
      const int64_t s = source_of[static_cast<size_t>(d)];
      if (s < 0) {
        leaves.push_back(Value::Zeros(result.Leaf(j)));
      } else {
        RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(s)][j], result.Leaf(j), s));
        Value v = *contrib[static_cast<size_t>(s)][j];
        v.shape = result.Leaf(j);
        leaves.push_back(std::move(v));
      }
    }
    results[static_cast<size_t>(d)] = result.Wrap(std::move(leaves));
  }
  return results;
}

// All-gather within one group (`members`): every operand's parts concatenated along the
// gather dimension, one (immutable) result shared by the members in *results; an error for a
// bad dimension or a part that does not fit.
absl::Status AllGatherGroup(const HloInstruction& in, const Contributions& contrib,
                            const std::vector<int64_t>& members, const ResultLeaves& result,
                            std::vector<ValuePtr>* results) {
  const size_t n_ops = contrib[0].size();
  const int64_t gsize = static_cast<int64_t>(members.size());
  if (in.dimensions.size() != 1) return InvalidArgumentError("all-gather needs dimensions={d}");
  // Every member receives the same value: one (immutable) copy shared by the group.
  std::vector<Value> leaves;
  const int64_t dim = in.dimensions[0];
  for (size_t j = 0; j < n_ops; ++j) {
    std::vector<const Value*> parts;
    int64_t extent = 0;
    for (int64_t m : members) {
      const Value& part = *contrib[static_cast<size_t>(m)][j];
      RETURN_IF_ERROR(FitsLeaf(part, result.Leaf(j), m, dim));
      if (dim < 0 || dim >= part.shape.rank()) return InvalidArgumentError("all-gather dimension out of range");
      extent += part.shape.dims[static_cast<size_t>(dim)];
      parts.push_back(&part);
    }
    if (extent != result.Leaf(j).dims[static_cast<size_t>(dim)]) {
      return InvalidArgumentError(absl::StrCat("a group of ", gsize, " gathers ", extent,
                                               " along dimension ", dim, " into a result of ",
                                               result.Leaf(j).ToString(false)));
    }
    leaves.push_back(ops::Concatenate(parts, result.Leaf(j), dim));
  }
  const ValuePtr gathered = result.Wrap(std::move(leaves));
  for (int64_t m : members) (*results)[static_cast<size_t>(m)] = gathered;
  return absl::OkStatus();
}

// Combines two devices' operands with the collective's reduction computation.
using Combine = absl::FunctionRef<absl::StatusOr<Value>(const Value&, const Value&)>;

// The reductions (sum, max, min, and, or: the combine) of an all-reduce or reduce-scatter
// (`kind`) over one group, one per operand: the members' operands combined in member order. An error when an operand differs from the first
// member's, does not fit the result, or the combine fails.
absl::StatusOr<std::vector<Value>> GroupReductions(const HloInstruction& in, HloOpcode kind,
                                             const Contributions& contrib,
                                             const std::vector<int64_t>& members,
                                             const ResultLeaves& result, Combine combine) {
  const size_t n_ops = contrib[0].size();
  const int64_t gsize = static_cast<int64_t>(members.size());
  std::vector<Value> sums;
  for (size_t j = 0; j < n_ops; ++j) {
    const Value& first = *contrib[static_cast<size_t>(members[0])][j];
    for (int64_t m : members) {
      const Value& v = *contrib[static_cast<size_t>(m)][j];
      if (v.shape.IsTuple() || v.shape.dims != first.shape.dims ||
          StorageFor(v.shape.element_type) != StorageFor(first.shape.element_type)) {
        return InvalidArgumentError(absl::StrCat("device ", m, "'s operand ", v.shape.ToString(false),
                                                 " differs from device ", members[0], "'s ",
                                                 first.shape.ToString(false)));
      }
    }
    if (kind == HloOpcode::kAllReduce) {
      RETURN_IF_ERROR(FitsLeaf(first, result.Leaf(j), members[0]));
    } else if (in.dimensions.size() == 1) {
      RETURN_IF_ERROR(FitsLeaf(first, result.Leaf(j), members[0], in.dimensions[0]));
    }
    Value acc = *contrib[static_cast<size_t>(members[0])][j];
    for (int64_t k = 1; k < gsize; ++k) {
      const Value& v = *contrib[static_cast<size_t>(members[static_cast<size_t>(k)])][j];
      ASSIGN_OR_RETURN(auto next, combine(acc, v));
      acc = std::move(next);
    }
    sums.push_back(std::move(acc));
  }
  return sums;
}

// Reduce-scatter's scatter: member `pos` of the group gets slice `pos` of every sum along the
// scatter dimension; an error when the result does not tile the sums.
absl::Status ScatterSums(const HloInstruction& in, const std::vector<Value>& sums,
                         const std::vector<int64_t>& members, const ResultLeaves& result,
                         std::vector<ValuePtr>* results) {
  const int64_t gsize = static_cast<int64_t>(members.size());
  for (int64_t pos = 0; pos < gsize; ++pos) {
    std::vector<Value> leaves;
    for (size_t j = 0; j < sums.size(); ++j) {
      if (in.dimensions.size() != 1) return InvalidArgumentError("reduce-scatter needs dimensions={d}");
      const int64_t dim = in.dimensions[0];
      const Shape& ls = result.Leaf(j);
      std::vector<SliceDim> sl(ls.dims.size());
      for (size_t q = 0; q < ls.dims.size(); ++q) {
        sl[q].start = 0;
        sl[q].limit = ls.dims[q];
      }
      sl[static_cast<size_t>(dim)].start = pos * ls.dims[static_cast<size_t>(dim)];
      sl[static_cast<size_t>(dim)].limit = (pos + 1) * ls.dims[static_cast<size_t>(dim)];
      if (dim < 0 || dim >= ls.rank() ||
          sl[static_cast<size_t>(dim)].limit > sums[j].shape.dims[static_cast<size_t>(dim)]) {
        return InvalidArgumentError("reduce-scatter result does not tile its operand");
      }
      leaves.push_back(ops::Slice(sums[j], ls, sl));
    }
    (*results)[static_cast<size_t>(members[static_cast<size_t>(pos)])] = result.Wrap(std::move(leaves));
  }
  return absl::OkStatus();
}

// All-reduce or reduce-scatter (`kind`) within one group: the group's sums (GroupReductions), shared
// by every member (all-reduce) or scattered over them (ScatterSums), into *results.
absl::Status ReduceGroup(const HloInstruction& in, HloOpcode kind, const Contributions& contrib,
                         const std::vector<int64_t>& members, const ResultLeaves& result,
                         Combine combine, std::vector<ValuePtr>* results) {
  ASSIGN_OR_RETURN(std::vector<Value> sums, GroupReductions(in, kind, contrib, members, result, combine));
  if (kind == HloOpcode::kAllReduce) {
    // Every member receives the same sums: one (immutable) copy shared by the group.
    std::vector<Value> leaves;
    for (size_t j = 0; j < sums.size(); ++j) {
      Value v = std::move(sums[j]);
      v.shape = result.Leaf(j);
      leaves.push_back(std::move(v));
    }
    const ValuePtr reduced = result.Wrap(std::move(leaves));
    for (int64_t m : members) (*results)[static_cast<size_t>(m)] = reduced;
    return absl::OkStatus();
  }
  return ScatterSums(in, sums, members, result, results);
}

// All-to-all within one group: the array form (dimensions={d}) splits each member's operand
// into group-size chunks along d and member `pos` concatenates the chunks `pos`; the tuple form
// gives member `pos` operand `pos` of every member. An error for a bad operand count,
// dimension or split, or an operand that does not fit.
absl::Status AllToAllGroup(const HloInstruction& in, const Contributions& contrib,
                           const std::vector<int64_t>& members, const ResultLeaves& result,
                           std::vector<ValuePtr>* results) {
  const size_t n_ops = contrib[0].size();
  const int64_t gsize = static_cast<int64_t>(members.size());
  if (!in.dimensions.empty()) {
    if (n_ops != 1) return InvalidArgumentError("array all-to-all takes one operand");
    const int64_t dim = in.dimensions[0];
    for (int64_t m : members) {
      RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(m)][0], result.Leaf(0), m));
    }
    if (dim < 0 || dim >= result.Leaf(0).rank()) return InvalidArgumentError("all-to-all dimension out of range");
    const Shape& os = contrib[static_cast<size_t>(members[0])][0]->shape;
    const int64_t extent = os.dims[static_cast<size_t>(dim)];
    if (extent % gsize != 0) return InvalidArgumentError("all-to-all split dimension is not divisible by the group size");
    const int64_t chunk = extent / gsize;
    for (int64_t pos = 0; pos < gsize; ++pos) {
      std::vector<Value> pieces;
      Shape cs = os;
      cs.layout.reset();
      cs.dims[static_cast<size_t>(dim)] = chunk;
      for (int64_t m : members) {
        std::vector<SliceDim> sl(os.dims.size());
        for (size_t q = 0; q < os.dims.size(); ++q) sl[q].limit = os.dims[q];
        sl[static_cast<size_t>(dim)].start = pos * chunk;
        sl[static_cast<size_t>(dim)].limit = (pos + 1) * chunk;
        pieces.push_back(ops::Slice(*contrib[static_cast<size_t>(m)][0], cs, sl));
      }
      std::vector<const Value*> parts;
      for (const Value& p : pieces) parts.push_back(&p);
      std::vector<Value> leaves;
      leaves.push_back(ops::Concatenate(parts, result.Leaf(0), dim));
      (*results)[static_cast<size_t>(members[static_cast<size_t>(pos)])] = result.Wrap(std::move(leaves));
    }
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(n_ops) != gsize) {
    return InvalidArgumentError("tuple all-to-all needs one operand per group member");
  }
  for (int64_t pos = 0; pos < gsize; ++pos) {
    std::vector<Value> leaves;
    for (int64_t k = 0; k < gsize; ++k) {
      const int64_t from = members[static_cast<size_t>(k)];
      RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(from)][static_cast<size_t>(pos)],
                               result.Leaf(static_cast<size_t>(k)), from));
      Value v = *contrib[static_cast<size_t>(from)][static_cast<size_t>(pos)];
      v.shape = result.Leaf(static_cast<size_t>(k));
      leaves.push_back(std::move(v));
    }
    (*results)[static_cast<size_t>(members[static_cast<size_t>(pos)])] = result.Wrap(std::move(leaves));
  }
  return absl::OkStatus();
}

// Collective-broadcast within one group: every member gets the first member's operands; an
// error when one does not fit.
absl::Status BroadcastGroup(const Contributions& contrib, const std::vector<int64_t>& members,
                            const ResultLeaves& result, std::vector<ValuePtr>* results) {
  const size_t n_ops = contrib[0].size();
  const int64_t gsize = static_cast<int64_t>(members.size());
  for (int64_t pos = 0; pos < gsize; ++pos) {
    std::vector<Value> leaves;
    for (size_t j = 0; j < n_ops; ++j) {
      RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(members[0])][j], result.Leaf(j), members[0]));
      Value v = *contrib[static_cast<size_t>(members[0])][j];
      v.shape = result.Leaf(j);
      leaves.push_back(std::move(v));
    }
    (*results)[static_cast<size_t>(members[static_cast<size_t>(pos)])] = result.Wrap(std::move(leaves));
  }
  return absl::OkStatus();
}

}  // namespace

// XLA's in-place collective-permute(input, output, input_start_indices, output_start_indices)
// with slice_sizes: each device's result is its own output buffer with, for every pair that
// targets it (in pair order), a slice of the source's input written into it; a device no pair
// targets keeps its output buffer. With several start-index tuples (XLA's verifier then lets a
// device appear that many times as a source and as a target), a pair that is a device's k-th as
// a source reads at its k-th input starts with the k-th slice size, and one that is the
// target's k-th writes at its k-th output starts (Weave's reading; XLA's text gives no
// evaluator). Starts are clamped as dynamic-slice and dynamic-update-slice clamp them.
absl::StatusOr<std::vector<ValuePtr>> DeviceEvaluator::InPlacePermute(
    const HloInstruction& in, const std::vector<std::vector<ValuePtr>>& contrib,
    const std::vector<PermuteMove>& moves, const Shape& result_shape) {
  std::optional<std::vector<std::vector<int64_t>>> sizes = ParseSliceSizeLists(*in.GetRawAttribute("slice_sizes"));
  if (!sizes) return InvalidArgumentError("in-place collective-permute: unreadable slice_sizes");
  // A device's result is its own output buffer, copied only when a move writes into it.
  std::vector<std::optional<Value>> buffers(contrib.size());
  for (const std::vector<ValuePtr>& ops : contrib) {
    if (ops.size() != 4) {
      return InvalidArgumentError("in-place collective-permute takes input, output and two start-index operands");
    }
    if (ops[1]->shape.IsTuple() || ops[1]->shape.dims != result_shape.dims || ops[0]->shape.IsTuple()) {
      return InvalidArgumentError("in-place collective-permute: the output buffer is not of the result's shape");
    }
  }
  for (const PermuteMove& m : moves) {
    const size_t s = static_cast<size_t>(m.source), t = static_cast<size_t>(m.target);
    if (s >= contrib.size() || t >= contrib.size()) return InvalidArgumentError("in-place collective-permute: device out of range");
    if (sizes->size() != 1 && m.source_use >= static_cast<int64_t>(sizes->size())) {
      return InvalidArgumentError(absl::StrCat("in-place collective-permute: no slice size for device ", m.source,
                                               "'s pair ", m.source_use + 1));
    }
    const std::vector<int64_t>& size = (*sizes)[sizes->size() == 1 ? 0 : static_cast<size_t>(m.source_use)];
    const Value& input = *contrib[s][0];
    if (!buffers[t]) buffers[t] = *contrib[t][1];
    Value& output = *buffers[t];
    if (size.size() != input.shape.dims.size() || size.size() != output.shape.dims.size()) {
      return InvalidArgumentError("in-place collective-permute: slice_sizes do not match the buffers' rank");
    }
    for (size_t q = 0; q < size.size(); ++q) {
      if (size[q] < 0 || size[q] > input.shape.dims[q] || size[q] > output.shape.dims[q]) {
        return InvalidArgumentError("in-place collective-permute: a slice size exceeds a buffer");
      }
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> from, PairStarts(*contrib[s][2], m.source_use, input.shape.rank()));
    ASSIGN_OR_RETURN(std::vector<int64_t> to, PairStarts(*contrib[t][3], m.target_use, output.shape.rank()));
    const Value piece = ops::DynamicSlice(input, Shape(input.shape.element_type, size), from);
    output = ops::DynamicUpdateSlice(output, piece, to);
  }
  std::vector<ValuePtr> results;
  results.reserve(buffers.size());
  for (size_t d = 0; d < buffers.size(); ++d) {
    results.push_back(buffers[d] ? Share(std::move(*buffers[d])) : contrib[d][1]);
  }
  return results;
}

// Shapes of a collective's operands -> its per-device result (without the async wrapping).
absl::StatusOr<ValuePtr> DeviceEvaluator::EvalCollective(const HloInstruction* instr,
                                                         HloOpcode kind, const Shape& result_shape,
                                                         const std::vector<ValuePtr>& ops) {
  const int64_t devices = n_ * r_;
  const int64_t count = exec_count_[instr]++;
  std::vector<ValuePtr> contribution = ops;
  const HloInstruction* in = instr;
  CollectiveFn fn = [this, in, kind, result_shape, devices](const Contributions& contrib)
      -> absl::StatusOr<std::vector<ValuePtr>> {
    const ResultLeaves result{result_shape};
    if (kind == HloOpcode::kCollectivePermute) {
      std::vector<int64_t> source_of(static_cast<size_t>(devices), -1);
      // The in-place form's moves: (source, target, the pair's occurrence among the source's
      // pairs, among the target's), each device id as r * n + p.
      std::vector<PermuteMove> moves;
      RETURN_IF_ERROR(PermutePairs(*in, n_, r_, &source_of, &moves));
      if (in->GetRawAttribute("slice_sizes") != nullptr) {
        return InPlacePermute(*in, contrib, moves, result_shape);
      }
      return PermuteResults(contrib, source_of, result);
    }
    std::vector<ValuePtr> results(static_cast<size_t>(devices));
    auto groups = DeviceGroups(*in, kind, n_, r_);
    if (!groups.ok()) return groups.status();
    ASSIGN_OR_RETURN(auto gi, IndexGroups(std::move(*groups), devices, /*require_all=*/true));
    auto combine = [this, in](const Value& a, const Value& b) {
      return ApplyBinaryComputation(in->to_apply(), a, b);
    };
    for (size_t g = 0; g < gi.groups.size(); ++g) {
      const std::vector<int64_t>& members = gi.groups[g];
      switch (kind) {
        case HloOpcode::kAllGather:
          RETURN_IF_ERROR(AllGatherGroup(*in, contrib, members, result, &results));
          break;
        case HloOpcode::kAllReduce:
        case HloOpcode::kReduceScatter:
          RETURN_IF_ERROR(ReduceGroup(*in, kind, contrib, members, result, combine, &results));
          break;
        case HloOpcode::kAllToAll:
          RETURN_IF_ERROR(AllToAllGroup(*in, contrib, members, result, &results));
          break;
        case HloOpcode::kCollectiveBroadcast:
          RETURN_IF_ERROR(BroadcastGroup(contrib, members, result, &results));
          break;
        default:
          return InvalidArgumentError(absl::StrCat("collective ", OpName(kind), " is not supported"));
      }
    }
    return results;
  };
  return coord_->Exchange(device_, instr, count, std::move(contribution), fn);
}

}  // namespace weave::eval::internal
