#include "analysis/replication.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace weave {
namespace {

using Index = std::vector<int64_t>;

// Ops whose result may differ between partitions even for equal operands, or that we do not model.
bool IsPartitionVariant(HloOpcode op) {
  switch (op) {
    case HloOpcode::kPartitionId:
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
    case HloOpcode::kRngGetAndUpdateState:
    case HloOpcode::kInfeed:
    case HloOpcode::kOutfeed:
    case HloOpcode::kRecv:
    case HloOpcode::kRecvDone:
    case HloOpcode::kSend:
    case HloOpcode::kSendDone:
    case HloOpcode::kCustomCall:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
    case HloOpcode::kCollectivePermuteDone:
    case HloOpcode::kAllToAll:
    case HloOpcode::kRaggedAllToAll:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kCollectiveBroadcast:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAsyncStart:
    case HloOpcode::kAsyncUpdate:
    case HloOpcode::kAsyncDone:
    case HloOpcode::kAfterAll:
    case HloOpcode::kAddDependency:
    case HloOpcode::kDomain:
      return true;
    default:
      return false;
  }
}

// Which partitions hold equal values: cls[p] is p's class, numbered in order of first
// appearance; empty `cls` means one class (equal everywhere). `reason` names the source of the
// first split (empty when equal everywhere).
struct Eq {
  std::vector<int32_t> cls;
  std::string reason;
  bool AllEqual() const { return cls.empty(); }
};

// Canonical classes of `keys` (partitions with equal keys share a class).
template <typename Key>
std::vector<int32_t> Canon(const std::vector<Key>& keys) {
  std::map<Key, int32_t> ids;
  std::vector<int32_t> cls(keys.size());
  for (size_t p = 0; p < keys.size(); ++p) {
    auto it = ids.emplace(keys[p], static_cast<int32_t>(ids.size())).first;
    cls[p] = it->second;
  }
  if (ids.size() <= 1) cls.clear();
  return cls;
}


std::string IndexText(const Index& index) {
  if (index.empty()) return "";
  std::string s = " at tuple index {";
  for (size_t i = 0; i < index.size(); ++i) absl::StrAppend(&s, i ? "," : "", index[i]);
  return s + "}";
}

class Analyzer {
 public:
  Analyzer(const HloModule* module, std::vector<std::vector<int64_t>> groups)
      : module_(module),
        n_(std::max<int64_t>(module->num_partitions, 1)),
        groups_(std::move(groups)) {
    if (groups_.empty()) {
      groups_.emplace_back();
      for (int64_t p = 0; p < n_; ++p) groups_.back().push_back(p);
    }
  }

  Eq Value(const HloInstruction* h, const Index& index) {
    auto key = std::make_pair(h, index);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const bool conditional = !hypotheses_.empty();
    if (conditional) {
      if (auto it = hyp_memo_.find(key); it != hyp_memo_.end()) return it->second;
    }
    if (++steps_ > kMaxSteps) return Own(h, "is too deep for the replication analysis");
    if (!visiting_.insert(key).second) return Own(h, "is part of a cycle");
    Eq r = Compute(h, index);
    visiting_.erase(key);
    // Results that rest on an induction hypothesis hold only while it does.
    (conditional ? hyp_memo_ : memo_)[key] = r;
    return r;
  }

  // Whether `e` gives two partitions of one target group different classes.
  bool Splits(const Eq& e) const {
    if (e.AllEqual()) return false;
    for (const auto& g : groups_) {
      int32_t c = -1;
      for (int64_t p : g) {
        if (p < 0 || p >= n_) continue;
        const int32_t cp = e.cls[static_cast<size_t>(p)];
        if (c >= 0 && cp != c) return true;
        c = cp;
      }
    }
    return false;
  }

  std::vector<const HloInstruction*> unannotated;

 private:
  static constexpr int64_t kMaxSteps = 1000000;

  Eq All() const { return Eq{}; }

