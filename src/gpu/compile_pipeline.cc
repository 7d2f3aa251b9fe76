// The compile pipeline's definition (compile_pipeline.h).
#include "gpu/compile_pipeline.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weave {

const std::vector<CompileStage>& CompilePipelineStages() {
  static const std::vector<CompileStage> kStages = {
      {"collective-quantizer", "quantize"},
      {"windowed-einsum-decomposer", "decompose"},
      {"block-scaled-windowed-einsum", "decompose"},
      {"all-to-all-windowed-einsum", "all-to-all"},
      {"windowed-einsum-handler", "handler"},
      {"windowed-einsum-consumers-in-ring", "handler"},
      {"windowed-einsum-epilogue", "handler"},
      {"collective-quantizer", "quantize"},
      {"dot-merger", "dot-merger"},
      {"block-scaling-rewriter", "fp8-gemm"},
      {"fp8-gemm-rewriter", "fp8-gemm"},
      {"cse", "cleanup"},
      {"dce", "cleanup"},
      {"tuple-simplifier", "cleanup"},
      {"while-loop-dead-tuple-elements", "cleanup"},
  };
  return kStages;
}

std::vector<std::string> CompilePipelinePassNames() {
  std::vector<std::string> names;
  for (const CompileStage& s : CompilePipelineStages()) names.emplace_back(s.pass);
  return names;
}

absl::StatusOr<std::vector<std::string>> CompilePipelinePassNames(
    const std::set<std::string>& off_groups, const std::set<std::string>& off_passes) {
  std::set<std::string> known;
  for (const CompileStage& s : CompilePipelineStages()) known.emplace(s.pass);
  for (const std::string& p : off_passes) {
    if (!known.count(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", p, "' is not a pass of the compile pipeline (", absl::StrJoin(known, ", "), ")"));
    }
  }
  std::vector<std::string> out;
  for (const CompileStage& s : CompilePipelineStages()) {
    if (off_groups.count(std::string(s.group)) || off_passes.count(std::string(s.pass))) continue;
    out.emplace_back(s.pass);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HloPassPipeline>> MakeCompilePipeline(
    const std::vector<std::string>& names, const PassOptions& options,
    std::vector<std::string>* unavailable) {
  auto pipeline = std::make_unique<HloPassPipeline>("compile-pipeline");
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<HloPass>> pass = PassRegistry::Get().Create(name, options);
    if (!pass.ok() && absl::IsNotFound(pass.status()) && unavailable != nullptr) {
      unavailable->push_back(name);
      continue;
    }
    if (!pass.ok()) {
      return absl::Status(pass.status().code(),
                          absl::StrCat(name, ": ", pass.status().message()));
    }
    pipeline->AddPass(*std::move(pass));
  }
  return pipeline;
}

std::string CompilePipelineSummary() {
  std::vector<std::string> words{"verify"};
  for (const CompileStage& s : CompilePipelineStages()) {
    const std::string word(s.group == "cleanup" ? "cleanup" : s.pass);
    if (word == "cleanup" && words.back() == "cleanup") continue;
    words.push_back(word);
  }
  words.push_back("verify");
  return absl::StrJoin(words, ", ");
}

}  // namespace weave
