// The model against the published measurements C1-C5 (performance-model.md, "Calibration rows"):
// a model test, not a timed one. Every row: predicted speedup within 15% of the published one,
// predicted non-overlapped time within 10% (kernel rows; whole-model rows compare the saving).
#include "sim/calibration.h"

#include <fstream>
#include <memory>
#include <sstream>

#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave::sim {
namespace {

TEST(Calibration, EveryRowWithinTolerance) {
  absl::StatusOr<std::vector<CalibrationResult>> results = RunCalibration();
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 8u);  // C1, C2, C3, C4 x 3 batches, C5 x 2 batches
  for (const CalibrationResult& r : *results) {
    SCOPED_TRACE(r.row->id);
    EXPECT_GT(r.speedup_ratio, 0.85) << "predicted speedup " << r.predicted_speedup
                                     << " vs published " << r.row->published_speedup;
    EXPECT_LT(r.speedup_ratio, 1.15) << "predicted speedup " << r.predicted_speedup
                                     << " vs published " << r.row->published_speedup;
    if (r.row->layers == 0) {
      ASSERT_TRUE(r.base_ratio.has_value());
      EXPECT_GT(*r.base_ratio, 0.90) << "predicted base " << *r.predicted_base_us;
      EXPECT_LT(*r.base_ratio, 1.10) << "predicted base " << *r.predicted_base_us;
    } else {
      EXPECT_FALSE(r.predicted_base_us.has_value());
      EXPECT_GT(r.saving_per_layer_us, 0);
    }
  }
}

// The published direction of each row holds: C3 (small M, one compute stream) is a slowdown,
// every other row a speedup.
TEST(Calibration, SlowdownOnlyAtSmallM) {
  absl::StatusOr<std::vector<CalibrationResult>> results = RunCalibration();
  ASSERT_TRUE(results.ok()) << results.status();
  for (const CalibrationResult& r : *results) {
    if (r.row->id == "C3") {
      EXPECT_LT(r.predicted_speedup, 1.0);
    } else {
      EXPECT_GT(r.predicted_speedup, 1.0) << r.row->id;
    }
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tests/calibration holds the rows' modules as the generators write them, and they parse.
TEST(Calibration, ModulesInTestsMatchTheGenerators) {
  int files = 0;
  for (const CalibrationRow& row : CalibrationRows()) {
    for (const TpMatmul& seg : row.segments) {
      for (int which = 0; which < 2; ++which) {
        std::string text = which == 0 ? TpMatmulBaseModule(seg)
                                       : TpMatmulDecomposedModule(seg, row.streams);
        std::string path = std::string(WEAVE_SOURCE_DIR) + "/tests/calibration/" + seg.name +
                           (which == 0 ? "_base.hlo" : "_decomposed.hlo");
        EXPECT_EQ(ReadFile(path), text)
            << path << " is stale: weave simulate --calibration --write-modules tests/calibration";
        EXPECT_TRUE(ParseHloModule(text, path).ok()) << path;
        ++files;
      }
    }
  }
  EXPECT_EQ(files, 2 * (3 + 5 * 4));
}

// The table names every row, its source and the ratios.
TEST(Calibration, TableListsEveryRow) {
  absl::StatusOr<std::vector<CalibrationResult>> results = RunCalibration();
  ASSERT_TRUE(results.ok());
  std::string table = CalibrationTable(*results);
  for (const char* id : {"C1", "C2", "C3", "C4 b=12", "C4 b=8", "C4 b=4", "C5 b=12", "C5 b=8"}) {
    EXPECT_NE(table.find(id), std::string::npos) << id;
  }
  EXPECT_NE(table.find("Flux README"), std::string::npos);
  EXPECT_NE(table.find("PyTorch PR 143160"), std::string::npos);
}

}  // namespace
}  // namespace weave::sim
