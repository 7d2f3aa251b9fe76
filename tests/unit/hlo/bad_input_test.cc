// Malformed HLO text: every case returns InvalidArgument with `file:line:column: message` naming
// the problem, and nothing crashes (truncations and byte flips of real files included).
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "shared_files.h"

namespace weave {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

std::string Err(std::string_view text) {
  auto m = ParseHloModule(text, "bad.hlo");
  EXPECT_FALSE(m.ok()) << "parsed unexpectedly:\n" << text;
  if (m.ok()) return "";
  EXPECT_TRUE(absl::IsInvalidArgument(m.status()));
  return std::string(m.status().message());
}

TEST(BadInputTest, EmptyAndWhitespace) {
  EXPECT_THAT(Err(""), StartsWith("bad.hlo:1:1: empty input"));
  EXPECT_THAT(Err("  \n // only a comment\n"), HasSubstr("empty input"));
  EXPECT_THAT(Err("HloModule m\n"), HasSubstr("expected at least one computation"));
}

TEST(BadInputTest, BinaryData) {
  std::string bin("\x7f" "ELF\x02\x01\x01\x00\x00\x00\xff\xfe", 12);
  std::string e = Err(bin);
  EXPECT_THAT(e, StartsWith("bad.hlo:1:1: "));
  EXPECT_THAT(e, HasSubstr("\\x7f"));  // the offending byte is shown escaped
  EXPECT_THAT(Err(std::string("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\x00\x01", 48)),
              StartsWith("bad.hlo:3:"));
}

TEST(BadInputTest, Truncated) {
  EXPECT_THAT(Err("HloModule m\nENTRY e {\n  p = f32[4]{0} parameter(0)\n"),
              HasSubstr("missing '}'"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[4]{0} parameter(0)\n  n = f32[4]{0} negate(p"),
              StartsWith("bad.hlo:3:"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[4]{0} parameter(0), metadata={op_name=\"x\""),
              HasSubstr("unterminated"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[4"), HasSubstr("end of input"));
  EXPECT_THAT(Err("ENTRY e {\n  /* never closed"), HasSubstr("unterminated '/*' comment"));
}

TEST(BadInputTest, UndefinedNames) {
  EXPECT_EQ(Err("ENTRY e {\n  p = f32[] parameter(0)\n  ROOT n = f32[] add(p, q)\n}\n"),
            "bad.hlo:3:25: use of undefined value 'q'");
  // Define-before-use: a later definition does not count.
  EXPECT_THAT(Err("ENTRY e {\n  n = f32[] negate(p)\n  p = f32[] parameter(0)\n}\n"),
              HasSubstr("use of undefined value 'p'"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0), control-predecessors={zz}\n}\n"),
              HasSubstr("control predecessor 'zz'"));
}

TEST(BadInputTest, DuplicateNames) {
  EXPECT_EQ(Err("ENTRY e {\n  p = f32[] parameter(0)\n  p = f32[] negate(p)\n}\n"),
            "bad.hlo:3:3: duplicate instruction name 'p' in 'e'");
  EXPECT_THAT(Err("c {\n  ROOT p = f32[] parameter(0)\n}\nc {\n  ROOT p = f32[] parameter(0)\n}\n"),
              StartsWith("bad.hlo:4:1: duplicate computation name 'c'"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  q = f32[] parameter(0)\n}\n"),
              HasSubstr("duplicate parameter(0)"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] negate(p), "
                  "metadata={}, metadata={}\n}\n"),
              HasSubstr("duplicate attribute 'metadata'"));
  EXPECT_THAT(Err("HloModule m, num_partitions=2, num_partitions=4\nENTRY e {\n"
                  "  ROOT p = f32[] parameter(0)\n}\n"),
              HasSubstr("duplicate module attribute"));
  EXPECT_THAT(Err("ENTRY a {\n  ROOT p = f32[] parameter(0)\n}\nENTRY b {\n"
                  "  ROOT p = f32[] parameter(0)\n}\n"),
              HasSubstr("more than one ENTRY"));
  EXPECT_THAT(Err("ENTRY e {\n  ROOT p = f32[] parameter(0)\n  ROOT q = f32[] negate(p)\n}\n"),
              HasSubstr("more than one ROOT"));
}

TEST(BadInputTest, UnknownOpcodesTypesAndComputations) {
  EXPECT_EQ(Err("ENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] frobnicate(p)\n}\n"),
            "bad.hlo:3:13: unknown opcode 'frobnicate'");
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] frob-start(p)\n}\n"),
              HasSubstr("unknown opcode 'frob-start'"));
  EXPECT_EQ(Err("ENTRY e {\n  p = f33[] parameter(0)\n}\n"),
            "bad.hlo:2:7: unknown element type 'f33'");
  EXPECT_EQ(Err("ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=nope\n}\n"),
            "bad.hlo:3:36: unknown computation 'nope'");
  // Callees must be defined before their callers.
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f\n}\n"
                  "f {\n  ROOT a = f32[] parameter(0)\n}\n"),
              HasSubstr("unknown computation 'f'"));
  EXPECT_THAT(Err("c {\n  ROOT p = pred[] parameter(0)\n}\nENTRY e {\n  p = f32[] parameter(0)\n"
                  "  ROOT w = f32[] while(p), condition=c\n}\n"),
              HasSubstr("while needs both condition= and body="));
}

