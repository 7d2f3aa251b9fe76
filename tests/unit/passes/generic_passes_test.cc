// Unit tests of the generic passes on cases the lit tests do not cover.
#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/verifier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/tuple_simplifier.h"
#include "passes/while_loop_dead_tuple_elements.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "test.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

// Runs `pass` and returns its remarks; expects success and a valid module afterwards.
std::vector<Remark> RunPass(HloPass& pass, HloModule* m, bool expect_changed) {
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  absl::StatusOr<bool> r = pass.Run(m);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (r.ok()) {
    EXPECT_EQ(*r, expect_changed);
  }
  absl::Status v = VerifyModule(*m);
  EXPECT_TRUE(v.ok()) << v.message();
  return remarks;
}

TEST(Dce, SideEffectsInOrder) {
  auto m = Parse(R"(
HloModule d

effect_body {
  bp = (s32[]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  e = s32[] custom-call(bi), custom_call_target="effect", custom_call_has_side_effect=true
  ROOT bt = (s32[]) tuple(bi)
}

effect_cond {
  cp = (s32[]) parameter(0)
  ROOT f = pred[] constant(false)
}

pure_body {
  pp = (s32[]) parameter(0)
  pi = s32[] get-tuple-element(pp), index=0
  ROOT pt = (s32[]) tuple(pi)
}

pure_cond {
  pcp = (s32[]) parameter(0)
  ROOT pf = pred[] constant(false)
}

ENTRY main {
  a = s32[] parameter(0)
  t = (s32[]) tuple(a)
  kept_loop = (s32[]) while(t), condition=effect_cond, body=effect_body
  dead_loop = (s32[]) while(t), condition=pure_cond, body=pure_body
  side = s32[] custom-call(a), custom_call_target="effect2", custom_call_has_side_effect=true
  pure_cc = s32[] custom-call(a), custom_call_target="pure"
  ROOT r = s32[] negate(a)
}
)");
  ASSERT_NE(m, nullptr);
  DeadCodeElimination dce;
  std::vector<Remark> remarks = RunPass(dce, m.get(), true);
  const HloComputation* e = m->entry();
  EXPECT_NE(e->GetInstruction("kept_loop"), nullptr);
  EXPECT_NE(e->GetInstruction("side"), nullptr);
  EXPECT_NE(e->GetInstruction("t"), nullptr);
  EXPECT_EQ(e->GetInstruction("dead_loop"), nullptr);
  EXPECT_EQ(e->GetInstruction("pure_cc"), nullptr);
  // The side-effecting custom-call in the loop body survives too.
  EXPECT_NE(m->GetComputation("effect_body")->GetInstruction("e"), nullptr);
  EXPECT_EQ(m->GetComputation("pure_body"), nullptr);
  EXPECT_EQ(m->GetComputation("pure_cond"), nullptr);
  ASSERT_FALSE(remarks.empty());
  EXPECT_EQ(remarks[0].ToString(), "dce: main: [applied] removed 2 dead instructions");
}

TEST(Cse, ElidedConstantsAndTypes) {
  auto m = Parse(R"(
HloModule c

ENTRY main {
  e1 = f32[16] constant({...})
  e2 = f32[16] constant({...})
  a = f32[2] constant({1, 2})
  b = f32[2] constant({1, 2})
  i = s32[] constant(1)
  f = f32[] constant(1)
  r1 = u32[] replica-id()
  r2 = u32[] replica-id()
  ROOT t = (f32[16], f32[16], f32[2], f32[2], s32[], f32[], u32[], u32[]) tuple(e1, e2, a, b, i, f, r1, r2)
}
)");
  ASSERT_NE(m, nullptr);
  ConstantAndIdCse cse;
  std::vector<Remark> remarks = RunPass(cse, m.get(), true);
  const HloComputation* e = m->entry();
  EXPECT_NE(e->GetInstruction("e1"), nullptr);
  EXPECT_NE(e->GetInstruction("e2"), nullptr);  // unknown values: never merged
  EXPECT_NE(e->GetInstruction("a"), nullptr);
  EXPECT_EQ(e->GetInstruction("b"), nullptr);
  EXPECT_NE(e->GetInstruction("i"), nullptr);  // s32 1 and f32 1 differ
  EXPECT_NE(e->GetInstruction("f"), nullptr);
  EXPECT_EQ(e->GetInstruction("r2"), nullptr);
  EXPECT_EQ(e->root()->operand(3), e->GetInstruction("a"));
  EXPECT_EQ(e->root()->operand(7), e->GetInstruction("r1"));
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message, HasSubstr("merged 1 duplicate constant and 1"));
}

