// The HLO verifier (analysis/verifier.h): the module's structure, and the per-instruction
// shape checker's dispatch and shared checks; the op groups' checks are in verifier_*.cc (see
// analysis/verifier_checker.h).
#include "analysis/verifier.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "analysis/cost.h"
#include "analysis/verifier_checker.h"
#include "hlo/status_macros.h"

namespace weave {
namespace verifier_internal {

// XLA's HloSharding::Validate, as its verifier runs it on every instruction's sharding: a tiled
// sharding has one tile dim per data dim of the (leaf) shape, a tuple sharding one leaf per
// tuple leaf, and every device id (tile or maximal) is below the module's device count when the
// module states it.
absl::Status Checker::ShardingFits(const HloSharding& s, const Shape& shape, int64_t devices) const {
  using Kind = HloSharding::Kind;
  if (s.kind == Kind::kTuple) {
    if (!shape.IsTuple()) return Err(absl::StrCat("tuple sharding ", s.ToString(), " on the non-tuple shape ", ShapeText(shape)));
    std::vector<const Shape*> leaves;
    std::vector<const Shape*> stack{&shape};
    while (!stack.empty()) {
      const Shape* x = stack.back();
      stack.pop_back();
      if (x->IsTuple()) {
        for (size_t i = x->tuple_shapes.size(); i-- > 0;) stack.push_back(&x->tuple_shapes[i]);
      } else {
        leaves.push_back(x);
      }
    }
    if (s.tuple.size() != leaves.size()) {
      return Err(absl::StrCat("tuple sharding has ", s.tuple.size(), " elements for the ", leaves.size(),
                              " leaves of ", ShapeText(shape)));
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      RETURN_IF_ERROR(ShardingFits(s.tuple[i], *leaves[i], devices));
    }
    return absl::OkStatus();
  }
  if (shape.IsTuple()) {  // one sharding for every leaf
    for (const Shape& leaf : shape.tuple_shapes) {
      RETURN_IF_ERROR(ShardingFits(s, leaf, devices));
    }
    return absl::OkStatus();
  }
  if (s.kind == Kind::kMaximal && devices > 0 && s.maximal_device >= devices) {
    return Err(absl::StrCat("sharding ", s.ToString(), ": device ", s.maximal_device, " >= the ", devices,
                            " devices of the module"));
  }
  if (s.kind != Kind::kTiled || !shape.IsArray() || shape.element_type == PrimitiveType::TOKEN) {
    return absl::OkStatus();
  }
  if (s.DataRank() != shape.rank()) {
    return Err(absl::StrCat("sharding ", s.ToString(), " tiles ", s.DataRank(), " dims, but ", ShapeText(shape),
                            " has rank ", shape.rank()));
  }
  for (int64_t d : s.devices) {
    if (d < 0 || (devices > 0 && d >= devices)) {
      return Err(absl::StrCat("sharding ", s.ToString(), ": device ", d, " >= the ", devices,
                              " devices of the module"));
    }
  }
  return absl::OkStatus();
}

absl::Status Checker::Check() {
  RETURN_IF_ERROR(StartDonePairing());
  // An outfeed's sharding describes the data it sends (XLA's form), not its token result.
  if (h_.sharding && h_.opcode() != HloOpcode::kOutfeed) {
    const HloModule* m = h_.parent() != nullptr ? h_.parent()->parent() : nullptr;
    const int64_t devices = m != nullptr && m->has_num_partitions ? m->num_partitions * m->replica_count : -1;
    RETURN_IF_ERROR(ShardingFits(*h_.sharding, h_.shape(), devices));
  }
  if (h_.opcode() == HloOpcode::kFusion || h_.opcode() == HloOpcode::kWhile ||
      h_.opcode() == HloOpcode::kConditional) {
    RETURN_IF_ERROR(CalleesOnCallerThread());
  }
  if (std::optional<absl::Status> status = CheckArrayOp()) return *std::move(status);
  if (std::optional<absl::Status> status = CheckCallOrCollectiveOp()) return *std::move(status);
  if (IsUnaryModelled(h_.opcode())) return Unary();
  if (IsBinaryModelled(h_.opcode())) return Binary();
  return absl::OkStatus();  // not modelled: checked elsewhere (evaluator, later stages)
}

std::optional<absl::Status> Checker::CheckArrayOp() {
  switch (h_.opcode()) {
    case HloOpcode::kParameter:
    case HloOpcode::kAfterAll:
    case HloOpcode::kAddDependency:
      return absl::OkStatus();
    case HloOpcode::kConstant:
      return Constant();
    case HloOpcode::kIota:
      return Iota();
    case HloOpcode::kRng:
      return Rng();
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      return IdOp();
    case HloOpcode::kBroadcast:
      return Broadcast();
    case HloOpcode::kReshape:
      return Reshape();
    case HloOpcode::kTranspose:
      return Transpose();
    case HloOpcode::kDot:
      return Dot();
    case HloOpcode::kRaggedDot:
      return RaggedDot();
    case HloOpcode::kConvolution:
      return Convolution();
    case HloOpcode::kSlice:
      return Slice();
    case HloOpcode::kDynamicSlice:
      return DynamicSlice();
    case HloOpcode::kDynamicUpdateSlice:
      return DynamicUpdateSlice();
    case HloOpcode::kPad:
      return Pad();
    case HloOpcode::kConcatenate:
      return Concatenate();
    case HloOpcode::kReduce:
      return Reduce();
    case HloOpcode::kReduceWindow:
      return ReduceWindow();
    case HloOpcode::kSelect:
      return Select();
    case HloOpcode::kInfeed:
      return Infeed();
    case HloOpcode::kOutfeed:
      return Outfeed();
    case HloOpcode::kRngBitGenerator:
      return RngBitGenerator();
    case HloOpcode::kRecv:
      return Recv();
    case HloOpcode::kCollectiveReduce:
      return CollectiveReduce();
    case HloOpcode::kDynamicReshape:
      return DynamicReshape();
    case HloOpcode::kScatter:
      RETURN_IF_ERROR(IndexedDims());
      return Scatter();
    case HloOpcode::kGather:
      RETURN_IF_ERROR(IndexedDims());
      return Gather();
    case HloOpcode::kScan:
      return Scan();
    case HloOpcode::kClamp:
      return Clamp();
    case HloOpcode::kBitcastConvert:
      return BitcastConvert();
    default:
      return std::nullopt;
  }
}

std::optional<absl::Status> Checker::CheckCallOrCollectiveOp() {
  switch (h_.opcode()) {
    case HloOpcode::kWhile:
      return While();
    case HloOpcode::kConditional:
      return Conditional();
    case HloOpcode::kCall:
      return Call();
    case HloOpcode::kTuple:
      return Tuple();
    case HloOpcode::kGetTupleElement:
      return GetTupleElement();
    case HloOpcode::kAllGather:
      return AllGather();
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:  // its result is the all-reduce's
      return AllReduce();
    case HloOpcode::kReduceScatter:
      return ReduceScatter();
    case HloOpcode::kAllToAll:
      return AllToAll();
    case HloOpcode::kRaggedAllToAll:
      return RaggedAllToAll();
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
      return CollectivePermute();
    case HloOpcode::kCustomCall:
      return CustomCall();
    case HloOpcode::kCopyStart:
    case HloOpcode::kCopyDone:
      return AsyncPair();
    case HloOpcode::kAsyncStart:
    case HloOpcode::kAsyncUpdate:
    case HloOpcode::kAsyncDone:
      return AsyncOp();
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kAllGatherDone:
      return AllGatherStartDone();
    case HloOpcode::kFusion:
      return Fusion();
    case HloOpcode::kMap:
      return Map();
    default:
      return std::nullopt;
  }
}

bool Checker::IsUnaryModelled(HloOpcode op) {
  switch (op) {
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kStochasticConvert:
      return false;
    default:
      return IsElementwiseUnary(op);
  }
}

bool Checker::IsBinaryModelled(HloOpcode op) {
  return IsElementwiseBinary(op) && op != HloOpcode::kStochasticConvert;
}

absl::Status Checker::Err(const std::string& msg) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "instruction '", h_.name(), "' in computation '",
      h_.parent() ? h_.parent()->name() : std::string("<none>"), "': ",
      std::string(HloOpcodeString(h_.opcode())), ": ", msg));
}

