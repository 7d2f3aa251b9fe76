// Per-instruction costs: GEMMs, memory-bound kernels, ring collectives; while trip counts.
#include "sim/costs.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "hlo/block_scaled_call.h"
#include "hlo/gemm_call.h"
#include "sim/all_to_all_cost.h"

namespace weave::sim {
namespace internal {
namespace {

using nlohmann::json;

double ArrayBytes(const Shape& s) { return static_cast<double>(s.ByteSize()); }

double OperandBytes(const HloInstruction& instr) {
  double b = 0;
  for (const HloInstruction* op : instr.operands()) b += ArrayBytes(op->shape());
  return b;
}

std::optional<int64_t> JsonInt(const json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  if (v.is_string()) {
    int64_t out = 0;
    if (absl::SimpleAtoi(v.get<std::string>(), &out)) return out;
  }
  return std::nullopt;
}

std::vector<int64_t> JsonIntList(const json& obj, const char* key) {
  std::vector<int64_t> out;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) return out;
  for (const json& e : *it) {
    if (auto v = JsonInt(e)) out.push_back(*v);
  }
  return out;
}

int64_t Prod(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d >= 0 && d < s.rank()) p *= std::max<int64_t>(s.dims[static_cast<size_t>(d)], 0);
  }
  return p;
}

// batch, m, n, k of a GEMM given lhs shape, result shape and dimension numbers.
struct GemmDims {
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

GemmDims DimsFrom(const Shape& lhs, const Shape& result, const std::vector<int64_t>& lhs_batch,
                  const std::vector<int64_t>& lhs_contracting) {
  GemmDims d;
  d.batch = Prod(lhs, lhs_batch);
  d.k = Prod(lhs, lhs_contracting);
  d.m = 1;
  for (int64_t i = 0; i < lhs.rank(); ++i) {
    if (std::find(lhs_batch.begin(), lhs_batch.end(), i) != lhs_batch.end()) continue;
    if (std::find(lhs_contracting.begin(), lhs_contracting.end(), i) != lhs_contracting.end()) {
      continue;
    }
    d.m *= std::max<int64_t>(lhs.dims[static_cast<size_t>(i)], 0);
  }
  int64_t out = result.IsArray() ? result.ElementCount() : 0;
  int64_t bm = d.batch * d.m;
  d.n = bm > 0 ? out / bm : 0;
  return d;
}

PrimitiveType WiderType(const HloInstruction& instr, int count) {
  PrimitiveType t = PrimitiveType::BF16;
  int width = -1;
  for (int i = 0; i < count && i < instr.operand_count(); ++i) {
    PrimitiveType ot = instr.operand(i)->shape().element_type;
    if (!IsArrayType(ot)) continue;
    if (BitWidth(ot) > width) {
      width = BitWidth(ot);
      t = ot;
    }
  }
  return t;
}

const HloInstruction* FindInComputation(const HloComputation* comp, HloOpcode op) {
  if (comp == nullptr) return nullptr;
  for (const HloInstruction* i : comp->instructions()) {
    if (i->opcode() == op) return i;
  }
  return nullptr;
}

// A GEMM reading its operands and writing its result (`bytes`), plus the accumulator when an add
// is folded into its epilogue (`value` is the instruction holding its result).
InstrCost GemmCost(const SystemSpec& s, PrimitiveType t, const GemmDims& d, double bytes,
                   const HloInstruction* value) {
  InstrCost c;
  c.kind = CostKind::kGemm;
  c.flops = 2.0 * static_cast<double>(d.batch) * static_cast<double>(d.m) *
            static_cast<double>(d.n) * static_cast<double>(d.k);
  if (value != nullptr && FoldingAdd(value) != nullptr && value->shape().IsArray()) {
    bytes += ArrayBytes(value->shape());  // beta = 1: the accumulator is read
  }
  c.bytes = bytes;
  c.phases = GemmPhases(s, t, d.batch, d.m, d.n, d.k, bytes);
  for (const Phase& p : c.phases) c.us += p.work;
  c.fp8 = IsFp8(t);
  return c;
}

// Bytes one SM's share of an element-wise kernel moves before the kernel needs another SM: a
// kernel smaller than sm_count x this runs on fewer SMs (a scalar index computation on one).
constexpr double kBytesPerSm = 1 << 20;

// A bandwidth-bound kernel moving `bytes`: it asks for the whole HBM bandwidth and as many SMs
// as its size fills.
InstrCost MemoryCost(const SystemSpec& s, double bytes) {
  InstrCost c;
  c.kind = CostKind::kMemory;
  c.bytes = bytes;
  c.us = MemoryTimeUs(s, bytes);
  const double sms = static_cast<double>(std::max<int64_t>(s.sm_count, 1));
  const double sm = std::clamp(std::ceil(bytes / kBytesPerSm) / sms, 1.0 / sms, 1.0);
  if (c.us > 0) c.phases.push_back({c.us, sm, 1.0});
  return c;
}

bool IsGemmValue(const HloInstruction* v, const HloInstruction** gemm) {
  if (v->opcode() == HloOpcode::kDot) {
    *gemm = v;
    return true;
  }
  if (v->opcode() == HloOpcode::kFusion && !v->called_computations().empty() &&
      FindInComputation(v->called_computations()[0], HloOpcode::kDot) != nullptr) {
    *gemm = v;
    return true;
  }
  if (IsCublasGemmCall(*v) && v->shape().IsArray()) {
    *gemm = v;
    return true;
  }
  if (v->opcode() == HloOpcode::kGetTupleElement && v->tuple_index == 0 &&
      v->operand_count() == 1 && IsCublasGemmCall(*v->operand(0))) {
    *gemm = v->operand(0);
    return true;
  }
  return false;
}

// Whether `b` is a broadcast of a constant whose every user is an add folding a GEMM (beta = 0:
// the zero init costs nothing).
bool IsFoldedZeroInit(const HloInstruction& b) {
  if (b.opcode() != HloOpcode::kBroadcast || b.operand_count() != 1 ||
      b.operand(0)->opcode() != HloOpcode::kConstant || b.users().empty()) {
    return false;
  }
  for (const HloInstruction* u : b.users()) {
    if (u->opcode() != HloOpcode::kAdd || u->operand_count() != 2) return false;
    const HloInstruction* other = u->operand(0) == &b ? u->operand(1) : u->operand(0);
    if (FoldingAdd(other) != u) return false;
  }
  return true;
}


bool IsFreeCustomCall(std::string_view target) {
  return target == "Sharding" || target == "SPMDFullToShardShape" ||
         target == "SPMDShardToFullShape" || target.substr(0, 8) == "xla.sdy." ||
         target == "MoveToHost" || target == "MoveToDevice" || target == "AllocateBuffer" ||
         target == "LayoutConstraint";
}

}  // namespace

