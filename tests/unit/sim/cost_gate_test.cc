// The cost gate's oracle on the simulator (sim/cost_gate.h): region extraction, estimates of the
// variants through the real passes, caching.
#include "sim/cost_gate.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"

namespace weave::sim {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// A dequantized FP8 activation all-gathered for two dots, plus unrelated work.
constexpr char kTwoConsumers[] = R"(HloModule two, num_partitions=8

ENTRY main {
  xq = f8e4m3fn[512,4096] parameter(0)
  sx = bf16[] parameter(1)
  xd.cvt = bf16[512,4096] convert(xq)
  xd.sbc = bf16[512,4096] broadcast(sx), dimensions={}
  xd = bf16[512,4096] multiply(xd.cvt, xd.sbc)
  xg = bf16[4096,4096] all-gather(xd), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true
  w0 = bf16[4096,2048] parameter(2)
  w1 = bf16[4096,2048] parameter(3)
  y0 = bf16[4096,2048] dot(xg, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y1 = bf16[4096,2048] dot(xg, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  other = bf16[4096,2048] exponential(y1)
  ROOT result = (bf16[4096,2048], bf16[4096,2048], bf16[4096,2048]) tuple(y0, y1, other)
}
)";

std::vector<const HloInstruction*> Seeds(const HloModule& m, std::vector<std::string> names) {
  std::vector<const HloInstruction*> out;
  for (const std::string& n : names) {
    const HloInstruction* i = m.entry()->GetInstruction(n);
    EXPECT_NE(i, nullptr) << n;
    out.push_back(i);
  }
  return out;
}

// Both cache keys of a candidate's region: its canonical text, and the key the oracle finds it
// by (CostRegionKey, printed in the printer's canonical-names mode). Where the canonical texts
// differ the keys must too (else a layer would take another's estimate); where they are equal,
// for the layers of a model, the keys should be as well (else every layer parses its region
// again).
struct RegionKeys {
  std::string canonical, key;
  bool operator==(const RegionKeys& o) const { return canonical == o.canonical && key == o.key; }
};
std::ostream& operator<<(std::ostream& os, const RegionKeys& k) {
  return os << k.canonical << "\n---\n" << k.key;
}
RegionKeys KeysOf(const std::vector<const HloInstruction*>& seeds) {
  absl::StatusOr<std::string> text = CostRegionText(seeds);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return {};
  auto region = ParseCostRegion(*text);
  EXPECT_TRUE(region.ok()) << region.status();
  if (!region.ok()) return {};
  absl::StatusOr<std::string> key = CostRegionKey(seeds);
  EXPECT_TRUE(key.ok()) << key.status();
  if (!key.ok()) return {};
  return {CanonicalRegionText(**region), *key};
}
void ExpectOtherKeys(const RegionKeys& a, const RegionKeys& b) {
  EXPECT_NE(a.canonical, b.canonical);
  EXPECT_NE(a.key, b.key);
}

TEST(ExtractCostRegion, KeepsTheDequantizationAndParameterizesTheRest) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  auto region = ExtractCostRegion(Seeds(*m, {"xg", "y0", "y1"}));
  ASSERT_TRUE(region.ok()) << region.status();
  const HloModule& r = **region;
  EXPECT_EQ(r.num_partitions, 8);
  const HloComputation* e = r.entry();
  // The dequantization chain came along; its FP8 input and scale are parameters.
  EXPECT_NE(e->GetInstruction("xd.cvt"), nullptr);
  EXPECT_NE(e->GetInstruction("xd"), nullptr);
  ASSERT_NE(e->GetInstruction("xq"), nullptr);
  EXPECT_EQ(e->GetInstruction("xq")->opcode(), HloOpcode::kParameter);
  EXPECT_EQ(e->GetInstruction("xq")->shape().element_type, PrimitiveType::F8E4M3FN);
  EXPECT_EQ(e->GetInstruction("w0")->opcode(), HloOpcode::kParameter);
  // Work outside the candidate is not in the region.
  EXPECT_EQ(e->GetInstruction("other"), nullptr);
  EXPECT_EQ(e->GetInstruction("result"), nullptr);
  ASSERT_EQ(e->root()->opcode(), HloOpcode::kTuple);
  EXPECT_EQ(e->root()->operand_count(), 2);
  EXPECT_EQ(e->num_parameters(), 4);  // xq, sx, w0, w1
}

TEST(ExtractCostRegion, Errors) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(ExtractCostRegion({}).ok());
  auto other = Parse(R"(HloModule o
ENTRY e {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
})");
  auto mixed = ExtractCostRegion({m->entry()->GetInstruction("xg"),
                                  other->entry()->GetInstruction("n")});
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("one computation"), std::string::npos);
}