TEST(TupleSimplifier, WhileBodyPassThroughBecomesParameter) {
  auto m = Parse(R"(
HloModule t

body {
  p = (s32[], f32[4]) parameter(0)
  g0 = s32[] get-tuple-element(p), index=0
  g1 = f32[4] get-tuple-element(p), index=1
  ROOT r = (s32[], f32[4]) tuple(g0, g1)
}

cond {
  c = (s32[], f32[4]) parameter(0)
  ROOT f = pred[] constant(false)
}

ENTRY main {
  a = s32[] parameter(0)
  b = f32[4] parameter(1)
  t = (s32[], f32[4]) tuple(a, b)
  w = (s32[], f32[4]) while(t), condition=cond, body=body
  ROOT o = f32[4] get-tuple-element(w), index=1
}
)");
  ASSERT_NE(m, nullptr);
  TupleSimplifier ts;
  RunPass(ts, m.get(), true);
  const HloComputation* body = m->GetComputation("body");
  EXPECT_EQ(body->root(), body->parameter(0));
  EXPECT_EQ(body->GetInstruction("g0"), nullptr);
  // The while still reads the init tuple (its operand is not a get-tuple-element).
  EXPECT_EQ(m->entry()->GetInstruction("w")->operand(0)->opcode(), HloOpcode::kTuple);
  // Second run: nothing.
  RunPass(ts, m.get(), false);
}

constexpr char kSharedBody[] = R"(
HloModule w

body {
  p = (s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  j = s32[] get-tuple-element(p), index=1
  ROOT r = (s32[], s32[]) tuple(i1, j)
}

cond {
  c = (s32[], s32[]) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

ENTRY main {
  z = s32[] constant(0)
  t = (s32[], s32[]) tuple(z, z)
  w1 = (s32[], s32[]) while(t), condition=cond, body=body
  w2 = (s32[], s32[]) while(t), condition=cond, body=body
  a = s32[] get-tuple-element(w1), index=0
  b = s32[] get-tuple-element(w2), index=0
  ROOT s = s32[] add(a, b)
}
)";

TEST(WhileLoopDeadTupleElements, SkipsSharedComputations) {
  auto m = Parse(kSharedBody);
  ASSERT_NE(m, nullptr);
  WhileLoopDeadTupleElements pass;
  std::vector<Remark> remarks = RunPass(pass, m.get(), false);
  ASSERT_EQ(remarks.size(), 2u);
  EXPECT_FALSE(remarks[0].applied);
  EXPECT_THAT(remarks[0].message, HasSubstr("also called from elsewhere"));
}

TEST(WhileLoopDeadTupleElements, RemovesPassThroughAndRenumbers) {
  std::string text = kSharedBody;
  // One loop only.
  text.replace(text.find("  w2 = "), text.find("  a = ") - text.find("  w2 = "), "");
  text.replace(text.find("  b = s32[] get-tuple-element(w2), index=0\n"),
               std::string("  b = s32[] get-tuple-element(w2), index=0\n").size(), "");
  text.replace(text.find("add(a, b)"), 9, "add(a, a)");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  WhileLoopDeadTupleElements pass;
  std::vector<Remark> remarks = RunPass(pass, m.get(), true);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_EQ(remarks[0].ToString(),
            "while-loop-dead-tuple-elements: w1: [applied] removed unread tuple element {1} "
            "(2 -> 1 elements)");
  const HloInstruction* w = m->entry()->GetInstruction("w1");
  ASSERT_TRUE(w->shape().IsTuple());
  EXPECT_EQ(w->shape().tuple_shapes.size(), 1u);
  EXPECT_EQ(m->GetComputation("body")->GetInstruction("j"), nullptr);
  EXPECT_EQ(m->entry()->GetInstruction("a")->tuple_index, 0);
  // Idempotent.
  remarks = RunPass(pass, m.get(), false);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_FALSE(remarks[0].applied);
}

TEST(WhileLoopDeadTupleElements, SkipsTupleShardings) {
  std::string text = kSharedBody;
  text.replace(text.find("  w2 = "), text.find("  a = ") - text.find("  w2 = "), "");
  text.replace(text.find("  b = s32[] get-tuple-element(w2), index=0\n"),
               std::string("  b = s32[] get-tuple-element(w2), index=0\n").size(), "");
  text.replace(text.find("add(a, b)"), 9, "add(a, a)");
  text.replace(text.find("condition=cond, body=body"), 25,
               "condition=cond, body=body, sharding={{replicated}, {replicated}}");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  WhileLoopDeadTupleElements pass;
  std::vector<Remark> remarks = RunPass(pass, m.get(), false);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message, HasSubstr("tuple sharding"));
}

