#include "hlo/raw_dims_attribute.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weave {

absl::StatusOr<std::vector<int64_t>> RawDimsAttribute(const HloInstruction& h, std::string_view key) {
  std::vector<int64_t> out;
  const std::string* text = h.GetRawAttribute(key);
  if (text == nullptr) return out;
  absl::string_view t = *text;
  if (!absl::ConsumePrefix(&t, "{") || !absl::ConsumeSuffix(&t, "}")) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(key), "=", *text, " is not a {d,...} list"));
  }
  for (absl::string_view part : absl::StrSplit(t, ',', absl::SkipWhitespace())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(key), "=", *text, " is not a {d,...} list"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace weave
