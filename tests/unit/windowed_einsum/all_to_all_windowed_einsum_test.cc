// Unit tests of the all-to-all windowed einsum pass object: reshape split-dim tracking, groups of
// unequal sizes (which do not verify, so no lit test can reach them), the decision by the cost gate
// (a stand-in oracle here: the simulator-backed one is tested in lit), option errors, and finding the
// rewritten structure again (FindAllToAllWindows) in our output and in XLA's form.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "windowed_einsum/all_to_all_window.h"
#include "windowed_einsum/all_to_all_windowed_einsum.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/cost_oracle.h"
#include "passes/gpu_backend_config.h"
#include "passes/pass.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

int64_t Count(const HloModule& m, HloOpcode op) {
  int64_t n = 0;
  for (const HloComputation* c : m.computations()) {
    for (const HloInstruction* i : c->instructions()) n += i->opcode() == op;
  }
  return n;
}

TEST(DimKeptByReshape, TracksIntactDims) {
  const Shape a(PrimitiveType::BF16, {1, 4, 64, 1, 32});
  const Shape b(PrimitiveType::BF16, {4, 64, 1, 32});
  EXPECT_EQ(DimKeptByReshape(a, b, 1), 0);  // a leading 1 dropped
  EXPECT_EQ(DimKeptByReshape(a, b, 2), 1);
  EXPECT_EQ(DimKeptByReshape(b, a, 0), 1);
  const Shape merged(PrimitiveType::BF16, {256, 1, 32});
  EXPECT_EQ(DimKeptByReshape(b, merged, 0), std::nullopt);  // 4 merged with 64
  EXPECT_EQ(DimKeptByReshape(b, merged, 3), 2);
  const Shape split(PrimitiveType::BF16, {4, 8, 8, 1, 32});
  EXPECT_EQ(DimKeptByReshape(b, split, 1), std::nullopt);  // 64 split into 8x8
  EXPECT_EQ(DimKeptByReshape(b, split, 0), 0);
  EXPECT_EQ(DimKeptByReshape(b, split, 9), std::nullopt);
}

constexpr char kExchangeThenDot[] = R"(HloModule m, num_partitions=8
ENTRY e {
  w = bf16[64,24]{1,0} parameter(0)
  x = bf16[16,64]{1,0} parameter(1)
  a = bf16[16,64]{1,0} all-to-all(x), channel_id=1, replica_groups=GROUPS, dimensions={0}
  ROOT d = bf16[16,24]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)";

std::string WithGroups(const std::string& groups) {
  std::string t = kExchangeThenDot;
  t.replace(t.find("GROUPS"), 6, groups);
  return t;
}

