// Weave's HLO IR: modules, computations and instructions, modelled on XLA's HloModule,
// HloComputation and HloInstruction. Attribute names and meanings are XLA's
// (../shared/specs/hlo-text-format.md §4).
//
// Ownership: a module owns its computations, a computation owns its instructions. Instructions
// refer to operands and called computations by raw pointer. Users are maintained automatically
// by the mutation API (AddInstruction, ReplaceOperandWith, ReplaceAllUsesWith, Remove...).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hlo/boxed.h"
#include "hlo/opcodes.h"
#include "hlo/sharding.h"
#include "hlo/types.h"

namespace weave {

class HloComputation;
class HloModule;

class HloInstruction;

// An instruction's list of operands, users or control edges. These lists say where the
// instruction sits in a graph, not what it computes, so a copied instruction starts with all of
// them empty (whoever places the copy sets its operands; users and control edges follow from
// that), and a cloned instruction costs no copies of lists it would drop. Only that copy can copy
// a list (the copy constructor is private to HloInstruction): anywhere else, copying one does not
// compile, so no code can take an empty copy for the contents. Read it through
// `const std::vector<HloInstruction*>&`, which copies as a vector does.
class EdgeList : public std::vector<HloInstruction*> {
 public:
  EdgeList() = default;
  explicit EdgeList(std::vector<HloInstruction*>&& v) : std::vector<HloInstruction*>(std::move(v)) {}
  EdgeList(EdgeList&&) = default;
  EdgeList& operator=(const EdgeList&) = delete;
  EdgeList& operator=(EdgeList&&) = default;
  EdgeList& operator=(std::vector<HloInstruction*>&& v) {
    std::vector<HloInstruction*>::operator=(std::move(v));
    return *this;
  }

 private:
  friend class HloInstruction;  // its implicit copy constructor: the copy's lists start empty
  EdgeList(const EdgeList&) : std::vector<HloInstruction*>() {}
};

// dot / ragged-dot dimension numbers (XLA DotDimensionNumbers).
struct DotDims {
  std::vector<int64_t> lhs_batch, lhs_contracting, rhs_batch, rhs_contracting;
  bool operator==(const DotDims& o) const {
    return lhs_batch == o.lhs_batch && lhs_contracting == o.lhs_contracting &&
           rhs_batch == o.rhs_batch && rhs_contracting == o.rhs_contracting;
  }
};

// One dimension of a `slice={[start:limit:stride], ...}` attribute.
struct SliceDim {
  int64_t start = 0, limit = 0, stride = 1;
  bool operator==(const SliceDim&) const = default;
};

// One dimension of a `padding=lo_hi[_interior]x...` attribute (values may be negative).
struct PadDim {
  int64_t lo = 0, hi = 0, interior = 0;
  bool operator==(const PadDim&) const = default;
};

// A literal value for `constant`. Values are stored flat in row-major (logical) order:
// floating-point and pred values in `f` (exact for every type up to f32 and for f64),
// integers in `i` (exact for s64; u64 stored bit-cast). Exactly one of f / i is used, chosen by
// the element type (pred uses i with 0/1). Complex values store (re, im) pairs in `f`.
// `elided` marks a dumped `{...}` constant: its values are unknown (not value-exact), f/i empty.
struct Literal {
  Shape shape;
  std::vector<double> f;
  std::vector<int64_t> i;
  bool elided = false;
  // Text of the literal as written (without `constant(`/`)`), kept so that printing a parsed
  // constant reproduces it; empty for constants built by passes (the printer formats values).
  std::string text;

