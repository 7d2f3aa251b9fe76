// Sharding transformations of propagation and the reshard planner, by table.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/sharding.h"
#include "spmd/reshard.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

Sharding S(const std::string& text, std::vector<int64_t> dims) {
  auto h = ParseSharding(text);
  EXPECT_TRUE(h.ok()) << text;
  auto s = Sharding::FromHlo(*h, Shape(PrimitiveType::F32, std::move(dims)));
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : Sharding();
}

std::string Str(const std::optional<Sharding>& s) { return s ? s->ToString() : "none"; }

TEST(ShardingUtilTest, ReplicateTransposeInsertRemove) {
  const Sharding s = S("{devices=[2,2]<=[4]}", {8, 8});
  EXPECT_EQ(Str(ReplicateDims(s, {0})), "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}");
  EXPECT_EQ(Str(ReplicateDims(s, {1})), "{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(Str(ReplicateDims(s, {0, 1})), "{replicated}");
  EXPECT_EQ(Str(TransposeSharding(s, {1, 0})), "{devices=[2,2]<=[2,2]T(1,0)}");
  EXPECT_EQ(Str(InsertDims(S("{devices=[4]<=[4]}", {8}), {0})), "{devices=[1,4]<=[4]}");
  EXPECT_EQ(Str(RemoveDims(S("{devices=[1,4]<=[4]}", {2, 8}), {0})), "{devices=[4]<=[4]}");
  EXPECT_FALSE(RemoveDims(s, {0}).has_value());  // a tiled dim cannot just go
}

TEST(ShardingUtilTest, ReplicateTileFactor) {
  // The minor factor leaves: devices that differed only in it now share a tile.
  EXPECT_EQ(Str(ReplicateTileFactor(S("{devices=[4]<=[4]}", {24}), 0, 2)),
            "{devices=[2,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(Str(ReplicateTileFactor(S("{devices=[4,2]<=[8]}", {8, 8}), 0, 2)),
            "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}");
  // Joining an existing replicated subgroup (the factor major in it).
  EXPECT_EQ(Str(ReplicateTileFactor(S("{devices=[4,1,2]<=[8] last_tile_dim_replicate}", {8, 8}), 0, 2)),
            "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  EXPECT_EQ(Str(ReplicateTileFactor(S("{devices=[4]<=[4]}", {24}), 0, 3)), "none");  // 3 does not divide 4
  EXPECT_EQ(Str(ReplicateTileFactor(S("{devices=[4]<=[4]}", {24}), 1, 2)), "none");  // no dim 1
}

TEST(ShardingUtilTest, Reshape) {
  struct Row {
    const char* from;
    std::vector<int64_t> in, out;
    const char* want;
  };
  const Row table[] = {
      {"{devices=[4,1]<=[4]}", {8, 6}, {2, 4, 6}, "{devices=[2,2,1]<=[4]}"},  // split over two
      {"{devices=[4,1]<=[4]}", {8, 6}, {8, 2, 3}, "{devices=[4,1,1]<=[4]}"},
      {"{devices=[4,1]<=[4]}", {8, 6}, {48}, "{devices=[4]<=[4]}"},
      {"{devices=[1,4]<=[4]}", {8, 6}, {48}, "none"},  // minor dim of a merge: no
      {"{devices=[4,1]<=[4]}", {8, 6}, {4, 12}, "{devices=[4,1]<=[4]}"},  // tiles stay aligned
      {"{devices=[4,1]<=[4]}", {8, 6}, {3, 16}, "none"},  // 4 tiles do not divide 3 rows
      {"{devices=[4,1]<=[4]}", {8, 6}, {1, 8, 6}, "{devices=[1,4,1]<=[4]}"},
      {"{devices=[1,4,1]<=[4]}", {1, 8, 6}, {8, 6}, "{devices=[4,1]<=[4]}"},
      {"{devices=[4,1]<=[4]}", {10, 6}, {10, 2, 3}, "{devices=[4,1,1]<=[4]}"},  // 1:1, uneven
  };
  for (const Row& r : table) {
    EXPECT_EQ(Str(ReshapeSharding(S(r.from, r.in), r.in, r.out)), r.want) << r.from;
  }
}

TEST(ShardingUtilTest, MergeAndSpecificity) {
  // E4: x's groups {0,1},{2,3} (batch) and w1's {0,2},{1,3} (model) meet in [2,1,2]<=[4].
  const Sharding x = S("{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}", {8, 16, 128});
  const Sharding w = S("{devices=[1,1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}", {8, 16, 128});
  EXPECT_EQ(Str(MergeCompatible(x, w, 2)), "{devices=[2,1,2]<=[4]}");
  // Counts that disagree do not merge.
  EXPECT_FALSE(MergeCompatible(S("{devices=[2,2]<=[4]}", {8, 8}),
                               S("{devices=[4,1]<=[4]}", {8, 8}), 1)
                   .has_value());
  EXPECT_TRUE(IsMoreSpecific(S("{devices=[4,1]<=[4]}", {8, 8}), Sharding::Replicated()));
  EXPECT_TRUE(IsMoreSpecific(Sharding::Replicated(), Sharding()));
  EXPECT_TRUE(IsMoreSpecific(Sharding::Maximal(1), Sharding::Replicated()));  // as XLA
  EXPECT_FALSE(IsMoreSpecific(Sharding::Replicated(), Sharding::Maximal(1)));
  EXPECT_TRUE(IsMoreSpecific(Sharding::Manual(), Sharding::Replicated()));
  EXPECT_FALSE(IsMoreSpecific(S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", {8, 8}),
                              S("{devices=[1,4]<=[4]}", {8, 8})));
  // ImproveLeaf: a provided-style tiled current value is only refined by a sub-tiling unless
  // aggressive.
  const Sharding rows2 = S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", {8, 8});
  const Sharding cols4 = S("{devices=[1,4]<=[4]}", {8, 8});
  EXPECT_EQ(ImproveLeaf(rows2, cols4, true, false, {8, 8}), rows2);
  EXPECT_EQ(ImproveLeaf(rows2, cols4, true, true, {8, 8}), cols4);
  EXPECT_EQ(ImproveLeaf(rows2, S("{devices=[4,1]<=[4]}", {8, 8}), true, false, {8, 8}),
            S("{devices=[4,1]<=[4]}", {8, 8}));
}

TEST(ReshardPlanTest, Kinds) {
  const Shape g(PrimitiveType::F32, {8, 12});
  struct Row {
    const char* from;
    const char* to;
    ReshardKind kind;
  };
  const Row table[] = {
      {"{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", ReshardKind::kNone},
      {"{replicated}", "{devices=[2,2]<=[4]}", ReshardKind::kSlice},
      {"{devices=[2,1,2]<=[4] last_tile_dim_replicate}", "{devices=[4,1]<=[4]}", ReshardKind::kSlice},
      {"{devices=[4,1]<=[4]}", "{devices=[4,1]0,2,1,3}", ReshardKind::kPermute},
      {"{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}", ReshardKind::kAllToAll},
      {"{devices=[4,1]<=[4]}", "{replicated}", ReshardKind::kGather},
      {"{devices=[2,2]<=[4]}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", ReshardKind::kGather},
      {"{devices=[2,2]<=[4]}", "{devices=[4,1]<=[4]}", ReshardKind::kSteps},
  };
  for (const Row& r : table) {
    const Sharding from = S(r.from, g.dims), to = S(r.to, g.dims);
    EXPECT_EQ(PlanReshard(from, to, g, 4).kind, r.kind) << r.from << " -> " << r.to;
  }
  // 10 rows: halves of 5 do not split into quarters of 3, nor do the columns' halves line up.
  const Shape ten(PrimitiveType::F32, {10, 6});
  EXPECT_EQ(PlanReshard(S("{devices=[2,2]<=[4]}", ten.dims), S("{devices=[4,1]<=[4]}", ten.dims), ten, 4).kind,
            ReshardKind::kFull);
  // A chain through the replicated value (gather all, slice the other device order) is the full
  // fallback, remarked, not a quiet chain of steps.
  const Shape wide(PrimitiveType::F32, {2, 100});
  EXPECT_EQ(PlanReshard(S("{devices=[2,1]0,1}", wide.dims), S("{devices=[1,2]1,0}", wide.dims), wide, 2).kind,
            ReshardKind::kFull);
  // A tile that is all padding (9 rows over 4: 3, 3, 3, 0) refines anything.
  const Shape u(PrimitiveType::F32, {9, 4});
  EXPECT_TRUE(RefinesOnEveryDevice(Sharding::Replicated(), S("{devices=[4,1]<=[4]}", u.dims), u, 4));
  EXPECT_EQ(ReshardCostBytes(S("{devices=[4,1]<=[4]}", g.dims), Sharding::Replicated(), g, 4),
            (8 - 2) * 12 * 4);
}

}  // namespace
}  // namespace weave::spmd
