// The model's rules (simulator.h): issue-order sharing, wave quantization and last-wave filling,
// the GEMM memory floor, loop glue folded the way XLA emits it, contention by collective engine.
// Expected values come from the rules' closed forms, not from the cost functions.
#include <cmath>
#include <memory>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "sim/simulator.h"

namespace weave::sim {
namespace {

constexpr double kBf16PerSmPerUs = 989e12 / 1e6 / 132;  // FLOP per us per SM at peak

SystemSpec Sys(std::vector<std::string> sets = {}) {
  absl::StatusOr<SystemSpec> s = LoadSystem("h100x8");
  EXPECT_TRUE(s.ok());
  for (const std::string& a : sets) {
    s = OverrideSystemValue(*s, a);
    EXPECT_TRUE(s.ok()) << s.status();
  }
  return *s;
}

// Efficiencies 1, no latency, no contention, no per-GEMM overhead.
SimOptions Exact() {
  SimOptions o;
  o.gemm_efficiency = 1;
  o.link_efficiency = 1;
  o.hbm_efficiency = 1;
  o.latency_us = 0;
  o.contention = 0;
  o.record_trace = true;
  return o;
}

SimResult Simulated(const std::string& text, const SystemSpec& s, const SimOptions& o) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  absl::StatusOr<SimResult> r = SimulateModule(**m, s, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

double EndOf(const SimResult& r, const std::string& name) {
  for (const TraceEvent& e : r.trace) {
    if (e.name == name) return e.start_us + e.duration_us;
  }
  ADD_FAILURE() << "no trace event " << name;
  return -1;
}
double StartOf(const SimResult& r, const std::string& name) {
  for (const TraceEvent& e : r.trace) {
    if (e.name == name) return e.start_us;
  }
  ADD_FAILURE() << "no trace event " << name;
  return -1;
}

// One 128x128 tile over K=8192 on one SM at peak.
const double kTau = 2.0 * 128 * 128 * 8192 / kBf16PerSmPerUs;  // 35.8 us

TEST(ModelRules, WavesCountOutputTilesNotKBlocks) {
  SystemSpec s = Sys({"gemm.overhead_us=0"});
  SimOptions o = Exact();
  // 256 x 3584 output = 2 x 28 = 56 tiles: one partial wave (42% of the SMs) of one tile time,
  // however deep K is.
  EXPECT_NEAR(GemmTimeUs(*ApplySimOptions(s, o), PrimitiveType::BF16, 1, 256, 3584, 8192),
              kTau, 1e-6 * kTau);
  // 2048 x 3584 = 448 tiles: 3.39 waves run as 4.
  EXPECT_NEAR(GemmTimeUs(*ApplySimOptions(s, o), PrimitiveType::BF16, 1, 2048, 3584, 8192),
              4 * kTau, 1e-6 * kTau);
}

TEST(ModelRules, ConcurrentStreamsFillEachOthersLastWave) {
  // Two 256-row GEMMs of 56 tiles each on two streams: both fit in one wave together.
  const std::string two = R"(
HloModule two, num_partitions=8
ENTRY main {
  a = bf16[256,8192] parameter(0)
  b = bf16[8192,3584] parameter(1)
  d1 = bf16[256,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"1","wait_on_operation_queues":[]}
  d2 = bf16[256,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"2","wait_on_operation_queues":[]}
  ROOT t = (bf16[256,3584], bf16[256,3584]) tuple(d1, d2)
})";
  SystemSpec s = Sys({"gemm.overhead_us=0", "hbm_gbps=1e9"});  // no memory floor here
  SimResult r = Simulated(two, s, Exact());
  EXPECT_NEAR(r.total_us, kTau, 1e-6 * kTau);
  // The same two on one stream: one after the other.
  std::string serial = two;
  for (const char* q : {"\"operation_queue_id\":\"1\"", "\"operation_queue_id\":\"2\""}) {
    serial.replace(serial.find(q), std::string(q).size(), "\"operation_queue_id\":\"0\"");
  }
  EXPECT_NEAR(Simulated(serial, s, Exact()).total_us, 2 * kTau, 1e-6 * kTau);
}

TEST(ModelRules, IssueOrderGivesTheGpuToTheFirstKernel) {
  // A full-GPU GEMM issued first runs at full rate; a second one on another stream waits for
  // the SMs the first leaves in its last wave: 448 tiles = 3 full waves + 52 tiles.
  const std::string text = R"(
HloModule order, num_partitions=8
ENTRY main {
  a = bf16[2048,8192] parameter(0)
  b = bf16[8192,3584] parameter(1)
  first = bf16[2048,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"1","wait_on_operation_queues":[]}
  c = bf16[256,8192] parameter(2)
  second = bf16[256,3584] dot(c, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":"2","wait_on_operation_queues":[]}
  ROOT t = (bf16[2048,3584], bf16[256,3584]) tuple(first, second)
})";
  SystemSpec s = Sys({"gemm.overhead_us=0", "hbm_gbps=1e9"});
  SimResult r = Simulated(text, s, Exact());
  EXPECT_NEAR(EndOf(r, "first"), 4 * kTau, 1e-6 * kTau);
  // "second" (56 tiles) gets the 80 SMs left in first's last wave (52 tiles): it runs beside it.
  EXPECT_NEAR(EndOf(r, "second"), 4 * kTau, 1e-6 * kTau);
  EXPECT_NEAR(r.total_us, 4 * kTau, 1e-6 * kTau);
}

TEST(ModelRules, SmallMGemmsHitTheMemoryFloor) {
  SystemSpec s = Sys({"gemm.overhead_us=0"});
  SimOptions o = Exact();
  SystemSpec applied = *ApplySimOptions(s, o);
  // 16 x 3584 output, K 8192: the weight alone is 58.7 MB, read in 17.5 us at 3.35 TB/s, while
  // one 16-row tile takes 4.5 us: memory-bound.
  const double bytes = (16.0 * 8192 + 8192.0 * 3584 + 16.0 * 3584) * 2;
  EXPECT_NEAR(GemmTimeUs(applied, PrimitiveType::BF16, 1, 16, 3584, 8192, bytes),
              bytes / (3350e9 / 1e6), 1e-3);
}

TEST(ModelRules, FoldedAddsZeroFillsAndInPlaceUpdatesAreFree) {
  // acc = add(dot, broadcast(0)) is a GEMM with beta = 0; dynamic-update-slice of a dot's result
  // is written by the GEMM in place: the module costs its two GEMMs only.
  const std::string text = R"(
HloModule glue, num_partitions=8
ENTRY main {
  a = bf16[256,8192] parameter(0)
  b = bf16[8192,3584] parameter(1)
  buf = bf16[2048,3584] parameter(2)
  zero = bf16[] constant(0)
  zeros = bf16[256,3584] broadcast(zero), dimensions={}
  d1 = bf16[256,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  acc = bf16[256,3584] add(d1, zeros)
  d2 = bf16[256,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  off = s32[] constant(256)
  z = s32[] constant(0)
  ROOT upd = bf16[2048,3584] dynamic-update-slice(buf, d2, off, z)
})";
  SystemSpec s = Sys({"gemm.overhead_us=0", "hbm_gbps=1e9"});
  SimResult r = Simulated(text, s, Exact());
  EXPECT_EQ(r.num_tasks, 2);
  EXPECT_NEAR(r.total_us, 2 * kTau, 1e-6 * kTau);
  // An add of two non-GEMM values is a kernel of its own.
  const std::string plain = R"(
HloModule plain_add, num_partitions=8
ENTRY main {
  a = bf16[1024,1024] parameter(0)
  b = bf16[1024,1024] parameter(1)
  ROOT c = bf16[1024,1024] add(a, b)
})";
  SimResult p = Simulated(plain, Sys(), Exact());
  EXPECT_EQ(p.num_tasks, 1);
  EXPECT_NEAR(p.total_us, 3.0 * 1024 * 1024 * 2 / (3350e9 / 1e6), 1e-6);
}

TEST(ModelRules, AFoldedGemmWaitsForItsAccumulator) {
  // The reduce-scatter step: acc' = add(collective-permute(acc), dot). Folded into the GEMM's
  // epilogue, the GEMM reads the received accumulator, so it starts once the transfer ends.
  const std::string text = R"(
HloModule rs_step, num_partitions=8
ENTRY main {
  a = bf16[256,8192] parameter(0)
  b = bf16[8192,3584] parameter(1)
  acc = bf16[256,3584] parameter(2)
  recv = bf16[256,3584] collective-permute(acc), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}
  d = bf16[256,3584] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT next = bf16[256,3584] add(recv, d)
})";
  SystemSpec s = Sys({"gemm.overhead_us=0", "hbm_gbps=1e9"});
  SimResult r = Simulated(text, s, Exact());
  const double transfer = 256.0 * 3584 * 2 / (450e9 / 1e6);
  EXPECT_NEAR(StartOf(r, "d"), transfer, 1e-6);
  EXPECT_NEAR(r.total_us, transfer + kTau, 1e-6 * kTau);
}

