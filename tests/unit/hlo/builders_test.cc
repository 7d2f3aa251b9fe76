// Unit tests of the typed builders (hlo/builders.h): the shapes they derive, the attributes they
// set, and the text the printer gives them (which decides the attributes it prints).
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/builders.h"
#include "hlo/parser.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Module() {
  auto m = ParseHloModule(R"(HloModule b
ENTRY main {
  p = (f32[4,8]{1,0}, s32[]) parameter(0)
  ROOT r = s32[] get-tuple-element(p), index=1
}
)",
                          "b.hlo");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(Builders, GetTupleElementTakesTheElementShape) {
  auto m = Module();
  ASSERT_NE(m, nullptr);
  HloComputation* c = m->entry();
  HloInstruction* g = AddGetTupleElement(c, c->parameter(0), 0, "first");
  EXPECT_EQ(g->opcode(), HloOpcode::kGetTupleElement);
  EXPECT_EQ(g->tuple_index, 0);
  EXPECT_EQ(g->shape().dims, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(g->operand(0), c->parameter(0));
  EXPECT_THAT(g->ToString(), HasSubstr("%first = f32[4,8]{1,0} get-tuple-element(%p), index=0"));
  HloInstruction* g1 = AddGetTupleElement(c, c->parameter(0), 1, "second");
  EXPECT_EQ(g1->tuple_index, 1);
  EXPECT_EQ(g1->shape().element_type, PrimitiveType::S32);
  EXPECT_EQ(g1->shape().rank(), 0);
}

TEST(Builders, ScalarConstantOfEachKindOfType) {
  auto m = Module();
  ASSERT_NE(m, nullptr);
  HloComputation* c = m->entry();
  EXPECT_THAT(AddScalarConstant(c, PrimitiveType::S32, -3, "k")->ToString(),
              HasSubstr("s32[] constant(-3)"));
  EXPECT_THAT(AddScalarConstant(c, PrimitiveType::U32, 7, "k")->ToString(),
              HasSubstr("u32[] constant(7)"));
  EXPECT_THAT(AddScalarConstant(c, PrimitiveType::PRED, 1, "k")->ToString(),
              HasSubstr("pred[] constant(true)"));
  EXPECT_THAT(AddScalarConstant(c, PrimitiveType::F32, 2, "k")->ToString(),
              HasSubstr("f32[] constant(2)"));
  EXPECT_THAT(AddScalarConstant(c, PrimitiveType::BF16, 0, "k")->ToString(),
              HasSubstr("bf16[] constant(0)"));
}

TEST(Builders, ZerosAreABroadcastOfANamedZero) {
  auto m = Module();
  ASSERT_NE(m, nullptr);
  HloComputation* c = m->entry();
  HloInstruction* z = AddZeros(c, Shape(PrimitiveType::F32, {4, 8}), "acc");
  EXPECT_EQ(z->opcode(), HloOpcode::kBroadcast);
  EXPECT_EQ(z->name(), "acc");
  ASSERT_EQ(z->operand_count(), 1);
  EXPECT_EQ(z->operand(0)->name(), "acc.zero");
  EXPECT_THAT(z->operand(0)->ToString(), HasSubstr("f32[] constant(0)"));
  // The printer writes broadcast's (empty) dimensions without the builder asking.
  EXPECT_FALSE(z->has_dimensions_attr);
  EXPECT_THAT(z->ToString(), HasSubstr("%acc = f32[4,8]{1,0} broadcast(%acc.zero), dimensions={}"));
  HloInstruction* f = AddZeros(c, Shape(PrimitiveType::PRED, {2}), "mask");
  EXPECT_THAT(f->operand(0)->ToString(), HasSubstr("pred[] constant(false)"));
}

}  // namespace
}  // namespace weave
