// collective-quantizer: moves an FP8 dequantization past a collective so that the collective
// carries FP8 (XLA's CollectiveQuantizer, dequantization direction; see
// ../shared/specs/fp8-gemm-rewrite.md §1 "Collectives are not on the list").
//
//   collective(u_k(...u_1(dequant(q, s))))  ->  dequant(collective(u_k(...u_1(q))), s)
//
// for collective in {all-gather, all-to-all (one array operand), collective-permute}, where each
// u_i is bitcast (element type unchanged), copy, reshape or slice, q is f8e4m3fn/f8e5m2, s is a
// scalar of the wide type, and s is proven the same on every partition
// (analysis/replication.h IsSameOnAllPartitions) — otherwise each member of a group would
// dequantize another member's data with its own scale. The re-created ops and the collective keep
// every attribute (channel_id, replica_groups, dimensions, source_target_pairs, ...) and only
// change their element type to FP8. The exchange is then exact: the result equals the original
// bit for bit (the dequantization is elementwise and the moved ops only move data).
// Every collective whose operand derives from FP8 gets a remark (applied, or why not).
#pragma once

#include <string_view>

#include "passes/pass.h"

namespace weave {

class CollectiveQuantizer : public HloPass {
 public:
  std::string_view name() const override { return "collective-quantizer"; }
  // Rewrites every matching collective in every computation; returns whether anything changed.
  absl::StatusOr<bool> Run(HloModule* module) override;
};

}  // namespace weave
