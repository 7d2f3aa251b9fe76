// Path-aware tolerances for comparing two modules (weave compare, compile --verify-numerics):
// the precision at which a program actually computes each of its outputs.
//
// An f32 output may have been computed from values rounded to bf16 along the way (a dot of
// bf16-dequantized FP8 operands with an f32 result, a bf16 reduce-scatter converted to f32).
// Judging it at f32 precision rejects correct rewrites that round less or in another order: an
// FP8 GEMM applies the scales to its f32 accumulator instead of rounding each dequantized
// operand to bf16; a windowed reduce-scatter adds the partial sums in another order. So each
// output is judged at the narrowest float type at which a value on its path (in the module the
// user wrote, module A) is rounded, and its norm-wise term grows with the roundings that a
// correct rewrite may reorder (Higham, "Accuracy and Stability of Numerical Algorithms", ch. 3
// and 4: rounding errors of a sum grow with the number of terms summed at that precision).
//
// The analysis (linear in the module's size) walks A from the parameters:
//  - exact ops keep the precision of their operands: parameters, constants, iota, data movement
//    (broadcast, reshape, transpose, bitcast, copy, slice, dynamic-(update-)slice, concatenate,
//    pad, reverse, gather, select, clamp, maximum, minimum, negate, abs, sign, tuple,
//    get-tuple-element), collectives that move data (all-gather, all-to-all,
//    collective-permute and their async forms), converts to a type at least as precise as the
//    operand's (FP8 -> bf16 is exact);
//  - every other op with a float result rounds to its result type (add, multiply, divide, dot,
//    reduce, a narrowing convert, transcendental ops, custom calls, ...);
//  - instructions calling computations (while, call, conditional, fusion, async-start, map,
//    ...) take every rounding inside their callees as well.
// Per value it keeps the narrowest rounding type T on the path, the number of roundings at T on
// the longest such path, the largest collective reduction group at T (an all-reduce or
// reduce-scatter of G partitions rounds G-1 partial sums, in an order a ring may change), and
// the largest contraction length K of a dot that rounds at T.
//
// The tolerance built from it (eval::CompareResults): an element passes when
//   |a - b| <= atol + rtol |a|                                  (defaults of type T), or
//   |a - b| <= U * chain * ulp_T(max |A|) + mag * ulp_T(M)
// where U is the norm-wise ulps (default 4), chain = NormUlpsFactor, mag = MagnitudeUlpsFactor
// and M the output's largest value in the magnitude module below: K-aware (a dot's rounding
// differences scale with sum |x||w| over its K terms, which cancellation can make far larger
// than the result) and ring-aware (a ring reduction or an accumulating loop adds partials in
// another order: their sum of magnitudes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "hlo/ir.h"

