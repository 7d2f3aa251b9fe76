// ScanJsonArray (tools/json_path_scan.h) reads what a full JSON parse (nlohmann) reads, or
// declines: checked on hand-written cases and on random configs, valid and damaged.
#include "tools/json_path_scan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace weave::tools {
namespace {

const std::vector<std::string_view> kPath = {"gemm_backend_config", "dot_dimension_numbers",
                                             "lhs_contracting_dimensions"};

// What the report reads from a config: the scan's elements as integers (strings by atoll).
std::vector<int64_t> FromScan(const JsonArrayScan& s) {
  std::vector<int64_t> out;
  for (const JsonScalar& v : s.elements) {
    if (v.kind == JsonScalar::kString) out.push_back(std::atoll(v.text.c_str()));
    if (v.kind == JsonScalar::kInteger) out.push_back(v.value);
  }
  return out;
}

// The same read through a full parse: the reference.
std::vector<int64_t> FromParse(const std::string& text) {
  std::vector<int64_t> out;
  nlohmann::json cfg = nlohmann::json::parse(text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("gemm_backend_config")) return out;
  const nlohmann::json& g = cfg["gemm_backend_config"];
  if (!g.is_object() || !g.contains("dot_dimension_numbers")) return out;
  const nlohmann::json& dn = g["dot_dimension_numbers"];
  if (!dn.is_object() || !dn.contains("lhs_contracting_dimensions") ||
      !dn["lhs_contracting_dimensions"].is_array()) {
    return out;
  }
  for (const auto& v : dn["lhs_contracting_dimensions"]) {
    if (v.is_string()) out.push_back(std::atoll(v.get<std::string>().c_str()));
    else if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  }
  return out;
}

TEST(JsonPathScanTest, ReadsTheArrayAtThePath) {
  const std::string cfg =
      R"({"operation_queue_id":"2","gemm_backend_config":{"alpha_real":1.5e0,"beta":-0,)"
      R"("dot_dimension_numbers":{"rhs_contracting_dimensions":["0"],)"
      R"( "lhs_contracting_dimensions" : [ "2", 1, 3.5, null, [4], {"x":5}, "\n7" ] },)"
      R"("epilogue":"DE\"FAULT","grad_x":false},"wait_on_operation_queues":[]})";
  std::optional<JsonArrayScan> s = ScanJsonArray(cfg, kPath);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->found);
  ASSERT_EQ(s->elements.size(), 7u);
  EXPECT_EQ(s->elements[0].kind, JsonScalar::kString);
  EXPECT_EQ(s->elements[0].text, "2");
  EXPECT_EQ(s->elements[1].kind, JsonScalar::kInteger);
  EXPECT_EQ(s->elements[1].value, 1);
  for (int k : {2, 3, 4, 5}) EXPECT_EQ(s->elements[k].kind, JsonScalar::kOther) << k;
  EXPECT_EQ(s->elements[6].text, "\n7");
  EXPECT_EQ(FromScan(*s), FromParse(cfg));
  EXPECT_THAT(FromScan(*s), testing::ElementsAre(2, 1, 7));
}

TEST(JsonPathScanTest, NotFoundWhereAStepIsMissingOrOfAnotherType) {
  const std::vector<std::string> cases = {
       R"({})", R"([1,2])", R"("text")", R"({"gemm_backend_config":[]})",
        R"({"gemm_backend_config":{"dot_dimension_numbers":"x"}})",
        R"({"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":{}}}})",
        R"({"other":{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":[1]}}}})"};
  for (const std::string& cfg : cases) {
    std::optional<JsonArrayScan> s = ScanJsonArray(cfg, kPath);
    ASSERT_TRUE(s.has_value()) << cfg;
    EXPECT_FALSE(s->found) << cfg;
    EXPECT_TRUE(FromParse(cfg).empty()) << cfg;
  }
}

TEST(JsonPathScanTest, DeclinesWhatOnlyAFullReaderReadsRight) {
  const std::string deep = std::string(70, '[') + std::string(70, ']');
  for (const std::string& cfg : {
           std::string(R"({"a":"\u0041"})"),                     // \u escape
           std::string("{\"a\":\"caf\xc3\xa9\"}"),               // non-ASCII
           std::string(R"({"a":1,})"),                           // invalid JSON
           std::string(R"({"a":01})"), std::string(R"({"a":1.})"), std::string(R"({"a":tru})"),
           std::string(R"({"a":1} x)"), std::string(""), std::string("{\"a\":\"x\ty\"}"),
           std::string(R"({"gemm_backend_config":{},"gemm_backend_config":{}})"),  // repeated
           std::string(R"({"gemm_backend_config":{"dot_dimension_numbers":)"
                       R"({"lhs_contracting_dimensions":[1234567890123456789]}}})"),  // 19 digits
           deep,
           // Numbers a double cannot hold: the full reader rejects the whole text.
           std::string(R"({"x":1e999,"gemm_backend_config":{"dot_dimension_numbers":)"
                       R"({"lhs_contracting_dimensions":["1"]}}})"),
           std::string(R"({"gemm_backend_config":{"dot_dimension_numbers":)"
                       R"({"lhs_contracting_dimensions":[1,-1e400]}}})"),
           std::string("{\"x\":") + std::string(400, '9') + "}"}) {
    EXPECT_FALSE(ScanJsonArray(cfg, kPath).has_value()) << cfg;
  }
  // A key repeated off the path, or a long number elsewhere, is no matter.
  EXPECT_TRUE(ScanJsonArray(R"({"a":1,"a":2})", kPath).has_value());
  EXPECT_TRUE(ScanJsonArray(R"({"a":1234567890123456789012})", kPath).has_value());
}

