// Shape::CheckedElementCount / CheckedByteSize: int64 overflow is detected (not wrapped), and the
// parser rejects shapes whose size overflows with file:line:column and the instruction's name.
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "hlo/types.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(ShapeSize, OrdinarySizes) {
  Shape s(PrimitiveType::F32, {3, 5});
  EXPECT_EQ(s.CheckedElementCount(), 15);
  EXPECT_EQ(s.CheckedByteSize(), 60);
  EXPECT_EQ(Shape(PrimitiveType::S4, {3}).CheckedByteSize(), 2);  // 12 bits round up to 2 bytes
  EXPECT_EQ(Shape::Scalar(PrimitiveType::BF16).CheckedByteSize(), 2);
  EXPECT_EQ(Shape(PrimitiveType::F32, {kMax, 0}).CheckedElementCount(), 0);
  // kMax elements of one byte fit exactly.
  EXPECT_EQ(Shape(PrimitiveType::S8, {kMax}).CheckedByteSize(), kMax);
}

TEST(ShapeSize, ElementCountOverflow) {
  // 2^63 - 1 rows of 4: the product does not fit in int64.
  Shape s(PrimitiveType::F32, {kMax, 4});
  EXPECT_FALSE(s.CheckedElementCount().has_value());
  EXPECT_FALSE(s.CheckedByteSize().has_value());
  EXPECT_EQ(s.ElementCount(), kMax);  // the unchecked forms saturate instead of wrapping
  EXPECT_EQ(s.ByteSize(), kMax);
  // 2^62 * 4 = 2^64 used to wrap to 0.
  Shape w(PrimitiveType::F32, {int64_t{1} << 62, 4});
  EXPECT_FALSE(w.CheckedElementCount().has_value());
  EXPECT_NE(w.ByteSize(), 0);
}

TEST(ShapeSize, ByteSizeOverflowWithCountInRange) {
  // 2^61 elements fit; 2^61 * 4 bytes = 2^63 does not.
  Shape s(PrimitiveType::F32, {int64_t{1} << 61});
  EXPECT_EQ(s.CheckedElementCount(), int64_t{1} << 61);
  EXPECT_FALSE(s.CheckedByteSize().has_value());
  // A tuple whose elements fit but whose sum does not.
  Shape half(PrimitiveType::S8, {(int64_t{1} << 62) + 1});
  EXPECT_TRUE(half.CheckedByteSize().has_value());
  EXPECT_FALSE(Shape::Tuple({half, half}).CheckedByteSize().has_value());
}

TEST(ShapeSize, ParserRejectsOverflowingShapes) {
  auto m = ParseHloModule(R"(HloModule big
ENTRY main {
  p = f32[4] parameter(0)
  ROOT huge = f32[9223372036854775807,4] broadcast(p), dimensions={1}
}
)",
                          "big.hlo");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("big.hlo:4:15: shape f32[9223372036854775807,4] of instruction 'huge' "
                        "has too many elements: the element count overflows int64"));
  auto bytes = ParseHloModule(R"(HloModule big
ENTRY main {
  ROOT wide = f32[2305843009213693952] parameter(0)
}
)",
                              "bytes.hlo");
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("bytes.hlo:3:15: shape f32[2305843009213693952] of instruction 'wide' "
                        "is too large: its byte size overflows int64"));
  auto tuple = ParseHloModule(R"(HloModule big
ENTRY main {
  ROOT pair = (s8[4611686018427387905], s8[4611686018427387905]) parameter(0)
}
)",
                              "tuple.hlo");
  ASSERT_FALSE(tuple.ok());
  EXPECT_THAT(std::string(tuple.status().message()),
              HasSubstr("tuple.hlo:3:15: shape of instruction 'pair' is too large: its byte "
                        "size overflows int64"));
}

}  // namespace
}  // namespace weave
