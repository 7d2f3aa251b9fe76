// Unit tests of the dot-merger as the pipeline registers it, with the windowed einsum guard
// (windowed_einsum/dot_merge_guard.h): which dots it refuses and why. XLA's merger alone:
// tests/unit/passes/dot_merger_test.cc; numerics: tests/lit/dot-merger*.hlo.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"
#include "passes/pass_test_util.h"

namespace weave {
namespace {

using testing_util::Count;
using testing_util::PassRun;
using testing_util::Parse;
using testing_util::RunPass;

constexpr char kMergeModule[] = R"(HloModule dm
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  a = f32[16,4]{1,0} parameter(1)
  b = f32[16,12]{1,0} parameter(2)
  q = f8e4m3fn[16,4]{1,0} parameter(3)
  q.w = f32[16,4]{1,0} convert(q)
  d0 = f32[8,4]{1,0} dot(x, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,12]{1,0} dot(x, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d2 = f32[8,4]{1,0} dot(x, q.w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,4]{1,0}, f32[8,12]{1,0}, f32[8,4]{1,0}) tuple(d0, d1, d2)
}
)";

TEST(DotMergeGuard, MergesPlainDotsButNotFp8) {
  auto m = Parse(kMergeModule);
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_TRUE(r.changed);
  // d0 and d1 -> one dot over concatenate(a, b); d2 (unscaled FP8 rhs) stays.
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
  EXPECT_EQ(Count(*m, HloOpcode::kConcatenate), 1);
  EXPECT_EQ(Count(*m, HloOpcode::kSlice), 2);
  const HloInstruction* root = m->entry()->root();
  EXPECT_EQ(root->operand(2)->name(), "d2");
  ASSERT_EQ(root->operand(0)->opcode(), HloOpcode::kSlice);
  const HloInstruction* merged = root->operand(0)->operand(0);
  EXPECT_EQ(merged->shape().dims, (std::vector<int64_t>{8, 16}));
  // XLA's order in the concatenation: most trailing zero bits of the free size first (4 and 12
  // have two each), then the larger: d1 takes columns [0, 12), d0 [12, 16).
  EXPECT_EQ(root->operand(1)->slice()[1].start, 0);
  EXPECT_EQ(root->operand(1)->slice()[1].limit, 12);
  EXPECT_EQ(root->operand(0)->slice()[1].start, 12);
  bool refused_fp8 = false;
  for (const Remark& rm : r.remarks) {
    refused_fp8 |= rm.location == "d2" && !rm.applied &&
                   rm.message.find("derives from FP8") != std::string::npos;
  }
  EXPECT_TRUE(refused_fp8);
}

TEST(DotMergeGuard, ThresholdOption) {
  auto m = Parse(kMergeModule);
  ASSERT_NE(m, nullptr);
  PassOptions opts;
  opts.Set("dot-merger-threshold-mb", "0");
  EXPECT_FALSE(RunPass(m.get(), "dot-merger", opts).changed);
  PassOptions bad;
  bad.Set("dot-merger-threshold-mb", "-1");
  EXPECT_FALSE(PassRegistry::Get().Create("dot-merger", bad).ok());
}