absl::Status Checker::OperandCount(int64_t n) const {
  if (h_.operand_count() != n) {
    return Err(absl::StrCat("expects ", n, " operand", n == 1 ? "" : "s", ", got ",
                            h_.operand_count()));
  }
  return absl::OkStatus();
}

absl::Status Checker::ArrayResult() const {
  if (!h_.shape().IsArray()) {
    return Err(absl::StrCat("result shape ", ShapeText(h_.shape()), " is not an array"));
  }
  return absl::OkStatus();
}

absl::Status Checker::ArrayOperand(int64_t i) const {
  const Shape& s = h_.operand(i)->shape();
  if (!s.IsArray()) {
    return Err(absl::StrCat("operand ", i, " ('", h_.operand(i)->name(), "') has shape ",
                            ShapeText(s), ", expected an array"));
  }
  return absl::OkStatus();
}

bool Checker::SameShape(const Shape& a, const Shape& b) const {
  if (!options_.allow_mixed_precision) return ShapesMatch(a, b);
  if (a.IsTuple() != b.IsTuple()) return false;
  if (a.IsTuple()) {
    if (a.tuple_shapes.size() != b.tuple_shapes.size()) return false;
    for (size_t i = 0; i < a.tuple_shapes.size(); ++i) {
      if (!SameShape(a.tuple_shapes[i], b.tuple_shapes[i])) return false;
    }
    return true;
  }
  return TypesCompatible(a.element_type, b.element_type) && DimsEqual(a.dims, b.dims);
}

