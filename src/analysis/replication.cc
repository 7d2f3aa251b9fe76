#include "analysis/replication.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weave {
namespace {

using Index = std::vector<int64_t>;

// Ops whose result may differ between partitions even for equal operands, or that we do not model.
bool IsPartitionVariant(HloOpcode op) {
  switch (op) {
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
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

// Number of array/token leaves of a shape.
int64_t LeafCount(const Shape& s) {
  if (!s.IsTuple()) return 1;
  int64_t n = 0;
  for (const Shape& e : s.tuple_shapes) n += LeafCount(e);
  return n;
}

// A single (non-tuple) sharding that keeps the whole value on every device.
bool IsFullyReplicated(const HloSharding& s) {
  if (s.kind == HloSharding::Kind::kReplicated) return true;
  if (s.kind != HloSharding::Kind::kTiled) return false;
  if (!s.last_tile_dims.empty()) return false;  // manual subgroups
  const int64_t data_rank = s.DataRank();
  for (int64_t i = 0; i < data_rank && i < static_cast<int64_t>(s.tile_dims.size()); ++i) {
    if (s.tile_dims[static_cast<size_t>(i)] != 1) return false;
  }
  return true;
}

// Whether every leaf under `index` of a value of `shape` with sharding `s` is replicated.
bool LeavesReplicated(const HloSharding& s, const Shape& shape, const Index& index) {
  if (s.kind != HloSharding::Kind::kTuple) return IsFullyReplicated(s);
  // Tuple sharding: one entry per leaf in flattened order. Find the leaf range of `index`.
  int64_t offset = 0;
  const Shape* cur = &shape;
  for (int64_t i : index) {
    if (!cur->IsTuple() || i < 0 || i >= static_cast<int64_t>(cur->tuple_shapes.size())) {
      return false;
    }
    for (int64_t j = 0; j < i; ++j) offset += LeafCount(cur->tuple_shapes[static_cast<size_t>(j)]);
    cur = &cur->tuple_shapes[static_cast<size_t>(i)];
  }
  const int64_t count = LeafCount(*cur);
  if (offset + count > static_cast<int64_t>(s.tuple.size())) {
    // A single entry for a whole tuple is applied to every leaf.
    return s.tuple.size() == 1 && IsFullyReplicated(s.tuple[0]);
  }
  for (int64_t j = offset; j < offset + count; ++j) {
    if (!IsFullyReplicated(s.tuple[static_cast<size_t>(j)])) return false;
  }
  return true;
}

std::string IndexText(const Index& index) {
  if (index.empty()) return "";
  std::string s = " at tuple index {";
  for (size_t i = 0; i < index.size(); ++i) absl::StrAppend(&s, i ? "," : "", index[i]);
  return s + "}";
}

class Analyzer {
 public:
  explicit Analyzer(const HloModule* module) : module_(module) {}

  bool Same(const HloInstruction* h, const Index& index) {
    auto key = std::make_pair(h, index);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    if (!visiting_.insert(key).second) {
      // HLO is acyclic except through while back edges, which LoopState handles by induction:
      // a revisit inside an induction step relies on the hypothesis.
      return !assumed_.empty() ? true : Fail(h, "is part of a cycle");
    }
    bool r = Compute(h, index);
    visiting_.erase(key);
    memo_[key] = r;
    return r;
  }

  std::string why;

 private:
  bool Fail(const HloInstruction* h, const std::string& reason) {
    if (why.empty()) {
      why = absl::StrCat("'", h->name(), "'");
      if (h->parent() != nullptr) absl::StrAppend(&why, " in computation '", h->parent()->name(), "'");
      absl::StrAppend(&why, " ", reason);
    }
    return false;
  }

  bool Compute(const HloInstruction* h, const Index& index) {
    const HloOpcode op = h->opcode();
    switch (op) {
      case HloOpcode::kConstant:
      case HloOpcode::kIota:
        return true;
      case HloOpcode::kParameter:
        return Parameter(h, index);
      case HloOpcode::kTuple: {
        if (index.empty()) {
          for (const HloInstruction* o : h->operands()) {
            if (!Same(o, {})) return false;
          }
          return true;
        }
        if (index[0] < 0 || index[0] >= h->operand_count()) return Fail(h, "has no such element");
        return Same(h->operand(index[0]), Index(index.begin() + 1, index.end()));
      }
      case HloOpcode::kGetTupleElement: {
        Index sub = {h->tuple_index};
        sub.insert(sub.end(), index.begin(), index.end());
        return Same(h->operand(0), sub);
      }
      case HloOpcode::kWhile:
        return LoopState(h, index);
      case HloOpcode::kCall:
        if (h->called_computations().empty()) return Fail(h, "calls nothing");
        return Same(h->to_apply()->root(), index);
      case HloOpcode::kConditional: {
        if (!Same(h->operand(0), {})) return false;
        for (const HloComputation* c : h->called_computations()) {
          if (!Same(c->root(), index)) return false;
        }
        return true;
      }
      case HloOpcode::kAllReduce:
      case HloOpcode::kAllReduceStart:
      case HloOpcode::kAllGather:
        if (CoversAllDevices(h)) return CalledPure(h);
        return Fail(h, absl::StrCat("is a ", std::string(HloOpcodeString(op)),
                                    " whose replica groups do not span every partition"));
      case HloOpcode::kAllReduceDone:
      case HloOpcode::kCopyDone:
        return Same(h->operand(0), index);
      default:
        break;
    }
    if (IsPartitionVariant(op)) {
      return Fail(h, absl::StrCat("is ", std::string(HloOpcodeString(op)),
                                  " (may differ between partitions)"));
    }
    for (const HloInstruction* o : h->operands()) {
      if (!Same(o, {})) return false;
    }
    return CalledPure(h);
  }

  // Whether the computations `h` calls (fusion, reduce's to_apply, ...) are pure.
  bool CalledPure(const HloInstruction* h) {
    for (const HloComputation* c : h->called_computations()) {
      if (!Pure(c)) {
        return Fail(h, absl::StrCat("calls computation '", c->name(),
                                    "' which holds a partition-dependent op"));
      }
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

  // A cross-partition all-reduce/all-gather whose single group holds every device.
  bool CoversAllDevices(const HloInstruction* h) {
    if (!h->channel_id.has_value()) return false;  // cross-replica only
    const int64_t needed = h->use_global_device_ids
                               ? module_->num_partitions * module_->replica_count
                               : module_->num_partitions;
    if (!h->replica_groups.has_value() || h->replica_groups->groups.empty()) {
      return h->replica_groups.has_value();
    }
    if (h->replica_groups->groups.size() != 1) return false;
    const std::vector<int64_t>& g = h->replica_groups->groups[0];
    std::set<int64_t> ids(g.begin(), g.end());
    if (static_cast<int64_t>(ids.size()) < needed) return false;
    for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
      if (!ids.count(i)) return false;
    }
    return true;
  }

  bool Parameter(const HloInstruction* h, const Index& index) {
    const HloComputation* comp = h->parent();
    if (comp == nullptr) return Fail(h, "is a parameter outside any computation");
    if (comp->IsEntry()) {
      if (!h->sharding.has_value()) {
        return Fail(h, "is an entry parameter without sharding={replicated}");
      }
      if (!LeavesReplicated(*h->sharding, h->shape(), index)) {
        return Fail(h, absl::StrCat("is an entry parameter whose sharding ",
                                    h->sharding->ToString(), " is not replicated",
                                    IndexText(index)));
      }
      return true;
    }
    const std::vector<const HloInstruction*>& callers = Callers(comp);
    if (callers.empty()) return Fail(h, "is a parameter of a computation nobody calls");
    for (const HloInstruction* caller : callers) {
      switch (caller->opcode()) {
        case HloOpcode::kWhile:
          if (!LoopState(caller, index)) return false;
          break;
        case HloOpcode::kCall:
        case HloOpcode::kFusion:
          if (h->parameter_number >= caller->operand_count()) return Fail(h, "has no argument");
          if (!Same(caller->operand(h->parameter_number), index)) return false;
          break;
        case HloOpcode::kConditional: {
          const auto& called = caller->called_computations();
          for (size_t b = 0; b < called.size(); ++b) {
            if (called[b] != comp) continue;
            if (static_cast<int64_t>(b) + 1 >= caller->operand_count()) {
              return Fail(h, "has no branch operand");
            }
            if (!Same(caller->operand(static_cast<int64_t>(b) + 1), index)) return false;
          }
          break;
        }
        default:
          return Fail(h, absl::StrCat("is a parameter of a computation called by ",
                                      std::string(HloOpcodeString(caller->opcode())), " '", caller->name(),
                                      "'"));
      }
    }
    return true;
  }

  // The loop-carried state of while `w` at `index` (= the body's and condition's parameter, and
  // the while's result): proven when the init is proven and either the body passes the element
  // through unchanged, or (by induction) the body root element and the loop condition are proven
  // assuming the element is.
  bool LoopState(const HloInstruction* w, const Index& index) {
    if (w->called_computations().size() < 2 || w->operand_count() != 1) {
      return Fail(w, "is a malformed while");
    }
    auto key = std::make_pair(w, index);
    if (assumed_.count(key)) return true;  // induction hypothesis
    if (!Same(w->operand(0), index)) return false;
    const HloComputation* body = w->while_body();
    if (IsPassThrough(body, index)) return true;
    if (index.empty() && w->shape().IsTuple()) {
      for (int64_t i = 0; i < static_cast<int64_t>(w->shape().tuple_shapes.size()); ++i) {
        if (!LoopState(w, {i})) return false;
      }
      return true;
    }
    assumed_.insert(key);
    bool ok = Same(body->root(), index) && Same(w->while_condition()->root(), {});
    assumed_.erase(key);
    return ok;
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
  std::map<std::pair<const HloInstruction*, Index>, bool> memo_;
  std::set<std::pair<const HloInstruction*, Index>> visiting_;
  std::set<std::pair<const HloInstruction*, Index>> assumed_;
  std::map<const HloComputation*, bool> pure_;
  std::map<const HloComputation*, std::vector<const HloInstruction*>> callers_;
  bool callers_built_ = false;
};

}  // namespace

bool IsSameOnAllPartitions(const HloInstruction* instr, std::string* why) {
  if (instr == nullptr) {
    if (why) *why = "no instruction";
    return false;
  }
  if (instr->parent() == nullptr || instr->parent()->parent() == nullptr) {
    if (why) *why = absl::StrCat("'", instr->name(), "' is not in a module");
    return false;
  }
  Analyzer a(instr->parent()->parent());
  bool r = a.Same(instr, {});
  if (!r && why) *why = a.why.empty() ? "not proven" : a.why;
  return r;
}

}  // namespace weave