// Random configs in the shape XLA and Weave write (GpuBackendConfig with a gemm_backend_config),
// with random members, order, nesting, whitespace and escapes; half of them damaged by one edit.
// Wherever the scan answers, it answers what the full parse reads.
TEST(JsonPathScanTest, AgreesWithAFullParseOnRandomConfigs) {
  std::mt19937_64 rng(20261202);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto ws = [&]() -> std::string {
    static const char* kWs[] = {"", "", "", " ", "\n  ", "\t"};
    return kWs[pick(6)];
  };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (depth > 3 ? pick(5) : pick(7)) {
      case 0: return std::to_string(static_cast<int64_t>(rng() % 2000) - 1000);
      case 1: return "\"" + std::to_string(pick(9)) + (pick(4) == 0 ? "\\n\\\"x" : "") + "\"";
      case 2: return pick(2) ? "true" : "null";
      case 3: return pick(2) ? "1.25" : (pick(8) == 0 ? "2e308" : "-3e2");
      case 4: return pick(8) == 0 ? "\"\\u00e9\"" : "\"DEFAULT\"";
      case 5: {
        std::string a = "[";
        for (int k = 0, n = pick(4); k < n; ++k) a += (k ? "," : "") + ws() + value(depth + 1);
        return a + ws() + "]";
      }
      default: {
        std::string o = "{";
        for (int k = 0, n = pick(4); k < n; ++k) {
          o += std::string(k ? "," : "") + ws() + "\"k" + std::to_string(pick(5)) + "\"" + ws() +
               ":" + ws() + value(depth + 1);
        }
        return o + ws() + "}";
      }
    }
  };
  auto object = [&](std::vector<std::pair<std::string, std::string>> members) {
    for (int k = 0, n = pick(3); k < n; ++k) members.push_back({"m" + std::to_string(k), value(1)});
    std::shuffle(members.begin(), members.end(), rng);
    std::string o = "{" + ws();
    for (size_t k = 0; k < members.size(); ++k) {
      o += (k ? "," + ws() : "") + "\"" + members[k].first + "\"" + ws() + ":" + ws() +
           members[k].second;
    }
    return o + ws() + "}";
  };
  int answered = 0, found_nonempty = 0, declined = 0, damaged = 0;
  for (int n = 0; n < 4000; ++n) {
    std::string dims = "[";
    for (int k = 0, c = pick(4); k < c; ++k) dims += std::string(k ? "," : "") + ws() + value(3);
    dims += "]";
    std::vector<std::pair<std::string, std::string>> dn = {{"rhs_contracting_dimensions", "[\"0\"]"}};
    if (pick(6) != 0) dn.push_back({"lhs_contracting_dimensions", pick(8) ? dims : value(2)});
    std::vector<std::pair<std::string, std::string>> gemm = {{"alpha_real", "1"}};
    if (pick(6) != 0) gemm.push_back({"dot_dimension_numbers", object(dn)});
    if (pick(10) == 0) gemm.push_back({"dot_dimension_numbers", "{}"});  // a repeated key
    std::vector<std::pair<std::string, std::string>> top = {{"operation_queue_id", "\"1\""}};
    if (pick(6) != 0) top.push_back({"gemm_backend_config", object(gemm)});
    std::string cfg = object(top);
    if (pick(2) == 0 && !cfg.empty()) {  // one edit: delete, duplicate or replace a character
      ++damaged;
      const size_t at = rng() % cfg.size();
      static const char kChars[] = "{}[],:\"\\0123456789-.eE tfn";
      switch (pick(3)) {
        case 0: cfg.erase(at, 1); break;
        case 1: cfg.insert(at, 1, cfg[at]); break;
        default: cfg[at] = kChars[pick(sizeof(kChars) - 1)]; break;
      }
    }
    std::optional<JsonArrayScan> s = ScanJsonArray(cfg, kPath);
    if (!s) {
      ++declined;
      continue;
    }
    ++answered;
    // A valid text the scan answered for must be valid JSON.
    ASSERT_TRUE(nlohmann::json::accept(cfg)) << cfg;
    ASSERT_EQ(FromScan(*s), FromParse(cfg)) << cfg;
    if (!FromScan(*s).empty()) ++found_nonempty;
  }
  // The scan answers most configs (declining only damaged ones and those with \u escapes or
  // repeated keys), and many of them hold dimensions.
  EXPECT_GT(answered, 1500);
  EXPECT_GT(found_nonempty, 500);
  EXPECT_GT(declined, 500);
  EXPECT_GT(damaged, 1500);
}

}  // namespace
}  // namespace weave::tools