json BackendConfig(const HloInstruction& instr) {
  if (instr.backend_config.empty() || instr.backend_config[0] != '{') return json::value_t::discarded;
  return json::parse(instr.backend_config, nullptr, /*allow_exceptions=*/false);
}

std::vector<int64_t> WaitOnOperationQueues(const json& config) {
  if (!config.is_object()) return {};
  return JsonIntList(config, "wait_on_operation_queues");
}

bool ForceEarliestSchedule(const json& config) {
  if (!config.is_object()) return false;
  auto it = config.find("force_earliest_schedule");
  return it != config.end() && it->is_boolean() && it->get<bool>();
}

int64_t CollectiveGroupSize(const HloInstruction& instr, int64_t num_partitions,
                            int64_t replica_count) {
  HloOpcode op = instr.opcode();
  if (op == HloOpcode::kCollectivePermute || op == HloOpcode::kCollectivePermuteStart) {
    return static_cast<int64_t>(instr.source_target_pairs().size());
  }
  if (instr.replica_groups && !instr.replica_groups->groups.empty() &&
      !instr.replica_groups->groups[0].empty()) {
    return static_cast<int64_t>(instr.replica_groups->groups[0].size());
  }
  num_partitions = std::max<int64_t>(num_partitions, 1);
  replica_count = std::max<int64_t>(replica_count, 1);
  if (!instr.channel_id) return replica_count;        // cross-replica
  if (instr.use_global_device_ids) return num_partitions * replica_count;
  return num_partitions;                               // cross-partition
}

