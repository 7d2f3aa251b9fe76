// Window attributes (see window.h).
#include "hlo/window.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace weave {

using absl::InvalidArgumentError;

absl::StatusOr<std::vector<WindowDim>> ParseWindow(const HloInstruction& instr, size_t rank) {
  std::vector<WindowDim> w(rank);
  const std::string* text = instr.GetRawAttribute("window");
  if (text == nullptr) return w;
  std::string body = *text;
  body.erase(std::remove(body.begin(), body.end(), '{'), body.end());
  body.erase(std::remove(body.begin(), body.end(), '}'), body.end());
  for (absl::string_view item : absl::StrSplit(body, ' ', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(item, '=');
    if (kv.size() != 2) continue;
    std::vector<std::string> parts = absl::StrSplit(kv[1], 'x');
    if (parts.size() != rank) return InvalidArgumentError(absl::StrCat("bad window attribute '", *text, "'"));
    for (size_t d = 0; d < rank; ++d) {
      try {
        if (kv[0] == "pad") {
          std::vector<std::string> lh = absl::StrSplit(parts[d], '_');
          if (lh.size() != 2) return InvalidArgumentError("bad window padding");
          w[d].lo = std::stoll(lh[0]);
          w[d].hi = std::stoll(lh[1]);
        } else {
          const int64_t v = std::stoll(parts[d]);
          if (kv[0] == "size") w[d].size = v;
          else if (kv[0] == "stride") w[d].stride = v;
          else if (kv[0] == "lhs_dilate") w[d].lhs_dilate = v;
          else if (kv[0] == "rhs_dilate") w[d].rhs_dilate = v;
          else if (kv[0] == "rhs_reversal") w[d].reversal = v != 0;
          else return InvalidArgumentError(absl::StrCat("window field '", kv[0], "' is not supported"));
        }
      } catch (...) {
        return InvalidArgumentError(absl::StrCat("bad window attribute '", *text, "'"));
      }
    }
  }
  return w;
}

std::string WindowText(const std::vector<WindowDim>& w) {
  auto field = [&](const char* name, auto get, auto is_default) {
    bool any = false;
    std::vector<std::string> parts;
    for (const WindowDim& d : w) {
      any |= !is_default(d);
      parts.push_back(get(d));
    }
    return any ? absl::StrCat(" ", name, "=", absl::StrJoin(parts, "x")) : std::string();
  };
  std::string out = absl::StrCat("{", field("size", [](const WindowDim& d) { return absl::StrCat(d.size); },
                                            [](const WindowDim&) { return false; }).substr(1));
  absl::StrAppend(&out, field("stride", [](const WindowDim& d) { return absl::StrCat(d.stride); },
                              [](const WindowDim& d) { return d.stride == 1; }));
  absl::StrAppend(&out, field("pad", [](const WindowDim& d) { return absl::StrCat(d.lo, "_", d.hi); },
                              [](const WindowDim& d) { return d.lo == 0 && d.hi == 0; }));
  absl::StrAppend(&out, field("lhs_dilate", [](const WindowDim& d) { return absl::StrCat(d.lhs_dilate); },
                              [](const WindowDim& d) { return d.lhs_dilate == 1; }));
  absl::StrAppend(&out, field("rhs_dilate", [](const WindowDim& d) { return absl::StrCat(d.rhs_dilate); },
                              [](const WindowDim& d) { return d.rhs_dilate == 1; }));
  absl::StrAppend(&out, field("rhs_reversal", [](const WindowDim& d) { return absl::StrCat(d.reversal ? 1 : 0); },
                              [](const WindowDim& d) { return !d.reversal; }));
  return out + "}";
}

void SetWindow(HloInstruction* instr, const std::vector<WindowDim>& w) {
  instr->SetRawAttribute("window", WindowText(w));
}

}  // namespace weave
