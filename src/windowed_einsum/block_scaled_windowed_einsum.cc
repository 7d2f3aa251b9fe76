// block-scaled-windowed-einsum (contract in the header).
#include "windowed_einsum/block_scaled_windowed_einsum.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "hlo/block_scaled_call.h"
#include "passes/cost_oracle.h"
#include "spmd/partition_ring.h"
#include "windowed_einsum/windowed_einsum_emitter.h"
#include "hlo/status_macros.h"

namespace weave {
namespace {

using windowed_einsum::EmitBlockOffset;
using windowed_einsum::EmitCondition;
using windowed_einsum::EmitRingValues;
using windowed_einsum::IsSumComputation;
using windowed_einsum::Emitter;
using windowed_einsum::NewComputation;
using windowed_einsum::OffsetsAt;
using windowed_einsum::RingValues;

inline constexpr char kBodyAg[] = "block_scaled_windowed_body_ag";
inline constexpr char kCondAg[] = "block_scaled_windowed_cond_ag";
inline constexpr char kBodyRs[] = "block_scaled_windowed_body_rs";
inline constexpr char kCondRs[] = "block_scaled_windowed_cond_rs";

// A rank-2/3 block-scaled dot with both scales.
bool IsWindowableScaledDot(const HloInstruction& h) {
  if (BlockScaledKindOf(h) != BlockScaledKind::kDot) return false;
  const int64_t n = h.operand_count();
  if (n != 4 && n != 5) return false;
  const int64_t r = h.operand(0)->shape().rank();
  return (r == 2 || r == 3) && h.operand(1)->shape().rank() == r && h.shape().IsArray();
}

// The output dim holding side `s`'s rows (M of the lhs, N of the rhs).
int64_t RowOutDim(int64_t rank, int side) { return side == 0 ? rank - 2 : rank - 1; }

// The loop state both loops share: (x, y, out, x_scale, k, y_scale[, global]), k at 4 as
// EmitCondition reads it; the AG loop rotates x and x_scale, the RS loop rotates out.
struct LoopState {
  HloInstruction *x, *y, *out, *x_scale, *k, *y_scale, *global;
};

// Reads the state in a loop body; `names` name x, y, out, x_scale and y_scale.
LoopState ReadState(Emitter& b, HloInstruction* p, bool global, const std::array<const char*, 5>& names) {
  return {b.Gte(p, 0, names[0]), b.Gte(p, 1, names[1]), b.Gte(p, 2, names[2]), b.Gte(p, 3, names[3]),
          b.Gte(p, 4, "k"),      b.Gte(p, 5, names[4]), global ? b.Gte(p, 6, "global_scale") : nullptr};
}

double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Which dot dim the all-gathers gather: the gathered side's rows, the contracting dim (K) or the
// batch dim.
enum class AgMode { kRows, kContracting, kBatch };

// An AG candidate that passed TryAg's checks: `dot` reads on `side` the all-gather `ag` of the
// data shard `x` and the all-gather `sag` of its scale shard `xs`, both along dim `d`, over `ring`.
struct AgCandidate {
  HloInstruction* dot = nullptr;
  int64_t rank = 0;
  int side = -1;
  HloInstruction* ag = nullptr;
  HloInstruction* sag = nullptr;
  int64_t d = -1;
  AgMode mode = AgMode::kRows;
  // Other block-scaled dots reading the gathered pair: they read the loop's cache of the windows.
  std::vector<HloInstruction*> others;
  PartitionRing ring;
  int64_t n = 0;                     // the ring's size
  HloInstruction* x = nullptr;       // the data shard
  HloInstruction* xs = nullptr;      // the scale shard
  int64_t block = 0;                 // the data shard's length along d
  int64_t sblock = 0;                // the scale shard's (= block except along K)
  HloInstruction* stat = nullptr;    // the stationary operand
  HloInstruction* stat_s = nullptr;  // the stationary operand's scale
  std::string gate_note;             // the cost gate's estimate, for the remark
};

// The AG loop's shapes and the values its steps share, from its candidate.
struct AgLoop {
  HloInstruction* global = nullptr;  // the dot's global scale in the step's type, or nullptr
  Shape out_shape;                   // the dot's
  int64_t out_dim = 0;               // rows and batch: the output dim a step writes its block to
  PrimitiveType acc_type = PrimitiveType::kInvalid;
  Shape acc_shape, step_shape, tuple_shape;
  int64_t cache_at = 0;  // the state index of the caches, when other dots read them
  std::vector<std::pair<int64_t, int64_t>> pairs;  // the ring's s -> s-1 shift
};

// The other block-scaled dots that read `ag` and `sag` as one operand's data and scale, in `ag`'s
// user order, into *others. False with *why when anything else reads either all-gather, or when
// one of those dots feeds `dot` (then it could not read the loop's cache).
bool FindCacheReaders(HloInstruction* dot, HloInstruction* ag, HloInstruction* sag,
                      std::vector<HloInstruction*>* others, std::string* why) {
  for (HloInstruction* u : ag->users()) {
    if (u == dot) continue;
    bool pair = IsWindowableScaledDot(*u);
    for (int64_t i = 0; pair && i < u->operand_count(); ++i) {
      if (u->operand(i) == ag) pair = i < 2 && u->operand(i + 2) == sag;
      if (u->operand(i) == sag) pair = i >= 2 && i < 4 && u->operand(i - 2) == ag;
    }
    if (!pair) {
      *why = absl::StrCat("the all-gather is also read by '", u->name(), "', not as a block-scaled dot's data with its scale");
      return false;
    }
    others->push_back(u);
  }
  for (HloInstruction* u : sag->users()) {
    if (u != dot && std::find(others->begin(), others->end(), u) == others->end()) {
      *why = absl::StrCat("the scales' all-gather is also read by '", u->name(), "' without its data");
      return false;
    }
  }
  // The others will read the loop's result: none of them may feed the loop (the dot's other
  // operands), or the graph would have a cycle.
  if (!others->empty()) {
    std::vector<const HloInstruction*> stack;
    for (int64_t i = 0; i < dot->operand_count(); ++i) {
      if (dot->operand(i) != ag && dot->operand(i) != sag) stack.push_back(dot->operand(i));
    }
    absl::flat_hash_set<const HloInstruction*> seen;
    while (!stack.empty()) {
      const HloInstruction* h = stack.back();
      stack.pop_back();
      if (!seen.insert(h).second) continue;
      if (std::find(others->begin(), others->end(), h) != others->end()) {
        *why = absl::StrCat("'", h->name(), "', which also reads the all-gathers, feeds this dot: it cannot read the loop's cache");
        return false;
      }
      for (const HloInstruction* o : h->operands()) stack.push_back(o);
    }
  }
  return true;
}

// The AG loop's shapes for candidate `c`. The dot's global scale, when its type is not the
// step's, is converted in `e` (the dot's computation).
AgLoop PlanAgLoop(const AgCandidate& c, Emitter& e) {
  HloInstruction* dot = c.dot;
  AgLoop l;
  l.global = dot->operand_count() == 5 ? dot->operand(4) : nullptr;
  l.out_shape = dot->shape();
  // Rows and batch write their block of the output; the contracting dim sums partial dots, in
  // f32 for a narrower result (converted once after the loop), its global scale converted too.
  l.out_dim = c.mode == AgMode::kBatch ? 0 : RowOutDim(c.rank, c.side);
  l.acc_type = c.mode == AgMode::kContracting && l.out_shape.element_type != PrimitiveType::F64
                   ? PrimitiveType::F32 : l.out_shape.element_type;
  l.acc_shape = l.out_shape.WithElementType(l.acc_type);
  l.step_shape = c.mode == AgMode::kContracting ? l.acc_shape : windowed_einsum::WithDim(l.out_shape, l.out_dim, c.block);
  if (l.global != nullptr && l.global->shape().element_type != l.step_shape.element_type) {
    l.global = e.Add(HloOpcode::kConvert, l.global->shape().WithElementType(l.step_shape.element_type), {l.global},
                     dot->name() + ".global_scale");
  }
  std::vector<Shape> elems = {c.x->shape(), c.stat->shape(), l.acc_shape, c.xs->shape(), Shape(PrimitiveType::U32, {}),
                              c.stat_s->shape()};
  if (l.global) elems.push_back(l.global->shape());
  l.cache_at = static_cast<int64_t>(elems.size());  // the caches, when other dots read them
  if (!c.others.empty()) {
    elems.push_back(c.ag->shape());
    elems.push_back(c.sag->shape());
  }
  l.tuple_shape = Shape::Tuple(elems);
  l.pairs = c.ring.ShiftPairs(-1);
  return l;
}

// The window `win` (data) and `win_s` (scales) written into the caches `cx` and `cs` at block
// (k + i) % N of the gathered dim; returns the updated data and scale caches.
std::pair<HloInstruction*, HloInstruction*> CacheWindow(const AgCandidate& c, Emitter& b, HloInstruction* k,
                                                        HloInstruction* cx, HloInstruction* cs, HloInstruction* win,
                                                        HloInstruction* win_s, const std::string& tag) {
  RingValues rv = EmitRingValues(b, c.ring, c.block);
  HloInstruction* off = EmitBlockOffset(b, rv, k, tag + "_cache");
  HloInstruction* soff = off;
  if (c.sblock != c.block) {
    RingValues srv = EmitRingValues(b, c.ring, c.sblock);
    soff = EmitBlockOffset(b, srv, k, tag + "_cache_scale");
  }
  return {b.Dus(cx, win, OffsetsAt(rv, c.rank, c.d, off), "data_cache" + tag),
          b.Dus(cs, win_s, OffsetsAt(rv, c.rank, c.d, soff), "scale_cache" + tag)};
}

// The operands of a step's block-scaled dot in the call's order: the window on `side`, the
// stationary operand on the other, then their scales, then the global scale `g` if any.
std::vector<HloInstruction*> StepOperands(int side, HloInstruction* win, HloInstruction* st, HloInstruction* win_s,
                                          HloInstruction* st_s, HloInstruction* g) {
  std::vector<HloInstruction*> ops = side == 0 ? std::vector<HloInstruction*>{win, st, win_s, st_s}
                                               : std::vector<HloInstruction*>{st, win, st_s, win_s};
  if (g) ops.push_back(g);
  return ops;
}

// After the AG loop `loop` (in `e`): the last window joins the caches, and the other dots read the
// caches instead of the all-gathers. False when an operand cannot be replaced.
bool RedirectCacheReaders(const AgCandidate& c, const AgLoop& l, Emitter& e, HloInstruction* loop) {
  // The last window joins the caches; the other dots read them.
  HloInstruction* k_last = e.ConstInt(PrimitiveType::U32, c.n - 1, "k_last_cache");
  auto [cx, cs] = CacheWindow(c, e, k_last, e.Gte(loop, l.cache_at, "data_cache_out"),
                              e.Gte(loop, l.cache_at + 1, "scale_cache_out"), e.Gte(loop, 0, "last_window_cached"),
                              e.Gte(loop, 3, "last_window_scale_cached"), ".last");
  for (HloInstruction* o : c.others) {
    for (int64_t i = 0; i < o->operand_count(); ++i) {
      if (o->operand(i) == c.ag && !o->ReplaceOperandWith(i, cx).ok()) return false;
      if (o->operand(i) == c.sag && !o->ReplaceOperandWith(i, cs).ok()) return false;
    }
  }
  return true;
}

class Rewriter {
 public:
  Rewriter(HloModule* m, int64_t threshold_mib, int64_t max_ring, CostOracle* oracle,
           std::function<void(const std::string&, bool, const std::string&)> remark)
      : m_(m), threshold_mib_(threshold_mib), max_ring_(max_ring), oracle_(oracle), remark_(std::move(remark)),
        next_channel_(m->NextChannelId()) {}

