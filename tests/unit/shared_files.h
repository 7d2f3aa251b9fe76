// The ../shared folder in unit tests: real XLA dumps (real/) and example modules (examples/)
// that sit beside the checkout in development and CI, and are absent from a clone of the project
// on its own. A test that reads them skips, naming the missing file, when they are not there
// (WEAVE_SKIP_WITHOUT_SHARED); tests that must run in every clone read the project's own modules
// (tests/lit, tests/lit/Inputs, tests/calibration: SourcePath).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace weave::testfiles {

// The shared folder: $WEAVE_SHARED_DIR when set (a path that does not exist makes the tests run
// as a clone on its own would), else the one CMake was given (../shared beside the source root).
inline std::string SharedDir() {
  const char* env = std::getenv("WEAVE_SHARED_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(WEAVE_SHARED_DIR);
}

// SharedDir()/rel, e.g. SharedPath("examples/rs_fp8.hlo").
inline std::string SharedPath(const std::string& rel) { return SharedDir() + "/" + rel; }

// Whether SharedDir()/rel exists (a file or a folder).
inline bool HasShared(const std::string& rel) {
  std::error_code ec;
  return std::filesystem::exists(SharedPath(rel), ec);
}

// A file or folder of the project itself, e.g. SourcePath("tests/calibration").
inline std::string SourcePath(const std::string& rel) { return std::string(WEAVE_SOURCE_DIR) + "/" + rel; }

}  // namespace weave::testfiles

// Skips the current test (GTEST_SKIP, which returns from the test body) when ../shared/<rel> is
// not beside the checkout, saying which file it needs.
#define WEAVE_SKIP_WITHOUT_SHARED(rel)                                                          \
  do {                                                                                          \
    if (!::weave::testfiles::HasShared(rel)) {                                                  \
      GTEST_SKIP() << "needs " << ::weave::testfiles::SharedPath(rel)                           \
                   << " (../shared is not beside this checkout: a clone on its own)";           \
    }                                                                                           \
  } while (0)