  // Every partition its own value.
  Eq Own(const HloInstruction* h, const std::string& reason) const {
    Eq e;
    if (n_ > 1) {
      e.cls.resize(static_cast<size_t>(n_));
      for (int64_t p = 0; p < n_; ++p) e.cls[static_cast<size_t>(p)] = static_cast<int32_t>(p);
    }
    e.reason = Reason(h, reason);
    return e;
  }

  static std::string Reason(const HloInstruction* h, const std::string& reason) {
    std::string s = absl::StrCat("'", h->name(), "'");
    if (h->parent() != nullptr) absl::StrAppend(&s, " in computation '", h->parent()->name(), "'");
    absl::StrAppend(&s, " ", reason);
    return s;
  }

  // The common refinement: equal where both are.
  Eq Meet(const Eq& a, const Eq& b) const {
    if (a.AllEqual()) return b;
    if (b.AllEqual()) return a;
    std::vector<std::pair<int32_t, int32_t>> keys(a.cls.size());
    for (size_t p = 0; p < keys.size(); ++p) keys[p] = {a.cls[p], b.cls[p]};
    Eq e;
    e.cls = Canon(keys);
    e.reason = Splits(a) || !Splits(b) ? a.reason : b.reason;
    return e;
  }

  // a refines b: partitions equal under a are equal under b.
  static bool Refines(const Eq& a, const Eq& b) {
    if (b.AllEqual()) return true;
    if (a.AllEqual()) return false;
    std::map<int32_t, int32_t> to;
    for (size_t p = 0; p < a.cls.size(); ++p) {
      auto [it, fresh] = to.emplace(a.cls[p], b.cls[p]);
      if (!fresh && it->second != b.cls[p]) return false;
    }
    return true;
  }

  Eq Compute(const HloInstruction* h, const Index& index) {
    const HloOpcode op = h->opcode();
    switch (op) {
      case HloOpcode::kConstant:
      case HloOpcode::kIota:
      case HloOpcode::kReplicaId:  // the replica's id: the same on all its partitions
        return All();
      case HloOpcode::kParameter:
        return Parameter(h, index);
      case HloOpcode::kTuple: {
        if (index.empty()) {
          Eq e = All();
          for (const HloInstruction* o : h->operands()) e = Meet(e, Value(o, {}));
          return e;
        }
        if (index[0] < 0 || index[0] >= h->operand_count()) return Own(h, "has no such element");
        return Value(h->operand(index[0]), Index(index.begin() + 1, index.end()));
      }
      case HloOpcode::kGetTupleElement: {
        Index sub = {h->tuple_index};
        sub.insert(sub.end(), index.begin(), index.end());
        return Value(h->operand(0), sub);
      }
      case HloOpcode::kWhile:
        return LoopState(h, index);
      case HloOpcode::kCall:
        if (h->called_computations().empty()) return Own(h, "calls nothing");
        return Value(h->to_apply()->root(), index);
      case HloOpcode::kConditional: {
        Eq e = Value(h->operand(0), {});
        for (const HloComputation* c : h->called_computations()) e = Meet(e, Value(c->root(), index));
        return e;
      }
      case HloOpcode::kAllReduce:
      case HloOpcode::kAllReduceStart:
      case HloOpcode::kAllGather: {
        if (!CalledPure(h)) return Own(h, "calls a computation that holds a partition-dependent op");
        if (h->channel_id.has_value() || h->use_global_device_ids) return CollectiveGroups(h);
        // Across replicas only: each partition combines its own values.
        Eq e = All();
        for (const HloInstruction* o : h->operands()) e = Meet(e, Value(o, {}));
        return e;
      }
      case HloOpcode::kAllReduceDone:
      case HloOpcode::kCopyDone:
        return Value(h->operand(0), index);
      default:
        break;
    }
    if (IsPartitionVariant(op)) {
      return Own(h, absl::StrCat("is ", std::string(HloOpcodeString(op)),
                                 " (may differ between partitions)"));
    }
    Eq e = All();
    for (const HloInstruction* o : h->operands()) e = Meet(e, Value(o, {}));
    if (!CalledPure(h)) {
      return Own(h, "calls a computation that holds a partition-dependent op");
    }
    return e;
  }

