// Calibration of the performance model against published measurements: the rows C1-C5 of
// ../shared/specs/performance-model.md ("Calibration rows"), each rebuilt as partitioned HLO
// modules and simulated. `weave simulate --calibration` prints the table; the unit test
// tests/unit/sim/calibration_test.cc requires every row within 15% on the speedup and within 10%
// on the non-overlapped time; tests/calibration/*.hlo are the modules (written by
// `weave simulate --calibration --write-modules DIR`, checked identical to these generators).
//
// Each row's modules follow the structure of the implementation that was measured:
//  - the non-overlapped ("base") module is the collective, then the GEMM(s), as written by a
//    partitioned program (XLA's all-gather + dot, dot + reduce-scatter): NCCL then cuBLAS;
//  - the overlapped module is the ring decomposition written out step by step: N-1 transfers of
//    one shard (all-gather: shards travel; reduce-scatter: the accumulator of one block travels
//    and each rank adds its partial product), a partial GEMM per step and per consumer.
//    Flux (C1, C2) fuses each step into one kernel with the communication; it is modelled with
//    one compute stream per step so that steps fill each other's waves. PyTorch's async TP
//    (C3-C5) runs the partial GEMMs one after the other on one stream while copy engines move the
//    shards: one compute stream, collective_engine=copy_engine.
// Whole-model rows (C4, C5: Llama3 forwards) include attention and other work that TP overlap
// does not touch: the model's saving over the layer's four TP matmuls (Q/K/V all-gather, output
// projection reduce-scatter, gate/up all-gather, down projection reduce-scatter) times the layer
// count is compared with the published saving (base - overlapped); the predicted speedup is
// base / (base - predicted saving), and the non-overlapped time is not predicted (the forward's
// other work is not modelled).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/types.h"
#include "sim/simulator.h"

namespace weave::sim {

// One TP matmul and its collective, per partition of a ring of `ring` partitions.
struct TpMatmul {
  enum class Kind { kAllGather, kReduceScatter };
  Kind kind = Kind::kAllGather;
  std::string name;            // module name, e.g. "c1_ag_gemm"
  int64_t ring = 8;            // N
  int64_t rows = 0;            // M: rows gathered (AG) or scattered (RS), global
  int64_t contracting = 0;     // K per partition (AG: the full K; RS: the local shard of K)
  std::vector<int64_t> cols;   // local output columns of each dot (AG: every consumer of the
                               // gathered activation; RS: one dot)
  PrimitiveType type = PrimitiveType::BF16;
};

// The collective then the GEMM(s): `all-gather` + dots, or dot + `reduce-scatter`.
std::string TpMatmulBaseModule(const TpMatmul& m);
// The ring decomposition written out step by step (see the file comment). `streams`: one compute
// stream per step and dot (operation_queue_id) instead of one stream for every partial GEMM.
std::string TpMatmulDecomposedModule(const TpMatmul& m, bool streams);

struct CalibrationRow {
  std::string id;           // "C1", "C4 b=12"
  std::string source;       // the publication
  std::string hardware;     // as published
  std::string shape;        // as published
  std::string system;       // built-in system the row runs on
  std::vector<std::string> overrides;  // system overrides (--set form), e.g. the engine
  std::string implementation;          // what was measured, and how it is modelled
  bool streams = false;     // the decomposed module's streams (see TpMatmulDecomposedModule)
  std::vector<TpMatmul> segments;      // the TP matmuls (C4/C5: of one layer)
  int64_t layers = 0;       // whole-model rows: layer count (0 for kernel rows)
  double published_base_us = 0, published_overlapped_us = 0, published_speedup = 0;
};

// The rows C1-C5 (C4 and C5 one row per published batch size).
const std::vector<CalibrationRow>& CalibrationRows();

struct CalibrationResult {
  const CalibrationRow* row = nullptr;
  // Kernel rows: simulated base and decomposed modules. Whole-model rows: the model's saving
  // times the layers is subtracted from the published base.
  std::optional<double> predicted_base_us;  // none for whole-model rows
  double predicted_overlapped_us = 0;
  double predicted_speedup = 0;
  double speedup_ratio = 0;                 // predicted / published
  std::optional<double> base_ratio;         // predicted / published (kernel rows)
  double saving_per_layer_us = 0;           // whole-model rows
  // What Weave's own pipeline makes of the same module (decomposer, handler, ...; no gate):
  // its simulated time and speedup over the base module, on the row's system.
  double weave_us = 0;
  double weave_speedup = 0;
  // The same loop with its GEMMs of less than one wave on one stream, the slower of that and
  // weave_us (the cost gate's conservative bound, CostQuery::one_stream_bound), and its speedup.
  double weave_bound_us = 0;
  double weave_bound_speedup = 0;
};

// Simulates every row. Errors from the simulator or the passes.
absl::StatusOr<std::vector<CalibrationResult>> RunCalibration();
// The table `weave simulate --calibration` prints.
std::string CalibrationTable(const std::vector<CalibrationResult>& results);

}  // namespace weave::sim