namespace {

// The value a GEMM call's result is read as: the call, or its get-tuple-element 0 when the call
// returns a tuple (null when nothing reads element 0).
const HloInstruction* GemmResultValue(const HloInstruction& call) {
  if (!call.shape().IsTuple()) return &call;
  const HloInstruction* value = nullptr;
  for (const HloInstruction* u : call.users()) {
    if (u->opcode() == HloOpcode::kGetTupleElement && u->tuple_index == 0) value = u;
  }
  return value;
}

// A custom call's cost: a block-scaled GEMM (MXFP8 / NVFP4) or a cuBLAS GEMM call at their
// GEMM cost, a free one (sharding markers and the like) passing its operand through; nullopt for
// any other target (costed by its bytes).
std::optional<InstrCost> CustomCallCost(const HloInstruction& instr, const SystemSpec& s) {
  const Shape& out = instr.shape();
  const Shape& result = out.IsTuple() && !out.tuple_shapes.empty() ? out.tuple_shapes[0] : out;
  const BlockScaledKind bk = BlockScaledKindOf(instr);
  if ((bk == BlockScaledKind::kDot || bk == BlockScaledKind::kCudnnDot) &&
      instr.operand_count() >= 3) {
    // Contracting dim last, batch dim 0 at rank 3, at the rate of its data type; the scales
    // count in the bytes it reads.
    const Shape& lhs = instr.operand(0)->shape();
    if (lhs.rank() == 2 || lhs.rank() == 3) {
      GemmDims d = DimsFrom(lhs, result,
                            lhs.rank() == 3 ? std::vector<int64_t>{0} : std::vector<int64_t>{},
                            {lhs.rank() - 1});
      return GemmCost(s, WiderType(instr, 2), d, OperandBytes(instr) + ArrayBytes(result),
                      GemmResultValue(instr));
    }
  }
  if (IsCublasGemmCall(instr) && instr.operand_count() >= 2) {
    const Shape& lhs = instr.operand(0)->shape();
    std::vector<int64_t> batch, contracting;
    json cfg = BackendConfig(instr);
    bool found = false;
    if (cfg.is_object()) {
      auto g = cfg.find("gemm_backend_config");
      if (g != cfg.end() && g->is_object()) {
        auto dn = g->find("dot_dimension_numbers");
        if (dn != g->end() && dn->is_object()) {
          batch = JsonIntList(*dn, "lhs_batch_dimensions");
          contracting = JsonIntList(*dn, "lhs_contracting_dimensions");
          found = true;
        }
      }
    }
    if (!found && lhs.rank() > 0) contracting = {lhs.rank() - 1};
    GemmDims d = DimsFrom(lhs, result, batch, contracting);
    PrimitiveType t = IsCublasLtMatmulF8Call(instr) ? PrimitiveType::F8E4M3FN : WiderType(instr, 2);
    return GemmCost(s, t, d, OperandBytes(instr) + ArrayBytes(result), GemmResultValue(instr));
  }
  if (IsFreeCustomCall(instr.custom_call_target())) {
    InstrCost c;
    c.kind = CostKind::kPassThrough;
    return c;
  }
  return std::nullopt;
}

// A collective's cost: the bytes it moves over its group (see CollectiveGroupSize), timed as its
// base collective (-start forms, send/recv as a permute, ragged all-to-all as all-to-all).
InstrCost CollectiveCost(const HloInstruction& instr, const SystemSpec& s, int64_t num_partitions,
                         int64_t replica_count) {
  const Shape& out = instr.shape();
  InstrCost c;
  c.kind = CostKind::kComm;
  HloOpcode op = instr.opcode();
  int64_t n = CollectiveGroupSize(instr, num_partitions, replica_count);
  double bytes = 0;
  switch (op) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
      bytes = OperandBytes(instr) * static_cast<double>(n);  // the gathered data
      break;
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
      bytes = instr.operand_count() > 0 ? ArrayBytes(instr.operand(0)->shape()) : 0;
      if (n == 0) bytes = 0;  // no pairs: nothing moves
      n = std::max<int64_t>(n, 2);
      break;
    case HloOpcode::kSend:
      bytes = instr.operand_count() > 0 ? ArrayBytes(instr.operand(0)->shape()) : 0;
      n = 2;
      break;
    case HloOpcode::kRecv:
      bytes = out.IsTuple() && !out.tuple_shapes.empty() ? ArrayBytes(out.tuple_shapes[0])
                                                         : ArrayBytes(out);
      n = 2;
      break;
    default:
      bytes = OperandBytes(instr);
  }
  c.bytes = bytes;
  c.group = n;
  HloOpcode base = op;
  if (op == HloOpcode::kAllGatherStart) base = HloOpcode::kAllGather;
  if (op == HloOpcode::kAllReduceStart) base = HloOpcode::kAllReduce;
  if (op == HloOpcode::kCollectivePermuteStart || op == HloOpcode::kSend ||
      op == HloOpcode::kRecv) {
    base = HloOpcode::kCollectivePermute;
  }
  if (op == HloOpcode::kRaggedAllToAll) base = HloOpcode::kAllToAll;
  if (!instr.async_sugar().empty() && instr.async_sugar() == "reduce-scatter") {
    base = HloOpcode::kReduceScatter;
  }
  if (!instr.async_sugar().empty() && instr.async_sugar() == "all-to-all") {
    base = HloOpcode::kAllToAll;
  }
  c.us = bytes > 0 ? CollectiveTimeUs(s, base, bytes, n) : 0;
  return c;
}