  // A cross-partition all-reduce / all-gather: equal within each replica group.
  Eq CollectiveGroups(const HloInstruction* h) {
    const int64_t replicas = std::max<int64_t>(module_->replica_count, 1);
    // Mesh-form groups are expanded by the parser: read like the others.
    if (!h->replica_groups.has_value()) return All();  // no groups: every device
    const auto& groups = h->replica_groups->groups;
    if (groups.empty()) return All();
    // Group of each id: partition ids, or global device ids (replica * N + partition).
    const int64_t ids = h->use_global_device_ids ? replicas * n_ : n_;
    std::vector<int64_t> group_of(static_cast<size_t>(ids), -1);
    for (size_t g = 0; g < groups.size(); ++g) {
      for (int64_t id : groups[g]) {
        if (id >= 0 && id < ids) group_of[static_cast<size_t>(id)] = static_cast<int64_t>(g);
      }
    }
    // Partitions p and q agree when, on every replica, they are in the same group.
    std::vector<std::vector<int64_t>> keys(static_cast<size_t>(n_));
    for (int64_t p = 0; p < n_; ++p) {
      const int64_t reps = h->use_global_device_ids ? replicas : 1;
      for (int64_t r = 0; r < reps; ++r) {
        const int64_t g = group_of[static_cast<size_t>(r * n_ + p)];
        keys[static_cast<size_t>(p)].push_back(g >= 0 ? g : -1 - p);  // absent: its own
      }
    }
    Eq e;
    e.cls = Canon(keys);
    if (!e.AllEqual()) {
      e.reason = Reason(h, absl::StrCat("is an ", std::string(HloOpcodeString(h->opcode())),
                                        " over replica groups ",
                                        h->replica_groups->ToString(),
                                        ": equal only within each group"));
    }
    return e;
  }

  // Whether the computations `h` calls (fusion, reduce's to_apply, ...) are pure.
  bool CalledPure(const HloInstruction* h) {
    for (const HloComputation* c : h->called_computations()) {
      if (!Pure(c)) return false;
    }
    return true;
  }

  bool Pure(const HloComputation* c) {
    auto it = pure_.find(c);
    if (it != pure_.end()) return it->second;
    pure_[c] = true;  // recursion guard
    bool ok = true;
    for (const HloInstruction* i : c->instructions()) {
      if (IsPartitionVariant(i->opcode()) || i->opcode() == HloOpcode::kAllReduce ||
          i->opcode() == HloOpcode::kAllGather) {
        ok = false;
        break;
      }
      for (const HloComputation* cc : i->called_computations()) {
        if (!Pure(cc)) ok = false;
      }
      if (!ok) break;
    }
    pure_[c] = ok;
    return ok;
  }

  // Which partitions hold the same value of a parameter with (non-tuple) sharding `s`.
  Eq ShardingEq(const HloInstruction* h, const HloSharding& s, const Index& index) {
    switch (s.kind) {
      case HloSharding::Kind::kReplicated:
        return All();
      case HloSharding::Kind::kTiled: {
        // Partitions holding the same tile (same index on every data and non-replicated
        // subgroup dim) hold the same value.
        std::vector<bool> replicated_dim(s.tile_dims.size(), false);
        const int64_t data_rank = s.DataRank();
        if (s.last_tile_dim_replicate && !s.tile_dims.empty()) replicated_dim.back() = true;
        for (size_t k = 0; k < s.last_tile_dims.size(); ++k) {
          const size_t dim = static_cast<size_t>(data_rank) + k;
          if (dim < replicated_dim.size() && s.last_tile_dims[k] == "replicated") {
            replicated_dim[dim] = true;
          }
        }
        absl::flat_hash_map<int64_t, int64_t> pos;
        for (size_t i = 0; i < s.devices.size(); ++i) pos.emplace(s.devices[i], i);
        std::vector<std::vector<int64_t>> keys(static_cast<size_t>(n_));
        for (int64_t p = 0; p < n_; ++p) {
          auto it = pos.find(p);
          if (it == pos.end()) {
            keys[static_cast<size_t>(p)] = {-1 - p};  // not in the assignment: its own
            continue;
          }
          int64_t flat = it->second;
          std::vector<int64_t> idx(s.tile_dims.size(), 0);
          for (size_t k = s.tile_dims.size(); k-- > 0;) {
            const int64_t d = std::max<int64_t>(s.tile_dims[k], 1);
            idx[k] = flat % d;
            flat /= d;
          }
          for (size_t k = 0; k < idx.size(); ++k) {
            if (!replicated_dim[k]) keys[static_cast<size_t>(p)].push_back(idx[k]);
          }
        }
        Eq e;
        e.cls = Canon(keys);
        if (!e.AllEqual()) {
          e.reason = Reason(h, absl::StrCat("is an entry parameter whose sharding ", s.ToString(),
                                            " is not replicated", IndexText(index)));
        }
        return e;
      }
      default:
        return Own(h, absl::StrCat("is an entry parameter whose sharding ", s.ToString(),
                                   " gives each partition its own value", IndexText(index)));
    }
  }

