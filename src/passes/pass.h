// The pass interface, modelled on XLA's HloPassInterface: `Run(module) -> StatusOr<bool>` where
// the bool says whether the module changed. Passes report their decisions as remarks.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

class CostOracle;  // passes/cost_oracle.h

// One decision of a pass about one place in the module: what was rewritten, or why not.
struct Remark {
  std::string pass;      // pass name, e.g. "windowed-einsum-handler"
  std::string location;  // instruction (or computation) name the remark is about
  bool applied = false;  // true: rewritten; false: left alone (message says why)
  std::string message;
  // A finding reported for information, neither a rewrite nor a refusal (what LLVM calls an
  // analysis remark, -Rpass-analysis): e.g. "recognised: all-gather loop ...". `applied` is false.
  bool analysis = false;
  // The instructions the decision is about when they are not `location`: e.g. the all-gather a
  // decomposer remark at a dot decided on (and both halves of an async pair). The compile report
  // takes a collective's reason only from remarks located at it or about it.
  std::vector<std::string> about = {};
  bool missed() const { return !applied && !analysis; }
  std::string ToString() const;  // "pass: location: [applied|missed|analysis] message"
};

// Options given on the command line as `--name=value` (e.g. windowed-einsum-threshold-mib=0).
// Passes read the ones they know; values are strings. Every lookup (Has, Get*) marks the key
// as read, so that a tool can report the keys no pass looked at (Unread) as unknown options.
class PassOptions {
 public:
  void Set(const std::string& key, const std::string& value) { values_[key] = value; }
  bool Has(std::string_view key) const {
    MarkRead(key);
    return values_.count(std::string(key)) > 0;
  }
  std::string GetString(std::string_view key, std::string def) const;
  // Parse errors are reported as InvalidArgument naming the option.
  absl::StatusOr<int64_t> GetInt(std::string_view key, int64_t def) const;
  absl::StatusOr<double> GetDouble(std::string_view key, double def) const;
  absl::StatusOr<bool> GetBool(std::string_view key, bool def) const;  // true/false/1/0
  const std::map<std::string, std::string>& values() const { return values_; }
  // The keys that were Set but never looked up (by Has or Get*), in sorted order.
  std::vector<std::string> Unread() const;
  // Every key looked up so far, set or not (with a fresh PassOptions given to a factory: the
  // option names that pass knows).
  const std::set<std::string>& looked_up() const { return read_; }

 private:
  void MarkRead(std::string_view key) const { read_.insert(std::string(key)); }
  std::map<std::string, std::string> values_;
  mutable std::set<std::string> read_;  // keys looked up so far
};

class HloPass {
 public:
  virtual ~HloPass() = default;
  virtual std::string_view name() const = 0;
  // Rewrites the module in place; returns whether it changed. On error the module may be
  // partly rewritten: callers that need atomicity run on a clone.
  virtual absl::StatusOr<bool> Run(HloModule* module) = 0;

  // Remarks go here when set (may be null: then they are dropped).
  void set_remarks(std::vector<Remark>* sink) { remarks_ = sink; }
  // The cost gate (passes/cost_oracle.h), or null: then the pass applies every match it finds
  // (subject to its own options). Passes that rewrite by cost consult it per candidate. A
  // pipeline gives it to each of its passes.
  virtual void set_cost_oracle(CostOracle* oracle) { cost_oracle_ = oracle; }
  CostOracle* cost_oracle() const { return cost_oracle_; }

 protected:
  void AddRemark(std::string location, bool applied, std::string message) {
    Push(std::move(location), applied, std::move(message), false, {});
  }
  // The same, naming what the decision is about (Remark::about).
  void AddRemark(std::string location, bool applied, std::string message,
                 std::vector<std::string> about) {
    Push(std::move(location), applied, std::move(message), false, std::move(about));
  }
  // An analysis remark (see Remark::analysis).
  void AddAnalysisRemark(std::string location, std::string message) {
    Push(std::move(location), false, std::move(message), true, {});
  }
  void Push(std::string location, bool applied, std::string message, bool analysis,
            std::vector<std::string> about) {
    if (remarks_ == nullptr) return;
    Remark r;
    r.pass = std::string(name());
    r.location = std::move(location);
    r.applied = applied;
    r.message = std::move(message);
    r.analysis = analysis;
    r.about = std::move(about);
    remarks_->push_back(std::move(r));
  }
  std::vector<Remark>* remarks_ = nullptr;
  CostOracle* cost_oracle_ = nullptr;
};

