// Index-parallel dims of gathers and scatters (see gather_scatter_parallel.h).
#include "spmd/gather_scatter_parallel.h"

#include <algorithm>

namespace weave::spmd {
namespace {

// Whether every position along a dim of `size` fits the signed index type `t`.
bool FitsIndexType(int64_t size, PrimitiveType t) {
  const int bits = BitWidth(t);
  return bits >= 63 || size - 1 <= (int64_t{1} << (bits - 1)) - 1;
}

}  // namespace

std::optional<int64_t> IotaDim(const HloInstruction* x) {
  while (x->opcode() == HloOpcode::kCopy) x = x->operand(0);
  if (!x->shape().IsArray() || !IsSignedInteger(x->shape().element_type)) return std::nullopt;
  if (x->opcode() == HloOpcode::kIota) {
    const int64_t d = x->iota_dimension;
    if (d < 0 || d >= x->shape().rank() ||
        !FitsIndexType(x->shape().dims[static_cast<size_t>(d)], x->shape().element_type)) {
      return std::nullopt;
    }
    return d;
  }
  if (x->opcode() == HloOpcode::kBroadcast) {
    std::optional<int64_t> d = IotaDim(x->operand(0));
    if (!d || *d >= static_cast<int64_t>(x->dimensions.size())) return std::nullopt;
    const int64_t out = x->dimensions[static_cast<size_t>(*d)];
    // A size-1 iota dim stretched by the broadcast holds zeros, not positions.
    if (out < 0 || out >= x->shape().rank() ||
        x->operand(0)->shape().dims[static_cast<size_t>(*d)] != x->shape().dims[static_cast<size_t>(out)]) {
      return std::nullopt;
    }
    return out;
  }
  if (x->opcode() == HloOpcode::kConstant && x->literal && IsSignedInteger(x->shape().element_type) &&
      x->shape().IsArray() && x->shape().ElementCount() <= (int64_t{1} << 20)) {
    const std::vector<int64_t>& dims = x->shape().dims;
    const int64_t count = x->shape().ElementCount();
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] < 2) continue;
      int64_t stride = 1;
      for (size_t e = d + 1; e < dims.size(); ++e) stride *= dims[e];
      bool iota = true;
      for (int64_t k = 0; k < count && iota; ++k) iota = x->literal->GetAsInt(k) == (k / stride) % dims[d];
      if (iota) return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

std::vector<ParallelDim> ParallelDims(const HloInstruction& h, const GatherScatterDims& g) {
  std::vector<ParallelDim> out;
  for (size_t k = 0; k < g.operand_batching.size() && k < g.indices_batching.size(); ++k) {
    out.push_back({g.operand_batching[k], g.indices_batching[k], false});
  }
  const HloInstruction* idx = h.operand(GatherScatterIndicesOperand(h));
  const Shape& og = h.operand(0)->shape();
  const Shape& ig = idx->shape();
  if (!IsSignedInteger(ig.element_type)) return out;
  while (idx->opcode() == HloOpcode::kCopy) idx = idx->operand(0);
  const int64_t ivd = g.index_vector_dim, rank = ig.rank();
  std::vector<int64_t> comp(g.start_index_map.size(), -1);  // component -> its iota dim
  if (idx->opcode() == HloOpcode::kConcatenate && ivd < rank && idx->dimensions.size() == 1 &&
      idx->dimensions[0] == ivd) {
    size_t c = 0;
    for (const HloInstruction* piece : idx->operands()) {
      const int64_t k = piece->shape().dims[static_cast<size_t>(ivd)];
      std::optional<int64_t> d = IotaDim(piece);
      for (int64_t j = 0; j < k && c < comp.size(); ++j, ++c) {
        if (d && *d != ivd) comp[c] = *d;
      }
    }
  } else if (std::optional<int64_t> d = IotaDim(idx); d && *d != ivd) {
    std::fill(comp.begin(), comp.end(), *d);
  }
  const std::vector<ParallelDim> explicit_only = out;
  for (size_t j = 0; j < comp.size(); ++j) {
    const int64_t i = comp[j], o = g.start_index_map[j];
    if (i < 0 || g.slice_sizes[static_cast<size_t>(o)] != 1 ||
        std::find(g.indices_batching.begin(), g.indices_batching.end(), i) != g.indices_batching.end()) {
      continue;
    }
    if (og.dims[static_cast<size_t>(o)] != ig.dims[static_cast<size_t>(i)]) return explicit_only;
    for (const ParallelDim& p : out) {
      if (p.indices_dim == i || p.operand_dim == o) return explicit_only;
    }
    out.push_back({o, i, true});
  }
  return out;
}

bool IsParallelOperandDim(const std::vector<ParallelDim>& par, int64_t d) {
  return std::any_of(par.begin(), par.end(), [&](const ParallelDim& p) { return p.operand_dim == d; });
}

bool AlignParallelDimsOnly(const std::vector<ParallelDim>& par, const Shape& og, const Shape& ig,
                           int64_t ivd, Sharding* osh, const Sharding& ish, Sharding* idx) {
  if (par.empty()) return false;
  std::vector<int64_t> o2i(static_cast<size_t>(og.rank()), -1), i2o(static_cast<size_t>(ig.rank()), -1);
  bool op_tiles = false, ix_tiles = false;
  for (const ParallelDim& p : par) {
    o2i[static_cast<size_t>(p.operand_dim)] = p.indices_dim;
    i2o[static_cast<size_t>(p.indices_dim)] = p.operand_dim;
    op_tiles |= osh->IsTiled() && osh->tile(p.operand_dim) > 1;
    ix_tiles |= ish.IsTiled() && ish.tile(p.indices_dim) > 1;
  }
  // The indices' own tiling (index_vector_dim untiled) where it already matches the operand's on
  // every parallel dim: kept, so its other batch dims stay tiled (index pass-through, merged with
  // the parallel dims as XLA merges them).
  if (op_tiles && ish.IsTiled() && ish.rank() == ig.rank() &&
      (ivd >= ig.rank() || ish.tile(ivd) == 1)) {
    bool aligned = true;
    for (const ParallelDim& p : par) {
      aligned &= osh->tile(p.operand_dim) == ish.tile(p.indices_dim);
    }
    const int64_t n = static_cast<int64_t>(ish.devices().size());
    for (int64_t dev = 0; dev < n && aligned; ++dev) {
      std::optional<std::vector<int64_t>> a = osh->TileIndex(dev, og.rank());
      std::optional<std::vector<int64_t>> b = ish.TileIndex(dev, ig.rank());
      if (!a || !b) {
        aligned = false;
        break;
      }
      for (const ParallelDim& p : par) {
        aligned &= (*a)[static_cast<size_t>(p.operand_dim)] == (*b)[static_cast<size_t>(p.indices_dim)];
      }
    }
    if (aligned) {
      *idx = ish;
      return true;
    }
  }
  if (op_tiles) {
    std::optional<Sharding> m = MapShardingDims(*osh, o2i, ig.rank());
    if (!m) return false;
    *idx = *std::move(m);
    return true;
  }
  if (ix_tiles) {
    std::optional<Sharding> m = MapShardingDims(ish, i2o, og.rank());
    if (!m) return false;
    std::optional<Sharding> back = MapShardingDims(*m, o2i, ig.rank());
    if (!back) return false;
    *osh = *std::move(m);
    *idx = *std::move(back);
    return true;
  }
  return false;
}

}  // namespace weave::spmd