  static Literal Scalar(PrimitiveType t, double v);
  static Literal ScalarInt(PrimitiveType t, int64_t v);
  static Literal Vector(PrimitiveType t, const std::vector<int64_t>& values);
  // Value of element `index` (flat row-major) as double / int64 regardless of storage.
  double GetAsDouble(int64_t index) const;
  int64_t GetAsInt(int64_t index) const;
  bool IsScalar() const { return shape.dims.empty(); }
};

// collective-permute `source_target_pairs`: (source, target) partition pairs, in order.
using SourceTargetPairs = std::vector<std::pair<int64_t, int64_t>>;
// Attributes the IR does not model, in their original order: (name, value text).
using RawAttributes = std::vector<std::pair<std::string, std::string>>;

// Comparison direction of `compare` (XLA ComparisonDirection).
enum class ComparisonDirection { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view ComparisonDirectionString(ComparisonDirection d);  // "EQ", "NE", ...

// One instruction. Typed attribute fields hold what Weave understands; anything else is kept in
// `raw_attributes` and printed back unchanged.
class HloInstruction {
  // The fields every walk reads come first, in two cache lines (an instruction is ~1 KiB, and a
  // pass over a module larger than the cache pays a miss per line it touches): a post-order walk
  // reads only the first line (parent_, slot_, operands_, control_preds_); the second holds the
  // opcode, the id and the users. Declared before the attributes for that reason alone.
  HloComputation* parent_ = nullptr;
  int64_t slot_ = -1;  // index in the parent's instruction list (HloComputation::instrs_)
  EdgeList operands_;
  EdgeList control_preds_;
  HloOpcode opcode_ = HloOpcode::kTuple;
  int64_t unique_id_ = -1;
  EdgeList users_;
  EdgeList control_succs_;
  std::vector<HloComputation*> called_;
  Shape shape_;
  std::string name_;

 public:
  // ---- identity ----
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  HloOpcode opcode() const { return opcode_; }
  const Shape& shape() const { return shape_; }
  Shape* mutable_shape() { return &shape_; }
  void set_shape(Shape s) { shape_ = std::move(s); }
  HloComputation* parent() const { return parent_; }

  // ---- operands, users ----
  const std::vector<HloInstruction*>& operands() const { return operands_; }
  HloInstruction* operand(int64_t i) const { return operands_.at(static_cast<size_t>(i)); }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  // Users in the order they were added (each user once even if it uses this value twice).
  const std::vector<HloInstruction*>& users() const { return users_; }
  int64_t user_count() const { return static_cast<int64_t>(users_.size()); }
  bool IsRoot() const;
  // Replaces operand i by `v` (updating user lists).
  absl::Status ReplaceOperandWith(int64_t i, HloInstruction* v);
  // Replaces every use of this instruction (operands of users, and the computation root) by
  // `v`. Shapes may differ (the caller keeps the module consistent). Fails if v == this.
  absl::Status ReplaceAllUsesWith(HloInstruction* v);
  // Same, restricted to the given users.
  absl::Status ReplaceUsesWith(const std::vector<HloInstruction*>& users, HloInstruction* v);
  // Appends an operand (tuple, custom-call, ...).
  void AppendOperand(HloInstruction* v);

  // ---- called computations ----
  // In XLA's order: while = {condition, body}; conditional = {true, false} or branches; call,
  // fusion, reduce, all-reduce, map, sort, scatter, async-start = {callee}; select-and-scatter =
  // {select, scatter}; custom-call = called_computations.
  const std::vector<HloComputation*>& called_computations() const { return called_; }
  std::vector<HloComputation*>* mutable_called_computations() { return &called_; }
  HloComputation* while_condition() const { return called_.at(0); }
  HloComputation* while_body() const { return called_.at(1); }
  HloComputation* to_apply() const { return called_.at(0); }
  // For conditional: true if written with true_computation/false_computation (pred selector).
  bool conditional_is_pred = false;

  // ---- typed attributes ----
  int64_t parameter_number = -1;          // parameter
  int64_t tuple_index = -1;               // get-tuple-element `index=`
  int64_t iota_dimension = -1;            // iota
  std::vector<int64_t> dimensions;        // broadcast/transpose/reverse/concatenate/reduce/map/
                                          // sort/all-gather/reduce-scatter/all-to-all `dimensions=`
  // The parser read `dimensions=` (so an empty list of an opcode that does not always print one,
  // such as all-to-all, prints back). Passes leave it alone: the printer decides from the opcode.
  bool has_dimensions_attr = false;
  std::optional<ComparisonDirection> comparison_direction;  // compare `direction=`
  Boxed<Literal> literal;                 // constant

