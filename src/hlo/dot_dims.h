// Dimension arithmetic of `dot` (XLA DotDimensionNumbers).
//
// XLA's dot output lays out its dims as: the batch dims (in lhs_batch order), then the lhs free
// dims, then the rhs free dims, each group in increasing operand-dim order (XLA's
// ShapeInference::InferDotOpShape). A "free" dim is one that is neither batch nor contracting
// (XLA: non-contracting, non-batch). These helpers are pure index arithmetic: they do not verify
// the dot (the verifier does) and return -1 rather than failing on a dim they cannot map.
#ifndef WEAVE_HLO_DOT_DIMS_H_
#define WEAVE_HLO_DOT_DIMS_H_

#include <cstdint>
#include <vector>

#include "hlo/ir.h"

namespace weave {

// The free dims of an operand of rank `rank` with these batch and contracting dims, ascending.
std::vector<int64_t> DotFreeDims(int64_t rank, const std::vector<int64_t>& batch,
                                 const std::vector<int64_t>& contracting);

// The free dims of `dot`'s operand `side` (0 = lhs, 1 = rhs), ascending. `dot` is a dot (or
// ragged-dot) with at least side+1 operands.
std::vector<int64_t> DotFreeDims(const HloInstruction* dot, int side);

// The output dim of `dot` that holds operand `side`'s free dim `dim`; -1 when `dim` is a batch or
// contracting dim, or out of range.
int64_t DotOutputDimOfFree(const HloInstruction* dot, int side, int64_t dim);

// The dim of operand `side` that output dim `out_dim` of `dot` comes from: a batch dim of that
// operand for out_dim < #batch, else one of its free dims; -1 when out_dim belongs to the other
// operand's free dims or is out of range.
int64_t DotOperandDimOf(const HloInstruction* dot, int side, int64_t out_dim);

// The result shape of a dot of `lhs` and `rhs` with dot dims `dd` and element type `t`, as XLA's
// ShapeInference::InferDotOpShape lays it out: the lhs batch dims (in lhs_batch order), the lhs
// free dims, then the rhs free dims; each result dim keeps its operand dim's dynamic bound. The
// default descending layout. Dims in `dd` must be within the operands' ranks.
Shape DotResultShape(const Shape& lhs, const Shape& rhs, const DotDims& dd, PrimitiveType t);

// The result dims of a ragged-dot of `lhs` and `rhs` with dot dims `dd` (XLA's
// ShapeInference::InferRaggedDotOpShape): `num_groups` first when the lhs ragged dim is a
// contracting dim (`ragged_contracting`), then the batch dims, the lhs free dims and the rhs free
// dims other than `rhs_group_dims`. Dims in `dd` must be within the operands' ranks.
std::vector<int64_t> RaggedDotResultDims(const Shape& lhs, const Shape& rhs, const DotDims& dd,
                                         bool ragged_contracting, int64_t num_groups,
                                         const std::vector<int64_t>& rhs_group_dims);

}  // namespace weave

#endif  // WEAVE_HLO_DOT_DIMS_H_
