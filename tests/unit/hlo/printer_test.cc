// Printer tests: XLA's dump format for modules built through the IR API and for parsed text.
// Expected strings are written by hand from XLA's format (../shared/specs/hlo-text-format.md).
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/instruction_text.h"
#include "hlo/parser.h"

namespace weave {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<HloModule> Parse(std::string_view text) {
  auto m = ParseHloModule(text, "test.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  return *std::move(m);
}

// Every form an array shape's text takes, short (written through a stack buffer at once) and
// past that buffer (written piece by piece): both must give XLA's text.
TEST(PrinterTest, ShapeTextsShortAndLong) {
  Shape dyn(PrimitiveType::BF16, {8, 4, -1});
  dyn.dynamic = {false, true, false};
  dyn.layout = Layout{{2, 1, 0}, "T(8,128)(2,1)"};
  EXPECT_EQ(dyn.ToString(), "bf16[8,<=4,?]{2,1,0:T(8,128)(2,1)}");
  EXPECT_EQ(dyn.ToString(false), "bf16[8,<=4,?]");
  Shape scalar(PrimitiveType::F32, {});
  scalar.layout = Layout{{}, ""};
  EXPECT_EQ(scalar.ToString(), "f32[]");  // a scalar's empty layout is not printed
  scalar.layout = Layout{{}, "S(1)"};
  EXPECT_EQ(scalar.ToString(), "f32[]{:S(1)}");
  EXPECT_EQ(Shape(PrimitiveType::F8E4M3FN, {16, 32}).ToString(), "f8e4m3fn[16,32]{1,0}");
  // Twelve 19-digit dims and a twelve-dim layout: more than the buffer holds.
  const int64_t big = std::numeric_limits<int64_t>::max();
  Shape wide(PrimitiveType::S32, std::vector<int64_t>(12, big));
  wide.dynamic.assign(12, true);
  wide.layout = Layout{{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, ""};
  std::string want = "s32[";
  for (int i = 0; i < 12; ++i) absl::StrAppend(&want, i ? "," : "", "<=", big);
  absl::StrAppend(&want, "]{11,10,9,8,7,6,5,4,3,2,1,0}");
  EXPECT_EQ(wide.ToString(), want);
  // Ten such dims and no layout: within the buffer, written at once.
  Shape under(PrimitiveType::S32, std::vector<int64_t>(10, big));
  under.layout.reset();
  std::string want_under = "s32[";
  for (int i = 0; i < 10; ++i) absl::StrAppend(&want_under, i ? "," : "", big);
  EXPECT_EQ(under.ToString(), want_under + "]");
}

// AppendTo (the printer's path) appends exactly ToString's text after what is already there,
// with and without the layout, for arrays, tuples, scalars and tokens.
TEST(PrinterTest, ShapeAppendToMatchesToString) {
  Shape dyn(PrimitiveType::BF16, {8, 4, -1});
  dyn.dynamic = {false, true, false};
  dyn.layout = Layout{{2, 1, 0}, "T(8,128)(2,1)"};
  const Shape tuple = Shape::Tuple({Shape(PrimitiveType::F8E5M2, {3, 5}), dyn,
                                    Shape::Scalar(PrimitiveType::S32)});
  for (const Shape& s : {dyn, tuple, Shape::Scalar(PrimitiveType::PRED), Shape::Scalar(PrimitiveType::TOKEN),
                         Shape(PrimitiveType::U8, {2, 2, 2})}) {
    for (bool layout : {true, false}) {
      std::string out = "x = ";
      s.AppendTo(&out, layout);
      EXPECT_EQ(out, "x = " + s.ToString(layout));
    }
  }
  std::string twice;
  dyn.AppendTo(&twice);
  dyn.AppendTo(&twice, false);
  EXPECT_EQ(twice, "bf16[8,<=4,?]{2,1,0:T(8,128)(2,1)}bf16[8,<=4,?]");
}

TEST(PrinterTest, BuiltModuleInXlaDumpStyle) {
  HloModule m("built");
  m.num_partitions = 2;
  auto* sum = m.AddComputation(std::make_unique<HloComputation>("sum"));
  HloInstruction* a = sum->AddParameter(Shape::Scalar(PrimitiveType::F32), "a");
  HloInstruction* b = sum->AddParameter(Shape::Scalar(PrimitiveType::F32), "b");
  sum->set_root(sum->AddInstruction(HloOpcode::kAdd, Shape::Scalar(PrimitiveType::F32), {a, b},
                                    "s"));
  auto* entry = m.AddComputation(std::make_unique<HloComputation>("main"));
  m.set_entry(entry);
  Shape vec(PrimitiveType::F32, {8});
  HloInstruction* x = entry->AddParameter(vec, "x");
  HloInstruction* ar = entry->AddInstruction(HloOpcode::kAllReduce, vec, {x}, "ar");
  ar->channel_id = 1;
  ar->replica_groups = ReplicaGroups::FromList({{0, 1}});
  ar->use_global_device_ids = true;
  ar->mutable_called_computations()->push_back(sum);
  entry->set_root(ar);

  EXPECT_EQ(m.ToString(),
            "HloModule built, num_partitions=2\n"
            "\n"
            "%sum (a: f32[], b: f32[]) -> f32[] {\n"
            "  %a = f32[] parameter(0)\n"
            "  %b = f32[] parameter(1)\n"
            "  ROOT %s = f32[] add(%a, %b)\n"
            "}\n"
            "\n"
            "ENTRY %main (x: f32[8]) -> f32[8] {\n"
            "  %x = f32[8]{0} parameter(0)\n"
            "  ROOT %ar = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, "
            "use_global_device_ids=true, to_apply=%sum\n"
            "}\n");
}

TEST(PrinterTest, OperandIndexCommentsEveryFifthOperand) {
  auto m = Parse(R"(ENTRY e {
  p = f32[] parameter(0)
  ROOT t = (f32[], f32[], f32[], f32[], f32[], f32[], f32[]) tuple(p, p, p, p, p, p, p)
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->entry()->root()->ToString(),
            "ROOT %t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[], f32[]) "
            "tuple(%p, %p, %p, %p, %p, /*index=5*/%p, %p)");
}

TEST(PrinterTest, AttributeOrderFollowsXla) {
  // Attributes written in a scrambled order come back in XLA's order.
  auto m = Parse(R"(HloModule o
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[8]{0} parameter(0), metadata={op_name="p"}, sharding={replicated}
  rs = f32[4]{0} reduce-scatter(p), to_apply=add, dimensions={0}, use_global_device_ids=true, replica_groups={{0,1}}, channel_id=2, metadata={op_name="rs"}, backend_config={"x":1}, frontend_attributes={b="2",a="1"}
  ag = f32[8]{0} all-gather(rs), use_global_device_ids=true, dimensions={0}, replica_groups=[1,2]<=[2], channel_id=3
  ROOT d = f32[] dot(ag, ag), rhs_contracting_dims={0}, lhs_contracting_dims={0}
}
)");
  ASSERT_NE(m, nullptr);
  auto* c = m->entry();
  EXPECT_EQ(c->parameter(0)->ToString(),
            "%p = f32[8]{0} parameter(0), sharding={replicated}, metadata={op_name=\"p\"}");
  EXPECT_EQ(c->GetInstruction("rs")->ToString(),
            "%rs = f32[4]{0} reduce-scatter(%p), channel_id=2, replica_groups={{0,1}}, "
            "use_global_device_ids=true, dimensions={0}, to_apply=%add, "
            "frontend_attributes={a=\"1\",b=\"2\"}, metadata={op_name=\"rs\"}, "
            "backend_config={\"x\":1}");
  EXPECT_EQ(c->GetInstruction("ag")->ToString(),
            "%ag = f32[8]{0} all-gather(%rs), channel_id=3, replica_groups=[1,2]<=[2], "
            "dimensions={0}, use_global_device_ids=true");
  EXPECT_EQ(c->root()->ToString(),
            "ROOT %d = f32[] dot(%ag, %ag), lhs_contracting_dims={0}, rhs_contracting_dims={0}");
}

TEST(PrinterTest, SugaredAsyncPrintsBack) {
  auto m = Parse(R"(HloModule a
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[8]{0} parameter(0)
  st = ((f32[8]{0}), f32[4]{0}) reduce-scatter-start(p), replica_groups={{0,1}}, dimensions={0}, to_apply=add
  ROOT dn = f32[4]{0} reduce-scatter-done(st)
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->entry()->GetInstruction("st")->ToString(),
            "%st = ((f32[8]{0}), f32[4]{0}) reduce-scatter-start(%p), replica_groups={{0,1}}, "
            "dimensions={0}, to_apply=%add");
  EXPECT_EQ(m->entry()->root()->ToString(), "ROOT %dn = f32[4]{0} reduce-scatter-done(%st)");
}

TEST(PrinterTest, CalledComputationKeywords) {
  auto m = Parse(R"(HloModule k
f {
  a = f32[2]{0} parameter(0)
  ROOT n = f32[2]{0} negate(a)
}
g {
  a = f32[2]{0} parameter(0)
  ROOT n = f32[2]{0} abs(a)
}
c {
  s = (f32[2]{0}) parameter(0)
  ROOT t = pred[] constant(false)
}
b {
  ROOT s = (f32[2]{0}) parameter(0)
}
ENTRY e {
  x = f32[2]{0} parameter(0)
  k = s32[] parameter(1)
  fu = f32[2]{0} fusion(x), kind=kLoop, calls=f
  cl = f32[2]{0} call(x), to_apply=g
  cd = f32[2]{0} conditional(k, x, x), branch_computations={f, g}
  tu = (f32[2]{0}) tuple(x)
  wh = (f32[2]{0}) while(tu), condition=c, body=b
  ROOT cc = f32[2]{0} custom-call(x), custom_call_target="t", called_computations={f, g}
}
)");
  ASSERT_NE(m, nullptr);
  auto* e = m->entry();
  EXPECT_EQ(e->GetInstruction("fu")->ToString(),
            "%fu = f32[2]{0} fusion(%x), kind=kLoop, calls=%f");
  EXPECT_EQ(e->GetInstruction("cl")->ToString(), "%cl = f32[2]{0} call(%x), to_apply=%g");
  EXPECT_EQ(e->GetInstruction("cd")->ToString(),
            "%cd = f32[2]{0} conditional(%k, %x, %x), branch_computations={%f, %g}");
  EXPECT_EQ(e->GetInstruction("wh")->ToString(),
            "%wh = (f32[2]{0}) while(%tu), condition=%c, body=%b");
  EXPECT_EQ(e->root()->ToString(),
            "ROOT %cc = f32[2]{0} custom-call(%x), custom_call_target=\"t\", "
            "called_computations={%f, %g}");
}

TEST(PrinterTest, LiteralsBuiltByPasses) {
  HloModule m("lits");
  auto* c = m.AddComputation(std::make_unique<HloComputation>("e"));
  m.set_entry(c);
  auto add_const = [&](Literal lit, std::string name) {
    HloInstruction* i = c->AddInstruction(HloOpcode::kConstant, lit.shape, {}, name);
    i->literal = std::move(lit);
    return i;
  };
  HloInstruction* f = add_const(Literal::Scalar(PrimitiveType::F32, 0.1), "f");
  HloInstruction* bf = add_const(Literal::Scalar(PrimitiveType::BF16, 0.10009765625), "bf");
  HloInstruction* pr = add_const(Literal::Scalar(PrimitiveType::PRED, 1), "pr");
  HloInstruction* in = add_const(Literal::Scalar(PrimitiveType::F32,
                                                 -std::numeric_limits<double>::infinity()),
                                 "in");
  HloInstruction* v = add_const(Literal::Vector(PrimitiveType::S32, {1, 2, 3}), "v");
  Literal mat;
  mat.shape = Shape(PrimitiveType::S32, {2, 2});
  mat.i = {1, 2, 3, 4};
  HloInstruction* mt = add_const(mat, "mt");
  Literal col;
  col.shape = Shape(PrimitiveType::F32, {2, 1});
  col.f = {1.5, 2};
  HloInstruction* cl = add_const(col, "cl");
  Literal el;
  el.shape = Shape(PrimitiveType::F32, {100});
  el.elided = true;
  HloInstruction* e = add_const(el, "el");
  c->set_root(e);
  EXPECT_EQ(f->ToString(), "%f = f32[] constant(0.1)");
  EXPECT_EQ(bf->ToString(), "%bf = bf16[] constant(0.1001)");
  EXPECT_EQ(pr->ToString(), "%pr = pred[] constant(true)");
  EXPECT_EQ(in->ToString(), "%in = f32[] constant(-inf)");
  EXPECT_EQ(v->ToString(), "%v = s32[3]{0} constant({1, 2, 3})");
  EXPECT_EQ(mt->ToString(), "%mt = s32[2,2]{1,0} constant({ { 1, 2 }, { 3, 4 } })");
  EXPECT_EQ(cl->ToString(), "%cl = f32[2,1]{1,0} constant({ {1.5}, {2} })");
  EXPECT_EQ(e->ToString(), "ROOT %el = f32[100]{0} constant({...})");
  // Whatever the printer writes for values must parse back to the same values.
  auto re = Parse(m.ToString());
  ASSERT_NE(re, nullptr);
  EXPECT_EQ(re->entry()->GetInstruction("f")->literal->f.at(0), 0.1);
  EXPECT_EQ(re->entry()->GetInstruction("mt")->literal->i, std::vector<int64_t>({1, 2, 3, 4}));
  EXPECT_TRUE(re->entry()->GetInstruction("el")->literal->elided);
}

TEST(PrinterTest, OutOfOrderInstructionsPrintInPostOrder) {
  HloModule m("order");
  auto* c = m.AddComputation(std::make_unique<HloComputation>("e"));
  m.set_entry(c);
  Shape s(PrimitiveType::F32, {4});
  HloInstruction* p = c->AddParameter(s, "p");
  HloInstruction* n = c->AddInstruction(HloOpcode::kNegate, s, {p}, "n");
  c->set_root(n);
  // A pass inserts an instruction after its user and rewires the user.
  HloInstruction* a = c->AddInstruction(HloOpcode::kAbs, s, {p}, "a");
  ASSERT_TRUE(n->ReplaceOperandWith(0, a).ok());
  std::string text = m.ToString();
  EXPECT_LT(text.find("%a = "), text.find("ROOT %n = "));
  // And it parses back.
  EXPECT_NE(Parse(text), nullptr);
}

TEST(PrinterTest, HeaderAttributesInXlaOrder) {
  auto m = Parse(R"(HloModule h, frontend_attributes={k="v"}, num_partitions=8, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, is_scheduled=true, replica_count=1
ENTRY e {
  ROOT p = f32[2]{0} parameter(0)
}
)");
  ASSERT_NE(m, nullptr);
  std::string text = m->ToString();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "HloModule h, is_scheduled=true, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, "
            "num_partitions=8, frontend_attributes={k=\"v\"}");
}

TEST(PrinterTest, UnknownAttributesAndLayoutExtensionsPrintBack) {
  auto m = Parse(R"(ENTRY e {
  p = bf16[128,256]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  ROOT c = bf16[128,256]{1,0:T(8,128)(2,1)S(1)} copy(p), novel_attr={a b c}, statistics={visualizing_index=1}
}
)");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->entry()->root()->ToString(),
            "ROOT %c = bf16[128,256]{1,0:T(8,128)(2,1)S(1)} copy(%p), novel_attr={a b c}, "
            "statistics={visualizing_index=1}");
  EXPECT_THAT(m->ToString(), HasSubstr("ENTRY %e (p: bf16[128,256]) -> bf16[128,256] {"));
}

