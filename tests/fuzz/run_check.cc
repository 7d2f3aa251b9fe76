#include "run_check.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "analysis/verifier.h"
#include "hlo/parser.h"
#include "hlo/window.h"

namespace weave::fuzz {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

int64_t Add(int64_t a, int64_t b) { return a > kSaturated - b ? kSaturated : a + b; }
int64_t Mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kSaturated / b ? kSaturated : a * b;
}

// Elements of every array leaf of `s` (tuples summed), saturating.
int64_t Elements(const Shape& s) {
  if (s.IsTuple()) {
    int64_t n = 0;
    for (const Shape& e : s.tuple_shapes) n = Add(n, Elements(e));
    return n;
  }
  if (!s.IsArray()) return 0;
  std::optional<int64_t> n = s.CheckedElementCount();
  return n ? *n : kSaturated;
}

int64_t WindowProduct(const HloInstruction& h, size_t rank) {
  absl::StatusOr<std::vector<WindowDim>> w = ParseWindow(h, rank);
  if (!w.ok()) return kSaturated;
  int64_t p = 1;
  for (const WindowDim& d : *w) p = Mul(p, std::max<int64_t>(1, d.size));
  return p;
}

class Coster {
 public:
  int64_t Of(const HloComputation* c) {
    if (c == nullptr) return 0;
    if (auto it = memo_.find(c); it != memo_.end()) return it->second;
    memo_[c] = kSaturated;  // a computation that reaches itself is never cheap
    int64_t total = 0;
    for (const HloInstruction* h : c->instructions()) {
      total = Add(total, Add(Of(*h), kInterpretedInstructionCost));
    }
    memo_[c] = total;
    return total;
  }

 private:
  int64_t Of(const HloInstruction& h) {
    int64_t io = Elements(h.shape());
    for (const HloInstruction* o : h.operands()) io = Add(io, Elements(o->shape()));
    const int64_t out = Elements(h.shape());
    int64_t callee = 0;
    for (const HloComputation* c : h.called_computations()) callee = std::max(callee, Of(c));
    const HloInstruction* lhs = h.operand_count() > 0 ? h.operand(0) : nullptr;
    switch (h.opcode()) {
      case HloOpcode::kDot: {
        int64_t k = 1;
        for (int64_t d : h.dot_dims().lhs_contracting) {
          if (lhs != nullptr && d >= 0 && d < lhs->shape().rank()) k = Mul(k, lhs->shape().dims[d]);
        }
        return Add(io, Mul(out, k));
      }
      case HloOpcode::kConvolution: {
        const int64_t kernel = h.operand_count() > 1 ? Elements(h.operand(1)->shape()) : 0;
        return Add(io, Mul(out, kernel));
      }
      case HloOpcode::kReduceWindow:
      case HloOpcode::kSelectAndScatter: {
        const int64_t n = lhs != nullptr ? Elements(lhs->shape()) : 0;
        const size_t rank = lhs != nullptr && lhs->shape().IsArray() ? lhs->shape().dims.size() : 0;
        return Add(io, Mul(Mul(std::max(n, out), WindowProduct(h, rank)), Add(1, callee)));
      }
      case HloOpcode::kSort: {
        const int64_t n = lhs != nullptr ? Elements(lhs->shape()) : 0;
        int64_t log = 1;
        while (log < 63 && (int64_t{1} << log) < n) ++log;
        return Add(io, Mul(Mul(n, log), Add(1, callee)));
      }
      case HloOpcode::kWhile:
        return Add(io, Mul(kMaxWhileTrips + 1, callee == kSaturated ? kSaturated : Add(callee, callee)));
      case HloOpcode::kCall:
      case HloOpcode::kConditional:
      case HloOpcode::kFusion:
      case HloOpcode::kAsyncStart:
        return Add(io, callee);
      default:
        // An op applying its computation per element (reduce, map, scatter, all-reduce, ...).
        return callee == 0 ? io : Add(io, Mul(io, callee));
    }
  }

  absl::flat_hash_map<const HloComputation*, int64_t> memo_;
};

}  // namespace

int64_t RunCost(const HloModule& module) {
  Coster coster;
  return coster.Of(module.entry());
}

bool WithinRunBudget(const HloModule& module, const eval::EvalOptions& options) {
  if (module.entry() == nullptr) return false;
  const int64_t n = eval::ResolvedNumPartitions(module, options);
  const int64_t r = eval::ResolvedReplicaCount(module, options);
  if (n < 1 || r < 1 || n > kMaxDevices || r > kMaxDevices || n * r > kMaxDevices) return false;
  if (eval::EstimateMemoryBytes(module, n * r) > options.max_memory_bytes) return false;
  return Mul(RunCost(module), n * r) <= kMaxRunCost;
}

RunStage CheckParseVerifyRun(std::string_view text, bool print) {
  auto m = ParseHloModule(text, "fuzz.hlo");
  if (!m.ok()) return RunStage::kParseError;
  if (!VerifyModule(**m).ok()) return RunStage::kVerifyError;
  eval::EvalOptions options;
  options.max_while_trips = kMaxWhileTrips;
  options.max_memory_bytes = kMaxEvalBytes;
  if (!WithinRunBudget(**m, options)) return RunStage::kOverBudget;
  if (print) std::fprintf(stderr, "--- runs ---\n%s\n", (*m)->ToString().c_str());
  (void)eval::RunModule(**m, options, nullptr);
  return RunStage::kRan;
}

}  // namespace weave::fuzz