namespace weave::eval {

struct PathPrecision {
  // Narrowest float type at which a value on the path is rounded; kInvalid when nothing on the
  // path rounds (the output is exact data movement of the inputs).
  PrimitiveType type = PrimitiveType::kInvalid;
  int64_t roundings = 0;  // roundings at `type` on the longest path
  int64_t ring = 1;       // largest group of a collective reduction at `type` (1: none)
  int64_t k = 0;          // largest contraction length of a dot or convolution rounding at `type`
  int64_t sum_terms = 0;  // most terms one element of a sum `reduce` rounding at `type` adds
  std::string where;      // the first instruction found rounding at `type`, e.g. "'dq' (multiply)"
};

// The path precision of every output leaf of `module`'s entry, in the order the evaluator
// flattens the result (a tuple root yields its leaves in order). `num_partitions` is the group
// size of collectives with empty replica_groups.
std::vector<PathPrecision> OutputPathPrecisions(const HloModule& module, int64_t num_partitions);

// The multiplier of the norm-wise term for a path: the roundings a correct rewrite may
// reorder or drop along a chain. 1 for at most 3 roundings; longer chains add a third of their
// count. (Sums and ring reductions have their own term: MagnitudeUlpsFactor.)
double NormUlpsFactor(const PathPrecision& p);

// The magnitude module of `module` (the K-aware term): a clone in which every float operand of
// a dot, a convolution, of an FP8 GEMM custom call and of a sum reduction collective (all-reduce,
// reduce-scatter and their async forms) is replaced by its absolute value. Run on the same
// inputs, its outputs bound the magnitudes a correct rewrite's rounding differences scale with:
// sum_k |x_k| |w_k| for a dot of K terms (input rounding skipped by an FP8 GEMM, summation
// order: |x^T y - fl(x^T y)| <= gamma_K |x|^T |y|), and the sum of |partials| for a ring
// reduction or a loop that accumulates partial dots (a recursive sum in another order: (n-1) u
// sum |x_i|) (Higham, "Accuracy and Stability of Numerical Algorithms", §3.1, §4.2). An
// elementwise function with |f'| <= 1 (tanh, logistic, sine, cosine) passes its operand's
// magnitude through (it does not grow the error of a sum it is applied to). nullptr when the
// module has none of the sums.
std::unique_ptr<HloModule> MagnitudeModule(const HloModule& module);

// The magnitude term's multiplier: 1 ulp of the magnitude (covers the 2u |x|.|w| of two rounded
// operands), plus (G + 1) / 2 for a collective reduction of G partitions on the path.
double MagnitudeUlpsFactor(const PathPrecision& p);

// The allowance for a sum whose order a correct partitioning changes: a `reduce` of L terms
// (p.sum_terms) accumulated at p.type, each partial sum rounded (XLA's reduce semantics: the
// partitioned program sums each shard, then all-reduces the shard sums). Two such recursive
// sums of the same terms in different orders differ by at most
//   2 * lambda * sqrt(L) * u * sum |x_i|      (u = 2^-(mantissa bits + 1) of p.type)
// with high probability: Higham and Mary, "A New Approach to Probabilistic Rounding Error
// Analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm. 3.1 (|error| <= lambda sqrt(n) u sum |x_i|
// for each sum, the worst-case bound being n u sum |x_i|). lambda = kSumLambda. `magnitude` is
// sum |x_i|, the output's value in the sum-magnitude run (SumMagnitudeModule, run with exact
// sums). 0 when p holds no sum reduce.
//
// The allowance is wide (at bf16 a sum of 1,000 terms may move by ~0.5 sum |x_i|): a value
// passing only thanks to it is checked again by the global check's exact-sum run
// (EvalOptions::exact_sums), where the same sums agree to f32 and a wrong term shows.
inline constexpr double kSumLambda = 2;
double SumReassociationAtol(const PathPrecision& p, double magnitude);

// A clone of `module` in which the float data operands of every sum `reduce` (add reducer) are
// replaced by their absolute values: run on the same inputs with EvalOptions::exact_sums (a
// narrow sum of |x| would stall), a sum output's value is sum |x_i|. nullptr when the module
// has no sum reduce.
std::unique_ptr<HloModule> SumMagnitudeModule(const HloModule& module);

struct CompareOptions;
struct OutputComparison;
struct Value;
// One output leaf compared as CompareResults does with path-aware tolerance: judged at the
// narrower of its own type and `path.type`, the norm-wise term scaled by NormUlpsFactor(path)
// and, with `ring_magnitude` (the output of MagnitudeModule on the same inputs), the magnitude
// term. With `sum_magnitude` (the global-vs-partitioned check: the output of SumMagnitudeModule
// on the same inputs) and a sum reduce on the path, SumReassociationAtol of its largest value
// joins it too (OutputComparison::sum_atol, said in `path`). Defined in compare.cc; used by the
// global-vs-partitioned check.
OutputComparison CompareOutputValuesOnPath(const Value& a, const Value& b,
                                           const CompareOptions& options,
                                           const PathPrecision& path,
                                           const Value* ring_magnitude = nullptr,
                                           const Value* sum_magnitude = nullptr);

// Mantissa bits (explicit) of float type t: f32 23, bf16 7, f16 10, f8e4m3fn 3, f8e5m2 2, ...;
// -1 for non-float types.
int MantissaBits(PrimitiveType t);

}  // namespace weave::eval
