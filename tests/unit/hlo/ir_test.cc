// IR mutation API on parsed modules: users, operand replacement, removal, dead code, cloning,
// post orders and unique names.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr char kModule[] = R"(HloModule ir, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
unused {
  ROOT u = f32[] parameter(0)
}
ENTRY main {
  x = f32[4]{0} parameter(0)
  y = f32[4]{0} parameter(1)
  m = f32[4]{0} multiply(x, y)
  n = f32[4]{0} negate(m)
  dead = f32[4]{0} abs(n)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(n, z), dimensions={0}, to_apply=sum
}
)";

std::unique_ptr<HloModule> Parse() {
  auto m = ParseHloModule(kModule, "ir.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<std::string> Names(const std::vector<HloInstruction*>& v) {
  std::vector<std::string> out;
  for (auto* i : v) out.push_back(i->name());
  return out;
}

TEST(IrTest, UsersAndReplaceOperand) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  HloInstruction* x = e->GetInstruction("x");
  HloInstruction* y = e->GetInstruction("y");
  HloInstruction* mul = e->GetInstruction("m");
  EXPECT_THAT(x->users(), ElementsAre(mul));
  ASSERT_TRUE(mul->ReplaceOperandWith(1, x).ok());
  EXPECT_EQ(mul->operand(1), x);
  EXPECT_TRUE(y->users().empty());
  EXPECT_EQ(x->user_count(), 1);  // a user using a value twice is listed once
  EXPECT_FALSE(mul->ReplaceOperandWith(7, x).ok());
}

TEST(IrTest, ReplaceAllUsesWithDifferentShapeAndRoot) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  HloInstruction* n = e->GetInstruction("n");
  HloInstruction* mul = e->GetInstruction("m");
  ASSERT_TRUE(n->ReplaceAllUsesWith(mul).ok());
  EXPECT_TRUE(n->users().empty());
  EXPECT_THAT(Names(mul->users()), UnorderedElementsAre("n", "dead", "r"));
  EXPECT_FALSE(mul->ReplaceAllUsesWith(mul).ok());
  // Root replacement.
  HloInstruction* z = e->GetInstruction("z");
  ASSERT_TRUE(e->root()->ReplaceAllUsesWith(z).ok());
  EXPECT_EQ(e->root(), z);
}

TEST(IrTest, RemoveInstructionAndDeadCode) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  EXPECT_FALSE(e->RemoveInstruction(e->GetInstruction("n")).ok());  // has users
  EXPECT_FALSE(e->RemoveInstruction(e->root()).ok());               // root
  int64_t before = e->instruction_count();
  EXPECT_TRUE(e->RemoveDeadCode());
  EXPECT_EQ(e->instruction_count(), before - 1);
  EXPECT_EQ(e->GetInstruction("dead"), nullptr);
  EXPECT_FALSE(e->RemoveDeadCode());
  // The module still prints and parses.
  auto re = ParseHloModule(m->ToString(), "after-dce.hlo");
  EXPECT_TRUE(re.ok()) << re.status().message();
}

// RemoveDeadCode marks by each instruction's slot: a hole left by RemoveInstruction, and
// instructions added after it, are swept right, and the slots stay usable for the next sweep.
TEST(IrTest, RemoveDeadCodeAfterHolesAndAdditions) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  ASSERT_TRUE(e->RemoveInstruction(e->GetInstruction("dead")).ok());  // a hole, not compacted
  HloInstruction* n = e->GetInstruction("n");
  HloInstruction* a1 = e->AddInstruction(HloOpcode::kAbs, n->shape(), {n}, "late_dead");
  e->AddInstruction(HloOpcode::kNegate, a1->shape(), {a1}, "late_dead_user");
  HloInstruction* kept = e->AddInstruction(HloOpcode::kNegate, n->shape(), {n}, "late_kept");
  ASSERT_TRUE(e->root()->ReplaceOperandWith(0, kept).ok());
  const int64_t before = e->instruction_count();
  EXPECT_TRUE(e->RemoveDeadCode());
  EXPECT_EQ(e->instruction_count(), before - 2);
  EXPECT_EQ(e->GetInstruction("late_dead"), nullptr);
  EXPECT_EQ(e->GetInstruction("late_dead_user"), nullptr);
  ASSERT_NE(e->GetInstruction("late_kept"), nullptr);
  // n now feeds only late_kept; a second sweep after more removals still sees every live one.
  EXPECT_FALSE(e->RemoveDeadCode());
  e->set_root(e->GetInstruction("late_kept"));
  EXPECT_TRUE(e->RemoveDeadCode());  // the reduce and its constant
  std::vector<std::string> names;
  for (const HloInstruction* i : e->MakeInstructionPostOrder()) names.push_back(i->name());
  EXPECT_THAT(names, ElementsAre("x", "y", "m", "n", "late_kept"));
}

