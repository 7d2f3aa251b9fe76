// Window attributes (hlo/window.h): parse, print as XLA prints, set back on an instruction.
#include <string>

#include "gtest/gtest.h"
#include "hlo/window.h"

namespace weave {
namespace {

TEST(WindowTest, ParsePrintRoundTrip) {
  const char* texts[] = {
      "{size=3x1 stride=2x1 pad=1_0x0_0}",
      "{size=2x2}",
      "{size=2x3 pad=-1_2x0_0 lhs_dilate=2x1 rhs_dilate=1x3}",
      "{size=1x2 rhs_reversal=0x1}",
  };
  for (const char* t : texts) {
    HloInstruction instr;
    instr.mutable_raw_attributes()->push_back({"window", t});
    absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(instr, 2);
    ASSERT_TRUE(w.ok()) << t << ": " << w.status().message();
    EXPECT_EQ(WindowText(*w), t);
  }
  HloInstruction instr;
  instr.mutable_raw_attributes()->push_back({"window", "{size=3x1 stride=2x1 pad=1_0x0_0}"});
  std::vector<WindowDim> w = *ParseWindow(instr, 2);
  EXPECT_EQ(w[0].size, 3);
  EXPECT_EQ(w[0].stride, 2);
  EXPECT_EQ(w[0].lo, 1);
  EXPECT_EQ(w[0].hi, 0);
  w[0].lo = 0;
  SetWindow(&instr, w);
  EXPECT_EQ(*instr.GetRawAttribute("window"), "{size=3x1 stride=2x1}");
  EXPECT_EQ(instr.raw_attributes().size(), 1u);
}

TEST(WindowTest, Errors) {
  HloInstruction none;
  absl::StatusOr<std::vector<WindowDim>> d = ParseWindow(none, 3);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[2].size, 1);
  for (const char* bad : {"{size=3}", "{size=3xq}", "{size=1x1 warp=2x2}", "{pad=1x1}"}) {
    HloInstruction instr;
    instr.mutable_raw_attributes()->push_back({"window", bad});
    EXPECT_FALSE(ParseWindow(instr, 2).ok()) << bad;
  }
}

}  // namespace
}  // namespace weave
