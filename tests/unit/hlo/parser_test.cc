// Parser tests: every syntax feature of ../shared/specs/hlo-text-format.md §1-§7 lands in the
// right IR field.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "shared_files.h"

namespace weave {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::unique_ptr<HloModule> Parse(std::string_view text) {
  auto m = ParseHloModule(text, "test.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  return *std::move(m);
}

HloInstruction* Find(HloModule* m, std::string_view name) {
  for (HloComputation* c : m->computations()) {
    for (HloInstruction* i : c->instructions()) {
      if (i->name() == name) return i;
    }
  }
  return nullptr;
}

TEST(ParserTest, FullDumpStyle) {
  auto m = Parse(R"(HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}, num_partitions=4

%adder (lhs: f32[], rhs: f32[]) -> f32[] {
  %lhs = f32[] parameter(0)
  %rhs = f32[] parameter(1)
  ROOT %sum.1 = f32[] add(f32[] %lhs, f32[] %rhs)
}

ENTRY %main.3 (a.1: f32[8], b.2: f32[8]) -> f32[8] {
  %a.1 = f32[8]{0} parameter(0), sharding={replicated}
  %b.2 = f32[8]{0} parameter(1)
  %prod = f32[8]{0} multiply(f32[8]{0} %a.1, f32[8]{0} %b.2), metadata={op_name="jit(f)/mul" source_file="m.py" source_line=3}
  ROOT %ar = f32[8]{0} all-reduce(%prod), channel_id=7, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=%adder
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->name(), "jit_f");
  EXPECT_TRUE(m->is_scheduled);
  EXPECT_EQ(m->num_partitions, 4);
  EXPECT_TRUE(m->has_num_partitions);
  ASSERT_EQ(m->header_attributes.size(), 1u);
  EXPECT_EQ(m->header_attributes[0].first, "entry_computation_layout");
  EXPECT_EQ(m->header_attributes[0].second, "{(f32[8]{0}, f32[8]{0})->f32[8]{0}}");
  ASSERT_NE(m->entry(), nullptr);
  EXPECT_EQ(m->entry()->name(), "main.3");
  EXPECT_EQ(m->entry()->num_parameters(), 2);
  HloInstruction* ar = m->entry()->root();
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->name(), "ar");
  EXPECT_EQ(ar->opcode(), HloOpcode::kAllReduce);
  EXPECT_EQ(ar->channel_id, 7);
  EXPECT_TRUE(ar->use_global_device_ids);
  ASSERT_TRUE(ar->replica_groups.has_value());
  EXPECT_THAT(ar->replica_groups->groups, ElementsAre(ElementsAre(0, 1, 2, 3)));
  ASSERT_EQ(ar->called_computations().size(), 1u);
  EXPECT_EQ(ar->to_apply()->name(), "adder");
  HloInstruction* prod = Find(m.get(), "prod");
  ASSERT_NE(prod, nullptr);
  EXPECT_EQ(prod->metadata, R"(op_name="jit(f)/mul" source_file="m.py" source_line=3)");
  EXPECT_EQ(prod->operand(0)->name(), "a.1");
  EXPECT_EQ(prod->operand(1)->name(), "b.2");
  // Users are registered by the parser.
  EXPECT_THAT(prod->users(), ElementsAre(ar));
  HloInstruction* a = Find(m.get(), "a.1");
  ASSERT_TRUE(a->sharding.has_value());
  EXPECT_TRUE(a->sharding->IsReplicated());
  EXPECT_EQ(a->parameter_number, 0);
}

TEST(ParserTest, ShortTestStyleWithoutHeaderEntryOrRoot) {
  auto m = Parse(R"(
sq {
  v = f32[4] parameter(0)
  w = f32[4] multiply(v, v)
}
main {
  x = f32[4] parameter(0)
  y = f32[4] call(x), to_apply=sq
  z = f32[4] negate(y)
}
)");
  ASSERT_NE(m, nullptr);
  ASSERT_NE(m->entry(), nullptr);
  EXPECT_EQ(m->entry()->name(), "main");  // last computation
  EXPECT_EQ(m->entry()->root()->name(), "z");  // last instruction
  EXPECT_EQ(m->GetComputation("sq")->root()->name(), "w");
  // Shapes without layouts keep no layout.
  EXPECT_FALSE(m->entry()->root()->shape().layout.has_value());
}

TEST(ParserTest, CommentsAndIndexMarkers) {
  auto m = Parse(R"(HloModule c // trailing comment
// a whole-line comment
ENTRY e {
  /* block */ p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) tuple(p0, p1, p0, p1, p0, /*index=5*/p1) // end
}
)");
  ASSERT_NE(m, nullptr);
  HloInstruction* t = m->entry()->root();
  EXPECT_EQ(t->operand_count(), 6);
  EXPECT_EQ(t->shape().tuple_shapes.size(), 6u);
  EXPECT_EQ(t->operand(5)->name(), "p1");
}

TEST(ParserTest, LayoutsDynamicDimsAndTypes) {
  auto m = Parse(R"(ENTRY e {
  a = bf16[128,256]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  b = f32[<=4,?]{1,0} parameter(1)
  c = f8e4m3fn[16]{0} parameter(2)
  d = token[] parameter(3)
  f = u4[64]{0:E(4)} parameter(4)
  ROOT r = (bf16[128,256]{1,0:T(8,128)(2,1)S(1)}, f8e4m3fn[16]{0}) tuple(a, c)
}
)");
  ASSERT_NE(m, nullptr);
  const Shape& a = m->entry()->parameter(0)->shape();
  EXPECT_EQ(a.element_type, PrimitiveType::BF16);
  ASSERT_TRUE(a.layout.has_value());
  EXPECT_THAT(a.layout->minor_to_major, ElementsAre(1, 0));
  EXPECT_EQ(a.layout->suffix, "T(8,128)(2,1)S(1)");
  const Shape& b = m->entry()->parameter(1)->shape();
  EXPECT_THAT(b.dims, ElementsAre(4, -1));
  EXPECT_THAT(b.dynamic, ElementsAre(true, true));
  EXPECT_EQ(m->entry()->parameter(2)->shape().element_type, PrimitiveType::F8E4M3FN);
  EXPECT_TRUE(m->entry()->parameter(3)->shape().IsToken());
  EXPECT_EQ(m->entry()->parameter(4)->shape().layout->suffix, "E(4)");
}

