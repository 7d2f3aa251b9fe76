// Every sharding form converts to the same device assignment as its GSPMD equivalent:
// GSPMD (explicit, iota, transposed iota, partial replication, last_tile_dims, tuple, maximal),
// XLA's named form, Shardy round-trip attributes; mesh replica groups; groups and offsets.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/mesh.h"
#include "hlo/sharding.h"
#include "spmd/sdy_text.h"
#include "spmd/sharding.h"

namespace weave::spmd {
namespace {

using ::testing::ElementsAre;
using Groups = std::vector<std::vector<int64_t>>;

Shape F32(std::vector<int64_t> dims) { return Shape(PrimitiveType::F32, std::move(dims)); }

Sharding FromText(const std::string& text, const Shape& shape) {
  auto h = ParseSharding(text);
  EXPECT_TRUE(h.ok()) << text << ": " << h.status().message();
  if (!h.ok()) return Sharding();
  auto s = Sharding::FromHlo(*h, shape);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : Sharding();
}

Sharding FromSdy(const std::string& meshes, const std::string& sharding, const Shape& shape) {
  auto m = ParseSdyMeshes(meshes);
  EXPECT_TRUE(m.ok()) << meshes << ": " << m.status().message();
  if (!m.ok()) return Sharding();
  auto ms = ParseSdySharding(sharding, *m);
  EXPECT_TRUE(ms.ok()) << sharding << ": " << ms.status().message();
  if (!ms.ok()) return Sharding();
  auto h = MeshShardingToHlo(*ms, "", shape.rank());
  EXPECT_TRUE(h.ok()) << sharding << ": " << h.status().message();
  if (!h.ok()) return Sharding();
  auto s = Sharding::FromHlo(*h, shape);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Sharding();
}

struct Equivalent {
  const char* form;      // named or GSPMD text
  const char* gspmd;     // its GSPMD equivalent
  std::vector<int64_t> shape;
};

TEST(ShardingFormsTest, NamedAndGspmdFormsAgree) {
  const Equivalent table[] = {
      {"{devices=[4,1]0,1,2,3}", "{devices=[4,1]<=[4]}", {8, 6}},
      {"{devices=[2,2]0,2,1,3}", "{devices=[2,2]<=[2,2]T(1,0)}", {8, 6}},
      {"{devices=[1,1,4]<=[4] last_tile_dim_replicate}", "{replicated}", {8, 6}},
      {"{devices=[2,2]<=[4] last_tile_dims={replicated}}",
       "{devices=[2,2]<=[4] last_tile_dim_replicate}", {8}},
      // Replication order carries no meaning.
      {"{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}",
       "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", {8, 6}},
      {"{devices=[2,1,2]2,0,3,1 last_tile_dim_replicate}",
       "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}", {8, 6}},
      // Subgroups are ordered manual < replicated and size-1 subgroups dropped.
      {"{devices=[2,1,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={replicated, manual}}",
       "{devices=[2,1,2,2]<=[8] last_tile_dims={manual, replicated}}", {8, 6}},
      {"{devices=[2,1,1]<=[2] last_tile_dims={manual}}", "{devices=[2,1]<=[2]}", {8, 6}},
      // Named (v3) forms.
      {"{mesh['x'=4], [{'x'}, {}]}", "{devices=[4,1]<=[4]}", {8, 6}},
      {"{mesh['data'=2,'model'=2], [{'model'}, {}]}",
       "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}", {8, 6}},
      {"{mesh['data'=2,'model'=2], [{'data'}, {'model'}]}", "{devices=[2,2]<=[4]}", {8, 6}},
      {"{mesh['data'=2,'model'=2], [{'model'}, {'data'}]}", "{devices=[2,2]<=[2,2]T(1,0)}",
       {8, 6}},
      {"{mesh['data'=2,'model'=2], [{'model', 'data'}, {}]}", "{devices=[4,1]<=[2,2]T(1,0)}",
       {8, 6}},
      {"{mesh['a'=2,'b'=2], [{'a'}, {}], manual={'b'}}",
       "{devices=[2,1,2]<=[4] last_tile_dims={manual}}", {8, 6}},
      {"{mesh['a'=2,'b'=2], [{}, {}], replicated={'a'}}", "{replicated}", {8, 6}},
      {"{mesh['x'=4], [{'x':(1)2}, {'x':(2)2}]}", "{devices=[2,2]<=[4]}", {8, 6}},
      {"{mesh['x'=4], [{'x':(2)2}, {'x':(1)2}]}", "{devices=[2,2]<=[2,2]T(1,0)}", {8, 6}},
      {"{mesh['x'=4], [{'x':(1)2}, {}]}",
       "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", {8, 6}},
      {"{mesh['x'=2,'y'=2], device_ids=(3,2,1,0), [{'x'}, {}]}",
       "{devices=[2,1,2]3,2,1,0 last_tile_dim_replicate}", {8, 6}},
      {"{mesh['x'=2,'y'=2], device_ids=([2,2]T(1,0)), [{'y'}, {'x'}]}",
       "{devices=[2,2]<=[4]}", {8, 6}},
      {"{mesh['x'=4], replicated}", "{replicated}", {8, 6}},
      {"{maximal_mesh[device_id=3]}", "{maximal device=3}", {8, 6}},
      {"{mesh['x'=4], manual}", "{manual}", {8, 6}},
      {"{mesh['x'=4], [{'x', ?}, {?}]}", "{devices=[4,1]<=[4]}", {8, 6}},
      // Without the comma after the mesh (XLA's partitioner tests write them so).
      {"{mesh['x'=4] [{'x'}, {}]}", "{devices=[4,1]<=[4]}", {8, 6}},
      {"{mesh['data'=2,'model'=2] [{'model'}, {'data'}]}", "{devices=[2,2]<=[2,2]T(1,0)}", {8, 6}},
      {"{mesh['x'=4] replicated}", "{replicated}", {8, 6}},
      {"{mesh['x'=4] manual}", "{manual}", {8, 6}},
      {"{mesh['x'=4]}", "{replicated}", {8, 6}},
  };
  for (const Equivalent& e : table) {
    const Shape shape = F32(e.shape);
    const Sharding a = FromText(e.form, shape);
    const Sharding b = FromText(e.gspmd, shape);
    EXPECT_EQ(a, b) << e.form << " = " << a.ToString() << ", expected " << e.gspmd << " = "
                    << b.ToString();
  }
}

TEST(ShardingFormsTest, ShardyFormsAgreeWithGspmd) {
  const std::string mesh2x2 = "{mesh = #sdy.mesh<[\"data\"=2, \"model\"=2]>}";
  const Shape shape = F32({8, 6});
  struct Row {
    std::string meshes, sdy, gspmd;
  };
  const Row table[] = {
      {mesh2x2, "#sdy.sharding<@mesh, [{\"model\"}, {}]>",
       "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
      {mesh2x2, "#sdy.sharding<@mesh, [{\"data\"}, {\"model\"}]>", "{devices=[2,2]<=[4]}"},
      {mesh2x2, "#sdy.sharding<@mesh, [{}, {}]>", "{replicated}"},
      {mesh2x2, "#sdy.sharding<@mesh, [{\"data\", ?}, {?}]>",
       "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
      {mesh2x2, "#sdy.sharding<@mesh, [{\"data\"}p0, {}], replicated={\"model\"}>",
       "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"},
      // The \"-escaped text of an HLO frontend attribute.
      {"\"{mesh = #sdy.mesh<[\\\"data\\\"=2, \\\"model\\\"=2]>}\"",
       "\"#sdy.sharding<@mesh, [{\\\"model\\\", \\\"data\\\"}, {}]>\"",
       "{devices=[4,1]<=[2,2]T(1,0)}"},
      {"{mesh = #sdy.mesh<[\"x\"=4]>}", "#sdy.sharding<@mesh, [{\"x\":(2)2}, {\"x\":(1)2}]>",
       "{devices=[2,2]<=[2,2]T(1,0)}"},
      {"{mesh = #sdy.mesh<[\"x\"=2, \"y\"=2], device_ids=[3,2,1,0]>}",
       "#sdy.sharding<@mesh, [{\"y\"}, {}]>",
       "{devices=[2,1,2]3,1,2,0 last_tile_dim_replicate}"},
      {"{mesh = #sdy.mesh<[]>, maximal_mesh_3 = #sdy.mesh<[], device_ids=[3]>}",
       "#sdy.sharding<@maximal_mesh_3, []>", "{maximal device=3}"},
      // An inline mesh in place of @name.
      {"{}", "#sdy.sharding<mesh<[\"a\"=2, \"b\"=2]>, [{}, {\"b\"}]>",
       "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"},
  };
  for (const Row& r : table) {
    const Sharding a = FromSdy(r.meshes, r.sdy, shape);
    const Sharding b = FromText(r.gspmd, shape);
    EXPECT_EQ(a, b) << r.sdy << " = " << a.ToString() << ", expected " << r.gspmd;
  }
  // The DeepSeek dump's mesh: 12 axes, only expert=4 non-trivial.
  const std::string big =
      "{mesh = #sdy.mesh<[\"data\"=1, \"stage\"=1, \"fsdp\"=1, \"fsdp_transpose\"=1, "
      "\"sequence\"=1, \"context\"=1, \"context_autoregressive\"=1, \"tensor\"=1, "
      "\"tensor_transpose\"=1, \"tensor_sequence\"=1, \"expert\"=4, \"autoregressive\"=1]>}";
  EXPECT_EQ(FromSdy(big,
                    "#sdy.sharding<@mesh, [{\"data\", \"fsdp\", \"fsdp_transpose\", \"expert\"}, "
                    "{\"tensor_sequence\", \"context\", \"sequence\"}, {\"tensor\", "
                    "\"tensor_transpose\"}]>",
                    F32({32, 4096, 7168})),
            FromText("{devices=[4,1,1]<=[4]}", F32({32, 4096, 7168})));
}

TEST(ShardingFormsTest, PerValueAndManualAxes) {
  auto meshes = ParseSdyMeshes("{mesh = #sdy.mesh<[\"x\"=4]>}");
  ASSERT_TRUE(meshes.ok());
  auto pv = ParseSdyShardingPerValue(
      "#sdy.sharding_per_value<[<@mesh, [{\"x\"}, {}]>, <@mesh, []>]>", *meshes);
  ASSERT_TRUE(pv.ok()) << pv.status().message();
  ASSERT_EQ(pv->size(), 2u);
  EXPECT_EQ(pv->at(0).dims.size(), 2u);
  EXPECT_TRUE(pv->at(1).dims.empty());
  auto axes = ParseSdyManualAxes("#sdy<manual_axes{\"x\", \"y\"}>");
  ASSERT_TRUE(axes.ok());
  EXPECT_THAT(*axes, ElementsAre("x", "y"));
  for (const char* bad : {"#sdy.sharding<@nomesh, [{}]>", "#sdy.sharding<@mesh, [{\"z\"}]>",
                          "#sdy.sharding<@mesh, [{\"x\"}, {\"x\"}]>"}) {
    auto s = ParseSdySharding(bad, *meshes);
    if (s.ok()) {
      EXPECT_FALSE(MeshShardingToHlo(*s, "", 2).ok()) << bad;
    }
  }
}

TEST(ShardingFormsTest, SpecExampleTilesAndText) {
  // {devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate} on f32[8,6]: A = 0,2,1,3; rows 0-3
  // on {0,2}, rows 4-7 on {1,3}.
  const Sharding s =
      FromText("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}", F32({8, 6}));
  ASSERT_TRUE(s.IsTiled());
  EXPECT_THAT(s.devices(), ElementsAre(0, 2, 1, 3));
  for (int64_t d : {0, 2}) EXPECT_EQ(TileOffset(s, d, 0, 8), 0);
  for (int64_t d : {1, 3}) EXPECT_EQ(TileOffset(s, d, 0, 8), 4);
  EXPECT_EQ(s.ToString(), "{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}");
  // Gathering dim 0 uses {0,1},{2,3} (the devices agreeing on every other dim of A).
  EXPECT_EQ(DeviceGroups(s, {0}), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(DeviceGroups(s, {2}), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(LocalShape(F32({8, 6}), s).dims, (std::vector<int64_t>{4, 6}));
  // Uneven: ceil(10/4) = 3; the last tile holds 1 row and 2 of padding.
  const Sharding u = FromText("{devices=[4,1]<=[4]}", F32({10, 3}));
  EXPECT_EQ(LocalShape(F32({10, 3}), u).dims, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(TileOffset(u, 3, 0, 10), 9);
}

TEST(ShardingFormsTest, PrintsCanonicalIota) {
  struct Row {
    std::vector<int64_t> tiles, devices;
    const char* text;
  };
  const Row table[] = {
      {{4}, {0, 1, 2, 3}, "{devices=[4]<=[4]}"},
      {{2, 2}, {0, 2, 1, 3}, "{devices=[2,2]<=[2,2]T(1,0)}"},
      {{4, 2}, {0, 4, 1, 5, 2, 6, 3, 7}, "{devices=[4,2]<=[2,4]T(1,0)}"},
      {{2, 4}, {0, 4, 1, 5, 2, 6, 3, 7}, "{devices=[2,4]<=[2,4]T(1,0)}"},
      {{8}, {0, 2, 4, 6, 1, 3, 5, 7}, "{devices=[8]<=[4,2]T(1,0)}"},
      {{2, 2, 2}, {0, 4, 2, 6, 1, 5, 3, 7}, "{devices=[2,2,2]<=[2,2,2]T(2,1,0)}"},
      {{4}, {3, 1, 2, 0}, "{devices=[4]3,1,2,0}"},
  };
  for (const Row& r : table) {
    auto s = Sharding::Tiled(r.tiles, {}, r.devices);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->ToString(), r.text);
    // Whatever is printed reads back to the same sharding.
    EXPECT_EQ(FromText(s->ToString(), F32(std::vector<int64_t>(r.tiles.size(), 16))), *s);
  }
}

TEST(ShardingFormsTest, TupleAndBroadcast) {
  const Shape t = Shape::Tuple({F32({8}), Shape::Tuple({F32({4, 4}), F32({2})})});
  const Sharding all = FromText("{devices=[2]<=[2]}", F32({8}));
  const Sharding tup = FromText("{{devices=[2]<=[2]}, {replicated}, {maximal device=1}}", t);
  ASSERT_TRUE(tup.IsTuple());
  ASSERT_EQ(tup.leaves().size(), 3u);
  EXPECT_EQ(tup.leaves()[0], all);
  EXPECT_TRUE(tup.TupleElement(t, 1).IsTuple());
  EXPECT_TRUE(tup.TupleElement(t, 1).leaves()[1].IsMaximal());
  // A non-tuple sharding on a tuple applies to every leaf.
  const Sharding rep = FromText("{replicated}", t);
  ASSERT_TRUE(rep.IsTuple());
  EXPECT_EQ(rep.leaves().size(), 3u);
  EXPECT_FALSE(Sharding::FromHlo(*ParseSharding("{{replicated}}"), t).ok());
}

TEST(ShardingFormsTest, RejectsInvalidDeviceArrays) {
  EXPECT_FALSE(Sharding::Tiled({2}, {}, {0, 0}).ok());
  EXPECT_FALSE(Sharding::Tiled({2}, {}, {0, 1, 2}).ok());
  EXPECT_FALSE(Sharding::FromHlo(*ParseSharding("{devices=[2,2]<=[4]}"), F32({8})).ok());
  // From a tile function: unequal replication fails.
  EXPECT_FALSE(Sharding::FromTileFunction({2}, {0, 1, 2}, [](int64_t d) {
                 return std::vector<int64_t>{d % 2};
               }).has_value());
  auto ok = Sharding::FromTileFunction({2}, {0, 1, 2, 3},
                                       [](int64_t d) { return std::vector<int64_t>{d / 2}; });
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->ToString(), "{devices=[2,2]<=[4] last_tile_dim_replicate}");
}

TEST(MeshReplicaGroupsTest, ExpandAsTheSpecSays) {
  struct Row {
    const char* text;
    Groups groups;
  };
  const Row table[] = {
      {"mesh['a'=2,'b'=2] {'b'}", {{0, 1}, {2, 3}}},
      {"mesh['a'=2,'b'=2] {'a'}", {{0, 2}, {1, 3}}},
      {"mesh['a'=2,'b'=2] {'b','a'}", {{0, 2, 1, 3}}},
      {"mesh['a'=2,'b'=2] {'a','b'}", {{0, 1, 2, 3}}},
      {"mesh['a'=2,'b'=4] {'b'}", {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {"mesh['x'=4] {'x':(1)2}", {{0, 2}, {1, 3}}},
      {"mesh['x'=4] {'x':(2)2}", {{0, 1}, {2, 3}}},
      {"mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}", {{3, 2}, {1, 0}}},
      {"mesh['a'=2,'b'=2] {}", {{0}, {1}, {2}, {3}}},
  };
  for (const Row& r : table) {
    auto rg = ParseReplicaGroups(r.text);
    ASSERT_TRUE(rg.ok()) << r.text << ": " << rg.status().message();
    EXPECT_EQ(rg->groups, r.groups) << r.text;
    EXPECT_EQ(rg->ToString(), r.text);  // printed back as written
  }
  for (const char* bad : {"mesh['a'=2] {'c'}", "mesh['a'=2] {'a','a'}", "mesh['a'=4] {'a':(3)2}",
                          "mesh['a'=2", "mesh['a'=2,'a'=2] {'a'}"}) {
    EXPECT_FALSE(ParseReplicaGroups(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace weave::spmd