  // The AG form at `dot`: true when rewritten; false with a remark when it does not apply, or
  // without one when `dot` is not a candidate.
  bool TryAg(HloInstruction* dot);
  bool TryRs(HloInstruction* rs);

 private:
  std::optional<PartitionRing> Ring(const HloInstruction& c, std::string* why) {
    absl::StatusOr<PartitionRing> r = AnalyzePartitionRing(c, m_->num_partitions, m_->replica_count);
    if (!r.ok()) {
      *why = std::string(r.status().message());
      return std::nullopt;
    }
    return *r;
  }
  // The block-scaled dot on `ops` (in the call's operand order) with `shape`.
  HloInstruction* StepDot(Emitter& e, const HloInstruction& proto, std::vector<HloInstruction*> ops,
                          const Shape& shape, const std::string& name) {
    HloInstruction* d = e.comp()->AddInstruction(proto.CloneWithNewOperands(shape, std::move(ops), ""));
    d->set_name(name);
    return d;
  }

  // The cost gate (passes/cost_oracle.h): with an oracle, a candidate whose checks all passed is
  // windowed only when the model predicts the loop faster; `note` gets the estimate. Without
  // one, every candidate is windowed.
  bool Gate(const HloInstruction* at, const std::string& what, std::vector<const HloInstruction*> seeds,
            std::string* note) {
    if (oracle_ == nullptr) return true;
    CostQuery q = CostQuery::WithOrWithout("block-scaled-windowed-einsum", at->name(), what, std::move(seeds));
    q.one_stream_bound = true;  // as the windowed einsum decomposer asks (cost_oracle.h)
    CostEstimate e = oracle_->Decide(q);
    if (e.chosen == 0) {
      remark_(at->name(), false, absl::StrCat("block-scaled ", what, " not windowed: ", e.Note()));
      return false;
    }
    *note = absl::StrCat("; ", e.Note());
    return true;
  }

