// InstructionIndex: slots by instruction over a compact id range (a table), a spread-out one and
// one where two instructions share an id (a hash map), and instructions outside the set.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/instruction_index.h"
#include "hlo/parser.h"

namespace weave {
namespace {

constexpr char kModule[] = R"(HloModule idx
ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] negate(x)
  z = f32[4] add(x, y)
  ROOT r = f32[4] multiply(y, z)
}
)";

std::unique_ptr<HloModule> Parse() {
  auto m = ParseHloModule(kModule, "idx.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? *std::move(m) : nullptr;
}

TEST(InstructionIndexTest, PostOrderSlots) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  const std::vector<HloInstruction*> order = m->entry()->MakeInstructionPostOrder();
  const InstructionIndex index(order);
  ASSERT_EQ(index.size(), order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_EQ(index.Slot(order[k]), static_cast<int32_t>(k));
    EXPECT_EQ(index.at(k), order[k]);
  }
  // Not in the set: an instruction made later (an id past the range), one of a copy of the
  // module (the same ids: a copy keeps them), and one left out of the set.
  HloInstruction* later = m->entry()->AddInstruction(
      HloInstruction::Create(HloOpcode::kNegate, order[0]->shape(), {order[0]}));
  EXPECT_EQ(index.Slot(later), -1);
  auto copy = m->Clone();
  for (const HloInstruction* i : copy->entry()->instructions()) EXPECT_EQ(index.Slot(i), -1);
  const InstructionIndex partial(std::vector<HloInstruction*>(order.begin() + 1, order.end()));
  EXPECT_EQ(partial.Slot(order[0]), -1);
  EXPECT_EQ(partial.Slot(order[1]), 0);
}

TEST(InstructionIndexTest, SpreadOutIdsAndSharedIds) {
  auto m = Parse();
  ASSERT_NE(m, nullptr);
  HloInstruction* x = m->entry()->parameter(0);
  // Ids far apart: thousands of instructions made (and dropped) between two that are kept.
  std::vector<HloInstruction*> set = {x};
  for (int k = 0; k < 5000; ++k) HloInstruction::Create(HloOpcode::kNegate, x->shape(), {});
  set.push_back(m->entry()->AddInstruction(
      HloInstruction::Create(HloOpcode::kNegate, x->shape(), {x})));
  const InstructionIndex spread(set);
  EXPECT_EQ(spread.Slot(set[0]), 0);
  EXPECT_EQ(spread.Slot(set[1]), 1);
  EXPECT_EQ(spread.Slot(m->entry()->root()), -1);
  // A module and its copy in one set: every instruction's id is taken twice.
  auto copy = m->Clone();
  std::vector<HloInstruction*> both = m->entry()->MakeInstructionPostOrder();
  const std::vector<HloInstruction*> theirs = copy->entry()->MakeInstructionPostOrder();
  both.insert(both.end(), theirs.begin(), theirs.end());
  const InstructionIndex shared(both);
  for (size_t k = 0; k < both.size(); ++k) EXPECT_EQ(shared.Slot(both[k]), static_cast<int32_t>(k));
}

}  // namespace
}  // namespace weave
