// sharding-propagation (see sharding_propagation.h).
#include "spmd/sharding_propagation.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "hlo/instruction_index.h"
#include "spmd/propagation_rules.h"
#include "spmd/sharding_import.h"
#include "spmd/sharding_util.h"
#include "hlo/status_macros.h"

namespace weave::spmd {

std::vector<bool> ParseAllowBits(const HloModule& module, std::string_view attribute) {
  for (const auto& [name, value] : module.header_attributes) {
    if (name != attribute) continue;
    std::vector<bool> bits;
    std::string v = value;
    v.erase(std::remove_if(v.begin(), v.end(), [](char c) { return c == '{' || c == '}' || c == ' '; }),
            v.end());
    for (absl::string_view b : absl::StrSplit(v, ',', absl::SkipEmpty())) bits.push_back(b == "true");
    return bits;
  }
  return {};
}

namespace {

bool Bit(const std::vector<bool>& bits, int64_t i) {
  if (bits.empty()) return false;
  if (bits.size() == 1) return bits[0];
  return i < static_cast<int64_t>(bits.size()) && bits[static_cast<size_t>(i)];
}

void FlattenShapes(const Shape& s, std::vector<const Shape*>* out) {
  if (s.IsTuple()) {
    for (const Shape& e : s.tuple_shapes) FlattenShapes(e, out);
  } else {
    out->push_back(&s);
  }
}

std::vector<int64_t> ParseDims(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view p : absl::StrSplit(text, absl::ByAnyChar("[], "), absl::SkipEmpty())) {
    int64_t v;
    if (absl::SimpleAtoi(p, &v)) out.push_back(v);
  }
  return out;
}

class Propagator {
 public:
  Propagator(HloModule* m, bool recompute_all) : m_(m), recompute_all_(recompute_all) {}

  absl::Status Init();
  void Run();
  int64_t WriteBack();
  std::string Summary() const {
    return absl::StrCat(nodes_.size(), " instructions, ", provided_count_,
                        " with provided shardings; rounds per aggressiveness level: ",
                        absl::StrJoin(rounds_, "/"));
  }
  bool hit_cap() const { return hit_cap_; }

 private:
  struct Node {
    HloInstruction* h = nullptr;
    Sharding s;
    bool provided = false;
    // The entry root, or a lone tuple parameter with a bit per leaf: leaves whose allow bit is
    // true (refinable though the value is provided).
    std::vector<bool> refinable_leaves;
    std::vector<int64_t> unspecified;
    int32_t group = -1;   // while / conditional group
    int32_t source = -1;  // conditional branch parameter: the conditional operand's node
    std::vector<int32_t> extra_users;  // nodes whose forward reads this one besides users
    std::vector<const Shape*> leaf_shapes;  // tuple-shaped nodes: flattened leaf shapes
  };

  int32_t Id(const HloInstruction* h) const { return index_.Slot(h); }
  const Sharding& Get(const HloInstruction* h) const {
    const int32_t id = Id(h);
    return id < 0 ? unset_ : nodes_[static_cast<size_t>(id)].s;
  }
  bool Update(int32_t id, const Sharding& cand, int a, bool sync_group = true);
  // Improves only leaves first .. first + cand.size() of a tuple-shaped node (Unset candidates
  // carry no information).
  bool UpdateLeaves(int32_t id, size_t first, const std::vector<Sharding>& cand, int a,
                    bool sync_group = true);
  Sharding ImproveWith(const Node& n, const Sharding& cur, const Sharding& cand, bool provided,
                       const std::vector<int64_t>& unspecified, const Shape& shape, int a) const;
  void MarkChanged(int32_t id);
  void SyncGroup(int32_t group, int32_t from, int a);
  // A node's sharding was written (a change, or a non-tuple made a tuple of its leaves).
  void Stamp(int32_t id) { stamp_[static_cast<size_t>(id)] = ++clock_; }
  // True when node `id`'s step (forward or backward: `ok` and `cls` say which) last ran at level
  // class `c` and changed nothing, and no sharding the step reads has been written since: the
  // node's own (its Update reads it), its operands' and its branch source's. Running it again
  // would compute the same candidates from the same shardings and change nothing again, so it
  // is skipped; the result is the same as running every step (tested against recompute_all_).
  bool Settled(const std::vector<uint64_t>& ok, const std::vector<uint8_t>& cls, int32_t id,
               int c) const;
  // Records the outcome of node `id`'s step at level class `c`: `settled` when it changed
  // nothing and read no sharding but those Settled checks.
  void Record(std::vector<uint64_t>* ok, std::vector<uint8_t>* cls, int32_t id, int c,
              bool settled) const {
    (*ok)[static_cast<size_t>(id)] = settled ? clock_ : 0;
    (*cls)[static_cast<size_t>(id)] = static_cast<uint8_t>(c);
  }

