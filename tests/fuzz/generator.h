// The generator's class (program_gen.h's GenerateProgram), split by job over:
//   program_gen.cc           the program: partition count, motif choice, module; sizes, types,
//                            replica groups, parameter shardings
//   gen_values.cc            operands: scales, dequantizations, leaves, views, epilogues
//   gen_dots.cc              dot plans (which dims are batch, contracting, free)
//   motif_all_gather.cc      all-gather matmul
//   motif_reduce_scatter.cc  matmul reduce-scatter (and all-reduce + dynamic-slice)
//   motif_collectives.cc     all-reduce, all-to-all, collective-permute, dot-merger, elementwise
//   motif_global.cc          global modules with GSPMD / Shardy shardings (GenOptions::kGlobal)
//   motif_xla_loops.cc       windowed einsum loops as XLA's partitioner writes them
// Not part of the generator's interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "choice_source.h"
#include "hlo_text_builder.h"
#include "program_gen.h"
#include "program_gen_internal.h"

namespace weave::fuzz {

// iota(prod(dims)) reshaped to dims, transposed by perm, flattened.
std::vector<int64_t> IotaTransposed(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& perm);

int64_t Product(const std::vector<int64_t>& d);

// ---- dots ----

enum class Role { kContract, kFree, kBatch };
const char* RoleName(Role r);

struct DimClass {
  Role role = Role::kFree;
  int64_t size = 1;
};

// A dot as classes of dims: a batch or contracting class appears on both sides, a free class on
// one side. side[0]/side[1] list the class of each lhs/rhs dim in order.
struct DotPlan {
  std::vector<DimClass> cls;
  std::vector<int> side[2];
  std::vector<int> batch_order;     // batch classes in the order of *_batch_dims
  std::vector<int> contract_order;  // contracting classes in the order of *_contracting_dims

  std::vector<int64_t> Dims(int s) const;
  int64_t Pos(int s, int c) const;  // position of class c on side s, or -1
  // Output dims: batch classes (in batch_order), then lhs free, then rhs free (operand order).
  std::vector<int> OutClasses() const;
  std::vector<int64_t> OutDims() const;
  std::string Attrs() const;  // "lhs_batch_dims={..}, lhs_contracting_dims={..}, ..."
};

class Generator : public MotifContext {
 public:
  Generator(ChoiceSource& c, const GenOptions& o) : c_(c), o_(o) {}

  // MotifContext.
  ChoiceSource& choices() override { return c_; }
  HloTextBuilder& builder() override { return b_; }
  const GenOptions& options() const override { return o_; }
  int64_t num_partitions() const override { return P_; }
  Val Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
              int view_percent, std::string* desc) override {
    return Operand(wide, dims, fp8_percent, view_percent, desc, 0);
  }
  void AddOutput(const Val& v) override { outputs_.push_back(v); }
  void AddMotif(const std::string& line) override { motifs_.push_back(line); }

  GeneratedProgram Run(const std::string& name);

 private:
  // ---- sizes and types (program_gen.cc) ----
  int64_t Size() override;
  int64_t Block() override;
  std::string Wide() override;
  std::string Fp8() { return c_.Weighted({70, 30}) == 0 ? "f8e4m3fn" : "f8e5m2"; }
  // The dot result type for operands of type `wide`.
  std::string ResultType(const std::string& wide) override;
  // A ring size dividing P: P itself most of the time.
  int64_t Ring() override;
  Groups MakeGroups(int64_t n, bool allow_empty, bool allow_channel_only) override;
  std::string CollectiveAttrs(const Groups& g, const std::string& dims_attr);
  // A data parameter's sharding: per-partition data ({manual}, or a tile of a tiled sharding)
  // most of the time.
  std::string ParamSharding(const std::vector<int64_t>& dims);

