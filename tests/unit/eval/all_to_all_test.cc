// all-to-all on the evaluator, exactly as XLA defines it (operation semantics, AllToAll): with a
// split dimension (array form) every member of a group cuts its operand into G blocks along the
// dim, sends block j to the j-th member, and concatenates what it receives in member order; without
// one (tuple form) member k's j-th operand becomes member j's k-th result. Covered: every split dim
// of a rank-3 operand, 8 partitions as one group, as {{0..3},{4..7}} and as iota groups, types
// f32, bf16, f8e4m3fn and f8e5m2 (values exact in each, compared exactly), the tuple form with
// groups, and the errors (split extent not divisible by G). Expected values are computed here
// from the definition.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "eval_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weave::eval {
namespace {

using ::testing::HasSubstr;
using testing::Arr;
using testing::Doubles;
using testing::RunPer;

// A value exact in every tested type (f8e5m2 holds the integers -8..8 exactly), different for
// neighbouring devices and elements.
double Val(int64_t device, int64_t flat) { return double((device * 13 + flat * 5) % 17) - 8; }

std::vector<int64_t> Unflatten(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  return idx;
}

int64_t Flatten(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + idx[d];
  return flat;
}

std::string GroupsText(const std::vector<std::vector<int64_t>>& groups) {
  std::vector<std::string> parts;
  for (const auto& g : groups) parts.push_back(absl::StrCat("{", absl::StrJoin(g, ","), "}"));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

struct Case {
  std::string type;                          // element type name
  std::string groups_text;                   // replica_groups= as written
  std::vector<std::vector<int64_t>> groups;  // the same groups, expanded
};

class AllToAllArray : public ::testing::TestWithParam<std::tuple<Case, int64_t>> {};

TEST_P(AllToAllArray, MatchesDefinition) {
  const Case& c = std::get<0>(GetParam());
  const int64_t split = std::get<1>(GetParam());
  constexpr int64_t kDevices = 8;
  const int64_t g = static_cast<int64_t>(c.groups[0].size());
  std::vector<int64_t> dims = {2, 3, 2};
  dims[static_cast<size_t>(split)] = 2 * g;  // two rows per block along the split dim
  const std::string shape = absl::StrCat(c.type, "[", absl::StrJoin(dims, ","), "]");
  const std::string text = absl::StrCat("HloModule m, num_partitions=8\nENTRY e {\n  x = ", shape,
                                        " parameter(0)\n  ROOT r = ", shape,
                                        " all-to-all(x), channel_id=1, replica_groups=",
                                        c.groups_text, ", dimensions={", split, "}\n}\n");
  const PrimitiveType t = *ParsePrimitiveType(c.type);
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < kDevices; ++p) {
    std::vector<double> v;
    for (int64_t k = 0; k < count; ++k) v.push_back(Val(p, k));
    per.push_back({Arr(t, dims, v)});
  }
  auto out = RunPer(text, per, kDevices);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const int64_t block = dims[static_cast<size_t>(split)] / g;
  for (const auto& members : c.groups) {
    for (int64_t pos = 0; pos < g; ++pos) {
      const int64_t device = members[static_cast<size_t>(pos)];
      std::vector<double> expect(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k) {
        std::vector<int64_t> idx = Unflatten(k, dims);
        // Result block j along the split dim is block `pos` of member j's operand.
        const int64_t j = idx[split] / block, r = idx[split] % block;
        const int64_t source = members[static_cast<size_t>(j)];
        idx[split] = pos * block + r;
        expect[static_cast<size_t>(k)] = Val(source, Flatten(idx, dims));
      }
      EXPECT_EQ(Doubles(*(*out)[device][0]), expect)
          << c.type << " groups " << c.groups_text << " split " << split << " device " << device;
    }
  }
}

std::vector<Case> Cases() {
  const std::vector<std::vector<int64_t>> halves = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const std::vector<std::vector<int64_t>> all = {{0, 1, 2, 3, 4, 5, 6, 7}};
  const std::vector<std::vector<int64_t>> strided = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const std::vector<std::vector<int64_t>> reversed = {{3, 2, 1, 0}, {7, 6, 5, 4}};
  std::vector<Case> out;
  for (const char* type : {"f32", "bf16", "f8e4m3fn", "f8e5m2"}) {
    out.push_back({type, GroupsText(halves), halves});
    out.push_back({type, GroupsText(all), all});
    out.push_back({type, GroupsText(reversed), reversed});
  }
  // Iota forms: [2,4]<=[8] is {{0..3},{4..7}}; [2,4]<=[4,2]T(1,0) is {{0,2,4,6},{1,3,5,7}}.
  out.push_back({"bf16", "[2,4]<=[8]", halves});
  out.push_back({"f8e4m3fn", "[2,4]<=[4,2]T(1,0)", strided});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Evaluator, AllToAllArray,
                         ::testing::Combine(::testing::ValuesIn(Cases()),
                                            ::testing::Values(0, 1, 2)));

// Tuple form: no split dimension; member k's operand j goes to member j as its result k.
TEST(AllToAllTuple, GroupsAndFp8) {
  for (const char* type : {"f32", "f8e4m3fn", "f8e5m2"}) {
    const PrimitiveType t = *ParsePrimitiveType(type);
    const std::string s = absl::StrCat(type, "[3]");
    const std::string text = absl::StrCat(
        "HloModule m, num_partitions=8\nENTRY e {\n", "  a = ", s, " parameter(0)\n  b = ", s,
        " parameter(1)\n  c = ", s, " parameter(2)\n  d = ", s, " parameter(3)\n  ROOT r = (", s,
        ", ", s, ", ", s, ", ", s,
        ") all-to-all(a, b, c, d), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}\n}\n");
    std::vector<std::vector<ValuePtr>> per;
    for (int64_t p = 0; p < 8; ++p) {
      std::vector<ValuePtr> ops;
      for (int64_t j = 0; j < 4; ++j) {
        ops.push_back(Arr(t, {3}, {Val(p, 3 * j), Val(p, 3 * j + 1), Val(p, 3 * j + 2)}));
      }
      per.push_back(ops);
    }
    auto out = RunPer(text, per, 8);
    ASSERT_TRUE(out.ok()) << out.status().message();
    for (int64_t p = 0; p < 8; ++p) {
      const int64_t base = p / 4 * 4, pos = p % 4;
      ASSERT_EQ((*out)[p].size(), 4u);
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t source = base + k;
        std::vector<double> expect = {Val(source, 3 * pos), Val(source, 3 * pos + 1),
                                      Val(source, 3 * pos + 2)};
        EXPECT_EQ(Doubles(*(*out)[p][k]), expect) << type << " device " << p << " result " << k;
      }
    }
  }
}

TEST(AllToAllErrors, SplitNotDivisible) {
  const std::string text =
      "HloModule m, num_partitions=4\nENTRY e {\n  x = f32[6] parameter(0)\n"
      "  ROOT r = f32[6] all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, "
      "dimensions={0}\n}\n";
  std::vector<std::vector<ValuePtr>> per;
  for (int64_t p = 0; p < 4; ++p) per.push_back({Arr(PrimitiveType::F32, {6}, {0, 1, 2, 3, 4, 5})});
  auto out = RunPer(text, per, 4);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("divisible"));
}

}  // namespace
}  // namespace weave::eval