// An async-start's cost: the sugared form (`reduce-scatter-start`) costs its wrapped
// collective, `calls={wrapped}` the wrapped computation's collective or the sum of its kernels;
// nullopt without either.
std::optional<InstrCost> AsyncStartCost(const HloInstruction& instr, const SystemSpec& s,
                                        int64_t num_partitions, int64_t replica_count) {
  InstrCost c;
  // Sugared form (`reduce-scatter-start`): cost the wrapped collective on this instruction.
  if (!instr.async_sugar().empty()) {
    std::optional<HloOpcode> base = ParseHloOpcode(instr.async_sugar());
    if (base && IsCollective(*base)) {
      c.kind = CostKind::kComm;
      c.group = CollectiveGroupSize(instr, num_partitions, replica_count);
      c.bytes = OperandBytes(instr);
      if (*base == HloOpcode::kAllGather) c.bytes *= static_cast<double>(c.group);
      c.us = CollectiveTimeUs(s, *base, c.bytes, c.group);
      return c;
    }
  }
  // async-start calls={wrapped}: the wrapped computation's cost (its collective, or the sum
  // of its kernels).
  const HloComputation* wrapped =
      instr.called_computations().empty() ? nullptr : instr.called_computations()[0];
  if (wrapped == nullptr) return std::nullopt;
  InstrCost total;
  total.kind = CostKind::kMemory;
  for (const HloInstruction* i : wrapped->instructions()) {
    InstrCost ic = CostOf(*i, s, num_partitions, replica_count);
    if (ic.kind == CostKind::kComm) return ic;
    if (ic.kind == CostKind::kGemm) total.kind = CostKind::kGemm;
    total.phases.insert(total.phases.end(), ic.phases.begin(), ic.phases.end());
    total.us += ic.us;
    total.flops += ic.flops;
    total.bytes += ic.bytes;
  }
  return total;
}

// A fusion's cost: a GEMM when it fuses a dot (its operands' and result's bytes), else its bytes
// over HBM.
InstrCost FusionCost(const HloInstruction& instr, const SystemSpec& s) {
  const HloComputation* fused =
      instr.called_computations().empty() ? nullptr : instr.called_computations()[0];
  const double bytes = OperandBytes(instr) + ArrayBytes(instr.shape());
  if (const HloInstruction* dot = FindInComputation(fused, HloOpcode::kDot)) {
    if (dot->operand_count() >= 2) {
      GemmDims d = DimsFrom(dot->operand(0)->shape(), dot->shape(), dot->dot_dims().lhs_batch,
                            dot->dot_dims().lhs_contracting);
      return GemmCost(s, WiderType(*dot, 2), d, bytes, &instr);
    }
  }
  return MemoryCost(s, bytes);
}

}  // namespace