TEST(IrTest, ReplaceInstructionRemovesDeadOperands) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  ASSERT_TRUE(e->RemoveDeadCode());
  HloInstruction* x = e->GetInstruction("x");
  ASSERT_TRUE(e->ReplaceInstruction(e->GetInstruction("n"), x).ok());
  EXPECT_EQ(e->GetInstruction("n"), nullptr);
  EXPECT_EQ(e->GetInstruction("m"), nullptr);  // only used by n
  EXPECT_EQ(e->root()->operand(0), x);
  EXPECT_NE(e->GetInstruction("y"), nullptr);  // parameters stay
}

// RemoveUnusedChains: a seed freed by an earlier seed's chain is skipped, the predicate keeps
// what it refuses (and the chain stops there), used instructions and the root stay.
TEST(IrTest, RemoveUnusedChainsSharedMechanism) {
  auto m = ParseHloModule(R"(HloModule chains
ENTRY main {
  p = f32[4]{0} parameter(0)
  a = f32[4]{0} negate(p)
  b = f32[4]{0} abs(a)
  c = f32[4]{0} exponential(b)
  kept = f32[4]{0} sqrt(p)
  d = f32[4]{0} add(kept, kept)
  ROOT r = f32[4]{0} negate(p)
})", "chains.hlo");
  ASSERT_TRUE(m.ok()) << m.status().message();
  HloComputation* e = (*m)->entry();
  // c's chain removes b and a; the seed a is then already gone.
  std::vector<HloInstruction*> seeds = {e->GetInstruction("c"), e->GetInstruction("a"),
                                        e->GetInstruction("d"), e->root()};
  ASSERT_TRUE(e->RemoveUnusedChains(seeds, [](const HloInstruction* i) {
                 return i->name() != "kept" && i->IsRemovableWhenUnused();
               }).ok());
  for (const char* gone : {"a", "b", "c", "d"}) EXPECT_EQ(e->GetInstruction(gone), nullptr) << gone;
  EXPECT_NE(e->GetInstruction("kept"), nullptr);  // refused by the predicate
  EXPECT_NE(e->GetInstruction("p"), nullptr);     // a parameter: HasSideEffect
  EXPECT_NE(e->GetInstruction("r"), nullptr);     // the root
}

TEST(IrTest, CloneWithNewOperandsAndUniqueNames) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  HloInstruction* r = e->root();
  Shape s2(PrimitiveType::F32, {});
  auto clone = r->CloneWithNewOperands(s2, {e->GetInstruction("m"), e->GetInstruction("z")});
  EXPECT_EQ(clone->opcode(), HloOpcode::kReduce);
  EXPECT_EQ(clone->dimensions, r->dimensions);
  EXPECT_EQ(clone->to_apply(), r->to_apply());
  HloInstruction* added = e->AddInstruction(std::move(clone));
  EXPECT_NE(added->name(), r->name());  // made unique
  EXPECT_NE(added->unique_id(), r->unique_id());
  EXPECT_THAT(e->GetInstruction("m")->users(), ::testing::Contains(added));
  // Names parsed from text are reserved: new names never collide with them.
  std::string fresh = m->UniqueName("x");
  EXPECT_NE(fresh, "x");
  EXPECT_EQ(m->UniqueName("brand_new"), "brand_new");
}

TEST(IrTest, PostOrdersAndUnusedComputations) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* e = m->entry();
  auto order = e->MakeInstructionPostOrder();
  auto pos = [&](std::string_view n) {
    return std::find_if(order.begin(), order.end(),
                        [&](HloInstruction* i) { return i->name() == n; }) -
           order.begin();
  };
  EXPECT_LT(pos("x"), pos("m"));
  EXPECT_LT(pos("m"), pos("n"));
  EXPECT_LT(pos("n"), pos("r"));
  auto comps = m->MakeComputationPostOrder();
  ASSERT_FALSE(comps.empty());
  EXPECT_EQ(comps.back(), e);
  EXPECT_TRUE(m->RemoveUnusedComputations());
  EXPECT_EQ(m->GetComputation("unused"), nullptr);
  EXPECT_NE(m->GetComputation("sum"), nullptr);
}