  // ---- attributes few opcodes carry ----
  // Each reads as empty when absent and is kept on the heap only when set (an instruction holds
  // one pointer per attribute, 8 bytes, instead of 24-96): read with name(), change with
  // mutable_name() or set_name(). A present value is assigned in place (a reference to it stays
  // valid, as to a plain field); setting an absent one to empty allocates nothing.
#define WEAVE_RARE_ATTRIBUTE(Type, name)                        \
  const Type& name() const { return name##_.value_or_empty(); } \
  Type* mutable_##name() { return &name##_.ensure(); }          \
  void set_##name(Type v) {                                     \
    if (name##_) {                                              \
      *name##_ = std::move(v);                                  \
    } else if (!(v == Type{})) {                                \
      name##_ = std::move(v);                                   \
    }                                                           \
  }
  WEAVE_RARE_ATTRIBUTE(DotDims, dot_dims)                         // dot, ragged-dot
  // dot/convolution `operand_precision={..}`
  WEAVE_RARE_ATTRIBUTE(std::vector<std::string>, operand_precision)
  WEAVE_RARE_ATTRIBUTE(std::vector<SliceDim>, slice)              // slice
  WEAVE_RARE_ATTRIBUTE(std::vector<int64_t>, dynamic_slice_sizes)  // dynamic-slice
  WEAVE_RARE_ATTRIBUTE(std::vector<PadDim>, padding)              // pad
  // compare `type=` (raw, e.g. "TOTALORDER"), may be empty
  WEAVE_RARE_ATTRIBUTE(std::string, comparison_type)
  WEAVE_RARE_ATTRIBUTE(std::string, custom_call_target)           // custom-call
  WEAVE_RARE_ATTRIBUTE(std::string, fusion_kind)                  // fusion `kind=` (e.g. "kLoop")
  // collective-permute `source_target_pairs={{s,t},...}`
  WEAVE_RARE_ATTRIBUTE(SourceTargetPairs, source_target_pairs)
  // Sugared async form: for `reduce-scatter-start` etc. the wrapped opcode name
  // ("reduce-scatter"); printed back as `<name>-start/-update/-done`.
  WEAVE_RARE_ATTRIBUTE(std::string, async_sugar)
  // Attributes Weave does not model, in their original order: (name, value text).
  WEAVE_RARE_ATTRIBUTE(RawAttributes, raw_attributes)
#undef WEAVE_RARE_ATTRIBUTE

  int64_t exponent_bits = -1, mantissa_bits = -1;  // reduce-precision
  // Collectives.
  std::optional<int64_t> channel_id;
  Boxed<ReplicaGroups> replica_groups;
  bool use_global_device_ids = false;
  bool constrain_layout = false;
  // Common attributes.
  Boxed<HloSharding> sharding;
  // `backend_config=` value verbatim (JSON object text for GPU configs, may be empty).
  std::string backend_config;
  // `frontend_attributes={k="v",...}`: keys sorted as XLA prints them; values are the printed
  // value text (quoted string or raw `{...}` blob), kept verbatim.
  std::map<std::string, std::string> frontend_attributes;
  std::string metadata;                   // `metadata={...}` inner text verbatim (without braces)
  // ---- control dependencies (XLA's control_predecessors()/control_successors()) ----
  // This instruction runs after each of its control predecessors. Both directions are kept, in
  // the order the edges were added (the printer writes `control-predecessors={..}` in that
  // order), so removing an instruction costs its edges, not its computation. Change them only
  // through the calls below. Edges join instructions of one computation.
  const std::vector<HloInstruction*>& control_predecessors() const { return control_preds_; }
  const std::vector<HloInstruction*>& control_successors() const { return control_succs_; }
  // Makes `successor` wait for this instruction (XLA's AddControlDependencyTo). A repeated edge
  // is kept as written (the parser reproduces the text).
  void AddControlDependencyTo(HloInstruction* successor);
  // Removes every edge this -> successor (XLA's RemoveControlDependencyTo); no-op if none.
  void RemoveControlDependencyTo(HloInstruction* successor);
  // Removes every control edge into and out of this instruction (XLA's DropAllControlDeps).
  void DropAllControlDeps();
  // Every edge old -> this becomes v -> this (same position in the list). No-op without one.
  void ReplaceControlPredecessor(HloInstruction* old, HloInstruction* v);