TEST(ParserTest, CrLfLineEndings) {
  auto m = Parse("HloModule w\r\n\r\nENTRY e {\r\n  p = f32[2]{0} parameter(0)\r\n  ROOT n = "
                 "f32[2]{0} negate(p)\r\n}\r\n");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->entry()->root()->opcode(), HloOpcode::kNegate);
}

TEST(ParserTest, TypedAttributes) {
  auto m = Parse(R"(HloModule t, replica_count=2
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[2,8,16]{2,1,0} parameter(0)
  y = f32[2,16,4]{2,1,0} parameter(1)
  d = f32[2,8,4]{2,1,0} dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, operand_precision={HIGHEST,default}
  s = f32[2,4,4]{2,1,0} slice(d), slice={[0:2], [2:6], [0:4]}
  s2 = f32[1,2,2]{2,1,0} slice(s), slice={[0:2:2], [0:4:2], [0:4:2]}
  z = f32[] constant(0)
  p = f32[2,11,4]{2,1,0} pad(d, z), padding=0_0x1_2x0_0
  p2 = f32[2,16,4]{2,1,0} pad(d, z), padding=0_0x0_1_1x0_0
  c = pred[2,8,4]{2,1,0} compare(d, d), direction=lt, type=TOTALORDER
  i = s32[8]{0} iota(), iota_dimension=0
  bc = f32[4,2,8,4]{3,2,1,0} broadcast(d), dimensions={1,2,3}
  tr = f32[4,8,2]{2,1,0} transpose(d), dimensions={2,1,0}
  ds = f32[1,8,4]{2,1,0} dynamic-slice(d, i, i, i), dynamic_slice_sizes={1,8,4}
  r = f32[2]{0} reduce(d, z), dimensions={1,2}, to_apply=mx
  ag = f32[2,8,16]{2,1,0} all-gather(d), channel_id=3, replica_groups={{0,1},{2,3}}, dimensions={2}, use_global_device_ids=true
  cp = f32[2,8,4]{2,1,0} collective-permute(d), channel_id=4, source_target_pairs={{0,1},{1,0}}
  cc = f32[2,8,4]{2,1,0} custom-call(d), custom_call_target="__my$target", api_version=API_VERSION_STATUS_RETURNING, backend_config={"a":{"b":[1,2]}}
  fa = f32[2,8,4]{2,1,0} copy(d), frontend_attributes={_xla_stream="1",xla.sdy.meshes={mesh = #sdy.mesh<["x"=4]>}}
  rp = f32[2,8,4]{2,1,0} reduce-precision(d), exponent_bits=5, mantissa_bits=2
  ROOT t = (f32[2,8,4]{2,1,0}, f32[2]{0}) tuple(cp, r), control-predecessors={ag}
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->replica_count, 2);
  auto* d = Find(m.get(), "d");
  EXPECT_THAT(d->dot_dims().lhs_batch, ElementsAre(0));
  EXPECT_THAT(d->dot_dims().lhs_contracting, ElementsAre(2));
  EXPECT_THAT(d->dot_dims().rhs_batch, ElementsAre(0));
  EXPECT_THAT(d->dot_dims().rhs_contracting, ElementsAre(1));
  EXPECT_THAT(d->operand_precision(), ElementsAre("highest", "default"));
  auto* s = Find(m.get(), "s");
  ASSERT_EQ(s->slice().size(), 3u);
  EXPECT_EQ(s->slice()[1].start, 2);
  EXPECT_EQ(s->slice()[1].limit, 6);
  EXPECT_EQ(s->slice()[1].stride, 1);
  EXPECT_EQ(Find(m.get(), "s2")->slice()[2].stride, 2);
  auto* p = Find(m.get(), "p");
  ASSERT_EQ(p->padding().size(), 3u);
  EXPECT_EQ(p->padding()[1].lo, 1);
  EXPECT_EQ(p->padding()[1].hi, 2);
  EXPECT_EQ(Find(m.get(), "p2")->padding()[1].interior, 1);
  auto* c = Find(m.get(), "c");
  EXPECT_EQ(c->comparison_direction, ComparisonDirection::kLt);
  EXPECT_EQ(c->comparison_type(), "TOTALORDER");
  EXPECT_EQ(Find(m.get(), "i")->iota_dimension, 0);
  EXPECT_THAT(Find(m.get(), "bc")->dimensions, ElementsAre(1, 2, 3));
  EXPECT_THAT(Find(m.get(), "ds")->dynamic_slice_sizes(), ElementsAre(1, 8, 4));
  EXPECT_EQ(Find(m.get(), "r")->to_apply()->name(), "mx");
  auto* ag = Find(m.get(), "ag");
  EXPECT_EQ(ag->channel_id, 3);
  EXPECT_THAT(ag->replica_groups->groups, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(ag->dimensions, ElementsAre(2));
  EXPECT_THAT(Find(m.get(), "cp")->source_target_pairs(), ElementsAre(Pair(0, 1), Pair(1, 0)));
  auto* cc = Find(m.get(), "cc");
  EXPECT_EQ(cc->custom_call_target(), "__my$target");
  EXPECT_EQ(cc->backend_config, R"({"a":{"b":[1,2]}})");
  ASSERT_NE(cc->GetRawAttribute("api_version"), nullptr);
  EXPECT_EQ(*cc->GetRawAttribute("api_version"), "API_VERSION_STATUS_RETURNING");
  auto* fa = Find(m.get(), "fa");
  EXPECT_EQ(fa->frontend_attributes.at("_xla_stream"), "\"1\"");
  EXPECT_EQ(fa->frontend_attributes.at("xla.sdy.meshes"), R"({mesh = #sdy.mesh<["x"=4]>})");
  EXPECT_EQ(fa->GetFrontendAttribute("_xla_stream"), "1");
  auto* rp = Find(m.get(), "rp");
  EXPECT_EQ(rp->exponent_bits, 5);
  EXPECT_EQ(rp->mantissa_bits, 2);
  auto* t = m->entry()->root();
  EXPECT_THAT(t->control_predecessors(), ElementsAre(ag));
}

TEST(ParserTest, WhileAndConditional) {
  auto m = Parse(R"(HloModule w
cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[4]) tuple(j, v)
}
br0 {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}
br1 {
  a = f32[4] parameter(0)
  ROOT n = f32[4] abs(a)
}
ENTRY e {
  x = f32[4] parameter(0)
  k = s32[] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[4]) tuple(z, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body, backend_config={"known_trip_count":{"n":"8"}}
  c = f32[4] conditional(k, x, x), branch_computations={br0, br1}
  pr = pred[] constant(true)
  c2 = f32[4] conditional(pr, x, x), true_computation=br0, false_computation=br1
}
)");
  ASSERT_NE(m, nullptr);
  auto* w = Find(m.get(), "w");
  EXPECT_EQ(w->while_condition()->name(), "cond");
  EXPECT_EQ(w->while_body()->name(), "body");
  EXPECT_EQ(w->backend_config, R"({"known_trip_count":{"n":"8"}})");
  auto* c = Find(m.get(), "c");
  EXPECT_FALSE(c->conditional_is_pred);
  ASSERT_EQ(c->called_computations().size(), 2u);
  EXPECT_EQ(c->called_computations()[1]->name(), "br1");
  auto* c2 = Find(m.get(), "c2");
  EXPECT_TRUE(c2->conditional_is_pred);
  EXPECT_EQ(c2->called_computations()[0]->name(), "br0");
  // The same instruction names in different computations are kept as written.
  EXPECT_EQ(m->GetComputation("cond")->parameter(0)->name(), "s");
  EXPECT_EQ(m->GetComputation("body")->parameter(0)->name(), "s");
}

TEST(ParserTest, Literals) {
  auto m = Parse(R"(ENTRY e {
  a = f32[3]{0} constant({1, -2.5, 1e-05})
  b = pred[] constant(true)
  c = pred[2]{0} constant({1, 0})
  d = u64[] constant(18446744073709551615)
  e = f32[] constant(nan(0x7fff1))
  f = f32[] constant(-inf)
  g = s32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } })
  h = bf16[64]{0} constant({...})
  i = c64[] constant((1, -2))
  j = f32[0]{0} constant({})
  k = s64[] constant(-9223372036854775808)
  ROOT t = (f32[3]{0}) tuple(a)
}
)");
  ASSERT_NE(m, nullptr);
  auto lit = [&](std::string_view n) -> const Literal& { return *Find(m.get(), n)->literal; };
  EXPECT_THAT(lit("a").f, ElementsAre(1.0, -2.5, 1e-05));
  EXPECT_EQ(lit("a").text, "{1, -2.5, 1e-05}");
  EXPECT_THAT(lit("b").i, ElementsAre(1));
  EXPECT_THAT(lit("c").i, ElementsAre(1, 0));
  EXPECT_EQ(static_cast<uint64_t>(lit("d").i.at(0)), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(std::isnan(lit("e").f.at(0)));
  EXPECT_EQ(lit("e").text, "nan(0x7fff1)");
  EXPECT_EQ(lit("f").f.at(0), -std::numeric_limits<double>::infinity());
  EXPECT_THAT(lit("g").i, ElementsAre(1, 2, 3, 4));
  EXPECT_TRUE(lit("h").elided);
  EXPECT_TRUE(lit("h").f.empty());
  EXPECT_FALSE(lit("a").elided);
  EXPECT_THAT(lit("i").f, ElementsAre(1.0, -2.0));
  EXPECT_TRUE(lit("j").f.empty());
  EXPECT_EQ(lit("k").i.at(0), std::numeric_limits<int64_t>::min());
}

