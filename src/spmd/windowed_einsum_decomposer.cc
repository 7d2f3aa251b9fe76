#include "spmd/windowed_einsum_decomposer.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "analysis/dequantize.h"
#include "spmd/partition_ring.h"

namespace weave {
namespace {

constexpr char kBodyAg[] = "windowed_dot_general_body_ag";
constexpr char kCondAg[] = "windowed_dot_general_cond_ag";
constexpr char kBodyRs[] = "windowed_dot_general_body_rs";
constexpr char kCondRs[] = "windowed_dot_general_cond_rs";

Shape WithDim(const Shape& s, int64_t dim, int64_t size) {
  Shape r = s;
  r.dims[static_cast<size_t>(dim)] = size;
  return r;
}


// Small instruction factory bound to one computation.
class Emitter {
 public:
  explicit Emitter(HloComputation* c) : c_(c) {}
  HloComputation* comp() const { return c_; }

  HloInstruction* Add(HloOpcode op, const Shape& s, std::vector<HloInstruction*> ops,
                      const std::string& name) {
    return c_->AddInstruction(op, s, std::move(ops), name);
  }
  HloInstruction* Param(const Shape& s, const std::string& name) { return c_->AddParameter(s, name); }
  HloInstruction* Gte(HloInstruction* t, int64_t i, const std::string& name) {
    HloInstruction* g = Add(HloOpcode::kGetTupleElement,
                            t->shape().tuple_shapes.at(static_cast<size_t>(i)), {t}, name);
    g->tuple_index = i;
    return g;
  }
  HloInstruction* ConstInt(PrimitiveType t, int64_t v, const std::string& name) {
    HloInstruction* c = Add(HloOpcode::kConstant, Shape::Scalar(t), {}, name);
    c->literal = Literal::ScalarInt(t, v);
    return c;
  }
  HloInstruction* ConstVec(PrimitiveType t, const std::vector<int64_t>& v, const std::string& name) {
    HloInstruction* c =
        Add(HloOpcode::kConstant, Shape(t, {static_cast<int64_t>(v.size())}), {}, name);
    c->literal = Literal::Vector(t, v);
    return c;
  }
  // broadcast(constant 0) of `s`'s type and dims.
  HloInstruction* Zeros(const Shape& s, const std::string& name) {
    PrimitiveType t = s.element_type;
    HloInstruction* z = Add(HloOpcode::kConstant, Shape::Scalar(t), {}, absl::StrCat(name, ".zero"));
    z->literal = IsInteger(t) || t == PrimitiveType::PRED ? Literal::ScalarInt(t, 0)
                                                          : Literal::Scalar(t, 0.0);
    HloInstruction* b = Add(HloOpcode::kBroadcast, s, {z}, name);
    b->has_dimensions_attr = true;
    return b;
  }
  HloInstruction* Binary(HloOpcode op, HloInstruction* a, HloInstruction* b, const std::string& name) {
    return Add(op, a->shape(), {a, b}, name);
  }
  HloInstruction* Permute(HloInstruction* v, std::vector<std::pair<int64_t, int64_t>> pairs,
                          int64_t channel, const std::string& name) {
    HloInstruction* p = Add(HloOpcode::kCollectivePermute, v->shape(), {v}, name);
    p->channel_id = channel;
    p->source_target_pairs = std::move(pairs);
    return p;
  }
  // reshape(dynamic-slice(table, index, sizes={1})): one element of a rank-1 table as a scalar.
  HloInstruction* TableLookup(HloInstruction* table, HloInstruction* index, const std::string& name) {
    PrimitiveType t = table->shape().element_type;
    HloInstruction* ds = Add(HloOpcode::kDynamicSlice, Shape(t, {1}), {table, index},
                             absl::StrCat(name, ".ds"));
    ds->dynamic_slice_sizes = {1};
    return Add(HloOpcode::kReshape, Shape::Scalar(t), {ds}, name);
  }
  HloInstruction* DynamicSlice(HloInstruction* v, std::vector<HloInstruction*> offsets,
                               std::vector<int64_t> sizes, const std::string& name) {
    Shape s = v->shape();
    s.dims = sizes;
    std::vector<HloInstruction*> ops = {v};
    ops.insert(ops.end(), offsets.begin(), offsets.end());
    HloInstruction* ds = Add(HloOpcode::kDynamicSlice, s, std::move(ops), name);
    ds->dynamic_slice_sizes = std::move(sizes);
    return ds;
  }
  HloInstruction* Dus(HloInstruction* buf, HloInstruction* upd,
                      std::vector<HloInstruction*> offsets, const std::string& name) {
    std::vector<HloInstruction*> ops = {buf, upd};
    ops.insert(ops.end(), offsets.begin(), offsets.end());
    return Add(HloOpcode::kDynamicUpdateSlice, buf->shape(), std::move(ops), name);
  }
  // A dot with `proto`'s dimension numbers, precision and metadata (not its sharding).
  HloInstruction* DotLike(const HloInstruction& proto, HloInstruction* lhs, HloInstruction* rhs,
                          const Shape& shape, const std::string& name) {
    HloInstruction* d = Add(HloOpcode::kDot, shape, {lhs, rhs}, name);
    d->dot_dims = proto.dot_dims;
    d->operand_precision = proto.operand_precision;
    d->metadata = proto.metadata;
    d->frontend_attributes = proto.frontend_attributes;
    d->raw_attributes = proto.raw_attributes;
    return d;
  }
  HloInstruction* Compare(HloInstruction* a, HloInstruction* b, ComparisonDirection dir,
                          const std::string& name) {
    HloInstruction* c = Add(HloOpcode::kCompare, Shape::Scalar(PrimitiveType::PRED), {a, b}, name);
    c->comparison_direction = dir;
    return c;
  }
  HloInstruction* Tuple(std::vector<HloInstruction*> ops, const std::string& name) {
    std::vector<Shape> shapes;
    for (HloInstruction* o : ops) shapes.push_back(o->shape());
    return Add(HloOpcode::kTuple, Shape::Tuple(std::move(shapes)), std::move(ops), name);
  }

