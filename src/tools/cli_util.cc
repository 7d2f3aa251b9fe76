#include "tools/cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "passes/pass.h"
#include "hlo/status_macros.h"

namespace weave::tools {
namespace {

namespace fs = std::filesystem;

// Follows a chain of symbolic links starting at `path` (relative targets are taken relative
// to the link's directory). Returns the first path that is not a symlink (which may not
// exist: a dangling link names the file to create). Fails on a loop (more than 40 links).
absl::Status ResolveSymlinks(fs::path path, fs::path* resolved) {
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    fs::file_status st = fs::symlink_status(path, ec);
    if (!fs::is_symlink(st)) {
      *resolved = path;
      return absl::OkStatus();
    }
    fs::path target = fs::read_symlink(path, ec);
    if (ec) {
      return absl::NotFoundError(
          absl::StrCat(path.string(), ": cannot read the symbolic link: ", ec.message()));
    }
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path.string(), ": too many levels of symbolic links"));
}

// Writes `text` to an existing non-regular file (character device, FIFO, ...) by opening it
// for writing, without a temporary file.
absl::Status WriteDirectly(const std::string& path, const std::string& shown,
                           const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::out);
  if (!out) {
    return absl::NotFoundError(
        absl::StrCat(shown, ": cannot open for writing: ", std::strerror(errno)));
  }
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(shown, ": write failed"));
  return absl::OkStatus();
}

}  // namespace

void KeepUntilExitImpl(void* object) {
  if (object == nullptr) return;
  static auto* kept = new std::vector<void*>();  // never freed: reachable until exit
  kept->push_back(object);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return std::cout ? absl::OkStatus() : absl::InternalError("cannot write to stdout");
  }
  fs::path target;
  RETURN_IF_ERROR(ResolveSymlinks(fs::path(path), &target));
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(target, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
    }
    if (!fs::is_regular_file(st)) {
      // A device, FIFO or socket: never replace it, write into it.
      return WriteDirectly(target.string(), path, text);
    }
  }
  const std::string final_path = target.string();
  const std::string tmp = absl::StrCat(final_path, ".tmp.", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return absl::NotFoundError(
          absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
    }
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat(path, ": write failed"));
    }
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot rename the temporary file into place"));
  }
  return absl::OkStatus();
}

namespace {

CLI::Validator NumberCheck(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& value) -> std::string {
        double v = 0;
        if (!absl::SimpleAtod(value, &v)) return "";  // the conversion reports it
        if (std::isnan(v) || v < 0 || (!allow_zero && v == 0)) {
          return absl::StrCat("must be ", allow_zero ? ">= 0" : "> 0", " (got ", value, ")");
        }
        return "";
      },
      allow_zero ? "NUMBER>=0" : "NUMBER>0");
}

}  // namespace

std::string CountOf(int64_t n, const std::string& singular, const std::string& plural) {
  return absl::StrCat(n, " ", n == 1 ? singular : plural);
}

CLI::Validator Positive() { return NumberCheck(false); }
CLI::Validator NonNegative() { return NumberCheck(true); }

std::vector<std::string> KnownPassOptionNames() {
  std::set<std::string> names;
  for (const std::string& pass : PassRegistry::Get().Names()) {
    PassOptions probe;
    (void)PassRegistry::Get().Create(pass, probe);
    names.insert(probe.looked_up().begin(), probe.looked_up().end());
  }
  return {names.begin(), names.end()};
}

std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 4) + 1;
  for (const std::string& c : candidates) {
    // Levenshtein distance, one row at a time.
    std::vector<size_t> row(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= c.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                           diagonal + (word[i - 1] == c[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    if (row[c.size()] < best_distance) {
      best_distance = row[c.size()];
      best = c;
    }
  }
  return best;
}

std::string UnknownOptionsMessage(const std::vector<std::string>& unread,
                                  const std::string& context,
                                  const std::vector<std::string>& passes,
                                  std::vector<std::string> known) {
  if (unread.empty()) return "";
  std::string msg = absl::StrCat(unread.size() == 1 ? "unknown option --" : "unknown options --",
                                 absl::StrJoin(unread, ", --"), " (", context, "; passes: ",
                                 passes.empty() ? "none" : absl::StrJoin(passes, ", "), ")");
  for (const std::string& u : unread) {
    std::string near = ClosestMatch(u, known);
    if (!near.empty()) absl::StrAppend(&msg, "; --", u, ": did you mean --", near, "?");
  }
  return msg;
}

}  // namespace weave::tools
