#include "windowed_einsum/all_to_all_windowed_einsum.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analysis/dequantize.h"
#include "analysis/replication.h"
#include "hlo/builders.h"
#include "passes/cost_oracle.h"
#include "passes/gpu_backend_config.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {


constexpr char kXlaFlag[] = "xla_gpu_experimental_enable_alltoall_windowed_einsum";
constexpr char kChunksOption[] = "all-to-all-windowed-einsum-chunks";
constexpr char kMaxChunksOption[] = "all-to-all-windowed-einsum-max-chunks";
constexpr char kUnsafeOption[] = "all-to-all-windowed-einsum-unsafe-split-contracting";
constexpr char kRewriteOption[] = "all-to-all-windowed-einsum-rewrite";

// The layout ops the rewrite moves across the exchange (XLA's ShouldAddToChain).
bool IsLayoutOp(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kTranspose:
    case HloOpcode::kReshape:
    case HloOpcode::kCopy:
      return i->operand_count() == 1 && i->shape().IsArray();
    default:
      return false;
  }
}

// Data-movement ops an FP8 value may pass through on its way to the exchange (re-created in FP8).
bool IsFp8MovableLayoutOp(const HloInstruction* i) {
  if (IsLayoutOp(i)) return true;
  return i->opcode() == HloOpcode::kBitcast && i->operand_count() == 1 && i->shape().IsArray() &&
         i->shape().element_type == i->operand(0)->shape().element_type;
}

std::string OpName(const HloInstruction* i) { return std::string(HloOpcodeString(i->opcode())); }

// A dot already on its own compute stream is a step of a windowed einsum (this pass's chunks, or
// a windowed loop's): splitting it again would only add exchanges. Keeps the pass idempotent.
std::string AlreadyWindowed(const HloInstruction* dot) {
  const int64_t q = OperationQueueId(*dot);
  if (q == 0) return "";
  return absl::StrFormat("dot '%s' is already a step of a windowed einsum (operation_queue_id %d)",
                         dot->name(), q);
}

// Why `t` is not a qualifying all-to-all ("" if it is); *group_size receives G.
std::string QualifyAllToAll(const HloInstruction* t, int64_t* group_size) {
  if (!t->async_sugar().empty()) return "asynchronous form";
  if (t->operand_count() != 1 || !t->shape().IsArray()) {
    return "tuple form (no split dimension): nothing to chunk";
  }
  if (t->dimensions.size() != 1) return "no split dimension";
  if (t->constrain_layout) return "constrain_layout=true";
  if (!t->replica_groups || t->replica_groups->groups.empty()) {
    return "no explicit replica groups (XLA requires a non-empty list)";
  }
  const auto& groups = t->replica_groups->groups;
  const size_t g = groups[0].size();
  for (const auto& grp : groups) {
    if (grp.size() != g) {
      return absl::StrFormat("replica groups of unequal sizes (%d and %d)", g, grp.size());
    }
  }
  if (g < 2) return "groups of one device: nothing is exchanged";
  *group_size = static_cast<int64_t>(g);
  return "";
}

std::string DimsText(const std::vector<const HloInstruction*>& chain) {
  std::vector<std::string> names;
  for (const HloInstruction* c : chain) names.push_back(OpName(c));
  return absl::StrJoin(names, ", ");
}

// One candidate: an all-to-all T and the dot on the other side of its layout chain.
struct Candidate {
  bool exchange_first = true;          // A (T -> chain -> D) or B (M -> chain -> T)
  HloInstruction* a2a = nullptr;       // T
  HloInstruction* dot = nullptr;       // D (A) or M (B)
  // Layout ops in data-flow order: A: chain[0] reads T, the last is D's operand; B: chain[0]
  // reads M, the last is T's operand. For A the chain may also hold element-wise steps applied
  // after the exchange (per_chunk[i] true): a convert, or a multiply/divide by a scalar
  // broadcast, i.e. a dequantization of the exchanged FP8 value; those are re-applied to each
  // chunk after its all-to-all instead of moving before it.
  std::vector<HloInstruction*> chain;
  std::vector<bool> per_chunk;
  int64_t split = 0;   // split dim at the dot side: A on D's exchanged operand, B on M
  int64_t side = 0;    // A: index of the exchanged operand of D
  int64_t group_size = 0;
  int64_t k = 0;       // contracted extent
  int64_t lhs_c = 0, rhs_c = 0;  // the dot's contracting dims
};

std::string Describe(const Candidate& c) {
  std::vector<const HloInstruction*> chain, elementwise;
  for (size_t i = 0; i < c.chain.size(); ++i) {
    (i < c.per_chunk.size() && c.per_chunk[i] ? elementwise : chain).push_back(c.chain[i]);
  }
  std::string moved = chain.empty() ? ""
                                    : absl::StrCat("; ", DimsText(chain), " moved ",
                                                   c.exchange_first ? "before" : "after",
                                                   " the exchange");
  if (!elementwise.empty()) {
    absl::StrAppend(&moved, "; ", DimsText(elementwise), " applied to each chunk after its exchange");
  }
  return absl::StrFormat("G=%d, K=%d, split dim %d at the dot%s", c.group_size, c.k, c.split,
                         moved);
}