TEST(ParserTest, SugaredAndUnsugaredAsync) {
  auto m = Parse(R"(HloModule a, num_partitions=2
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
wrapped {
  q = f32[8]{0} parameter(0)
  ROOT rs = f32[4]{0} reduce-scatter(q), replica_groups={{0,1}}, dimensions={0}, to_apply=add
}
ENTRY e {
  p = f32[8]{0} parameter(0)
  st = ((f32[8]{0}), f32[4]{0}) reduce-scatter-start(p), replica_groups={{0,1}}, dimensions={0}, to_apply=add
  dn = f32[4]{0} reduce-scatter-done(st)
  st2 = ((f32[8]{0}), f32[4]{0}) async-start(p), calls=wrapped
  dn2 = f32[4]{0} async-done(st2)
  ags = (f32[8]{0}, f32[16]{0}) all-gather-start(p), replica_groups={{0,1}}, dimensions={0}
  agd = f32[16]{0} all-gather-done(ags)
  ROOT t = (f32[4]{0}, f32[4]{0}, f32[16]{0}) tuple(dn, dn2, agd)
}
)");
  ASSERT_NE(m, nullptr);
  auto* st = Find(m.get(), "st");
  EXPECT_EQ(st->opcode(), HloOpcode::kAsyncStart);
  EXPECT_EQ(st->async_sugar(), "reduce-scatter");
  EXPECT_THAT(st->dimensions, ElementsAre(0));
  EXPECT_EQ(st->to_apply()->name(), "add");
  auto* dn = Find(m.get(), "dn");
  EXPECT_EQ(dn->opcode(), HloOpcode::kAsyncDone);
  EXPECT_EQ(dn->async_sugar(), "reduce-scatter");
  auto* st2 = Find(m.get(), "st2");
  EXPECT_EQ(st2->opcode(), HloOpcode::kAsyncStart);
  EXPECT_TRUE(st2->async_sugar().empty());
  EXPECT_EQ(st2->called_computations().at(0)->name(), "wrapped");
  EXPECT_EQ(Find(m.get(), "ags")->opcode(), HloOpcode::kAllGatherStart);
  EXPECT_EQ(Find(m.get(), "agd")->opcode(), HloOpcode::kAllGatherDone);
}

