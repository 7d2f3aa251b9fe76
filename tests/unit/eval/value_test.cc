// HoldsShape: the evaluator's check that an instruction's value has its shape's element count in
// its element type's storage.
#include <cstdint>
#include <limits>

#include "eval/value.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

TEST(HoldsShape, ZerosHoldTheirShapeInEveryStorage) {
  for (PrimitiveType t : {PrimitiveType::F32, PrimitiveType::BF16, PrimitiveType::F8E4M3FN, PrimitiveType::F64,
                          PrimitiveType::S32, PrimitiveType::PRED, PrimitiveType::U64, PrimitiveType::C64}) {
    const Shape s(t, {3, 5});
    EXPECT_TRUE(HoldsShape(Value::Zeros(s), s)) << PrimitiveTypeName(t);
  }
  const Shape scalar = Shape::Scalar(PrimitiveType::S8);
  EXPECT_TRUE(HoldsShape(Value::Zeros(scalar), scalar));
  const Shape empty(PrimitiveType::F32, {4, 0});
  EXPECT_TRUE(HoldsShape(Value::Zeros(empty), empty));
}

TEST(HoldsShape, WrongElementCountIsCaught) {
  const Shape s(PrimitiveType::F32, {2, 4});
  Value v = Value::Zeros(s);
  v.f.pop_back();
  EXPECT_FALSE(HoldsShape(v, s));
  // The same count in another shape's dims is fine: only the count and storage are checked.
  EXPECT_TRUE(HoldsShape(Value::Zeros(Shape(PrimitiveType::F32, {8})), s));
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape(PrimitiveType::F32, {9})), s));
  for (PrimitiveType t : {PrimitiveType::S32, PrimitiveType::F64, PrimitiveType::C128}) {
    EXPECT_FALSE(HoldsShape(Value::Zeros(Shape(t, {5})), Shape(t, {6}))) << PrimitiveTypeName(t);
  }
}

TEST(HoldsShape, WrongStorageIsCaught) {
  // An s32 value (int storage) where an f32 array is declared holds no floats.
  const Shape f32(PrimitiveType::F32, {6});
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape(PrimitiveType::S32, {6})), f32));
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape(PrimitiveType::F64, {6})), f32));
  // bf16 and f32 share float storage.
  EXPECT_TRUE(HoldsShape(Value::Zeros(Shape(PrimitiveType::BF16, {6})), f32));
}

TEST(HoldsShape, TupleValueIsNotAnArray) {
  const Shape a(PrimitiveType::F32, {2});
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape::Tuple({a, a})), a));
  // Not even where the array would have no elements to hold.
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape::Tuple({})), Shape(PrimitiveType::F32, {0})));
}

TEST(HoldsShape, DynamicDimIsLeftUnchecked) {
  Shape s(PrimitiveType::F32, {8, 4});
  s.dynamic = {true, false};
  Value v = Value::Zeros(Shape(PrimitiveType::F32, {3, 4}));
  EXPECT_TRUE(HoldsShape(v, s));
  s.dynamic = {false, false};
  EXPECT_FALSE(HoldsShape(v, s));
}

TEST(HoldsShape, OverflowingCountHoldsNothing) {
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  const Shape s(PrimitiveType::F32, {big, 4});
  EXPECT_FALSE(HoldsShape(Value::Zeros(Shape(PrimitiveType::F32, {4})), s));
}

}  // namespace
}  // namespace weave::eval
