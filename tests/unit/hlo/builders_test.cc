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

// A module with dot operands: batch dim 0, and a dynamic bound on the lhs free dim.
std::unique_ptr<HloModule> DotModule() {
  auto m = ParseHloModule(R"(HloModule d
ENTRY main {
  a = bf16[2,<=6,16]{2,1,0} parameter(0)
  b = bf16[2,16,5]{2,1,0} parameter(1)
  s = f32[] parameter(2)
  ROOT r = f32[] negate(s)
}
)",
                          "d.hlo");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(Builders, DotInfersBatchThenLhsFreeThenRhsFreeDims) {
  auto m = DotModule();
  ASSERT_NE(m, nullptr);
  HloComputation* c = m->entry();
  DotDims dd;
  dd.lhs_batch = {0};
  dd.rhs_batch = {0};
  dd.lhs_contracting = {2};
  dd.rhs_contracting = {1};
  HloInstruction* d = AddDot(c, c->parameter(0), c->parameter(1), dd, PrimitiveType::F32, "mm");
  EXPECT_EQ(d->opcode(), HloOpcode::kDot);
  EXPECT_EQ(d->dot_dims(), dd);
  EXPECT_EQ(d->shape().dims, (std::vector<int64_t>{2, 6, 5}));
  // The lhs free dim keeps its dynamic bound; the default layout.
  EXPECT_THAT(d->ToString(),
              HasSubstr("%mm = f32[2,<=6,5]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, "
                        "lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"));
  // Contracting the rhs's last dim instead: its free dim is 1; a layout given is kept.
  DotDims other = dd;
  other.lhs_contracting = {1};
  other.rhs_contracting = {2};
  Layout minor_first;
  minor_first.minor_to_major = {0, 1, 2};
  HloInstruction* e = AddDot(c, c->parameter(0), c->parameter(1), other, PrimitiveType::BF16,
                             "mm2", minor_first);
  EXPECT_EQ(e->shape().dims, (std::vector<int64_t>{2, 16, 16}));
  EXPECT_THAT(e->ToString(), HasSubstr("bf16[2,16,16]{0,1,2} dot(%a, %b)"));
  // Free-standing: the same shape, no name, no computation.
  std::unique_ptr<HloInstruction> f =
      CreateDot(c->parameter(0), c->parameter(1), dd, PrimitiveType::F32, d->shape().layout);
  EXPECT_EQ(f->shape(), d->shape());
  EXPECT_EQ(f->dot_dims(), dd);
  // No layout: the shape prints none, as one parsed without a layout does.
  HloInstruction* g =
      AddDot(c, c->parameter(0), c->parameter(1), dd, PrimitiveType::F32, "bare", std::nullopt);
  EXPECT_FALSE(g->shape().layout.has_value());
  EXPECT_THAT(g->ToString(), HasSubstr("%bare = f32[2,<=6,5] dot(%a, %b)"));
}

TEST(Builders, BroadcastSetsItsDimensions) {
  auto m = DotModule();
  ASSERT_NE(m, nullptr);
  HloComputation* c = m->entry();
  HloInstruction* s = AddBroadcast(c, c->parameter(2), Shape(PrimitiveType::F32, {3, 4}), {},
                                   "splat");
  EXPECT_EQ(s->opcode(), HloOpcode::kBroadcast);
  EXPECT_TRUE(s->dimensions.empty());
  EXPECT_THAT(s->ToString(), HasSubstr("%splat = f32[3,4]{1,0} broadcast(%s), dimensions={}"));
  HloInstruction* row = AddBroadcast(c, s, Shape(PrimitiveType::F32, {3, 7, 4}), {0, 2}, "rows");
  EXPECT_EQ(row->dimensions, (std::vector<int64_t>{0, 2}));
  EXPECT_THAT(row->ToString(), HasSubstr("broadcast(%splat), dimensions={0,2}"));
}

}  // namespace
}  // namespace weave