  Eq Parameter(const HloInstruction* h, const Index& index) {
    const HloComputation* comp = h->parent();
    if (comp == nullptr) return Own(h, "is a parameter outside any computation");
    if (comp->IsEntry()) {
      if (!h->sharding.has_value()) {
        // XLA's SpmdPartitioner: an instruction without a sharding is replicated.
        if (std::find(unannotated.begin(), unannotated.end(), h) == unannotated.end()) {
          unannotated.push_back(h);
        }
        return All();
      }
      const HloSharding& s = *h->sharding;
      if (s.kind != HloSharding::Kind::kTuple) return ShardingEq(h, s, index);
      // Tuple sharding: one entry per leaf in flattened order; the leaves under `index`.
      int64_t offset = 0;
      const Shape* cur = &h->shape();
      for (int64_t i : index) {
        if (!cur->IsTuple() || i < 0 || i >= static_cast<int64_t>(cur->tuple_shapes.size())) {
          return Own(h, "has no such tuple element");
        }
        for (int64_t j = 0; j < i; ++j) offset += cur->tuple_shapes[static_cast<size_t>(j)].LeafCount();
        cur = &cur->tuple_shapes[static_cast<size_t>(i)];
      }
      const int64_t count = cur->LeafCount();
      if (offset + count > static_cast<int64_t>(s.tuple.size())) {
        // A single entry for a whole tuple applies to every leaf.
        if (s.tuple.size() == 1) return ShardingEq(h, s.tuple[0], index);
        return Own(h, "has a tuple sharding with too few entries");
      }
      Eq e = All();
      for (int64_t j = offset; j < offset + count; ++j) {
        e = Meet(e, ShardingEq(h, s.tuple[static_cast<size_t>(j)], index));
      }
      return e;
    }
    const std::vector<const HloInstruction*>& callers = Callers(comp);
    if (callers.empty()) return Own(h, "is a parameter of a computation nobody calls");
    Eq e = All();
    for (const HloInstruction* caller : callers) {
      switch (caller->opcode()) {
        case HloOpcode::kWhile:
          e = Meet(e, LoopState(caller, index));
          break;
        case HloOpcode::kCall:
        case HloOpcode::kFusion:
          if (h->parameter_number >= caller->operand_count()) return Own(h, "has no argument");
          e = Meet(e, Value(caller->operand(h->parameter_number), index));
          break;
        case HloOpcode::kConditional: {
          const auto& called = caller->called_computations();
          for (size_t b = 0; b < called.size(); ++b) {
            if (called[b] != comp) continue;
            if (static_cast<int64_t>(b) + 1 >= caller->operand_count()) {
              return Own(h, "has no branch operand");
            }
            e = Meet(e, Value(caller->operand(static_cast<int64_t>(b) + 1), index));
          }
          break;
        }
        default:
          return Own(h, absl::StrCat("is a parameter of a computation called by ",
                                     std::string(HloOpcodeString(caller->opcode())), " '",
                                     caller->name(), "'"));
      }
    }
    return e;
  }