TEST(CanonicalRegionText, IgnoresNames) {
  auto a = Parse(kTwoConsumers);
  std::string renamed = kTwoConsumers;
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"y0", "q_proj"}, {"xg", "gathered"}}) {
    size_t p;
    while ((p = renamed.find(from + " ")) != std::string::npos ||
           (p = renamed.find(from + ",")) != std::string::npos ||
           (p = renamed.find(from + ")")) != std::string::npos) {
      renamed.replace(p, from.size(), to);
    }
  }
  auto b = Parse(renamed);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ra = ExtractCostRegion(Seeds(*a, {"xg", "y0", "y1"}));
  auto rb = ExtractCostRegion(Seeds(*b, {"gathered", "q_proj", "y1"}));
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(CanonicalRegionText(**ra), CanonicalRegionText(**rb));
  const RegionKeys ka = KeysOf(Seeds(*a, {"xg", "y0", "y1"}));
  EXPECT_EQ(ka, KeysOf(Seeds(*b, {"gathered", "q_proj", "y1"})));
  // The two steps give the region ExtractCostRegion gives.
  EXPECT_EQ(ka.canonical, CanonicalRegionText(**ra));
  // Another shape is another region, for both keys.
  std::string wider = kTwoConsumers;
  wider.replace(wider.find("w1 = bf16[4096,2048]"), 20, "w1 = bf16[4096,1024]");
  for (const char* y1 : {"y1 = bf16[4096,2048] dot", "bf16[4096,2048], bf16[4096,2048]) tuple"}) {
    size_t at = wider.find(y1);
    ASSERT_NE(at, std::string::npos);
    wider.replace(wider.find("2048]", at), 5, "1024]");
  }
  wider.replace(wider.find("other = bf16[4096,2048]"), 23, "other = bf16[4096,1024]");
  auto c = Parse(wider);
  ASSERT_NE(c, nullptr);
  ExpectOtherKeys(ka, KeysOf(Seeds(*c, {"xg", "y0", "y1"})));
}

