// Convolution dimension numbers (hlo/conv_dims.h): labels read per operand, group counts, errors.
#include <string>

#include "gtest/gtest.h"
#include "hlo/conv_dims.h"

namespace weave {
namespace {

HloInstruction Conv(const std::string& labels, const std::string& fgc = "", const std::string& bgc = "") {
  HloInstruction instr;
  instr.SetRawAttribute("dim_labels", labels);
  if (!fgc.empty()) instr.SetRawAttribute("feature_group_count", fgc);
  if (!bgc.empty()) instr.SetRawAttribute("batch_group_count", bgc);
  return instr;
}

TEST(ConvDimsTest, ReadsEachOperandsLabels) {
  const HloInstruction c = Conv("f01b_i01o->01bf", "", "4");
  absl::StatusOr<ConvDims> d = ParseConvDims(c, 4);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->lhs.a, 3);  // batch
  EXPECT_EQ(d->lhs.b, 0);  // feature
  EXPECT_EQ(d->lhs.spatial, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d->kernel.a, 0);  // input feature
  EXPECT_EQ(d->kernel.b, 3);  // output feature
  EXPECT_EQ(d->out.a, 2);
  EXPECT_EQ(d->out.b, 3);
  EXPECT_EQ(d->out.spatial, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(d->feature_group_count, 1);
  EXPECT_EQ(d->batch_group_count, 4);
  // Spatial numbers out of dim order.
  absl::StatusOr<ConvDims> e = ParseConvDims(Conv("b10f_o01i->b01f", "2"), 4);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->lhs.spatial, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(e->kernel.a, 3);
  EXPECT_EQ(e->kernel.b, 0);
  EXPECT_EQ(e->feature_group_count, 2);
}

TEST(ConvDimsTest, Errors) {
  const std::pair<const char*, const char*> bad[] = {
      {"b01f_01io", "bad dim_labels"},            // no result part
      {"b0f_01io->b01f", "does not have 4 dims"},  // short part
      {"bb1f_01io->b01f", "bad dim_labels part"},  // repeated letter
      {"b02f_01io->b01f", "skips a spatial dim"},
      {"b01x_01io->b01f", "bad dim_labels part"},
      {"b01f_012i->b01f", "lacks a label"},
  };
  for (const auto& [labels, want] : bad) {
    absl::StatusOr<ConvDims> d = ParseConvDims(Conv(labels), 4);
    ASSERT_FALSE(d.ok()) << labels;
    EXPECT_NE(std::string(d.status().message()).find(want), std::string::npos) << labels << ": " << d.status().message();
  }
  EXPECT_FALSE(ParseConvDims(HloInstruction(), 4).ok());
  EXPECT_FALSE(ParseConvDims(Conv("b01f_01io->b01f", "0"), 4).ok());
  EXPECT_FALSE(ParseConvDims(Conv("b01f_01io->b01f", "", "x"), 4).ok());
}

}  // namespace
}  // namespace weave
