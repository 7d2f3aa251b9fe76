// all-to-all-windowed-einsum: overlaps an `all-to-all` with the dot it feeds or follows by
// splitting both into C chunks along the contraction, each chunk's exchange hidden behind another
// chunk's partial dot on its own compute stream (the all-to-all part of XLA's GPU
// WindowedEinsumHandler, `xla_gpu_experimental_enable_alltoall_windowed_einsum`;
// ../shared/specs/all-to-all-windowed-einsum.md). Expert-parallel (MoE) layers exchange tokens
// with an all-to-all right before and after the expert matmuls; this is the windowed einsum of
// that exchange.
//
// A qualifying all-to-all T has one array operand, no layout constraint, an explicit replica
// group list whose groups all have the same size G >= 2, and a split dimension (`dimensions={s}`).
//
// Rewrite A (exchange -> dot):
//
//   T = all-to-all(Y0), s          Yc_i = slice(Y, cl, [i*c, (i+1)*c))    (Y = chain(Y0))
//   X = chain(T)           ==>     A_i  = all-to-all(Yc_i), s'            (fresh channel)
//   D = dot(X, R)                  P_i  = dot(A_i, slice(R, cr, [i*c, (i+1)*c))), queue q0+i
//                                  D'   = add(P_{C-1}, ... add(P_0, broadcast(0)))
//
// where chain is zero or more single-user transpose / reshape / copy ops (moved before the
// exchange: they commute with it when they keep the split dim whole), s' is the split dim tracked
// through the chain, cl / cr the dot's contracting dims on the exchanged / other side, K their
// extent and c = K / C. The exchanged operand may be either side of the dot (XLA: lhs only).
// Refused (remark) when s' == cl: chunking the exchanged dim along the contraction pairs blocks
// of different partitions, so the result would be wrong (XLA does not check this).
// The walk from T to D may also pass element-wise steps that only involve scalars (convert, and
// multiply/divide by a broadcast rank-0 value: the dequantization of an exchange that already
// carries FP8); they commute with slicing and exchanging, so they are re-applied to each chunk
// after its all-to-all (the layout ops still move before the exchange, re-created in T's type).
// FP8: when Y is dequant(q, scale) (analysis/dequantize.h), reached through layout ops, with a
// scalar scale proven the same within each of T's groups (analysis/replication.h
// ProveSameWithinGroups), each chunk exchanges the FP8 slice of q (the
// layout ops re-created in FP8) and is dequantized after its all-to-all, so the chunks travel in
// FP8 and each partial dot reads dequant(fp8) operands: the fp8-gemm-rewriter turns them into
// FP8 GEMM custom calls.
//
// Rewrite B (dot -> exchange):
//
//   M = dot(L, R)                  P_i = dot(slice(L, lc, ..), slice(R, rc, ..)), queue q0+i
//   X = chain(M)           ==>     A_i = all-to-all(P_i), s'      (full output shape each)
//   T = all-to-all(X), s           X'  = chain(add(A_{C-1}, ... add(A_0, broadcast(0))))
//
// with M single-user and the chain walked from T up to M (s' tracked backwards). Valid for any
// split dim (the all-to-all is linear and the contracting dims are not in the output); every
// partial exchange carries the full output, so the bytes on the wire are C times the original.
//
// Decisions, per candidate all-to-all (every all-to-all gets one remark, located at it):
//  - `xla_gpu_experimental_enable_alltoall_windowed_einsum=true` forces every valid candidate
//    with C = G as XLA does (B before A for an all-to-all between two dots, as XLA's visitor
//    order gives); `=false` disables the pass.
//  - `all-to-all-windowed-einsum-chunks=C` forces every valid candidate with C chunks.
//  - Otherwise the cost gate decides (passes/cost_oracle.h; `weave compile` sets the simulator on
//    `--system`, default h100x8): one query per all-to-all whose variants are "without" and, for
//    A and for B where they apply, every chunk count C in [2, max-chunks] dividing K; the
//    fastest is applied, nothing when "without" is fastest; the remark gives the estimates.
//    Without a cost gate (`weave opt`, `--cost-gate=off`) every valid candidate is rewritten with
//    C = G, as XLA with its flag; that is also the fallback when the gate has no estimate.
// Partial dots get `operation_queue_id` q0+i (q0 = the larger of the module's next free channel
// id, as XLA, and the next unused queue id), written by the shared GpuBackendConfigEditor
// (passes/gpu_backend_config.h) in the schema `xla-backend-config` selects (2026 default: no
// `wait_on_operation_queues`; 2024/2025 add an empty list).
// New slices, all-to-alls and adds take T's metadata; the final add takes the name of the value it
// replaces (D for A, T for B without a chain).
//
// Options (PassOptions keys):
//   xla_gpu_experimental_enable_alltoall_windowed_einsum (bool, default unset)
//   all-to-all-windowed-einsum-chunks (int >= 2, default 0 = cost model / G)
//   all-to-all-windowed-einsum-max-chunks (int >= 2, default 32): largest C the model tries
//   all-to-all-windowed-einsum-rewrite (A | B | any, default any): which rewrites may apply
//   xla-backend-config (2024 | 2025 | 2026, default 2026)
//   all-to-all-windowed-einsum-unsafe-split-contracting (bool, default false): TESTS ONLY; lets A
//     chunk along the split dim so that a test can show `weave compare` failing on it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {

struct AllToAllWindowedEinsumOptions {
  std::optional<bool> xla_enable;   // xla_gpu_experimental_enable_alltoall_windowed_einsum
  int64_t chunks = 0;               // all-to-all-windowed-einsum-chunks (0: model, or G if forced)
  int64_t max_chunks = 32;          // all-to-all-windowed-einsum-max-chunks
  XlaBackendConfigVersion schema = kDefaultXlaBackendConfig;  // xla-backend-config
  bool unsafe_split_contracting = false;  // tests only (see the file comment)
  bool allow_a = true, allow_b = true;    // all-to-all-windowed-einsum-rewrite
};

// Reads the options above; InvalidArgument naming the option on a bad value.
absl::StatusOr<AllToAllWindowedEinsumOptions> ParseAllToAllWindowedEinsumOptions(
    const PassOptions& options);

class AllToAllWindowedEinsum : public HloPass {
 public:
  static constexpr std::string_view kName = "all-to-all-windowed-einsum";
  explicit AllToAllWindowedEinsum(AllToAllWindowedEinsumOptions options = {})
      : options_(options) {}
  std::string_view name() const override { return kName; }
  const AllToAllWindowedEinsumOptions& options() const { return options_; }
  // Rewrites the candidates of every computation (see the file comment). Returns whether the
  // module changed. Errors only on an inconsistent IR; unsupported cases are remarks.
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  AllToAllWindowedEinsumOptions options_;
};

// Dimension of `to` that a reshape from `from` leaves intact when it keeps dimension `dim` of
// `from` whole (same extent, not merged with or split into other non-degenerate dims, as XLA's
// ShapeUtil::DimensionsUnmodifiedByReshape); nullopt if the reshape changes it.
std::optional<int64_t> DimKeptByReshape(const Shape& from, const Shape& to, int64_t dim);

}  // namespace weave