// A step after the exchange that commutes with slicing and exchanging because it is element-wise
// with nothing but scalars: convert, or multiply/divide (the chain value the dividend) by a
// broadcast of a rank-0 value. Its operand `cur` is the chain value.
bool IsPerChunkElementwise(const HloInstruction* u, const HloInstruction* cur) {
  if (!u->shape().IsArray()) return false;
  if (u->opcode() == HloOpcode::kConvert) return u->operand_count() == 1;
  if (u->opcode() != HloOpcode::kMultiply && u->opcode() != HloOpcode::kDivide) return false;
  if (u->operand_count() != 2 || u->operand(0) == u->operand(1)) return false;
  if (u->opcode() == HloOpcode::kDivide && u->operand(0) != cur) return false;
  const HloInstruction* b = u->operand(0) == cur ? u->operand(1) : u->operand(0);
  return b->opcode() == HloOpcode::kBroadcast && b->operand_count() == 1 &&
         b->dimensions.empty() && b->operand(0)->shape().IsArray() &&
         b->operand(0)->shape().rank() == 0;
}

// Rewrite A's candidate starting from all-to-all `t`; "" and *c filled, or the reason.
std::string AnalyzeA(HloInstruction* t, int64_t group_size, bool unsafe, Candidate* c) {
  c->exchange_first = true;
  c->a2a = t;
  c->group_size = group_size;
  int64_t s = t->dimensions[0];
  HloInstruction* cur = t;
  while (true) {
    if (cur->IsRoot() || cur->user_count() != 1) {
      return cur == t ? absl::StrFormat("it has %d users%s (one dot must read it alone)",
                                        cur->user_count(), cur->IsRoot() ? " and is the root" : "")
                      : absl::StrFormat("'%s' between it and the dot has %d users%s",
                                        cur->name(), cur->user_count(),
                                        cur->IsRoot() ? " and is the root" : "");
    }
    HloInstruction* u = cur->users()[0];
    if (u->opcode() == HloOpcode::kDot) {
      c->dot = u;
      break;
    }
    if (IsPerChunkElementwise(u, cur)) {
      c->chain.push_back(u);
      c->per_chunk.push_back(true);
      cur = u;
      continue;
    }
    if (!IsLayoutOp(u)) {
      return absl::StrFormat(
          "its user '%s' (%s) is not a dot, transpose, reshape, copy or a dequantization step",
          u->name(), OpName(u));
    }
    if (u->opcode() == HloOpcode::kTranspose) {
      int64_t j = -1;
      for (size_t k = 0; k < u->dimensions.size(); ++k) {
        if (u->dimensions[k] == s) j = static_cast<int64_t>(k);
      }
      if (j < 0) return absl::StrFormat("transpose '%s' has no dimension %d", u->name(), s);
      s = j;
    } else if (u->opcode() == HloOpcode::kReshape) {
      std::optional<int64_t> kept = DimKeptByReshape(cur->shape(), u->shape(), s);
      if (!kept) {
        return absl::StrFormat("reshape '%s' changes the split dim %d (%s -> %s)", u->name(), s,
                               cur->shape().ToString(false), u->shape().ToString(false));
      }
      s = *kept;
    }
    c->chain.push_back(u);
    c->per_chunk.push_back(false);
    cur = u;
  }
  HloInstruction* d = c->dot;
  if (d->operand_count() != 2) return "malformed dot";
  if (std::string why = AlreadyWindowed(d); !why.empty()) return why;
  if (d->operand(0) == cur && d->operand(1) == cur) {
    return absl::StrFormat("dot '%s' reads the exchanged value on both sides", d->name());
  }
  c->side = d->operand(0) == cur ? 0 : 1;
  if (d->dot_dims().lhs_contracting.size() != 1 || d->dot_dims().rhs_contracting.size() != 1) {
    return absl::StrFormat("dot '%s' has %d/%d contracting dims (one per side needed)", d->name(),
                           d->dot_dims().lhs_contracting.size(),
                           d->dot_dims().rhs_contracting.size());
  }
  c->lhs_c = d->dot_dims().lhs_contracting[0];
  c->rhs_c = d->dot_dims().rhs_contracting[0];
  c->split = s;
  const int64_t cl = c->side == 0 ? c->lhs_c : c->rhs_c;
  c->k = cur->shape().dims.at(static_cast<size_t>(cl));
  if (s == cl && !unsafe) {
    return absl::StrFormat(
        "the split dim %d of dot '%s''s %s operand is its contracting dim: chunking the "
        "contraction would pair blocks of different partitions (wrong result; XLA does not "
        "check this)",
        s, d->name(), c->side == 0 ? "lhs" : "rhs");
  }
  return "";
}

