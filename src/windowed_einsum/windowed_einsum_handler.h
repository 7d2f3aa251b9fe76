// The windowed einsum handler ("windowed-einsum-handler"): prepares the windowed einsum loops of a
// partitioned module for compute/communication overlap and FP8 GEMMs, in the role of XLA's GPU
// `WindowedEinsumHandler` (../shared/specs/windowed-einsum-handler.md), extended to rolled loops
// and with a proof that FP8 scales agree across the ring.
//
// For every `while` that MatchWindowedLoop (windowed_einsum/windowed_loop.h) recognises, in this order:
//  1. FP8 shift (§2): `tuple(dequant(qa, sa), dequant(qb, sb), ...) -> while` becomes
//     `tuple(qa, qb, ..., sa, sb) -> while`; the ring carries FP8, every other reader of an FP8
//     value inside the body (dot, dynamic-slice, ...) reads a fresh `dequant(value, gte(scale))`,
//     and users of the while's elements 0/1 get a dequantization after the loop. Conditions: init
//     tuple used only by the while; both operands dequantizations of f8e4m3fn/f8e5m2 (not both
//     f8e5m2); wide type bf16/f16/f32; scalar scales; each scale proven the same on all partitions
//     (analysis/replication.h).
//  2. Activation cache (§3, all-gather loops): every `all-gather` in the loop's computation that
//     gathers the loop's windowed operand (or a dequantization of its FP8 value) along the dim the
//     ring visits, in the ring's block order (checked by simulating the ring on every partition),
//     is replaced by a cache element appended to the loop state: a zero broadcast of the gathered
//     shape in the windowed element type, filled in the body with one dynamic-update-slice per dot
//     at that dot's block offset; FP8 caches are dequantized after the loop. One cache per loop,
//     shared by every consumer. A loop that circulates FP8 may instead keep a *wide* cache
//     (option `windowed-einsum-cache-type`): each shard is dequantized in the body as it arrives
//     (with the scale the all-gathers' dequantizations share, carried in the loop state) and
//     stored in the wide type, and the readers take the cache as it is. That costs a
//     dequantization per step inside the ring and twice the cache bytes, and saves one
//     dequantization of the whole cache after the loop per reader; a reader that could be an
//     FP8 GEMM (its other operand FP8) loses that. `auto` (the default) asks the cost gate
//     (passes/cost_oracle.h) per loop, both variants estimated; without a gate, or when a wide
//     cache cannot serve every all-gather (one reads the FP8 value itself, or their
//     dequantizations differ), the cache is FP8, as XLA's handler keeps it.
//  3. Full unrolling (§5, option `windowed-einsum-unroll`, default true): the body is repeated
//     trip-count times, the counter folded to constants, guarded permutes resolved, the while runs
//     once and gets the frontend attribute skip-simplify-while-loops_trip-count-one="true" and
//     backend_config known_trip_count 1; loop-carried values nobody reads after the loop become
//     pass-through, so the dead last transfer disappears (N-1 permutes for an N-block ring).
//  4. Streams (§4): every dot of the body gets a module-unique `operation_queue_id` > 0 (with the
//     2024/2025 schema its merging user, dynamic-update-slice or add, also waits on it in
//     `wait_on_operation_queues`, a field XLA removed in 2026), and each
//     collective-permute whose operand comes straight from the loop state (ring-only) gets
//     `force_earliest_schedule: true`. Other backend_config fields are kept.
// Every while and every all-gather gets a remark. The pass is idempotent.
// Implementation: the driver in windowed_einsum_handler.cc, one file per step
// (windowed_einsum_handler_{fp8_shift,cache,unroll,streams}.cc); see
// windowed_einsum_handler_internal.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {

class WindowedEinsumHandler : public HloPass {
 public:
  static constexpr std::string_view kName = "windowed-einsum-handler";
  // Option keys (PassOptions / CLI `--windowed-einsum-unroll=false`).
  static constexpr std::string_view kUnrollOption = "windowed-einsum-unroll";
  // `windowed-einsum-cache-type=auto|fp8|wide` (step 2; default auto).
  static constexpr std::string_view kCacheTypeOption = "windowed-einsum-cache-type";
  enum class CacheType { kAuto, kFp8, kWide };

  // `backend_config`: the XLA version whose GpuBackendConfig schema the stream fields are
  // written in (passes/gpu_backend_config.h; option `xla-backend-config`, default 2026).
  // `cache_type`: the cache of a loop that circulates FP8 (step 2; kAuto: the cost gate's
  // choice, FP8 without a gate).
  explicit WindowedEinsumHandler(bool unroll = true,
                                 XlaBackendConfigVersion backend_config = kDefaultXlaBackendConfig,
                                 CacheType cache_type = CacheType::kAuto)
      : unroll_(unroll), backend_config_(backend_config), cache_type_(cache_type) {}
  std::string_view name() const override { return kName; }
  // Returns whether the module changed. Errors only on internal inconsistencies (the module is
  // then partly rewritten).
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  bool unroll_;
  XlaBackendConfigVersion backend_config_;
  CacheType cache_type_;
};

}  // namespace weave
