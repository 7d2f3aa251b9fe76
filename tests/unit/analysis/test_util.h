// Helpers for analysis unit tests: parse a module from text or fail the test.
#pragma once

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "hlo/parser.h"

namespace weave::testing {

inline std::unique_ptr<HloModule> ParseOrDie(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HloModule>> m = ParseHloModule(text, "test.hlo");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

inline HloInstruction* Find(const HloModule& m, const std::string& name) {
  for (HloComputation* c : m.computations()) {
    if (HloInstruction* h = c->GetInstruction(name)) return h;
  }
  ADD_FAILURE() << "no instruction " << name;
  return nullptr;
}

}  // namespace weave::testing