// Rewrite B's candidate: all-to-all `t` reading (through the layout chain) a dot.
std::string AnalyzeB(HloInstruction* t, int64_t group_size, Candidate* c) {
  c->exchange_first = false;
  c->a2a = t;
  c->group_size = group_size;
  int64_t s = t->dimensions[0];
  HloInstruction* cur = t->operand(0);
  std::vector<HloInstruction*> up;  // from T's operand upward
  while (true) {
    if (cur->IsRoot() || cur->user_count() != 1) {
      return absl::StrFormat("'%s' (%s) has %d users%s (the exchange must be its only reader)",
                             cur->name(), OpName(cur), cur->user_count(),
                             cur->IsRoot() ? " and is the root" : "");
    }
    if (cur->opcode() == HloOpcode::kDot) {
      c->dot = cur;
      break;
    }
    if (!IsLayoutOp(cur)) {
      return absl::StrFormat("its operand '%s' (%s) is not a dot, transpose, reshape or copy",
                             cur->name(), OpName(cur));
    }
    if (cur->opcode() == HloOpcode::kTranspose) {
      if (s < 0 || s >= static_cast<int64_t>(cur->dimensions.size())) {
        return absl::StrFormat("transpose '%s' has no dimension %d", cur->name(), s);
      }
      s = cur->dimensions[static_cast<size_t>(s)];
    } else if (cur->opcode() == HloOpcode::kReshape) {
      std::optional<int64_t> kept = DimKeptByReshape(cur->shape(), cur->operand(0)->shape(), s);
      if (!kept) {
        return absl::StrFormat("reshape '%s' changes the split dim %d (%s -> %s)", cur->name(), s,
                               cur->operand(0)->shape().ToString(false),
                               cur->shape().ToString(false));
      }
      s = *kept;
    }
    up.push_back(cur);
    cur = cur->operand(0);
  }
  c->chain.assign(up.rbegin(), up.rend());
  HloInstruction* m = c->dot;
  if (m->operand_count() != 2) return "malformed dot";
  if (std::string why = AlreadyWindowed(m); !why.empty()) return why;
  if (m->dot_dims().lhs_contracting.size() != 1 || m->dot_dims().rhs_contracting.size() != 1) {
    return absl::StrFormat("dot '%s' has %d/%d contracting dims (one per side needed)", m->name(),
                           m->dot_dims().lhs_contracting.size(),
                           m->dot_dims().rhs_contracting.size());
  }
  c->lhs_c = m->dot_dims().lhs_contracting[0];
  c->rhs_c = m->dot_dims().rhs_contracting[0];
  c->k = m->operand(1)->shape().dims.at(static_cast<size_t>(c->rhs_c));
  c->split = s;
  return "";
}

// An FP8 value that the exchanged operand Y dequantizes: Y = layout*(dequant(q, scale)).
struct Fp8Source {
  DequantMatch dq;
  std::vector<HloInstruction*> ops;  // layout ops from the dequantization down to Y
  std::string assumed;  // unannotated parameters the scale proof took as replicated
};

// Finds Y's FP8 source; "" on success, else why the chunks travel in the wide type ("" with
// *found false when Y does not derive from FP8 at all). The scale must be the same on the
// members of each of the exchange `t`'s groups (a member dequantizes what the others sent with
// its own scale); it may differ between groups.
std::string FindFp8Source(HloInstruction* y, const HloInstruction* t, Fp8Source* src,
                          bool* found) {
  *found = false;
  std::vector<HloInstruction*> down;
  HloInstruction* cur = y;
  while (IsFp8MovableLayoutOp(cur) && down.size() < 64) {
    down.push_back(cur);
    cur = cur->operand(0);
  }
  std::optional<DequantMatch> dq = MatchDequantize(cur);
  if (!dq) return "";
  if (!IsDequantizableFp8(dq->fp8_type)) return "";
  *found = true;
  if (!IsScalarScale(*dq)) {
    return absl::StrFormat("scale '%s' is not a scalar of the wide type", dq->scale->name());
  }
  // Cross-partition exchanges name partition ids in their groups; otherwise prove it everywhere.
  const bool by_partition = t->channel_id.has_value() || t->use_global_device_ids;
  const ReplicationProof proof = ProveSameWithinGroups(
      dq->scale, by_partition && t->replica_groups ? t->replica_groups->groups
                                                   : std::vector<std::vector<int64_t>>{});
  if (!proof.proven) {
    return absl::StrFormat("scale '%s' is not proven the same within each exchange group (%s)",
                           dq->scale->name(), proof.why);
  }
  std::vector<std::string> assumed;
  for (const HloInstruction* p : proof.unannotated_parameters) assumed.push_back(p->name());
  if (!assumed.empty()) {
    src->assumed = absl::StrCat("parameter(s) ", absl::StrJoin(assumed, ", "),
                                " without sharding taken as replicated (XLA's SPMD semantics)");
  }
  src->dq = *dq;
  src->ops.assign(down.rbegin(), down.rend());
  return "";
}