TEST(IrTest, ModuleCloneIsDeepAndPrintsTheSame) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  auto c = m->Clone();
  EXPECT_EQ(c->ToString(), m->ToString());
  EXPECT_NE(c->entry(), m->entry());
  EXPECT_EQ(c->entry()->root()->to_apply()->parent(), c.get());
  // Mutating the clone leaves the original alone.
  c->entry()->GetInstruction("n")->set_name("renamed");
  EXPECT_NE(m->entry()->GetInstruction("n"), nullptr);
}

TEST(IrTest, CloneComputationAndNextChannelId) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloComputation* sum = m->GetComputation("sum");
  HloComputation* copy = m->CloneComputation(sum, "sum_copy");
  EXPECT_EQ(copy->name(), "sum_copy");
  EXPECT_EQ(copy->num_parameters(), 2);
  EXPECT_EQ(copy->root()->opcode(), HloOpcode::kAdd);
  EXPECT_NE(copy->root(), sum->root());
  EXPECT_EQ(m->NextChannelId(), 1);
  m->entry()->root()->channel_id = 9;
  EXPECT_EQ(m->NextChannelId(), 10);
}

// Control edges are kept in both directions; every removal path drops them on both sides, so no
// list keeps a pointer to a freed instruction (the ASan build checks the frees).
constexpr char kControl[] = R"(HloModule ctl, num_partitions=2
ENTRY main {
  p = f32[8]{0} parameter(0)
  a = f32[8]{0} negate(p)
  b = f32[8]{0} abs(p), control-predecessors={a}
  c = f32[8]{0} exponential(p), control-predecessors={a, b}
  unused = f32[8]{0} sqrt(p)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(b, c)
}
)";

TEST(IrTest, ControlEdgesBothDirectionsAndRemoval) {
  auto parsed = ParseHloModule(kControl, "ctl.hlo");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  HloModule* m = parsed->get();
  HloComputation* e = m->entry();
  HloInstruction* a = e->GetInstruction("a");
  HloInstruction* b = e->GetInstruction("b");
  HloInstruction* c = e->GetInstruction("c");
  EXPECT_THAT(b->control_predecessors(), ElementsAre(a));
  EXPECT_THAT(c->control_predecessors(), ElementsAre(a, b));
  EXPECT_THAT(a->control_successors(), ElementsAre(b, c));
  EXPECT_THAT(b->control_successors(), ElementsAre(c));
  // Replacing b's uses moves the edge b -> c to its replacement, in place.
  HloInstruction* sq = e->GetInstruction("unused");
  ASSERT_TRUE(b->ReplaceUsesWith({c}, sq).ok());
  EXPECT_THAT(c->control_predecessors(), ElementsAre(a, sq));
  EXPECT_THAT(sq->control_successors(), ElementsAre(c));
  EXPECT_TRUE(b->control_successors().empty());
  // Removing a drops it from both of its successors.
  ASSERT_TRUE(e->RemoveInstruction(a).ok());
  EXPECT_TRUE(b->control_predecessors().empty());
  EXPECT_THAT(c->control_predecessors(), ElementsAre(sq));
  EXPECT_EQ(e->instruction_count(), 5);
  EXPECT_THAT(e->ToString(), ::testing::HasSubstr("exponential(%p), control-predecessors={%unused}"));
  // DropAllControlDeps clears both sides.
  c->DropAllControlDeps();
  EXPECT_TRUE(sq->control_successors().empty());
  sq->AddControlDependencyTo(c);
  sq->AddControlDependencyTo(c);  // a repeated edge is kept as written
  EXPECT_THAT(c->control_predecessors(), ElementsAre(sq, sq));
  sq->RemoveControlDependencyTo(c);
  EXPECT_TRUE(c->control_predecessors().empty());
  EXPECT_TRUE(sq->control_successors().empty());
}

TEST(IrTest, CloneKeepsControlEdgesAndDeadCodeDropsThem) {
  auto parsed = ParseHloModule(kControl, "ctl.hlo");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto copy = (*parsed)->Clone();
  EXPECT_EQ(copy->ToString(), (*parsed)->ToString());
  HloComputation* e = copy->entry();
  HloInstruction* a = e->GetInstruction("a");
  EXPECT_EQ(a->control_successors().size(), 2u);
  EXPECT_EQ(a->control_successors()[0]->parent(), e);  // the clone's, not the original's
  // a is read by nobody but is a control predecessor: RemoveDeadCode keeps it; the root
  // swap makes b, c and a dead together.
  EXPECT_TRUE(e->RemoveDeadCode());  // `unused`
  EXPECT_EQ(e->GetInstruction("unused"), nullptr);
  e->set_root(e->GetInstruction("p"));
  EXPECT_TRUE(e->RemoveDeadCode());
  EXPECT_EQ(e->instruction_count(), 1);
  EXPECT_EQ(e->instructions().size(), 1u);
}