  HloModule* m_;
  bool recompute_all_;
  Sharding unset_;
  std::vector<Node> nodes_;
  // Per node: its forward / backward step must run again (a neighbour changed). Kept apart from
  // the nodes so that a sweep skipping settled nodes reads one byte each.
  std::vector<uint8_t> fwd_, bwd_;
  // Settled steps (see Settled): per node, the clock of its sharding's last write (0: none yet),
  // and the clock at which its forward / backward step last ran without a change (0: it has
  // not, or it changed something) with that run's level class.
  uint64_t clock_ = 0;
  std::vector<uint64_t> stamp_, fwd_ok_, bwd_ok_;
  std::vector<uint8_t> fwd_cls_, bwd_cls_;
  InstructionIndex index_;  // instruction -> node (nodes_[k].h is index_.at(k))
  std::vector<std::vector<int32_t>> order_;  // per computation, post order
  std::vector<std::vector<int32_t>> groups_;
  std::vector<int64_t> rounds_;
  int64_t provided_count_ = 0;
  bool hit_cap_ = false;
};

absl::Status Propagator::Init() {
  HloComputation* entry = m_->entry();
  if (entry == nullptr) return absl::InvalidArgumentError("module has no entry computation");
  // Computations whose instructions are partitioned: the entry and, recursively, loop bodies,
  // conditions and conditional branches.
  std::vector<HloComputation*> comps = {entry};
  absl::flat_hash_set<const HloComputation*> listed = {entry};  // one lookup per callee
  for (size_t k = 0; k < comps.size(); ++k) {
    for (HloInstruction* h : comps[k]->instructions()) {
      if (h->opcode() == HloOpcode::kWhile || h->opcode() == HloOpcode::kConditional) {
        for (HloComputation* c : h->called_computations()) {
          if (listed.insert(c).second) comps.push_back(c);
        }
      }
    }
  }
  std::reverse(comps.begin(), comps.end());  // callees first
  size_t node_count = 0;
  for (const HloComputation* c : comps) node_count += static_cast<size_t>(c->instruction_count());
  nodes_.reserve(node_count);  // one allocation (speed only)
  const std::vector<bool> allow_params =
      ParseAllowBits(*m_, "allow_spmd_sharding_propagation_to_parameters");
  const std::vector<bool> allow_out = ParseAllowBits(*m_, "allow_spmd_sharding_propagation_to_output");
  // A node per instruction, computation by computation in post order (nodes_[k].h is index_.at(k)).
  std::vector<HloInstruction*> all;
  all.reserve(node_count);
  for (HloComputation* c : comps) {
    std::vector<int32_t> order;
    for (HloInstruction* h : c->MakeInstructionPostOrder()) {
      all.push_back(h);
      Node n;
      n.h = h;
      if (h->opcode() == HloOpcode::kOutfeed) {
        // Its sharding lays out its data operand (ShapeOfSharding), read by the partitioner and
        // kept as written; its own value, a token, is replicated.
        n.s = Sharding::Replicated();
        n.provided = true;
      } else if (h->sharding) {
        absl::StatusOr<Sharding> s = Sharding::FromHlo(*h->sharding, h->shape());
        if (!s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("sharding-propagation: '", h->name(),
                                                         "': ", s.status().message()));
        }
        n.s = s->IsUnknown() ? Sharding() : *std::move(s);
        n.provided = !s->IsUnknown();
      }
      if (c == entry && h->opcode() == HloOpcode::kParameter) {
        n.provided = !Bit(allow_params, h->parameter_number) && !(h->sharding && n.s.IsUnset() && h->sharding->kind == HloSharding::Kind::kUnknown);
        // One tuple parameter with a bit per leaf (XLA reads the bits so when their count is its
        // leaf count): each leaf refinable or not by its own bit.
        const int64_t leaves = Sharding::LeafCount(h->shape());
        if (entry->num_parameters() == 1 && h->shape().IsTuple() && allow_params.size() > 1 &&
            static_cast<int64_t>(allow_params.size()) == leaves) {
          n.provided = true;
          n.refinable_leaves.assign(allow_params.begin(), allow_params.end());
        }
      }
      if (h == entry->root()) {
        n.provided = true;
        const int64_t leaves = Sharding::LeafCount(h->shape());
        n.refinable_leaves.assign(static_cast<size_t>(leaves), false);
        for (int64_t k = 0; k < leaves; ++k) n.refinable_leaves[static_cast<size_t>(k)] = Bit(allow_out, k);
      }
      if (auto u = h->GetFrontendAttribute(kUnspecifiedDimsAttr)) n.unspecified = ParseDims(*u);
      if (n.provided) ++provided_count_;
      order.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(std::move(n));
    }
    order_.push_back(std::move(order));
  }
  index_.Reset(all);
  // Loop and conditional groups.
  for (HloComputation* c : comps) {
    for (HloInstruction* h : c->instructions()) {
      std::vector<int32_t> g;
      if (h->opcode() == HloOpcode::kWhile) {
        g = {Id(h), Id(h->while_body()->parameter(0)), Id(h->while_body()->root()),
             Id(h->while_condition()->parameter(0))};
      } else if (h->opcode() == HloOpcode::kConditional) {
        g.push_back(Id(h));
        for (size_t b = 0; b < h->called_computations().size(); ++b) {
          HloComputation* branch = h->called_computations()[b];
          g.push_back(Id(branch->root()));
          if (branch->num_parameters() == 1 && static_cast<int64_t>(b) + 1 < h->operand_count()) {
            const int32_t p = Id(branch->parameter(0));
            const int32_t src = Id(h->operand(static_cast<int64_t>(b) + 1));
            if (p >= 0 && src >= 0) {
              nodes_[static_cast<size_t>(p)].source = src;
              nodes_[static_cast<size_t>(src)].extra_users.push_back(p);
            }
          }
        }
      } else {
        continue;
      }
      const int32_t gid = static_cast<int32_t>(groups_.size());
      std::vector<int32_t> members;
      for (int32_t id : g) {
        if (id >= 0 && nodes_[static_cast<size_t>(id)].group < 0) {
          nodes_[static_cast<size_t>(id)].group = gid;
          members.push_back(id);
        }
      }
      groups_.push_back(std::move(members));
    }
  }
  return absl::OkStatus();
}