// The same candidate in two layers differs in channel ids, queue ids and source locations: one
// key. A different order of queue ids, or another structure, is another key.
TEST(CanonicalRegionText, RanksIdsAndDropsMetadata) {
  auto layer = [](int channel, int q0, int q1, const std::string& op_name) {
    return absl::StrCat(R"(HloModule l, num_partitions=4
ENTRY main {
  x = bf16[256,512] parameter(0)
  g = bf16[1024,512] all-gather(x), channel_id=)", channel, R"(, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, metadata={op_name=")", op_name, R"("}
  w0 = bf16[512,256] parameter(1)
  w1 = bf16[512,256] parameter(2)
  a = bf16[1024,256] dot(g, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":")", q0, R"(","wait_on_operation_queues":[]}
  b = bf16[1024,256] dot(g, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"operation_queue_id":")", q1, R"(","wait_on_operation_queues":[]}
  ROOT t = (bf16[1024,256], bf16[1024,256]) tuple(a, b)
})");
  };
  auto key = [](const std::string& text) {
    auto m = ParseHloModule(text, "layer");
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return RegionKeys();
    return KeysOf(Seeds(**m, {"g", "a", "b"}));
  };
  const RegionKeys l1 = key(layer(5, 11, 12, "layer_1/mlp"));
  const RegionKeys l7 = key(layer(93, 605, 606, "layer_7/mlp"));
  EXPECT_FALSE(l1.canonical.empty());
  EXPECT_FALSE(l1.key.empty());
  EXPECT_EQ(l1, l7);
  EXPECT_EQ(l1.canonical.find("layer_1"), std::string::npos);
  EXPECT_EQ(l1.key.find("layer_1"), std::string::npos);
  EXPECT_EQ(l1.key.find("channel_id=5"), std::string::npos);  // by rank
  EXPECT_NE(l1.key.find("channel_id=1"), std::string::npos);
  ExpectOtherKeys(l1, key(layer(5, 12, 11, "layer_1/mlp")));  // the streams' order is kept
  ExpectOtherKeys(l1, key(layer(5, 11, 11, "layer_1/mlp")));  // and which dots share one
  ExpectOtherKeys(l1, key(layer(5, 0, 12, "layer_1/mlp")));   // 0, the default stream, stays 0
}

// A wait names a queue: its entries are ranked with the queue ids (one map), in both the string
// and the integer form, so that a region whose third dot waits on the first dot's stream and one
// whose third dot waits on the second's are two keys, and shifted ids are one.
TEST(CanonicalRegionText, RanksTheQueuesWaitedOn) {
  auto region = [](const std::string& qa, const std::string& qb, const std::string& waits) {
    return absl::StrCat(R"(HloModule w, num_partitions=4
ENTRY main {
  x = bf16[256,512] parameter(0)
  g = bf16[1024,512] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  w0 = bf16[512,256] parameter(1)
  a = bf16[1024,256] dot(g, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}, )",
                        R"(backend_config={"operation_queue_id":)", qa, R"(}
  b = bf16[1024,256] dot(g, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}, )",
                        R"(backend_config={"operation_queue_id":)", qb, R"(}
  c = bf16[1024,256] add(a, b), backend_config={"wait_on_operation_queues":[)", waits, R"(]}
  ROOT t = (bf16[1024,256]) tuple(c)
})");
  };
  auto key = [](const std::string& text) {
    auto m = ParseHloModule(text, "waits");
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return RegionKeys();
    return KeysOf(Seeds(**m, {"g", "a", "b", "c"}));
  };
  const RegionKeys on_a = key(region("\"3\"", "\"7\"", "\"3\""));
  EXPECT_FALSE(on_a.canonical.empty());
  EXPECT_EQ(on_a, key(region("\"40\"", "\"90\"", "\"40\"")));
  ExpectOtherKeys(on_a, key(region("\"1\"", "\"3\"", "\"3\"")));  // waits on b's stream
  ExpectOtherKeys(on_a, key(region("\"3\"", "\"7\"", "\"5\"")));  // on a stream outside
  // The integer form: the same map.
  EXPECT_EQ(key(region("3", "7", "3")), key(region("40", "90", "40")));
  ExpectOtherKeys(key(region("3", "7", "3")), key(region("3", "7", "7")));
  // Not a queue id (out of range, signed): kept as written.
  const RegionKeys huge = key(region("\"99999999999999999999\"", "\"7\"", "\"7\""));
  EXPECT_NE(huge.canonical.find("99999999999999999999"), std::string::npos);
  EXPECT_NE(huge.key.find("99999999999999999999"), std::string::npos);
}