// Copies `from`'s metadata (and sharding, for equal dims) onto a derived instruction, as XLA's
// SetupDerivedInstruction.
void Derive(const HloInstruction* from, HloInstruction* to) {
  to->metadata = from->metadata;
  if (from->sharding && from->shape().IsArray() && to->shape().IsArray() &&
      from->shape().dims == to->shape().dims) {
    to->sharding = from->sharding;
  }
}

HloInstruction* SliceDimRange(HloComputation* comp, HloInstruction* v, int64_t dim, int64_t start,
                              int64_t limit, const HloInstruction* derive_from,
                              const std::string& name) {
  Shape s = v->shape();
  s.dims[static_cast<size_t>(dim)] = limit - start;
  HloInstruction* sl = comp->AddInstruction(HloOpcode::kSlice, s, {v}, name);
  for (int64_t d = 0; d < v->shape().rank(); ++d) {
    sl->mutable_slice()->push_back(d == dim ? SliceDim{start, limit, 1}
                                 : SliceDim{0, v->shape().dims[static_cast<size_t>(d)], 1});
  }
  Derive(derive_from, sl);
  return sl;
}

HloInstruction* Zeros(HloComputation* comp, const Shape& shape, const HloInstruction* derive_from,
                      const std::string& name) {
  HloInstruction* b = AddZeros(comp, shape, name);
  Derive(derive_from, b);
  return b;
}

// Module-wide counters for new collectives and streams.
struct Ids {
  int64_t next_channel = 1;
  int64_t next_queue = 1;
};

// What an applied rewrite reports.
struct Applied {
  int64_t q0 = 0;
  std::string wire;      // element type the chunks exchange
  std::string fp8_note;  // why an FP8 operand still travels wide ("" if not applicable)
  std::string fp8_assumed;  // what the FP8 exchange's scale proof assumed ("" if nothing)
};

// A partial all-to-all: T's attributes, a new operand and shape, split dim s, a fresh channel.
HloInstruction* PartialExchange(HloComputation* comp, const HloInstruction* t, HloInstruction* v,
                                int64_t s, Ids* ids) {
  HloInstruction* a =
      comp->AddInstruction(t->CloneWithNewOperands(v->shape(), {v}, ".chunk"));
  a->dimensions = {s};
  a->constrain_layout = false;
  a->channel_id = ids->next_channel++;
  return a;
}

// A partial dot: D's attributes, new operands, its own operation queue, written in the backend
// config schema of `version` (other fields of D's config kept; a config that is not JSON is
// replaced, as XLA cannot read it either).
HloInstruction* PartialDot(HloComputation* comp, const HloInstruction* d, HloInstruction* lhs,
                           HloInstruction* rhs, int64_t queue, XlaBackendConfigVersion version) {
  HloInstruction* p = comp->AddInstruction(d->CloneWithNewOperands(d->shape(), {lhs, rhs},
                                                                   ".chunk"));
  absl::StatusOr<GpuBackendConfigEditor> e = GpuBackendConfigEditor::Of(*p, version);
  GpuBackendConfigEditor editor = e.ok() ? *std::move(e) : GpuBackendConfigEditor(version);
  editor.set_operation_queue_id(queue);
  editor.ApplyTo(p);
  return p;
}