Sharding Propagator::ImproveWith(const Node& n, const Sharding& cur, const Sharding& cand,
                                 bool provided, const std::vector<int64_t>& unspecified,
                                 const Shape& shape, int a) const {
  if (provided) {
    if (unspecified.empty() || !cand.IsTiled()) return cur;
    std::optional<Sharding> restricted = ReplicateAllDimsExcept(cand, unspecified);
    if (!restricted || !restricted->IsTiled()) return cur;
    if (cur.IsUnset() || cur.IsReplicated()) return *restricted;
    if (auto merged = MergeCompatible(cur, *restricted, cur.NumTiles() + 1)) return *merged;
    return cur;
  }
  const bool aggressive = n.h->user_count() == 1 && !n.h->IsRoot();
  return ImproveLeaf(cur, cand, a >= 1, aggressive, shape.dims);
}

bool Propagator::Update(int32_t id, const Sharding& cand, int a, bool sync_group) {
  Node& n = nodes_[static_cast<size_t>(id)];
  const Shape& shape = n.h->shape();
  if (shape.IsTuple()) {
    if (cand.IsTuple()) return UpdateLeaves(id, 0, cand.leaves(), a, sync_group);
    const Sharding c = Sharding::Broadcast(cand, shape);
    if (!c.IsTuple()) return false;
    return UpdateLeaves(id, 0, c.leaves(), a, sync_group);
  }
  if (cand.IsTuple()) return false;
  // A candidate equal to the current sharding improves nothing: ImproveWith gives the current
  // one back (merging it with itself, or with a coarser copy of itself for a provided sharding
  // with unspecified dims, gives no more tiles; and no sharding is more specific than itself).
  if (cand == n.s) return false;
  const bool provided = n.provided && !(!n.refinable_leaves.empty() && n.refinable_leaves[0]);
  Sharding next = ImproveWith(n, n.s, cand, provided, n.unspecified, shape, a);
  if (next == n.s) return false;
  n.s = std::move(next);
  Stamp(id);
  MarkChanged(id);
  if (sync_group && n.group >= 0) SyncGroup(n.group, id, a);
  return true;
}

