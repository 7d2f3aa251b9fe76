// "windowed-einsum-consumers-in-ring": every consumer of an all-gather loop's activation cache
// computes inside the ring, as PyTorch's async tensor parallelism does, instead of after the loop
// from the cache, as XLA does (../shared/specs/performance-model.md, the Llama3-70B Q/K/V example:
// Q, K and V are communication-bound, so K's and V's GEMMs hide transfers only inside the ring).
//
// Input: the windowed-einsum-handler's output. An all-gather loop with an activation cache
// (MatchWindowedLoop's cache_index) fills the cache in its body with one dynamic-update-slice per
// ring step, `cache' = dynamic-update-slice(cache, shard_s, offsets_s)`; after the loop, dots
// read the cache (or a dequantization of an FP8 cache, `multiply(convert(cache), broadcast(s))`).
// For each such dot C = dot(cache, w) whose cached dim is a free (non-contracting, non-batch) dim
// of the cache operand, the pass
//  - appends w (its FP8 value and scale when w is a scalar-scale dequantization, dequantized in
//    the body), the cache's dequantization scale (FP8 caches) and an output buffer of C's shape
//    (XLA's AllocateBuffer: the body writes every block) to the loop state;
//  - in the body, next to every cache update, adds `part_s = dot(dequant(shard_s), w)` with C's
//    dimension numbers (its own operation_queue_id, as the handler gives the loop's dots) and
//    `out' = dynamic-update-slice(out, part_s, ...)` at the step's offset on C's output dim;
//  - replaces C by the loop's output element. The cache, once unread, is left for
//    while-loop-dead-tuple-elements.
// Each step then computes every consumer's partial dot: the loop's GEMM time per step grows from
// the first consumer's to all of them, which hides more of the ring.
//
// Which one pays depends on the shapes (per step, the consumers' GEMMs against one transfer), so
// the option `windowed-einsum-consumers-in-ring` is
//   auto (default): ask the cost gate (passes/cost_oracle.h) per loop: "the cache (consumers
//        after the loop)" against "every consumer in the ring"; without a gate (weave opt,
//        --cost-gate=off) leave the consumers after the loop, as XLA does;
//   true: move them; false: never.
// Loops without a cache, caches without dot consumers, consumers reading the cache on a
// contracting or batch dim are left alone with a remark. Errors only on an inconsistent module.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {

class WindowedEinsumConsumersInRing : public HloPass {
 public:
  static constexpr std::string_view kName = "windowed-einsum-consumers-in-ring";
  static constexpr std::string_view kOption = "windowed-einsum-consumers-in-ring";
  enum class Mode { kAuto, kAlways, kNever };

  explicit WindowedEinsumConsumersInRing(Mode mode = Mode::kAuto,
                                         XlaBackendConfigVersion version =
                                             kDefaultXlaBackendConfig)
      : mode_(mode), version_(version) {}
  std::string_view name() const override { return kName; }
  absl::StatusOr<bool> Run(HloModule* module) override;

 private:
  Mode mode_;
  XlaBackendConfigVersion version_;
};

}  // namespace weave
