// Helpers shared by the `weave` subcommands.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace weave::tools {

// Writes `text` to `path` ("-" or empty: stdout). When `path` does not exist or is a regular
// file, the write is atomic: a temporary file beside it, then rename, so a failed run never
// leaves a half-written output. A symbolic link is followed (the whole chain) and the atomic
// write happens at the file it names, so the link stays a link. An existing file that is not
// regular (character or block device such as /dev/null, FIFO, socket) is opened and written
// in place, never replaced. Errors: InvalidArgument (`path` is a directory, or a symlink
// loop), NotFound (cannot open), Internal (write or rename failed); the temporary file is
// removed on failure.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

// Hands `object` to the process: it is never destroyed, and its memory goes back to the system
// when the process exits. For what a command holds at its very end (the compiled module), whose
// block-by-block destruction changes nothing anyone sees (as Clang's `-disable-free` keeps its
// AST; the cost saved: bench/NOTES.md). The object stays reachable from a static list, so a leak
// checker (LeakSanitizer in the SANITIZE=1 build) does not report it. Not for loops: every call
// keeps one more object for the life of the process.
void KeepUntilExitImpl(void* object);
template <typename T>
void KeepUntilExit(std::unique_ptr<T> object) {
  KeepUntilExitImpl(object.release());
}

// "1 partition" / "4 partitions": `n` followed by the singular or plural noun.
std::string CountOf(int64_t n, const std::string& singular, const std::string& plural);

// CLI11 validators for numbers with short messages (CLI11's own range checks print the
// largest double in full): Positive() accepts values > 0, NonNegative() values >= 0. A value
// that is not a number is left for the option's own conversion to report.
CLI::Validator Positive();
CLI::Validator NonNegative();

// The option names (PassOptions keys, without `--`) that the registered passes read, found by
// creating every registered pass with empty options. Sorted, unique.
std::vector<std::string> KnownPassOptionNames();

// The candidate closest to `word` by edit distance (Levenshtein), if it is close enough to be
// a likely misspelling (distance <= max(2, size/4)); empty otherwise.
std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates);

// The error for command-line `--key` arguments taken as pass options that no pass read
// (PassOptions::Unread): "unknown option --a (...); did you mean --b?" for the first one, with
// `context` (e.g. "not a compile flag, and no pass in the pipeline reads it") inside the
// parentheses and `passes` (the pipeline) listed. `known` are the names (without dashes) a
// suggestion may come from. Empty when `unread` is empty.
std::string UnknownOptionsMessage(const std::vector<std::string>& unread,
                                  const std::string& context,
                                  const std::vector<std::string>& passes,
                                  std::vector<std::string> known);

}  // namespace weave::tools
