// The sharding layer's shortcuts keep its answers: interned tiled payloads (Sharding::Intern),
// the direct ReplicateDims, and the per-thread memo tables of the dot rules and FromHlo. Each
// test checks the fast path against an answer computed without it.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "hlo/sharding.h"
#include "spmd/sharding.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

std::string Str(const std::optional<Sharding>& s) { return s ? s->ToString() : "none"; }

Sharding FromText(const std::string& text, std::vector<int64_t> dims) {
  absl::StatusOr<HloSharding> h = ParseSharding(text);
  EXPECT_TRUE(h.ok()) << text;
  absl::StatusOr<Sharding> s = Sharding::FromHlo(*h, Shape(PrimitiveType::F32, std::move(dims)));
  EXPECT_TRUE(s.ok()) << text;
  return s.ok() ? *s : Sharding();
}

// A random tiled sharding over n devices (a random device order; tiles dividing n, the rest a
// replicated subgroup).
Sharding RandomTiled(std::mt19937& rng, int64_t rank) {
  static const int64_t kDevices[] = {2, 4, 6, 8, 12, 16};
  const int64_t n = kDevices[rng() % 6];
  std::vector<int64_t> tiles(static_cast<size_t>(rank), 1);
  int64_t left = n;
  for (int64_t& t : tiles) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= left; ++d) {
      if (left % d == 0) divisors.push_back(d);
    }
    t = divisors[rng() % divisors.size()];
    left /= t;
  }
  std::vector<int64_t> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  std::shuffle(devices.begin(), devices.end(), rng);
  std::vector<Sharding::Subgroup> sub;
  if (left > 1) sub.push_back({SubgroupType::kReplicated, left});
  absl::StatusOr<Sharding> s = Sharding::Tiled(tiles, sub, devices);
  EXPECT_TRUE(s.ok());
  return s.ok() ? *s : Sharding();
}

// ReplicateDims as it was written before the direct version: the tile of every device with the
// replicated dims zeroed, regrouped by FromTileFunction.
std::optional<Sharding> ReferenceReplicateDims(const Sharding& s, const std::vector<int64_t>& dims) {
  if (!s.IsTiled()) return s;
  bool any = false;
  for (int64_t d : dims) any |= d < s.rank() && s.tile(d) > 1;
  if (!any) return s;
  for (const Sharding::Subgroup& g : s.subgroups()) {
    if (g.type != SubgroupType::kReplicated) return std::nullopt;
  }
  std::vector<int64_t> tiles = s.tiles();
  for (int64_t d : dims) {
    if (d < s.rank()) tiles[static_cast<size_t>(d)] = 1;
  }
  std::vector<int64_t> devices = s.devices();
  std::sort(devices.begin(), devices.end());
  return Sharding::FromTileFunction(tiles, devices, [&](int64_t dev) {
    std::vector<int64_t> idx = *s.TileIndex(dev, s.rank());
    for (int64_t d : dims) {
      if (d < s.rank()) idx[static_cast<size_t>(d)] = 0;
    }
    return idx;
  });
}

TEST(ShardingMemoTest, EqualShardingsShareOnePayload) {
  // The same sharding by two routes: an explicit list whose replication groups are written in
  // another order, and the iota form.
  const Sharding a = FromText("{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}", {8, 8});
  const Sharding b = FromText("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", {8, 8});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.ToString(), b.ToString());
  EXPECT_NE(a, FromText("{devices=[1,2,2]<=[4] last_tile_dim_replicate}", {8, 8}));
  // Built on another thread: the table is the process's.
  Sharding c;
  std::thread([&c] { c = Sharding::IotaTiled({2, 1}, 2); }).join();
  EXPECT_EQ(a, c);
}

TEST(ShardingMemoTest, AHeldPayloadOutlivesThePurge) {
  const Sharding kept = Sharding::IotaTiled({4, 2});
  // Far more distinct shardings than the table holds before it drops the unused ones.
  std::mt19937 rng(7);
  for (int k = 0; k < 20000; ++k) {
    std::vector<int64_t> devices(12);
    std::iota(devices.begin(), devices.end(), 0);
    std::shuffle(devices.begin(), devices.end(), rng);
    ASSERT_TRUE(Sharding::Tiled({3, 4}, {}, devices).ok());
  }
  EXPECT_EQ(kept, Sharding::IotaTiled({4, 2}));
  EXPECT_EQ(kept.ToString(), "{devices=[4,2]<=[8]}");
}

TEST(ShardingMemoTest, ReplicateDimsMatchesTheTileFunction) {
  std::mt19937 rng(11);
  int replicated = 0;
  for (int k = 0; k < 2000; ++k) {
    const int64_t rank = 1 + static_cast<int64_t>(rng() % 4);
    const Sharding s = RandomTiled(rng, rank);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank + 1; ++d) {  // rank itself: a dim the sharding lacks
      if (rng() % 2) dims.push_back(d);
    }
    std::shuffle(dims.begin(), dims.end(), rng);
    const std::optional<Sharding> got = ReplicateDims(s, dims);
    const std::optional<Sharding> want = ReferenceReplicateDims(s, dims);
    ASSERT_EQ(Str(got), Str(want)) << s.ToString() << " dims " << dims.size();
    ASSERT_EQ(got.has_value(), want.has_value());
    if (got) {
      EXPECT_EQ(*got, *want);
    }
    if (got && *got != s) ++replicated;
  }
  EXPECT_GT(replicated, 500);  // most draws replicate a tiled dim
}

