// Early return on an error status, as XLA writes it with TF_RETURN_IF_ERROR and
// TF_ASSIGN_OR_RETURN (tsl/platform/errors.h, statusor.h).
//
//   RETURN_IF_ERROR(expr);
//     `expr` is an absl::Status or an absl::StatusOr<T>, evaluated once. When it is not OK, the
//     enclosing function returns that status (the function returns absl::Status, any
//     absl::StatusOr<U>, or another type made from an absl::Status, such as
//     std::optional<absl::Status>).
//
//   ASSIGN_OR_RETURN(lhs, expr);
//     `expr` is an absl::StatusOr<T>, evaluated once. When it is not OK, the enclosing function
//     returns its status; otherwise its value is moved into `lhs`, a declaration (`auto x`,
//     `const T& y`; a type with a comma in it needs `auto`) or an existing lvalue. Expands to
//     several statements: not the body of an unbraced if/else.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weave::status_internal {

inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace weave::status_internal

#define WEAVE_STATUS_CONCAT_INNER(a, b) a##b
#define WEAVE_STATUS_CONCAT(a, b) WEAVE_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                         \
    if (const auto& weave_status_or_ = (expr);                                                 \
        !::weave::status_internal::AsStatus(weave_status_or_).ok()) {                          \
      return ::weave::status_internal::AsStatus(weave_status_or_);                             \
    }                                                                                          \
  } while (false)

#define WEAVE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#define ASSIGN_OR_RETURN(lhs, expr) \
  WEAVE_ASSIGN_OR_RETURN_IMPL(WEAVE_STATUS_CONCAT(weave_statusor_, __LINE__), lhs, expr)