  // Frontend attribute helpers; value text is stored quoted (`"v"`), Get returns it unquoted.
  std::optional<std::string> GetFrontendAttribute(std::string_view key) const;
  void SetFrontendAttribute(const std::string& key, const std::string& unquoted_value);
  // Raw attribute lookup (nullptr if absent).
  const std::string* GetRawAttribute(std::string_view key) const;
  // Replaces the raw attribute `key`'s text (`feature_group_count` -> "4"), or appends it.
  void SetRawAttribute(std::string_view key, std::string value);

  // ---- convenience ----
  // Operand index of `v` (first occurrence) or -1.
  int64_t OperandIndex(const HloInstruction* v) const;
  // Deep copy of this instruction's attributes with new operands and shape, not yet in any
  // computation (no users, no control edges): add it with HloComputation::AddInstruction.
  // `shape` is taken by value: a temporary or moved shape is moved in, not copied.
  std::unique_ptr<HloInstruction> CloneWithNewOperands(Shape shape,
                                                       std::vector<HloInstruction*> operands,
                                                       std::string_view name_suffix = "") const;
  // One-line XLA text of this instruction (as the printer writes it, without indentation).
  std::string ToString() const;

  // True for instructions that must run even when nobody reads their result: send/recv and their
  // -done forms, infeed/outfeed, rng, after-all, parameters, and custom calls marked
  // `custom_call_has_side_effect=true` (XLA's HloInstruction::HasSideEffectNoRecurse).
  bool HasSideEffect() const;
  // The conservative test rewrites use before deleting an instruction nobody reads: not
  // HasSideEffect(), and not an instruction whose effect this IR does not inspect: any custom
  // call, while, conditional, call, rng-bit-generator, add-dependency, optimization-barrier.
  bool IsRemovableWhenUnused() const;

  // Unique id within the module (assigned at creation, never reused). Useful for stable maps.
  int64_t unique_id() const { return unique_id_; }

  // Factory: a new free-standing instruction (add it to a computation with AddInstruction).
  // `shape` is taken by value: a temporary or moved shape is moved in, not copied.
  static std::unique_ptr<HloInstruction> Create(HloOpcode op, Shape shape,
                                                std::vector<HloInstruction*> operands = {});

