// Replica groups and shardings: parsing, iota expansion, tile lookup and printing.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/sharding.h"

namespace weave {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Groups = std::vector<std::vector<int64_t>>;

Groups Expand(std::string_view text) {
  auto rg = ParseReplicaGroups(text);
  EXPECT_TRUE(rg.ok()) << text << ": " << rg.status().message();
  return rg.ok() ? rg->groups : Groups{};
}

TEST(ReplicaGroupsTest, IotaForms) {
  EXPECT_EQ(Expand("[2,4]<=[8]"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(Expand("[4,2]<=[2,4]T(1,0)"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(Expand("[1,4]<=[4]"), (Groups{{0, 1, 2, 3}}));
  // 3-D transpose: iota(12) as [2,3,2], dims permuted to [2,2,3] by (2,0,1).
  // Element (a,b,c) of the result is source (b,c,a) = b*6 + c*2 + a.
  EXPECT_EQ(Expand("[2,6]<=[2,3,2]T(2,0,1)"),
            (Groups{{0, 2, 4, 6, 8, 10}, {1, 3, 5, 7, 9, 11}}));
  // The identity permutation changes nothing.
  EXPECT_EQ(Expand("[2,2]<=[2,2]T(0,1)"), (Groups{{0, 1}, {2, 3}}));
}

TEST(ReplicaGroupsTest, ListFormAndEmpty) {
  EXPECT_EQ(Expand("{{0,2},{1,3}}"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(Expand("{ {0, 1} , {2,3} }"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_TRUE(Expand("{}").empty());
}

TEST(ReplicaGroupsTest, KeepsTextAndPrintsBuiltGroups) {
  auto rg = ParseReplicaGroups("[4,2]<=[2,4]T(1,0)");
  ASSERT_TRUE(rg.ok());
  ASSERT_TRUE(rg->iota.has_value());
  EXPECT_THAT(rg->iota->perm, ElementsAre(1, 0));
  EXPECT_EQ(rg->ToString(), "[4,2]<=[2,4]T(1,0)");
  EXPECT_EQ(ReplicaGroups::FromList({{0, 1}, {2, 3}}).ToString(), "{{0,1},{2,3}}");
  EXPECT_EQ(ReplicaGroups::FromList({}).ToString(), "{}");
  ReplicaGroups built;
  built.iota = IotaList{{2, 4}, {8}, {}};
  EXPECT_EQ(built.ToString(), "[2,4]<=[8]");
  auto mesh = ParseReplicaGroups("mesh['a'=2,'b'=4] {'b'}");
  ASSERT_TRUE(mesh.ok());
  EXPECT_TRUE(mesh->is_mesh);
  EXPECT_EQ(mesh->ToString(), "mesh['a'=2,'b'=4] {'b'}");
}

TEST(ReplicaGroupsTest, RejectsMalformedGroups) {
  for (const char* bad : {"[2,4]<=[6]", "[2,4]<=[2,4]T(0,0)", "[2,4]<=[2,4]T(1)", "[8]<=[8]",
                          "{{0,1},{2,", "{{0,-1}}", "[2,4]", "nonsense",
                          "[1000000000,1000000000]<=[1000000000,1000000000]"}) {
    auto rg = ParseReplicaGroups(bad);
    EXPECT_FALSE(rg.ok()) << bad;
  }
}

TEST(IotaListTest, Expand) {
  IotaList l{{8}, {2, 4}, {1, 0}};
  EXPECT_THAT(l.Expand(), ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
  IotaList id{{6}, {6}, {}};
  EXPECT_THAT(id.Expand(), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(ShardingTest, SimpleKinds) {
  auto r = ParseSharding("{replicated}");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->IsReplicated());
  auto mx = ParseSharding("{maximal device=3}");
  ASSERT_TRUE(mx.ok());
  EXPECT_EQ(mx->kind, HloSharding::Kind::kMaximal);
  EXPECT_EQ(mx->maximal_device, 3);
  auto mn = ParseSharding("{manual}");
  ASSERT_TRUE(mn.ok());
  EXPECT_EQ(mn->kind, HloSharding::Kind::kManual);
}

TEST(ShardingTest, TiledExplicitAndIota) {
  auto s = ParseSharding("{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->kind, HloSharding::Kind::kTiled);
  EXPECT_THAT(s->tile_dims, ElementsAre(2, 1, 4));
  EXPECT_TRUE(s->last_tile_dim_replicate);
  EXPECT_EQ(s->DataRank(), 2);
  // Device 5 sits at tile (1, 0, 1): data tile index (1, 0).
  EXPECT_EQ(s->TileIndexForDevice(5), (std::vector<int64_t>{1, 0}));
  EXPECT_FALSE(s->TileIndexForDevice(9).has_value());

  auto t = ParseSharding("{devices=[4,2]<=[2,4]T(1,0)}");
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(t->devices, ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
  EXPECT_EQ(t->TileIndexForDevice(6), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(t->ToString(), "{devices=[4,2]<=[2,4]T(1,0)}");  // text kept verbatim

  auto sub = ParseSharding("{devices=[2,2,2]<=[2,4]T(1,0) last_tile_dims={manual}}");
  ASSERT_TRUE(sub.ok());
  EXPECT_THAT(sub->last_tile_dims, ElementsAre("manual"));
  EXPECT_EQ(sub->DataRank(), 2);

  // XLA normalizes last_tile_dims={replicated} to last_tile_dim_replicate.
  auto norm = ParseSharding("{devices=[2,2]<=[4] last_tile_dims={replicated}}");
  ASSERT_TRUE(norm.ok());
  EXPECT_TRUE(norm->last_tile_dim_replicate);
  EXPECT_TRUE(norm->last_tile_dims.empty());
}

TEST(ShardingTest, TupleAndMetadata) {
  auto s = ParseSharding(
      "{{replicated}, {maximal device=0}, {devices=[1,2]<=[2] metadata={op_name=\"a\"}}}");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->kind, HloSharding::Kind::kTuple);
  ASSERT_EQ(s->tuple.size(), 3u);
  EXPECT_EQ(s->tuple[2].kind, HloSharding::Kind::kTiled);
  EXPECT_THAT(s->tuple[2].devices, ElementsAre(0, 1));
  auto empty = ParseSharding("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->kind, HloSharding::Kind::kTuple);
  EXPECT_TRUE(empty->tuple.empty());
}

TEST(ShardingTest, PrintsBuiltShardings) {
  HloSharding t;
  t.kind = HloSharding::Kind::kTiled;
  t.tile_dims = {1, 4};
  t.devices = {0, 1, 2, 3};
  EXPECT_EQ(t.ToString(), "{devices=[1,4]<=[4]}");
  t.devices = {0, 2, 1, 3};
  EXPECT_EQ(t.ToString(), "{devices=[1,4]0,2,1,3}");
  t.tile_dims = {2, 2};
  t.last_tile_dim_replicate = true;
  EXPECT_EQ(t.ToString(), "{devices=[2,2]0,2,1,3 last_tile_dim_replicate}");
  HloSharding r;
  HloSharding m;
  m.kind = HloSharding::Kind::kMaximal;
  m.maximal_device = 2;
  HloSharding tup;
  tup.kind = HloSharding::Kind::kTuple;
  tup.tuple = {r, m};
  EXPECT_EQ(tup.ToString(), "{{replicated}, {maximal device=2}}");
  // Whatever is printed parses back to the same structure.
  auto back = ParseSharding(t.ToString());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->devices, t.devices);
  EXPECT_TRUE(back->last_tile_dim_replicate);
}

TEST(ShardingTest, RejectsMalformedShardings) {
  for (const char* bad : {"replicated", "{devices=[2,2]0,1,2}", "{devices=[2,2]<=[3]}",
                          "{maximal}", "{devices=[2]<=[2]T(1)}", "{{replicated}, {",
                          "{last_tile_dim_replicate}", "{devices=[2,2]0,1,2,3,4}"}) {
    auto s = ParseSharding(bad);
    EXPECT_FALSE(s.ok()) << bad;
    if (!s.ok()) {
      EXPECT_FALSE(s.status().message().empty());
    }
  }
  auto msg = ParseSharding("{devices=[2,2]0,1,2}");
  EXPECT_THAT(std::string(msg.status().message()), HasSubstr("4 device ids"));
}

}  // namespace
}  // namespace weave
