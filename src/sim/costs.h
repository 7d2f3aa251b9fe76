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

struct InstrCost {
  CostKind kind = CostKind::kFree;
  double us = 0;      // time at full speed, microseconds
  double flops = 0;   // GEMMs
  double bytes = 0;   // memory ops: bytes read + written; collectives: bytes counted
  int64_t group = 0;  // collectives: N
  bool fp8 = false;   // GEMMs with FP8 operands
};

// The backend_config JSON of an instruction (a discarded value when absent or not JSON).
nlohmann::json BackendConfig(const HloInstruction& instr);
// `operation_queue_id` (0 = the main stream).
int64_t OperationQueueId(const nlohmann::json& config);
// `wait_on_operation_queues` ids.
std::vector<int64_t> WaitOnOperationQueues(const nlohmann::json& config);
// `force_earliest_schedule`.
bool ForceEarliestSchedule(const nlohmann::json& config);

// True for cuBLAS GEMM custom-call targets.
bool IsGemmCustomCall(const HloInstruction& instr);
// Group size N of a collective (from replica_groups, else the module's partitions/replicas).
int64_t CollectiveGroupSize(const HloInstruction& instr, int64_t num_partitions,
                            int64_t replica_count);
// Cost of one instruction (not structural ones: those are classified kStructural, us = 0).
InstrCost CostOf(const HloInstruction& instr, const SystemSpec& s, int64_t num_partitions,
                 int64_t replica_count);

}  // namespace weave::sim::internal