bool Propagator::UpdateLeaves(int32_t id, size_t first, const std::vector<Sharding>& cand, int a,
                              bool sync_group) {
  Node& n = nodes_[static_cast<size_t>(id)];
  if (n.leaf_shapes.empty()) FlattenShapes(n.h->shape(), &n.leaf_shapes);
  const size_t count = n.leaf_shapes.size();
  if (first + cand.size() > count) return false;
  if (!n.s.IsTuple() || n.s.leaves().size() != count) {
    n.s = n.s.IsUnset() || n.s.IsTuple() ? Sharding::Tuple(std::vector<Sharding>(count))
                                         : Sharding::Tuple(std::vector<Sharding>(count, n.s));
    Stamp(id);  // readers see a tuple now, though nothing is marked changed
  }
  bool changed = false;
  for (size_t k = 0; k < cand.size(); ++k) {
    const Sharding& c = cand[k];
    if (c.IsUnset() || c.IsUnknown()) continue;
    const size_t leaf = first + k;
    const bool provided =
        n.provided && !(leaf < n.refinable_leaves.size() && n.refinable_leaves[leaf]);
    const Sharding& cur = n.s.leaves()[leaf];
    Sharding next = ImproveWith(n, cur, c, provided, {}, *n.leaf_shapes[leaf], a);
    if (next != cur) {
      (*n.s.mutable_leaves())[leaf] = std::move(next);
      changed = true;
    }
  }
  if (!changed) return false;
  Stamp(id);
  MarkChanged(id);
  if (sync_group && n.group >= 0) SyncGroup(n.group, id, a);
  return true;
}

bool Propagator::Settled(const std::vector<uint64_t>& ok, const std::vector<uint8_t>& cls,
                         int32_t id, int c) const {
  if (recompute_all_) return false;
  const uint64_t t = ok[static_cast<size_t>(id)];
  if (t == 0 || cls[static_cast<size_t>(id)] != c) return false;
  if (stamp_[static_cast<size_t>(id)] > t) return false;
  const Node& n = nodes_[static_cast<size_t>(id)];
  for (const HloInstruction* o : n.h->operands()) {
    const int32_t oid = Id(o);
    if (oid >= 0 && stamp_[static_cast<size_t>(oid)] > t) return false;
  }
  return n.source < 0 || stamp_[static_cast<size_t>(n.source)] <= t;
}

void Propagator::MarkChanged(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  bwd_[static_cast<size_t>(id)] = 1;
  fwd_[static_cast<size_t>(id)] = 1;
  for (HloInstruction* u : n.h->users()) {
    const int32_t uid = Id(u);
    if (uid >= 0) fwd_[static_cast<size_t>(uid)] = 1;
  }
  for (int32_t e : n.extra_users) fwd_[static_cast<size_t>(e)] = 1;
}

