// Unit tests of windowed loop recognition (windowed_einsum/windowed_loop.h) and of the
// windowed-einsum-handler pass object (registry, options, idempotence).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "windowed_einsum/windowed_einsum_handler.h"
#include "windowed_einsum/windowed_loop.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "shared_files.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {
namespace {

std::unique_ptr<HloModule> Load(const std::string& example) {
  auto m = ParseHloModuleFile(weave::testfiles::SharedPath("examples/" + example));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

HloInstruction* Find(HloModule* m, const std::string& name) {
  for (HloComputation* c : m->computations()) {
    if (HloInstruction* i = c->GetInstruction(name)) return i;
  }
  return nullptr;
}

// A rolled all-gather loop over 3 partitions (the permute guarded by a conditional).
constexpr char kRolled[] = R"(HloModule rolled, num_partitions=3

send {
  window = bf16[4,16]{1,0} parameter(0)
  ROOT sent = bf16[4,16]{1,0} collective-permute(window), channel_id=1, source_target_pairs={{0,2},{1,0},{2,1}}
}

keep {
  ROOT window = bf16[4,16]{1,0} parameter(0)
}

body {
  st = (bf16[4,16]{1,0}, bf16[16,8]{1,0}, bf16[12,8]{1,0}, bf16[12,8]{1,0}, u32[]) parameter(0)
  shard = bf16[4,16]{1,0} get-tuple-element(st), index=0
  wt = bf16[16,8]{1,0} get-tuple-element(st), index=1
  acc = bf16[12,8]{1,0} get-tuple-element(st), index=2
  spare = bf16[12,8]{1,0} get-tuple-element(st), index=3
  k = u32[] get-tuple-element(st), index=4
  zero = s32[] constant(0)
  table = s32[3]{0} constant({0, 4, 8})
  pid = u32[] partition-id()
  n = u32[] constant(3)
  one = u32[] constant(1)
  kp = u32[] add(k, pid)
  blk = u32[] remainder(kp, n)
  offv = s32[1]{0} dynamic-slice(table, blk), dynamic_slice_sizes={1}
  off = s32[] reshape(offv)
  part = bf16[4,8]{1,0} dot(shard, wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  acc1 = bf16[12,8]{1,0} dynamic-update-slice(acc, part, off, zero)
  k1 = u32[] add(k, one)
  more = pred[] compare(k1, n), direction=LT
  nxt = bf16[4,16]{1,0} conditional(more, shard, shard), true_computation=send, false_computation=keep
  ROOT next = (bf16[4,16]{1,0}, bf16[16,8]{1,0}, bf16[12,8]{1,0}, bf16[12,8]{1,0}, u32[]) tuple(nxt, wt, acc1, spare, k1)
}

cond {
  cst = (bf16[4,16]{1,0}, bf16[16,8]{1,0}, bf16[12,8]{1,0}, bf16[12,8]{1,0}, u32[]) parameter(0)
  ck = u32[] get-tuple-element(cst), index=4
  trips = u32[] constant(3)
  ROOT more = pred[] compare(ck, trips), direction=LT
}

ENTRY main {
  x = bf16[4,16]{1,0} parameter(0), sharding={devices=[3,1]<=[3]}
  w = bf16[16,8]{1,0} parameter(1), sharding={replicated}
  fz = bf16[] constant(0)
  zeros = bf16[12,8]{1,0} broadcast(fz), dimensions={}
  k0 = u32[] constant(0)
  init = (bf16[4,16]{1,0}, bf16[16,8]{1,0}, bf16[12,8]{1,0}, bf16[12,8]{1,0}, u32[]) tuple(x, w, zeros, zeros, k0)
  loop = (bf16[4,16]{1,0}, bf16[16,8]{1,0}, bf16[12,8]{1,0}, bf16[12,8]{1,0}, u32[]) while(init), condition=cond, body=body
  ROOT y = bf16[12,8]{1,0} get-tuple-element(loop), index=2
}
)";

TEST(WindowedLoopTest, RecognisesUnrolledAllGatherLoop) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_single.hlo");
  auto m = Load("ag_bf16_single.hlo");
  ASSERT_NE(m, nullptr);
  std::string why;
  auto L = MatchWindowedLoop(Find(m.get(), "loop"), &why);
  ASSERT_TRUE(L.has_value()) << why;
  EXPECT_EQ(L->kind, WindowedLoopKind::kAllGather);
  EXPECT_EQ(L->layout, WindowedLoopLayout::kUnrolledByTwo);
  EXPECT_EQ(L->windowed_operand, 0);
  EXPECT_EQ(L->trip_count, 2);
  EXPECT_EQ(L->ring_size, 4);
  EXPECT_EQ(L->dots.size(), 2u);
  EXPECT_EQ(L->permutes.size(), 2u);
  EXPECT_EQ(L->root_ring.size(), 2u);
  EXPECT_EQ(L->dots[0].ring.size(), 0u);
  EXPECT_EQ(L->dots[1].ring.size(), 1u);
  ASSERT_NE(L->dots[1].merge, nullptr);
  EXPECT_EQ(L->dots[1].merge->name(), "acc2");
  EXPECT_THAT(L->source_target_pairs,
              ::testing::ElementsAre(std::pair<int64_t, int64_t>{0, 3},
                                     std::pair<int64_t, int64_t>{1, 0},
                                     std::pair<int64_t, int64_t>{2, 1},
                                     std::pair<int64_t, int64_t>{3, 2}));
  EXPECT_EQ(L->name_hint, "windowed_dot_general_body_ag");
  EXPECT_FALSE(L->fp8_operands);
  EXPECT_FALSE(L->cache_index.has_value());
}

TEST(WindowedLoopTest, RecognisesReduceScatterLoop) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/rs_fp8.hlo");
  auto m = Load("rs_fp8.hlo");
  ASSERT_NE(m, nullptr);
  std::string why;
  auto L = MatchWindowedLoop(Find(m.get(), "loop"), &why);
  ASSERT_TRUE(L.has_value()) << why;
  EXPECT_EQ(L->kind, WindowedLoopKind::kReduceScatter);
  EXPECT_EQ(L->windowed_operand, 0);
  EXPECT_EQ(L->trip_count, 2);
  EXPECT_EQ(L->ring_size, 4);
  EXPECT_EQ(L->dots.size(), 2u);
  for (const WindowedDot& d : L->dots) {
    ASSERT_NE(d.merge, nullptr);
    EXPECT_EQ(d.merge->opcode(), HloOpcode::kAdd);
  }
}