// Name -> factory. Each pass file registers itself with WEAVE_REGISTER_PASS in its .cc.
using PassFactory =
    std::function<absl::StatusOr<std::unique_ptr<HloPass>>(const PassOptions& options)>;
class PassRegistry {
 public:
  static PassRegistry& Get();
  void Register(std::string name, PassFactory factory);
  // NotFound error listing the known passes if `name` is unknown.
  absl::StatusOr<std::unique_ptr<HloPass>> Create(std::string_view name,
                                                  const PassOptions& options) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, PassFactory, std::less<>> factories_;
};

struct PassRegistration {
  PassRegistration(std::string name, PassFactory f) {
    PassRegistry::Get().Register(std::move(name), std::move(f));
  }
};
#define WEAVE_REGISTER_PASS_CONCAT2(a, b) a##b
#define WEAVE_REGISTER_PASS_CONCAT(a, b) WEAVE_REGISTER_PASS_CONCAT2(a, b)
// Usage (in a .cc): WEAVE_REGISTER_PASS("dce", [](const PassOptions&) -> ... { ... });
#define WEAVE_REGISTER_PASS(name, factory)                                              \
  static ::weave::PassRegistration WEAVE_REGISTER_PASS_CONCAT(weave_pass_reg_, __LINE__)( \
      name, factory)

// One pass's run in a pipeline: its name, its time (seconds) and whether it changed the module.
struct PassTiming {
  std::string pass;
  double seconds = 0;
  bool changed = false;
};
// What a caller observes around each pass of a pipeline (the compile driver's per-pass record,
// its -v line and --timing): `before` runs just before a pass, `after` just after one that
// succeeded (before verify_each checks it), with its timing. Either may be empty.
struct PassHooks {
  std::function<void(const HloPass& pass, const HloModule& module)> before;
  std::function<void(const HloPass& pass, const HloModule& module, const PassTiming& timing)> after;
};

// Runs passes in order, and is itself a pass (as XLA's HloPassPipeline is an HloPassInterface):
// a pipeline can be added to another, and every tool runs one the same way. Run gives each pass
// the pipeline's remark sink (HloPass::set_remarks) and calls the hooks around it; the result is
// whether any pass changed the module. A pass's error is returned with its code and the message
// "pass <name>: <message>"; with verify_each, a verifier error after a pass is returned as
// "verifier failed after pass <name>: <message>". The module may then be partly rewritten.
class HloPassPipeline : public HloPass {
 public:
  explicit HloPassPipeline(std::string name = "pipeline") : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  void AddPass(std::unique_ptr<HloPass> pass) {
    if (cost_oracle_ != nullptr) pass->set_cost_oracle(cost_oracle_);
    passes_.push_back(std::move(pass));
  }
  void set_verify_each(bool v) { verify_each_ = v; }
  void set_hooks(PassHooks hooks) { hooks_ = std::move(hooks); }
  // Gives every pass, those added so far and those added later, the cost gate (a pass added
  // later keeps its own when this is null).
  void set_cost_oracle(CostOracle* oracle) override {
    cost_oracle_ = oracle;
    for (const std::unique_ptr<HloPass>& p : passes_) p->set_cost_oracle(oracle);
  }
  absl::StatusOr<bool> Run(HloModule* module) override { return Run(module, nullptr); }
  // The same, appending each pass's (name, seconds, changed) to `timings` when it is not null.
  absl::StatusOr<bool> Run(HloModule* module, std::vector<PassTiming>* timings);
  // Creates the passes named in `names` (a comma-separated list like "dce,cse"; empty entries
  // and surrounding spaces are ignored) from the registry with `options` and appends them.
  // NotFound (listing the known passes) for an unknown name; factory errors are passed on.
  absl::Status AddPassesByName(std::string_view names, const PassOptions& options);
  int64_t pass_count() const { return static_cast<int64_t>(passes_.size()); }
  // The names of the passes, in order.
  std::vector<std::string> pass_names() const;

 private:
  std::string name_;
  std::vector<std::unique_ptr<HloPass>> passes_;
  bool verify_each_ = false;
  PassHooks hooks_;
};

}  // namespace weave
