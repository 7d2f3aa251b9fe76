// The evaluator's collectives (eval/evaluator_internal.h): replica groups resolved to device ids
// (XLA's cross-replica / cross-partition / flattened modes), and each collective's per-device
// result computed once all devices meet (all-gather, all-reduce, reduce-scatter, all-to-all,
// collective-permute, collective-broadcast).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <vector>

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
  CollectiveFn fn = [this, in, kind, result_shape, devices](
                        const std::vector<std::vector<ValuePtr>>& contrib)
      -> absl::StatusOr<std::vector<ValuePtr>> {
    std::vector<ValuePtr> results(static_cast<size_t>(devices));
    const size_t n_ops = contrib[0].size();
    auto leaf_shape = [&](size_t j) -> const Shape& {
      return result_shape.IsTuple() ? result_shape.tuple_shapes.at(j) : result_shape;
    };
    auto wrap = [&](std::vector<Value> leaves) -> ValuePtr {
      if (!result_shape.IsTuple()) return Share(std::move(leaves.at(0)));
      Value t;
      t.shape = result_shape;
      for (Value& v : leaves) t.elements.push_back(Share(std::move(v)));
      return Share(std::move(t));
    };
    if (kind == HloOpcode::kCollectivePermute) {
      // Pairs name partition ids (with channel_id or a single replica), else replica ids.
      const bool by_partition = in->channel_id.has_value() || r_ == 1;
      std::vector<int64_t> source_of(static_cast<size_t>(devices), -1);
      // The in-place form's moves: (source, target, the pair's occurrence among the source's
      // pairs, among the target's), each device id as r * n + p.
      std::vector<PermuteMove> moves;
      std::vector<int64_t> sent(static_cast<size_t>(devices), 0), received(static_cast<size_t>(devices), 0);
      for (const auto& [src, dst] : in->source_target_pairs()) {
        const int64_t limit = by_partition ? n_ : r_;
        if (src < 0 || src >= limit || dst < 0 || dst >= limit) {
          return InvalidArgumentError(absl::StrCat("source_target_pairs entry {", src, ",", dst,
                                                   "} is out of range"));
        }
        for (int64_t other = 0; other < (by_partition ? r_ : n_); ++other) {
          const int64_t s = by_partition ? other * n_ + src : src * n_ + other;
          const int64_t t = by_partition ? other * n_ + dst : dst * n_ + other;
          source_of[static_cast<size_t>(t)] = s;
          moves.push_back({s, t, sent[static_cast<size_t>(s)]++, received[static_cast<size_t>(t)]++});
        }
      }
      if (in->GetRawAttribute("slice_sizes") != nullptr) {
        return InPlacePermute(*in, contrib, moves, result_shape);
      }
      for (int64_t d = 0; d < devices; ++d) {
        std::vector<Value> leaves;
        for (size_t j = 0; j < n_ops; ++j) {
          const int64_t s = source_of[static_cast<size_t>(d)];
          if (s < 0) {
            leaves.push_back(Value::Zeros(leaf_shape(j)));
          } else {
            RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(s)][j], leaf_shape(j), s));
            Value v = *contrib[static_cast<size_t>(s)][j];
            v.shape = leaf_shape(j);
            leaves.push_back(std::move(v));
          }
        }
        results[static_cast<size_t>(d)] = wrap(std::move(leaves));
      }
      return results;
    }
    auto groups = DeviceGroups(*in, kind, n_, r_);
    if (!groups.ok()) return groups.status();
    ASSIGN_OR_RETURN(auto gi, IndexGroups(std::move(*groups), devices, /*require_all=*/true));
    for (size_t g = 0; g < gi.groups.size(); ++g) {
      const std::vector<int64_t>& members = gi.groups[g];
      const int64_t gsize = static_cast<int64_t>(members.size());
      switch (kind) {
        case HloOpcode::kAllGather: {
          if (in->dimensions.size() != 1) return InvalidArgumentError("all-gather needs dimensions={d}");
          // Every member receives the same value: one (immutable) copy shared by the group.
          std::vector<Value> leaves;
          const int64_t dim = in->dimensions[0];
          for (size_t j = 0; j < n_ops; ++j) {
            std::vector<const Value*> parts;
            int64_t extent = 0;
            for (int64_t m : members) {
              const Value& part = *contrib[static_cast<size_t>(m)][j];
              RETURN_IF_ERROR(FitsLeaf(part, leaf_shape(j), m, dim));
              if (dim < 0 || dim >= part.shape.rank()) return InvalidArgumentError("all-gather dimension out of range");
              extent += part.shape.dims[static_cast<size_t>(dim)];
              parts.push_back(&part);
            }
            if (extent != leaf_shape(j).dims[static_cast<size_t>(dim)]) {
              return InvalidArgumentError(absl::StrCat("a group of ", gsize, " gathers ", extent,
                                                       " along dimension ", dim, " into a result of ",
                                                       leaf_shape(j).ToString(false)));
            }
            leaves.push_back(ops::Concatenate(parts, leaf_shape(j), dim));
          }
          const ValuePtr gathered = wrap(std::move(leaves));
          for (int64_t m : members) results[static_cast<size_t>(m)] = gathered;
          break;
        }
        case HloOpcode::kAllReduce:
        case HloOpcode::kReduceScatter: {
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
              RETURN_IF_ERROR(FitsLeaf(first, leaf_shape(j), members[0]));
            } else if (in->dimensions.size() == 1) {
              RETURN_IF_ERROR(FitsLeaf(first, leaf_shape(j), members[0], in->dimensions[0]));
            }
            Value acc = *contrib[static_cast<size_t>(members[0])][j];
            for (int64_t k = 1; k < gsize; ++k) {
              ASSIGN_OR_RETURN(auto next, ApplyBinaryComputation(in->to_apply(), acc,
                                                 *contrib[static_cast<size_t>(members[static_cast<size_t>(k)])][j]));
              acc = std::move(next);
            }
            sums.push_back(std::move(acc));
          }
          if (kind == HloOpcode::kAllReduce) {
            // Every member receives the same sums: one (immutable) copy shared by the group.
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              Value v = std::move(sums[j]);
              v.shape = leaf_shape(j);
              leaves.push_back(std::move(v));
            }
            const ValuePtr reduced = wrap(std::move(leaves));
            for (int64_t m : members) results[static_cast<size_t>(m)] = reduced;
            break;
          }
          for (int64_t pos = 0; pos < gsize; ++pos) {
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              if (in->dimensions.size() != 1) return InvalidArgumentError("reduce-scatter needs dimensions={d}");
              const int64_t dim = in->dimensions[0];
              const Shape& ls = leaf_shape(j);
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
            results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
          }
          break;
        }
        case HloOpcode::kAllToAll: {
          if (!in->dimensions.empty()) {
            if (n_ops != 1) return InvalidArgumentError("array all-to-all takes one operand");
            const int64_t dim = in->dimensions[0];
            for (int64_t m : members) {
              RETURN_IF_ERROR(FitsLeaf(*contrib[static_cast<size_t>(m)][0], leaf_shape(0), m));
            }
            if (dim < 0 || dim >= leaf_shape(0).rank()) return InvalidArgumentError("all-to-all dimension out of range");
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
              leaves.push_back(ops::Concatenate(parts, leaf_shape(0), dim));
              results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
            }
          } else {
            if (static_cast<int64_t>(n_ops) != gsize) {
              return InvalidArgumentError("tuple all-to-all needs one operand per group member");
            }
            for (int64_t pos = 0; pos < gsize; ++pos) {
              std::vector<Value> leaves;
              for (int64_t k = 0; k < gsize; ++k) {
                const int64_t from = members[static_cast<size_t>(k)];
                if (absl::Status f = FitsLeaf(*contrib[static_cast<size_t>(from)][static_cast<size_t>(pos)],
                                              leaf_shape(static_cast<size_t>(k)), from);
                    !f.ok()) {
                  return f;
                }
                Value v = *contrib[static_cast<size_t>(from)][static_cast<size_t>(pos)];
                v.shape = leaf_shape(static_cast<size_t>(k));
                leaves.push_back(std::move(v));
              }
              results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
            }
          }
          break;
        }
        case HloOpcode::kCollectiveBroadcast: {
          for (int64_t pos = 0; pos < gsize; ++pos) {
            std::vector<Value> leaves;
            for (size_t j = 0; j < n_ops; ++j) {
              if (absl::Status f = FitsLeaf(*contrib[static_cast<size_t>(members[0])][j], leaf_shape(j), members[0]);
                  !f.ok()) {
                return f;
              }
              Value v = *contrib[static_cast<size_t>(members[0])][j];
              v.shape = leaf_shape(j);
              leaves.push_back(std::move(v));
            }
            results[static_cast<size_t>(members[static_cast<size_t>(pos)])] = wrap(std::move(leaves));
          }
          break;
        }
        default:
          return InvalidArgumentError(absl::StrCat("collective ", OpName(kind), " is not supported"));
      }
    }
    return results;
  };
  return coord_->Exchange(device_, instr, count, std::move(contribution), fn);
}

}  // namespace weave::eval::internal