 private:
  friend class HloComputation;
  friend class HloModule;
  void AddUser(HloInstruction* u);
  void RemoveUser(HloInstruction* u);
  // Drops c's kept post order (null: nothing); every change of operands or control edges calls it.
  static void Invalidate(HloComputation* c);
  Boxed<DotDims> dot_dims_;
  Boxed<std::vector<std::string>> operand_precision_;
  Boxed<std::vector<SliceDim>> slice_;
  Boxed<std::vector<int64_t>> dynamic_slice_sizes_;
  Boxed<std::vector<PadDim>> padding_;
  Boxed<std::string> comparison_type_, custom_call_target_, fusion_kind_;
  Boxed<SourceTargetPairs> source_target_pairs_;
  Boxed<std::string> async_sugar_;
  Boxed<RawAttributes> raw_attributes_;
};

// A computation: an ordered list of instructions (the order they were parsed/added; printing
// uses a post order consistent with it), a root, and parameters by number.
class HloComputation {
 public:
  explicit HloComputation(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  // Renames; the module's name index follows (AddComputation's uniquing stays O(1)).
  void set_name(std::string n);
  HloModule* parent() const { return parent_; }
  bool IsEntry() const;

  HloInstruction* root() const { return root_; }
  // Makes `r` the root. The sharding of the root it replaces describes the computation's result
  // (for the entry, the module's output: what --verify-numerics reassembles by); `r` takes it
  // when it has none of its own and the same shape, as XLA's ReplaceInstruction keeps a replaced
  // instruction's sharding (not an outfeed's, which describes its data, not its token).
  void set_root(HloInstruction* r);
  // Parameters indexed by parameter_number.
  const std::vector<HloInstruction*>& parameters() const { return params_; }
  HloInstruction* parameter(int64_t i) const { return params_.at(static_cast<size_t>(i)); }
  int64_t num_parameters() const { return static_cast<int64_t>(params_.size()); }

  // Instructions in their current order.
  std::vector<HloInstruction*> instructions() const;
  int64_t instruction_count() const { return live_count_; }
  // True when `h` is one of this computation's instructions (O(1): its slot in the list is
  // checked, not just its parent pointer).
  bool Holds(const HloInstruction* h) const;
  // Operands before users; instructions not reachable from the root come too, in order.
  // The order is kept between calls (O(instructions) to copy) until the computation's graph
  // changes: any change of an instruction's operands or control edges, or a removal, drops it;
  // AddInstruction appends to it when nothing reads the new instruction yet (its operands are
  // placed already, so a fresh walk gives the kept order plus the new instruction), and drops it
  // otherwise. The result is always exactly the order a fresh walk would give. Not safe to call
  // concurrently on one computation.
  std::vector<HloInstruction*> MakeInstructionPostOrder() const;
  // Looks an instruction up by name (nullptr if absent).
  HloInstruction* GetInstruction(std::string_view name) const;

  // Takes ownership; gives the instruction a module-unique name derived from its current name
  // (or from the opcode if empty), registers it as a user of its operands, and, for parameters,
  // in the parameter list. Returns the raw pointer.
  HloInstruction* AddInstruction(std::unique_ptr<HloInstruction> instr);
  // Convenience: Create + AddInstruction (a temporary or moved `shape` is moved in).
  HloInstruction* AddInstruction(HloOpcode op, Shape shape,
                                 std::vector<HloInstruction*> operands = {},
                                 std::string_view name = "");
  // Removes an instruction with no users that is not the root (fails otherwise), with its
  // control edges. O(its operands and control edges), amortized: the list keeps a hole that a
  // later compaction closes, so the order of the others does not change.
  absl::Status RemoveInstruction(HloInstruction* instr);
  // Removes instructions without users (except the root, parameters and side-effecting ones:
  // collectives with no users are still removed, send/recv/outfeed/custom-call with side effects
  // are kept), transitively. Returns whether anything was removed.
  bool RemoveDeadCode();
  // Removes each of `seeds` that has no users, is not the root, belongs to this computation and
  // satisfies `removable`, then, transitively, its operands that thereby lost their last user
  // (XLA's RemoveInstructionAndUnusedOperands, for several seeds). Targeted: the cost is the
  // removed chains, not the computation. A seed may be freed by an earlier seed's chain; it is
  // then skipped. Errors only from RemoveInstruction (an inconsistent IR).
  absl::Status RemoveUnusedChains(const std::vector<HloInstruction*>& seeds,
                                  const std::function<bool(const HloInstruction*)>& removable);
  // Replaces `old` by `replacement` everywhere and removes `old` (and its dead operands).
  absl::Status ReplaceInstruction(HloInstruction* old, HloInstruction* replacement);
  // Parameter shape changes: set the parameter's shape (users are not updated).
  // For while conditions/bodies after the loop tuple changed.

  std::string execution_thread;  // `, execution_thread="..."` after the closing brace, raw value
  std::string ToString() const;

  // Parameter from the signature when the computation is being built by hand: appends a
  // parameter instruction with the next parameter number.
  HloInstruction* AddParameter(Shape shape, std::string_view name);

 private:
  friend class HloModule;
  friend class HloInstruction;
  std::string name_;
  HloModule* parent_ = nullptr;
  // Instructions in order; a removed one leaves a null slot until Compact() (every loop over
  // instrs_ skips nulls). Each instruction knows its slot, so removal finds it in O(1).
  std::vector<std::unique_ptr<HloInstruction>> instrs_;
  int64_t live_count_ = 0;
  std::vector<HloInstruction*> params_;
  HloInstruction* root_ = nullptr;
  // MakeInstructionPostOrder's kept result, valid while post_order_valid_.
  mutable std::vector<HloInstruction*> post_order_;
  mutable bool post_order_valid_ = false;
  // Drops the kept post order (every graph change of this computation calls it).
  void InvalidatePostOrder() {
    post_order_valid_ = false;
    post_order_.clear();
  }
  // Frees `instr` (already detached from operands, users and control edges) and leaves a hole;
  // compacts once holes outnumber live instructions (amortized O(1) per removal).
  void FreeSlot(HloInstruction* instr);
  void Compact();
};

// A module: computations (callees before callers, entry last when printed), header attributes.
class HloModule {
 public:
  explicit HloModule(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  HloComputation* entry() const { return entry_; }
  void set_entry(HloComputation* c) { entry_ = c; }
  // Computations in their current order.
  std::vector<HloComputation*> computations() const;
  // Callees before callers (the order the printer uses); unreachable computations kept.
  std::vector<HloComputation*> MakeComputationPostOrder() const;
  HloComputation* GetComputation(std::string_view name) const;
  // Takes ownership; renames to a unique name if needed.
  HloComputation* AddComputation(std::unique_ptr<HloComputation> c);
  // Deep-copies a computation (and, recursively, the computations it calls are shared, not
  // copied) under a fresh name derived from `name_hint`.
  HloComputation* CloneComputation(const HloComputation* c, std::string_view name_hint);
  // Removes computations not reachable from the entry. Returns whether any were removed.
  bool RemoveUnusedComputations();
  absl::Status RemoveComputation(HloComputation* c);

  // Header attributes.
  int64_t num_partitions = 1;
  int64_t replica_count = 1;
  bool has_num_partitions = false;  // num_partitions= was written (printer writes it if != 1)
  bool is_scheduled = false;
  // Raw header attributes other than the modelled ones, in order (e.g. input_output_alias,
  // entry_computation_layout, frontend_attributes): (name, value text).
  std::vector<std::pair<std::string, std::string>> header_attributes;
  // FileNames/FunctionNames/FileLocations/StackFrames block verbatim (may be empty).
  std::string stack_tables;
  // Recomputes `entry_computation_layout` from the entry's parameters and root shape, if the
  // header had one (call after changing the entry signature).
  void UpdateEntryComputationLayout();

  // Module-unique names: returns `base` if unused, else base.N.
  std::string UniqueName(std::string_view base);
  // The same in place: `*name` is kept when unused (no copy), else becomes name.N.
  void UniquifyName(std::string* name);
  // Registers a name as used (parser).
  void ReserveName(const std::string& name);
  // Room for `more` names beyond those used now (speed only: a pass about to add that many
  // instructions spares the name table its regrowths).
  void ReserveNames(size_t more);
  int64_t NextUniqueId() { return next_id_++; }
  // Largest channel_id in the module + 1 (for new collectives).
  int64_t NextChannelId() const;

  // Text in XLA's format.
  std::string ToString() const;

  // Deep copy of the whole module.
  std::unique_ptr<HloModule> Clone() const;

 private:
  friend class HloComputation;
  std::string name_;
  std::vector<std::unique_ptr<HloComputation>> comps_;
  HloComputation* entry_ = nullptr;
  absl::flat_hash_map<std::string, int64_t> names_;  // base name -> next suffix (hashed: O(1))
  // Computation name -> how many computations carry it (the parser may briefly hold two), so that
  // AddComputation's uniquing is O(1) and not a scan of every computation.
  absl::flat_hash_map<std::string, int64_t> comp_names_;
  // Base name -> the least suffix k that may be free: every `base.j` with 1 <= j < k is taken
  // (lowered when such a name is freed), so AddComputation's k-th "body" probes from there
  // instead of from 1 (the same name as the probe from 1 gives, in time linear overall).
  absl::flat_hash_map<std::string, int64_t> comp_suffix_;
  void NoteComputationName(const std::string& name, int64_t delta);
  int64_t next_id_ = 0;
};

}  // namespace weave
