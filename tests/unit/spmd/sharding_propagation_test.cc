// sharding-propagation skips a step whose inputs were not written since it last ran without a
// change (Propagator::Settled). That must give exactly what running every step gives
// (`--recompute-all`): checked on every lit input, shared example and real dump, and on random
// global layer chains (meshes of 2, 4 and 8, 2-D meshes with partial replication, elementwise,
// broadcast, transpose, reshape, reduce and dot ops, annotations on some intermediates).
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"
#include "shared_files.h"

namespace weave {
namespace {

namespace fs = std::filesystem;

// The module after sharding-import, spmd-prepare and sharding-propagation (with
// `recompute_all` as given); nullopt when a pass refuses it (not a global module).
std::optional<std::string> Propagated(const std::string& text, bool recompute_all) {
  auto m = ParseHloModule(text, "test");
  if (!m.ok()) return std::nullopt;
  for (const char* name : {"sharding-import", "spmd-prepare", "sharding-propagation"}) {
    PassOptions options;
    if (std::string(name) == "sharding-propagation" && recompute_all) {
      options.Set("recompute-all", "true");
    }
    absl::StatusOr<std::unique_ptr<HloPass>> pass = PassRegistry::Get().Create(name, options);
    EXPECT_TRUE(pass.ok()) << pass.status().message();
    if (!pass.ok()) return std::nullopt;
    absl::StatusOr<bool> changed = (*pass)->Run(m->get());
    if (!changed.ok()) return std::nullopt;
  }
  return (*m)->ToString();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ShardingPropagationTest, SkippingSettledStepsChangesNothingOnEveryCheckedInModule) {
  std::vector<fs::path> files;
  for (const fs::path& dir : {fs::path(WEAVE_SOURCE_DIR) / "tests/lit",
                             fs::path(WEAVE_SOURCE_DIR) / "tests/lit/Inputs",
                             fs::path(weave::testfiles::SharedDir()) / "examples",
                             fs::path(weave::testfiles::SharedDir()) / "real"}) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".hlo") files.push_back(e.path());
    }
  }
  int compared = 0;
  for (const fs::path& f : files) {
    const std::string text = ReadFile(f);
    const std::optional<std::string> skipping = Propagated(text, false);
    const std::optional<std::string> all = Propagated(text, true);
    ASSERT_EQ(skipping.has_value(), all.has_value()) << f;
    if (!skipping) continue;
    EXPECT_EQ(*skipping, *all) << f;
    ++compared;
  }
  // The lit suite alone has well over a hundred modules the passes accept.
  EXPECT_GE(compared, 100);
}