TEST(ModelRules, ContentionDependsOnTheEngine) {
  // A GEMM beside an all-gather: compute gets 1/(1+c) of the GPU while the all-gather runs.
  const std::string text = R"(
HloModule overlap, num_partitions=8
ENTRY main {
  x = bf16[1024,8192] parameter(0)
  a = bf16[4096,8192] parameter(1)
  b = bf16[8192,2048] parameter(2)
  g = bf16[8192,8192] all-gather(x), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  c = bf16[4096,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (bf16[8192,8192], bf16[4096,2048]) tuple(g, c)
})";
  SimOptions o = Exact();
  o.contention.reset();
  const SystemSpec sm = Sys({"contention.sm=0.6", "gemm.tiled=false"});
  const SystemSpec ce = Sys({"contention.copy_engine=0.3", "collective_engine=copy_engine",
                             "gemm.tiled=false"});
  const double gemm = 2.0 * 4096 * 2048 * 8192 / (989e12 / 1e6);  // 139 us, inside the 261 us
  EXPECT_NEAR(EndOf(Simulated(text, sm, o), "c"), 1.6 * gemm, 1e-3);
  EXPECT_NEAR(EndOf(Simulated(text, ce, o), "c"), 1.3 * gemm, 1e-3);
}

}  // namespace
}  // namespace weave::sim