// Regression (use-after-free): a dead value read twice on the way to the removed instruction,
// tuple(c, f(c)), used to be queued once per reader and freed on the first visit.
TEST(Dce, RemoveDeadChainVisitsSharedOperandOnce) {
  auto m = Parse(R"(
HloModule chain

ENTRY main {
  p = f32[4]{0} parameter(0)
  c = f32[4]{0} negate(p)
  f = f32[4]{0} add(c, p)
  t = (f32[4]{0}, f32[4]{0}) tuple(c, f)
  ROOT r = f32[4]{0} abs(p)
}
)");
  ASSERT_NE(m, nullptr);
  HloInstruction* t = m->entry()->GetInstruction("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(DeadCodeElimination::RemoveDeadChain(t), 3);
  EXPECT_EQ(m->entry()->GetInstruction("c"), nullptr);
  EXPECT_EQ(m->entry()->GetInstruction("f"), nullptr);
  EXPECT_NE(m->entry()->GetInstruction("p"), nullptr);
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

// An instruction something waits for stays; once the only instruction waiting for it is removed
// in the same chain, it is dead like any other (as RunOnComputation and XLA's one-at-a-time
// removal see it), whatever the operand order.
TEST(Dce, RemoveDeadChainKeepsOnlyLiveControlPredecessors) {
  for (const char* order : {"tuple(a, b)", "tuple(b, a)"}) {
    auto m = Parse(absl::StrCat(R"(
HloModule ctl

ENTRY main {
  p = f32[4]{0} parameter(0)
  a = f32[4]{0} negate(p)
  b = f32[4]{0} abs(a), control-predecessors={a}
  k = f32[4]{0} sqrt(p)
  live = f32[4]{0} exponential(p), control-predecessors={k}
  t = (f32[4]{0}, f32[4]{0}) )", order, R"(
  u = (f32[4]{0}) tuple(k)
  ROOT r = f32[4]{0} add(live, p)
}
)"));
    ASSERT_NE(m, nullptr);
    HloComputation* e = m->entry();
    EXPECT_EQ(DeadCodeElimination::RemoveDeadChain(e->GetInstruction("t")), 3) << order;
    EXPECT_EQ(e->GetInstruction("a"), nullptr) << order;
    EXPECT_EQ(e->GetInstruction("b"), nullptr) << order;
    // k has no user after u goes, but `live` waits for it.
    EXPECT_EQ(DeadCodeElimination::RemoveDeadChain(e->GetInstruction("u")), 1) << order;
    EXPECT_NE(e->GetInstruction("k"), nullptr) << order;
  }
}

// The same shape inside a while body, reached through the pass: dead elements 2 and 3 with
// root operands (c, f(c)) in that order.
TEST(WhileLoopDeadTupleElements, DeadElementsSharingAnOperand) {
  auto m = Parse(R"(
HloModule shared_dead

body {
  s = (f32[4]{0}, s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  x = f32[4]{0} get-tuple-element(s), index=0
  i = s32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  y = f32[4]{0} get-tuple-element(s), index=2
  c = f32[4]{0} negate(y)
  f = f32[4]{0} multiply(c, x)
  ROOT n = (f32[4]{0}, s32[], f32[4]{0}, f32[4]{0}) tuple(x, i1, c, f)
}

cond {
  cs = (f32[4]{0}, s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  ci = s32[] get-tuple-element(cs), index=1
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ci, three), direction=LT
}

ENTRY main {
  a = f32[4]{0} parameter(0)
  z = s32[] constant(0)
  init = (f32[4]{0}, s32[], f32[4]{0}, f32[4]{0}) tuple(a, z, a, a)
  w = (f32[4]{0}, s32[], f32[4]{0}, f32[4]{0}) while(init), condition=cond, body=body
  ROOT out = f32[4]{0} get-tuple-element(w), index=0
}
)");
  ASSERT_NE(m, nullptr);
  WhileLoopDeadTupleElements pass;
  std::vector<Remark> remarks = RunPass(pass, m.get(), true);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message, HasSubstr("removed unread tuple elements {2,3} (4 -> 2"));
  EXPECT_EQ(m->GetComputation("body")->GetInstruction("c"), nullptr);
  EXPECT_EQ(m->GetComputation("body")->GetInstruction("f"), nullptr);
}

// The dead elements the pass finds, element by element as first written: a walk of the body
// from each element's get-tuple-elements (live when it reaches an instruction kept when dead),
// the root slots each walk reaches, then liveness spread over those slots. Elements read after
// the loop or by the condition are live.
std::vector<int64_t> DeadElementsByWalks(const HloInstruction* w) {
  const HloComputation* body = w->while_body();
  const HloInstruction* bparam = body->parameter(0);
  const HloInstruction* root = body->root();
  const int64_t n = static_cast<int64_t>(w->shape().tuple_shapes.size());
  std::vector<bool> live(static_cast<size_t>(n), false);
  for (const HloInstruction* u : w->users()) live[static_cast<size_t>(u->tuple_index)] = true;
  for (const HloInstruction* u : w->while_condition()->parameter(0)->users()) {
    live[static_cast<size_t>(u->tuple_index)] = true;
  }
  std::vector<std::set<int64_t>> reaches(static_cast<size_t>(n));
  for (const HloInstruction* g : bparam->users()) {
    const int64_t i = g->tuple_index;
    std::set<const HloInstruction*> seen = {g};
    std::vector<const HloInstruction*> work = {g};
    while (!work.empty()) {
      const HloInstruction* x = work.back();
      work.pop_back();
      if (DeadCodeElimination::KeptWhenDead(*x)) live[static_cast<size_t>(i)] = true;
      for (int64_t j = 0; j < root->operand_count(); ++j) {
        if (x != root && root->operand(j) == x) reaches[static_cast<size_t>(i)].insert(j);
      }
      for (const HloInstruction* u : x->users()) {
        if (seen.insert(u).second) work.push_back(u);
      }
    }
  }
  // Liveness spreads backwards through the state: an element that reaches the slot of a live
  // element is live (the least such set; the pass computes its complement, the greatest set of
  // dead elements that reach only dead slots).
  for (bool grew = true; grew;) {
    grew = false;
    for (int64_t i = 0; i < n; ++i) {
      if (live[static_cast<size_t>(i)]) continue;
      for (int64_t j : reaches[static_cast<size_t>(i)]) {
        if (live[static_cast<size_t>(j)]) {
          live[static_cast<size_t>(i)] = grew = true;
          break;
        }
      }
    }
  }
  std::vector<int64_t> dead;
  for (int64_t i = 0; i < n; ++i) {
    if (!live[static_cast<size_t>(i)]) dead.push_back(i);
  }
  return dead;
}

// A random loop: element 0 an s32 counter the condition reads, elements 1..n-1 f32[4] read by
// zero to two get-tuple-elements each, a random graph of adds, negates and side-effecting
// custom calls over them, a root tuple of random values, and a random subset read after the
// loop.
std::string RandomLoop(std::mt19937& rng, int64_t n) {
  auto pick = [&rng](size_t size) {
    return std::uniform_int_distribution<size_t>(0, size - 1)(rng);
  };
  std::string state = "(s32[]";
  for (int64_t i = 1; i < n; ++i) state += ", f32[4]{0}";
  state += ")";
  std::string body = absl::StrCat("body {\n  s = ", state, " parameter(0)\n",
                                  "  k = s32[] get-tuple-element(s), index=0\n",
                                  "  one = s32[] constant(1)\n  k1 = s32[] add(k, one)\n");
  std::vector<std::string> values;
  for (int64_t i = 1; i < n; ++i) {
    const int copies = static_cast<int>(pick(3));
    for (int c = 0; c < copies; ++c) {
      const std::string g = absl::StrCat("g", i, "_", c);
      absl::StrAppend(&body, "  ", g, " = f32[4]{0} get-tuple-element(s), index=", i, "\n");
      values.push_back(g);
    }
  }
  if (values.empty()) {
    absl::StrAppend(&body, "  g1_0 = f32[4]{0} get-tuple-element(s), index=1\n");
    values.push_back("g1_0");
  }
  const int ops = static_cast<int>(pick(12));
  for (int m = 0; m < ops; ++m) {
    const std::string v = absl::StrCat("v", m);
    const std::string a = values[pick(values.size())], b = values[pick(values.size())];
    switch (pick(6)) {
      case 0:
        absl::StrAppend(&body, "  ", v, " = f32[4]{0} custom-call(", a,
                        "), custom_call_target=\"sink\", custom_call_has_side_effect=true\n");
        break;
      case 1:
        absl::StrAppend(&body, "  ", v, " = f32[4]{0} negate(", a, ")\n");
        break;
      default:
        absl::StrAppend(&body, "  ", v, " = f32[4]{0} add(", a, ", ", b, ")\n");
    }
    values.push_back(v);
  }
  std::vector<std::string> slots = {"k1"};
  for (int64_t i = 1; i < n; ++i) slots.push_back(values[pick(values.size())]);
  absl::StrAppend(&body, "  ROOT r = ", state, " tuple(", absl::StrJoin(slots, ", "), ")\n}\n");
  std::string text = absl::StrCat("HloModule random_loop\n\n", body, "\ncond {\n  cs = ", state,
                                  " parameter(0)\n  ck = s32[] get-tuple-element(cs), index=0\n",
                                  "  lim = s32[] constant(4)\n",
                                  "  ROOT lt = pred[] compare(ck, lim), direction=LT\n}\n\n",
                                  "ENTRY main {\n  z = s32[] constant(0)\n");
  std::vector<std::string> init = {"z"};
  for (int64_t i = 1; i < n; ++i) {
    absl::StrAppend(&text, "  p", i, " = f32[4]{0} parameter(", i - 1, ")\n");
    init.push_back(absl::StrCat("p", i));
  }
  absl::StrAppend(&text, "  init = ", state, " tuple(", absl::StrJoin(init, ", "), ")\n  w = ",
                  state, " while(init), condition=cond, body=body\n");
  std::vector<std::string> outs = {"o0"};
  absl::StrAppend(&text, "  o0 = s32[] get-tuple-element(w), index=0\n");
  std::string out_shape = "(s32[]";
  for (int64_t i = 1; i < n; ++i) {
    if (pick(3) != 0) continue;
    absl::StrAppend(&text, "  o", i, " = f32[4]{0} get-tuple-element(w), index=", i, "\n");
    outs.push_back(absl::StrCat("o", i));
    out_shape += ", f32[4]{0}";
  }
  absl::StrAppend(&text, "  ROOT out = ", out_shape, ") tuple(", absl::StrJoin(outs, ", "),
                  ")\n}\n");
  return text;
}

// The pass's one sweep per body (reverse post order, slot sets) finds exactly the dead elements
// the per-element walks find, on 300 random loops of 2 to 70 elements (more than one 64-bit
// word of slots).
TEST(WhileLoopDeadTupleElements, MatchesPerElementWalksOnRandomLoops) {
  std::mt19937 rng(19);
  int removed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = trial % 10 == 9 ? 66 + trial % 5 : 2 + trial % 7;
    const std::string text = RandomLoop(rng, n);
    auto m = Parse(text);
    ASSERT_NE(m, nullptr) << text;
    const std::vector<int64_t> dead = DeadElementsByWalks(m->entry()->GetInstruction("w"));
    WhileLoopDeadTupleElements pass;
    std::vector<Remark> remarks;
    pass.set_remarks(&remarks);
    absl::StatusOr<bool> r = pass.Run(m.get());
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(*r, !dead.empty()) << text;
    if (dead.empty()) continue;
    ++removed;
    ASSERT_FALSE(remarks.empty()) << text;
    EXPECT_THAT(remarks[0].message,
                HasSubstr(absl::StrCat(dead.size() == 1 ? "element {" : "elements {",
                                       absl::StrJoin(dead, ","), "} (", n, " -> ",
                                       n - static_cast<int64_t>(dead.size()), " elements)")))
        << text;
    EXPECT_TRUE(VerifyModule(*m).ok()) << text;
  }
  EXPECT_GT(removed, 100) << "the random loops should mostly have dead elements";
}

}  // namespace
}  // namespace weave