// A random global module: a chain of layers over an activation of [rows, cols], each layer one
// of elementwise with a sharded weight, broadcast of a reduced value, transpose pair, reshape
// pair or dot with a weight, some results annotated with a sharding of their own.
std::string RandomChain(uint32_t seed, int64_t devices, bool two_d) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const int64_t rows = 8 * devices, cols = 4 * devices;
  const std::string act = absl::StrCat("f32[", rows, ",", cols, "]");
  // Shardings of a rank-2 value: by rows, by columns, replicated, or on a 2-D mesh (both dims,
  // or one dim with the rest replicated).
  auto sharding = [&]() -> std::string {
    const int k = pick(two_d ? 5 : 3);
    const int64_t h = devices / 2;
    switch (k) {
      case 0: return absl::StrCat("{devices=[", devices, ",1]<=[", devices, "]}");
      case 1: return absl::StrCat("{devices=[1,", devices, "]<=[", devices, "]}");
      case 2: return "{replicated}";
      case 3: return absl::StrCat("{devices=[2,", h, "]<=[", devices, "]}");
      default:
        return absl::StrCat("{devices=[", h, ",1,2]<=[2,", h, "]T(1,0) last_tile_dim_replicate}");
    }
  };
  std::string body;
  int next_param = 1;
  std::string prev = "x";
  std::vector<std::string> values = {"x"};  // the layers' results so far (all [rows, cols])
  // Half the modules let propagation shard the parameters (the sharding flows back into them
  // from annotated values and the root, and forward again from there).
  const bool open_params = pick(2) == 0;
  absl::StrAppend(&body, "  x = ", act, " parameter(0)",
                  open_params ? "" : absl::StrCat(", sharding=", sharding()), "\n");
  const int layers = 8 + pick(16);
  for (int l = 0; l < layers; ++l) {
    const std::string out = absl::StrCat("v", l);
    const std::string ann = pick(3) == 0 ? absl::StrCat(", sharding=", sharding()) : "";
    switch (pick(5)) {
      case 0: {  // elementwise with a weight, or with an earlier value (a residual)
        std::string w = absl::StrCat("w", l);
        if (values.size() > 1 && pick(2)) {
          w = values[static_cast<size_t>(pick(static_cast<int>(values.size())))];
        } else {
          absl::StrAppend(&body, "  ", w, " = ", act, " parameter(", next_param++, ")",
                            pick(2) ? absl::StrCat(", sharding=", sharding()) : "", "\n");
        }
        absl::StrAppend(&body, "  ", out, " = ", act, " ", pick(2) ? "add" : "multiply", "(",
                        prev, ", ", w, ")", ann, "\n");
        break;
      }
      case 1: {  // reduce a dim, broadcast back, combine
        const int dim = pick(2);
        const int64_t kept = dim == 0 ? cols : rows;
        absl::StrAppend(&body, "  z", l, " = f32[] constant(0)\n");
        absl::StrAppend(&body, "  r", l, " = f32[", kept, "] reduce(", prev, ", z", l,
                        "), dimensions={", dim, "}, to_apply=sum\n");
        absl::StrAppend(&body, "  b", l, " = ", act, " broadcast(r", l, "), dimensions={",
                        1 - dim, "}\n");
        absl::StrAppend(&body, "  ", out, " = ", act, " subtract(", prev, ", b", l, ")", ann,
                        "\n");
        break;
      }
      case 2: {  // transpose there and back
        absl::StrAppend(&body, "  t", l, " = f32[", cols, ",", rows, "] transpose(", prev,
                        "), dimensions={1,0}\n");
        absl::StrAppend(&body, "  ", out, " = ", act, " transpose(t", l, "), dimensions={1,0}",
                        ann, "\n");
        break;
      }
      case 3: {  // reshape there and back
        absl::StrAppend(&body, "  s", l, " = f32[", rows / 2, ",2,", cols, "] reshape(", prev,
                        ")\n");
        absl::StrAppend(&body, "  ", out, " = ", act, " reshape(s", l, ")", ann, "\n");
        break;
      }
      default: {  // dot with a square weight
        const std::string w = absl::StrCat("w", l);
        absl::StrAppend(&body, "  ", w, " = f32[", cols, ",", cols, "] parameter(", next_param++,
                        ")", pick(2) ? absl::StrCat(", sharding=", sharding()) : "", "\n");
        absl::StrAppend(&body, "  ", out, " = ", act, " dot(", prev, ", ", w,
                        "), lhs_contracting_dims={1}, rhs_contracting_dims={0}", ann, "\n");
        break;
      }
    }
    prev = out;
    values.push_back(out);
  }
  return absl::StrCat("HloModule chain_", seed, ", num_partitions=", devices,
                      open_params ? ", allow_spmd_sharding_propagation_to_parameters={true}" : "",
                      "\n\nsum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                      "  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {\n",
                      body, "  ROOT out = ", act, " copy(", prev, "), sharding=", sharding(),
                      "\n}\n");
}

TEST(ShardingPropagationTest, SkippingSettledStepsChangesNothingOnRandomChains) {
  int compared = 0;
  for (int64_t devices : {2, 4, 8}) {
    for (bool two_d : {false, true}) {
      if (two_d && devices < 4) continue;
      for (uint32_t seed = 0; seed < 100; ++seed) {
        const std::string text = RandomChain(seed, devices, two_d);
        const std::optional<std::string> skipping = Propagated(text, false);
        const std::optional<std::string> all = Propagated(text, true);
        ASSERT_TRUE(skipping.has_value()) << text;
        ASSERT_TRUE(all.has_value()) << text;
        EXPECT_EQ(*skipping, *all) << text;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 500);
}

}  // namespace
}  // namespace weave