// A cloned instruction is placed by its caller: it has the operands given and no users or
// control edges of its own, though the original has all of them.
TEST(IrTest, CloneWithNewOperandsStartsWithNoEdges) {
  auto parsed = ParseHloModule(kControl, "ctl.hlo");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  HloComputation* e = (*parsed)->entry();
  HloInstruction* b = e->GetInstruction("b");
  HloInstruction* p = e->GetInstruction("p");
  ASSERT_FALSE(b->users().empty());
  ASSERT_FALSE(b->control_predecessors().empty());
  ASSERT_FALSE(e->GetInstruction("a")->control_successors().empty());
  auto clone = b->CloneWithNewOperands(b->shape(), {p}, ".copy");
  EXPECT_THAT(clone->operands(), ElementsAre(p));
  EXPECT_TRUE(clone->users().empty());
  EXPECT_TRUE(clone->control_predecessors().empty());
  EXPECT_TRUE(clone->control_successors().empty());
  EXPECT_EQ(clone->name(), "b.copy");
  HloInstruction* added = e->AddInstruction(std::move(clone));
  EXPECT_THAT(p->users(), ::testing::Contains(added));
  // The original keeps its edges.
  EXPECT_EQ(b->control_predecessors().size(), 1u);
  EXPECT_THAT(b->users(), ElementsAre(e->GetInstruction("t")));
  EXPECT_EQ(b->control_successors().size(), 1u);  // c
}

// A module clone rebuilds every edge list in the original's order, pointing at its own copies.
TEST(IrTest, ModuleCloneRebuildsEdgesInOrder) {
  auto parsed = ParseHloModule(kControl, "ctl.hlo");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto copy = (*parsed)->Clone();
  auto names = [](const std::vector<HloInstruction*>& v) {
    std::vector<std::string> out;
    for (const HloInstruction* i : v) out.push_back(i->name());
    return out;
  };
  for (const HloInstruction* i : (*parsed)->entry()->instructions()) {
    const HloInstruction* c = copy->entry()->GetInstruction(i->name());
    ASSERT_NE(c, nullptr) << i->name();
    EXPECT_EQ(names(c->operands()), names(i->operands())) << i->name();
    EXPECT_EQ(names(c->users()), names(i->users())) << i->name();
    EXPECT_EQ(names(c->control_predecessors()), names(i->control_predecessors())) << i->name();
    EXPECT_EQ(names(c->control_successors()), names(i->control_successors())) << i->name();
    for (const HloInstruction* o : c->operands()) EXPECT_EQ(o->parent(), copy->entry());
    for (const HloInstruction* u : c->users()) EXPECT_EQ(u->parent(), copy->entry());
  }
}

// Removal leaves holes that a later compaction closes: the order of the rest never changes, and
// counts, lookups and the printer see only live instructions.
TEST(IrTest, ManyRemovalsKeepOrderAndCounts) {
  HloModule m("many");
  auto owned = std::make_unique<HloComputation>("main");
  HloComputation* e = m.AddComputation(std::move(owned));
  m.set_entry(e);
  const Shape s(PrimitiveType::F32, {4});
  HloInstruction* p = e->AddParameter(s, "p");
  std::vector<HloInstruction*> made;
  for (int k = 0; k < 500; ++k) made.push_back(e->AddInstruction(HloOpcode::kNegate, s, {p}));
  e->set_root(made.back());
  // Remove every instruction but each fifth (and the root), oldest first.
  std::vector<HloInstruction*> kept = {p};
  for (size_t k = 0; k < made.size(); ++k) {
    if (k % 5 == 0 || made[k] == e->root()) {
      kept.push_back(made[k]);
      continue;
    }
    ASSERT_TRUE(e->RemoveInstruction(made[k]).ok());
  }
  EXPECT_EQ(e->instruction_count(), static_cast<int64_t>(kept.size()));
  EXPECT_EQ(e->instructions(), kept);
  EXPECT_EQ(e->MakeInstructionPostOrder().size(), kept.size());
  EXPECT_EQ(e->GetInstruction(kept[3]->name()), kept[3]);
  // Removing the survivors through RemoveUnusedChains (one call, many seeds) also keeps order.
  std::vector<HloInstruction*> seeds(kept.begin() + 1, kept.end() - 1);
  ASSERT_TRUE(e->RemoveUnusedChains(seeds, [](const HloInstruction*) { return true; }).ok());
  EXPECT_THAT(e->instructions(), ElementsAre(p, kept.back()));
}