  // The loop-carried state of while `w` at `index` (= the body's and condition's parameter, and
  // the while's result). Induction over the whole state at once: assume each top-level element i
  // has the init's equivalence H[i]; if one evaluation of the body root (every element) and the
  // condition under that hypothesis keeps it (H[i] refines both), it holds at every iteration;
  // otherwise refine every H[i] by them and try again. Each round that does not settle splits a
  // class of some element, so there are at most elements x (N - 1) + 1 rounds, each one walk of
  // the body (values memoized within the round). The settled state of a loop that is not itself
  // inside a hypothesis is memoized. A nested tuple element is taken as a whole (the meet of its
  // leaves).
  Eq LoopState(const HloInstruction* w, const Index& index) {
    if (w->called_computations().size() < 2 || w->operand_count() != 1) {
      return Own(w, "is a malformed while");
    }
    const std::vector<Eq>* state = nullptr;
    if (auto it = hypotheses_.find(w); it != hypotheses_.end()) {
      state = &it->second;
    } else if (auto it = loops_.find(w); it != loops_.end()) {
      state = &it->second;
    } else {
      state = SettleLoop(w);
      if (state == nullptr) return Own(w, "loop state does not settle");
    }
    return Select(*state, w, index);
  }

  // The element of a settled (or hypothesised) loop state at `index`; the whole state when
  // `index` is empty.
  Eq Select(const std::vector<Eq>& state, const HloInstruction* w, const Index& index) const {
    if (!w->shape().IsTuple()) return state.empty() ? All() : state[0];
    if (!index.empty()) {
      if (index[0] < 0 || index[0] >= static_cast<int64_t>(state.size())) {
        return Own(w, "has no such element");
      }
      return state[static_cast<size_t>(index[0])];
    }
    Eq e = All();
    for (const Eq& x : state) e = Meet(e, x);
    return e;
  }

  // Runs the induction of LoopState for `w`; returns the settled state (stored in loops_, or in
  // loops_under_ when an outer hypothesis is active), nullptr when it does not settle.
  const std::vector<Eq>* SettleLoop(const HloInstruction* w) {
    const bool tuple = w->shape().IsTuple();
    const int64_t k = tuple ? static_cast<int64_t>(w->shape().tuple_shapes.size()) : 1;
    auto element = [&](int64_t i) { return tuple ? Index{i} : Index{}; };
    std::vector<Eq> h(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) h[static_cast<size_t>(i)] = Value(w->operand(0), element(i));
    const HloComputation* body = w->while_body();
    const bool outer = !hypotheses_.empty();
    for (int64_t round = 0; round <= k * n_; ++round) {
      hypotheses_[w] = h;
      ClearConditional();
      // Under the hypothesis the loop's back edge is cut: values being computed outside it (the
      // query may start inside the body) are computed afresh, not cycles.
      std::set<std::pair<const HloInstruction*, Index>> outside;
      outside.swap(visiting_);
      std::vector<Eq> root(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) {
        if (!IsPassThrough(body, element(i))) {
          root[static_cast<size_t>(i)] = Value(body->root(), element(i));
        }
      }
      Eq cond = Value(w->while_condition()->root(), {});
      visiting_.swap(outside);
      hypotheses_.erase(w);
      ClearConditional();
      bool settled = true;
      for (int64_t i = 0; i < k; ++i) {
        Eq& hi = h[static_cast<size_t>(i)];
        const Eq& ri = root[static_cast<size_t>(i)];
        if (Refines(hi, ri) && Refines(hi, cond)) continue;
        settled = false;
        hi = Meet(hi, Meet(ri, cond));
      }
      if (settled) {
        auto& store = outer ? loops_under_ : loops_;
        store[w] = std::move(h);
        return &store[w];
      }
    }
    return nullptr;
  }

  void ClearConditional() {
    hyp_memo_.clear();
    loops_under_.clear();
  }