TEST(ParserTest, CompactGetTupleElementCreatesInstructions) {
  auto m = Parse(R"(ENTRY e {
  p = (f32[2], (s32[], f32[3])) parameter(0)
  a = f32[3] negate(p#1#1)
  b = f32[3] abs(p#1#1)
  ROOT r = f32[2] copy(%p#0)
}
)");
  ASSERT_NE(m, nullptr);
  auto* a = Find(m.get(), "a");
  HloInstruction* g2 = a->operand(0);
  EXPECT_EQ(g2->opcode(), HloOpcode::kGetTupleElement);
  EXPECT_EQ(g2->tuple_index, 1);
  EXPECT_EQ(g2->shape().dims, std::vector<int64_t>({3}));
  HloInstruction* g1 = g2->operand(0);
  EXPECT_EQ(g1->opcode(), HloOpcode::kGetTupleElement);
  EXPECT_EQ(g1->tuple_index, 1);
  EXPECT_EQ(g1->operand(0)->name(), "p");
  // The same chain is reused, not duplicated.
  EXPECT_EQ(Find(m.get(), "b")->operand(0), g2);
  EXPECT_EQ(m->entry()->root()->operand(0)->tuple_index, 0);
  // p, two GTEs for #1#1, a, b, one GTE for #0, r.
  EXPECT_EQ(m->entry()->instruction_count(), 7);
}

TEST(ParserTest, NestedOperandsAndGeneratedNameClash) {
  auto m = Parse(R"(ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] add(f32[4] negate(f32[4] p), f32[4] constant({1, 2, 3, 4}))
}
)");
  ASSERT_NE(m, nullptr);
  auto* r = m->entry()->root();
  EXPECT_EQ(r->operand(0)->opcode(), HloOpcode::kNegate);
  EXPECT_EQ(r->operand(0)->operand(0)->name(), "p");
  EXPECT_EQ(r->operand(1)->opcode(), HloOpcode::kConstant);
  EXPECT_THAT(r->operand(1)->literal->f, ElementsAre(1, 2, 3, 4));

  // A generated name that a later line defines again is renamed, not reported as a duplicate.
  auto m2 = Parse(R"(ENTRY e {
  p = (f32[2], f32[2]) parameter(0)
  a = f32[2] negate(p#0)
  get-tuple-element = f32[2] abs(a)
  get-tuple-element.1 = f32[2] abs(a)
  ROOT b = f32[2] add(get-tuple-element, get-tuple-element.1)
}
)");
  ASSERT_NE(m2, nullptr);
  EXPECT_EQ(Find(m2.get(), "get-tuple-element")->opcode(), HloOpcode::kAbs);
  EXPECT_EQ(Find(m2.get(), "get-tuple-element.1")->opcode(), HloOpcode::kAbs);
  EXPECT_EQ(Find(m2.get(), "a")->operand(0)->opcode(), HloOpcode::kGetTupleElement);
}

TEST(ParserTest, UnknownAttributesKeptRawInOrder) {
  auto m = Parse(R"(ENTRY e {
  p = f32[8,8]{1,0} parameter(0)
  i = s32[2,1]{1,0} parameter(1)
  ROOT g = f32[2,8]{1,0} gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}, some_future_flag=yes, weird=[1:2]
}
)");
  ASSERT_NE(m, nullptr);
  auto* g = m->entry()->root();
  std::vector<std::string> names;
  for (const auto& [k, v] : g->raw_attributes()) names.push_back(k);
  EXPECT_THAT(names, ElementsAre("offset_dims", "collapsed_slice_dims", "start_index_map",
                                 "index_vector_dim", "slice_sizes", "some_future_flag", "weird"));
  EXPECT_EQ(*g->GetRawAttribute("slice_sizes"), "{1,8}");
  EXPECT_EQ(*g->GetRawAttribute("weird"), "[1:2]");
}

