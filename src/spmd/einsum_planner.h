// The SPMD dot handler's decision procedure over an einsum's iteration space, shared by the dot
// (partition_dot.cc) and the convolution (partition_convolution.cc) handlers, as XLA's
// convolution handler reuses its dot handler for convolutions that are einsums
// (xla/service/spmd/dot_handler.cc PartitionDot, dot_as_convolution_util.h).
//
// The iteration space has nb batch dims (in lhs, rhs and output), nl lhs non-contracting dims
// (lhs and output), nr rhs non-contracting dims (rhs and output) and nc contracting dims (lhs and
// rhs), in that order. Each of lhs, rhs and output maps its own dims to space dims (-1: a dim
// outside the space, which the decision never tiles: the operand is resharded to replicated
// along it). The decision is one sharding X of the space; each operand and the output are asked
// for X projected through their maps, and the devices that differ on a tiled contracting dim
// hold partial sums (the caller all-reduces them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hlo/ir.h"
#include "spmd/sharding.h"

namespace weave::spmd {

struct EinsumSpace {
  int64_t nb = 0, nl = 0, nr = 0, nc = 0;
  std::vector<int64_t> lhs_map, rhs_map, out_map;  // operand/output dim -> space dim (-1: none)
  int64_t rank() const { return nb + nl + nr + nc; }
  bool IsC(int64_t d) const { return d >= nb + nl + nr; }
};

// A dot's space: its batch, non-contracting and contracting dims in dimension-number order.
EinsumSpace DotSpace(const HloInstruction& dot);
// The same from dimension numbers and the operand ranks (a block-scaled dot's custom call has
// no dot_dims of its own).
EinsumSpace DotSpaceOf(const DotDims& dd, int64_t lhs_rank, int64_t rhs_rank);

// The decision for one einsum form: `best` (nullopt when no sharding of the space is consistent)
// and its projections; `steps` name the handler steps taken, for the remark.
struct EinsumDecision {
  std::optional<Sharding> best;
  Sharding lhs_target, rhs_target, output_target;
  std::vector<std::string> steps;
};

// Runs the handler order (spec §4; partition_dot.cc's comment) over `sp` for operands of global
// shapes `lhs`, `rhs` (current physical shardings `ls`, `rs`: tiled or replicated, no manual or
// unreduced subgroup) and an output of global shape `out` with target `os`, on partitions
// 0..n-1. Pure: builds nothing. Cost: the steps' few candidate shardings, each O(n * rank).
// X, a sharding of a space, projected onto a value whose dims map to space dims through `map`
// (-1: untiled), on partitions 0..n-1 (how PlanEinsum asks each operand for its sharding).
Sharding ProjectSpace(const Sharding& x, const std::vector<int64_t>& map, int64_t n);

EinsumDecision PlanEinsum(const EinsumSpace& sp, const Shape& lhs, const Shape& rhs,
                          const Shape& out, const Sharding& ls, const Sharding& rs,
                          const Sharding& os, int64_t n);

}  // namespace weave::spmd