  // ---- scales, dequantizations, operands, epilogues (gen_values.cc) ----
  Val ScalarScale(const std::string& wide, bool* replicated);
  Val Dequantize(const std::string& wide, const std::vector<int64_t>& dims, std::string* desc);
  Val ModelDequantize(const std::string& wide, const std::vector<int64_t>& dims,
                      std::string* desc);
  Val Leaf(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
           std::string* desc);
  Val Operand(const std::string& wide, const std::vector<int64_t>& dims, int fp8_percent,
              int view_percent, std::string* desc, int depth);
  std::vector<int64_t> ReshapeSource(const std::vector<int64_t>& dims);
  Val ForwardView(const Val& v, int64_t* keep_dim);
  Val Epilogue(Val d) override;

  // ---- dots (gen_dots.cc) ----
  DotPlan PlanAround(const std::vector<int64_t>& x, int side, int64_t forced, Role forced_role,
                     int64_t other_free_limit);
  std::optional<DotPlan> FitAround(const std::vector<int64_t>& x, int side,
                                   const std::vector<int64_t>& y);
  Val Dot(const DotPlan& p, const Val& lhs, const Val& rhs, const std::string& result_type);

  // ---- motifs of partitioned modules ----
  void MotifAllGather();  // motif_all_gather.cc
  Val AllGather(const Val& x, const Groups& g, int64_t gd, const std::vector<int64_t>& global);
  std::string GatheredDot(const Val& xg, int64_t gd, const std::string& wide);
  void MotifReduceScatter();  // motif_reduce_scatter.cc
  Val AllReduceDynamicSlice(const Val& v, const Groups& g, int64_t d, const std::string& red);
  void MotifAllReduce();  // motif_collectives.cc
  void MotifAllToAll();
  void MotifPermute();
  void MotifDotMerger();
  void MotifElementwise();

  // ---- global modules (motif_global.cc) ----
  GeneratedProgram RunGlobal(const std::string& name);
  struct Mesh;
  std::string GlobalSharding(const Mesh& mesh, const std::vector<int64_t>& dims,
                             std::string* desc);
  Val GlobalOperand(const Mesh& mesh, const std::string& wide, const std::vector<int64_t>& dims,
                    std::string* desc);
  void GlobalOutput(const Mesh& mesh, Val v);
  void GlobalMotifDot(const Mesh& mesh);
  void GlobalMotifChain(const Mesh& mesh);
  void GlobalMotifElementwise(const Mesh& mesh);
  void GlobalMotifIndexed(const Mesh& mesh);
  void GlobalMotifReshard(const Mesh& mesh);
  void GlobalMotifConvolution(const Mesh& mesh);
  void GlobalMotifBlockScaled(const Mesh& mesh);

  ChoiceSource& c_;
  const GenOptions& o_;
  HloTextBuilder b_;
  int64_t P_ = 4;
  std::vector<Val> outputs_;
  std::vector<Val> pool_;  // shards that were all-gathered (candidate stationary operands)
  // "FP8 model" motifs: every operand is an FP8 dequantization with a replicated scalar scale
  // and no view in between, as FP8 training programs write them (the handler's FP8 shift and
  // the FP8 GEMM apply).
  bool fp8_model_ = false;
  std::vector<std::string> motifs_;
  // Global mode: Shardy forms (parameters annotated with xla.sdy.sharding over mesh `mesh`).
  bool shardy_ = false;
  // GlobalSharding may tile a dim unevenly (any dim at least as long as its tile count).
  bool uneven_ = false;
  std::string root_sharding_;  // global mode: the root's sharding attribute ("" none)
  // The mesh axes GlobalSharding gave each dim (minor last) and the replicated ones, last call.
  struct AxisChoice {
    std::vector<std::vector<size_t>> dim_axes;
    std::vector<size_t> rep_axes;
  };
  AxisChoice last_axes_;
  // When set, the next GlobalSharding call returns last_axes_ with one axis moved between one
  // dim's tiling and the replicated axes: one dim's tile count changes, every other dim keeps
  // its tiles (the halo reshards, reshard_halo.h), uneven tiles included.
  bool neighbour_ = false;
};

}  // namespace weave::fuzz
