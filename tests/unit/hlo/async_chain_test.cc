// Async chain queries (hlo/async_chain.h): which computation each link wraps, sugared links,
// links that leave out calls=, and execution-thread names.
#include <memory>

#include "gtest/gtest.h"
#include "hlo/async_chain.h"
#include "hlo/parser.h"

namespace weave {
namespace {

constexpr char kChains[] = R"(HloModule chains, num_partitions=2
halve {
  p = f32[6]{0} parameter(0)
  q = f32[6]{0} parameter(1)
  ROOT m = f32[6]{0} multiply(p, q)
}
halve2 {
  p2 = f32[6]{0} parameter(0)
  ROOT n2 = f32[6]{0} negate(p2)
}
plus {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[6]{0} parameter(0)
  y = f32[6]{0} parameter(1)
  st = ((f32[6]{0}), (), s32[]) async-start(x), calls=halve
  up = ((f32[6]{0}, f32[6]{0}), f32[6]{0}, s32[]) async-update(st, y)
  dn = f32[6]{0} async-done(up)
  cs = ((f32[6]{0}), f32[6]{0}, s32[]) call-start(x), to_apply=halve2
  cd = f32[6]{0} call-done(cs)
  rs = ((f32[6]{0}), f32[3]{0}) reduce-scatter-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, to_apply=plus
  rd = f32[3]{0} reduce-scatter-done(rs)
  ROOT t = (f32[6]{0}, f32[6]{0}, f32[3]{0}) tuple(dn, cd, rd)
}
)";

std::unique_ptr<HloModule> ParseChains() {
  auto m = ParseHloModule(kChains, "chains.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *std::move(m) : nullptr;
}

const HloInstruction* Find(const HloModule& m, std::string_view name) {
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* h : c->instructions()) {
      if (h->name() == name) return h;
    }
  }
  ADD_FAILURE() << "no instruction " << name;
  return nullptr;
}

TEST(AsyncChain, LinksWithoutCallsWrapTheirStartsComputation) {
  std::unique_ptr<HloModule> m = ParseChains();
  ASSERT_NE(m, nullptr);
  const HloInstruction* st = Find(*m, "st");
  const HloInstruction* up = Find(*m, "up");
  const HloInstruction* dn = Find(*m, "dn");
  ASSERT_TRUE(st && up && dn);
  ASSERT_FALSE(st->called_computations().empty());
  const HloComputation* halve = st->called_computations()[0];
  EXPECT_EQ(halve->name(), "halve");
  EXPECT_TRUE(AsyncWrapsComputation(*st));
  EXPECT_EQ(AsyncChainComputation(*st), halve);
  EXPECT_EQ(AsyncChainComputation(*up), halve);
  EXPECT_EQ(AsyncChainComputation(*dn), halve);
}

TEST(AsyncChain, CallSugarWrapsReduceScatterSugarDoesNot) {
  std::unique_ptr<HloModule> m = ParseChains();
  ASSERT_NE(m, nullptr);
  const HloInstruction* cs = Find(*m, "cs");
  const HloInstruction* cd = Find(*m, "cd");
  const HloInstruction* rs = Find(*m, "rs");
  const HloInstruction* rd = Find(*m, "rd");
  ASSERT_TRUE(cs && cd && rs && rd);
  EXPECT_TRUE(AsyncWrapsComputation(*cs));
  ASSERT_NE(AsyncChainComputation(*cd), nullptr);
  EXPECT_EQ(AsyncChainComputation(*cd)->name(), "halve2");
  // The reduce-scatter's calls= is its reducer, not a wrapped computation.
  EXPECT_FALSE(AsyncWrapsComputation(*rs));
  EXPECT_EQ(AsyncChainComputation(*rs), nullptr);
  EXPECT_EQ(AsyncChainComputation(*rd), nullptr);
}

TEST(AsyncChain, WalkStopsOutsideTheChain) {
  std::unique_ptr<HloModule> m = ParseChains();
  ASSERT_NE(m, nullptr);
  // A non-async instruction calls nothing and has no chain to walk.
  EXPECT_EQ(AsyncChainComputation(*Find(*m, "x")), nullptr);
  // tuple's operand 0 is an async-done, not a start or update: the walk stops there.
  EXPECT_EQ(AsyncChainComputation(*Find(*m, "t")), nullptr);
}

TEST(ExecutionThreadName, QuotesStrippedEmptyIsMain) {
  EXPECT_EQ(ExecutionThreadName(""), "main");
  EXPECT_EQ(ExecutionThreadName("\"\""), "main");
  EXPECT_EQ(ExecutionThreadName("\"side\""), "side");
  EXPECT_EQ(ExecutionThreadName("side"), "side");
  EXPECT_EQ(ExecutionThreadName("\"main\""), "main");
  EXPECT_EQ(ExecutionThreadName("\""), "\"");
}

}  // namespace
}  // namespace weave