// The key holds the called computations too: their names are renamed and their signatures (with
// parameter names without a '%') left out, metadata is left out whatever its strings hold, and
// another reduction is another key.
TEST(CostRegionKey, CalleesAndMetadataStrings) {
  auto layer = [](const std::string& add, const std::string& lhs, const std::string& op,
                  const std::string& op_name) {
    return absl::StrCat("HloModule r, num_partitions=4\n\n%", add, " (", lhs,
                        ": f32[], rhs: f32[]) -> f32[] {\n  %", lhs,
                        " = f32[] parameter(0)\n  %rhs = f32[] parameter(1)\n  ROOT %s = f32[] ",
                        op, "(%", lhs, R"(, %rhs)
}

ENTRY %main {
  %x = f32[1024,512] parameter(0)
  %w = f32[512,256] parameter(1)
  %d = f32[1024,256] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name=")",
                        op_name, R"(" source_line=3}
  ROOT %rs = f32[256,256] reduce-scatter(%d), channel_id=9, replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%)",
                        add, "\n}\n");
  };
  auto key = [](const std::string& text) {
    auto m = ParseHloModule(text, "layer");
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return RegionKeys();
    return KeysOf(Seeds(**m, {"d", "rs"}));
  };
  const RegionKeys a = key(layer("sum", "lhs", "add", "jit(f)/dot_general}{"));
  EXPECT_NE(a.key.find("add("), std::string::npos);
  EXPECT_EQ(a.key.find("sum"), std::string::npos);
  EXPECT_EQ(a.key.find("lhs:"), std::string::npos);  // no signature
  EXPECT_EQ(a.key.find("jit(f)"), std::string::npos);
  EXPECT_EQ(a.key.find("source_line"), std::string::npos);
  EXPECT_EQ(a, key(layer("add.7", "acc", "add", "layer_9/x")));
  ExpectOtherKeys(a, key(layer("sum", "lhs", "maximum", "jit(f)/dot_general}{")));
}

// A name inside an attribute value the printer keeps verbatim (a frontend attribute) is kept in
// the key as in the canonical text: the keys differ exactly where the canonical texts do.
TEST(CostRegionKey, NamesInVerbatimAttributesAreKeptAsTheCanonicalTextKeepsThem) {
  auto layer = [](const std::string& x, const std::string& ref) {
    return absl::StrCat("HloModule v, num_partitions=4\nENTRY main {\n  ", x,
                        " = bf16[256,512] parameter(0)\n"
                        "  g = bf16[1024,512] all-gather(", x,
                        "), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
                        "use_global_device_ids=true, frontend_attributes={_peer=\"%", ref,
                        "\"}\n  w = bf16[512,256] parameter(1)\n"
                        "  ROOT a = bf16[1024,256] dot(g, w), lhs_contracting_dims={1}, "
                        "rhs_contracting_dims={0}\n}\n");
  };
  auto key = [](const std::string& text) {
    auto m = ParseHloModule(text, "verbatim");
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return RegionKeys();
    return KeysOf(Seeds(**m, {"g", "a"}));
  };
  const RegionKeys k = key(layer("x", "x"));
  EXPECT_NE(k.key.find("%x"), std::string::npos) << k.key;
  EXPECT_EQ(k, key(layer("act", "x")));  // the parameter's own name is renamed
  ExpectOtherKeys(k, key(layer("x", "act")));
}

