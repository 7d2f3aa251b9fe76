// sharding-propagation through XLA's block-scaling calls (hlo/block_scaled_call.h): a scale is
// sharded like its data (sharding_util.h FitScaleBlocks), and a block-scaled dot propagates as
// the dot it computes (contracting dim last, batch dim 0 at rank 3), the way XLA's partitioner
// reads it (custom_call_handler.cc builds the same stand-in dot).
#include "spmd/propagation_block_scaled.h"

#include <memory>

#include "hlo/builders.h"
#include "hlo/block_scaled_call.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

// A free-standing dot over the call's lhs and rhs (never added to a computation: no users).
std::unique_ptr<HloInstruction> StandInDot(const HloInstruction& h) {
  return CreateDot(h.operand(0), h.operand(1), BlockScaledDotDims(h.operand(0)->shape().rank()),
                   h.shape().element_type, h.shape().layout);
}

bool IsScaledDotOfRank23(const HloInstruction& h) {
  const int64_t r = h.operand_count() >= 3 ? h.operand(0)->shape().rank() : 0;
  return (r == 2 || r == 3) && h.operand(1)->shape().rank() == r && h.shape().IsArray();
}

}  // namespace

bool IsBlockScaledPropagated(const HloInstruction& h) {
  const BlockScaledKind k = BlockScaledKindOf(h);
  return k == BlockScaledKind::kQuantize || k == BlockScaledKind::kDequantize || k == BlockScaledKind::kDot;
}

std::optional<Sharding> BlockScaledForward(const HloInstruction& h, const ShardingOf& get,
                                           const DotForwardFn& dot_forward) {
  switch (BlockScaledKindOf(h)) {
    case BlockScaledKind::kQuantize: {
      const Shape& out = h.shape();
      const Sharding& s = get(h.operand(0));
      if (s.IsUnset() || s.IsUnknown() || !out.IsTuple() || out.tuple_shapes.size() != 2) return std::nullopt;
      absl::StatusOr<int64_t> b = BlockSizeFromShapes(out.tuple_shapes[0], out.tuple_shapes[1]);
      if (!b.ok()) return std::nullopt;
      std::optional<Sharding> f = FitScaleBlocks(s, out.tuple_shapes[0], out.tuple_shapes[1], *b);
      if (!f) return std::nullopt;
      return Sharding::Broadcast(*f, out);
    }
    case BlockScaledKind::kDequantize: {
      if (h.operand_count() != 2) return std::nullopt;
      const Shape& q = h.operand(0)->shape();
      const Shape& sc = h.operand(1)->shape();
      absl::StatusOr<int64_t> b = BlockSizeFromShapes(q, sc);
      if (!b.ok()) return std::nullopt;
      const Sharding& s0 = get(h.operand(0));
      const Sharding& s = !s0.IsUnset() && !s0.IsUnknown() ? s0 : get(h.operand(1));
      if (s.IsUnset() || s.IsUnknown()) return std::nullopt;
      return FitScaleBlocks(s, q, sc, *b);
    }
    case BlockScaledKind::kDot: {
      if (!IsScaledDotOfRank23(h)) return std::nullopt;
      std::unique_ptr<HloInstruction> dot = StandInDot(h);
      return dot_forward(*dot);
    }
    default:
      return std::nullopt;
  }
}

std::optional<Sharding> BlockScaledOperandFromUser(const HloInstruction& user, int64_t i,
                                                   const Sharding& us, const ShardingOf& get) {
  switch (BlockScaledKindOf(user)) {
    case BlockScaledKind::kQuantize: {
      const Shape& out = user.shape();
      if (i != 0 || !us.IsTuple() || us.leaves().empty() || out.tuple_shapes.size() != 2) return std::nullopt;
      const Sharding& data = us.leaves()[0];
      if (data.IsUnset() || data.IsUnknown()) return std::nullopt;
      absl::StatusOr<int64_t> b = BlockSizeFromShapes(out.tuple_shapes[0], out.tuple_shapes[1]);
      if (!b.ok()) return std::nullopt;
      return FitScaleBlocks(data, out.tuple_shapes[0], out.tuple_shapes[1], *b);
    }
    case BlockScaledKind::kDequantize: {
      if (user.operand_count() != 2 || i > 1 || us.IsTuple()) return std::nullopt;
      const Shape& q = user.operand(0)->shape();
      const Shape& sc = user.operand(1)->shape();
      absl::StatusOr<int64_t> b = BlockSizeFromShapes(q, sc);
      if (!b.ok()) return std::nullopt;
      return FitScaleBlocks(us, q, sc, *b);
    }
    case BlockScaledKind::kDot: {
      if (!IsScaledDotOfRank23(user) || us.IsTuple()) return std::nullopt;
      if (i >= 4) return Sharding::Replicated();  // the global scale
      const int64_t side = i % 2;
      std::unique_ptr<HloInstruction> dot = StandInDot(user);
      const Sharding& other = get(user.operand(1 - side));
      std::optional<Sharding> s = DotOperandFromOutput(us, other.IsTiled() ? &other : nullptr, side, *dot);
      if (!s || i < 2) return s;
      absl::StatusOr<int64_t> b = BlockScaledDotBlockSize(user);
      if (!b.ok()) return std::nullopt;
      return FitScaleBlocks(*s, user.operand(side)->shape(), user.operand(i)->shape(), *b);
    }
    default:
      return std::nullopt;
  }
}

}  // namespace weave::spmd