// Dots of one lhs and rhs rank with every kind of dimension numbers.
constexpr char kDots[] = R"(HloModule dots
ENTRY dots {
  a = f32[4,8,16] parameter(0)
  b = f32[4,16,8] parameter(1)
  c = f32[8,4,16] parameter(2)
  d0 = f32[4,8,8] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
  d1 = f32[4,16,4,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={2}
  d2 = f32[8,16,16] dot(a, b), lhs_batch_dims={1}, rhs_batch_dims={2}, lhs_contracting_dims={0}, rhs_contracting_dims={0}
  d3 = f32[4,16,8,16] dot(a, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d4 = f32[16,8,8] dot(a, c), lhs_batch_dims={2}, rhs_batch_dims={2}, lhs_contracting_dims={0}, rhs_contracting_dims={1}
  ROOT t = (f32[4,8,8], f32[4,16,4,8], f32[8,16,16], f32[4,16,8,16], f32[16,8,8]) tuple(d0, d1, d2, d3, d4)
}
)";

TEST(ShardingMemoTest, DotRulesAnswerAsWithoutTheMemo) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(kDots, "dots");
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<const HloInstruction*> dots;
  for (const HloInstruction* i : (*m)->entry()->instructions()) {
    if (i->opcode() == HloOpcode::kDot) dots.push_back(i);
  }
  ASSERT_EQ(dots.size(), 5u);
  struct Query {
    bool from_output;
    const HloInstruction* dot;
    int64_t operand;
    Sharding s, other;
    bool with_other;
  };
  std::mt19937 rng(3);
  std::vector<Query> queries;
  for (int k = 0; k < 400; ++k) {
    Query q;
    q.from_output = rng() % 2;
    q.dot = dots[rng() % dots.size()];
    q.operand = static_cast<int64_t>(rng() % 2);
    // A few shardings reused across dots, so that equal keys would meet if a key lacked the dot.
    std::mt19937 pick(static_cast<uint32_t>(rng() % 6));
    q.s = RandomTiled(pick, q.from_output ? q.dot->shape().rank()
                                          : q.dot->operand(q.operand)->shape().rank());
    q.other = RandomTiled(pick, q.dot->operand(1 - q.operand)->shape().rank());
    q.with_other = rng() % 2;
    queries.push_back(std::move(q));
  }
  auto ask = [](const Query& q) {
    return Str(q.from_output
                   ? DotOperandFromOutput(q.s, q.with_other ? &q.other : nullptr, q.operand, *q.dot)
                   : DotOutputFromOperand(q.s, q.operand, *q.dot));
  };
  // The truth: each query on a thread of its own, whose memo tables start empty.
  std::vector<std::string> truth(queries.size());
  for (size_t k = 0; k < queries.size(); ++k) {
    std::thread([&, k] { truth[k] = ask(queries[k]); }).join();
  }
  // Here, each asked twice, after all the others: the answers come from the memo.
  int some = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < queries.size(); ++k) {
      ASSERT_EQ(ask(queries[k]), truth[k]) << "query " << k << " round " << round;
      if (truth[k] != "none") ++some;
    }
  }
  EXPECT_GT(some, 200);
}

TEST(ShardingMemoTest, FromHloKeysOnTheRank) {
  absl::StatusOr<HloSharding> h = ParseSharding("{devices=[4,1]<=[4]}");
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(Sharding::FromHlo(*h, Shape(PrimitiveType::F32, {8, 8})).ok());
  // The same attribute on a rank-3 value tiles too few dims: an error, not the rank-2 answer.
  EXPECT_FALSE(Sharding::FromHlo(*h, Shape(PrimitiveType::F32, {8, 8, 8})).ok());
  EXPECT_TRUE(Sharding::FromHlo(*h, Shape(PrimitiveType::F32, {8, 8})).ok());
  // Fields that differ only in the subgroup's type give different shardings.
  absl::StatusOr<HloSharding> m = ParseSharding("{devices=[1,4]<=[4] last_tile_dims={manual}}");
  absl::StatusOr<HloSharding> r = ParseSharding("{devices=[1,4]<=[4] last_tile_dim_replicate}");
  ASSERT_TRUE(m.ok() && r.ok());
  const Shape v(PrimitiveType::F32, {8});
  EXPECT_TRUE(Sharding::FromHlo(*m, v)->IsManual());
  EXPECT_TRUE(Sharding::FromHlo(*r, v)->IsReplicated());
  EXPECT_TRUE(Sharding::FromHlo(*m, v)->IsManual());
}

}  // namespace
}  // namespace weave::spmd
