// libFuzzer target for issue 50's promise: the evaluator never crashes on a module the verifier
// accepts. The input is HLO text. A custom mutator (tests/fuzz/hlo_text_mutator.h) edits it a
// token at a time (a number changed, an identifier swapped for another of the module's or for an
// opcode, type or attribute name, a token or line deleted or repeated, a definition replaced by
// another's), so most mutants still parse and many still verify: they probe the verifier's
// holes, not the lexer's. Each input is parsed and verified as `weave run` does and, where both
// accept it and it is small, run on the evaluator (tests/fuzz/run_check.h). Any status is fine;
// a crash, a sanitizer report, an abort or a hang (libFuzzer's -timeout) is a finding.
//
// Seeds: Weave's own lit modules (the Makefile copies tests/lit/*.hlo and tests/lit/Inputs/*.hlo
// into build-fuzz/run-corpus). Environment: WEAVE_FUZZ_PRINT=1 prints every module that reaches
// the evaluator.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hlo_text_mutator.h"
#include "run_check.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  // One in eight mutations is libFuzzer's own byte-level one (it also finds lexer corners).
  if (seed % 8 == 0) return LLVMFuzzerMutate(data, size, max_size);
  const std::string out =
      weave::fuzz::MutateHloText(std::string_view(reinterpret_cast<const char*>(data), size), seed);
  if (out.empty() || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::copy(out.begin(), out.end(), data);
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool print = std::getenv("WEAVE_FUZZ_PRINT") != nullptr;
  (void)weave::fuzz::CheckParseVerifyRun(std::string_view(reinterpret_cast<const char*>(data), size), print);
  return 0;
}
