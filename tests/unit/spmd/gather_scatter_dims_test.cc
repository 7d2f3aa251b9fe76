// ParseGatherScatterDims (spmd/sharding_util.h): the dim roles the gather/scatter rules of
// propagation and partitioning read, by example (XLA's GatherScatterDims).
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *std::move(m) : nullptr;
}

TEST(GatherScatterDimsTest, EmbeddingGather) {
  auto m = Parse(R"(HloModule g
ENTRY e {
  table = f32[35,32] parameter(0)
  ids = s32[6,5] parameter(1)
  ROOT emb = f32[6,5,32] gather(table, ids), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,32}
})");
  ASSERT_NE(m, nullptr);
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(*m->entry()->root());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->batch_out, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(g->indices_batch, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(g->window_operand, (std::vector<int64_t>{1}));
  EXPECT_EQ(g->operand_to_offset, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(g->trivially_sliced, (std::vector<bool>{true, false}));  // the vocab dim
  EXPECT_EQ(g->pass_through, (std::vector<bool>{false, true}));      // the width
}

TEST(GatherScatterDimsTest, WindowedGatherIsNeitherPassThroughNorTrivial) {
  auto m = Parse(R"(HloModule g
ENTRY e {
  table = f32[16,8] parameter(0)
  ids = s32[6,1] parameter(1)
  ROOT w = f32[6,2,8] gather(table, ids), offset_dims={1,2}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,8}
})");
  ASSERT_NE(m, nullptr);
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(*m->entry()->root());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->trivially_sliced, (std::vector<bool>{false, false}));
  EXPECT_EQ(g->pass_through, (std::vector<bool>{false, true}));
}

TEST(GatherScatterDimsTest, ScatterReadsUpdateWindowDims) {
  auto m = Parse(R"(HloModule s
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  table = f32[35,32] parameter(0)
  ids = s32[16,5] parameter(1)
  upd = f32[16,5,32] parameter(2)
  ROOT acc = f32[35,32] scatter(table, ids, upd), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add
})");
  ASSERT_NE(m, nullptr);
  std::optional<GatherScatterDims> g = ParseGatherScatterDims(*m->entry()->root());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->slice_sizes, (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(g->batch_out, (std::vector<int64_t>{0, 1}));  // update scatter dims
  EXPECT_EQ(g->trivially_sliced, (std::vector<bool>{true, false}));
  EXPECT_EQ(g->pass_through, (std::vector<bool>{false, true}));
}

TEST(GatherScatterDimsTest, MalformedIsNullopt) {
  auto m = ParseHloModule(R"(HloModule g
ENTRY e {
  table = f32[16,8] parameter(0)
  ids = s32[6,1] parameter(1)
  ROOT w = f32[6,8] gather(table, ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1}
})", "test");
  if (!m.ok()) return;  // the parser may already refuse it
  EXPECT_FALSE(ParseGatherScatterDims(*(*m)->entry()->root()).has_value());
}

}  // namespace
}  // namespace weave::spmd
