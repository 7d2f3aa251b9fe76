// Internal: per-instruction costs of the performance model (see simulator.h for the model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hlo/ir.h"
#include "nlohmann/json.hpp"
#include "sim/simulator.h"

namespace weave::sim::internal {

// How the scheduler treats one instruction.
enum class CostKind : uint8_t {
  kFree,         // no work (constants, partition-id, -done halves, ...): a value, no kernel
  kPassThrough,  // no work, the value is operand 0's (bitcast, reshape, Sharding custom calls)
  kGemm,         // a GEMM kernel on a compute stream
  kMemory,       // a bandwidth-bound kernel on a compute stream
  kComm,         // a collective on the communication stream
  kStructural,   // parameter, tuple, get-tuple-element, call, conditional, while
};

// One phase of a compute kernel: `work` microseconds at full rate, using `sm` of the GPU's SMs
// and `hbm` of its HBM bandwidth (fractions, 0..1) while it runs at that rate. A kernel given
// less than it asks for runs proportionally slower (simulator.cc shares the GPU in issue order).
struct Phase {
  double work = 0;
  double sm = 1;
  double hbm = 0;
};

struct InstrCost {
  CostKind kind = CostKind::kFree;
  double us = 0;      // time at full speed, microseconds (the phases' work summed)
  double flops = 0;   // GEMMs
  double bytes = 0;   // memory ops: bytes read + written; collectives: bytes counted
  int64_t group = 0;  // collectives: N
  bool fp8 = false;   // GEMMs with FP8 operands
  std::vector<Phase> phases;  // compute kernels (kGemm, kMemory); empty for the others
};

// The phases of a GEMM alone on the GPU (see simulator.h): a fixed overhead, the full waves of
// output tiles on every SM, the last partial wave on the SMs it needs, each at least its share of
// `bytes` over HBM.
std::vector<Phase> GemmPhases(const SystemSpec& s, PrimitiveType t, int64_t batch, int64_t m,
                              int64_t n, int64_t k, double bytes);
// The add that folds the GEMM producing `v` into its epilogue (beta = 1), or null: `v` is a
// GEMM's result (a dot, a fusion holding one, or element 0 of a cuBLAS custom call), read only by
// one `add` of `v` and an accumulator of the same shape.
// add(gemm0, gemm1) folds the first. XLA's GemmRewriter does this fold (a matrix bias); the GEMM
// then reads the accumulator, so it cannot start before the accumulator is ready.
const HloInstruction* FoldingAdd(const HloInstruction* v);
// The folding add of a GEMM instruction (for a cuBLAS custom call with a tuple result: of its
// element 0), or null.
const HloInstruction* FoldingAddOfGemm(const HloInstruction* gemm);

// The backend_config JSON of an instruction (a discarded value when absent or not JSON).
nlohmann::json BackendConfig(const HloInstruction& instr);
// (`operation_queue_id`: read with weave::OperationQueueId, passes/gpu_backend_config.h, as the
// passes that assign streams read it.)
// `wait_on_operation_queues` ids.
std::vector<int64_t> WaitOnOperationQueues(const nlohmann::json& config);
// `force_earliest_schedule`.
bool ForceEarliestSchedule(const nlohmann::json& config);

// Group size N of a collective (from replica_groups, else the module's partitions/replicas).
int64_t CollectiveGroupSize(const HloInstruction& instr, int64_t num_partitions,
                            int64_t replica_count);
// Cost of one instruction (not structural ones: those are classified kStructural, us = 0).
InstrCost CostOf(const HloInstruction& instr, const SystemSpec& s, int64_t num_partitions,
                 int64_t replica_count);

}  // namespace weave::sim::internal
