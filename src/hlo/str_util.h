// String helpers for the hlo layer's own .cc files.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weave::hlo_internal {

// Debian's abseil 20220623 has its own string_view type (ABSL_OPTION_USE_STD_STRING_VIEW=0), so
// absl::StrCat does not take std::string_view: A() adapts such arguments, others pass through.
template <typename T>
const T& A(const T& v) { return v; }
inline absl::string_view A(std::string_view v) { return absl::string_view(v.data(), v.size()); }
// absl::StrCat / StrAppend accepting std::string_view arguments too.
template <typename... Ts>
std::string Cat(const Ts&... v) { return absl::StrCat(A(v)...); }
template <typename... Ts>
void Append(std::string* o, const Ts&... v) { absl::StrAppend(o, A(v)...); }

}  // namespace weave::hlo_internal