  // Whether body root at `index` is the body parameter at `index` (through tuple/GTE).
  static bool IsPassThrough(const HloComputation* body, const Index& index) {
    if (body->num_parameters() != 1 || body->root() == nullptr) return false;
    const HloInstruction* v = body->root();
    size_t consumed = 0;
    while (consumed < index.size() && v->opcode() == HloOpcode::kTuple) {
      const int64_t i = index[consumed];
      if (i < 0 || i >= v->operand_count()) return false;
      v = v->operand(i);
      ++consumed;
    }
    Index chain;
    while (v->opcode() == HloOpcode::kGetTupleElement) {
      chain.insert(chain.begin(), v->tuple_index);
      v = v->operand(0);
    }
    return v == body->parameter(0) &&
           chain == Index(index.begin(), index.begin() + static_cast<int64_t>(consumed));
  }

  const std::vector<const HloInstruction*>& Callers(const HloComputation* c) {
    if (!callers_built_) {
      callers_built_ = true;
      for (const HloComputation* comp : module_->computations()) {
        for (const HloInstruction* i : comp->instructions()) {
          for (const HloComputation* callee : i->called_computations()) {
            auto& v = callers_[callee];
            if (v.empty() || v.back() != i) v.push_back(i);
          }
        }
      }
    }
    return callers_[c];
  }

  const HloModule* module_;
  const int64_t n_;
  std::vector<std::vector<int64_t>> groups_;
  int64_t steps_ = 0;
  std::map<std::pair<const HloInstruction*, Index>, Eq> memo_;      // unconditional results
  std::map<std::pair<const HloInstruction*, Index>, Eq> hyp_memo_;  // under the hypotheses
  std::set<std::pair<const HloInstruction*, Index>> visiting_;
  // Per loop under induction: the hypothesised equivalence of each top-level state element.
  std::map<const HloInstruction*, std::vector<Eq>> hypotheses_;
  // Settled loop states: unconditional, and under the outer hypotheses (cleared with hyp_memo_).
  std::map<const HloInstruction*, std::vector<Eq>> loops_;
  std::map<const HloInstruction*, std::vector<Eq>> loops_under_;
  std::map<const HloComputation*, bool> pure_;
  std::map<const HloComputation*, std::vector<const HloInstruction*>> callers_;
  bool callers_built_ = false;
};

}  // namespace

class ReplicationAnalyzerImpl : public Analyzer {
 public:
  using Analyzer::Analyzer;
};

ReplicationAnalysis::ReplicationAnalysis(const HloModule& module,
                                         std::vector<std::vector<int64_t>> groups)
    : impl_(std::make_unique<ReplicationAnalyzerImpl>(&module, std::move(groups))) {}

ReplicationAnalysis::~ReplicationAnalysis() = default;

bool ReplicationAnalysis::IsSame(const HloInstruction* instr, std::string* why) {
  if (instr == nullptr) {
    if (why) *why = "no instruction";
    return false;
  }
  Eq e = impl_->Value(instr, {});
  const bool proven = !impl_->Splits(e);
  if (!proven && why) *why = e.reason.empty() ? "not proven" : e.reason;
  return proven;
}

ReplicationProof ProveSameWithinGroups(const HloInstruction* instr,
                                       const std::vector<std::vector<int64_t>>& groups) {
  ReplicationProof proof;
  if (instr == nullptr) {
    proof.why = "no instruction";
    return proof;
  }
  if (instr->parent() == nullptr || instr->parent()->parent() == nullptr) {
    proof.why = absl::StrCat("'", instr->name(), "' is not in a module");
    return proof;
  }
  Analyzer a(instr->parent()->parent(), groups);
  Eq e = a.Value(instr, {});
  proof.proven = !a.Splits(e);
  if (!proof.proven) proof.why = e.reason.empty() ? "not proven" : e.reason;
  proof.unannotated_parameters = std::move(a.unannotated);
  return proof;
}

bool IsSameOnAllPartitions(const HloInstruction* instr, std::string* why) {
  ReplicationProof p = ProveSameWithinGroups(instr, {});
  if (!p.proven && why) *why = p.why;
  return p.proven;
}

}  // namespace weave
