// Building blocks of the windowed einsum loops the decomposer emits
// (../shared/specs/spmd-windowed-einsum.md §2-3, §6): a small instruction factory bound to one
// computation, the ring values every loop body reads (in-group position, N, offset table), block
// offsets, the guarded permute of the rolled layout and the loop condition. Internal to
// src/spmd (windowed_einsum_*.cc); not a public API.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hlo/ir.h"
#include "spmd/partition_ring.h"

namespace weave::windowed_einsum {

inline constexpr char kBodyAg[] = "windowed_dot_general_body_ag";
inline constexpr char kCondAg[] = "windowed_dot_general_cond_ag";
inline constexpr char kBodyRs[] = "windowed_dot_general_body_rs";
inline constexpr char kCondRs[] = "windowed_dot_general_cond_rs";

// `s` with dim `dim` set to `size`.
Shape WithDim(const Shape& s, int64_t dim, int64_t size);

// Small instruction factory bound to one computation. Every method adds one instruction (or a
// few, as documented) to the computation and returns it; names are made module-unique by the IR.
class Emitter {
 public:
  explicit Emitter(HloComputation* c) : c_(c) {}
  HloComputation* comp() const { return c_; }

  HloInstruction* Add(HloOpcode op, const Shape& s, std::vector<HloInstruction*> ops,
                      const std::string& name);
  HloInstruction* Param(const Shape& s, const std::string& name);
  HloInstruction* Gte(HloInstruction* t, int64_t i, const std::string& name);
  HloInstruction* ConstInt(PrimitiveType t, int64_t v, const std::string& name);
  HloInstruction* ConstVec(PrimitiveType t, const std::vector<int64_t>& v, const std::string& name);
  // broadcast(constant 0) of `s`'s type and dims (two instructions).
  HloInstruction* Zeros(const Shape& s, const std::string& name);
  // An elementwise binary op with `a`'s shape.
  HloInstruction* Binary(HloOpcode op, HloInstruction* a, HloInstruction* b,
                         const std::string& name);
  HloInstruction* Permute(HloInstruction* v, std::vector<std::pair<int64_t, int64_t>> pairs,
                          int64_t channel, const std::string& name);
  // reshape(dynamic-slice(table, index, sizes={1})): one element of a rank-1 table as a scalar.
  HloInstruction* TableLookup(HloInstruction* table, HloInstruction* index,
                              const std::string& name);
  HloInstruction* DynamicSlice(HloInstruction* v, std::vector<HloInstruction*> offsets,
                               std::vector<int64_t> sizes, const std::string& name);
  HloInstruction* Dus(HloInstruction* buf, HloInstruction* upd,
                      std::vector<HloInstruction*> offsets, const std::string& name);
  // A dot of `lhs` and `rhs` with `proto`'s dimension numbers, precision, metadata, attributes
  // and layout (not its sharding), its result of element type `t` shaped as XLA infers it
  // (AddDot, hlo/builders.h).
  HloInstruction* DotLike(const HloInstruction& proto, HloInstruction* lhs, HloInstruction* rhs,
                          PrimitiveType t, const std::string& name);
  HloInstruction* Compare(HloInstruction* a, HloInstruction* b, ComparisonDirection dir,
                          const std::string& name);
  HloInstruction* Tuple(std::vector<HloInstruction*> ops, const std::string& name);

 private:
  HloComputation* c_;
};

// A new empty computation named `name` (made unique) added to `m`.
HloComputation* NewComputation(HloModule* m, const std::string& name);

// What every loop body needs: the ring position of this partition, N, the offset table.
struct RingValues {
  HloInstruction* position = nullptr;  // u32 in-group position i
  HloInstruction* n = nullptr;         // u32 N
  HloInstruction* table = nullptr;     // s32[N] {0, b, 2b, ...}
  HloInstruction* zero = nullptr;      // s32 0
  HloInstruction* one = nullptr;       // u32 1
};

// partition-id (or its in-group position via a u32[P] table for other groupings), N, the s32[N]
// offset table {0, block, 2 block, ...}, s32 0 and u32 1.
RingValues EmitRingValues(Emitter& e, const PartitionRing& ring, int64_t block);

// Offset of block (k + i) % N: reshape(dynamic-slice(table, remainder(add(k, i), N))).
HloInstruction* EmitBlockOffset(Emitter& e, const RingValues& v, HloInstruction* k,
                                const std::string& tag);

// Offsets vector of rank `rank` with `off` at `dim` and s32 0 elsewhere.
std::vector<HloInstruction*> OffsetsAt(const RingValues& v, int64_t rank, int64_t dim,
                                       HloInstruction* off);

// `conditional(more, window, window)` whose true branch permutes the window and whose false branch
// (the last iteration) passes it through.
HloInstruction* EmitGuardedPermute(HloModule* m, Emitter& e, HloInstruction* more,
                                   HloInstruction* window,
                                   std::vector<std::pair<int64_t, int64_t>> pairs, int64_t channel,
                                   const std::string& name);

// cond: compare(get-tuple-element(param, 4), u32 trips), direction=LT.
HloComputation* EmitCondition(HloModule* m, const std::string& name, const Shape& tuple_shape,
                              int64_t trips);

// The state both decomposed loops (AG and RS, not the ring) carry, by tuple index: the lhs, the
// rhs, the accumulator, the second accumulator, the u32 step counter, then the carried scales.
enum WindowedLoopStateIndex : int64_t {
  kStateLhs = 0,
  kStateRhs = 1,
  kStateAcc = 2,
  kStateExtraAcc = 3,
  kStateCounter = 4,
  kStateFirstScale = 5,
};

// That state's shape, the scales being `scales` (their initial values).
Shape WindowedLoopStateShape(const HloInstruction* lhs0, const HloInstruction* rhs0,
                             const Shape& acc_shape, const std::vector<HloInstruction*>& scales);

// The while loop over `cond` and `body` in `e`'s computation, started from the tuple
// "windowed_init" of (lhs0, rhs0, zeros of `acc_shape` named `acc_init_name`, zeros named
// "windowed_extra_init", u32 0 named "windowed_k0", then `scales`); `state_shape` is their
// WindowedLoopStateShape. The loop is named "windowed_loop".
HloInstruction* EmitWindowedLoop(Emitter& e, HloInstruction* lhs0, HloInstruction* rhs0,
                                 const Shape& acc_shape, const std::string& acc_init_name,
                                 const std::vector<HloInstruction*>& scales,
                                 const Shape& state_shape, HloComputation* cond,
                                 HloComputation* body);

// What a loop body reads from its parameter "param" of `state_shape`: get-tuple-elements named
// "lhs", "rhs", `acc_name`, "extra" and "k", then one per scale named "<its init's name>.gte".
struct WindowedLoopStateReads {
  HloInstruction* lhs = nullptr;
  HloInstruction* rhs = nullptr;
  HloInstruction* acc = nullptr;
  HloInstruction* extra = nullptr;
  HloInstruction* k = nullptr;
  std::vector<HloInstruction*> scales;
};
WindowedLoopStateReads ReadWindowedLoopState(Emitter& b, const Shape& state_shape,
                                             const std::string& acc_name,
                                             const std::vector<HloInstruction*>& scale_inits);

// True when `c` is add(parameter, parameter) of its two parameters: a sum reducer (the only
// reduction a windowed loop's accumulator can split into partial sums).
bool IsSumComputation(const HloComputation* c);

}  // namespace weave::windowed_einsum