TEST(AllToAllWindowedEinsum, RefusesGroupsOfUnequalSizes) {
  auto m = Parse(WithGroups("{{0,1},{2,3,4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsum pass;
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message, HasSubstr("replica groups of unequal sizes (2 and 6)"));
}

// A stand-in cost gate: "without" costs `without`; a variant with C chunks `base + per_chunk * C`.
FunctionCostOracle ChunkOracle(double without, double base, double per_chunk,
                               std::vector<CostQuery>* seen) {
  return FunctionCostOracle(
      [=](const CostQuery& q) -> absl::StatusOr<std::vector<double>> {
        seen->push_back(q);
        std::vector<double> us;
        for (const CostVariant& v : q.variants) {
          if (!v.rewrite) {
            us.push_back(without);
            continue;
          }
          us.push_back(base + per_chunk * std::stod(v.options.at(
                                              "all-to-all-windowed-einsum-chunks")));
        }
        return us;
      },
      "counting");
}

TEST(AllToAllWindowedEinsum, CostGatePicksTheChunkCount) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsumOptions o;
  o.max_chunks = 8;
  AllToAllWindowedEinsum pass(o);
  std::vector<CostQuery> seen;
  FunctionCostOracle oracle = ChunkOracle(99, 100, -1, &seen);
  pass.set_cost_oracle(&oracle);
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  // One query: without, then A with C = 2, 4, 8 (the divisors of K = 64 up to 8); the seeds are
  // the all-to-all and the dot; without an estimate the gate would fall back to C = G = 4.
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].variants.size(), 4u);
  EXPECT_EQ(seen[0].variants[0].label, "without");
  EXPECT_EQ(seen[0].variants[3].label, "with A in 8 chunks");
  EXPECT_EQ(seen[0].variants[3].options.at("all-to-all-windowed-einsum-rewrite"), "A");
  EXPECT_EQ(seen[0].seeds.size(), 2u);
  EXPECT_EQ(seen[0].fallback, 2);
  EXPECT_EQ(seen[0].pass, "all-to-all-windowed-einsum");
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 8);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].applied);
  EXPECT_THAT(remarks[0].message,
              HasSubstr("8 chunks of 8 along the contraction (G=4, K=64, split dim 0 at the dot)"));
  EXPECT_THAT(remarks[0].message,
              HasSubstr("predicted 98.0 us with A in 2 chunks, 96.0 us with A in 4 chunks, 92.0 "
                        "us with A in 8 chunks vs 99.0 us without on counting"));
  ASSERT_EQ(oracle.decisions().size(), 1u);
}

TEST(AllToAllWindowedEinsum, CostGateSaysNo) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsumOptions o;
  o.max_chunks = 4;
  AllToAllWindowedEinsum pass(o);
  std::vector<CostQuery> seen;
  FunctionCostOracle oracle = ChunkOracle(11, 10, 1, &seen);
  pass.set_cost_oracle(&oracle);
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 1);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_TRUE(remarks[0].missed());
  EXPECT_EQ(remarks[0].message,
            "not rewritten: predicted 12.0 us with A in 2 chunks, 14.0 us with A in 4 chunks vs "
            "11.0 us without on counting");
}

TEST(AllToAllWindowedEinsum, NoEstimateFallsBackToG) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  std::vector<Remark> remarks;
  AllToAllWindowedEinsum pass;
  FunctionCostOracle oracle([](const CostQuery&) -> absl::StatusOr<std::vector<double>> {
    return absl::InternalError("model refused");
  });
  pass.set_cost_oracle(&oracle);
  pass.set_remarks(&remarks);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 4);
  ASSERT_EQ(remarks.size(), 1u);
  EXPECT_THAT(remarks[0].message,
              HasSubstr("no estimate (model refused); applied as without the cost gate"));
}

TEST(AllToAllWindowedEinsum, XlaFlagOverridesTheGate) {
  auto m = Parse(WithGroups("{{0,1,2,3},{4,5,6,7}}"));
  ASSERT_TRUE(m);
  PassOptions po;
  po.Set("xla_gpu_experimental_enable_alltoall_windowed_einsum", "true");
  auto o = ParseAllToAllWindowedEinsumOptions(po);
  ASSERT_TRUE(o.ok());
  AllToAllWindowedEinsum pass(*o);
  std::vector<CostQuery> seen;
  FunctionCostOracle oracle = ChunkOracle(1, 10, 1, &seen);
  pass.set_cost_oracle(&oracle);
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(Count(*m, HloOpcode::kAllToAll), 4);  // G chunks
}

TEST(AllToAllWindowedEinsum, OptionErrors) {
  for (const auto& [key, value, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"all-to-all-windowed-einsum-chunks", "1", "needs at least 2 chunks"},
           {"all-to-all-windowed-einsum-chunks", "x", "is not an integer"},
           {"all-to-all-windowed-einsum-max-chunks", "1", "must be in [2, 1024]"},
           {"all-to-all-windowed-einsum-rewrite", "C", "is not one of A, B, any"},
           {"xla-backend-config", "2027", "expected 2024, 2025 or 2026"},
           {"xla_gpu_experimental_enable_alltoall_windowed_einsum", "maybe", "is not a boolean"}}) {
    PassOptions po;
    po.Set(key, value);
    auto o = ParseAllToAllWindowedEinsumOptions(po);
    ASSERT_FALSE(o.ok()) << key;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(message)) << key;
  }
  auto pass = PassRegistry::Get().Create("all-to-all-windowed-einsum", PassOptions());
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ((*pass)->name(), "all-to-all-windowed-einsum");
}