absl::StatusOr<Applied> ApplyA(const Candidate& c, int64_t chunks, Ids* ids,
                               XlaBackendConfigVersion schema) {
  HloInstruction* t = c.a2a;
  HloInstruction* d = c.dot;
  HloComputation* comp = d->parent();
  const std::string d_name = d->name(), t_name = t->name();
  Applied out;
  // Move the layout chain before the exchange: it now runs on the un-exchanged data. Element-wise
  // steps are re-applied to each chunk after its exchange (they commute with both).
  HloInstruction* y = t->operand(0);
  const bool has_elementwise =
      std::find(c.per_chunk.begin(), c.per_chunk.end(), true) != c.per_chunk.end();
  // (op, index of the chain value among its operands)
  std::vector<std::pair<HloInstruction*, int64_t>> elementwise;
  if (!has_elementwise) {
    if (!c.chain.empty()) {
      RETURN_IF_ERROR(c.chain[0]->ReplaceOperandWith(0, y));
      y = c.chain.back();
    }
  } else {
    // The layout ops, re-created in order on T's operand in T's element type; the originals
    // die with the dot.
    const PrimitiveType tt = t->shape().element_type;
    for (size_t i = 0; i < c.chain.size(); ++i) {
      HloInstruction* op = c.chain[i];
      if (c.per_chunk[i]) {
        const HloInstruction* prev = i == 0 ? t : c.chain[i - 1];
        elementwise.push_back({op, op->operand(0) == prev ? 0 : 1});
        continue;
      }
      y = comp->AddInstruction(op->CloneWithNewOperands(op->shape().WithElementType(tt), {y}));
    }
  }
  Fp8Source fp8;
  bool from_fp8 = false;
  out.fp8_note = FindFp8Source(y, t, &fp8, &from_fp8);
  const bool exchange_fp8 = from_fp8 && out.fp8_note.empty();
  if (exchange_fp8) out.fp8_assumed = fp8.assumed;
  HloInstruction* src = y;
  if (exchange_fp8) {
    src = fp8.dq.q;
    for (HloInstruction* op : fp8.ops) {
      src = comp->AddInstruction(
          op->CloneWithNewOperands(op->shape().WithElementType(fp8.dq.fp8_type), {src}, ".fp8"));
    }
  }
  out.wire = std::string(PrimitiveTypeName(src->shape().element_type));
  HloInstruction* r = d->operand(1 - c.side);
  const int64_t cl = c.side == 0 ? c.lhs_c : c.rhs_c;
  const int64_t cr = c.side == 0 ? c.rhs_c : c.lhs_c;
  const int64_t step = c.k / chunks;
  out.q0 = std::max(ids->next_channel, ids->next_queue);
  HloInstruction* acc = Zeros(comp, d->shape(), t, d_name + ".acc");
  for (int64_t i = 0; i < chunks; ++i) {
    HloInstruction* ys = SliceDimRange(comp, src, cl, i * step, (i + 1) * step, t,
                                       absl::StrCat(t_name, ".in", i));
    HloInstruction* a = PartialExchange(comp, t, ys, c.split, ids);
    HloInstruction* av = a;
    if (exchange_fp8) {
      av = BuildDequantize(comp, a, fp8.dq.scale, fp8.dq.is_divide, fp8.dq.wide_type, a->shape());
    }
    for (const auto& [op, at] : elementwise) {
      const Shape out = av->shape().WithElementType(op->shape().element_type);
      if (op->opcode() == HloOpcode::kConvert) {
        av = comp->AddInstruction(op->CloneWithNewOperands(out, {av}));
        continue;
      }
      const HloInstruction* b = op->operand(1 - at);
      HloInstruction* nb = comp->AddInstruction(b->CloneWithNewOperands(
          out.WithElementType(b->shape().element_type), {b->operand(0)}));
      av = comp->AddInstruction(
          op->CloneWithNewOperands(out, at == 0 ? std::vector<HloInstruction*>{av, nb}
                                                : std::vector<HloInstruction*>{nb, av}));
    }
    HloInstruction* rs = SliceDimRange(comp, r, cr, i * step, (i + 1) * step, t,
                                       absl::StrCat(r->name(), ".k", i));
    HloInstruction* p = c.side == 0 ? PartialDot(comp, d, av, rs, out.q0 + i, schema)
                                    : PartialDot(comp, d, rs, av, out.q0 + i, schema);
    acc = comp->AddInstruction(HloOpcode::kAdd, d->shape(), {p, acc},
                               absl::StrCat(d_name, ".sum", i));
    Derive(t, acc);
  }
  ids->next_queue = out.q0 + chunks;
  RETURN_IF_ERROR(d->ReplaceAllUsesWith(acc));
  if (absl::Status st = comp->RemoveUnusedChains(
          {d, t}, [](const HloInstruction* i) { return i->IsRemovableWhenUnused(); });
      !st.ok()) {
    return st;
  }
  acc->set_name(d_name);  // the value keeps its name (D's name stays reserved in the module)
  return out;
}

