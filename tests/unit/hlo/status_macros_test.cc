// Unit tests of RETURN_IF_ERROR and ASSIGN_OR_RETURN (hlo/status_macros.h): they return the
// error of a Status or a StatusOr, evaluate their expression once, and assign the value.
#include "hlo/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace weave {
namespace {

absl::Status Check(bool ok, int* calls) {
  ++*calls;
  return ok ? absl::OkStatus() : absl::InvalidArgumentError("bad operand");
}

absl::StatusOr<std::unique_ptr<std::string>> Make(bool ok, int* calls) {
  ++*calls;
  if (!ok) return absl::NotFoundError("no value");
  return std::make_unique<std::string>("value");
}

absl::Status Twice(bool first, bool second, int* calls, int* reached) {
  RETURN_IF_ERROR(Check(first, calls));
  ++*reached;
  RETURN_IF_ERROR(Make(second, calls));
  ++*reached;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Take(bool ok, int* calls) {
  ASSIGN_OR_RETURN(std::unique_ptr<std::string> p, Make(ok, calls));
  std::string out;
  ASSIGN_OR_RETURN(out, absl::StatusOr<std::string>(*p + "!"));
  return out;
}

TEST(StatusMacros, ReturnIfErrorReturnsTheFirstError) {
  int calls = 0, reached = 0;
  EXPECT_TRUE(Twice(true, true, &calls, &reached).ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(reached, 2);

  calls = reached = 0;
  absl::Status s = Twice(false, true, &calls, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad operand");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(reached, 0);

  calls = reached = 0;
  s = Twice(true, false, &calls, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacros, AssignOrReturnMovesTheValueOrReturnsTheError) {
  int calls = 0;
  absl::StatusOr<std::string> v = Take(true, &calls);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "value!");
  EXPECT_EQ(calls, 1);

  calls = 0;
  v = Take(false, &calls);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(v.status().message(), "no value");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace weave
