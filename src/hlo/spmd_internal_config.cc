// XLA's partitioner-internal custom-call configs (see spmd_internal_config.h).
#include "hlo/spmd_internal_config.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace weave {

std::optional<int64_t> SpmdInternalConfig::Int(const std::string& key) const {
  auto it = values.find(key);
  if (it == values.end() || it->second.size() != 1) return std::nullopt;
  return it->second[0];
}

const std::vector<int64_t>* SpmdInternalConfig::Array(const std::string& key) const {
  auto it = values.find(key);
  return it == values.end() ? nullptr : &it->second;
}

absl::StatusOr<SpmdInternalConfig> ParseSpmdInternalConfig(std::string_view raw) {
  SpmdInternalConfig out;
  std::string text(raw);
  text.erase(std::remove_if(text.begin(), text.end(),
                            [](char c) { return c == ' ' || c == '\n' || c == '"'; }),
             text.end());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eq = text.find('=', pos);
    if (eq == std::string::npos) return absl::InvalidArgumentError("backend_config is not key=value pairs");
    const std::string key = text.substr(pos, eq - pos);
    size_t end;
    std::string value;
    if (eq + 1 < text.size() && text[eq + 1] == '[') {
      end = text.find(']', eq);
      if (end == std::string::npos) return absl::InvalidArgumentError("unclosed '[' in backend_config");
      value = text.substr(eq + 2, end - eq - 2);
      ++end;
    } else {
      end = text.find(',', eq);
      if (end == std::string::npos) end = text.size();
      value = text.substr(eq + 1, end - eq - 1);
    }
    std::vector<int64_t> nums;
    for (absl::string_view piece : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      int64_t n;
      if (!absl::SimpleAtoi(piece, &n)) {
        return absl::InvalidArgumentError(absl::StrCat("backend_config value of '", key, "' is not an integer"));
      }
      if (n > (int64_t{1} << 40) || n < -(int64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat("backend_config value of '", key, "' is out of range"));
      }
      nums.push_back(n);
    }
    out.values[key] = std::move(nums);
    pos = end;
    if (pos < text.size() && text[pos] == ',') ++pos;
  }
  return out;
}

}  // namespace weave