void Propagator::SyncGroup(int32_t group, int32_t from, int a) {
  const Sharding s = nodes_[static_cast<size_t>(from)].s;
  for (int32_t m : groups_[static_cast<size_t>(group)]) {
    if (m != from) Update(m, s, a, /*sync_group=*/false);
  }
  // Members that could not take it (provided) push theirs back once.
  for (int32_t m : groups_[static_cast<size_t>(group)]) {
    if (m != from && nodes_[static_cast<size_t>(m)].s != s) {
      Update(from, nodes_[static_cast<size_t>(m)].s, a, /*sync_group=*/false);
    }
  }
}

void Propagator::Run() {
  const ShardingOf get = [this](const HloInstruction* h) -> const Sharding& { return Get(h); };
  fwd_.assign(nodes_.size(), 1);
  bwd_.assign(nodes_.size(), 1);
  stamp_.assign(nodes_.size(), 0);
  fwd_ok_.assign(nodes_.size(), 0);
  bwd_ok_.assign(nodes_.size(), 0);
  fwd_cls_.assign(nodes_.size(), 0);
  bwd_cls_.assign(nodes_.size(), 0);
  // Groups start consistent.
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int32_t m : groups_[g]) {
      if (!nodes_[static_cast<size_t>(m)].s.IsUnset()) SyncGroup(static_cast<int32_t>(g), m, 0);
    }
  }
  constexpr int64_t kMaxRounds = 200;
  for (int a = 0; a <= 3; ++a) {
    fwd_.assign(nodes_.size(), 1);
    bwd_.assign(nodes_.size(), 1);
    int64_t rounds = 0;
    bool changed = true;
    while (changed) {
      if (++rounds > kMaxRounds) {
        hit_cap_ = true;
        break;
      }
      changed = false;
      for (const std::vector<int32_t>& order : order_) {
        for (int32_t id : order) {
          if (!fwd_[static_cast<size_t>(id)]) continue;
          fwd_[static_cast<size_t>(id)] = 0;
          Node& n = nodes_[static_cast<size_t>(id)];
          const HloOpcode op = n.h->opcode();
          const int c = ForwardLevelClass(op, a);
          if (Settled(fwd_ok_, fwd_cls_, id, c)) continue;
          std::optional<Sharding> cand;
          bool read_users = false;  // a dot's lookahead: then the step is never skipped
          if (op == HloOpcode::kParameter) {
            if (n.source >= 0) cand = nodes_[static_cast<size_t>(n.source)].s;
          } else if (op != HloOpcode::kConditional) {
            cand = InferFromOperands(*n.h, get, a, &read_users);
          }
          const bool step_changed = cand && !cand->IsUnset() && Update(id, *cand, a);
          Record(&fwd_ok_, &fwd_cls_, id, c, !step_changed && !read_users);
          changed |= step_changed;
        }
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
          if (!bwd_[static_cast<size_t>(*it)]) continue;
          const int32_t id = *it;
          bwd_[static_cast<size_t>(id)] = 0;
          Node& n = nodes_[static_cast<size_t>(id)];
          if (n.s.IsUnset()) continue;
          const int c = BackwardLevelClass(n.h->opcode(), a);
          if (Settled(bwd_ok_, bwd_cls_, id, c)) continue;
          bool step_changed = false;
          if (n.h->opcode() == HloOpcode::kGetTupleElement) {
            // Only the element read is known: update those leaves alone.
            const int32_t oid = Id(n.h->operand(0));
            const Shape& ts = n.h->operand(0)->shape();
            if (oid >= 0 && ts.IsTuple()) {
              size_t first = 0;
              for (int64_t k = 0; k < n.h->tuple_index; ++k) {
                first += static_cast<size_t>(Sharding::LeafCount(ts.tuple_shapes[static_cast<size_t>(k)]));
              }
              const Sharding b = Sharding::Broadcast(n.s, n.h->shape());
              step_changed = UpdateLeaves(oid, first, b.IsTuple() ? b.leaves() : std::vector<Sharding>{b}, a);
            }
          } else {
            for (int64_t i = 0; i < n.h->operand_count(); ++i) {
              const int32_t oid = Id(n.h->operand(i));
              if (oid < 0) continue;
              std::optional<Sharding> cand = InferOperandFromUser(*n.h, i, get, a);
              if (cand && !cand->IsUnset()) step_changed |= Update(oid, *cand, a);
            }
            // A branch parameter's sharding flows back to the conditional's operand.
            if (n.h->opcode() == HloOpcode::kParameter && n.source >= 0) {
              step_changed |= Update(n.source, n.s, a);
            }
          }
          Record(&bwd_ok_, &bwd_cls_, id, c, !step_changed);
          changed |= step_changed;
        }
      }
    }
    rounds_.push_back(rounds);
  }
}

