// Windowed einsum loops as XLA's SPMD partitioner emits them, written from
// ../shared/specs/spmd-windowed-einsum.md (§2 all-gather loops, §3 reduce-scatter loops, §5 the
// code around them, §6 grouped rings), independently of Weave's decomposer: the handler, the
// cleanup passes and the report see the loops XLA dumps hold, not only the ones Weave makes.
//
// Loop state (lhs, rhs, out, extra, k:u32). Ring s -> s-1 inside each group; the in-group
// position comes from a u32 table indexed by partition-id when the groups are not {0..P-1}.
// Block offsets: s32[N] {0, b, 2b, ...} indexed by (k + position) % N.
//  AG, non-contracting: the windowed operand's dot is written with dynamic-update-slice.
//  AG, contracting: the stationary operand is dynamic-sliced, the dot added into `out`.
//  AG, batch: both on batch dim 0, the stationary operand sliced, the block written.
//  RS: the operand owning the scattered dim is sliced per step, the accumulator travels;
//      unrolled (two accumulators, s -> s-2, then add(permute(elem 2, s -> s+1), elem 3)) or
//      rolled (a guarded permute; q = (k + 1 + position) % N).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "program_gen_internal.h"

namespace weave::fuzz {
namespace {

// Lines of one computation, with names prefixed so they are unique in the module.
class Lines {
 public:
  explicit Lines(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Add(const std::string& hint, const std::string& shape, const std::string& rest) {
    const std::string name = absl::StrCat(prefix_, hint, ".", n_++);
    text_ += absl::StrCat("  ", name, " = ", shape, " ", rest, "\n");
    return name;
  }
  std::string Root(const std::string& shape, const std::string& rest) {
    const std::string name = absl::StrCat(prefix_, "root.", n_++);
    text_ += absl::StrCat("  ROOT ", name, " = ", shape, " ", rest, "\n");
    return name;
  }
  const std::string& text() const { return text_; }

 private:
  std::string prefix_;
  std::string text_;
  int n_ = 0;
};

std::string Shape(const std::string& t, const std::vector<int64_t>& d) { return ShapeText(t, d); }

std::vector<int64_t> OffsetTable(int64_t n, int64_t block) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(i * block);
  return t;
}

enum class Kind { kNonContracting, kContracting, kBatch, kReduceScatter };

struct Plan {
  Kind kind = Kind::kNonContracting;
  int windowed = 0;  // AG: the circulating operand (0 lhs, 1 rhs); RS: the sliced operand
  int64_t n = 2;
  bool unrolled = true;
  std::vector<int64_t> lhs, rhs, out;  // local operand shapes, loop output (AG) / shard (RS)
  std::string dot_attrs;
  int64_t block = 1;       // block length on the windowed / sliced / scattered dim
  int64_t out_dim = 0;     // AG non-contracting/batch: output dim written; RS: scattered dim
  int64_t slice_dim = -1;  // the sliced operand's dim (AG contracting/batch: stationary; RS)
};

Plan MakePlan(MotifContext& ctx, int64_t n) {
  ChoiceSource& c = ctx.choices();
  Plan p;
  p.n = n;
  p.kind = static_cast<Kind>(c.Weighted({35, 25, 10, 30}));
  p.windowed = static_cast<int>(c.Below(2));
  p.block = ctx.Block();
  const int64_t m = ctx.Size(), k = ctx.Size() * 2, w = ctx.Size(), b = p.block;
  const std::string c2 = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
  switch (p.kind) {
    case Kind::kNonContracting:
      if (p.windowed == 0) {  // lhs rows circulate
        p.lhs = {b, k};
        p.rhs = {k, w};
        p.out = {n * b, w};
        p.out_dim = 0;
      } else {  // rhs columns circulate
        p.lhs = {m, k};
        p.rhs = {k, b};
        p.out = {m, n * b};
        p.out_dim = 1;
      }
      p.dot_attrs = c2;
      break;
    case Kind::kContracting:
      if (p.windowed == 0) {  // lhs K blocks circulate, rhs rows sliced
        p.lhs = {m, b};
        p.rhs = {n * b, w};
        p.slice_dim = 0;
      } else {  // rhs K blocks circulate, lhs columns sliced
        p.lhs = {m, n * b};
        p.rhs = {b, w};
        p.slice_dim = 1;
      }
      p.out = {m, w};
      p.dot_attrs = c2;
      break;
    case Kind::kBatch: {
      const int64_t bb = std::max<int64_t>(1, b / 2);
      p.block = bb;
      if (p.windowed == 0) {
        p.lhs = {bb, m, k};
        p.rhs = {n * bb, k, w};
      } else {
        p.lhs = {n * bb, m, k};
        p.rhs = {bb, k, w};
      }
      p.slice_dim = 0;
      p.out = {n * bb, m, w};
      p.out_dim = 0;
      p.dot_attrs = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                    "rhs_contracting_dims={1}";
      break;
    }
    case Kind::kReduceScatter:
      // Scattered dim 0 (lhs rows sliced) or 1 (rhs columns sliced).
      if (p.windowed == 0) {
        p.lhs = {n * b, k};
        p.rhs = {k, w};
        p.out = {b, w};
        p.slice_dim = 0;
        p.out_dim = 0;
      } else {
        p.lhs = {m, k};
        p.rhs = {k, n * b};
        p.out = {m, b};
        p.slice_dim = 1;
        p.out_dim = 1;
      }
      p.dot_attrs = c2;
      break;
  }
  // XLA unrolls by 2 for even rings; rolled (one dot per trip, guarded permute) for odd ones
  // and when unrolling is off.
  p.unrolled = n % 2 == 0 && !c.Percent(20);
  return p;
}

// The body's ring values: position, N, offset table, zero, one.
struct RingNames {
  std::string pos, n, offs, zero, one;
};

RingNames EmitRing(Lines& l, const Groups& g, int64_t num_partitions, int64_t block) {
  RingNames r;
  const std::string pid = l.Add("pid", "u32[]", "partition-id()");
  const std::string table = g.PositionTable(num_partitions);
  if (table.empty()) {
    r.pos = pid;
  } else {
    const std::string t = l.Add("position_table", Shape("u32", {num_partitions}),
                                absl::StrCat("constant(", table, ")"));
    const std::string ds = l.Add("position.ds", "u32[1]",
                                 absl::StrCat("dynamic-slice(", t, ", ", pid, "), dynamic_slice_sizes={1}"));
    r.pos = l.Add("position", "u32[]", absl::StrCat("reshape(", ds, ")"));
  }
  r.n = l.Add("nparts", "u32[]", absl::StrCat("constant(", g.n, ")"));
  r.offs = l.Add("offsets", Shape("s32", {g.n}),
                 absl::StrCat("constant({", IntList(OffsetTable(g.n, block)), "})"));
  r.zero = l.Add("zero", "s32[]", "constant(0)");
  r.one = l.Add("one", "u32[]", "constant(1)");
  return r;
}

// reshape(dynamic-slice(offsets, (k + position) % N)).
std::string EmitOffset(Lines& l, const RingNames& r, const std::string& k) {
  const std::string kp = l.Add("kp", "u32[]", absl::StrCat("add(", k, ", ", r.pos, ")"));
  const std::string q = l.Add("q", "u32[]", absl::StrCat("remainder(", kp, ", ", r.n, ")"));
  const std::string ds = l.Add("off.ds", "s32[1]",
                               absl::StrCat("dynamic-slice(", r.offs, ", ", q, "), dynamic_slice_sizes={1}"));
  return l.Add("off", "s32[]", absl::StrCat("reshape(", ds, ")"));
}

// Offsets operand list of rank `rank` with `off` at `dim`, zero elsewhere.
std::string Offsets(const RingNames& r, size_t rank, int64_t dim, const std::string& off) {
  std::vector<std::string> o(rank, r.zero);
  o[static_cast<size_t>(dim)] = off;
  return absl::StrJoin(o, ", ");
}

std::string DynamicSlice(Lines& l, const std::string& type, const std::vector<int64_t>& dims,
                         const std::string& v, const RingNames& r, int64_t dim, int64_t block,
                         const std::string& off) {
  std::vector<int64_t> sizes = dims;
  sizes[static_cast<size_t>(dim)] = block;
  return l.Add("slice", Shape(type, sizes),
               absl::StrCat("dynamic-slice(", v, ", ", Offsets(r, dims.size(), dim, off),
                            "), dynamic_slice_sizes={", IntList(sizes), "}"));
}

// A computation `name { window = parameter(0); ROOT collective-permute or the parameter }`.
std::string GuardBranch(HloTextBuilder& b, const std::string& shape, const std::string& pairs,
                        bool permute) {
  const std::string hint = permute ? "window_collective_permute" : "last_iteration_noop";
  const std::string pname = b.FreshName(absl::StrCat(hint, ".window"));
  std::string body;
  if (permute) {
    body = absl::StrCat("  ", pname, " = ", shape, " parameter(0)\n  ROOT ",
                        b.FreshName(absl::StrCat(hint, ".permuted")), " = ", shape,
                        " collective-permute(", pname, "), channel_id=", b.NextChannel(),
                        ", source_target_pairs=", pairs, "\n");
  } else {
    body = absl::StrCat("  ROOT ", pname, " = ", shape, " parameter(0)\n");
  }
  return b.AddComputation(hint, body, "");
}

}  // namespace

void MotifXlaLoop(MotifContext& ctx) {
  ChoiceSource& c = ctx.choices();
  HloTextBuilder& b = ctx.builder();
  const int64_t P = ctx.num_partitions();
  const int64_t n = ctx.Ring();
  Groups g = ctx.MakeGroups(n, /*allow_empty=*/false, /*allow_channel_only=*/true);
  const std::string wide = ctx.Wide();
  Plan p = MakePlan(ctx, n);
  const std::string rt = ctx.ResultType(wide);
  std::string ld, rd;
  const bool fp8 = c.Percent(50);  // the operands dequantized FP8 (the handler's FP8 shift)
  Val lhs = ctx.Operand(wide, p.lhs, fp8 ? 90 : 10, 0, &ld);
  Val rhs = ctx.Operand(wide, p.rhs, fp8 ? 90 : 10, 0, &rd);
  const bool is_ag = p.kind != Kind::kReduceScatter;
  const bool cache_user = is_ag && c.Percent(35);  // a second all-gather of the windowed shard
  const bool result_unread = cache_user && c.Percent(30);
  const char* kinds[] = {"non-contracting", "contracting", "batch", "reduce-scatter"};
  const std::string line =
      absl::StrCat("xla-loop ", kinds[static_cast<int>(p.kind)], " N=", n, " P=", P, " ", g.form,
                   p.unrolled ? " unrolled" : " rolled", is_ag ? (p.windowed ? " rhs" : " lhs") : "",
                   " lhs=", ld, " rhs=", rd, " ", wide, "->", rt,
                   cache_user ? " cache-user" : "", result_unread ? " result-unread" : "");
  const Val& win = p.windowed == 0 ? lhs : rhs;
  // The windowed operand's gathered dim (AG) and its shape after gathering.
  int64_t gathered_dim = 0;
  if (p.kind == Kind::kNonContracting) gathered_dim = p.windowed == 0 ? 0 : 1;
  if (p.kind == Kind::kContracting) gathered_dim = p.windowed == 0 ? 1 : 0;
  if (p.kind == Kind::kBatch) gathered_dim = 0;
  std::vector<int64_t> gathered = win.dims;
  gathered[static_cast<size_t>(gathered_dim)] *= n;
  auto ag_attrs = [&] {
    return absl::StrCat("channel_id=", b.NextChannel(), ", replica_groups=", g.text,
                        ", dimensions={", gathered_dim, "}",
                        g.global_ids ? ", use_global_device_ids=true" : "");
  };

  if (ctx.options().xla_loops_as_plain) {
    // The program the loop computes: all-gather + dot, or dot + reduce-scatter.
    Val res;
    if (is_ag) {
      Val ag = b.Op("all-gather", win.type, gathered, {win}, ag_attrs(), "ag");
      res = p.windowed == 0 ? b.Op("dot", rt, p.out, {ag, rhs}, p.dot_attrs, "dot")
                            : b.Op("dot", rt, p.out, {lhs, ag}, p.dot_attrs, "dot");
    } else {
      std::vector<int64_t> full = p.out;
      full[static_cast<size_t>(p.out_dim)] *= n;
      Val d = b.Op("dot", rt, full, {lhs, rhs}, p.dot_attrs, "dot");
      res = b.Op("reduce-scatter", rt, p.out, {d},
                 absl::StrCat("channel_id=", b.NextChannel(), ", replica_groups=", g.text,
                              g.global_ids ? ", use_global_device_ids=true" : "", ", dimensions={",
                              p.out_dim, "}, to_apply=", b.Reducer("add", rt)),
                 "rs");
    }
    if (!result_unread) ctx.AddOutput(ctx.Epilogue(res));
    if (cache_user) {
      Val ag = b.Op("all-gather", win.type, gathered, {win}, ag_attrs(), "ag");
      Val w2 = ctx.Operand(wide, p.windowed == 0 ? p.rhs : p.lhs, fp8 ? 90 : 10, 0, &rd);
      ctx.AddOutput(p.windowed == 0 ? b.Op("dot", rt, p.out, {ag, w2}, p.dot_attrs, "dot")
                                    : b.Op("dot", rt, p.out, {w2, ag}, p.dot_attrs, "dot"));
    }
    ctx.AddMotif(line + " (plain)");
    return;
  }

  const std::string ls = lhs.Shape(), rs = rhs.Shape(), os = Shape(rt, p.out);
  const std::string tuple_shape = absl::StrCat("(", ls, ", ", rs, ", ", os, ", ", os, ", u32[])");
  const std::string body_name = b.FreshName(is_ag ? "windowed_dot_general_body_ag" : "windowed_dot_general_body_rs");
  const std::string cond_name = b.FreshName(is_ag ? "windowed_dot_general_cond_ag" : "windowed_dot_general_cond_rs");
  Lines l(absl::StrCat(body_name, "."));
  const std::string param = l.Add("param", tuple_shape, "parameter(0)");
  auto gte = [&](int i, const std::string& shape, const std::string& hint) {
    return l.Add(hint, shape, absl::StrCat("get-tuple-element(", param, "), index=", i));
  };
  const std::string L = gte(0, ls, "lhs"), R = gte(1, rs, "rhs"), O = gte(2, os, "out"),
                    E = gte(3, os, "extra"), K = gte(4, "u32[]", "k");
  RingNames r = EmitRing(l, g, P, p.block);
  const std::string minus1 = g.ShiftPairs(-1);
  std::string root;
  int64_t trips = 0;
  if (is_ag) {
    const std::string& ws = p.windowed == 0 ? ls : rs;
    // One step: the dot of `window` merged into `acc` at the block of counter `kk`.
    auto step = [&](const std::string& window, const std::string& kk, const std::string& acc) {
      const std::string off = EmitOffset(l, r, kk);
      std::string a = p.windowed == 0 ? window : L, bb = p.windowed == 0 ? R : window;
      if (p.kind == Kind::kContracting || p.kind == Kind::kBatch) {
        const std::string& stat = p.windowed == 0 ? R : L;
        const Val& sv = p.windowed == 0 ? rhs : lhs;
        const std::string sl = DynamicSlice(l, sv.type, sv.dims, stat, r, p.slice_dim, p.block, off);
        (p.windowed == 0 ? bb : a) = sl;
      }
      std::vector<int64_t> dot_dims = p.out;
      if (p.kind != Kind::kContracting) dot_dims[static_cast<size_t>(p.out_dim)] = p.block;
      const std::string d = l.Add("dot", Shape(rt, dot_dims),
                                  absl::StrCat("dot(", a, ", ", bb, "), ", p.dot_attrs));
      if (p.kind == Kind::kContracting) return l.Add("acc", os, absl::StrCat("add(", acc, ", ", d, ")"));
      return l.Add("acc", os, absl::StrCat("dynamic-update-slice(", acc, ", ", d, ", ",
                                           Offsets(r, p.out.size(), p.out_dim, off), ")"));
    };
    const std::string& w0 = p.windowed == 0 ? L : R;
    if (p.unrolled) {
      const std::string w1 = l.Add("window", ws, absl::StrCat("collective-permute(", w0, "), channel_id=",
                                                              b.NextChannel(), ", source_target_pairs=", minus1));
      const std::string a0 = step(w0, K, O);
      const std::string k1 = l.Add("k", "u32[]", absl::StrCat("add(", K, ", ", r.one, ")"));
      const std::string w2 = l.Add("window", ws, absl::StrCat("collective-permute(", w1, "), channel_id=",
                                                              b.NextChannel(), ", source_target_pairs=", minus1));
      const std::string a1 = step(w1, k1, a0);
      const std::string k2 = l.Add("k", "u32[]", absl::StrCat("add(", k1, ", ", r.one, ")"));
      root = l.Root(tuple_shape, absl::StrCat("tuple(", p.windowed == 0 ? w2 : L, ", ",
                                              p.windowed == 0 ? R : w2, ", ", a1, ", ", E, ", ", k2, ")"));
      trips = n;  // the counter advances by 2: N/2 trips
    } else {
      const std::string a0 = step(w0, K, O);
      const std::string k1 = l.Add("k", "u32[]", absl::StrCat("add(", K, ", ", r.one, ")"));
      const std::string more = l.Add("more", "pred[]", absl::StrCat("compare(", k1, ", ", r.n, "), direction=LT"));
      const std::string tc = GuardBranch(b, ws, minus1, true), fc = GuardBranch(b, ws, "", false);
      const std::string w1 = l.Add("window", ws, absl::StrCat("conditional(", more, ", ", w0, ", ", w0,
                                                              "), true_computation=", tc,
                                                              ", false_computation=", fc));
      root = l.Root(tuple_shape, absl::StrCat("tuple(", p.windowed == 0 ? w1 : L, ", ",
                                              p.windowed == 0 ? R : w1, ", ", a0, ", ", E, ", ", k1, ")"));
      trips = n;
    }
  } else {
    // RS: the partial dot of the block at counter `kk`.
    auto partial = [&](const std::string& kk) {
      const std::string off = EmitOffset(l, r, kk);
      const Val& sv = p.windowed == 0 ? lhs : rhs;
      const std::string sl = DynamicSlice(l, sv.type, sv.dims, p.windowed == 0 ? L : R, r, p.slice_dim, p.block, off);
      return l.Add("partial", os, absl::StrCat("dot(", p.windowed == 0 ? sl : L, ", ",
                                               p.windowed == 0 ? R : sl, "), ", p.dot_attrs));
    };
    if (p.unrolled) {
      const std::string minus2 = g.ShiftPairs(-2);
      const std::string A = l.Add("recvA", os, absl::StrCat("collective-permute(", O, "), channel_id=",
                                                            b.NextChannel(), ", source_target_pairs=", minus2));
      const std::string sb = l.Add("sumB", os, absl::StrCat("add(", E, ", ", partial(K), ")"));
      const std::string B = l.Add("sendB", os, absl::StrCat("collective-permute(", sb, "), channel_id=",
                                                            b.NextChannel(), ", source_target_pairs=", minus2));
      const std::string two = l.Add("two", "u32[]", "constant(2)");
      const std::string k2 = l.Add("k", "u32[]", absl::StrCat("add(", K, ", ", two, ")"));
      const std::string k3 = l.Add("k", "u32[]", absl::StrCat("add(", k2, ", ", r.one, ")"));
      const std::string na = l.Add("newA", os, absl::StrCat("add(", A, ", ", partial(k3), ")"));
      root = l.Root(tuple_shape, absl::StrCat("tuple(", L, ", ", R, ", ", na, ", ", B, ", ", k2, ")"));
      trips = n;  // the counter advances by 2: N/2 trips
    } else {
      const std::string k1 = l.Add("k", "u32[]", absl::StrCat("add(", K, ", ", r.one, ")"));
      const std::string acc = l.Add("acc", os, absl::StrCat("add(", O, ", ", partial(k1), ")"));
      const std::string more = l.Add("more", "pred[]", absl::StrCat("compare(", k1, ", ", r.n, "), direction=LT"));
      const std::string tc = GuardBranch(b, os, minus1, true), fc = GuardBranch(b, os, "", false);
      const std::string an = l.Add("acc", os, absl::StrCat("conditional(", more, ", ", acc, ", ", acc,
                                                           "), true_computation=", tc,
                                                           ", false_computation=", fc));
      root = l.Root(tuple_shape, absl::StrCat("tuple(", L, ", ", R, ", ", an, ", ", E, ", ", k1, ")"));
      trips = n;
    }
  }
  (void)root;
  b.AddNamedComputation(body_name, l.text());
  {
    Lines cl(absl::StrCat(cond_name, "."));
    const std::string cp = cl.Add("param", tuple_shape, "parameter(0)");
    const std::string ck = cl.Add("k", "u32[]", absl::StrCat("get-tuple-element(", cp, "), index=4"));
    const std::string ct = cl.Add("trips", "u32[]", absl::StrCat("constant(", trips, ")"));
    cl.Root("pred[]", absl::StrCat("compare(", ck, ", ", ct, "), direction=LT"));
    b.AddNamedComputation(cond_name, cl.text());
  }
  // Around the loop (§5).
  Val z = b.Splat(rt, "0", p.out);
  Val z2 = b.Splat(rt, "0", p.out);
  Val k0 = b.ScalarConstant("u32", "0", "k0");
  const std::string init = b.OpRaw("tuple", tuple_shape, {lhs.name, rhs.name, z.name, z2.name, k0.name}, "",
                                   "windowed_init");
  const std::string loop = b.OpRaw("while", tuple_shape, {init},
                                   absl::StrCat("condition=", cond_name, ", body=", body_name), "windowed_loop");
  Val res = b.Op("get-tuple-element", rt, p.out, {Val{loop, rt, {}}}, "index=2", "windowed_result");
  if (!is_ag && p.unrolled) {
    Val e3 = b.Op("get-tuple-element", rt, p.out, {Val{loop, rt, {}}}, "index=3", "windowed_extra");
    Val sh = b.Op("collective-permute", rt, p.out, {res},
                  absl::StrCat("channel_id=", b.NextChannel(), ", source_target_pairs=", g.ShiftPairs(1)),
                  "windowed_shift");
    res = b.Op("add", rt, p.out, {sh, e3}, "", "windowed_sum");
  }
  if (!result_unread) ctx.AddOutput(ctx.Epilogue(res));
  if (cache_user) {
    // The same shard gathered for another dot (the handler's activation cache).
    Val ag = b.Op("all-gather", win.type, gathered, {win}, ag_attrs(), "ag");
    Val w2 = ctx.Operand(wide, p.windowed == 0 ? p.rhs : p.lhs, fp8 ? 90 : 10, 0, &rd);
    ctx.AddOutput(p.windowed == 0 ? b.Op("dot", rt, p.out, {ag, w2}, p.dot_attrs, "dot")
                                  : b.Op("dot", rt, p.out, {w2, ag}, p.dot_attrs, "dot"));
  }
  ctx.AddMotif(line);
}

}  // namespace weave::fuzz