TEST(BadInputTest, TupleIndexOutOfRange) {
  EXPECT_EQ(Err("ENTRY e {\n  p = (f32[], f32[]) parameter(0)\n"
                "  g = f32[] get-tuple-element(p), index=2\n}\n"),
            "bad.hlo:3:41: tuple index 2 is out of range for operand 'p' with 2 elements");
  EXPECT_THAT(Err("ENTRY e {\n  p = (f32[], f32[]) parameter(0)\n  n = f32[] negate(p#5)\n}\n"),
              HasSubstr("tuple index 5 is out of range for 'p' with 2 elements"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n"
                  "  g = f32[] get-tuple-element(p), index=0\n}\n"),
              HasSubstr("out of range"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] negate(p#0)\n}\n"),
              HasSubstr("'p' is not a tuple"));
}

TEST(BadInputTest, ConstantElementCountMismatch) {
  EXPECT_THAT(Err("ENTRY e {\n  c = f32[3]{0} constant({1, 2})\n}\n"),
              HasSubstr("constant has 2 values but its shape f32[3]{0} holds 3 elements"));
  EXPECT_THAT(Err("ENTRY e {\n  c = s32[2]{0} constant({1, 2, 3})\n}\n"),
              HasSubstr("more values than its shape"));
  EXPECT_THAT(Err("ENTRY e {\n  c = s32[2,2]{1,0} constant({1, 2, 3, 4})\n}\n"),
              HasSubstr("nested 1 levels deep but its shape has rank 2"));
  EXPECT_THAT(Err("ENTRY e {\n  c = s32[] constant(1.5)\n}\n"),
              HasSubstr("invalid integer value '1.5'"));
  EXPECT_THAT(Err("ENTRY e {\n  c = f32[] constant(abc)\n}\n"),
              HasSubstr("invalid floating-point value 'abc'"));
  EXPECT_THAT(Err("ENTRY e {\n  c = pred[] constant(2)\n}\n"), HasSubstr("invalid pred value"));
  EXPECT_THAT(Err("ENTRY e {\n  c = u8[] constant(-1)\n}\n"), HasSubstr("invalid integer"));
  EXPECT_THAT(Err("ENTRY e {\n  c = u8[] constant(256)\n}\n"),
              HasSubstr("invalid integer value '256' for u8"));
  EXPECT_THAT(Err("ENTRY e {\n  c = s8[2]{0} constant({-128, 128})\n}\n"),
              HasSubstr("invalid integer value '128' for s8"));
  EXPECT_THAT(Err("ENTRY e {\n  c = f32[] constant()\n}\n"), HasSubstr("empty constant"));
}

TEST(BadInputTest, IntegerOverflow) {
  EXPECT_EQ(Err("ENTRY e {\n  p = f32[99999999999999999999] parameter(0)\n}\n"),
            "bad.hlo:2:11: integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_THAT(Err("ENTRY e {\n  c = f32[4294967296,4294967296]{1,0} constant({...})\n"
                  "  d = f32[4294967296,4294967296]{1,0} constant({1})\n}\n"),
              HasSubstr("too many elements"));
  EXPECT_THAT(Err("ENTRY e {\n  c = s64[] constant(9223372036854775808)\n}\n"),
              HasSubstr("invalid integer"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(99999999999)\n}\n"),
              HasSubstr("invalid parameter number"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[-3] parameter(0)\n}\n"),
              HasSubstr("negative dimension size"));
}

TEST(BadInputTest, StructuralErrors) {
  EXPECT_THAT(Err("ENTRY e {\n}\n"), HasSubstr("has no instructions"));
  EXPECT_THAT(Err("ENTRY e {\n  q = f32[] parameter(1)\n}\n"), HasSubstr("has no parameter(0)"));
  EXPECT_THAT(Err("ENTRY e (a: f32[], b: f32[]) -> f32[] {\n  ROOT a = f32[] parameter(0)\n}\n"),
              HasSubstr("lists 2 parameters but it has 1"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0), sharding={devices=[2,2]0,1}\n}\n"),
              HasSubstr("bad sharding"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  a = f32[] all-reduce(p), "
                  "replica_groups=[2,2]<=[3]\n}\n"),
              HasSubstr("bad replica_groups"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  c = pred[] compare(p, p), "
                  "direction=XX\n}\n"),
              HasSubstr("unknown comparison direction 'XX'"));
  EXPECT_THAT(Err("ENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] negate(p) junk\n}\n"),
              HasSubstr("expected '='"));
  EXPECT_THAT(Err("ENTRY e {\n  ROOT p = f32[] parameter(0)\n}, foo=1\n"),
              HasSubstr("execution_thread"));
}

