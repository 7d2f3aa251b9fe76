// Tests of WriteFileAtomically (tools/cli_util.h): regular files are replaced atomically,
// symlinks stay links (their target is rewritten), devices are written in place, never
// replaced, and a directory is an error. And of KeepUntilExit: what it is given is never
// destroyed (and the SANITIZE=1 build's leak checker does not report it).
#include "tools/cli_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weave::tools {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class WriteFileAtomicallyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("weave_cli_util_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Number of entries in `dir` (a leftover temporary file would show up here).
int CountEntries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST_F(WriteFileAtomicallyTest, CreatesAndReplacesRegularFile) {
  const fs::path p = dir_ / "out.hlo";
  ASSERT_TRUE(WriteFileAtomically(p.string(), "first\n").ok());
  EXPECT_EQ(Slurp(p), "first\n");
  ASSERT_TRUE(WriteFileAtomically(p.string(), "second\n").ok());
  EXPECT_EQ(Slurp(p), "second\n");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(p)));
  EXPECT_EQ(CountEntries(dir_), 1);
}

TEST_F(WriteFileAtomicallyTest, SymlinkStaysALinkAndItsTargetIsRewritten) {
  fs::create_directories(dir_ / "real");
  const fs::path target = dir_ / "real" / "target.hlo";
  { std::ofstream(target) << "old\n"; }
  const fs::path link = dir_ / "link.hlo";
  fs::create_symlink("real/target.hlo", link);  // relative, resolved against the link's dir
  ASSERT_TRUE(WriteFileAtomically(link.string(), "new\n").ok());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(fs::read_symlink(link), fs::path("real/target.hlo"));
  EXPECT_EQ(Slurp(target), "new\n");
  EXPECT_EQ(CountEntries(dir_ / "real"), 1);  // no temporary left beside the target
}

TEST_F(WriteFileAtomicallyTest, SymlinkChainAndDanglingLink) {
  const fs::path target = dir_ / "made.hlo";  // does not exist yet
  fs::create_symlink(target, dir_ / "a");
  fs::create_symlink(dir_ / "a", dir_ / "b");
  ASSERT_TRUE(WriteFileAtomically((dir_ / "b").string(), "made\n").ok());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir_ / "a")));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir_ / "b")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(target)));
  EXPECT_EQ(Slurp(target), "made\n");
}

TEST_F(WriteFileAtomicallyTest, SymlinkLoopIsAnError) {
  fs::create_symlink(dir_ / "y", dir_ / "x");
  fs::create_symlink(dir_ / "x", dir_ / "y");
  absl::Status st = WriteFileAtomically((dir_ / "x").string(), "t\n");
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("symbolic links"));
}

TEST_F(WriteFileAtomicallyTest, DevNullStaysACharacterDevice) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  ASSERT_TRUE(WriteFileAtomically("/dev/null", "discarded\n").ok());
  struct stat after {};
  ASSERT_EQ(::lstat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_rdev, before.st_rdev);
}

TEST_F(WriteFileAtomicallyTest, SymlinkToDevNullIsWrittenThrough) {
  const fs::path link = dir_ / "null";
  fs::create_symlink("/dev/null", link);
  ASSERT_TRUE(WriteFileAtomically(link.string(), "discarded\n").ok());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(WriteFileAtomicallyTest, DirectoryIsAnError) {
  absl::Status st = WriteFileAtomically(dir_.string(), "x\n");
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("is a directory"));
  EXPECT_TRUE(fs::is_directory(dir_));
}

// Counts its destructions.
struct Tracked {
  explicit Tracked(int* destroyed) : destroyed(destroyed) {}
  ~Tracked() { ++*destroyed; }
  int* destroyed;
};

TEST(KeepUntilExitTest, TheObjectIsNeverDestroyed) {
  int destroyed = 0;
  {
    auto kept = std::make_unique<Tracked>(&destroyed);
    Tracked* raw = kept.get();
    KeepUntilExit(std::move(kept));
    EXPECT_EQ(kept, nullptr);  // ownership went to the process
    EXPECT_EQ(raw->destroyed, &destroyed);  // and the object is still alive
    auto freed = std::make_unique<Tracked>(&destroyed);  // the control: destroyed at scope end
  }
  EXPECT_EQ(destroyed, 1);
  KeepUntilExit(std::unique_ptr<Tracked>());  // nothing to keep: a no-op
}

}  // namespace
}  // namespace weave::tools
