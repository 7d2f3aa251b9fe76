// Weave's reference evaluator: runs an (SPMD-partitioned) HLO module on N simulated partitions
// on the CPU, with XLA's numerics, and compares two modules on identical inputs.
//
// Semantics (XLA's):
//  - The entry computation runs once per partition (partition-id 0..N-1, replica-id 0..R-1; with
//    R > 1 every (replica, partition) pair is one simulated device, device id = replica * N +
//    partition), each on its own thread (inline when there is a single device).
//  - Collectives (all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute,
//    collective-broadcast and their -start/-done forms) meet across devices each time they execute:
//    the rendezvous key is the instruction and its execution count on that device, so a
//    collective inside a while loop meets once per iteration. Group membership follows XLA's
//    CollectiveOpGroupMode: with channel_id and use_global_device_ids the group members are global
//    device ids; with channel_id alone they are partition ids (cross-partition); without
//    channel_id they are replica ids (cross-replica). Empty replica_groups = one group of all.
//  - Devices that cannot meet (different collectives reached, or a device finished while others
//    wait) are detected without timeouts and reported with the instruction each device is at.
//  - Numerics: see numerics.h (bf16/f16 ops compute in f32 and round, FP8 RNE non-saturating);
//    dot accumulates in f32 (f64 when an operand or the result is f64) via OpenBLAS and rounds to
//    the result type; integer ops wrap. Integer division by zero gives -1 for signed and all-ones
//    for unsigned types, x % 0 gives x; INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0. Shifts by an
//    amount >= the bit width (or negative) give 0 (shift-left, shift-right-logical) or the sign
//    fill (shift-right-arithmetic).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eval/value.h"
#include "hlo/ir.h"

