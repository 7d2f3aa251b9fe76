// Round trip over the project's own modules (tests/calibration) and, where
// ../shared is beside the checkout, every file of ../shared/real and ../shared/examples: parse,
// print, parse, print gives the same text the second time; XLA's own dumps come back byte for
// byte.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "shared_files.h"

namespace weave {
namespace {

namespace fs = std::filesystem;

// The .hlo files of `dirs` that exist, sorted.
std::vector<std::string> HloFilesIn(const std::vector<std::string>& dirs) {
  std::vector<std::string> files;
  for (const std::string& dir : dirs) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".hlo") files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> SharedHloFiles() {
  return HloFilesIn({weave::testfiles::SharedPath("real"), weave::testfiles::SharedPath("examples")});
}

std::vector<std::string> HloFiles() {
  std::vector<std::string> files =
      HloFilesIn({weave::testfiles::SourcePath("tests/calibration")});
  for (const std::string& f : SharedHloFiles()) files.push_back(f);
  return files;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string StripTrailingNewlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

class RoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTripTest, PrintParsePrintIsStable) {
  const std::string path = GetParam();
  const std::string text = ReadFile(path);
  ASSERT_FALSE(text.empty()) << path;
  auto m1 = ParseHloModule(text, path);
  ASSERT_TRUE(m1.ok()) << m1.status().message();
  const std::string p1 = (*m1)->ToString();
  auto m2 = ParseHloModule(p1, path + " (printed)");
  ASSERT_TRUE(m2.ok()) << m2.status().message();
  const std::string p2 = (*m2)->ToString();
  EXPECT_TRUE(p1 == p2) << "second print differs for " << path;
  // Same structure after the round trip.
  ASSERT_EQ((*m1)->computations().size(), (*m2)->computations().size());
  for (size_t i = 0; i < (*m1)->computations().size(); ++i) {
    EXPECT_EQ((*m1)->computations()[i]->instruction_count(),
              (*m2)->computations()[i]->instruction_count());
  }
  // Files dumped by XLA itself (with `%` names) print back exactly as they were written.
  if (text.find("\n%") != std::string::npos || text.find("ENTRY %") != std::string::npos) {
    EXPECT_TRUE(StripTrailingNewlines(text) == StripTrailingNewlines(p1))
        << path << " did not print back byte for byte";
  }
}

INSTANTIATE_TEST_SUITE_P(Files, RoundTripTest, ::testing::ValuesIn(HloFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = fs::path(info.param).stem().string();
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(RoundTripFilesTest, ProjectFilesArePresent) {
  // The calibration modules: in every clone.
  EXPECT_GE(HloFiles().size() - SharedHloFiles().size(), 40u);
}

TEST(RoundTripFilesTest, SharedFilesArePresent) {
  WEAVE_SKIP_WITHOUT_SHARED("real");
  WEAVE_SKIP_WITHOUT_SHARED("examples");
  // The real dumps and examples must all be found and tested.
  EXPECT_GE(SharedHloFiles().size(), 13u);
}

}  // namespace
}  // namespace weave
