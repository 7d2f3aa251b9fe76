#include "windowed_einsum/windowed_einsum_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/dequantize.h"
#include "analysis/user_attributes.h"
#include "hlo/dot_dims.h"
#include "windowed_einsum/windowed_einsum_emitter.h"
#include "hlo/status_macros.h"

namespace weave::windowed_einsum {
namespace {

// Common ring checks: N > 1, N <= max ring. Returns false with *why set.
bool CheckRingSize(const DecomposerContext& ctx, const PartitionRing& ring, std::string* why) {
  if (ring.size() < 2) {
    *why = absl::StrCat("replica_groups=", ring.groups_text,
                        " form rings of one partition: nothing to window");
    return false;
  }
  if (ring.size() > ctx.options.max_ring) {
    *why = absl::StrCat("ring of ", ring.size(), " partitions (replica_groups=", ring.groups_text,
                        ") exceeds windowed-einsum-max-ring=", ctx.options.max_ring,
                        " (XLA's max_windowed_einsum_iteration)");
    return false;
  }
  return true;
}

// Bytes per element of `v` as stored: the FP8 type's size when `v` is FP8 or reads an FP8 value
// through views, converts, all-gathers (either form) and a dequantization; else its own type's.
int64_t StoredBytesPerElement(HloInstruction* v) {
  const PrimitiveType own = v->shape().IsArray() ? v->shape().element_type : PrimitiveType::kInvalid;
  for (int guard = 0; v != nullptr && guard < 64; ++guard) {
    if (v->shape().IsArray() && IsFp8(v->shape().element_type)) {
      return std::max(1, BitWidth(v->shape().element_type) / 8);
    }
    if (std::optional<DequantMatch> dq = MatchDequantize(v)) {
      return std::max(1, BitWidth(dq->fp8_type) / 8);
    }
    switch (v->opcode()) {
      case HloOpcode::kReshape:
      case HloOpcode::kTranspose:
      case HloOpcode::kCopy:
      case HloOpcode::kBitcast:
      case HloOpcode::kConvert:
      case HloOpcode::kAllGather:
      case HloOpcode::kAllGatherStart:
      case HloOpcode::kAllGatherDone:
      case HloOpcode::kAsyncStart:
      case HloOpcode::kAsyncDone:
        v = v->operand_count() > 0 ? v->operand(0) : nullptr;
        continue;
      default:
        break;
    }
    break;
  }
  return own == PrimitiveType::kInvalid ? 0 : std::max(1, BitWidth(own) / 8);
}

// XLA's operand-bytes gate (xla_gpu_operand_bytes_threshold_for_windowed_einsum, XLA PR 18271;
// dot_handler.cc should_enable_windowed_einsum_with_threshold): the global bytes of the dot's two
// operands >= the threshold. In the partitioned module the gathered operand (`gathered_side`) is
// read at its global size; the other operands are shards of the ring (XLA's windowed einsums shard
// the stationary operand of an all-gather loop, and both operands of a reduce-scatter loop, over
// all n partitions), counted n times. FP8 operands (dequantized or not) count 1 byte per element,
// their real size, where XLA counts the dequantized type.
bool CheckOperandBytes(const DecomposerContext& ctx, HloInstruction* dot, int gathered_side,
                       int64_t n, std::string* why, std::string* note) {
  int64_t side_bytes[2] = {0, 0};
  bool fp8 = false;
  for (int s = 0; s < 2 && s < dot->operand_count(); ++s) {
    HloInstruction* o = dot->operand(s);
    if (!o->shape().IsArray()) continue;
    const int64_t bpe = StoredBytesPerElement(o);
    fp8 |= bpe * 8 < BitWidth(o->shape().element_type);
    side_bytes[s] = o->shape().ElementCount() * bpe * (s == gathered_side ? 1 : n);
  }
  const int64_t total = side_bytes[0] + side_bytes[1];
  const int64_t limit = ctx.options.operand_bytes_threshold;
  const std::string figures = absl::StrCat(
      "operands of dot '", dot->name(), "' total ", total, " bytes (lhs ", side_bytes[0],
      " + rhs ", side_bytes[1], "; global sizes", fp8 ? ", FP8 at 1 byte per element" : "", ")");
  if (total < limit) {
    *why = absl::StrCat(figures, ", below xla_gpu_operand_bytes_threshold_for_windowed_einsum=",
                        limit);
    return false;
  }
  *note = absl::StrCat("; ", figures, " >= xla_gpu_operand_bytes_threshold_for_windowed_einsum=",
                       limit);
  return true;
}

// Size gate: with operand_bytes_threshold >= 0, XLA's operand-bytes gate (CheckOperandBytes, which
// then replaces the MiB threshold, as in XLA); else bytes of `counted` >= threshold_mib * 2^20.
// `what` names the counted value; `dot`, `gathered_side` (-1: none) and `n` are for the former.
bool CheckThreshold(const DecomposerContext& ctx, const HloInstruction* counted,
                    const std::string& what, HloInstruction* dot, int gathered_side, int64_t n,
                    std::string* why, std::string* note) {
  if (ctx.options.operand_bytes_threshold >= 0) {
    return CheckOperandBytes(ctx, dot, gathered_side, n, why, note);
  }
  int64_t bytes = counted->shape().ByteSize();
  std::string wide;
  auto dq = MatchDequantize(const_cast<HloInstruction*>(counted));
  if (!dq && CollectiveKind(counted) == HloOpcode::kAllGather &&
      CollectiveInput(const_cast<HloInstruction*>(counted)) != nullptr) {
    dq = MatchDequantize(CollectiveInput(const_cast<HloInstruction*>(counted)));
  }
  if (dq) {
    wide = absl::StrCat(" (dequantized ", std::string(PrimitiveTypeName(dq->fp8_type)),
                        " operand: the wide ", std::string(PrimitiveTypeName(dq->wide_type)),
                        " size was counted, as XLA does)");
  }
  int64_t limit = ctx.options.threshold_mib * (int64_t{1} << 20);
  if (bytes < limit) {
    *why = absl::StrCat(what, " '", counted->name(), "' ", counted->shape().ToString(false), " is ",
                        bytes,
                        " bytes, below windowed-einsum-threshold-mib=", ctx.options.threshold_mib,
                        " (", limit, " bytes)", wide);
    return false;
  }
  if (ctx.options.threshold_mib > 0) {
    *note = absl::StrCat("; ", what, " ", bytes, " bytes >= ", limit, " bytes threshold", wide);
  }
  return true;
}

// Maps scattered output dim `d` of `dot` to (side, operand dim). A batch dim maps to both
// operands: side 2, *dim the lhs batch dim, *dim2 the rhs one.
bool MapOutputDim(const HloInstruction* dot, int64_t d, int* side, int64_t* dim, int64_t* dim2) {
  const DotDims& dd = dot->dot_dims();
  int64_t nb = static_cast<int64_t>(dd.lhs_batch.size());
  if (d < nb) {
    if (dd.rhs_batch.size() != dd.lhs_batch.size()) return false;
    *side = 2;
    *dim = dd.lhs_batch[static_cast<size_t>(d)];
    *dim2 = dd.rhs_batch[static_cast<size_t>(d)];
    return true;
  }
  int64_t pos = d - nb;
  for (int s = 0; s < 2; ++s) {
    const auto& bb = s == 0 ? dd.lhs_batch : dd.rhs_batch;
    const auto& cc = s == 0 ? dd.lhs_contracting : dd.rhs_contracting;
    for (int64_t i = 0; i < dot->operand(s)->shape().rank(); ++i) {
      bool used = false;
      for (int64_t x : bb) used |= x == i;
      for (int64_t x : cc) used |= x == i;
      if (used) continue;
      if (pos == 0) {
        *side = s;
        *dim = i;
        return true;
      }
      --pos;
    }
  }
  return false;
}

// Shared RS checks once `dot`, `reduce`, ring and the scattered dim are known.
bool FinishRsPlan(const DecomposerContext& ctx, RsPlan& p, int64_t d, std::string* why) {
  if (p.dot->operand_count() != 2 || !p.dot->shape().IsArray()) {
    *why = absl::StrCat("dot '", p.dot->name(), "' is malformed");
    return false;
  }
  if (!CheckRingSize(ctx, p.ring, why)) return false;
  const int64_t n = p.ring.size();
  const Shape& os = p.dot->shape();
  if (d < 0 || d >= os.rank() || os.dims[static_cast<size_t>(d)] % n != 0 ||
      (p.result_views.empty() &&
       (p.result->shape().dims.size() != os.dims.size() ||
        p.result->shape().dims[static_cast<size_t>(d)] * n != os.dims[static_cast<size_t>(d)]))) {
    *why = absl::StrCat("scattered dim ", d, " of dot '", p.dot->name(), "' is not split in ", n,
                        " blocks: inconsistent shapes");
    return false;
  }
  p.out_dim = d;
  p.block = os.dims[static_cast<size_t>(d)] / n;
  if (!MapOutputDim(p.dot, d, &p.sliced_side, &p.sliced_dim, &p.sliced_dim2)) {
    *why = absl::StrCat("scattered dim ", d, " of dot '", p.dot->name(),
                        "' does not map to an operand dim");
    return false;
  }
  if (p.dot->user_count() != 1) {
    *why = absl::StrCat("dot '", p.dot->name(), "' has users besides '",
                        p.result_views.empty() ? p.reduce->name() : p.result_views[0].instr->name(),
                        "': the full dot must stay");
    return false;
  }
  std::string note;
  if (!CheckThreshold(ctx, p.dot, "dot output", p.dot, -1, n, why, &note)) return false;
  p.note = note;
  return true;
}
}  // namespace

// Text describing how an operand is carried, for remarks.
std::string CarriedText(HloInstruction* v) {
  if (IsFp8(v->shape().element_type)) {
    return absl::StrCat("'", v->name(), "' is ",
                        std::string(PrimitiveTypeName(v->shape().element_type)),
                        ": carried as FP8");
  }
  if (auto dq = MatchDequantize(v)) {
    return absl::StrCat("'", v->name(), "' is dequantized from ",
                        std::string(PrimitiveTypeName(dq->fp8_type)),
                        ": kept in the init tuple for the handler");
  }
  return "";
}

std::string RingText(const PartitionRing& ring) {
  return absl::StrCat(
      ring.groups.size() == 1 ? "a ring" : absl::StrCat(ring.groups.size(), " rings"), " of ",
      ring.size(), " partitions (replica_groups=", ring.groups_text, ")");
}

bool ClassifyGatheredDim(AgPlan& p, std::string* why) {
  HloInstruction* dot = p.dot;
  const int side = p.side;
  const int64_t n = p.ring.size();
  const int64_t d = p.gathered_dim;
  const DotDims& dd = dot->dot_dims();
  const auto& batch = side == 0 ? dd.lhs_batch : dd.rhs_batch;
  const auto& contr = side == 0 ? dd.lhs_contracting : dd.rhs_contracting;
  const auto& other_contr = side == 0 ? dd.rhs_contracting : dd.lhs_contracting;
  const auto& other_batch = side == 0 ? dd.rhs_batch : dd.lhs_batch;
  if (batch.size() != other_batch.size() || contr.size() != other_contr.size()) {
    *why = absl::StrCat("dot '", dot->name(), "' has mismatched dimension numbers");
    return false;
  }
  for (size_t j = 0; j < batch.size(); ++j) {
    if (batch[j] == d) {
      // Batch: the stationary operand is sliced on its matching batch dim, the block written
      // to output dim j (batch dims lead the dot output).
      p.batch = true;
      p.stat_dim = other_batch[j];
      p.out_dim = static_cast<int64_t>(j);
    }
  }
  for (size_t j = 0; j < contr.size(); ++j) {
    if (contr[j] == d) {
      p.contracting = true;
      p.stat_dim = other_contr[j];
    }
  }
  if (p.batch) {
    const Shape& st = dot->operand(1 - side)->shape();
    if (p.stat_dim < 0 || p.stat_dim >= st.rank() ||
        st.dims[static_cast<size_t>(p.stat_dim)] != n * p.block ||
        dot->shape().dims[static_cast<size_t>(p.out_dim)] != n * p.block) {
      *why = absl::StrCat("dot '", dot->name(),
                          "' batch dims do not match the gathered dim: inconsistent shapes");
      return false;
    }
  } else if (!p.contracting) {
    p.out_dim = DotOutputDimOfFree(dot, side, d);
    if (p.out_dim < 0) {
      *why = absl::StrCat("all-gather '", p.ag->name(), "' dim ", d,
                          " does not map to a dim of the dot output");
      return false;
    }
    if (p.out_dim >= dot->shape().rank() ||
        dot->shape().dims[static_cast<size_t>(p.out_dim)] != n * p.block) {
      *why = absl::StrCat("dot '", dot->name(), "' output dim ", p.out_dim,
                          " does not match the gathered dim: inconsistent shapes");
      return false;
    }
  } else {
    const Shape& st = dot->operand(1 - side)->shape();
    if (p.stat_dim < 0 || p.stat_dim >= st.rank() ||
        st.dims[static_cast<size_t>(p.stat_dim)] != n * p.block) {
      *why = absl::StrCat("dot '", dot->name(),
                          "' contracting dims do not match the gathered dim: inconsistent shapes");
      return false;
    }
  }
  return true;
}

// *why for a dot the user keeps out of windowed einsum (analysis/user_attributes.h).
bool UserKeepsUnwindowed(const HloInstruction* dot, std::string* why) {
  if (!UserDisablesCollectiveMatmul(*dot)) return false;
  *why = absl::StrCat("dot '", dot->name(),
                      "' carries the user's _xla_collective_matmul=\"none\": no windowed loop, as XLA "
                      "honours it");
  return true;
}

std::optional<AgPlan> PlanAllGatherDot(DecomposerContext& ctx, HloInstruction* dot, int side,
                                       const GatheredChain& chain, std::string* why) {
  if (UserKeepsUnwindowed(dot, why)) return std::nullopt;
  HloInstruction* ag = chain.ag;
  AgPlan p;
  p.dot = dot;
  p.ag = ag;
  p.side = side;
  if (dot->operand(0) == dot->operand(1)) {
    *why = absl::StrCat("both dot operands read all-gather '", ag->name(), "': unsupported");
    return std::nullopt;
  }
  const HloInstruction* attrs = CollectiveAttributes(ag);
  HloInstruction* x = CollectiveInput(ag);
  if (attrs == nullptr || x == nullptr || !ag->shape().IsArray() || attrs->dimensions.size() != 1) {
    *why = absl::StrCat(CollectiveText(ag),
                        " is not a single-operand array all-gather along one dim: unsupported");
    return std::nullopt;
  }
  if (AsyncStartOf(ag) != nullptr) {
    // The async pair goes away only if the loop replaces every reader of its result.
    std::string reader = NonWindowedReader(ag);
    if (!reader.empty()) {
      *why = absl::StrCat(CollectiveText(ag), ": its result is also read by ", reader,
                          ", which needs the whole gathered value; windowing the dot would keep "
                          "the async all-gather as well, so it stays as it is");
      return std::nullopt;
    }
  }
  auto ring = AnalyzePartitionRing(*attrs, ctx.num_partitions, ctx.module->replica_count);
  if (!ring.ok()) {
    *why = std::string(ring.status().message());
    return std::nullopt;
  }
  p.ring = *std::move(ring);
  if (!CheckRingSize(ctx, p.ring, why)) return std::nullopt;
  const int64_t n = p.ring.size();
  const int64_t d = attrs->dimensions[0];
  const Shape& xs = x->shape();
  if (d < 0 || d >= xs.rank() ||
      xs.dims[static_cast<size_t>(d)] * n != ag->shape().dims[static_cast<size_t>(d)]) {
    *why = absl::StrCat("all-gather '", ag->name(), "' dim ", d, " is not ", n,
                        " shards of its operand: inconsistent shapes");
    return std::nullopt;
  }
  if (!PlanAgOperands(ctx, chain, p, why)) return std::nullopt;
  const PrimitiveType t = dot->shape().element_type;
  p.acc_type =
      p.contracting && IsFloatingPoint(t) && !IsFp8(t) && BitWidth(t) < 32 ? PrimitiveType::F32 : t;
  std::string note;
  if (!CheckThreshold(ctx, ag, "gathered operand", dot, p.side, n, why, &note)) {
    return std::nullopt;
  }
  p.note = note;
  return p;
}

std::optional<RsPlan> PlanReduceScatter(DecomposerContext& ctx, HloInstruction* rs,
                                        std::string* why) {
  RsPlan p;
  p.result = rs;
  p.reduce = rs;
  const HloInstruction* attrs = CollectiveAttributes(rs);
  if (attrs == nullptr) {
    *why = "not a reduce-scatter in a form this pass reads";
    return std::nullopt;
  }
  // The dot, through views (each read only by the next one): vLLM's bmm + view.
  std::vector<HloInstruction*> views;
  HloInstruction* v = CollectiveInput(rs);
  while (v != nullptr && v->opcode() != HloOpcode::kDot && views.size() < 8 &&
         v->operand_count() == 1 &&
         (v->opcode() == HloOpcode::kReshape || v->opcode() == HloOpcode::kTranspose ||
          v->opcode() == HloOpcode::kCopy ||
          (v->opcode() == HloOpcode::kBitcast &&
           v->shape().element_type == v->operand(0)->shape().element_type))) {
    if (v->user_count() != 1) {
      *why = absl::StrCat("the view '", v->name(),
                          "' between the dot and the reduce-scatter has "
                          "other users: the full value must stay");
      return std::nullopt;
    }
    views.push_back(v);
    v = v->operand(0);
  }
  if (v == nullptr || v->opcode() != HloOpcode::kDot) {
    *why = absl::StrCat("reduce-scatter operand '", v != nullptr ? v->name() : std::string("?"),
                        "' is not a dot", views.empty() ? "" : " (nor views of a dot)");
    return std::nullopt;
  }
  p.dot = v;
  if (UserKeepsUnwindowed(p.dot, why)) return std::nullopt;
  if (attrs->called_computations().empty() || !IsSumComputation(attrs->to_apply())) {
    *why = "reduce-scatter reduction is not a sum";
    return std::nullopt;
  }
  if (!rs->shape().IsArray() || attrs->dimensions.size() != 1) {
    *why = "reduce-scatter is not an array scatter along one dim: unsupported";
    return std::nullopt;
  }
  auto ring = AnalyzePartitionRing(*attrs, ctx.num_partitions, ctx.module->replica_count);
  if (!ring.ok()) {
    *why = std::string(ring.status().message());
    return std::nullopt;
  }
  p.ring = *std::move(ring);
  const int64_t n = p.ring.size();
  // Map the scattered dim back to the dot's output, then the dot's blocks forward again.
  int64_t d = attrs->dimensions[0];
  if (n >= 2 && !views.empty()) {
    for (HloInstruction* view : views) {  // from the reduce-scatter's operand down
      int64_t in_dim = -1;
      std::string w;
      if (!MapViewBackward(view, d, n, &in_dim, &w)) {
        *why = absl::StrCat(
            "the dot reaches the reduce-scatter through a view that breaks the "
            "scattered dim: ",
            w, "; the reduce-scatter stays");
        return std::nullopt;
      }
      d = in_dim;
    }
    int64_t cur = d;
    for (auto it = views.rbegin(); it != views.rend(); ++it) {
      int64_t out_dim = -1;
      std::string w;
      if (!MapViewForward(*it, cur, n, &out_dim, &w)) {
        *why = absl::StrCat(
            "the dot reaches the reduce-scatter through a view that breaks the "
            "scattered dim: ",
            w, "; the reduce-scatter stays");
        return std::nullopt;
      }
      Shape s = (*it)->shape();
      s.dims[static_cast<size_t>(out_dim)] /= n;
      p.result_views.push_back({*it, s});
      cur = out_dim;
    }
    if (cur != attrs->dimensions[0] || p.result_views.back().shape.dims != rs->shape().dims) {
      *why = absl::StrCat("the views between dot '", p.dot->name(),
                          "' and the reduce-scatter do "
                          "not carry the scattered blocks to its dim ",
                          attrs->dimensions[0]);
      return std::nullopt;
    }
  }
  if (!FinishRsPlan(ctx, p, d, why)) return std::nullopt;
  PlanRsOperands(p);
  return p;
}

std::optional<RsPlan> PlanAllReduceSlice(DecomposerContext& ctx, HloInstruction* ds,
                                         std::string* why) {
  RsPlan p;
  p.result = ds;
  p.reduce = ds->operand(0);
  p.dot = CollectiveInput(p.reduce);
  HloInstruction* ar = p.reduce;
  const HloInstruction* attrs = CollectiveAttributes(ar);
  if (attrs == nullptr || p.dot == nullptr || p.dot->opcode() != HloOpcode::kDot) {
    *why = absl::StrCat("'", ar->name(), "' is not an all-reduce of a dot");
    return std::nullopt;
  }
  if (UserKeepsUnwindowed(p.dot, why)) return std::nullopt;
  if (attrs->called_computations().empty() || !IsSumComputation(attrs->to_apply())) {
    *why = absl::StrCat("all-reduce '", ar->name(), "' reduction is not a sum");
    return std::nullopt;
  }
  if (ar->user_count() != 1) {
    *why = absl::StrCat("all-reduce '", ar->name(), "' has users besides this dynamic-slice");
    return std::nullopt;
  }
  auto ring = AnalyzePartitionRing(*attrs, ctx.num_partitions, ctx.module->replica_count);
  if (!ring.ok()) {
    *why = std::string(ring.status().message());
    return std::nullopt;
  }
  p.ring = *std::move(ring);
  const Shape& fs = ar->shape();
  const Shape& ss = ds->shape();
  if (!fs.IsArray() || ss.rank() != fs.rank() || ds->operand_count() != 1 + fs.rank()) {
    *why = "dynamic-slice of the all-reduce has an unexpected form";
    return std::nullopt;
  }
  int64_t d = -1;
  for (int64_t i = 0; i < fs.rank(); ++i) {
    if (ss.dims[static_cast<size_t>(i)] != fs.dims[static_cast<size_t>(i)]) {
      if (d >= 0) {
        *why = "dynamic-slice of the all-reduce slices several dims: not a reduce-scatter";
        return std::nullopt;
      }
      d = i;
    }
  }
  if (d < 0) {
    *why = "dynamic-slice of the all-reduce takes the whole value: not a reduce-scatter";
    return std::nullopt;
  }
  const int64_t n = p.ring.size();
  if (n < 1 || ss.dims[static_cast<size_t>(d)] * n != fs.dims[static_cast<size_t>(d)]) {
    *why = absl::StrCat("dynamic-slice takes ", ss.dims[static_cast<size_t>(d)], " of ",
                        fs.dims[static_cast<size_t>(d)], " on dim ", d,
                        ", not one block per partition of ", RingText(p.ring));
    return std::nullopt;
  }
  const int64_t b = ss.dims[static_cast<size_t>(d)];
  for (int64_t pid = 0; pid < ctx.num_partitions; ++pid) {
    for (int64_t i = 0; i < fs.rank(); ++i) {
      auto val = EvaluateForPartition(ds->operand(1 + i), pid);
      int64_t want = i == d ? p.ring.index_in_group[static_cast<size_t>(pid)] * b : 0;
      if (!val) {
        *why = absl::StrCat("dynamic-slice offset '", ds->operand(1 + i)->name(),
                            "' is not a function of partition-id and constants");
        return std::nullopt;
      }
      int64_t clamped = std::clamp<int64_t>(
          *val, 0, fs.dims[static_cast<size_t>(i)] - ss.dims[static_cast<size_t>(i)]);
      if (clamped != want) {
        *why = absl::StrCat("dynamic-slice offset on dim ", i, " is ", clamped, " on partition ",
                            pid, ", not ", want, ": not the partition's reduce-scatter block");
        return std::nullopt;
      }
    }
  }
  if (!FinishRsPlan(ctx, p, d, why)) return std::nullopt;
  PlanRsOperands(p);
  return p;
}

absl::Status RemoveDeadChains(DecomposerContext& ctx, const std::vector<HloInstruction*>& seeds) {
  std::vector<HloInstruction*> work(seeds.begin(), seeds.end());
  while (!work.empty()) {
    HloInstruction* i = work.back();
    work.pop_back();
    if (ctx.removed.contains(i) || i->user_count() != 0 || i->IsRoot() ||
        !i->IsRemovableWhenUnused()) {
      continue;
    }
    std::vector<HloInstruction*> ops(i->operands().begin(), i->operands().end());
    if (i->opcode() == HloOpcode::kAsyncStart) {
      for (HloComputation* c : i->called_computations()) ctx.maybe_unused.push_back(c);
    }
    ctx.removed.insert(i);
    RETURN_IF_ERROR(i->parent()->RemoveInstruction(i));
    for (HloInstruction* o : ops) {
      if (!ctx.removed.contains(o)) work.push_back(o);
    }
  }
  return absl::OkStatus();
}

absl::Status FinishReplace(DecomposerContext& ctx, HloInstruction* old, HloInstruction* repl) {
  if (old->sharding) repl->sharding = old->sharding;
  RETURN_IF_ERROR(old->ReplaceAllUsesWith(repl));
  ctx.removed.insert(old);
  return old->parent()->RemoveInstruction(old);
}

}  // namespace weave::windowed_einsum
