// Unit tests of WindowedStepScan (windowed_einsum/windowed_step_scan.h): which loop bodies hold a
// windowed einsum step, with the GEMM and the permute in the body or in what it calls.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "windowed_einsum/windowed_step_scan.h"

namespace weave {
namespace {

// A loop whose body runs the lines $STEP on x (f32[8,16]) and w (f32[16,16]) into y (f32[8,16]),
// then the lines $SEND on y into yn. Helper computations the steps may call: `mm` (a dot), `cp` (a permute),
// `plain` (a negate).
constexpr char kLoop[] = R"(HloModule scan, num_partitions=2
mm {
  ma = f32[8,16]{1,0} parameter(0)
  mb = f32[16,16]{1,0} parameter(1)
  ROOT md = f32[8,16]{1,0} dot(ma, mb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
cp {
  ca = f32[8,16]{1,0} parameter(0)
  ROOT cc = f32[8,16]{1,0} collective-permute(ca), channel_id=2, source_target_pairs={{0,1},{1,0}}
}
plain {
  pa = f32[8,16]{1,0} parameter(0)
  ROOT pn = f32[8,16]{1,0} negate(pa)
}
body {
  st = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) parameter(0)
  x = f32[8,16]{1,0} get-tuple-element(st), index=0
  w = f32[16,16]{1,0} get-tuple-element(st), index=1
  i = s32[] get-tuple-element(st), index=2
  $STEP
  $SEND
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
  i0 = s32[] constant(0)
  init = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) tuple(x0, w0, i0)
  ROOT lp = (f32[8,16]{1,0}, f32[16,16]{1,0}, s32[]) while(init), condition=cond, body=body
}
)";

constexpr char kDot[] =
    "y = f32[8,16]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}";
constexpr char kPermute[] =
    "yn = f32[8,16]{1,0} collective-permute(y), channel_id=1, source_target_pairs={{0,1},{1,0}}";

struct Answer {
  bool step = false;
  bool permute = false;
  bool loop = false;
};

Answer Scan(const std::string& step, const std::string& send) {
  std::string text = kLoop;
  text.replace(text.find("$STEP"), 5, step);
  text.replace(text.find("$SEND"), 5, send);
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "scan");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  const HloInstruction* lp = (*m)->entry()->root();
  WindowedStepScan scan;
  Answer a;
  a.step = scan.HoldsWindowedStep(lp->while_body());
  a.permute = scan.HoldsPermute(lp->while_body());
  a.loop = scan.IsWindowedEinsumLoop(*lp);
  // The entry is no loop body, but it calls the loop: what it holds includes the body's.
  EXPECT_EQ(scan.HoldsWindowedStep((*m)->entry()), a.step);
  EXPECT_FALSE(scan.IsWindowedEinsumLoop(*(*m)->entry()->GetInstruction("init")));
  return a;
}

TEST(WindowedStepScan, DotAndPermuteInTheBody) {
  Answer a = Scan(kDot, kPermute);
  EXPECT_TRUE(a.step);
  EXPECT_TRUE(a.permute);
  EXPECT_TRUE(a.loop);
}

TEST(WindowedStepScan, AsyncPermuteStartCounts) {
  Answer a = Scan(kDot,
                  "ys = (f32[8,16]{1,0}, f32[8,16]{1,0}) collective-permute-start(y), channel_id=1, "
                  "source_target_pairs={{0,1},{1,0}}\n"
                  "  yn = f32[8,16]{1,0} collective-permute-done(ys)");
  EXPECT_TRUE(a.loop);
}

TEST(WindowedStepScan, GemmsOfEveryForm) {
  // A fusion holding the dot, a call, a cuBLAS GEMM call, a block-scaled dot call.
  EXPECT_TRUE(Scan("y = f32[8,16]{1,0} fusion(x, w), kind=kOutput, calls=mm", kPermute).loop);
  EXPECT_TRUE(Scan("y = f32[8,16]{1,0} call(x, w), to_apply=mm", kPermute).loop);
  EXPECT_TRUE(Scan("g = (f32[8,16]{1,0}, s8[0]{0}) custom-call(x, w), "
                   "custom_call_target=\"__cublas$lt$matmul\"\n"
                   "  y = f32[8,16]{1,0} get-tuple-element(g), index=0",
                   kPermute)
                  .loop);
  EXPECT_TRUE(Scan("y = f32[8,16]{1,0} custom-call(x, w, x, w), "
                   "custom_call_target=\"__op$block_scaled_dot\"",
                   kPermute)
                  .loop);
}

TEST(WindowedStepScan, PermuteInACalledComputation) {
  Answer a = Scan(kDot, "yn = f32[8,16]{1,0} call(y), to_apply=cp");
  EXPECT_TRUE(a.permute);
  EXPECT_TRUE(a.loop);
}

TEST(WindowedStepScan, NotAStepWithoutBoth) {
  // A permute without a GEMM: a ring, no windowed einsum step.
  Answer ring = Scan("y = f32[8,16]{1,0} negate(x)", kPermute);
  EXPECT_TRUE(ring.permute);
  EXPECT_FALSE(ring.step);
  EXPECT_FALSE(ring.loop);
  // A GEMM without a permute: an ordinary loop.
  Answer plain = Scan(kDot, "yn = f32[8,16]{1,0} call(y), to_apply=plain");
  EXPECT_FALSE(plain.permute);
  EXPECT_FALSE(plain.loop);
  // Another custom call is no GEMM.
  EXPECT_FALSE(
      Scan("y = f32[8,16]{1,0} custom-call(x, w), custom_call_target=\"my_kernel\"", kPermute)
          .loop);
}

TEST(WindowedStepScan, NullIsNothing) {
  WindowedStepScan scan;
  EXPECT_FALSE(scan.HoldsWindowedStep(nullptr));
  EXPECT_FALSE(scan.HoldsPermute(nullptr));
}

}  // namespace
}  // namespace weave