// MakeInstructionPostOrder keeps its result between calls. Whatever the mutation API does in
// between, the kept order must be exactly the one a fresh walk gives: here the fresh walk is the
// one of a Clone (new computations, nothing kept; Clone keeps the instruction order and names).
// Random graph edits, with the order read after some of them (so that edits also land on a kept
// order and on a dropped one), on several seeds.
std::vector<std::string> OrderNames(const HloComputation* c) {
  std::vector<std::string> names;
  for (const HloInstruction* i : c->MakeInstructionPostOrder()) names.push_back(i->name());
  return names;
}

TEST(IrTest, KeptPostOrderIsTheFreshOneAfterEveryKindOfEdit) {
  const Shape s(PrimitiveType::F32, {4});
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    HloModule m("kept_order");
    HloComputation* e = m.AddComputation(std::make_unique<HloComputation>("main"));
    m.set_entry(e);
    std::vector<HloInstruction*> live = {e->AddParameter(s, "p0"), e->AddParameter(s, "p1")};
    for (int k = 0; k < 6; ++k) {
      live.push_back(e->AddInstruction(HloOpcode::kAdd, s, {live[k], live[k + 1]}));
    }
    e->set_root(live.back());
    uint32_t state = seed * 2654435761u;
    auto next = [&state](uint32_t n) {
      state = state * 1664525u + 1013904223u;
      return (state >> 8) % n;
    };
    // Edits that add an edge a -> b (b reads a, or runs after it) take an `a` that does not
    // depend on b, so the graph stays acyclic. Any such a, not only one placed before b: an
    // edge to a later instruction is what moves instructions in the order.
    auto depends_on = [](const HloInstruction* a, const HloInstruction* b) {
      std::vector<const HloInstruction*> work = {a};
      std::vector<const HloInstruction*> seen;
      while (!work.empty()) {
        const HloInstruction* i = work.back();
        work.pop_back();
        if (i == b) return true;
        if (std::find(seen.begin(), seen.end(), i) != seen.end()) continue;
        seen.push_back(i);
        for (const HloInstruction* o : i->operands()) work.push_back(o);
        for (const HloInstruction* o : i->control_predecessors()) work.push_back(o);
      }
      return false;
    };
    auto pick_pair = [&](HloInstruction** a, HloInstruction** b) {
      std::vector<HloInstruction*> all = e->instructions();
      for (int tries = 0; tries < 8; ++tries) {
        *a = all[next(static_cast<uint32_t>(all.size()))];
        *b = all[next(static_cast<uint32_t>(all.size()))];
        if (*a != *b && !depends_on(*a, *b)) return true;
      }
      return false;
    };
    for (int step = 0; step < 250; ++step) {
      std::vector<HloInstruction*> all = e->instructions();
      HloInstruction* x = all[next(static_cast<uint32_t>(all.size()))];
      HloInstruction *a = nullptr, *b = nullptr;
      const uint32_t kind = next(12);
      if (kind == 0) {
        HloInstruction* y = all[next(static_cast<uint32_t>(all.size()))];
        e->AddInstruction(HloOpcode::kAdd, s, {x, y});
      } else if (kind == 1) {
        e->AddInstruction(HloOpcode::kTuple, Shape::Tuple({s}), {x});
      } else if (kind == 2 && pick_pair(&a, &b) && b->operand_count() > 0) {
        ASSERT_TRUE(b->ReplaceOperandWith(next(static_cast<uint32_t>(b->operand_count())), a).ok());
      } else if (kind == 3 && pick_pair(&a, &b)) {
        ASSERT_TRUE(b->ReplaceAllUsesWith(a).ok());
      } else if (kind == 4 && pick_pair(&a, &b)) {
        a->AddControlDependencyTo(b);
      } else if (kind == 5 && !x->control_predecessors().empty()) {
        x->control_predecessors().front()->RemoveControlDependencyTo(x);
      } else if (kind == 6) {
        x->DropAllControlDeps();
      } else if (kind == 7 && x->user_count() == 0 && x != e->root() &&
                 x->opcode() != HloOpcode::kParameter) {
        ASSERT_TRUE(e->RemoveInstruction(x).ok());
      } else if (kind == 8) {
        if (next(2) == 0) {
          e->RemoveDeadCode();
        } else {
          ASSERT_TRUE(e->RemoveUnusedChains({x}, [](const HloInstruction* i) {
                         return i->opcode() != HloOpcode::kParameter;
                       }).ok());
        }
      } else if (kind == 9 && pick_pair(&a, &b) && b->opcode() == HloOpcode::kTuple) {
        b->AppendOperand(a);  // the tuple's shape is not kept up to date: only the graph counts
      } else if (kind == 10 && pick_pair(&a, &b) && !b->control_predecessors().empty()) {
        b->ReplaceControlPredecessor(b->control_predecessors().front(), a);
      } else if (kind == 11) {
        // A user added before its operand: the operand joins the computation already read.
        std::unique_ptr<HloInstruction> y = HloInstruction::Create(HloOpcode::kNegate, s, {x});
        HloInstruction* free_y = y.get();
        e->AddInstruction(HloOpcode::kAdd, s, {x, free_y});
        if (next(2) == 0) e->MakeInstructionPostOrder();  // kept with the user, without y
        e->AddInstruction(std::move(y));
      }
      if (next(3) != 0) {
        ASSERT_EQ(OrderNames(e), OrderNames(m.Clone()->entry()))
            << "seed " << seed << ", step " << step << ", edit kind " << kind;
      }
    }
    EXPECT_EQ(OrderNames(e), OrderNames(m.Clone()->entry())) << "seed " << seed;
  }
}