 private:
  HloComputation* c_;
};

HloComputation* NewComputation(HloModule* m, const std::string& name) {
  return m->AddComputation(std::make_unique<HloComputation>(std::string(name)));
}

// What every loop body needs: the ring position of this partition, N, the offset table.
struct RingValues {
  HloInstruction* position = nullptr;  // u32 in-group position i
  HloInstruction* n = nullptr;         // u32 N
  HloInstruction* table = nullptr;     // s32[N] {0, b, 2b, ...}
  HloInstruction* zero = nullptr;      // s32 0
  HloInstruction* one = nullptr;       // u32 1
};

RingValues EmitRingValues(Emitter& e, const PartitionRing& ring, int64_t block) {
  RingValues v;
  HloInstruction* pid = e.Add(HloOpcode::kPartitionId, Shape::Scalar(PrimitiveType::U32), {}, "pid");
  if (ring.IsIdentity()) {
    v.position = pid;
  } else {
    HloInstruction* tbl = e.ConstVec(PrimitiveType::U32, ring.index_in_group, "ring_position_table");
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

// Offset of block (k + i) % N: reshape(dynamic-slice(table, remainder(add(k, i), N))).
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
                                   std::vector<std::pair<int64_t, int64_t>> pairs,
                                   int64_t channel, const std::string& name) {
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

// Text describing how an operand is carried, for remarks.
std::string CarriedText(HloInstruction* v) {
  if (IsFp8(v->shape().element_type)) {
    return absl::StrCat("'", v->name(), "' is ", std::string(PrimitiveTypeName(v->shape().element_type)),
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
  return absl::StrCat(ring.groups.size() == 1 ? "a ring" : absl::StrCat(ring.groups.size(), " rings"),
                      " of ", ring.size(), " partitions (replica_groups=", ring.groups_text, ")");
}

// Whether `x` already feeds the windowed element of an AG loop (XLA's
// disable_ag_rewrite_for_multiple_consumers check); sets *loop_name.
bool FeedsAgLoop(const HloInstruction* x, std::string* loop_name) {
  for (HloInstruction* u : x->users()) {
    if (u->opcode() != HloOpcode::kTuple || u->operand_count() < 5) continue;
    if (u->operand(0) != x && u->operand(1) != x) continue;
    for (HloInstruction* w : u->users()) {
      if (w->opcode() == HloOpcode::kWhile && w->called_computations().size() == 2 &&
          absl::StartsWith(w->while_body()->name(), kBodyAg)) {
        *loop_name = w->name();
        return true;
      }
    }
  }
  return false;
}

struct AgPlan {
  HloInstruction* dot = nullptr;
  HloInstruction* ag = nullptr;
  int side = 0;  // 0: all-gather is the lhs, 1: the rhs
  PartitionRing ring;
  bool contracting = false;
  bool batch = false;     // gathered dim is a batch dim: slice the stationary operand and DUS
  int64_t out_dim = -1;   // non-contracting/batch: output dim written by dynamic-update-slice
  int64_t stat_dim = -1;  // contracting/batch: stationary operand dim that is dynamic-sliced
  int64_t block = 0;      // shard length along the gathered dim
};

struct RsPlan {
  HloInstruction* result = nullptr;  // reduce-scatter or dynamic-slice (replaced)
  HloInstruction* reduce = nullptr;  // reduce-scatter or all-reduce
  HloInstruction* dot = nullptr;
  PartitionRing ring;
  int sliced_side = 0;       // 0 lhs, 1 rhs, 2 both (scattered batch dim)
  int64_t sliced_dim = -1;   // operand dim sliced per step (lhs dim when both)
  int64_t sliced_dim2 = -1;  // rhs batch dim when both are sliced
  int64_t out_dim = -1;     // scattered output dim
  int64_t block = 0;
};

class Decomposer {
 public:
  Decomposer(HloModule* m, const WindowedEinsumDecomposerOptions& o,
             std::function<void(std::string, bool, std::string)> remark)
      : m_(m), o_(o), remark_(std::move(remark)), next_channel_(m->NextChannelId()) {}

  absl::StatusOr<bool> Run() {
    bool changed = false;
    num_partitions_ = m_->num_partitions;
    const int64_t inferred = DevicesAddressedByCollectives(*m_);
    if (num_partitions_ <= 1 && !m_->has_num_partitions && m_->replica_count == 1 &&
        inferred > 1) {
      num_partitions_ = inferred;
    }
    std::vector<HloComputation*> comps = m_->MakeComputationPostOrder();
    for (HloComputation* c : comps) {
      auto r = RunOnComputation(c);
      if (!r.ok()) return r.status();
      changed |= *r;
    }
    if (changed && num_partitions_ != m_->num_partitions) {
      // The loops read partition-id: the header must say how many partitions there are.
      m_->num_partitions = num_partitions_;
      m_->has_num_partitions = true;
      remark_(m_->name(), true,
              absl::StrCat("num_partitions absent from the header: ", num_partitions_,
                           " partitions inferred from the replica groups of the module's "
                           "use_global_device_ids collectives (replica_count=1); header set to "
                           "num_partitions=", num_partitions_));
    }
    return changed;
  }

 private:
  absl::StatusOr<bool> RunOnComputation(HloComputation* comp) {
    bool changed = false;
    absl::flat_hash_set<const HloInstruction*> removed;
    for (HloInstruction* instr : comp->MakeInstructionPostOrder()) {
      if (removed.contains(instr)) continue;
      if (instr->opcode() == HloOpcode::kDot && instr->operand_count() == 2) {
        for (int side = 0; side < 2; ++side) {
          const HloInstruction* op = instr->operand(side);
          if (op->opcode() != HloOpcode::kAllGather) {
            // An all-gather reaching the dot through a layout/type change is a candidate this
            // pass does not handle (XLA peels one reshape/bitcast/transpose).
            switch (op->opcode()) {
              case HloOpcode::kReshape:
              case HloOpcode::kBitcast:
              case HloOpcode::kTranspose:
              case HloOpcode::kCopy:
              case HloOpcode::kConvert:
                if (op->operand_count() == 1 &&
                    op->operand(0)->opcode() == HloOpcode::kAllGather) {
                  remark_(instr->name(), false,
                          absl::StrCat("all-gather '", op->operand(0)->name(),
                                       "' reaches the dot through ",
                                       std::string(HloOpcodeString(op->opcode())), " '", op->name(),
                                       "': unsupported pattern (the dot must read the "
                                       "all-gather directly)"));
                }
                break;
              default:
                break;
            }
            continue;
          }
          std::string why;
          std::optional<AgPlan> plan = PlanAg(instr, side, &why);
          if (!plan) {
            remark_(instr->name(), false, why);
            continue;
          }
          auto s = BuildAgLoop(*plan, removed);
          if (!s.ok()) return s;
          changed = true;
          break;
        }
      } else if (instr->opcode() == HloOpcode::kReduceScatter) {
        std::string why;
        std::optional<RsPlan> plan = PlanRs(instr, &why);
        if (!plan) {
          remark_(instr->name(), false, why);
          continue;
        }
        auto s = BuildRsLoop(*plan, removed);
        if (!s.ok()) return s;
        changed = true;
      } else if (instr->opcode() == HloOpcode::kDynamicSlice && instr->operand_count() >= 1 &&
                 instr->operand(0)->opcode() == HloOpcode::kAllReduce &&
                 instr->operand(0)->operand_count() == 1 &&
                 instr->operand(0)->operand(0)->opcode() == HloOpcode::kDot) {
        std::string why;
        std::optional<RsPlan> plan = PlanArDs(instr, &why);
        if (!plan) {
          remark_(instr->name(), false, why);
          continue;
        }
        auto s = BuildRsLoop(*plan, removed);
        if (!s.ok()) return s;
        changed = true;
      }
    }
    return changed;
  }

  // Common ring checks: N > 1, N <= max ring. Returns false with *why set.
  bool CheckRingSize(const PartitionRing& ring, std::string* why) {
    if (ring.size() < 2) {
      *why = absl::StrCat("replica_groups=", ring.groups_text,
                          " form rings of one partition: nothing to window");
      return false;
    }
    if (ring.size() > o_.max_ring) {
      *why = absl::StrCat("ring of ", ring.size(), " partitions (replica_groups=",
                          ring.groups_text, ") exceeds windowed-einsum-max-ring=", o_.max_ring,
                          " (XLA's max_windowed_einsum_iteration)");
      return false;
    }
    return true;
  }

  // Size gate: bytes >= threshold_mib * 2^20. `what` names the counted value.
  bool CheckThreshold(const HloInstruction* counted, const std::string& what, std::string* why,
                      std::string* note) {
    int64_t bytes = counted->shape().ByteSize();
    std::string wide;
    auto dq = MatchDequantize(const_cast<HloInstruction*>(counted));
    if (!dq && counted->operand_count() == 1 && counted->opcode() == HloOpcode::kAllGather) {
      dq = MatchDequantize(counted->operand(0));
    }
    if (dq) {
      wide = absl::StrCat(" (dequantized ", std::string(PrimitiveTypeName(dq->fp8_type)),
                          " operand: the wide ", std::string(PrimitiveTypeName(dq->wide_type)),
                          " size was counted, as XLA does)");
    }
    int64_t limit = o_.threshold_mib * (int64_t{1} << 20);
    if (bytes < limit) {
      *why = absl::StrCat(what, " '", counted->name(), "' ", counted->shape().ToString(false),
                          " is ", bytes, " bytes, below windowed-einsum-threshold-mib=",
                          o_.threshold_mib, " (", limit, " bytes)", wide);
      return false;
    }
    if (o_.threshold_mib > 0) {
      *note = absl::StrCat("; ", what, " ", bytes, " bytes >= ", limit, " bytes threshold", wide);
    }
    return true;
  }

  std::optional<AgPlan> PlanAg(HloInstruction* dot, int side, std::string* why) {
    HloInstruction* ag = dot->operand(side);
    AgPlan p;
    p.dot = dot;
    p.ag = ag;
    p.side = side;
    if (dot->operand(0) == dot->operand(1)) {
      *why = absl::StrCat("both dot operands read all-gather '", ag->name(), "': unsupported");
      return std::nullopt;
    }
    if (ag->operand_count() != 1) {
      *why = absl::StrCat("all-gather '", ag->name(), "' does not have exactly one operand: "
                          "unsupported");
      return std::nullopt;
    }
    std::string loop;
    if (!o_.duplicate_loops && FeedsAgLoop(ag->operand(0), &loop)) {
      *why = absl::StrCat("all-gather '", ag->name(), "' already feeds windowed loop '", loop,
                          "' (its first consumer in post order): left for the handler's cache "
                          "(--windowed-einsum-duplicate-loops=true gives each dot its own loop)");
      return std::nullopt;
    }
    if (ag->operand_count() != 1 || !ag->shape().IsArray() || ag->dimensions.size() != 1) {
      *why = absl::StrCat("all-gather '", ag->name(),
                          "' is not a single-operand array all-gather along one dim: unsupported");
      return std::nullopt;
    }
    auto ring = AnalyzePartitionRing(*ag, num_partitions_, m_->replica_count);
    if (!ring.ok()) {
      *why = std::string(ring.status().message());
      return std::nullopt;
    }
    p.ring = *std::move(ring);
    if (!CheckRingSize(p.ring, why)) return std::nullopt;
    const int64_t n = p.ring.size();
    const int64_t d = ag->dimensions[0];
    const Shape& xs = ag->operand(0)->shape();
    if (d < 0 || d >= xs.rank() || xs.dims[static_cast<size_t>(d)] * n != ag->shape().dims[static_cast<size_t>(d)]) {
      *why = absl::StrCat("all-gather '", ag->name(), "' dim ", d, " is not ", n,
                          " shards of its operand: inconsistent shapes");
      return std::nullopt;
    }
    p.block = xs.dims[static_cast<size_t>(d)];
    const DotDims& dd = dot->dot_dims;
    const auto& batch = side == 0 ? dd.lhs_batch : dd.rhs_batch;
    const auto& contr = side == 0 ? dd.lhs_contracting : dd.rhs_contracting;
    const auto& other_contr = side == 0 ? dd.rhs_contracting : dd.lhs_contracting;
    const auto& other_batch = side == 0 ? dd.rhs_batch : dd.lhs_batch;
    if (batch.size() != other_batch.size() || contr.size() != other_contr.size()) {
      *why = absl::StrCat("dot '", dot->name(), "' has mismatched dimension numbers");
      return std::nullopt;
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
        *why = absl::StrCat("dot '", dot->name(), "' batch dims do not match the gathered "
                            "dim: inconsistent shapes");
        return std::nullopt;
      }
    } else if (!p.contracting) {
      // Output dim: batch dims, then lhs free dims, then rhs free dims.
      auto free_dims = [&](int s) {
        std::vector<int64_t> f;
        const auto& bb = s == 0 ? dd.lhs_batch : dd.rhs_batch;
        const auto& cc = s == 0 ? dd.lhs_contracting : dd.rhs_contracting;
        for (int64_t i = 0; i < dot->operand(s)->shape().rank(); ++i) {
          bool used = false;
          for (int64_t x : bb) used |= x == i;
          for (int64_t x : cc) used |= x == i;
          if (!used) f.push_back(i);
        }
        return f;
      };
      std::vector<int64_t> lf = free_dims(0), rf = free_dims(1);
      const auto& mine = side == 0 ? lf : rf;
      int64_t pos = -1;
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i] == d) pos = static_cast<int64_t>(i);
      }
      if (pos < 0) {
        *why = absl::StrCat("all-gather '", ag->name(), "' dim ", d,
                            " does not map to a dim of the dot output");
        return std::nullopt;
      }
      p.out_dim = static_cast<int64_t>(dd.lhs_batch.size()) + (side == 0 ? 0 : static_cast<int64_t>(lf.size())) + pos;
      if (p.out_dim >= dot->shape().rank() ||
          dot->shape().dims[static_cast<size_t>(p.out_dim)] != n * p.block) {
        *why = absl::StrCat("dot '", dot->name(), "' output dim ", p.out_dim,
                            " does not match the gathered dim: inconsistent shapes");
        return std::nullopt;
      }
    } else {
      const Shape& st = dot->operand(1 - side)->shape();
      if (p.stat_dim < 0 || p.stat_dim >= st.rank() ||
          st.dims[static_cast<size_t>(p.stat_dim)] != n * p.block) {
        *why = absl::StrCat("dot '", dot->name(), "' contracting dims do not match the gathered "
                            "dim: inconsistent shapes");
        return std::nullopt;
      }
    }
    std::string note;
    if (!CheckThreshold(ag, "gathered operand", why, &note)) return std::nullopt;
    threshold_note_ = note;
    return p;
  }

  absl::Status FinishReplace(HloInstruction* old, HloInstruction* repl,
                             absl::flat_hash_set<const HloInstruction*>& removed) {
    if (old->sharding) repl->sharding = old->sharding;
    auto s = old->ReplaceAllUsesWith(repl);
    if (!s.ok()) return s;
    removed.insert(old);
    return old->parent()->RemoveInstruction(old);
  }

  absl::Status BuildAgLoop(const AgPlan& p, absl::flat_hash_set<const HloInstruction*>& removed) {
    HloInstruction* dot = p.dot;
    HloComputation* comp = dot->parent();
    HloInstruction* x = p.ag->operand(0);
    HloInstruction* lhs0 = p.side == 0 ? x : dot->operand(0);
    HloInstruction* rhs0 = p.side == 1 ? x : dot->operand(1);
    const Shape& out_shape = dot->shape();
    const int64_t n = p.ring.size();
    const bool unrolled = n % 2 == 0;
    Shape tuple_shape = Shape::Tuple(
        {lhs0->shape(), rhs0->shape(), out_shape, out_shape, Shape::Scalar(PrimitiveType::U32)});

    // Body.
    HloComputation* body = NewComputation(m_, kBodyAg);
    Emitter b(body);
    HloInstruction* param = b.Param(tuple_shape, "param");
    HloInstruction* l = b.Gte(param, 0, "lhs");
    HloInstruction* r = b.Gte(param, 1, "rhs");
    HloInstruction* out = b.Gte(param, 2, "out");
    HloInstruction* extra = b.Gte(param, 3, "extra");
    HloInstruction* k = b.Gte(param, 4, "k");
    HloInstruction* win = p.side == 0 ? l : r;
    HloInstruction* stat = p.side == 0 ? r : l;
    RingValues v = EmitRingValues(b, p.ring, p.block);
    auto step = [&](HloInstruction* window, HloInstruction* kk, HloInstruction* acc,
                    const std::string& tag) -> HloInstruction* {
      HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
      if (p.batch) {
        std::vector<int64_t> sizes = stat->shape().dims;
        sizes[static_cast<size_t>(p.stat_dim)] = p.block;
        HloInstruction* sl =
            b.DynamicSlice(stat, OffsetsAt(v, stat->shape().rank(), p.stat_dim, off), sizes,
                           absl::StrCat("stationary", tag));
        HloInstruction* part =
            b.DotLike(*dot, p.side == 0 ? window : sl, p.side == 0 ? sl : window,
                      WithDim(out_shape, p.out_dim, p.block), absl::StrCat("part", tag));
        return b.Dus(acc, part, OffsetsAt(v, out_shape.rank(), p.out_dim, off),
                     absl::StrCat("acc", tag));
      }
      if (!p.contracting) {
        Shape part_shape = WithDim(out_shape, p.out_dim, p.block);
        HloInstruction* part =
            b.DotLike(*dot, p.side == 0 ? window : stat, p.side == 0 ? stat : window, part_shape,
                      absl::StrCat("part", tag));
        return b.Dus(acc, part, OffsetsAt(v, out_shape.rank(), p.out_dim, off),
                     absl::StrCat("acc", tag));
      }
      std::vector<int64_t> sizes = stat->shape().dims;
      sizes[static_cast<size_t>(p.stat_dim)] = p.block;
      HloInstruction* sl = b.DynamicSlice(stat, OffsetsAt(v, stat->shape().rank(), p.stat_dim, off),
                                          sizes, absl::StrCat("stationary", tag));
      HloInstruction* part = b.DotLike(*dot, p.side == 0 ? window : sl,
                                       p.side == 0 ? sl : window, out_shape,
                                       absl::StrCat("part", tag));
      return b.Binary(HloOpcode::kAdd, acc, part, absl::StrCat("acc", tag));
    };
    HloInstruction* next_window;
    HloInstruction* new_out;
    HloInstruction* new_k;
    if (unrolled) {
      auto pairs = p.ring.ShiftPairs(-1);
      HloInstruction* s1 = b.Permute(win, pairs, next_channel_++, "shard1");
      HloInstruction* out1 = step(win, k, out, "0");
      HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
      HloInstruction* s2 = b.Permute(s1, pairs, next_channel_++, "shard2");
      new_out = step(s1, k1, out1, "1");
      new_k = b.Binary(HloOpcode::kAdd, k1, v.one, "k2");
      next_window = s2;
    } else {
      new_out = step(win, k, out, "0");
      new_k = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
      HloInstruction* more = b.Compare(new_k, v.n, ComparisonDirection::kLt, "more");
      next_window = EmitGuardedPermute(m_, b, more, win, p.ring.ShiftPairs(-1), next_channel_++,
                                       "shard1");
    }
    body->set_root(b.Tuple({p.side == 0 ? next_window : l, p.side == 1 ? next_window : r, new_out,
                            extra, new_k},
                           "next_state"));
    HloComputation* cond = EmitCondition(m_, kCondAg, tuple_shape, n);

    // Loop in the dot's computation.
    Emitter e(comp);
    HloInstruction* z = e.Zeros(out_shape, "windowed_out_init");
    HloInstruction* z2 = e.Zeros(out_shape, "windowed_extra_init");
    HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
    HloInstruction* init = e.Tuple({lhs0, rhs0, z, z2, k0}, "windowed_init");
    HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {init}, "windowed_loop");
    loop->mutable_called_computations()->push_back(cond);
    loop->mutable_called_computations()->push_back(body);
    HloInstruction* res = e.Gte(loop, 2, absl::StrCat(dot->name(), ".windowed"));

    std::string msg = absl::StrCat(
        "all-gather '", p.ag->name(), "' (dim ", p.ag->dimensions[0], ") on the ",
        p.side == 0 ? "lhs" : "rhs", " -> AG loop '", loop->name(), "' (body '", body->name(),
        "'), ",
        p.batch ? absl::StrCat("batch: stationary operand sliced on batch dim ", p.stat_dim,
                               ", blocks written to output dim ", p.out_dim,
                               " with dynamic-update-slice")
        : p.contracting ? absl::StrCat("contracting: stationary operand sliced on dim ", p.stat_dim,
                                     ", partial dots accumulated with add")
                      : absl::StrCat("non-contracting: blocks written to output dim ", p.out_dim,
                                     " with dynamic-update-slice"),
        ", over ", RingText(p.ring), ", ", unrolled ? "unrolled by 2" : "rolled (odd ring)");
    std::string carried = CarriedText(x);
    if (!carried.empty()) absl::StrAppend(&msg, "; windowed ", carried);
    std::string carried_stat = CarriedText(p.side == 0 ? rhs0 : lhs0);
    if (!carried_stat.empty()) absl::StrAppend(&msg, "; stationary ", carried_stat);
    absl::StrAppend(&msg, threshold_note_);
    remark_(dot->name(), true, msg);

    HloInstruction* ag = p.ag;
    auto s = FinishReplace(dot, res, removed);
    if (!s.ok()) return s;
    if (ag->user_count() == 0 && !ag->IsRoot()) {
      removed.insert(ag);
      s = comp->RemoveInstruction(ag);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Maps scattered output dim `d` of `dot` to (side, operand dim). A batch dim maps to both
  // operands: side 2, *dim the lhs batch dim, *dim2 the rhs one.
  static bool MapOutputDim(const HloInstruction* dot, int64_t d, int* side, int64_t* dim,
                           int64_t* dim2) {
    const DotDims& dd = dot->dot_dims;
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
  bool FinishRsPlan(RsPlan& p, int64_t d, std::string* why) {
    if (p.dot->operand_count() != 2 || !p.dot->shape().IsArray()) {
      *why = absl::StrCat("dot '", p.dot->name(), "' is malformed");
      return false;
    }
    if (!CheckRingSize(p.ring, why)) return false;
    const int64_t n = p.ring.size();
    const Shape& os = p.dot->shape();
    if (d < 0 || d >= os.rank() || os.dims[static_cast<size_t>(d)] % n != 0 ||
        p.result->shape().dims.size() != os.dims.size() ||
        p.result->shape().dims[static_cast<size_t>(d)] * n != os.dims[static_cast<size_t>(d)]) {
      *why = absl::StrCat("scattered dim ", d, " of dot '", p.dot->name(),
                          "' is not split in ", n, " blocks: inconsistent shapes");
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
      *why = absl::StrCat("dot '", p.dot->name(), "' has users besides '", p.reduce->name(),
                          "': the full dot must stay");
      return false;
    }
    std::string note;
    if (!CheckThreshold(p.dot, "dot output", why, &note)) return false;
    threshold_note_ = note;
    return true;
  }

  std::optional<RsPlan> PlanRs(HloInstruction* rs, std::string* why) {
    RsPlan p;
    p.result = rs;
    p.reduce = rs;
    if (rs->operand_count() != 1 || rs->operand(0)->opcode() != HloOpcode::kDot) {
      *why = absl::StrCat("reduce-scatter operand '",
                          rs->operand_count() > 0 ? rs->operand(0)->name() : std::string("?"),
                          "' is not a dot");
      return std::nullopt;
    }
    p.dot = rs->operand(0);
    if (rs->called_computations().empty() || !IsSumComputation(rs->to_apply())) {
      *why = "reduce-scatter reduction is not a sum";
      return std::nullopt;
    }
    if (!rs->shape().IsArray() || rs->dimensions.size() != 1) {
      *why = "reduce-scatter is not an array scatter along one dim: unsupported";
      return std::nullopt;
    }
    auto ring = AnalyzePartitionRing(*rs, num_partitions_, m_->replica_count);
    if (!ring.ok()) {
      *why = std::string(ring.status().message());
      return std::nullopt;
    }
    p.ring = *std::move(ring);
    if (!FinishRsPlan(p, rs->dimensions[0], why)) return std::nullopt;
    return p;
  }

  std::optional<RsPlan> PlanArDs(HloInstruction* ds, std::string* why) {
    RsPlan p;
    p.result = ds;
    p.reduce = ds->operand(0);
    p.dot = p.reduce->operand(0);
    HloInstruction* ar = p.reduce;
    if (ar->called_computations().empty() || !IsSumComputation(ar->to_apply())) {
      *why = absl::StrCat("all-reduce '", ar->name(), "' reduction is not a sum");
      return std::nullopt;
    }
    if (ar->user_count() != 1) {
      *why = absl::StrCat("all-reduce '", ar->name(), "' has users besides this dynamic-slice");
      return std::nullopt;
    }
    auto ring = AnalyzePartitionRing(*ar, num_partitions_, m_->replica_count);
    if (!ring.ok()) {
      *why = std::string(ring.status().message());
      return std::nullopt;
    }
    p.ring = *std::move(ring);
    const Shape& fs = ar->shape();
    const Shape& ss = ds->shape();
    if (!fs.IsArray() || ss.rank() != fs.rank() ||
        ds->operand_count() != 1 + fs.rank()) {
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
    for (int64_t pid = 0; pid < num_partitions_; ++pid) {
      for (int64_t i = 0; i < fs.rank(); ++i) {
        auto val = EvaluateForPartition(ds->operand(1 + i), pid);
        int64_t want = i == d ? p.ring.index_in_group[static_cast<size_t>(pid)] * b : 0;
        if (!val) {
          *why = absl::StrCat("dynamic-slice offset '", ds->operand(1 + i)->name(),
                              "' is not a function of partition-id and constants");
          return std::nullopt;
        }
        int64_t clamped = std::clamp<int64_t>(*val, 0, fs.dims[static_cast<size_t>(i)] -
                                                           ss.dims[static_cast<size_t>(i)]);
        if (clamped != want) {
          *why = absl::StrCat("dynamic-slice offset on dim ", i, " is ", clamped,
                              " on partition ", pid, ", not ", want,
                              ": not the partition's reduce-scatter block");
          return std::nullopt;
        }
      }
    }
    if (!FinishRsPlan(p, d, why)) return std::nullopt;
    return p;
  }

  absl::Status BuildRsLoop(const RsPlan& p, absl::flat_hash_set<const HloInstruction*>& removed) {
    HloInstruction* dot = p.dot;
    HloComputation* comp = p.result->parent();
    HloInstruction* lhs0 = dot->operand(0);
    HloInstruction* rhs0 = dot->operand(1);
    Shape acc_shape = p.result->shape();
    acc_shape.element_type = dot->shape().element_type;
    const int64_t n = p.ring.size();
    const bool unrolled = n % 2 == 0;
    Shape tuple_shape = Shape::Tuple(
        {lhs0->shape(), rhs0->shape(), acc_shape, acc_shape, Shape::Scalar(PrimitiveType::U32)});

    HloComputation* body = NewComputation(m_, kBodyRs);
    Emitter b(body);
    HloInstruction* param = b.Param(tuple_shape, "param");
    HloInstruction* l = b.Gte(param, 0, "lhs");
    HloInstruction* r = b.Gte(param, 1, "rhs");
    HloInstruction* acc = b.Gte(param, 2, "acc");
    HloInstruction* extra = b.Gte(param, 3, "extra");
    HloInstruction* k = b.Gte(param, 4, "k");
    RingValues v = EmitRingValues(b, p.ring, p.block);
    auto slice = [&](HloInstruction* operand, int64_t dim, HloInstruction* off,
                     const std::string& name) {
      std::vector<int64_t> sizes = operand->shape().dims;
      sizes[static_cast<size_t>(dim)] = p.block;
      return b.DynamicSlice(operand, OffsetsAt(v, operand->shape().rank(), dim, off), sizes, name);
    };
    auto partial = [&](HloInstruction* kk, const std::string& tag) -> HloInstruction* {
      HloInstruction* off = EmitBlockOffset(b, v, kk, tag);
      HloInstruction* lo = l;
      HloInstruction* ro = r;
      if (p.sliced_side == 0) {
        lo = slice(l, p.sliced_dim, off, absl::StrCat("slice", tag));
      } else if (p.sliced_side == 1) {
        ro = slice(r, p.sliced_dim, off, absl::StrCat("slice", tag));
      } else {
        lo = slice(l, p.sliced_dim, off, absl::StrCat("slice", tag));
        ro = slice(r, p.sliced_dim2, off, absl::StrCat("slice", tag, ".rhs"));
      }
      return b.DotLike(*dot, lo, ro, acc_shape, absl::StrCat("part", tag));
    };
    HloInstruction* root;
    if (unrolled) {
      auto pairs = p.ring.ShiftPairs(-2);
      HloInstruction* recv_a = b.Permute(acc, pairs, next_channel_++, "recvA");
      HloInstruction* sum_b =
          b.Binary(HloOpcode::kAdd, extra, partial(k, "B"), "sumB");
      HloInstruction* send_b = b.Permute(sum_b, pairs, next_channel_++, "sendB");
      HloInstruction* two = b.ConstInt(PrimitiveType::U32, 2, "two");
      HloInstruction* k2 = b.Binary(HloOpcode::kAdd, k, two, "k2");
      HloInstruction* k3 = b.Binary(HloOpcode::kAdd, k2, v.one, "k3");
      HloInstruction* new_a = b.Binary(HloOpcode::kAdd, recv_a, partial(k3, "A"), "newA");
      root = b.Tuple({l, r, new_a, send_b, k2}, "next_state");
    } else {
      HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, v.one, "k1");
      HloInstruction* acc1 = b.Binary(HloOpcode::kAdd, acc, partial(k1, "0"), "acc1");
      HloInstruction* more = b.Compare(k1, v.n, ComparisonDirection::kLt, "more");
      HloInstruction* next = EmitGuardedPermute(m_, b, more, acc1, p.ring.ShiftPairs(-1),
                                                next_channel_++, "acc_next");
      root = b.Tuple({l, r, next, extra, k1}, "next_state");
    }
    body->set_root(root);
    HloComputation* cond = EmitCondition(m_, kCondRs, tuple_shape, n);

    Emitter e(comp);
    HloInstruction* z = e.Zeros(acc_shape, "windowed_acc_init");
    HloInstruction* z2 = e.Zeros(acc_shape, "windowed_extra_init");
    HloInstruction* k0 = e.ConstInt(PrimitiveType::U32, 0, "windowed_k0");
    HloInstruction* init = e.Tuple({lhs0, rhs0, z, z2, k0}, "windowed_init");
    HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {init}, "windowed_loop");
    loop->mutable_called_computations()->push_back(cond);
    loop->mutable_called_computations()->push_back(body);
    HloInstruction* res;
    if (unrolled) {
      HloInstruction* end_a = e.Gte(loop, 2, "windowed_endA");
      HloInstruction* end_b = e.Gte(loop, 3, "windowed_endB");
      HloInstruction* shifted =
          e.Permute(end_a, p.ring.ShiftPairs(1), next_channel_++, "windowed_shiftA");
      res = e.Binary(HloOpcode::kAdd, shifted, end_b, absl::StrCat(p.result->name(), ".windowed"));
    } else {
      res = e.Gte(loop, 2, absl::StrCat(p.result->name(), ".windowed"));
    }

    std::string msg = absl::StrCat(
        p.reduce->opcode() == HloOpcode::kReduceScatter
            ? "reduce-scatter"
            : absl::StrCat("all-reduce '", p.reduce->name(), "' + dynamic-slice"),
        " of dot '", dot->name(), "' (dim ", p.out_dim, ") -> RS loop '", loop->name(),
        "' (body '", body->name(), "'), ",
        p.sliced_side == 2
            ? absl::StrCat("lhs and rhs sliced on batch dims ", p.sliced_dim, " and ",
                           p.sliced_dim2)
            : absl::StrCat(p.sliced_side == 0 ? "lhs" : "rhs", " sliced on dim ", p.sliced_dim),
        ", over ", RingText(p.ring), ", ",
        unrolled ? "unrolled by 2 with the shift-and-add after the loop" : "rolled (odd ring)");
    std::string c0 = CarriedText(lhs0), c1 = CarriedText(rhs0);
    if (!c0.empty()) absl::StrAppend(&msg, "; lhs ", c0);
    if (!c1.empty()) absl::StrAppend(&msg, "; rhs ", c1);
    absl::StrAppend(&msg, threshold_note_);
    remark_(p.result->name(), true, msg);

    HloInstruction* reduce = p.reduce;
    HloInstruction* result = p.result;
    auto s = FinishReplace(result, res, removed);
    if (!s.ok()) return s;
    if (reduce != result) {
      removed.insert(reduce);
      s = comp->RemoveInstruction(reduce);
      if (!s.ok()) return s;
    }
    removed.insert(dot);
    return comp->RemoveInstruction(dot);
  }

  HloModule* m_;
  WindowedEinsumDecomposerOptions o_;
  std::function<void(std::string, bool, std::string)> remark_;
  int64_t next_channel_;
  int64_t num_partitions_ = 1;  // the header's, or inferred when the header has none
  std::string threshold_note_;
};

}  // namespace

absl::StatusOr<WindowedEinsumDecomposerOptions> ParseWindowedEinsumDecomposerOptions(
    const PassOptions& options) {
  WindowedEinsumDecomposerOptions o;
  auto t = options.GetInt("windowed-einsum-threshold-mib", 0);
  if (!t.ok()) return t.status();
  if (*t < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-threshold-mib must be >= 0, got ", *t));
  }
  o.threshold_mib = *t;
  auto r = options.GetInt("windowed-einsum-max-ring", 32);
  if (!r.ok()) return r.status();
  if (*r < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("windowed-einsum-max-ring must be >= 1, got ", *r));
  }
  o.max_ring = *r;
  auto d = options.GetBool("windowed-einsum-duplicate-loops", false);
  if (!d.ok()) return d.status();
  o.duplicate_loops = *d;
  return o;
}

int64_t DevicesAddressedByCollectives(const HloModule& module) {
  int64_t count = 0;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (!IsCollective(i->opcode()) || !i->use_global_device_ids || !i->replica_groups) continue;
      for (const auto& g : i->replica_groups->groups) {
        for (int64_t id : g) count = std::max(count, id + 1);
      }
    }
  }
  return count;
}

absl::StatusOr<bool> WindowedEinsumDecomposer::Run(HloModule* module) {
  Decomposer d(module, options_, [this](std::string loc, bool applied, std::string msg) {
    AddRemark(std::move(loc), applied, std::move(msg));
  });
  return d.Run();
}

WEAVE_REGISTER_PASS("windowed-einsum-decomposer",
                    [](const PassOptions& options) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      auto o = ParseWindowedEinsumDecomposerOptions(options);
                      if (!o.ok()) return o.status();
                      return std::unique_ptr<HloPass>(
                          std::make_unique<WindowedEinsumDecomposer>(*o));
                    });

}  // namespace weave
