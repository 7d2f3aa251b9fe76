// libFuzzer entry point for the whole pipeline (issue 14): the input bytes are the decisions of
// the random program generator (tests/fuzz/program_gen.h, ByteChoices), so every input is a
// valid partitioned module (or, for a quarter of the inputs, a global module with random
// shardings, partitioned by the SPMD pipeline and compared with the global program first); it is
// then compiled and checked against the reference evaluator exactly as `weave-fuzz` does (tests/fuzz/differential.h: the pipeline with verification and a
// numerics comparison after every pass, each pass alone, idempotence, print/parse round trip).
// Any CRASH (a pass error, an invalid module after a pass) or MISMATCH aborts with the program
// and the failed check on stderr; INVALID means the generator itself is wrong and aborts too.
// Sanitizers (ASan, UBSan) report memory errors and undefined behaviour on the way.
//
// Environment: WEAVE_FUZZ_ALLOW=check1,check2 lists failed-check prefixes that do not abort
// (known open bugs while their fixes land, e.g. "idempotence"); WEAVE_FUZZ_PRINT=1 prints every
// program.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "choice_source.h"
#include "differential.h"
#include "program_gen.h"

namespace {

std::vector<std::string> Allowed() {
  std::vector<std::string> out;
  const char* env = std::getenv("WEAVE_FUZZ_ALLOW");
  if (env == nullptr) return out;
  std::string s(env), cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weave::fuzz;
  static const std::vector<std::string> allowed = Allowed();
  static const bool print = std::getenv("WEAVE_FUZZ_PRINT") != nullptr;
  ByteChoices choices(data, size);
  GenOptions options;
  options.max_motifs = 2;
  // A quarter of the inputs (those whose last byte is a multiple of 4) are global modules with
  // random shardings, partitioned by the SPMD pipeline first.
  if (size > 0 && data[size - 1] % 4 == 0) options.mode = GenOptions::Mode::kGlobal;
  GeneratedProgram p = GenerateProgram(choices, options, "fuzz_bytes");
  if (print) std::fprintf(stderr, "%s\n", p.text.c_str());
  CheckOptions check;
  CheckResult r = CheckModuleText(p.text, check);
  if (r.verdict == Verdict::kPass) return 0;
  for (const std::string& a : allowed) {
    if (r.check.compare(0, a.size(), a) == 0) return 0;
  }
  std::fprintf(stderr, "weave pipeline fuzzer: %s %s\n%s\n--- program ---\n%s\n",
               std::string(VerdictName(r.verdict)).c_str(), r.check.c_str(), r.detail.c_str(),
               p.text.c_str());
  std::abort();
}