namespace weave::eval {

struct EvalOptions {
  // Number of partitions N; <= 0 means the module's num_partitions (1 if absent).
  int64_t num_partitions = 0;
  // Number of replicas R; <= 0 means the module's replica_count.
  int64_t replica_count = 0;
  // Seed of the generated inputs.
  uint64_t seed = 0;
  // Parameters without sharding get the same values on every device (default), as XLA's SPMD
  // partitioner treats an unannotated instruction as replicated; false gives them independent
  // values per device.
  bool replicate_unsharded = true;
  // Refuse modules whose estimated memory (EstimateMemoryBytes) exceeds this many bytes.
  int64_t max_memory_bytes = int64_t{8} << 30;
  // Sums without their narrow roundings: a `reduce` whose reducer is a scalar add, and an
  // all-reduce / reduce-scatter with one, accumulate bf16/f16/FP8 values at f32 (the storage
  // precision) and keep the f32 result instead of rounding it to the result type. Every other op
  // rounds as XLA does. Two programs that compute the same sums in different orders (a global
  // program and its partitioning) then agree to f32 precision, whatever the order: the
  // global-vs-partitioned check's second run for outputs it judges as reassociated sums
  // (global_compare.h). Off (XLA's semantics) by default.
  bool exact_sums = false;
  // A while loop that runs this many iterations without its condition turning false stops the
  // run with ResourceExhausted naming it (never a hang: XLA's test modules hold loops that are
  // never meant to run, such as a counter its body does not advance). 2^20 by default.
  int64_t max_while_trips = int64_t{1} << 20;
};

// Inputs per device: per_device[d][i] is parameter i of the entry on device d
// (d = replica * N + partition).
struct Inputs {
  std::vector<std::vector<ValuePtr>> per_device;
};

// A user-given input (e.g. from `--input`): parameter `parameter` of the entry. With
// `device` == -1 the value is the global (unpartitioned) array of a sharded parameter (each device
// takes its tile), or the per-device value of an unsharded parameter (every device gets it). With
// device >= 0 the value is that device's local value.
struct InputOverride {
  int64_t parameter = 0;
  int64_t device = -1;
  ValuePtr value;
};

// Results: outputs[d] is the entry's result on device d, flattened into array leaves (a tuple
// root yields its leaves in order).
struct EvalResult {
  int64_t num_partitions = 1;
  int64_t replica_count = 1;
  std::vector<std::vector<ValuePtr>> outputs;
  // What each device sent by outfeed, in the order it sent it: the outfeed's name and its data
  // operand (the global-vs-partitioned check compares them, global_compare.h).
  struct Outfeed {
    std::string name;
    ValuePtr data;
  };
  std::vector<std::vector<Outfeed>> outfeeds;
  Inputs inputs;  // the inputs the run used
  // Non-fatal notes, e.g. elided `{...}` constants evaluated as zeros.
  std::vector<std::string> warnings;
};

// Resolved device counts for a module and options (N from options or the module).
int64_t ResolvedNumPartitions(const HloModule& module, const EvalOptions& options);
int64_t ResolvedReplicaCount(const HloModule& module, const EvalOptions& options);

// Estimated peak memory in bytes of running `module` on `num_devices` devices, times the device
// count: the most storage alive at once (evaluator storage: 4 bytes per <=32-bit float, 8 per
// f64/integer/pred), following the evaluator's own plan: a value is freed after its last use
// (unless a tuple holds it), the entry's parameters (the inputs) stay for the whole run, and a
// callee's peak (loop body, branch, called computation) stacks on the caller's live values at the
// call. Tuples and get-tuple-elements share storage and count nothing; other tuple-shaped results
// count their leaves. An op the evaluator answers with its operand's value (copy, optimization-
// barrier, domain, add-dependency, async-update) shares its operand's storage, which is released
// when the last of them is. An all-gather's or all-reduce's result is one value shared by its
// group, so each device counts its share. Entry parameters whose number is true in `shared_parameters` count
// nothing: their storage is held outside the run, once for all devices (the global-vs-partitioned
// check hands every device the global input of a replicated parameter). Used to refuse huge
// modules up front; 2^60 when the sums overflow.
int64_t EstimateMemoryBytes(const HloModule& module, int64_t num_devices,
                            const std::vector<bool>& shared_parameters = {});

// Bytes the evaluator stores for one value of shape `s`: 4 per element of a float type of 32
// bits or fewer, 8 per other element (f64, integers, pred), tuples summed, tokens 0; 2^60 when
// the count overflows int64.
int64_t StorageBytes(const Shape& s);

// Generates inputs from options.seed, respecting parameter shardings: a sharded parameter draws
// one global array (the local shape scaled by the tile counts) and each device gets its tile per
// the tile assignment; `{replicated}` gives equal values everywhere; unsharded parameters are
// equal everywhere too unless replicate_unsharded is false (then independent per device). Floats uniform in [-1, 1) rounded to the
// type, integers in [0, 8) (pred: 0/1 at random). `overrides` replace generated values; errors
// (InvalidArgument) for a wrong parameter index, device, shape or element type;
// ResourceExhausted, naming the instruction, when any value of the module (one array, or one
// element of a tuple) would take over 64 GiB of evaluator storage or its size overflows int64.
absl::StatusOr<Inputs> MakeInputs(const HloModule& module, const EvalOptions& options,
                                  const std::vector<InputOverride>& overrides = {});

// Runs the module on all devices. `given` supplies the inputs (must match the entry parameters
// on every device), otherwise MakeInputs(module, options) is used. Errors: InvalidArgument for
// unsupported opcodes/custom-call targets/types (naming the instruction), mismatched collectives,
// inputs of the wrong shape; ResourceExhausted for modules over max_memory_bytes, for any value
// over the 64 GiB per-value limit (naming the instruction; not lifted by max_memory_bytes), and
// when an allocation fails (std::bad_alloc / std::length_error are caught, never an abort).
absl::StatusOr<EvalResult> RunModule(const HloModule& module, const EvalOptions& options,
                                     const Inputs* given = nullptr);

struct CompareOptions {
  EvalOptions eval;
  // Tolerances; unset = default for the output's element type (DefaultTolerance).
  std::optional<double> rtol, atol;
  // Norm-wise term: an element also passes when |a-b| <= norm_ulps * ulp(max |a|), the output
  // type's ulp at the largest magnitude of that output (module A's, on that device). It allows
  // for the rounding of a different summation order or a fused scale, which grows with the
  // magnitude of the sums, not with each (possibly cancelled, near-zero) element; a per-element
  // rtol cannot. The criterion of normwise error bounds (Higham, "Accuracy and Stability of
  // Numerical Algorithms", ch. 3). Unset = kDefaultNormUlps for float outputs; 0 turns it off.
  // Integer outputs are always compared exactly.
  std::optional<double> norm_ulps;
  // Path-aware tolerance (eval/output_precision.h): judge each float output at the narrowest
  // float type at which its path in module A rounds (its defaults and its ulp), and scale the
  // norm-wise term by the roundings a correct rewrite may reorder (NormUlpsFactor). False judges
  // every output at its own type.
  bool path_aware = true;
};

// Default norm_ulps: 4 ulps of the output type at the output's largest magnitude (bf16: 1.6% to
// 3.1% of max |a|; f32: 2.4e-7 to 4.8e-7 of it).
inline constexpr double kDefaultNormUlps = 4;

// Default (rtol, atol) per element type: f64 1e-9/1e-12, f32 1e-4/1e-5, bf16 2e-2/1e-2,
// f16 5e-3/1e-3, f8e4m3fn 1.25e-1/1.6e-2, f8e5m2 2.5e-1/3.1e-2, integers/pred exact (0/0);
// c64 and c128 as f32 and f64, for each of the real and imaginary parts.
std::pair<double, double> DefaultTolerance(PrimitiveType t);

// The comparison of one output leaf on one device.
struct OutputComparison {
  int64_t output = 0;
  int64_t device = 0;
  std::string shape;   // A's shape text
  double rtol = 0, atol = 0;
  double norm_ulps = 0;      // the norm-wise term (CompareOptions::norm_ulps)
  double max_abs_value = 0;  // max |a| over A's finite elements
  double norm_atol = 0;      // norm_ulps * norm_factor * UlpOf(max_abs_value, judged_as)
                             // + ring_ulps * UlpOf(ring_magnitude, judged_as)
  // Path-aware tolerance: the type the output was judged at (its own, or the narrower type its
  // path rounds to), the multiplier of the norm-wise term, and why, e.g. "judged as bf16:
  // rounded at 'dq' (multiply)" ("" when neither applies).
  PrimitiveType judged_as = PrimitiveType::kInvalid;
  double norm_factor = 1;
  std::string path;
  // The magnitude term: ring_ulps (MagnitudeUlpsFactor) ulps of ring_magnitude, the largest
  // value of the output in the magnitude run (the terms its dots and ring reductions sum; 0
  // when there are none), added to norm_atol.
  double ring_ulps = 0;
  double ring_magnitude = 0;
  // The reassociated-sum allowance (global-vs-partitioned check only, SumReassociationAtol in
  // output_precision.h): the most terms a sum reduce on the path adds, the allowance added to
  // norm_atol, the elements that pass only thanks to it, and the verdict of the exact-sum run
  // that then checks them ("" when it did not run).
  int64_t sum_terms = 0;
  double sum_atol = 0;
  int64_t by_sum_allowance = 0;
  std::string exact_sums;
  double max_abs_error = 0;  // over elements where both are finite
  double max_rel_error = 0;  // |a-b| / max(|a|,|b|) over finite elements with a nonzero value
  int64_t mismatches = 0;    // |a-b| > max(atol + rtol*|a|, norm_atol), or differing NaN/inf
  int64_t nan_diffs = 0;     // elements NaN in one and not the other
  int64_t inf_diffs = 0;     // elements +-inf in one and not equal in the other
  int64_t elements = 0;
  bool pass = true;
};

struct CompareReport {
  int64_t num_partitions = 1;
  int64_t replica_count = 1;
  uint64_t seed = 0;
  std::vector<OutputComparison> outputs;
  bool pass = true;
  std::string ToString() const;   // human-readable table, one line per output and device
  std::string ToJson() const;     // JSON object {"pass":..,"outputs":[...]}
};

// Runs `a` and `b` on identical inputs (generated from a's entry parameters; b must have the same
// parameter count, shapes and element types, otherwise InvalidArgument naming the parameter) and
// compares every output leaf on every device. Errors from either run are returned prefixed with
// "module A:"/"module B:". Output count/shape differences are an error.
absl::StatusOr<CompareReport> CompareModules(const HloModule& a, const HloModule& b,
                                             const CompareOptions& options,
                                             const Inputs* given = nullptr);

// Compares two results already computed on identical inputs (`ra` from module `a`, `rb` from
// `b`), as CompareModules does after running them; lets a caller run `a` once and compare
// several candidates against it (the differential fuzz driver). InvalidArgument when the
// device counts, output counts or output shapes differ.
// `ring_magnitudes` (may be null) is RingMagnitudes(a, ...): the magnitude term of the
// path-aware tolerance.
absl::StatusOr<CompareReport> CompareResults(const HloModule& a, const EvalResult& ra,
                                             const HloModule& b, const EvalResult& rb,
                                             const CompareOptions& options,
                                             const EvalResult* ring_magnitudes = nullptr);

// The outputs of module A's magnitude module (eval/output_precision.h: |operands| at dots,
// FP8 GEMMs and sum collectives) on `inputs`, for the path-aware tolerance; an empty result when
// it is off or A has none of those. Errors from the run are returned prefixed "module A
// (magnitude run):".
absl::StatusOr<EvalResult> RingMagnitudes(const HloModule& a, const EvalOptions& eval,
                                          const Inputs& inputs, const CompareOptions& options);

// One output compared under `options` (tolerances by a's element type when unset): the
// element-wise and norm-wise tests of CompareModules. `output`/`device` are left 0.
OutputComparison CompareOutputValues(const Value& a, const Value& b,
                                     const CompareOptions& options);

}  // namespace weave::eval