int64_t Propagator::WriteBack() {
  HloComputation* entry = m_->entry();
  const std::vector<bool> allow_params =
      ParseAllowBits(*m_, "allow_spmd_sharding_propagation_to_parameters");
  const std::vector<bool> allow_out = ParseAllowBits(*m_, "allow_spmd_sharding_propagation_to_output");
  int64_t inferred = 0;
  for (Node& n : nodes_) {
    const Shape& shape = n.h->shape();
    std::vector<const Shape*> leaf_shapes;
    FlattenShapes(shape, &leaf_shapes);
    Sharding s = n.s;
    std::vector<Sharding> leaves = s.IsTuple() ? s.leaves()
                                               : std::vector<Sharding>(leaf_shapes.size(), s);
    if (leaves.size() != leaf_shapes.size()) leaves.assign(leaf_shapes.size(), Sharding());
    const bool allowed_param = n.h->parent() == entry && n.h->opcode() == HloOpcode::kParameter &&
                               Bit(allow_params, n.h->parameter_number);
    for (size_t k = 0; k < leaves.size(); ++k) {
      Sharding& l = leaves[k];
      if (l.IsUnset() || l.IsUnknown()) l = Sharding::Replicated();
      const bool allowed_out = n.h == entry->root() && Bit(allow_out, static_cast<int64_t>(k));
      // A lone tuple parameter's leaves by their own bits (refinable_leaves).
      const bool allowed_leaf = n.h->parent() == entry &&
                                n.h->opcode() == HloOpcode::kParameter &&
                                k < n.refinable_leaves.size() && n.refinable_leaves[k];
      if ((allowed_param || allowed_out || allowed_leaf) && l.IsTiled()) {
        for (int64_t d = 0; d < l.rank(); ++d) {
          if (leaf_shapes[k]->dims[static_cast<size_t>(d)] % l.tile(d) != 0) {
            l = Sharding::Replicated();
            break;
          }
        }
      }
    }
    Sharding final_s = shape.IsTuple() ? Sharding::Tuple(std::move(leaves)) : leaves[0];
    if (!n.provided) ++inferred;
    if (n.h->opcode() == HloOpcode::kOutfeed && n.h->sharding) continue;
    n.h->sharding = final_s.ToHlo();
  }
  return inferred;
}

}  // namespace

absl::StatusOr<bool> ShardingPropagation::Run(HloModule* module) {
  Propagator p(module, recompute_all_);
  RETURN_IF_ERROR(p.Init());
  p.Run();
  const int64_t inferred = p.WriteBack();
  AddAnalysisRemark(module->name(), absl::StrCat("sharded ", inferred, " of ", p.Summary()));
  if (p.hit_cap()) {
    AddRemark(module->name(), false,
              "propagation stopped after 200 rounds at one aggressiveness level (no fixed point)");
  }
  return true;
}

WEAVE_REGISTER_PASS("sharding-propagation",
                    [](const PassOptions& o) -> absl::StatusOr<std::unique_ptr<HloPass>> {
                      ASSIGN_OR_RETURN(bool all, o.GetBool("recompute-all", false));
                      return std::make_unique<ShardingPropagation>(all);
                    });

}  // namespace weave::spmd