TEST(BadInputTest, MessageFormatIsFileLineColumn) {
  std::string e = Err("HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n"
                      "  n = f32[] negate(p), dimensions={1,x}\n}\n");
  EXPECT_THAT(e, MatchesRegex("bad.hlo:5:[0-9]+: expected an integer, found 'x'"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `text` in a heap buffer of exactly its size, with no terminator after it: under ASan a read
// past the end of the text is a heap-buffer-overflow, not a read of the rest of a larger string.
struct ExactBuffer {
  explicit ExactBuffer(std::string_view text) : bytes(new char[text.size()]), size(text.size()) {
    std::memcpy(bytes.get(), text.data(), text.size());
  }
  std::string_view view() const { return std::string_view(bytes.get(), size); }
  std::unique_ptr<char[]> bytes;
  size_t size;
};

// Every prefix of `text` (each in its own exact buffer) either parses or fails cleanly; so do
// single-byte corruptions.
void TruncateAndCorrupt(const std::string& text) {
  ASSERT_FALSE(text.empty());
  int failures = 0;
  for (size_t n = 0; n < text.size(); n += 3) {
    const ExactBuffer prefix(std::string_view(text).substr(0, n));
    auto m = ParseHloModule(prefix.view(), "prefix.hlo");
    if (!m.ok()) {
      ++failures;
      EXPECT_THAT(std::string(m.status().message()), StartsWith("prefix.hlo:"));
    }
  }
  EXPECT_GT(failures, 0);
  const char kJunk[] = {'{', '}', '(', ')', ',', '=', '%', '#', '"', '\0', 'x', '9', '-', '/'};
  for (size_t pos = 0; pos < text.size(); pos += 5) {
    std::string t = text;
    t[pos] = kJunk[pos % sizeof(kJunk)];
    auto m = ParseHloModule(t, "flip.hlo");
    if (m.ok()) (void)(*m)->ToString();  // printing whatever parsed must not crash either
  }
}

// Texts that end right after a word the parser looks past (the run fuzzer found `\nROOT`: the
// single-instruction check read the byte after the text). Each ends its buffer.
TEST(BadInputTest, TextEndingAfterAKeywordIsAnError) {
  for (std::string_view text : {"ROOT", "\nROOT", "ROOT ", "ROOT %", "%", "x", "x =", "ROOT x",
                                "f32[2]", "(", "HloModule"}) {
    SCOPED_TRACE(text);
    const ExactBuffer buffer(text);
    auto m = ParseHloModule(buffer.view(), "end.hlo");
    ASSERT_FALSE(m.ok());
    EXPECT_THAT(std::string(m.status().message()), StartsWith("end.hlo:"));
  }
}

// A windowed FP8 all-gather loop of the project's own (while, body and condition, shardings,
// tuples, constants, comments).
TEST(BadInputTest, TruncationsAndCorruptionsNeverCrash) {
  TruncateAndCorrupt(ReadFile(weave::testfiles::SourcePath("tests/lit/windowed-einsum-handler-convert-after-scale.hlo")));
}

// XLA's own layout of such a loop (../shared/examples).
TEST(BadInputTest, TruncationsAndCorruptionsOfASharedExampleNeverCrash) {
  WEAVE_SKIP_WITHOUT_SHARED("examples/ag_bf16_single.hlo");
  TruncateAndCorrupt(ReadFile(weave::testfiles::SharedPath("examples/ag_bf16_single.hlo")));
}

}  // namespace
}  // namespace weave
