#include "hlo/dot_dims.h"

#include <algorithm>

namespace weave {
namespace {

bool Holds(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<int64_t> DotFreeDims(int64_t rank, const std::vector<int64_t>& batch,
                                 const std::vector<int64_t>& contracting) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Holds(batch, d) && !Holds(contracting, d)) out.push_back(d);
  }
  return out;
}

Shape DotResultShape(const Shape& lhs, const Shape& rhs, const DotDims& dd, PrimitiveType t) {
  std::vector<int64_t> dims;
  std::vector<bool> dynamic;
  auto take = [&](const Shape& operand, int64_t d) {
    dims.push_back(operand.dims[static_cast<size_t>(d)]);
    dynamic.push_back(!operand.dynamic.empty() && operand.dynamic[static_cast<size_t>(d)]);
  };
  for (int64_t d : dd.lhs_batch) take(lhs, d);
  for (int64_t d : DotFreeDims(lhs.rank(), dd.lhs_batch, dd.lhs_contracting)) take(lhs, d);
  for (int64_t d : DotFreeDims(rhs.rank(), dd.rhs_batch, dd.rhs_contracting)) take(rhs, d);
  Shape out(t, std::move(dims));
  if (std::find(dynamic.begin(), dynamic.end(), true) != dynamic.end()) out.dynamic = dynamic;
  return out;
}

std::vector<int64_t> DotFreeDims(const HloInstruction* dot, int side) {
  const DotDims& dd = dot->dot_dims();
  return DotFreeDims(dot->operand(side)->shape().rank(), side == 0 ? dd.lhs_batch : dd.rhs_batch,
                     side == 0 ? dd.lhs_contracting : dd.rhs_contracting);
}

int64_t DotOutputDimOfFree(const HloInstruction* dot, int side, int64_t dim) {
  const std::vector<int64_t> mine = DotFreeDims(dot, side);
  auto it = std::find(mine.begin(), mine.end(), dim);
  if (it == mine.end()) return -1;
  const int64_t lhs_free = side == 0 ? 0 : static_cast<int64_t>(DotFreeDims(dot, 0).size());
  return static_cast<int64_t>(dot->dot_dims().lhs_batch.size()) + lhs_free + (it - mine.begin());
}

int64_t DotOperandDimOf(const HloInstruction* dot, int side, int64_t out_dim) {
  const DotDims& dd = dot->dot_dims();
  const std::vector<int64_t>& batch = side == 0 ? dd.lhs_batch : dd.rhs_batch;
  const int64_t nb = static_cast<int64_t>(batch.size());
  if (out_dim < 0) return -1;
  if (out_dim < nb) return batch[static_cast<size_t>(out_dim)];
  const std::vector<int64_t> lf = DotFreeDims(dot, 0);
  int64_t pos = out_dim - nb;
  if (side == 0) return pos < static_cast<int64_t>(lf.size()) ? lf[static_cast<size_t>(pos)] : -1;
  const std::vector<int64_t> rf = DotFreeDims(dot, 1);
  pos -= static_cast<int64_t>(lf.size());
  return pos >= 0 && pos < static_cast<int64_t>(rf.size()) ? rf[static_cast<size_t>(pos)] : -1;
}

std::vector<int64_t> RaggedDotResultDims(const Shape& lhs, const Shape& rhs, const DotDims& dd,
                                         bool ragged_contracting, int64_t num_groups,
                                         const std::vector<int64_t>& rhs_group_dims) {
  std::vector<int64_t> dims;
  if (ragged_contracting) dims.push_back(num_groups);
  for (int64_t d : dd.lhs_batch) dims.push_back(lhs.dims[static_cast<size_t>(d)]);
  for (int64_t d : DotFreeDims(lhs.rank(), dd.lhs_batch, dd.lhs_contracting)) {
    dims.push_back(lhs.dims[static_cast<size_t>(d)]);
  }
  for (int64_t d : DotFreeDims(rhs.rank(), dd.rhs_batch, dd.rhs_contracting)) {
    if (std::find(rhs_group_dims.begin(), rhs_group_dims.end(), d) == rhs_group_dims.end()) {
      dims.push_back(rhs.dims[static_cast<size_t>(d)]);
    }
  }
  return dims;
}

}  // namespace weave