InstrCost CostOf(const HloInstruction& instr, const SystemSpec& s, int64_t num_partitions,
                 int64_t replica_count) {
  InstrCost c;
  const Shape& out = instr.shape();
  switch (instr.opcode()) {
    case HloOpcode::kParameter:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kCall:
    case HloOpcode::kConditional:
    case HloOpcode::kWhile:
      c.kind = CostKind::kStructural;
      return c;
    case HloOpcode::kBitcast:
    case HloOpcode::kReshape:
    case HloOpcode::kOptimizationBarrier:
    case HloOpcode::kDomain:
    case HloOpcode::kAddDependency:
    case HloOpcode::kAllGatherDone:
    case HloOpcode::kAllReduceDone:
    case HloOpcode::kCollectivePermuteDone:
    case HloOpcode::kAsyncUpdate:
    case HloOpcode::kAsyncDone:
    case HloOpcode::kCopyDone:
    case HloOpcode::kSendDone:
    case HloOpcode::kRecvDone:
      c.kind = CostKind::kPassThrough;
      return c;
    case HloOpcode::kConstant:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kAfterAll:
    case HloOpcode::kGetDimensionSize:
    case HloOpcode::kRngGetAndUpdateState:
      c.kind = CostKind::kFree;
      return c;
    case HloOpcode::kDot: {
      if (instr.operand_count() < 2) break;
      GemmDims d = DimsFrom(instr.operand(0)->shape(), out, instr.dot_dims().lhs_batch,
                            instr.dot_dims().lhs_contracting);
      return GemmCost(s, WiderType(instr, 2), d, OperandBytes(instr) + ArrayBytes(out), &instr);
    }
    case HloOpcode::kAdd:
      // Folded into the epilogue of the GEMM producing one operand (beta = 1).
      if (instr.operand_count() == 2 &&
          (FoldingAdd(instr.operand(0)) == &instr || FoldingAdd(instr.operand(1)) == &instr)) {
        c.kind = CostKind::kFree;
        return c;
      }
      break;
    case HloOpcode::kBroadcast:
      if (instr.operand_count() == 1 && instr.operand(0)->opcode() == HloOpcode::kConstant) {
        if (IsFoldedZeroInit(instr)) {
          c.kind = CostKind::kFree;
          return c;
        }
        return MemoryCost(s, out.IsArray() ? ArrayBytes(out) : 0);  // a fill: written only
      }
      break;
    case HloOpcode::kCustomCall:
      if (std::optional<InstrCost> call = CustomCallCost(instr, s)) return *call;
      break;
    case HloOpcode::kFusion:
      return FusionCost(instr, s);
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
    case HloOpcode::kAllToAll:
    case HloOpcode::kRaggedAllToAll:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCollectivePermuteStart:
    case HloOpcode::kCollectiveBroadcast:
    case HloOpcode::kSend:
    case HloOpcode::kRecv:
      return CollectiveCost(instr, s, num_partitions, replica_count);
    case HloOpcode::kAsyncStart:
      if (std::optional<InstrCost> a = AsyncStartCost(instr, s, num_partitions, replica_count)) {
        return *a;
      }
      break;
    case HloOpcode::kDynamicUpdateSlice: {
      // In place: a GEMM's result (its only use) is written by the GEMM into its block of the
      // buffer (cuBLAS output at an offset, XLA's dynamic-slice fusion); any other update is
      // read and written once (XLA's in-place dynamic-update-slice fusion).
      if (instr.operand_count() < 2) break;
      const HloInstruction* update = instr.operand(1);
      const HloInstruction* gemm = nullptr;
      if (update->user_count() == 1 && IsGemmValue(update, &gemm)) {
        c.kind = CostKind::kFree;
        return c;
      }
      return MemoryCost(s, 2 * ArrayBytes(update->shape()));
    }
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kSlice:
    case HloOpcode::kGather:
      return MemoryCost(s, 2 * ArrayBytes(out));
    case HloOpcode::kIota:
      return MemoryCost(s, ArrayBytes(out));
    default:
      break;
  }
  // Every other kernel: bytes of its operands and result over HBM.
  double bytes = OperandBytes(instr) + (out.IsArray() ? ArrayBytes(out) : 0);
  if (out.IsTuple()) {
    for (const Shape& e : out.tuple_shapes) bytes += ArrayBytes(e);
  }
  return MemoryCost(s, bytes);
}