// A value shared by every layer (partition-id, a constant) has users all over the module; the
// region takes it as a cheap producer and counts its readers from the region's side: it is an
// output only when something outside the region reads it through the region, not because other
// layers do.
TEST(ExtractCostRegion, SharedProducersAndPathBound) {
  std::string text = R"(HloModule shared, num_partitions=4
ENTRY main {
  pid = u32[] partition-id()
  x = bf16[256,512] parameter(0)
  g = bf16[1024,512] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  w = bf16[512,256] parameter(1)
  pb = bf16[] convert(pid)
  pbb = bf16[1024,256] broadcast(pb), dimensions={}
  sq = bf16[1024,256] multiply(pbb, pbb)
  outside = bf16[1024,256] negate(pbb)
)";
  // A long chain from the all-gather to a far dot: 80 negates, beyond the path bound.
  std::string prev = "g";
  for (int k = 0; k < 80; ++k) {
    absl::StrAppend(&text, "  n", k, " = bf16[1024,512] negate(", prev, ")\n");
    prev = absl::StrCat("n", k);
  }
  absl::StrAppend(&text,
                  "  d0 = bf16[1024,256] dot(g, w), lhs_contracting_dims={1}, "
                  "rhs_contracting_dims={0}\n  d = bf16[1024,256] add(d0, sq)\n"
                  "  far = bf16[1024,256] dot(",
                  prev, ", w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
  // Many readers of pid elsewhere.
  std::vector<std::string> outs = {"d", "far", "outside"};
  for (int k = 0; k < 200; ++k) {
    absl::StrAppend(&text, "  use", k, " = u32[] add(pid, pid)\n");
    outs.push_back(absl::StrCat("use", k));
  }
  absl::StrAppend(&text, "  ROOT t = (bf16[1024,256], bf16[1024,256], bf16[1024,256]");
  for (int k = 0; k < 200; ++k) absl::StrAppend(&text, ", u32[]");
  absl::StrAppend(&text, ") tuple(", absl::StrJoin(outs, ", "), ")\n}\n");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  // Near seeds: the paths g -> d0 -> d and sq -> d are in with sq's cheap producers (pbb, pb,
  // pid), nothing else of the module.
  auto near = ExtractCostRegion(Seeds(*m, {"g", "d0", "sq", "d"}));
  ASSERT_TRUE(near.ok()) << near.status();
  const HloComputation* e = (*near)->entry();
  EXPECT_EQ(e->GetInstruction("use0"), nullptr);
  EXPECT_EQ(e->GetInstruction("n0"), nullptr);
  EXPECT_EQ(e->GetInstruction("outside"), nullptr);
  std::vector<std::string> root;
  for (const HloInstruction* o : e->root()->operands()) root.push_back(o->name());
  // Outputs: d and g (the module reads them: g feeds the chain), pbb (read twice by sq, and once
  // outside), pid (read by the 200 adds); not pb or sq, read only inside.
  EXPECT_THAT(root, ::testing::UnorderedElementsAre("d", "g", "pbb", "pid"));
  // A path of 81 steps from g to far is past the bound: its chain is not pulled in (the far dot
  // reads it as a parameter), where a short one is.
  auto far = ExtractCostRegion(Seeds(*m, {"g", "far"}));
  ASSERT_TRUE(far.ok()) << far.status();
  const HloInstruction* last = (*far)->entry()->GetInstruction(prev);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->opcode(), HloOpcode::kParameter);
  EXPECT_EQ((*far)->entry()->GetInstruction("n0"), nullptr);
  // 30 steps (attention between two dots is about that long) are within it.
  auto chain = ExtractCostRegion(Seeds(*m, {"g", "n29"}));
  ASSERT_TRUE(chain.ok()) << chain.status();
  for (int k = 0; k < 29; ++k) {
    EXPECT_NE((*chain)->entry()->GetInstruction(absl::StrCat("n", k)), nullptr) << k;
  }
}

// The walk for paths between seeds stops below the lowest seed of a topological index
// (CostQuery::topological_index): the region's text is the same, and the walk does not climb
// the 100 instructions upstream of the all-gather that no seed reaches.
TEST(CostRegionText, ATopologicalIndexCutsTheWalkNotTheRegion) {
  std::string text = R"(HloModule upstream, num_partitions=4
ENTRY main {
  x0 = bf16[256,512] parameter(0)
)";
  std::string prev = "x0";
  for (int k = 0; k < 100; ++k) {
    absl::StrAppend(&text, "  u", k, " = bf16[256,512] negate(", prev, ")\n");
    prev = absl::StrCat("u", k);
  }
  absl::StrAppend(&text, "  g = bf16[1024,512] all-gather(", prev,
                  "), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
                  "use_global_device_ids=true\n"
                  "  gn = bf16[1024,512] negate(g)\n"
                  "  w = bf16[512,256] parameter(1)\n"
                  "  d = bf16[1024,256] dot(gn, w), lhs_contracting_dims={1}, "
                  "rhs_contracting_dims={0}\n"
                  "  ROOT t = (bf16[1024,256], bf16[256,512]) tuple(d, ",
                  prev, ")\n}\n");
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  absl::flat_hash_map<const HloInstruction*, int64_t> position;
  for (const HloInstruction* i : m->entry()->MakeInstructionPostOrder()) {
    position.emplace(i, static_cast<int64_t>(position.size()));
  }
  int64_t asked = 0;
  auto index = [&](const HloInstruction* h) -> int64_t {
    ++asked;
    auto it = position.find(h);
    return it == position.end() ? -1 : it->second;
  };
  const std::vector<const HloInstruction*> seeds = Seeds(*m, {"g", "d"});
  absl::StatusOr<std::string> plain = CostRegionText(seeds);
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<std::string> cut = CostRegionText(seeds, index);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(*cut, *plain);
  EXPECT_THAT(*cut, ::testing::HasSubstr("negate(")) << "the path g -> gn -> d is in";
  // The seeds, and what the walk reaches at or just below g: not the chain above it.
  EXPECT_GT(asked, 0);
  EXPECT_LT(asked, 10);
  absl::StatusOr<std::string> plain_key = CostRegionKey(seeds);
  absl::StatusOr<std::string> cut_key = CostRegionKey(seeds, index);
  ASSERT_TRUE(plain_key.ok() && cut_key.ok());
  EXPECT_EQ(*cut_key, *plain_key);
  // A seed the index does not know (added since it was made): no cut, the same text.
  position.erase(m->entry()->GetInstruction("d"));
  asked = 0;
  absl::StatusOr<std::string> unknown = CostRegionText(seeds, index);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(*unknown, *plain);
  EXPECT_LE(asked, 2) << "the walk asks nothing beyond the seeds";
}

