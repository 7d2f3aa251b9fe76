#include "tools/cli_util.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace weave::tools {

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? absl::OkStatus() : absl::InternalError("cannot write to stdout");
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::NotFoundError(absl::StrCat(path, ": cannot open for writing"));
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat(path, ": write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot rename the temporary file into place"));
  }
  return absl::OkStatus();
}

}  // namespace weave::tools