absl::Status Checker::ResultIs(const Shape& expected, const std::string& what) const {
  if (!SameShape(h_.shape(), expected)) {
    return Err(absl::StrCat("result shape ", ShapeText(h_.shape()), " does not match the ",
                            what.empty() ? "expected shape " : what + " ", ShapeText(expected)));
  }
  return absl::OkStatus();
}

}  // namespace verifier_internal

namespace {

absl::Status StructErr(const HloComputation* c, const HloInstruction* h, const std::string& msg) {
  if (h == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("computation '", c->name(), "': ", msg));
  }
  return absl::InvalidArgumentError(absl::StrCat("instruction '", h->name(), "' in computation '",
                                                 c->name(), "': ", msg));
}

}  // namespace

absl::Status VerifyInstruction(const HloInstruction& instr, const VerifyOptions& options) {
  return verifier_internal::Checker(instr, options).Check();
}

absl::Status VerifyModule(const HloModule& module, const VerifyOptions& options) {
  const std::vector<HloComputation*> comps = module.computations();
  // Open-addressing sets (one allocation each, not one per element): the verifier runs on every
  // module compiled, and node-based sets cost an allocation per instruction and per use edge.
  const absl::flat_hash_set<const HloComputation*> in_module(comps.begin(), comps.end());
  if (module.entry() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("module '", module.name(), "' has no entry"));
  }
  if (!in_module.count(module.entry())) {
    return absl::InvalidArgumentError(
        absl::StrCat("module '", module.name(), "': the entry is not one of its computations"));
  }
  const HloInstruction* first_all_reduce = nullptr;
  for (const HloComputation* c : comps) {
    if (c->root() == nullptr) return StructErr(c, nullptr, "has no root instruction");
    if (c->root()->parent() != c) {
      return StructErr(c, c->root(), "is the root but belongs to another computation");
    }
    for (int64_t i = 0; i < c->num_parameters(); ++i) {
      const HloInstruction* p = c->parameter(i);
      if (p == nullptr || p->opcode() != HloOpcode::kParameter || p->parameter_number != i) {
        return StructErr(c, p, absl::StrCat("parameter list entry ", i,
                                            " is not parameter(", i, ")"));
      }
    }
    const std::vector<HloInstruction*> instrs = c->instructions();
    // Is `h` in the users of `o`? A short user list is scanned; a long one (a constant or a
    // parameter read everywhere) is put in a set once, so the check stays O(edges) overall.
    absl::flat_hash_map<const HloInstruction*, absl::flat_hash_set<const HloInstruction*>> wide;
    auto is_user = [&wide](const HloInstruction* h, const HloInstruction* o) {
      const std::vector<HloInstruction*>& users = o->users();
      if (users.size() <= 16) return std::find(users.begin(), users.end(), h) != users.end();
      auto [it, fresh] = wide.try_emplace(o);
      if (fresh) it->second.insert(users.begin(), users.end());
      return it->second.contains(h);
    };
    for (const HloInstruction* h : instrs) {
      if (h->parent() != c) return StructErr(c, h, "has a wrong parent computation");
      if (h->opcode() == HloOpcode::kParameter &&
          (h->parameter_number < 0 || h->parameter_number >= c->num_parameters() ||
           c->parameter(h->parameter_number) != h)) {
        return StructErr(c, h, absl::StrCat("parameter(", h->parameter_number,
                                            ") is not registered as that parameter"));
      }
      for (int64_t i = 0; i < h->operand_count(); ++i) {
        const HloInstruction* o = h->operand(i);
        if (o == nullptr) return StructErr(c, h, absl::StrCat("operand ", i, " is null"));
        if (!c->Holds(o)) {
          return StructErr(c, h, absl::StrCat("operand ", i, " ('", o->name(),
                                              "') is not in the same computation"));
        }
        if (!is_user(h, o)) {
          return StructErr(c, h, absl::StrCat("is missing from the users of operand ", i, " ('",
                                              o->name(), "')"));
        }
      }
      for (const HloComputation* called : h->called_computations()) {
        if (called == nullptr || !in_module.count(called)) {
          return StructErr(c, h, "calls a computation that is not in the module");
        }
        if (called == c) return StructErr(c, h, "calls its own computation");
      }
      RETURN_IF_ERROR(verifier_internal::Checker(*h, options).Check());
      // XLA's VerifyLayoutConstrainedAllReduce: all all-reduces constrain their layout, or none.
      if (h->opcode() == HloOpcode::kAllReduce || h->opcode() == HloOpcode::kAllReduceStart) {
        if (first_all_reduce == nullptr) {
          first_all_reduce = h;
        } else if (h->constrain_layout != first_all_reduce->constrain_layout) {
          return StructErr(c, h, absl::StrCat("has constrain_layout=", h->constrain_layout ? "true" : "false",
                                              ", but all-reduce '", first_all_reduce->name(), "' has ",
                                              first_all_reduce->constrain_layout ? "true" : "false",
                                              " (a module's all-reduces are all layout-constrained or none is)"));
        }
      }
    }
  }
  return verifier_internal::VerifyModuleBuffers(module);
}

}  // namespace weave