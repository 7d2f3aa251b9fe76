#include "hlo/conv_dims.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

using absl::InvalidArgumentError;

absl::StatusOr<ConvLabels> ParseLabels(const std::string& text, char a, char b, int64_t rank) {
  ConvLabels l;
  l.spatial.assign(static_cast<size_t>(rank), -1);
  int64_t spatial = 0;
  if (static_cast<int64_t>(text.size()) != rank) {
    return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' does not have ", rank, " dims"));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const char c = text[static_cast<size_t>(d)];
    int64_t* slot = c == a ? &l.a : c == b ? &l.b : nullptr;
    if (slot == nullptr && c >= '0' && c <= '9' && c - '0' < rank) slot = &l.spatial[static_cast<size_t>(c - '0')];
    if (slot == nullptr || *slot >= 0) {
      return InvalidArgumentError(absl::StrCat("bad dim_labels part '", text, "'"));
    }
    *slot = d;
    if (c != a && c != b) ++spatial;
  }
  if (l.a < 0 || l.b < 0) return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' lacks a label"));
  l.spatial.resize(static_cast<size_t>(spatial));
  for (int64_t s : l.spatial) {
    if (s < 0) return InvalidArgumentError(absl::StrCat("dim_labels part '", text, "' skips a spatial dim"));
  }
  return l;
}

absl::StatusOr<int64_t> GroupCount(const HloInstruction& h, const std::string& key) {
  const std::string* v = h.GetRawAttribute(key);
  if (v == nullptr) return 1;
  int64_t g = 0;
  if (!absl::SimpleAtoi(*v, &g) || g < 1) {
    return InvalidArgumentError(absl::StrCat(key, "=", *v, " is not a positive integer"));
  }
  return g;
}

}  // namespace

absl::StatusOr<ConvDims> ParseConvDims(const HloInstruction& conv, int64_t rank) {
  const std::string* labels = conv.GetRawAttribute("dim_labels");
  if (labels == nullptr) return InvalidArgumentError("convolution needs dim_labels=");
  const std::string& t = *labels;
  const size_t us = t.find('_'), arrow = t.find("->");
  if (us == std::string::npos || arrow == std::string::npos || arrow < us) {
    return InvalidArgumentError(absl::StrCat("bad dim_labels '", t, "'"));
  }
  ConvDims d;
  ASSIGN_OR_RETURN(ConvLabels l, ParseLabels(t.substr(0, us), 'b', 'f', rank));
  ASSIGN_OR_RETURN(ConvLabels k, ParseLabels(t.substr(us + 1, arrow - us - 1), 'i', 'o', rank));
  ASSIGN_OR_RETURN(ConvLabels o, ParseLabels(t.substr(arrow + 2), 'b', 'f', rank));
  d.lhs = std::move(l);
  d.kernel = std::move(k);
  d.out = std::move(o);
  if (d.kernel.spatial.size() != d.lhs.spatial.size() || d.out.spatial.size() != d.lhs.spatial.size()) {
    return InvalidArgumentError("dim_labels give the operands different spatial dims");
  }
  ASSIGN_OR_RETURN(int64_t fg, GroupCount(conv, "feature_group_count"));
  ASSIGN_OR_RETURN(int64_t bg, GroupCount(conv, "batch_group_count"));
  d.feature_group_count = fg;
  d.batch_group_count = bg;
  return d;
}

}  // namespace weave