constexpr char kBoth[] = R"(HloModule m, num_partitions=4
ENTRY e {
  w = bf16[64,24]{1,0} parameter(0)
  x = bf16[16,64]{1,0} parameter(1)
  a = bf16[16,64]{1,0} all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  d = bf16[16,24]{1,0} dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  v = bf16[24,32]{1,0} parameter(2)
  e = bf16[16,32]{1,0} dot(d, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT b = bf16[16,32]{1,0} all-to-all(e), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}
}
)";

TEST(FindAllToAllWindows, FindsBothRewrites) {
  auto m = Parse(kBoth);
  ASSERT_TRUE(m);
  AllToAllWindowedEinsum pass;  // no cost model: every match, C = G = 4
  auto changed = pass.Run(m.get());
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::vector<AllToAllWindow> w = FindAllToAllWindows(*m->entry());
  ASSERT_EQ(w.size(), 2u);
  int a = 0, b = 0;
  for (const AllToAllWindow& x : w) {
    EXPECT_EQ(x.all_to_alls.size(), 4u);
    EXPECT_EQ(x.gemms.size(), 4u);
    EXPECT_EQ(x.group_size, 4);
    (x.exchange_first ? a : b)++;
  }
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  // The pass is done: a second run finds no candidate (each chunk's exchange reads a slice or
  // feeds an add).
  std::vector<Remark> remarks;
  pass.set_remarks(&remarks);
  auto again = pass.Run(m.get());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  for (const Remark& r : remarks) EXPECT_TRUE(r.missed()) << r.ToString();
}

// Every backend_config the pass writes loads in the XLA version --xla-backend-config names
// (passes/gpu_backend_config.h's schema check): queue ids on the partial dots, with
// wait_on_operation_queues only before 2026.
TEST(AllToAllWindowedEinsum, BackendConfigsLoadInEachXlaVersion) {
  for (const char* version : {"2024", "2025", "2026"}) {
    auto m = Parse(kBoth);
    ASSERT_TRUE(m);
    PassOptions po;
    po.Set("xla-backend-config", version);
    auto o = ParseAllToAllWindowedEinsumOptions(po);
    ASSERT_TRUE(o.ok());
    AllToAllWindowedEinsum pass(*o);
    ASSERT_TRUE(pass.Run(m.get()).ok());
    const XlaBackendConfigVersion v = *ParseXlaBackendConfigVersion(version);
    int with_queue = 0;
    for (const HloInstruction* i : m->entry()->instructions()) {
      EXPECT_THAT(CheckBackendConfig(*i, v), ::testing::IsEmpty()) << version;
      if (i->backend_config.empty()) continue;
      ++with_queue;
      EXPECT_EQ(i->backend_config.find("wait_on_operation_queues") != std::string::npos,
                v != XlaBackendConfigVersion::k2026)
          << i->backend_config;
    }
    EXPECT_EQ(with_queue, 8) << version;
  }
}