const HloInstruction* FoldingAdd(const HloInstruction* v) {
  const HloInstruction* gemm = nullptr;
  if (v == nullptr || !IsGemmValue(v, &gemm) || v->user_count() != 1) return nullptr;
  const HloInstruction* add = v->users()[0];
  if (add->opcode() != HloOpcode::kAdd || add->operand_count() != 2 ||
      add->operand(0) == add->operand(1) || !(add->shape() == v->shape())) {
    return nullptr;
  }
  const HloInstruction* acc = add->operand(0) == v ? add->operand(1) : add->operand(0);
  if (!(acc->shape() == v->shape())) return nullptr;
  // add(gemm0, gemm1): the first one folds (its epilogue reads the second's result).
  const HloInstruction* other_gemm = nullptr;
  if (add->operand(1) == v && IsGemmValue(acc, &other_gemm) && acc->user_count() == 1) {
    return nullptr;
  }
  return add;
}

const HloInstruction* FoldingAddOfGemm(const HloInstruction* gemm) {
  if (gemm->shape().IsTuple()) {
    for (const HloInstruction* u : gemm->users()) {
      if (u->opcode() == HloOpcode::kGetTupleElement && u->tuple_index == 0) return FoldingAdd(u);
    }
    return nullptr;
  }
  return FoldingAdd(gemm);
}

}  // namespace internal

namespace internal {

std::vector<Phase> GemmPhases(const SystemSpec& s, PrimitiveType t, int64_t batch, int64_t m,
                              int64_t n, int64_t k, double bytes) {
  std::vector<Phase> phases;
  if (batch <= 0 || m <= 0 || n <= 0 || k <= 0) return phases;
  const double rate = s.MatmulTflops(t) * 1e6 * s.gemm.efficiency;  // FLOP per microsecond
  if (!(rate > 0)) return phases;
  const double bw = s.hbm_gbps * 1e3 * s.hbm_efficiency;  // bytes per microsecond
  auto mem_us = [&](double b) { return bw > 0 && b > 0 ? b / bw : 0.0; };
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) *
                       static_cast<double>(n) * static_cast<double>(k);
  if (!s.gemm.tiled) {
    // The closed-form roofline of performance-model.md: FLOPs at the GEMM rate, nothing else.
    phases.push_back({flops / rate, 1.0, 0.0});
    return phases;
  }
  if (s.gemm.overhead_us > 0) phases.push_back({s.gemm.overhead_us, 0, 0});
  // One phase of `compute` microseconds on `sm` of the SMs that moves `b` bytes: it takes at
  // least the memory time, during which it asks for the whole HBM bandwidth.
  auto add = [&](double compute, double sm, double b) {
    double mem = mem_us(b);
    double work = std::max(compute, mem);
    if (work > 0) phases.push_back({work, sm, work > 0 ? mem / work : 0});
  };
  // Output tiles, each dim padded to the 16-element MMA granule when smaller than the tile;
  // K padded to whole k-blocks.
  auto tile = [](int64_t dim, int64_t t) {
    int64_t r = (dim + 15) / 16 * 16;
    return std::max<int64_t>(1, std::min(t, r));
  };
  const int64_t tm = tile(m, s.gemm.tile_m), tn = tile(n, s.gemm.tile_n);
  const int64_t tk = std::max<int64_t>(1, s.gemm.tile_k);
  const double kp = std::ceil(static_cast<double>(k) / static_cast<double>(tk)) *
                    static_cast<double>(tk);
  const double tiles = static_cast<double>(batch) *
                       std::ceil(static_cast<double>(m) / static_cast<double>(tm)) *
                       std::ceil(static_cast<double>(n) / static_cast<double>(tn));
  const double sms = static_cast<double>(std::max<int64_t>(s.sm_count, 1));
  // One tile on one SM: the SM's share of the GPU's rate.
  const double tau = 2.0 * static_cast<double>(tm) * static_cast<double>(tn) * kp / (rate / sms);
  const double full = std::floor(tiles / sms);
  const double last = tiles - full * sms;
  const double bytes_per_tile = bytes / tiles;
  if (full > 0) add(full * tau, 1.0, full * sms * bytes_per_tile);
  if (last > 0) add(tau, last / sms, last * bytes_per_tile);
  return phases;
}

}  // namespace internal