TEST(WindowedLoopTest, RecognisesRolledLoopByStructure) {
  auto m = ParseHloModule(kRolled, "rolled");
  ASSERT_TRUE(m.ok()) << m.status();
  std::string why;
  auto L = MatchWindowedLoop(Find(m->get(), "loop"), &why);
  ASSERT_TRUE(L.has_value()) << why;
  EXPECT_EQ(L->layout, WindowedLoopLayout::kRolled);
  EXPECT_EQ(L->trip_count, 3);
  EXPECT_EQ(L->ring_size, 3);
  EXPECT_EQ(L->conditionals.size(), 1u);
  EXPECT_TRUE(L->name_hint.empty());  // names play no part
  ASSERT_EQ(L->root_ring.size(), 1u);
  EXPECT_NE(L->root_ring[0].predicate, nullptr);
  // The guard permutes on trips 0 and 1 only.
  HloInstruction* P = L->body->parameter(0);
  std::vector<int64_t> holder = {0, 1, 2};
  for (int64_t k = 0; k < 3; ++k) {
    auto next = ApplyRingSteps(L->root_ring, holder, ScalarEnv{P, 4, k, 0});
    ASSERT_TRUE(next.has_value());
    holder = *next;
  }
  // After two shifts s -> s-1, partition p holds the shard of p+2 (mod 3).
  EXPECT_THAT(holder, ::testing::ElementsAre(2, 0, 1));
}

TEST(WindowedLoopTest, RejectsWithReason) {
  auto m = ParseHloModule(kRolled, "rolled");
  ASSERT_TRUE(m.ok()) << m.status();
  // Without the permute there is no ring.
  HloInstruction* sent = Find(m->get(), "sent");
  ASSERT_NE(sent, nullptr);
  HloComputation* send = sent->parent();
  HloInstruction* copy = send->AddInstruction(HloOpcode::kCopy, sent->shape(),
                                              {send->parameter(0)}, "copied");
  send->set_root(copy);
  ASSERT_TRUE(send->RemoveInstruction(sent).ok());
  std::string why;
  EXPECT_FALSE(MatchWindowedLoop(Find(m->get(), "loop"), &why).has_value());
  EXPECT_EQ(why, "body has no collective-permute ring");
  EXPECT_FALSE(MatchWindowedLoop(Find(m->get(), "y"), &why).has_value());
  EXPECT_EQ(why, "not a while");
}

TEST(WindowedLoopTest, EvaluatesBlockOffsets) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_single.hlo");
  auto m = Load("ag_bf16_single.hlo");
  ASSERT_NE(m, nullptr);
  HloInstruction* off1 = Find(m.get(), "off1");
  HloInstruction* st = Find(m.get(), "st");
  ASSERT_NE(off1, nullptr);
  // off1 = table[(k + 1 + p) % 4] with table {0, 16, 32, 48}.
  EXPECT_EQ(EvaluateScalar(off1, ScalarEnv{st, 4, 0, 0}), 16);
  EXPECT_EQ(EvaluateScalar(off1, ScalarEnv{st, 4, 2, 3}), 32);
  EXPECT_FALSE(EvaluateScalar(Find(m.get(), "part0"), ScalarEnv{st, 4, 0, 0}).has_value());
}