// A ring loop: the body has two per-step dots sharing `xs` (the shape of the partial dots that
// windowed-einsum-decomposer emits). With `$PERMUTE` a collective-permute, the body is a windowed
// einsum step; with a plain copy it is an ordinary loop.
constexpr char kLoopModule[] = R"(HloModule dml, num_partitions=2
step {
  st = (f32[8,16]{1,0}, f32[16,4]{1,0}, f32[16,12]{1,0}, f32[8,4]{1,0}, f32[8,12]{1,0}, s32[]) parameter(0)
  xs = f32[8,16]{1,0} get-tuple-element(st), index=0
  wa = f32[16,4]{1,0} get-tuple-element(st), index=1
  wb = f32[16,12]{1,0} get-tuple-element(st), index=2
  aa = f32[8,4]{1,0} get-tuple-element(st), index=3
  ab = f32[8,12]{1,0} get-tuple-element(st), index=4
  it = s32[] get-tuple-element(st), index=5
  stepA = f32[8,4]{1,0} dot(xs, wa), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  stepB = f32[8,12]{1,0} dot(xs, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  aa1 = f32[8,4]{1,0} add(aa, stepA)
  ab1 = f32[8,12]{1,0} add(ab, stepB)
  xs1 = f32[8,16]{1,0} $PERMUTE
  one = s32[] constant(1)
  it1 = s32[] add(it, one)
  ROOT nx = (f32[8,16]{1,0}, f32[16,4]{1,0}, f32[16,12]{1,0}, f32[8,4]{1,0}, f32[8,12]{1,0}, s32[]) tuple(xs1, wa, wb, aa1, ab1, it1)
}
more {
  cs = (f32[8,16]{1,0}, f32[16,4]{1,0}, f32[16,12]{1,0}, f32[8,4]{1,0}, f32[8,12]{1,0}, s32[]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=5
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  a = f32[16,4]{1,0} parameter(1)
  b = f32[16,12]{1,0} parameter(2)
  z = f32[] constant(0)
  za = f32[8,4]{1,0} broadcast(z), dimensions={}
  zb = f32[8,12]{1,0} broadcast(z), dimensions={}
  i0 = s32[] constant(0)
  init = (f32[8,16]{1,0}, f32[16,4]{1,0}, f32[16,12]{1,0}, f32[8,4]{1,0}, f32[8,12]{1,0}, s32[]) tuple(x, a, b, za, zb, i0)
  ROOT ring = (f32[8,16]{1,0}, f32[16,4]{1,0}, f32[16,12]{1,0}, f32[8,4]{1,0}, f32[8,12]{1,0}, s32[]) while(init), condition=more, body=step
}
)";

std::string LoopModule(const std::string& xs1) {
  std::string text = kLoopModule;
  text.replace(text.find("$PERMUTE"), 8, xs1);
  return text;
}

bool HasMissed(const PassRun& r, const std::string& location, const std::string& needle) {
  return testing_util::HasMissed(r.remarks, location, needle);
}

TEST(DotMergeGuard, KeepsWindowedEinsumLoopStepsApart) {
  auto m = Parse(LoopModule(
      "collective-permute(xs), channel_id=1, source_target_pairs={{0,1},{1,0}}"));
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
  EXPECT_EQ(Count(*m, HloOpcode::kConcatenate), 0);
  EXPECT_TRUE(HasMissed(r, "stepA", "is a step of the windowed einsum loop body 'step'"));
  EXPECT_TRUE(HasMissed(r, "stepB", "circulates values with collective-permute"));
}

TEST(DotMergeGuard, MergesDotsOfAnOrdinaryLoopBody) {
  // Same loop without a collective-permute: not a windowed einsum, so the dots merge.
  auto m = Parse(LoopModule("copy(xs)"));
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(Count(*m, HloOpcode::kDot), 1);
  EXPECT_EQ(Count(*m, HloOpcode::kConcatenate), 1);
}

// Two dots sharing `x`; `d1` gets backend_config $CFG.
std::string StreamModule(const std::string& cfg) {
  return std::string(R"(HloModule dms
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  a = f32[16,4]{1,0} parameter(1)
  b = f32[16,12]{1,0} parameter(2)
  d0 = f32[8,4]{1,0} dot(x, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,12]{1,0} dot(x, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config=)" + cfg + R"(
  ROOT t = (f32[8,4]{1,0}, f32[8,12]{1,0}) tuple(d0, d1)
}
)");
}

TEST(DotMergeGuard, KeepsDotsWithAStreamAnnotation) {
  for (const char* cfg : {R"({"operation_queue_id":"3","wait_on_operation_queues":[]})",
                          R"({"operation_queue_id":5})",
                          R"({"operation_queue_id":"0","force_earliest_schedule":true})"}) {
    SCOPED_TRACE(cfg);
    auto m = Parse(StreamModule(cfg));
    ASSERT_NE(m, nullptr);
    PassRun r = RunPass(m.get(), "dot-merger");
    EXPECT_FALSE(r.changed);
    EXPECT_EQ(Count(*m, HloOpcode::kDot), 2);
    EXPECT_TRUE(HasMissed(r, "d1", "carries a stream annotation"));
  }
}

TEST(DotMergeGuard, MergesDotsOnTheMainStream) {
  // operation_queue_id 0 is the main stream: no pin, the pair merges. So is a queue id that is no
  // decimal integer ("12abc", "-4", a float): the handler and the simulator read those as queue
  // 0 (OperationQueueId, passes/gpu_backend_config.h), and the merger reads them the same way.
  for (const char* cfg : {R"({"operation_queue_id":"0","wait_on_operation_queues":[]})",
                          R"({"operation_queue_id":"12abc"})", R"({"operation_queue_id":"-4"})",
                          R"({"operation_queue_id":3.0})"}) {
    SCOPED_TRACE(cfg);
    auto m = Parse(StreamModule(cfg));
    ASSERT_NE(m, nullptr);
    const HloInstruction* d1 = m->entry()->GetInstruction("d1");
    ASSERT_NE(d1, nullptr);
    EXPECT_EQ(OperationQueueId(*d1), 0);
    PassRun r = RunPass(m.get(), "dot-merger");
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(Count(*m, HloOpcode::kDot), 1);
  }
}

TEST(DotMergeGuard, StreamRemarkGivesTheQueueAsRead) {
  // A queue written with leading zeros is that queue: the remark gives the number it reads.
  auto m = Parse(StreamModule(R"({"operation_queue_id":"007"})"));
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(HasMissed(r, "d1", "stream annotation (backend_config operation_queue_id=7)"));
}

// A loop whose per-step GEMM is already a cuBLAS call (after fp8-gemm-rewriter) is a windowed
// einsum loop too (WindowedStepScan): two dots reading its result are refused, and the same two
// dots after a loop that only copies (no collective-permute) merge.
TEST(DotMergeGuard, KeepsDotsReadingAGemmCallLoopApart) {
  const std::string loop = R"(HloModule dmg, num_partitions=2
body {
  st = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) parameter(0)
  x = f32[8,16]{1,0} get-tuple-element(st), index=0
  w = f32[16,16]{1,0} get-tuple-element(st), index=1
  i = s32[] get-tuple-element(st), index=2
  g = (f32[8,16]{1,0}, s8[0]{0}) custom-call(x, w), custom_call_target="__cublas$gemm"
  y = f32[8,16]{1,0} get-tuple-element(g), index=0
  yn = f32[8,16]{1,0} $NEXT
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT nx = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) tuple(yn, w, i1)
}
cond {
  cs = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=2
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}
ENTRY main {
  x0 = f32[8,16]{1,0} parameter(0)
  w0 = f32[16,16]{1,0} parameter(1)
  a = f32[16,4]{1,0} parameter(2)
  b = f32[16,12]{1,0} parameter(3)
  i0 = s32[] constant(0)
  init = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) tuple(x0, w0, i0)
  lp = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) while(init), condition=cond, body=body
  cache = f32[8,16]{1,0} get-tuple-element(lp), index=0
  d0 = f32[8,4]{1,0} dot(cache, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,12]{1,0} dot(cache, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,4]{1,0}, f32[8,12]{1,0}) tuple(d0, d1)
}
)";
  auto with = [&](const std::string& next) {
    std::string text = loop;
    text.replace(text.find("$NEXT"), 5, next);
    return text;
  };
  auto ring = Parse(with("collective-permute(y), channel_id=1, source_target_pairs={{0,1},{1,0}}"));
  ASSERT_NE(ring, nullptr);
  PassRun r = RunPass(ring.get(), "dot-merger");
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(HasMissed(r, "d0", "reads windowed loop 'lp' (element 0)"));
  auto plain = Parse(with("copy(y)"));
  ASSERT_NE(plain, nullptr);
  EXPECT_TRUE(RunPass(plain.get(), "dot-merger").changed);
  EXPECT_EQ(Count(*plain, HloOpcode::kDot), 1);
}

// A dot refused for two reasons gets the per-dot one: d1 is a step of a hand-written ring (it
// reads x after one collective-permute, d0 before it) and carries a stream annotation.
TEST(DotMergeGuard, PerDotReasonBeforeTheHandWrittenRing) {
  auto m = Parse(R"(HloModule dmr, num_partitions=2
ENTRY main {
  x = f32[8,16]{1,0} parameter(0)
  w = f32[16,4]{1,0} parameter(1)
  xp = f32[8,16]{1,0} collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  d0 = f32[8,4]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d1 = f32[8,4]{1,0} dot(xp, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"2"}
  ROOT t = (f32[8,4]{1,0}, f32[8,4]{1,0}) tuple(d0, d1)
}
)");
  ASSERT_NE(m, nullptr);
  PassRun r = RunPass(m.get(), "dot-merger");
  EXPECT_FALSE(r.changed);
  EXPECT_TRUE(HasMissed(r, "d0", "is step 0 of a hand-written collective matmul"));
  EXPECT_TRUE(HasMissed(r, "d1", "carries a stream annotation (backend_config operation_queue_id=2)"));
  EXPECT_FALSE(HasMissed(r, "d1", "hand-written"));
}

}  // namespace
}  // namespace weave
