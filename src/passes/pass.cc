#include "passes/pass.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "analysis/verifier.h"
#include "hlo/status_macros.h"

namespace weave {

std::string Remark::ToString() const {
  return absl::StrCat(pass, ": ", location, ": ", applied    ? "[applied] "
                                                  : analysis ? "[analysis] "
                                                             : "[missed] ",
                      message);
}

std::string PassOptions::GetString(std::string_view key, std::string def) const {
  MarkRead(key);
  auto it = values_.find(std::string(key));
  return it == values_.end() ? def : it->second;
}

absl::StatusOr<int64_t> PassOptions::GetInt(std::string_view key, int64_t def) const {
  MarkRead(key);
  auto it = values_.find(std::string(key));
  if (it == values_.end()) return def;
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(it->second), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("option --", std::string(key), ": '",
                                                   it->second, "' is not an integer"));
  }
  return v;
}

absl::StatusOr<double> PassOptions::GetDouble(std::string_view key, double def) const {
  MarkRead(key);
  auto it = values_.find(std::string(key));
  if (it == values_.end()) return def;
  double v = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(it->second), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("option --", std::string(key), ": '",
                                                   it->second, "' is not a number"));
  }
  return v;
}

absl::StatusOr<bool> PassOptions::GetBool(std::string_view key, bool def) const {
  MarkRead(key);
  auto it = values_.find(std::string(key));
  if (it == values_.end()) return def;
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(it->second));
  if (v == "true" || v == "1" || v == "yes" || v == "on" || v.empty()) return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("option --", std::string(key), ": '", it->second,
                                                 "' is not a boolean (true/false/1/0)"));
}

std::vector<std::string> PassOptions::Unread() const {
  std::vector<std::string> out;
  for (const auto& [key, value] : values_) {
    if (!read_.count(key)) out.push_back(key);
  }
  return out;
}

PassRegistry& PassRegistry::Get() {
  static PassRegistry* registry = new PassRegistry();
  return *registry;
}

void PassRegistry::Register(std::string name, PassFactory factory) {
  factories_[std::move(name)] = std::move(factory);
}

absl::StatusOr<std::unique_ptr<HloPass>> PassRegistry::Create(std::string_view name,
                                                              const PassOptions& options) const {
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown pass '", std::string(name),
                                            "'; known passes: ", absl::StrJoin(Names(), ", ")));
  }
  return it->second(options);
}

std::vector<std::string> PassRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories_) names.push_back(name);
  return names;
}

absl::Status HloPassPipeline::AddPassesByName(std::string_view names,
                                              const PassOptions& options) {
  for (absl::string_view piece : absl::StrSplit(absl::string_view(names.data(), names.size()), ',')) {
    std::string name(absl::StripAsciiWhitespace(piece));
    if (name.empty()) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<HloPass> pass, PassRegistry::Get().Create(name, options));
    AddPass(std::move(pass));
  }
  return absl::OkStatus();
}

std::vector<std::string> HloPassPipeline::pass_names() const {
  std::vector<std::string> names;
  for (const std::unique_ptr<HloPass>& pass : passes_) names.emplace_back(pass->name());
  return names;
}

absl::StatusOr<bool> HloPassPipeline::Run(HloModule* module, std::vector<PassTiming>* timings) {
  bool changed = false;
  for (const std::unique_ptr<HloPass>& pass : passes_) {
    pass->set_remarks(remarks_);
    if (hooks_.before) hooks_.before(*pass, *module);
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> result = pass->Run(module);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("pass ", std::string(pass->name()), ": ",
                                       result.status().message()));
    }
    const PassTiming timing{std::string(pass->name()), seconds, *result};
    if (hooks_.after) hooks_.after(*pass, *module, timing);
    if (timings) timings->push_back(timing);
    changed |= *result;
    if (verify_each_) {
      absl::Status st = VerifyModule(*module);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("verifier failed after pass ",
                                                    std::string(pass->name()), ": ",
                                                    st.message()));
      }
    }
  }
  return changed;
}

}  // namespace weave