CostGateConfig Config(const std::string& system) {
  CostGateConfig c;
  auto s = LoadSystem(system);
  EXPECT_TRUE(s.ok());
  c.system = *s;
  c.pipeline = {"windowed-einsum-decomposer", "windowed-einsum-handler", "collective-quantizer",
                "fp8-gemm-rewriter", "dce"};
  return c;
}

TEST(SimCostOracle, EstimatesBothVariantsThroughThePipeline) {
  auto m = Parse(kTwoConsumers);
  ASSERT_NE(m, nullptr);
  SimCostOracle oracle(Config("h100x8"));
  CostQuery q = CostQuery::WithOrWithout("windowed-einsum-decomposer", "y0", "all-gather 'xg'",
                                         Seeds(*m, {"xg", "y0", "y1"}));
  CostEstimate e = oracle.Decide(q);
  ASSERT_TRUE(e.ok()) << e.error;
  ASSERT_EQ(e.us.size(), 2u);
  EXPECT_GT(e.us[0], 0);
  EXPECT_GT(e.us[1], 0);
  // The rewrite changes the estimate (a loop is simulated, not the plain all-gather).
  EXPECT_NE(e.us[0], e.us[1]);
  EXPECT_EQ(e.system, "h100x8");
  EXPECT_EQ(oracle.decisions().size(), 1u);
  // The same region again is answered from the cache with the same figures.
  CostEstimate again = oracle.Decide(q);
  EXPECT_EQ(again.us, e.us);
  // The "without" figure is the plain region's simulated time after the later passes (the
  // collective-quantizer moves the unannotated, hence replicated, scale after the all-gather).
  auto region = ExtractCostRegion(q.seeds);
  ASSERT_TRUE(region.ok());
  HloPassPipeline later;
  ASSERT_TRUE(later
                  .AddPassesByName("windowed-einsum-handler,collective-quantizer,"
                                   "fp8-gemm-rewriter,dce",
                                   PassOptions())
                  .ok());
  ASSERT_TRUE(later.Run(region->get()).ok());
  auto plain = SimulateModule(**region, Config("h100x8").system, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_NEAR(e.us[0], plain->total_us, 1e-9 + 1e-6 * plain->total_us);
}

TEST(SimCostOracle, AnUnknownPassIsAnErrorNotACrash) {
  auto m = Parse(kTwoConsumers);
  SimCostOracle oracle(Config("h100x8"));
  CostQuery q = CostQuery::WithOrWithout("no-such-pass", "y0", "", Seeds(*m, {"xg", "y0"}));
  CostEstimate e = oracle.Decide(q);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.chosen, 1);
}

}  // namespace
}  // namespace weave::sim