absl::StatusOr<Applied> ApplyB(const Candidate& c, int64_t chunks, Ids* ids,
                               XlaBackendConfigVersion schema) {
  HloInstruction* t = c.a2a;
  HloInstruction* m = c.dot;
  HloComputation* comp = m->parent();
  const std::string t_name = t->name();
  Applied out;
  out.wire = std::string(PrimitiveTypeName(m->shape().element_type));
  HloInstruction* l = m->operand(0);
  HloInstruction* r = m->operand(1);
  const int64_t step = c.k / chunks;
  out.q0 = std::max(ids->next_channel, ids->next_queue);
  HloInstruction* acc = Zeros(comp, m->shape(), t, t_name + ".acc");
  for (int64_t i = 0; i < chunks; ++i) {
    HloInstruction* ls = SliceDimRange(comp, l, c.lhs_c, i * step, (i + 1) * step, t,
                                       absl::StrCat(l->name(), ".k", i));
    HloInstruction* rs = SliceDimRange(comp, r, c.rhs_c, i * step, (i + 1) * step, t,
                                       absl::StrCat(r->name(), ".k", i));
    HloInstruction* p = PartialDot(comp, m, ls, rs, out.q0 + i, schema);
    HloInstruction* a = PartialExchange(comp, t, p, c.split, ids);
    acc = comp->AddInstruction(HloOpcode::kAdd, m->shape(), {a, acc},
                               absl::StrCat(t_name, ".sum", i));
    Derive(t, acc);
  }
  ids->next_queue = out.q0 + chunks;
  std::vector<HloInstruction*> seeds = {t};
  if (c.chain.empty()) {
    RETURN_IF_ERROR(t->ReplaceAllUsesWith(acc));
  } else {
    RETURN_IF_ERROR(c.chain[0]->ReplaceOperandWith(0, acc));
    RETURN_IF_ERROR(t->ReplaceAllUsesWith(c.chain.back()));
    seeds.push_back(m);
  }
  if (absl::Status st = comp->RemoveUnusedChains(
          seeds, [](const HloInstruction* i) { return i->IsRemovableWhenUnused(); });
      !st.ok()) {
    return st;
  }
  acc->set_name(c.chain.empty() ? t_name : t_name + ".exchanged");
  return out;
}

// Divisors of k in [2, max_chunks], ascending.
std::vector<int64_t> ChunkCounts(int64_t k, int64_t max_chunks) {
  std::vector<int64_t> out;
  for (int64_t d = 2; d <= std::min(k, max_chunks); ++d) {
    if (k % d == 0) out.push_back(d);
  }
  return out;
}

// The rewrite chosen for one all-to-all: a candidate and its chunk count, and why.
struct Choice {
  const Candidate* chosen = nullptr;
  int64_t chunks = 0;
  std::string decision;  // for the remark
};

// Why the all-to-all has no windowed form, for its remark: each rewrite's reason, or that the
// rewrite option leaves it out.
std::string NoWindowedForm(const AllToAllWindowedEinsumOptions& o, const std::string& why_a,
                           const std::string& why_b) {
  return absl::StrCat("no windowed form: as the dot's operand (A): ",
                      o.allow_a ? why_a : "not allowed by --" + std::string(kRewriteOption),
                      "; as the dot's result (B): ",
                      o.allow_b ? why_b : "not allowed by --" + std::string(kRewriteOption));
}

// Without the cost gate (or forced by an option): the first of `valid` whose K divides into the
// option's chunk count, else into the group size `g`. False with *why_not when none does.
bool ChooseWithoutGate(const std::vector<const Candidate*>& valid,
                       const AllToAllWindowedEinsumOptions& o, int64_t g, bool forced,
                       Choice* choice, std::string* why_not) {
  const int64_t chunks = o.chunks > 0 ? o.chunks : g;
  choice->chunks = chunks;
  std::vector<std::string> refused;
  for (const Candidate* c : valid) {
    if (c->k % chunks == 0) {
      choice->chosen = c;
      break;
    }
    refused.push_back(absl::StrFormat(
        "%s: K=%d is not divisible into %d chunks%s", c->exchange_first ? "A" : "B", c->k,
        chunks, o.chunks > 0 ? "" : " (XLA uses one chunk per group member)"));
  }
  if (!choice->chosen) {
    *why_not = absl::StrJoin(refused, "; ");
    return false;
  }
  choice->decision =
      o.chunks > 0 ? absl::StrCat("chunk count set by --", kChunksOption)
      : forced     ? absl::StrCat("forced by --", kXlaFlag, "=true")
                   : "no cost gate: every match is rewritten, one chunk per group member";
  return true;
}

