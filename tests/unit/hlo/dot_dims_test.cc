// DotFreeDims / DotOutputDimOfFree / DotOperandDimOf against hand-derived XLA dot output layouts
// (batch dims, then lhs free dims, then rhs free dims).
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/dot_dims.h"
#include "hlo/parser.h"

namespace weave {
namespace {

// lhs [b=2, k=3, m=5, p=7], rhs [n=11, b=2, k=3]: batch (0 | 1), contracting (1 | 2).
// Output: [b=2, m=5, p=7, n=11].
constexpr char kModule[] = R"(HloModule dims
ENTRY e {
  lhs = f32[2,3,5,7] parameter(0)
  rhs = f32[11,2,3] parameter(1)
  ROOT out = f32[2,5,7,11] dot(lhs, rhs), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={1}, rhs_contracting_dims={2}
}
)";

TEST(DotDims, FreeDimsAndOutputPositions) {
  auto m = ParseHloModule(kModule);
  ASSERT_TRUE(m.ok()) << m.status();
  const HloInstruction* dot = (*m)->entry()->root();
  EXPECT_EQ(DotFreeDims(dot, 0), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(DotFreeDims(dot, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(DotFreeDims(4, {0}, {1}), (std::vector<int64_t>{2, 3}));
  // Free dims map behind the one batch dim; rhs free dims after both lhs free dims.
  EXPECT_EQ(DotOutputDimOfFree(dot, 0, 2), 1);
  EXPECT_EQ(DotOutputDimOfFree(dot, 0, 3), 2);
  EXPECT_EQ(DotOutputDimOfFree(dot, 1, 0), 3);
  // Batch, contracting and out-of-range dims are not free.
  EXPECT_EQ(DotOutputDimOfFree(dot, 0, 0), -1);
  EXPECT_EQ(DotOutputDimOfFree(dot, 0, 1), -1);
  EXPECT_EQ(DotOutputDimOfFree(dot, 1, 2), -1);
  EXPECT_EQ(DotOutputDimOfFree(dot, 1, 9), -1);
  // The inverse, for every output dim and both sides.
  EXPECT_EQ(DotOperandDimOf(dot, 0, 0), 0);
  EXPECT_EQ(DotOperandDimOf(dot, 1, 0), 1);
  EXPECT_EQ(DotOperandDimOf(dot, 0, 1), 2);
  EXPECT_EQ(DotOperandDimOf(dot, 0, 2), 3);
  EXPECT_EQ(DotOperandDimOf(dot, 0, 3), -1);
  EXPECT_EQ(DotOperandDimOf(dot, 1, 1), -1);
  EXPECT_EQ(DotOperandDimOf(dot, 1, 3), 0);
  EXPECT_EQ(DotOperandDimOf(dot, 1, 4), -1);
  EXPECT_EQ(DotOperandDimOf(dot, 0, -1), -1);
  for (int side = 0; side < 2; ++side) {
    for (int64_t d : DotFreeDims(dot, side)) {
      EXPECT_EQ(DotOperandDimOf(dot, side, DotOutputDimOfFree(dot, side, d)), d);
    }
  }
}

}  // namespace
}  // namespace weave