// XLA's handler output for rewrite B over 2 chunks, written by hand in its form (the partial
// all-to-alls read the partial dots; add(all-to-all, acc) from a zero broadcast), and an FP8
// GEMM custom call as a chunk's GEMM in rewrite A.
TEST(FindAllToAllWindows, FindsXlaFormAndGemmCalls) {
  auto m = Parse(R"(HloModule xla_form, num_partitions=2
ENTRY e {
  h = bf16[4,16]{1,0} parameter(0)
  w = bf16[16,8]{1,0} parameter(1)
  zero = bf16[] constant(0)
  buf = bf16[4,8]{1,0} broadcast(zero), dimensions={}
  h0 = bf16[4,8]{1,0} slice(h), slice={[0:4], [0:8]}
  w0 = bf16[8,8]{1,0} slice(w), slice={[0:8], [0:8]}
  d0 = bf16[4,8]{1,0} dot(h0, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"3","force_earliest_schedule":false}
  x0 = bf16[4,8]{1,0} all-to-all(d0), channel_id=3, replica_groups={{0,1}}, dimensions={0}
  s0 = bf16[4,8]{1,0} add(x0, buf)
  h1 = bf16[4,8]{1,0} slice(h), slice={[0:4], [8:16]}
  w1 = bf16[8,8]{1,0} slice(w), slice={[8:16], [0:8]}
  d1 = bf16[4,8]{1,0} dot(h1, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"4","force_earliest_schedule":false}
  x1 = bf16[4,8]{1,0} all-to-all(d1), channel_id=4, replica_groups={{0,1}}, dimensions={0}
  s1 = bf16[4,8]{1,0} add(x1, s0)
  q = f8e4m3fn[4,16]{1,0} parameter(2)
  v = f8e4m3fn[16,16]{1,0} parameter(3)
  one = f32[] constant(1)
  z2 = bf16[4,16]{1,0} broadcast(zero), dimensions={}
  q0 = f8e4m3fn[4,8]{1,0} slice(q), slice={[0:4], [0:8]}
  a0 = f8e4m3fn[4,8]{1,0} all-to-all(q0), channel_id=5, replica_groups={{0,1}}, dimensions={0}
  v0 = f8e4m3fn[16,8]{1,0} slice(v), slice={[0:16], [0:8]}
  g0 = (bf16[4,16]{1,0}, s8[4194304]{0}) custom-call(a0, v0, one, one), custom_call_target="__cublas$lt$matmul$f8"
  r0 = bf16[4,16]{1,0} get-tuple-element(g0), index=0
  t0 = bf16[4,16]{1,0} add(r0, z2)
  q1 = f8e4m3fn[4,8]{1,0} slice(q), slice={[0:4], [8:16]}
  a1 = f8e4m3fn[4,8]{1,0} all-to-all(q1), channel_id=6, replica_groups={{0,1}}, dimensions={0}
  v1 = f8e4m3fn[16,8]{1,0} slice(v), slice={[0:16], [8:16]}
  g1 = (bf16[4,16]{1,0}, s8[4194304]{0}) custom-call(a1, v1, one, one), custom_call_target="__cublas$lt$matmul$f8"
  r1 = bf16[4,16]{1,0} get-tuple-element(g1), index=0
  t1 = bf16[4,16]{1,0} add(r1, t0)
  ROOT out = (bf16[4,8]{1,0}, bf16[4,16]{1,0}) tuple(s1, t1)
}
)");
  ASSERT_TRUE(m);
  std::vector<AllToAllWindow> w = FindAllToAllWindows(*m->entry());
  ASSERT_EQ(w.size(), 2u);
  for (const AllToAllWindow& x : w) {
    EXPECT_EQ(x.all_to_alls.size(), 2u);
    EXPECT_EQ(x.group_size, 2);
    if (x.exchange_first) {
      EXPECT_EQ(x.result->name(), "t1");
      EXPECT_EQ(x.gemms[1]->name(), "g1");
      EXPECT_EQ(x.all_to_alls[0]->name(), "a0");
    } else {
      EXPECT_EQ(x.result->name(), "s1");
      EXPECT_EQ(x.gemms[0]->name(), "d0");
    }
  }
}

// The plain module has no window; a single chunk is not one.
TEST(FindAllToAllWindows, NothingInPlainModules) {
  auto m = Parse(kBoth);
  ASSERT_TRUE(m);
  EXPECT_TRUE(FindAllToAllWindows(*m->entry()).empty());
}

}  // namespace
}  // namespace weave