TEST(ParserTest, StackTablesAndHeaderRawAttributes) {
  const char* text = R"(HloModule s, input_output_alias={ {0}: (0, {}, may-alias) }, allow_spmd_sharding_propagation_to_output={true}, frontend_attributes={fp="x"}

FileNames
1 "m.py"
FunctionNames
1 "fwd"
FileLocations
1 {file_name_id=1 function_name_id=1 line=7 end_line=7 column=2 end_column=9}
StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY e {
  ROOT p = f32[2]{0} parameter(0), metadata={op_name="x" stack_frame_id=1}
}
)";
  auto m = Parse(text);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->stack_tables.substr(0, 9), "FileNames");
  EXPECT_NE(m->stack_tables.find("1 {file_location_id=1 parent_frame_id=1}"), std::string::npos);
  ASSERT_EQ(m->header_attributes.size(), 3u);
  EXPECT_EQ(m->header_attributes[0].second, "{ {0}: (0, {}, may-alias) }");
  EXPECT_EQ(m->header_attributes[2].first, "frontend_attributes");
  EXPECT_FALSE(m->has_num_partitions);
  EXPECT_EQ(m->num_partitions, 1);
}

TEST(ParserTest, ExecutionThreadAndShardings) {
  auto m = Parse(R"(HloModule x
side {
  a = f32[2]{0} parameter(0)
  ROOT n = f32[2]{0} negate(a)
}, execution_thread="host"
ENTRY e {
  p = f32[8,4]{1,0} parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  q = f32[8,4]{1,0} parameter(1), sharding={devices=[2,2]0,2,1,3}
  ROOT t = (f32[8,4]{1,0}, f32[8,4]{1,0}) tuple(p, q), sharding={{replicated}, {maximal device=1}}
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->GetComputation("side")->execution_thread, "\"host\"");
  const HloSharding& p = *m->entry()->parameter(0)->sharding;
  EXPECT_EQ(p.kind, HloSharding::Kind::kTiled);
  EXPECT_TRUE(p.last_tile_dim_replicate);
  EXPECT_EQ(p.DataRank(), 2);
  const HloSharding& q = *m->entry()->parameter(1)->sharding;
  EXPECT_THAT(q.devices, ElementsAre(0, 2, 1, 3));
  const HloSharding& t = *m->entry()->root()->sharding;
  EXPECT_EQ(t.kind, HloSharding::Kind::kTuple);
  ASSERT_EQ(t.tuple.size(), 2u);
  EXPECT_EQ(t.tuple[1].kind, HloSharding::Kind::kMaximal);
  EXPECT_EQ(t.tuple[1].maximal_device, 1);
}

TEST(ParserFileTest, ReadsFilesAndReportsMissingOnes) {
  auto m = ParseHloModuleFile(weave::testfiles::SourcePath("tests/calibration/c1_ag_gemm_base.hlo"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->name(), "c1_ag_gemm_base");
  auto missing = ParseHloModuleFile("/nonexistent/dir/none.hlo");
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("none.hlo"));
}

}  // namespace
}  // namespace weave