// The cost gate's region text prints each instruction as a detached copy would: the root loses
// "ROOT ", an ordered instruction its control-predecessors, and everything else stays.
TEST(PrinterTest, DetachedInstructionTextIsTheTextOfACopyInNoComputation) {
  auto m = Parse(R"(HloModule detached, num_partitions=2

ENTRY %main (x: bf16[8,4], w: bf16[4,6]) -> bf16[8,6] {
  %x = bf16[8,4]{1,0} parameter(0), sharding={replicated}
  %w = bf16[4,6]{1,0} parameter(1)
  %ag = bf16[8,4]{1,0} all-gather(%x), channel_id=3, replica_groups={{0,1}}, dimensions={0}, metadata={op_name="gather"}
  %neg = bf16[8,4]{1,0} negate(%x), control-predecessors={%ag}
  ROOT %d = bf16[8,6]{1,0} dot(%neg, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, control-predecessors={%ag, %neg}, backend_config={"operation_queue_id":"1"}
}
)");
  ASSERT_NE(m, nullptr);
  int checked = 0;
  for (const HloInstruction* i : m->entry()->instructions()) {
    std::string detached;
    AppendDetachedInstructionText(&detached, *i);
    EXPECT_EQ(detached, i->CloneWithNewOperands(i->shape(), i->operands())->ToString());
    EXPECT_THAT(detached, ::testing::Not(HasSubstr("ROOT")));
    EXPECT_THAT(detached, ::testing::Not(HasSubstr("control-predecessors")));
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  const HloInstruction* d = m->entry()->root();
  std::string detached;
  AppendDetachedInstructionText(&detached, *d);
  std::string expected = "ROOT " + detached;
  const size_t at = expected.find(", backend_config=");
  ASSERT_NE(at, std::string::npos);
  expected.insert(at, ", control-predecessors={%ag, %neg}");
  EXPECT_EQ(d->ToString(), expected) << "only the marker and the control predecessors differ";
  EXPECT_THAT(d->ToString(), HasSubstr("control-predecessors={%ag, %neg}"));
  EXPECT_THAT(detached, HasSubstr("backend_config="));
  EXPECT_THAT(detached, HasSubstr("lhs_contracting_dims={1}"));
}

// The canonical-names mode (instruction_text.h): names by rank of first appearance, no
// signature, no metadata, channel ids by rank among those listed; the usual text again once the
// mode ends. Two modules that differ only in names, channel ids and metadata print the same; a
// changed opcode or operand order does not.
TEST(PrinterTest, CanonicalNamesMode) {
  auto text = [](const std::string& sum, const std::string& x, int channel, const std::string& op,
                 bool swap) {
    return absl::StrCat("HloModule m, num_partitions=2\n\n%", sum,
                        " (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
                        "  %b = f32[] parameter(1)\n  ROOT %s = f32[] ", op,
                        swap ? "(%b, %a)" : "(%a, %b)", "\n}\n\nENTRY %main {\n  %", x,
                        " = f32[8]{0} parameter(0), metadata={op_name=\"layer/", x,
                        "\"}\n  ROOT %ar = f32[8]{0} all-reduce(%", x, "), channel_id=", channel,
                        ", replica_groups={{0,1}}, to_apply=%", sum, "\n}\n");
  };
  auto canonical = [](const std::string& module_text, std::vector<int64_t> channels) {
    auto m = ParseHloModule(module_text, "m.hlo");
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return std::string();
    CanonicalNames names;
    names.SetChannels(std::move(channels));
    ScopedCanonicalNames mode(&names);
    return (*m)->ToString();
  };
  const std::string a = canonical(text("sum", "x", 3, "add", false), {3});
  EXPECT_THAT(a, HasSubstr("%n0 {\n  %n1 = f32[] parameter(0)\n  %n2 = f32[] parameter(1)\n"
                           "  ROOT %n3 = f32[] add(%n1, %n2)\n}"));
  EXPECT_THAT(a, HasSubstr("ENTRY %n4 {\n  %n5 = f32[8]{0} parameter(0)\n"
                           "  ROOT %n6 = f32[8]{0} all-reduce(%n5), channel_id=1, "
                           "replica_groups={{0,1}}, to_apply=%n0\n}"));
  EXPECT_EQ(a.find("metadata"), std::string::npos);
  EXPECT_EQ(a.find("->"), std::string::npos);  // no signature
  EXPECT_EQ(a, canonical(text("add.9", "act", 41, "add", false), {41}));
  EXPECT_NE(a, canonical(text("sum", "x", 3, "multiply", false), {3}));
  EXPECT_NE(a, canonical(text("sum", "x", 3, "add", true), {3}));
  // The ids are ranked whatever their order and repeats; an id that is not listed is written as
  // it is.
  EXPECT_THAT(canonical(text("sum", "x", 3, "add", false), {9, 3, 3}), HasSubstr("channel_id=1,"));
  EXPECT_THAT(canonical(text("sum", "x", 3, "add", false), {3, 1}), HasSubstr("channel_id=2,"));
  EXPECT_THAT(canonical(text("sum", "x", 3, "add", false), {}), HasSubstr("channel_id=3,"));
  // Outside the mode: the usual text.
  auto m = Parse(text("sum", "x", 3, "add", false));
  ASSERT_NE(m, nullptr);
  EXPECT_THAT(m->ToString(), HasSubstr("%sum (a: f32[], b: f32[]) -> f32[] {"));
  EXPECT_THAT(m->ToString(), HasSubstr("metadata={op_name=\"layer/x\"}"));
}

// A conditional on a pred[] index prints as true_computation= / false_computation= (the only form
// XLA's parser, and Weave's, reads for it), also when a pass built it without the parser's flag.
TEST(PrinterTest, PredConditionalPrintsTrueFalseForm) {
  auto m = Parse(R"(HloModule cond
on_true {
  a = f32[3] parameter(0)
  ROOT n = f32[3] negate(a)
}
on_false {
  b = f32[3] parameter(0)
  ROOT e = f32[3] exponential(b)
}
ENTRY main {
  x = f32[3] parameter(0)
  k = pred[] parameter(1)
  ROOT c = f32[3] conditional(k, x, x), true_computation=on_true, false_computation=on_false
}
)");
  ASSERT_NE(m, nullptr);
  HloInstruction* c = m->entry()->root();
  ASSERT_EQ(c->opcode(), HloOpcode::kConditional);
  c->conditional_is_pred = false;  // as a pass that builds the instruction leaves it
  const std::string text = m->ToString();
  EXPECT_THAT(text, HasSubstr("true_computation=%on_true, false_computation=%on_false"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("branch_computations")));
  auto again = ParseHloModule(text, "again.hlo");
  EXPECT_TRUE(again.ok()) << again.status().message();
}

}  // namespace
}  // namespace weave
