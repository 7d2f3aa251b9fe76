// Helpers shared by the pass unit tests: parse a module, run a registered pass by name with its
// remarks collected, count instructions of one opcode.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hlo/parser.h"
#include "passes/pass.h"

namespace weave::testing_util {

struct PassRun {
  bool changed = false;
  std::vector<Remark> remarks;
};

// Creates the pass `name` from the registry with `opts` and runs it on `m`; failures are
// reported as test failures (and give changed = false).
inline PassRun RunPass(HloModule* m, const std::string& name, PassOptions opts = {}) {
  PassRun r;
  auto pass = PassRegistry::Get().Create(name, opts);
  EXPECT_TRUE(pass.ok()) << pass.status();
  if (!pass.ok()) return r;
  (*pass)->set_remarks(&r.remarks);
  auto changed = (*pass)->Run(m);
  EXPECT_TRUE(changed.ok()) << changed.status();
  r.changed = changed.ok() && *changed;
  return r;
}

// Parses HLO text; a parse error is a test failure and gives nullptr.
inline std::unique_ptr<HloModule> Parse(const std::string& text) {
  auto m = ParseHloModule(text, "test");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Number of instructions with opcode `op` in every computation of `m`.
inline int Count(const HloModule& m, HloOpcode op) {
  int n = 0;
  for (HloComputation* c : m.computations()) {
    for (HloInstruction* i : c->instructions()) n += i->opcode() == op;
  }
  return n;
}

// True when `remarks` holds a missed remark at `location` whose message contains `needle`.
inline bool HasMissed(const std::vector<Remark>& remarks, const std::string& location,
                      const std::string& needle) {
  for (const Remark& rm : remarks) {
    if (rm.location == location && !rm.applied && rm.message.find(needle) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace weave::testing_util
