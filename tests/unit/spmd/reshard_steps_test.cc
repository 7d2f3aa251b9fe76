// The multi-step reshard planner (spmd/reshard_steps.h): the chain it picks for known pairs, and
// on random pairs of shardings a replay of every plan on element ids (independent of the
// partitioner's emitted HLO and of the evaluator) that must end with every device holding
// exactly its target tile.
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/sharding.h"
#include "spmd/reshard_steps.h"
#include "spmd/sharding_util.h"

namespace weave::spmd {
namespace {

Sharding S(const std::string& text, const std::vector<int64_t>& dims) {
  auto h = ParseSharding(text);
  EXPECT_TRUE(h.ok()) << text;
  auto s = Sharding::FromHlo(*h, Shape(PrimitiveType::F32, dims));
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : Sharding();
}

std::string Kinds(const ReshardSteps& p) {
  std::string out;
  for (const ReshardStep& s : p.steps) {
    if (!out.empty()) out += ",";
    switch (s.kind) {
      case ReshardStepKind::kSlice: out += "slice"; break;
      case ReshardStepKind::kAllToAll: out += "a2a" + std::to_string(s.dim) + std::to_string(s.to_dim) + "x" + std::to_string(s.factor); break;
      case ReshardStepKind::kAllGather: out += "ag" + std::to_string(s.dim) + "x" + std::to_string(s.factor); break;
      case ReshardStepKind::kPermute: out += "permute"; break;
    }
  }
  return out;
}

TEST(ReshardStepsTest, KnownChains) {
  struct Row {
    std::vector<int64_t> dims;
    const char* from;
    const char* to;
    int64_t n;
    const char* chain;  // "" = no plan
  };
  const Row table[] = {
      {{8, 12}, "{devices=[2,2]<=[4]}", "{devices=[4,1]<=[4]}", 4, "a2a10x2"},
      {{24, 16}, "{devices=[8,1]<=[8]}", "{devices=[2,4]<=[8]}", 8, "a2a01x4"},
      {{16, 16, 8}, "{devices=[2,4,1]<=[8]}", "{devices=[1,2,4]<=[8]}", 8, "a2a12x4,a2a01x2"},
      {{64, 64, 64, 64}, "{devices=[2,4,8,1]<=[64]}", "{devices=[4,2,1,8]<=[2,2,2,8]T(0,2,1,3)}", 64,
       "a2a10x2,a2a23x8"},
      {{24, 16}, "{devices=[8,1]<=[8]}", "{devices=[1,2,4]<=[8] last_tile_dim_replicate}", 8, "ag0x4,a2a01x2"},
      {{8, 12}, "{devices=[4,1]<=[4]}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 4, "ag0x2"},
      // Many devices (only whole factors and deficit-matched parts are tried): still two
      // all-to-alls, and an all-gather of 24 then an all-to-all of 64.
      {{1536, 1536, 96}, "{devices=[64,24,1]<=[1536]}", "{devices=[1,64,24]<=[1536]}", 1536, "a2a12x24,a2a01x64"},
      {{1536, 1536, 96}, "{devices=[1536,1,1]<=[1536]}", "{devices=[1,64,1,24]<=[1536] last_tile_dim_replicate}", 1536, "ag0x24,a2a01x64"},
      // 10 rows: no chain lines the padded tiles up.
      {{10, 6}, "{devices=[2,2]<=[4]}", "{devices=[4,1]<=[4]}", 4, ""},
  };
  for (const Row& r : table) {
    const Shape g(PrimitiveType::F32, r.dims);
    std::optional<ReshardSteps> p = PlanReshardSteps(S(r.from, r.dims), S(r.to, r.dims), g, r.n);
    EXPECT_EQ(p ? Kinds(*p) : std::string(), r.chain) << r.from << " -> " << r.to;
  }
  // Not planned: manual subgroups, devices outside 0..n-1, rank 0.
  const Shape g(PrimitiveType::F32, {8, 8});
  EXPECT_FALSE(PlanReshardSteps(S("{devices=[2,1,2]<=[4] last_tile_dims={manual}}", {8, 8}),
                                S("{devices=[4,1]<=[4]}", {8, 8}), g, 4));
  EXPECT_FALSE(PlanReshardSteps(S("{devices=[4,1]<=[4]}", {8, 8}), S("{devices=[1,4]<=[4]}", {8, 8}), g, 8));
  EXPECT_FALSE(PlanReshardSteps(Sharding::Replicated(), Sharding::Replicated(), Shape::Scalar(PrimitiveType::F32), 4));
}

// Element ids held by each device: the tile of `s` (row-major global ids, -1 for padding).
using Held = std::vector<std::vector<int64_t>>;  // [device] -> ids in local row-major order

Held Tiles(const Sharding& s, const Shape& g, int64_t n) {
  Held out(static_cast<size_t>(n));
  const Shape local = LocalShape(g, s);
  for (int64_t p = 0; p < n; ++p) {
    std::vector<int64_t> idx(local.dims.size(), 0);
    for (int64_t k = 0; k < local.ElementCount(); ++k) {
      int64_t id = 0;
      bool pad = false;
      for (size_t d = 0; d < idx.size(); ++d) {
        const int64_t gi = TileOffset(s, p, static_cast<int64_t>(d), g.dims[d]) + idx[d];
        pad |= gi >= g.dims[d];
        id = id * g.dims[d] + gi;
      }
      out[static_cast<size_t>(p)].push_back(pad ? -1 : id);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < local.dims[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

// Replays the plan: each step's groups and sizes against what the devices hold. A slice may keep
// only ids it holds; an all-to-all / all-gather member k must hold factor index k; every step
// must leave the devices holding exactly Tiles(after) (padding positions ignored).
::testing::AssertionResult Replays(const ReshardSteps& plan, const Sharding& from, const Sharding& to,
                                   const Shape& g, int64_t n) {
  Held held = Tiles(from, g, n);
  Sharding cur = from;
  for (const ReshardStep& s : plan.steps) {
    if (!(s.before == cur)) return ::testing::AssertionFailure() << "step starts from " << s.before.ToString();
    const Held want = Tiles(s.after, g, n);
    for (int64_t p = 0; p < n; ++p) {
      std::map<int64_t, int> have;
      if (s.kind == ReshardStepKind::kSlice) {
        for (int64_t id : held[static_cast<size_t>(p)]) have[id] = 1;
      } else if (s.kind == ReshardStepKind::kPermute) {
        for (int64_t q = 0; q < n; ++q) {
          for (int64_t id : held[static_cast<size_t>(q)]) have[id] = 1;  // any source (checked below)
        }
      } else {
        bool found = false;
        for (const std::vector<int64_t>& grp : s.groups) {
          if (std::find(grp.begin(), grp.end(), p) == grp.end()) continue;
          found = true;
          if (static_cast<int64_t>(grp.size()) != s.factor) return ::testing::AssertionFailure() << "group size";
          for (int64_t q : grp) {
            for (int64_t id : held[static_cast<size_t>(q)]) have[id] = 1;
          }
        }
        if (!found) return ::testing::AssertionFailure() << "device " << p << " in no group";
      }
      for (int64_t id : want[static_cast<size_t>(p)]) {
        if (id >= 0 && !have.count(id)) {
          return ::testing::AssertionFailure() << "device " << p << " cannot get element " << id << " in "
                                               << Kinds(plan) << " from " << from.ToString() << " to " << to.ToString();
        }
      }
    }
    held = want;
    cur = s.after;
  }
  const Held final = Tiles(to, g, n);
  for (int64_t p = 0; p < n; ++p) {
    if (held[static_cast<size_t>(p)] != final[static_cast<size_t>(p)]) {
      return ::testing::AssertionFailure() << "device " << p << " ends off its target tile in " << Kinds(plan);
    }
  }
  return ::testing::AssertionSuccess();
}

// A random sharding over n devices: the n devices factored, each factor on a random dim or
// replicated, in a random device order.
Sharding Random(std::mt19937& rng, const std::vector<int64_t>& dims, int64_t n) {
  std::vector<int64_t> tiles(dims.size(), 1);
  int64_t rest = n, repl = 1;
  while (rest > 1) {
    int64_t f = 2;
    while (rest % f != 0) ++f;
    rest /= f;
    const size_t d = rng() % (dims.size() + 1);
    if (d == dims.size() || tiles[d] * f > dims[d]) {
      repl *= f;
    } else {
      tiles[d] *= f;
    }
  }
  std::vector<int64_t> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  if (rng() % 2) std::shuffle(devices.begin(), devices.end(), rng);
  std::vector<Sharding::Subgroup> sub;
  if (repl > 1) sub.push_back({SubgroupType::kReplicated, repl});
  return *Sharding::Tiled(tiles, sub, devices);
}

TEST(ReshardStepsTest, RandomPlansReplay) {
  std::mt19937 rng(7);
  int planned = 0, total = 0;
  for (int k = 0; k < 600; ++k) {
    const int64_t ns[] = {2, 4, 6, 8, 12, 16};
    const int64_t n = ns[rng() % 6];
    std::vector<int64_t> dims;
    const size_t rank = 1 + rng() % 3;
    for (size_t d = 0; d < rank; ++d) dims.push_back(1 + static_cast<int64_t>(rng() % 17));
    const Shape g(PrimitiveType::F32, dims);
    const Sharding from = Random(rng, dims, n), to = Random(rng, dims, n);
    ++total;
    std::optional<ReshardSteps> p = PlanReshardSteps(from, to, g, n);
    if (!p) continue;
    ++planned;
    EXPECT_TRUE(Replays(*p, from, to, g, n)) << from.ToString() << " -> " << to.ToString();
    double bytes = 0;
    for (const ReshardStep& s : p->steps) bytes += s.bytes;
    EXPECT_DOUBLE_EQ(bytes, p->bytes);
  }
  // Most random pairs have a chain (the rest: uneven tiles that do not line up).
  EXPECT_GT(planned, total / 2) << planned << " of " << total;
}

}  // namespace
}  // namespace weave::spmd