  // The side (0 lhs, 1 rhs) whose data and scale are both all-gathered into `dot`; -1 when none
  // is (with a remark when a side's data or scale alone is).
  int GatheredSide(HloInstruction* dot);
  // TryAg's checks (pair, cache readers, ring, shards, threshold, cost gate): true with *c filled,
  // or false after a remark when `dot` is not windowed.
  bool MatchAg(HloInstruction* dot, AgCandidate* c);
  // Emits the AG loop of `c`, replaces the dot and reports the applied remark; false when an
  // instruction cannot be replaced.
  bool EmitAg(const AgCandidate& c);
  // The AG loop's body: a step, the window and its scales permuted s -> s-1, k + 1, the caches.
  HloComputation* EmitAgBody(const AgCandidate& c, const AgLoop& l);
  // One AG step in `b`: the window's block-scaled dot merged into `out` at block (k + i) % N
  // (written there for rows and batch, added for the contracting dim); returns the new `out`.
  HloInstruction* AgStep(const AgCandidate& c, const AgLoop& l, Emitter& b, HloInstruction* k, HloInstruction* win,
                         HloInstruction* st, HloInstruction* out, HloInstruction* win_s, HloInstruction* st_s,
                         HloInstruction* g, const std::string& tag);

  HloModule* m_;
  int64_t threshold_mib_, max_ring_;
  CostOracle* oracle_;
  std::function<void(const std::string&, bool, const std::string&)> remark_;
  int64_t next_channel_;
};

int Rewriter::GatheredSide(HloInstruction* dot) {
  int side = -1;
  for (int s = 0; s < 2; ++s) {
    if (dot->operand(s)->opcode() == HloOpcode::kAllGather && dot->operand(s + 2)->opcode() == HloOpcode::kAllGather) side = s;
  }
  if (side < 0) {
    for (int s = 0; s < 2; ++s) {
      if (dot->operand(s)->opcode() == HloOpcode::kAllGather || dot->operand(s + 2)->opcode() == HloOpcode::kAllGather) {
        remark_(dot->name(), false, absl::StrCat("block-scaled dot not windowed: the ", s == 0 ? "lhs" : "rhs",
                                                 " data and its scale are not both all-gathered into it"));
        return -1;
      }
    }
    return -1;  // no all-gather: not a candidate
  }
  return side;
}

bool Rewriter::MatchAg(HloInstruction* dot, AgCandidate* c) {
  const int64_t rank = dot->operand(0)->shape().rank();
  const int side = GatheredSide(dot);
  if (side < 0) return false;
  HloInstruction* ag = dot->operand(side);
  HloInstruction* sag = dot->operand(side + 2);
  auto refuse = [&](const std::string& why) {
    remark_(dot->name(), false, absl::StrCat("block-scaled dot not windowed (all-gather '", ag->name(), "' and '",
                                             sag->name(), "'): ", why));
    return false;
  };
  if (ag->operand_count() != 1 || sag->operand_count() != 1 || ag->dimensions.size() != 1 ||
      sag->dimensions.size() != 1) {
    return refuse("an all-gather of several operands or dims");
  }
  const int64_t d = ag->dimensions[0];
  if (sag->dimensions[0] != d) return refuse("data and scale are gathered along different dims");
  const AgMode mode = d == rank - 1 ? AgMode::kContracting : (rank == 3 && d == 0) ? AgMode::kBatch : AgMode::kRows;
  // Other block-scaled dots reading the same gathered pair (the data and its scale as one
  // operand's pair) read the loop's cache of the windows instead of the all-gathers.
  std::vector<HloInstruction*> others;
  std::string why;
  if (!FindCacheReaders(dot, ag, sag, &others, &why)) return refuse(why);
  std::optional<PartitionRing> ring = Ring(*ag, &why);
  if (!ring) return refuse(why);
  std::optional<PartitionRing> sring = Ring(*sag, &why);
  if (!sring) return refuse(why);
  if (ring->groups != sring->groups) return refuse("data and scale are gathered over different partition groups");
  const int64_t n = ring->size();
  if (n < 2) return refuse("a ring of one partition");
  if (n > max_ring_) return refuse(absl::StrCat("a ring of ", n, " > windowed-einsum-max-ring=", max_ring_));
  HloInstruction* x = ag->operand(0);
  HloInstruction* xs = sag->operand(0);
  if (xs->shape().rank() != rank || x->shape().rank() != rank || d < 0 || d >= rank) {
    return refuse("the scale's rank is not its data's");
  }
  const int64_t block = x->shape().dims[static_cast<size_t>(d)];
  const int64_t sblock = xs->shape().dims[static_cast<size_t>(d)];  // = block except along K
  if (block * n != ag->shape().dims[static_cast<size_t>(d)] || sblock * n != sag->shape().dims[static_cast<size_t>(d)] ||
      (mode != AgMode::kContracting && sblock != block)) {
    return refuse("the scale's shards along the gathered dim are not its data's (padded scale)");
  }
  HloInstruction* stat = dot->operand(1 - side);
  HloInstruction* stat_s = dot->operand(3 - side);
  if (mode == AgMode::kContracting) {
    absl::StatusOr<int64_t> bs = BlockScaledDotBlockSize(*dot);
    if (!bs.ok() || block % *bs != 0 || sblock * *bs != block ||
        stat_s->shape().dims.back() * *bs != stat->shape().dims.back()) {
      return refuse("a contracting shard does not hold whole blocks with their scales");
    }
  }
  if (mode == AgMode::kBatch && (stat->shape().dims[0] != block * n || stat_s->shape().dims[0] != block * n)) {
    return refuse("the other operand's batch does not match the gathered one");
  }
  const double mib = Mib(ag->shape().ByteSize() + sag->shape().ByteSize());
  if (mib < static_cast<double>(threshold_mib_)) {
    return refuse(absl::StrCat(mib, " MiB gathered < windowed-einsum-threshold-mib=", threshold_mib_));
  }
  std::string gate_note;
  if (!Gate(dot, absl::StrCat("dot (all-gather '", ag->name(), "' and '", sag->name(), "')"), {ag, sag, dot},
            &gate_note)) {
    return false;
  }
  *c = AgCandidate{.dot = dot, .rank = rank, .side = side, .ag = ag, .sag = sag, .d = d, .mode = mode,
                   .others = std::move(others), .ring = std::move(*ring), .n = n, .x = x, .xs = xs,
                   .block = block, .sblock = sblock, .stat = stat, .stat_s = stat_s,
                   .gate_note = std::move(gate_note)};
  return true;
}

HloInstruction* Rewriter::AgStep(const AgCandidate& c, const AgLoop& l, Emitter& b, HloInstruction* k,
                                 HloInstruction* win, HloInstruction* st, HloInstruction* out, HloInstruction* win_s,
                                 HloInstruction* st_s, HloInstruction* g, const std::string& tag) {
  RingValues rv = EmitRingValues(b, c.ring, c.block);
  HloInstruction* off = EmitBlockOffset(b, rv, k, tag);
  if (c.mode != AgMode::kRows) {
    // The stationary operand's matching block (and its scales' block) along K or the batch.
    const int64_t sd = c.mode == AgMode::kBatch ? 0 : c.rank - 1;
    st = b.DynamicSlice(st, OffsetsAt(rv, c.rank, sd, off), windowed_einsum::WithDim(st->shape(), sd, c.block).dims,
                        "stationary_block" + tag);
    HloInstruction* soff = off;
    if (c.sblock != c.block) {
      RingValues srv = EmitRingValues(b, c.ring, c.sblock);
      soff = EmitBlockOffset(b, srv, k, tag + "_scale");
    }
    st_s = b.DynamicSlice(st_s, OffsetsAt(rv, c.rank, sd, soff),
                          windowed_einsum::WithDim(st_s->shape(), sd, c.sblock).dims, "stationary_scale_block" + tag);
  }
  HloInstruction* y = StepDot(b, *c.dot, StepOperands(c.side, win, st, win_s, st_s, g), l.step_shape,
                              c.dot->name() + ".step" + tag);
  if (c.mode == AgMode::kContracting) return b.Binary(HloOpcode::kAdd, out, y, "out_sum" + tag);
  return b.Dus(out, y, OffsetsAt(rv, c.rank, l.out_dim, off), "out_updated" + tag);
}

HloComputation* Rewriter::EmitAgBody(const AgCandidate& c, const AgLoop& l) {
  HloComputation* body = NewComputation(m_, kBodyAg);
  Emitter b(body);
  HloInstruction* p = b.Param(l.tuple_shape, "param");
  const LoopState ls = ReadState(b, p, l.global != nullptr, {"window", "stationary", "out", "window_scale", "stationary_scale"});
  HloInstruction *win = ls.x, *st = ls.y, *out = ls.out, *win_s = ls.x_scale, *k = ls.k, *st_s = ls.y_scale, *g = ls.global;
  HloInstruction* out2 = AgStep(c, l, b, k, win, st, out, win_s, st_s, g, "");
  HloInstruction* win2 = b.Permute(win, l.pairs, next_channel_++, "window_next");
  HloInstruction* win_s2 = b.Permute(win_s, l.pairs, next_channel_++, "window_scale_next");
  HloInstruction* k2 = b.Binary(HloOpcode::kAdd, k, b.ConstInt(PrimitiveType::U32, 1, "one"), "k_next");
  std::vector<HloInstruction*> next = {win2, st, out2, win_s2, k2, st_s};
  if (g) next.push_back(g);
  if (!c.others.empty()) {
    auto [cx, cs] = CacheWindow(c, b, k, b.Gte(p, l.cache_at, "data_cache_in"), b.Gte(p, l.cache_at + 1, "scale_cache_in"),
                                win, win_s, "");
    next.push_back(cx);
    next.push_back(cs);
  }
  body->set_root(b.Tuple(next, "next"));
  return body;
}

bool Rewriter::EmitAg(const AgCandidate& c) {
  // The loop: (x_win, stationary, out, xs_win, k, stationary scale[, global]).
  HloInstruction* dot = c.dot;
  HloComputation* outer = dot->parent();
  Emitter e(outer);
  const AgLoop l = PlanAgLoop(c, e);
  HloComputation* body = EmitAgBody(c, l);
  HloComputation* cond = EmitCondition(m_, kCondAg, l.tuple_shape, c.n - 1);

  std::vector<HloInstruction*> init = {c.x, c.stat, e.Zeros(l.acc_shape, dot->name() + ".buffer"), c.xs,
                                       e.ConstInt(PrimitiveType::U32, 0, "k0"), c.stat_s};
  if (l.global) init.push_back(l.global);
  if (!c.others.empty()) {
    init.push_back(e.Zeros(c.ag->shape(), c.x->name() + ".cache"));
    init.push_back(e.Zeros(c.sag->shape(), c.xs->name() + ".cache"));
  }
  HloInstruction* loop = e.Add(HloOpcode::kWhile, l.tuple_shape, {e.Tuple(init, "windowed_init")},
                               dot->name() + ".windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  if (!c.others.empty() && !RedirectCacheReaders(c, l, e, loop)) return false;
  // The peeled last step: the window of block (N-1 + i) % N.
  HloInstruction* res = AgStep(c, l, e, e.ConstInt(PrimitiveType::U32, c.n - 1, "k_last"), e.Gte(loop, 0, "last_window"),
                               c.stat, e.Gte(loop, 2, "windowed_out"), e.Gte(loop, 3, "last_window_scale"), c.stat_s,
                               l.global, ".last");
  if (l.acc_type != l.out_shape.element_type) res = e.Add(HloOpcode::kConvert, l.out_shape, {res}, dot->name() + ".windowed");
  const std::string name = dot->name();
  if (!outer->ReplaceInstruction(dot, res).ok()) return false;
  const AgMode mode = c.mode;
  const int64_t n = c.n;
  const char* what = mode == AgMode::kRows ? " rows" : mode == AgMode::kBatch ? " batch entries" : " of the contracting dim";
  remark_(name, true,
          absl::StrCat("block-scaled dot windowed (AG): ", PrimitiveTypeName(c.x->shape().element_type).data(),
                       " data '", c.x->name(), "' and its ", PrimitiveTypeName(c.xs->shape().element_type).data(),
                       " scales travel a ring of ", n, " by collective-permute, one block-scaled dot of ", c.block, what,
                       " per step", mode == AgMode::kContracting ? " summed in " : "",
                       mode == AgMode::kContracting ? PrimitiveTypeName(l.acc_type).data() : "", " (", n - 1,
                       n == 2 ? " trip of " : " trips of ", body->name(), " and the last step peeled)",
                       c.others.empty() ? "" : absl::StrCat("; the windows cached in the loop for ", c.others.size(),
                                                            " other block-scaled dot(s), which no longer wait for an all-gather"),
                       c.gate_note));
  return true;
}

bool Rewriter::TryAg(HloInstruction* dot) {
  AgCandidate c;
  if (!MatchAg(dot, &c)) return false;
  return EmitAg(c);
}

bool Rewriter::TryRs(HloInstruction* rs) {
  if (rs->operand_count() != 1 || !IsWindowableScaledDot(*rs->operand(0)) || rs->dimensions.size() != 1) return false;
  HloInstruction* dot = rs->operand(0);
  const int64_t rank = dot->operand(0)->shape().rank();
  auto refuse = [&](const std::string& why) {
    remark_(rs->name(), false, absl::StrCat("reduce-scatter of block-scaled dot '", dot->name(), "' not windowed: ", why));
    return false;
  };
  if (!rs->shape().IsArray() || rs->called_computations().empty() || !IsSumComputation(rs->to_apply())) {
    return refuse("the reduce-scatter does not add (the loop's accumulator sums partial dots)");
  }
  const int64_t d = rs->dimensions[0];
  int side = -1;
  if (d == rank - 2) side = 0;
  if (d == rank - 1) side = 1;
  if (side < 0) return refuse("scattered along the batch dim (not windowed yet)");
  if (dot->users().size() != 1) return refuse("the dot has other users");
  std::string why;
  std::optional<PartitionRing> ring = Ring(*rs, &why);
  if (!ring) return refuse(why);
  const int64_t n = ring->size();
  if (n < 2) return refuse("a ring of one partition");
  if (n > max_ring_) return refuse(absl::StrCat("a ring of ", n, " > windowed-einsum-max-ring=", max_ring_));
  HloInstruction* own = dot->operand(side);
  HloInstruction* own_s = dot->operand(side + 2);
  const int64_t rows = own->shape().dims[static_cast<size_t>(rank - 2)];
  if (rows % n != 0 || own_s->shape().dims[static_cast<size_t>(rank - 2)] != rows) {
    return refuse("the scattered rows do not split evenly with their scales");
  }
  const double mib = Mib(dot->shape().ByteSize());
  if (mib < static_cast<double>(threshold_mib_)) {
    return refuse(absl::StrCat(mib, " MiB scattered < windowed-einsum-threshold-mib=", threshold_mib_));
  }
  std::string gate_note;
  if (!Gate(rs, absl::StrCat("reduce-scatter '", rs->name(), "' of dot '", dot->name(), "'"), {dot, rs}, &gate_note)) {
    return false;
  }
  const int64_t block = rows / n;
  HloComputation* outer = rs->parent();
  HloInstruction* other = dot->operand(1 - side);
  HloInstruction* other_s = dot->operand(3 - side);
  HloInstruction* global = dot->operand_count() == 5 ? dot->operand(4) : nullptr;
  const Shape acc_shape = rs->shape();
  // (own, other, acc, own_scale, k, other_scale[, global])
  std::vector<Shape> elems = {own->shape(), other->shape(), acc_shape, own_s->shape(), Shape(PrimitiveType::U32, {}),
                              other_s->shape()};
  if (global) elems.push_back(global->shape());
  const Shape tuple_shape = Shape::Tuple(elems);
  const std::vector<std::pair<int64_t, int64_t>> pairs = ring->ShiftPairs(-1);
  // The partial dot of the owning operand's rows [off, off + block) and their scales.
  auto partial = [&](Emitter& b, const RingValues& rv, HloInstruction* kk, HloInstruction* o, HloInstruction* os,
                     HloInstruction* ot, HloInstruction* ots, HloInstruction* g, const std::string& tag) {
    HloInstruction* off = EmitBlockOffset(b, rv, kk, tag);
    HloInstruction* rows_x = b.DynamicSlice(o, OffsetsAt(rv, rank, rank - 2, off),
                                            windowed_einsum::WithDim(o->shape(), rank - 2, block).dims, "rows" + tag);
    HloInstruction* rows_s = b.DynamicSlice(os, OffsetsAt(rv, rank, rank - 2, off),
                                            windowed_einsum::WithDim(os->shape(), rank - 2, block).dims, "row_scales" + tag);
    std::vector<HloInstruction*> ops = side == 0 ? std::vector<HloInstruction*>{rows_x, ot, rows_s, ots}
                                                 : std::vector<HloInstruction*>{ot, rows_x, ots, rows_s};
    if (g) ops.push_back(g);
    return StepDot(b, *dot, ops, acc_shape, dot->name() + ".partial" + tag);
  };

  HloComputation* body = NewComputation(m_, kBodyRs);
  {
    Emitter b(body);
    HloInstruction* p = b.Param(tuple_shape, "param");
    const LoopState ls = ReadState(b, p, global != nullptr, {"own", "other", "acc", "own_scale", "other_scale"});
    HloInstruction *o = ls.x, *ot = ls.y, *acc = ls.out, *os = ls.x_scale, *k = ls.k, *ots = ls.y_scale, *g = ls.global;
    RingValues rv = EmitRingValues(b, *ring, block);
    HloInstruction* k1 = b.Binary(HloOpcode::kAdd, k, rv.one, "k_next");
    HloInstruction* y = partial(b, rv, k1, o, os, ot, ots, g, "");
    HloInstruction* sum = b.Binary(HloOpcode::kAdd, acc, y, "acc_sum");
    HloInstruction* sent = b.Permute(sum, pairs, next_channel_++, "acc_next");
    std::vector<HloInstruction*> next = {o, ot, sent, os, k1, ots};
    if (g) next.push_back(g);
    body->set_root(b.Tuple(next, "next"));
  }
  HloComputation* cond = EmitCondition(m_, kCondRs, tuple_shape, n - 1);
  Emitter e(outer);
  std::vector<HloInstruction*> init = {own, other, e.Zeros(acc_shape, rs->name() + ".acc0"), own_s,
                                       e.ConstInt(PrimitiveType::U32, 0, "k0"), other_s};
  if (global) init.push_back(global);
  HloInstruction* loop = e.Add(HloOpcode::kWhile, tuple_shape, {e.Tuple(init, "windowed_init")},
                               rs->name() + ".windowed_loop");
  loop->mutable_called_computations()->push_back(cond);
  loop->mutable_called_computations()->push_back(body);
  // The peeled last step: block (N + i) % N = i, this partition's own.
  RingValues rv = EmitRingValues(e, *ring, block);
  HloInstruction* y = partial(e, rv, e.ConstInt(PrimitiveType::U32, n, "k_last"), own, own_s, other, other_s, global, ".last");
  HloInstruction* res = e.Binary(HloOpcode::kAdd, e.Gte(loop, 2, "windowed_acc"), y, rs->name() + ".windowed");
  const std::string name = rs->name();
  const std::string dot_name = dot->name();  // the dot goes with the reduce-scatter it fed
  if (!outer->ReplaceInstruction(rs, res).ok()) return false;
  remark_(name, true,
          absl::StrCat("reduce-scatter of block-scaled dot '", dot_name, "' windowed (RS): the ", acc_shape.ToString(false),
                       " accumulator travels a ring of ", n, "; each step a block-scaled dot of ", block,
                       " rows of '", own->name(), "' with their scales (", n - 1, n == 2 ? " trip of " : " trips of ", body->name(),
                       " and the last step peeled)", gate_note));
  return true;
}

}  // namespace

absl::StatusOr<bool> BlockScaledWindowedEinsum::Run(HloModule* module) {
  if (module->num_partitions <= 1) return false;
  Rewriter r(module, threshold_mib_, max_ring_, cost_oracle(), [this](const std::string& at, bool applied, const std::string& msg) {
    AddRemark(at, applied, msg);
  });
  bool changed = false;
  for (HloComputation* comp : module->MakeComputationPostOrder()) {
    if (comp->name().rfind("block_scaled_windowed_", 0) == 0) continue;
    for (HloInstruction* h : comp->MakeInstructionPostOrder()) {
      if (h->opcode() == HloOpcode::kReduceScatter) {
        changed |= r.TryRs(h);
      } else if (IsWindowableScaledDot(*h)) {
        changed |= r.TryAg(h);
      }
    }
  }
  if (changed) module->RemoveUnusedComputations();
  return changed;
}

namespace {

absl::StatusOr<std::unique_ptr<HloPass>> MakeBlockScaledWindowedEinsum(const PassOptions& options) {
  ASSIGN_OR_RETURN(int64_t t, options.GetInt("windowed-einsum-threshold-mib", 0));
  ASSIGN_OR_RETURN(int64_t ring, options.GetInt("windowed-einsum-max-ring", 32));
  return std::unique_ptr<HloPass>(new BlockScaledWindowedEinsum(t, ring));
}

}  // namespace

WEAVE_REGISTER_PASS("block-scaled-windowed-einsum", MakeBlockScaledWindowedEinsum);

}  // namespace weave