// The cost gate's choice for the all-to-all at `loc` (group size `g`): one query whose variants
// are "without" and each (rewrite of `valid`, chunk count dividing its K). False with *why_not
// when no chunk count applies or "without" is fastest.
bool ChooseWithGate(CostOracle* oracle, const std::string& loc,
                    const std::vector<const Candidate*>& valid,
                    const AllToAllWindowedEinsumOptions& o, int64_t g, Choice* choice,
                    std::string* why_not) {
  // The cost gate: one query for this all-to-all, one variant per (rewrite, chunk count).
  CostQuery q;
  q.pass = std::string(AllToAllWindowedEinsum::kName);
  q.location = loc;
  q.what = absl::StrCat("all-to-all '", loc, "'");
  // The candidate's instructions, in a stable order (the all-to-all first).
  std::vector<const HloInstruction*> seeds;
  absl::flat_hash_set<const HloInstruction*> seen;
  auto seed = [&](const HloInstruction* i) {
    if (seen.insert(i).second) seeds.push_back(i);
  };
  q.variants.push_back({"without", false, {}});
  std::vector<std::pair<const Candidate*, int64_t>> plan = {{nullptr, 0}};
  std::vector<std::string> nothing;
  for (const Candidate* c : valid) {
    const char* tag = c->exchange_first ? "A" : "B";
    absl::StrAppend(&q.what, c->exchange_first ? " -> dot '" : " <- dot '", c->dot->name(),
                    "'");
    seed(c->a2a);
    for (const HloInstruction* op : c->chain) seed(op);
    seed(c->dot);
    std::vector<int64_t> counts = ChunkCounts(c->k, o.max_chunks);
    if (counts.empty()) {
      nothing.push_back(absl::StrFormat("%s: no chunk count in [2, %d] divides K=%d", tag,
                                        o.max_chunks, c->k));
    }
    for (int64_t n : counts) {
      q.variants.push_back({absl::StrFormat("with %s in %d chunks", tag, n),
                            true,
                            {{kRewriteOption, tag}, {kChunksOption, absl::StrCat(n)}}});
      plan.push_back({c, n});
      // Without an estimate: what the pass does without the gate (B before A, C = G).
      if (q.fallback < 0 && n == g) q.fallback = static_cast<int>(plan.size()) - 1;
    }
  }
  if (q.variants.size() < 2) {
    *why_not = absl::StrJoin(nothing, "; ");
    return false;
  }
  if (q.fallback < 0) q.fallback = 0;
  q.seeds = std::move(seeds);
  CostEstimate e = oracle->Decide(q);
  const int pick = e.chosen >= 0 && e.chosen < static_cast<int>(plan.size()) ? e.chosen : 0;
  if (pick == 0) {
    *why_not = e.Note();
    return false;
  }
  choice->chosen = plan[static_cast<size_t>(pick)].first;
  choice->chunks = plan[static_cast<size_t>(pick)].second;
  choice->decision = e.Note();
  return true;
}

// The remark on rewrite `c` applied in `chunks` chunks (`dot_name`, `desc`: the dot's name and
// Describe(c), taken before the rewrite).
std::string AppliedRemark(const Candidate& c, const std::string& dot_name, const std::string& desc,
                          int64_t chunks, const Applied& applied, const std::string& decision) {
  std::string msg;
  if (c.exchange_first) {
    msg = absl::StrFormat(
        "rewrite A (all-to-all -> dot '%s', %s operand): %d chunks of %d along the contraction "
        "(%s); %d all-to-alls in %s, partial dots on operation queues %d..%d; %s",
        dot_name, c.side == 0 ? "lhs" : "rhs", chunks, c.k / chunks, desc, chunks,
        applied.wire, applied.q0, applied.q0 + chunks - 1, decision);
    if (!applied.fp8_assumed.empty()) {
      absl::StrAppend(&msg, "; FP8 exchange: ", applied.fp8_assumed);
    }
    if (!applied.fp8_note.empty()) {
      absl::StrAppend(&msg, "; the FP8 operand is exchanged dequantized: ", applied.fp8_note);
    }
  } else {
    msg = absl::StrFormat(
        "rewrite B (dot '%s' -> all-to-all): %d chunks of %d along the contraction (%s); %d "
        "all-to-alls in %s, each of the full output (%dx the bytes of the original), partial "
        "dots on operation queues %d..%d; %s",
        dot_name, chunks, c.k / chunks, desc, chunks, applied.wire, chunks, applied.q0,
        applied.q0 + chunks - 1, decision);
  }
  return msg;
}

}  // namespace

std::optional<int64_t> DimKeptByReshape(const Shape& from, const Shape& to, int64_t dim) {
  if (dim < 0 || dim >= from.rank()) return std::nullopt;
  for (int64_t v : from.dims) {
    if (v <= 0) return std::nullopt;
  }
  for (int64_t v : to.dims) {
    if (v <= 0) return std::nullopt;
  }
  // Prefix products (fit in int64: the element counts of verified shapes do).
  auto prefix = [](const std::vector<int64_t>& dims) {
    std::vector<int64_t> p(dims.size() + 1, 1);
    for (size_t i = 0; i < dims.size(); ++i) p[i + 1] = p[i] * dims[i];
    return p;
  };
  std::vector<int64_t> pa = prefix(from.dims), pb = prefix(to.dims);
  if (pa.back() != pb.back()) return std::nullopt;
  const size_t d = static_cast<size_t>(dim);
  for (size_t l = 0; l < to.dims.size(); ++l) {
    if (pb[l] == pa[d] && pb[l + 1] == pa[d + 1] && to.dims[l] == from.dims[d]) {
      return static_cast<int64_t>(l);
    }
  }
  return std::nullopt;
}