double GemmTimeUs(const SystemSpec& s, PrimitiveType t, int64_t batch, int64_t m, int64_t n,
                  int64_t k, double bytes) {
  double us = 0;
  for (const internal::Phase& p : internal::GemmPhases(s, t, batch, m, n, k, bytes)) us += p.work;
  return us;
}

double MemoryTimeUs(const SystemSpec& s, double bytes) {
  if (!(s.hbm_gbps > 0) || bytes <= 0) return 0;
  return bytes / (s.hbm_gbps * 1e3 * s.hbm_efficiency);  // GB/s = 1e3 bytes per microsecond
}

double CollectiveTimeUs(const SystemSpec& s, HloOpcode op, double bytes, int64_t n) {
  if (n <= 1 || bytes <= 0) return 0;
  double bw = s.link_gbps * 1e3 * s.link_efficiency;  // bytes per microsecond
  double nn = static_cast<double>(n);
  double frac = (nn - 1) / nn;
  switch (op) {
    case HloOpcode::kAllGather:
    case HloOpcode::kAllGatherStart:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kCollectiveBroadcast:
      return frac * bytes / bw + (nn - 1) * s.latency_us;
    case HloOpcode::kAllToAll:
    case HloOpcode::kRaggedAllToAll:
      return AllToAllTimeUs(s, bytes, n);  // one step of G-1 concurrent transfers
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllReduceStart:
      return 2 * frac * bytes / bw + 2 * (nn - 1) * s.latency_us;
    default:  // collective-permute, send/recv: one transfer, one step
      return bytes / bw + s.latency_us;
  }
}

namespace {

// Follows copies / converts.
const HloInstruction* Strip(const HloInstruction* i) {
  while (i != nullptr && (i->opcode() == HloOpcode::kCopy || i->opcode() == HloOpcode::kConvert ||
                          i->opcode() == HloOpcode::kBitcast) &&
         i->operand_count() == 1) {
    i = i->operand(0);
  }
  return i;
}

std::optional<int64_t> ScalarConstant(const HloInstruction* i) {
  i = Strip(i);
  if (i == nullptr || i->opcode() != HloOpcode::kConstant || !i->literal ||
      !i->literal->IsScalar() || i->literal->elided) {
    return std::nullopt;
  }
  return i->literal->GetAsInt(0);
}

// Index of the tuple element `i` is read from: gte(parameter(0), index).
std::optional<int64_t> ParamIndex(const HloInstruction* i) {
  i = Strip(i);
  if (i == nullptr || i->opcode() != HloOpcode::kGetTupleElement || i->operand_count() != 1) {
    return std::nullopt;
  }
  const HloInstruction* p = i->operand(0);
  if (p->opcode() != HloOpcode::kParameter) return std::nullopt;
  return i->tuple_index;
}

}  // namespace

