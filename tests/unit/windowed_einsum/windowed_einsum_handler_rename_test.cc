// ReplaceInit / ApplyPendingRenames (windowed_einsum/windowed_einsum_handler_internal.h): a loop init that a
// later step replaced again, and that dead-code removal then freed, is never renamed (the
// handler once wrote the name into the freed instruction: a heap use-after-free found by
// weave-fuzz, seed 962 of the CI set, once collective-quantizer ran before the handler).
#include <memory>
#include <string>

#include "windowed_einsum/windowed_einsum_handler_internal.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave {
namespace {

constexpr char kLoop[] = R"(HloModule loop, num_partitions=2

body {
  p = (f32[4], u32[]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  k = u32[] get-tuple-element(p), index=1
  one = u32[] constant(1)
  k1 = u32[] add(k, one)
  ROOT next = (f32[4], u32[]) tuple(x, k1)
}

cond {
  p = (f32[4], u32[]) parameter(0)
  k = u32[] get-tuple-element(p), index=1
  two = u32[] constant(2)
  ROOT lt = pred[] compare(k, two), direction=LT
}

ENTRY main {
  a = f32[4] parameter(0)
  zero = u32[] constant(0)
  loop_init = (f32[4], u32[]) tuple(a, zero)
  w = (f32[4], u32[]) while(loop_init), condition=cond, body=body
  ROOT out = f32[4] get-tuple-element(w), index=0
}
)";

// The parsed loop: its entry computation, the while and its state shape.
class HandlerRename : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = ParseHloModule(kLoop);
    ASSERT_TRUE(m.ok()) << m.status();
    module_ = std::move(*m);
    entry = module_->entry();
    w = entry->GetInstruction("w");
    ASSERT_NE(w, nullptr);
    state = w->shape();
  }
  std::unique_ptr<HloModule> module_;
  HloComputation* entry = nullptr;
  HloInstruction* w = nullptr;
  Shape state;
};

TEST_F(HandlerRename, ReplacedTwiceTakesTheFirstName) {
  handler_internal::PendingRenames pending;
  // Two steps each give the loop a new init; the first new init becomes dead at once.
  ASSERT_TRUE(handler_internal::ReplaceInit(w, state, {entry->GetInstruction("a"),
                                                       entry->GetInstruction("zero")},
                                            &pending).ok());
  HloInstruction* first = w->operand(0);
  ASSERT_TRUE(handler_internal::ReplaceInit(w, state, {first->operand(0),
                                                       first->operand(1)},
                                            &pending).ok());
  HloInstruction* second = w->operand(0);
  EXPECT_EQ(pending.size(), 1u);
  entry->RemoveDeadCode();  // frees the original init and `first`
  handler_internal::ApplyPendingRenames(entry, &pending);
  EXPECT_EQ(second->name(), "loop_init");
  EXPECT_TRUE(pending.empty());
}

TEST_F(HandlerRename, FreedPendingInstructionIsSkipped) {
  HloInstruction* a = entry->GetInstruction("a");
  HloInstruction* zero = entry->GetInstruction("zero");
  handler_internal::PendingRenames pending;
  ASSERT_TRUE(handler_internal::ReplaceInit(w, state, {a, zero}, &pending).ok());
  HloInstruction* made = w->operand(0);
  // Another step (not ReplaceInit) rewires the loop to a tuple of its own while `made` still
  // waits for its name; dead-code removal then frees `made`.
  HloInstruction* other = entry->AddInstruction(HloOpcode::kTuple, state, {a, zero}, "other");
  ASSERT_TRUE(w->ReplaceOperandWith(0, other).ok());
  entry->RemoveDeadCode();
  handler_internal::ApplyPendingRenames(entry, &pending);  // must not touch the freed `made`
  EXPECT_EQ(other->name(), "other");
  EXPECT_EQ(entry->GetInstruction("loop_init"), nullptr);
  (void)made;
}

}  // namespace
}  // namespace weave