absl::StatusOr<AllToAllWindowedEinsumOptions> ParseAllToAllWindowedEinsumOptions(
    const PassOptions& options) {
  AllToAllWindowedEinsumOptions o;
  if (options.Has(kXlaFlag)) {
    ASSIGN_OR_RETURN(bool v, options.GetBool(kXlaFlag, false));
    o.xla_enable = v;
  }
  ASSIGN_OR_RETURN(int64_t chunks, options.GetInt(kChunksOption, 0));
  if (chunks != 0 && chunks < 2) {
    return absl::InvalidArgumentError(absl::StrCat("option --", kChunksOption,
                                                   ": needs at least 2 chunks (0 = chosen by the "
                                                   "cost model), got ", chunks));
  }
  o.chunks = chunks;
  ASSIGN_OR_RETURN(int64_t max_chunks, options.GetInt(kMaxChunksOption, 32));
  if (max_chunks < 2 || max_chunks > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("option --", kMaxChunksOption, ": must be in [2, 1024], got ", max_chunks));
  }
  o.max_chunks = max_chunks;
  ASSIGN_OR_RETURN(XlaBackendConfigVersion schema, XlaBackendConfigVersionFromOptions(options));
  o.schema = schema;
  ASSIGN_OR_RETURN(bool unsafe, options.GetBool(kUnsafeOption, false));
  o.unsafe_split_contracting = unsafe;
  const std::string only = options.GetString(kRewriteOption, "any");
  if (only == "A" || only == "a") {
    o.allow_b = false;
  } else if (only == "B" || only == "b") {
    o.allow_a = false;
  } else if (only != "any") {
    return absl::InvalidArgumentError(absl::StrCat("option --", kRewriteOption, ": '", only,
                                                   "' is not one of A, B, any"));
  }
  return o;
}

absl::StatusOr<bool> AllToAllWindowedEinsum::Run(HloModule* module) {
  std::vector<std::pair<HloComputation*, HloInstruction*>> a2as;
  Ids ids;
  ids.next_channel = module->NextChannelId();
  int64_t max_queue = 0;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    for (HloInstruction* i : comp->MakeInstructionPostOrder()) {
      if (i->opcode() == HloOpcode::kAllToAll) a2as.push_back({comp, i});
      if (!i->backend_config.empty()) max_queue = std::max(max_queue, OperationQueueId(*i));
    }
  }
  ids.next_queue = max_queue + 1;
  if (a2as.empty()) return false;
  const bool disabled = options_.xla_enable.has_value() && !*options_.xla_enable;
  const bool forced = (options_.xla_enable.value_or(false)) || options_.chunks > 0;
  bool changed = false;
  for (auto& [comp, t] : a2as) {
    const std::string loc = t->name();
    if (disabled) {
      AddRemark(loc, false, absl::StrCat("disabled by --", kXlaFlag, "=false"));
      continue;
    }
    int64_t g = 0;
    if (std::string why = QualifyAllToAll(t, &g); !why.empty()) {
      AddRemark(loc, false, absl::StrCat("not a candidate: ", why));
      continue;
    }
    Candidate ca, cb;
    const std::string why_a = AnalyzeA(t, g, options_.unsafe_split_contracting, &ca);
    const std::string why_b = AnalyzeB(t, g, &cb);
    std::vector<const Candidate*> valid;
    // XLA's visitor order: B (at T) before A (at the dot T feeds).
    if (why_b.empty() && options_.allow_b) valid.push_back(&cb);
    if (why_a.empty() && options_.allow_a) valid.push_back(&ca);
    if (valid.empty()) {
      AddRemark(loc, false, NoWindowedForm(options_, why_a, why_b));
      continue;
    }
    Choice choice;
    std::string why_not;
    CostOracle* oracle = cost_oracle();
    const bool chosen = forced || oracle == nullptr
                            ? ChooseWithoutGate(valid, options_, g, forced, &choice, &why_not)
                            : ChooseWithGate(oracle, loc, valid, options_, g, &choice, &why_not);
    if (!chosen) {
      AddRemark(loc, false, absl::StrCat("not rewritten: ", why_not));
      continue;
    }
    const Candidate& c = *choice.chosen;
    const int64_t chunks = choice.chunks;
    const std::string dot_name = c.dot->name();
    const std::string desc = Describe(c);
    ASSIGN_OR_RETURN(Applied applied, c.exchange_first ? ApplyA(c, chunks, &ids, options_.schema)
                                                       : ApplyB(c, chunks, &ids, options_.schema));
    changed = true;
    AddRemark(loc, true, AppliedRemark(c, dot_name, desc, chunks, applied, choice.decision));
  }
  return changed;
}

WEAVE_REGISTER_PASS("all-to-all-windowed-einsum",
                    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      ASSIGN_OR_RETURN(auto o, ParseAllToAllWindowedEinsumOptions(options));
                      return std::unique_ptr<HloPass>(
                          std::make_unique<AllToAllWindowedEinsum>(o));
                    });

}  // namespace weave
