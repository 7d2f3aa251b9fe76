#include "analysis/pattern_matcher.h"

#include "gtest/gtest.h"
#include "test_util.h"

namespace weave {
namespace {

using testing::Find;
using testing::ParseOrDie;

constexpr char kModule[] = R"(
HloModule pm, num_partitions=2

ENTRY main {
  q = f8e4m3fn[4,8] parameter(0)
  s = bf16[] parameter(1)
  w = bf16[8,16] parameter(2)
  c = bf16[4,8] convert(q)
  b = bf16[4,8] broadcast(s), dimensions={}
  x = bf16[4,8] multiply(b, c)
  d = bf16[4,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = (bf16[4,16], bf16[4,8]) tuple(d, x)
  g1 = bf16[4,8] get-tuple-element(t), index=1
  cp = bf16[4,8] collective-permute(g1), channel_id=1, source_target_pairs={{0,1},{1,0}}
  ag = bf16[8,8] all-gather(cp), channel_id=2, replica_groups={{0,1}}, dimensions={0}
  one = bf16[] constant(1)
  sq = bf16[4,8] multiply(cp, cp)
  ROOT r = (bf16[8,8], bf16[], bf16[4,8]) tuple(ag, one, sq)
}
)";

TEST(PatternMatcher, DiagramStyleMatchWithCaptures) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  HloInstruction *dot = nullptr, *q = nullptr, *scale = nullptr, *w = nullptr;
  // dot(multiply(convert(q), broadcast(scale)) in any order, w)
  EXPECT_TRUE(Match(Find(*m, "d"),
                    m::Dot(&dot,
                           m::MultiplyAnyOrder(m::Convert(m::Op(&q).WithFp8ElementType()),
                                               m::Broadcast(m::Op(&scale).WithShapeScalar())),
                           m::Parameter(&w, 2))));
  EXPECT_EQ(dot, Find(*m, "d"));
  EXPECT_EQ(q, Find(*m, "q"));
  EXPECT_EQ(scale, Find(*m, "s"));
  EXPECT_EQ(w, Find(*m, "w"));
}

TEST(PatternMatcher, OrderedBinaryDoesNotSwap) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  HloInstruction* x = Find(*m, "x");
  EXPECT_FALSE(Match(x, m::Multiply(m::Convert(), m::Broadcast())));
  EXPECT_TRUE(Match(x, m::Multiply(m::Broadcast(), m::Convert())));
  EXPECT_TRUE(Match(x, m::MultiplyAnyOrder(m::Convert(), m::Broadcast())));
  EXPECT_TRUE(Match(x, m::AnyOrder(HloOpcode::kMultiply, m::Convert(), m::Broadcast())));
  EXPECT_FALSE(Match(x, m::AddAnyOrder(m::Convert(), m::Broadcast())));
}

TEST(PatternMatcher, Predicates) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  // x has two users (d and t): WithOneUser fails.
  EXPECT_FALSE(Match(Find(*m, "x"), m::Op().WithOneUser()));
  EXPECT_TRUE(Match(Find(*m, "c"), m::Convert().WithOneUser()));
  // cp has two users (ag, sq); sq uses cp twice.
  EXPECT_FALSE(Match(Find(*m, "cp"), m::Op().WithOneUser()));
  EXPECT_TRUE(Match(Find(*m, "ag"), m::Op().WithOneUser()));
  // The root is never "one user".
  EXPECT_FALSE(Match(Find(*m, "r"), m::Op().WithOneUser()));
  EXPECT_TRUE(Match(Find(*m, "one"), m::ConstantScalar()));
  EXPECT_TRUE(Match(Find(*m, "one"), m::ConstantEffectiveScalar(1.0)));
  EXPECT_FALSE(Match(Find(*m, "one"), m::ConstantEffectiveScalar(2.0)));
  EXPECT_TRUE(Match(Find(*m, "s"), m::Op().WithElementType(PrimitiveType::BF16)));
  EXPECT_FALSE(Match(Find(*m, "s"), m::Op().WithElementType(PrimitiveType::F32)));
  EXPECT_TRUE(Match(Find(*m, "d"), m::Op().WithPredicate([](const HloInstruction* h) {
    return h->shape().dims[1] == 16;
  })));
  EXPECT_FALSE(Match(static_cast<HloInstruction*>(nullptr), m::Op()));
}

TEST(PatternMatcher, TupleElementsAndCollectives) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  HloInstruction *tuple = nullptr, *cp = nullptr;
  EXPECT_TRUE(Match(Find(*m, "ag"),
                    m::AllGather(m::CollectivePermute(
                        &cp, m::GetTupleElement(m::Tuple(&tuple), 1)))));
  EXPECT_EQ(cp, Find(*m, "cp"));
  EXPECT_EQ(tuple, Find(*m, "t"));
  EXPECT_FALSE(Match(Find(*m, "g1"), m::GetTupleElement(m::Op(), 0)));
  const HloInstruction* cd = nullptr;
  EXPECT_TRUE(Match(Find(*m, "g1"), m::GetTupleElement(&cd, m::Op(), 1)));
  EXPECT_EQ(cd, Find(*m, "g1"));
}

TEST(PatternMatcher, CapturesFollowTheSuccessfulAlternative) {
  auto m = ParseOrDie(kModule);
  ASSERT_NE(m, nullptr);
  HloInstruction *a = nullptr, *b = nullptr;
  // First try binds a=b (broadcast) and fails on b; the swapped order must rebind.
  EXPECT_TRUE(Match(Find(*m, "x"), m::MultiplyAnyOrder(m::Op(&a), m::Broadcast(&b))));
  EXPECT_EQ(a, Find(*m, "c"));
  EXPECT_EQ(b, Find(*m, "b"));
}

}  // namespace
}  // namespace weave
