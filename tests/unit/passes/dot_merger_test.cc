// Unit tests of XLA's dot merger as passes/dot_merger.h builds it without the pipeline's guard:
// what the caller passes in (the operation queue, the guard) decides, and nothing else refuses.
// The pipeline's guarded merger: tests/unit/windowed_einsum/dot_merge_guard_test.cc.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/dot_merger.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"
#include "pass_test_util.h"

namespace weave {
namespace {

using testing_util::Count;
using testing_util::Parse;

// d0, d1 and the FP8-derived d2 share x; d1 names operation queue 3.
constexpr char kModule[] = R"(HloModule dmx
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  a = f32[16,4]{1,0} parameter(1)
  b = f32[16,12]{1,0} parameter(2)
  q = f8e4m3fn[16,4]{1,0} parameter(3)
  qw = f32[16,4]{1,0} convert(q)
  d0 = f32[8,4]{1,0} dot(x, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,12]{1,0} dot(x, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"3"}
  d2 = f32[8,4]{1,0} dot(x, qw), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,4]{1,0}, f32[8,12]{1,0}, f32[8,4]{1,0}) tuple(d0, d1, d2)
}
)";

struct Result {
  bool changed = false;
  std::vector<Remark> remarks;
};

Result RunMerger(HloModule* m, DotMerger merger) {
  Result r;
  merger.set_remarks(&r.remarks);
  absl::StatusOr<bool> changed = merger.Run(m);
  EXPECT_TRUE(changed.ok()) << changed.status();
  r.changed = changed.ok() && *changed;
  return r;
}

bool Missed(const Result& r, const std::string& where, const std::string& needle) {
  return testing_util::HasMissed(r.remarks, where, needle);
}

TEST(DotMerger, WithoutQueueOrGuardMergesEveryDotSharingTheValue) {
  // XLA's defaults: every dot on queue 0, no refusal beyond XLA's own: the FP8-derived dot and the
  // queue-3 dot merge with d0 into one dot over a three-way concatenation.
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  Result r = RunMerger(m.get(), DotMerger());
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 1);
  EXPECT_EQ(Count(*m, HloOpcode::kConcatenate), 1);
  EXPECT_EQ(Count(*m, HloOpcode::kSlice), 3);
}

TEST(DotMerger, QueueIdFromTheCallerKeepsQueuesApart) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  Result r = RunMerger(m.get(), DotMerger(int64_t{32} << 20, [](const HloInstruction& dot) {
                         return OperationQueueId(dot);
                       }));
  EXPECT_TRUE(r.changed);  // d0 and d2 (queue 0) merge; d1 (queue 3) stays
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
  EXPECT_NE(m->entry()->GetInstruction("d1"), nullptr);
  EXPECT_TRUE(Missed(r, "d1", "they run on different operation queues"));
}

// Refuses the dots it is told to, with its own words; records what the merger asked.
class RefuseByName : public DotMergeGuard {
 public:
  explicit RefuseByName(std::string name) : name_(std::move(name)) {}
  void Prepare(const HloModule&) override { ++prepared; }
  std::map<const HloInstruction*, std::string> Refusals(const std::vector<HloInstruction*>& dots,
                                                        int64_t side) override {
    std::map<const HloInstruction*, std::string> out;
    for (const HloInstruction* d : dots) {
      sides.push_back(side);
      if (d->name() == name_) out[d] = "the test guard says no";
    }
    return out;
  }
  int prepared = 0;
  std::vector<int64_t> sides;

 private:
  std::string name_;
};

TEST(DotMerger, TheGuardRefusesWithItsReason) {
  auto m = Parse(kModule);
  ASSERT_NE(m, nullptr);
  auto guard = std::make_shared<RefuseByName>("d2");
  Result r = RunMerger(m.get(), DotMerger(int64_t{32} << 20, nullptr, guard));
  EXPECT_EQ(guard->prepared, 1);
  ASSERT_FALSE(guard->sides.empty());
  EXPECT_EQ(guard->sides.front(), 0);  // x is every dot's lhs
  EXPECT_TRUE(r.changed);              // d0 and d1 merge
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
  EXPECT_NE(m->entry()->GetInstruction("d2"), nullptr);
  EXPECT_TRUE(Missed(r, "d2", "not merged: the test guard says no"));
}

TEST(DotMerger, ThresholdBytesReadsMebibytes) {
  PassOptions one;
  one.Set("dot-merger-threshold-mb", "1.5");
  absl::StatusOr<int64_t> bytes = DotMerger::ThresholdBytes(one);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 1572864);
  EXPECT_EQ(*DotMerger::ThresholdBytes(PassOptions()), int64_t{32} << 20);
  PassOptions negative;
  negative.Set("dot-merger-threshold-mb", "-1");
  EXPECT_FALSE(DotMerger::ThresholdBytes(negative).ok());
}

}  // namespace
}  // namespace weave