std::optional<int64_t> WhileTripCount(const HloInstruction& w) {
  if (w.opcode() != HloOpcode::kWhile || w.called_computations().size() < 2) return std::nullopt;
  nlohmann::json cfg = internal::BackendConfig(w);
  if (cfg.is_object()) {
    auto it = cfg.find("known_trip_count");
    if (it != cfg.end() && it->is_object()) {
      auto n = it->find("n");
      if (n != it->end()) {
        if (auto v = internal::JsonInt(*n); v && *v >= 0) return *v;
      }
    }
  }
  const HloComputation* cond = w.while_condition();
  const HloComputation* body = w.while_body();
  if (cond == nullptr || body == nullptr || cond->root() == nullptr || body->root() == nullptr) {
    return std::nullopt;
  }
  const HloInstruction* cmp = cond->root();
  if (cmp->opcode() != HloOpcode::kCompare || cmp->operand_count() != 2 ||
      !cmp->comparison_direction) {
    return std::nullopt;
  }
  ComparisonDirection dir = *cmp->comparison_direction;
  std::optional<int64_t> idx = ParamIndex(cmp->operand(0));
  std::optional<int64_t> limit = ScalarConstant(cmp->operand(1));
  if (!idx || !limit) {
    // constant on the left: mirror the direction.
    idx = ParamIndex(cmp->operand(1));
    limit = ScalarConstant(cmp->operand(0));
    if (!idx || !limit) return std::nullopt;
    switch (dir) {
      case ComparisonDirection::kLt: dir = ComparisonDirection::kGt; break;
      case ComparisonDirection::kLe: dir = ComparisonDirection::kGe; break;
      case ComparisonDirection::kGt: dir = ComparisonDirection::kLt; break;
      case ComparisonDirection::kGe: dir = ComparisonDirection::kLe; break;
      default: break;
    }
  }
  // Initial value: element idx of the while's operand tuple.
  if (w.operand_count() != 1) return std::nullopt;
  const HloInstruction* init = Strip(w.operand(0));
  if (init == nullptr || init->opcode() != HloOpcode::kTuple || *idx < 0 ||
      *idx >= init->operand_count()) {
    return std::nullopt;
  }
  std::optional<int64_t> start = ScalarConstant(init->operand(*idx));
  if (!start) return std::nullopt;
  // Step: the body's root tuple element idx = add(...add(gte(param, idx), c1)..., c2).
  const HloInstruction* root = body->root();
  if (root->opcode() != HloOpcode::kTuple || *idx >= root->operand_count()) return std::nullopt;
  const HloInstruction* cur = Strip(root->operand(*idx));
  int64_t step = 0;
  for (int guard = 0; guard < 64 && cur != nullptr; ++guard) {
    if (auto p = ParamIndex(cur); p && *p == *idx) break;
    if ((cur->opcode() == HloOpcode::kAdd || cur->opcode() == HloOpcode::kSubtract) &&
        cur->operand_count() == 2) {
      int sign = cur->opcode() == HloOpcode::kAdd ? 1 : -1;
      if (auto c = ScalarConstant(cur->operand(1))) {
        step += sign * *c;
        cur = Strip(cur->operand(0));
        continue;
      }
      if (auto c = ScalarConstant(cur->operand(0)); c && sign == 1) {
        step += *c;
        cur = Strip(cur->operand(1));
        continue;
      }
    }
    return std::nullopt;
  }
  if (cur == nullptr || ParamIndex(cur) != idx || step == 0) return std::nullopt;
  int64_t s0 = *start, c = *limit;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };  // a >= 0, b > 0
  switch (dir) {
    case ComparisonDirection::kLt:
      if (step < 0) return std::nullopt;
      return c <= s0 ? 0 : ceil_div(c - s0, step);
    case ComparisonDirection::kLe:
      if (step < 0) return std::nullopt;
      return c < s0 ? 0 : (c - s0) / step + 1;
    case ComparisonDirection::kGt:
      if (step > 0) return std::nullopt;
      return s0 <= c ? 0 : ceil_div(s0 - c, -step);
    case ComparisonDirection::kGe:
      if (step > 0) return std::nullopt;
      return s0 < c ? 0 : (s0 - c) / (-step) + 1;
    case ComparisonDirection::kNe:
      if ((c - s0) % step != 0 || (c - s0) / step < 0) return std::nullopt;
      return (c - s0) / step;
    default:
      return std::nullopt;
  }
}

}  // namespace weave::sim