TEST(WindowedEinsumHandlerTest, RewritesAndIsIdempotent) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_fp8_two_consumers.hlo");
  auto m = Load("ag_fp8_two_consumers.hlo");
  ASSERT_NE(m, nullptr);
  std::vector<Remark> remarks;
  WindowedEinsumHandler pass;
  pass.set_remarks(&remarks);
  auto r = pass.Run(m.get());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
  auto L = MatchWindowedLoop(Find(m.get(), "loop"));
  ASSERT_TRUE(L.has_value());
  EXPECT_EQ(L->layout, WindowedLoopLayout::kFullyUnrolled);
  EXPECT_EQ(L->trip_count, 1);
  EXPECT_EQ(L->ring_size, 4);
  // Every ring step stays, the last (wasted) transfer too: removing it is the job of
  // while-loop-dead-tuple-elements (tested below), and the loop keeps all its dots.
  EXPECT_EQ(L->permutes.size(), 4u);
  EXPECT_EQ(L->dots.size(), 4u);
  EXPECT_EQ(L->body->name(), "unrolled_windowed_dot_general_body_ag");
  EXPECT_EQ(L->condition->name(), "unrolled_windowed_dot_general_cond_ag");
  EXPECT_TRUE(L->fp8_operands);
  EXPECT_EQ(L->scale_index[0], 5);
  EXPECT_EQ(L->scale_index[1], 6);
  EXPECT_EQ(L->cache_index, 7);
  EXPECT_EQ(Find(m.get(), "xg"), nullptr);  // the all-gather is gone
  bool cache_remark = false, recognised = false;
  for (const Remark& rm : remarks) {
    cache_remark |= rm.location == "xg" && rm.applied;
    // Recognising the loop is information, not a refusal: never counted as missed.
    if (rm.message.rfind("recognised: ", 0) == 0) {
      recognised = true;
      EXPECT_TRUE(rm.analysis) << rm.ToString();
      EXPECT_FALSE(rm.missed()) << rm.ToString();
    }
  }
  EXPECT_TRUE(cache_remark);
  EXPECT_TRUE(recognised);

  const std::string once = m->ToString();
  WindowedEinsumHandler again;
  auto r2 = again.Run(m.get());
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_FALSE(*r2);
  EXPECT_EQ(m->ToString(), once);
}

// New streams take ids above every queue the module already names, each read as the
// backend-config editor reads it (passes/gpu_backend_config.h): a key spelled with a \u escape
// counts (5), a value that is not all digits reads 0 (not 12, as std::stoll would give).
TEST(WindowedEinsumHandlerTest, NewStreamsStartAboveTheEditorsQueueIds) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_single.hlo");
  auto m = Load("ag_bf16_single.hlo");
  ASSERT_NE(m, nullptr);
  Find(m.get(), "zeros")->backend_config = R"({"operation\u005fqueue_id":"5"})";
  Find(m.get(), "init")->backend_config = R"({"operation_queue_id":"12abc"})";
  ASSERT_EQ(MaxOperationQueueId(*m), 5);
  WindowedEinsumHandler pass;
  auto r = pass.Run(m.get());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(*r);
  std::vector<int64_t> assigned;
  for (HloComputation* c : m->computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->name() == "zeros" || i->name() == "init") continue;
      if (const int64_t q = OperationQueueId(*i); q > 0) assigned.push_back(q);
    }
  }
  ASSERT_FALSE(assigned.empty()) << m->ToString();
  EXPECT_EQ(*std::min_element(assigned.begin(), assigned.end()), 6);
  EXPECT_LT(*std::max_element(assigned.begin(), assigned.end()), 12);
}

TEST(WindowedEinsumHandlerTest, RegisteredWithUnrollOption) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_single.hlo");
  PassOptions options;
  options.Set("windowed-einsum-unroll", "false");
  auto pass = PassRegistry::Get().Create("windowed-einsum-handler", options);
  ASSERT_TRUE(pass.ok()) << pass.status();
  auto m = Load("ag_bf16_single.hlo");
  ASSERT_NE(m, nullptr);
  auto r = (*pass)->Run(m.get());
  ASSERT_TRUE(r.ok()) << r.status();
  auto L = MatchWindowedLoop(Find(m.get(), "loop"));
  ASSERT_TRUE(L.has_value());
  EXPECT_EQ(L->layout, WindowedLoopLayout::kUnrolledByTwo);  // not unrolled

  PassOptions bad;
  bad.Set("windowed-einsum-unroll", "maybe");
  EXPECT_FALSE(PassRegistry::Get().Create("windowed-einsum-handler", bad).ok());
}

}  // namespace
}  // namespace weave
