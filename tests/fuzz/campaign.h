// Running differential checks in child processes, so that a crash (signal, sanitizer report,
// abort) or a hang of the compiler is a classified result (CRASH, TIMEOUT) and not the end of
// the campaign. Used by the driver's `run` and `reduce` commands.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "differential.h"
#include "program_gen.h"

namespace weave::fuzz {

// What a child reports back (or what the parent concluded for it).
struct ChildResult {
  CheckResult check;
  std::string last_step;  // the last progress label the child sent (where it crashed)
  int signal = 0;         // the signal that ended the child (CRASH), 0 if none
  double seconds = 0;
};

// One unit of work: produces the module text inside the child (generation runs there too, so a
// generator crash is caught as well).
using TextMaker = std::function<std::string()>;

// Runs `jobs` in child processes, at most `parallel` at a time, each given `timeout_s` seconds
// (then SIGKILL and TIMEOUT). `done(i, result)` is called in the parent as each job finishes,
// in completion order; when it returns false no further job is started (running ones finish).
void RunInChildren(const std::vector<TextMaker>& jobs, const CheckOptions& options, int parallel,
                   double timeout_s,
                   const std::function<bool(size_t, const ChildResult&)>& done);

// Convenience: one job, waited for.
ChildResult RunOneInChild(const TextMaker& job, const CheckOptions& options, double timeout_s);

}  // namespace weave::fuzz