TEST(IrTest, ComputationNamesStayUniqueThroughRenameAndRemoval) {
  HloModule m("names");
  HloComputation* a = m.AddComputation(std::make_unique<HloComputation>("body"));
  HloComputation* b = m.AddComputation(std::make_unique<HloComputation>("body"));
  EXPECT_EQ(a->name(), "body");
  EXPECT_EQ(b->name(), "body.1");
  b->set_name("cond");
  HloComputation* c = m.AddComputation(std::make_unique<HloComputation>("body"));
  EXPECT_EQ(c->name(), "body.1");  // freed by the rename
  HloComputation* d = m.AddComputation(std::make_unique<HloComputation>("cond"));
  EXPECT_EQ(d->name(), "cond.1");
  ASSERT_TRUE(m.RemoveComputation(a).ok());
  HloComputation* e = m.AddComputation(std::make_unique<HloComputation>("body"));
  EXPECT_EQ(e->name(), "body");  // freed by the removal
  auto copy = m.Clone();
  EXPECT_EQ(copy->AddComputation(std::make_unique<HloComputation>("cond"))->name(), "cond.2");
}

// The suffix hint (one probe per new loop body, not one per body already there) gives the names
// the probe from 1 gives: each new computation takes the least free `base.k`, also after names
// below the hint are freed by removal or rename, in any order.
TEST(IrTest, ManySameNamedComputationsTakeTheLeastFreeSuffix) {
  HloModule m("bodies");
  std::vector<HloComputation*> c;
  for (int i = 0; i < 200; ++i) {
    c.push_back(m.AddComputation(std::make_unique<HloComputation>("loop")));
  }
  EXPECT_EQ(c[0]->name(), "loop");
  EXPECT_EQ(c[1]->name(), "loop.1");
  EXPECT_EQ(c[199]->name(), "loop.199");
  ASSERT_TRUE(m.RemoveComputation(c[150]).ok());  // frees loop.150
  c[40]->set_name("renamed");                      // frees loop.40
  ASSERT_TRUE(m.RemoveComputation(c[90]).ok());    // frees loop.90
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.40");
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.90");
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.150");
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.200");
  // A freed name that only looks like a suffix ("loop.07") frees nothing below the hint.
  HloComputation* odd = m.AddComputation(std::make_unique<HloComputation>("loop.07"));
  EXPECT_EQ(odd->name(), "loop.07");
  ASSERT_TRUE(m.RemoveComputation(odd).ok());
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.201");
  // The hint travels with a clone.
  auto copy = m.Clone();
  EXPECT_EQ(copy->AddComputation(std::make_unique<HloComputation>("loop"))->name(), "loop.202");
  // Bases with dots keep their own hints.
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop.1"))->name(), "loop.1.1");
  EXPECT_EQ(m.AddComputation(std::make_unique<HloComputation>("loop.1"))->name(), "loop.1.2");
}

}  // namespace
}  // namespace weave
