// Parser for XLA's HLO text format (../shared/specs/hlo-text-format.md), both full dumps
// (2023-2026) and the short test style.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// Parses a whole module. `filename` is used in error messages, which have the form
// `filename:line:column: message` naming the offending token (absl::InvalidArgumentError).
// Never crashes or loops on malformed input.
absl::StatusOr<std::unique_ptr<HloModule>> ParseHloModule(std::string_view text,
                                                          std::string_view filename = "<input>");
// Reads and parses a file ("-" reads stdin). NotFound / InvalidArgument errors.
absl::StatusOr<std::unique_ptr<HloModule>> ParseHloModuleFile(const std::string& path);

}  // namespace weave
