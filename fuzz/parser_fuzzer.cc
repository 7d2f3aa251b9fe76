// libFuzzer entry point for the HLO text parser: any input must either parse or return an
// error status (never crash, hang or leak). A module that parses is printed, re-parsed and
// printed again; the two prints must agree (the round-trip property of the printer).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

#include "hlo/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = weave::ParseHloModule(text, "fuzz.hlo");
  if (!m.ok()) return 0;
  const std::string p1 = (*m)->ToString();
  auto m2 = weave::ParseHloModule(p1, "fuzz-printed.hlo");
  if (!m2.ok()) {
    std::fprintf(stderr, "printed module does not parse: %s\n--- printed ---\n%s\n",
                 std::string(m2.status().message()).c_str(), p1.c_str());
    std::abort();
  }
  const std::string p2 = (*m2)->ToString();
  if (p1 != p2) {
    std::fprintf(stderr, "print is not stable\n--- first ---\n%s\n--- second ---\n%s\n",
                 p1.c_str(), p2.c_str());
    std::abort();
  }
  return 0;
}
