// Reads one array out of a JSON text without building the document: for the report's view of
// each GEMM's backend_config (tools/report_summary.cc), where a full parse of every ~1 KB config
// cost as much as the rest of the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weave::tools {

// An element of the array found: a string (its decoded text), an integer (a number without
// fraction or exponent), or any other value (kind kOther, nothing kept).
struct JsonScalar {
  enum Kind { kString, kInteger, kOther } kind = kOther;
  std::string text;   // kString
  int64_t value = 0;  // kInteger
};

// What ScanJsonArray found: `found` when every object on `path` exists and the value at its end
// is an array; then `elements` holds that array's elements in order.
struct JsonArrayScan {
  bool found = false;
  std::vector<JsonScalar> elements;
};

// Scans `text` as one JSON value and finds the array at `path` (object keys, outermost first):
// found only if the text is a JSON object, each key on the path names an object (the last, an
// array). Returns std::nullopt, so that the caller parses the text with a full JSON reader
// (nlohmann), whenever the text is outside the plain subset this scanner reads exactly as that
// reader would:
//   - anything that is not valid JSON, or nested deeper than 64 levels;
//   - a number a double cannot hold, too large or too small (the full reader rejects the text
//     for 1e400; 1e-400 is declined too);
//   - a string with a byte outside printable ASCII, or a \u escape;
//   - an element of the array read that is an integer of more than 18 digits;
//   - a key of the path given twice in one object on the path (a full reader keeps the last).
// Linear in the text; never throws.
std::optional<JsonArrayScan> ScanJsonArray(std::string_view text,
                                           const std::vector<std::string_view>& path);

}  // namespace weave::tools
