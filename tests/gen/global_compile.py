#!/usr/bin/env python3
"""Global modules (as JAX emits them: global shapes, sharded parameters, `Sharding` calls) for
the end-to-end tests of `weave compile` on global input: the forms of XLA's windowed einsum e2e
tests (xla/backends/gpu/tests/collective_ops_e2e_test.cc, WindowedEinsumE2E*), with our own
names and shapes, over any partition count and operand type.

  global_compile.py FORM --partitions N [--dtype bf16|fp8] [--fp8 f8e4m3fn|f8e5m2]

FORMs:
  ag-multi    the sequence-sharded activation read by two column-parallel dots (one all-gather,
              two consumers), their sum row-parallel back to the sequence shards (reduce-scatter)
  ag          one column-parallel dot on the gathered activation
  ag-reshape  as ag, the weight reshaped ([2,K/2,F] -> [K,F]) between its dequantization and
              the dot
  rs          a row-parallel dot whose output is sequence-sharded (reduce-scatter)
  partial-2d  a 2-D mesh (2 x N/2), activation batch x sequence sharded, weight column-sharded
              and partially replicated, output batch x column sharded
The examples of ../shared/specs/spmd-partitioner.md §7 at any partition count:
  e1b         sequence-parallel MLP: all-gather of x for the column-parallel dot, the
              row-parallel dot reduce-scattered back to the sequence shards
  e2          attention: Q, K and V read one gathered activation, heads local, the output
              projection reduce-scattered
  e3b         FP8 dot on FP8 parameters (as in the DeepSeek dump): the FP8 activation gathered
  e4, e4b     batch x tensor on a 2 x N/2 mesh: the second dot all-reduced (e4) or
              reduce-scattered (e4b) within the tensor groups
  e5          an uneven dim (10 columns over N): masks before the reduce and the second dot
  e6          e4b in Shardy form (xla.sdy.meshes, sdy shardings, FuncResultSharding)
  e8b         a manual region: FullToShard, the user's all-reduce, ShardToFull
Dot handler order and gather rules (issue 16):
  col-big-act the column-parallel dot of the e2e forms with an activation 16x larger than the
              weight: XLA's handler still gathers the activation (base case: the weight matches
              the output on its non-contracting dim), never the weight
  e1b-nolook  e1b without h's sharding: propagation's lookahead (the root's row sharding down
              the single-user chain) keeps h row-sharded, both weights gathered (FSDP-style)
  partial     XLA's WindowedEinsumE2EPartial form in f32 (2 x N/2 mesh: activation batch x
              sequence sharded, weight column-sharded and partially replicated, output batch x
              column sharded): the sequence all-gather runs within each batch half
  gather-vocab  an embedding lookup from a vocab-sharded table (uneven vocab: 8N+3 rows) with
              replicated ids: masked local gather + all-reduce
  gather-batch  the same table replicated, ids sharded on the batch: per-partition gather
  gather-2d   table vocab-sharded over the model axis of a 2 x N/2 mesh, ids over the data axis
  scatter-grad  the embedding gradient: batch-sharded ids and updates scattered (add) into a
              replicated table: partial scatters + all-reduce
  scatter-vocab updates scattered (add) into a vocab-sharded table with replicated ids: local
--dtype fp8: every sharded operand is FP8 (f8e4m3fn by default) dequantized by a bf16 scale
(convert, multiply by the broadcast scale), as the FP8 e2e tests; bf16: plain bf16 operands
(e5 and e8b are f32 with --dtype bf16 as in the spec; e3b is always FP8).
Shapes scale with N so that every sharded dim divides. Writes HLO text to stdout.
"""
import argparse


class Module:
    def __init__(self, name, n, dtype, fp8):
        self.name, self.n, self.dtype, self.fp8 = name, n, dtype, fp8
        self.params, self.body = [], []

    def operand(self, name, shape, sharding):
        """A bf16 operand: a parameter, or an FP8 parameter dequantized by a scale."""
        dims = ",".join(str(d) for d in shape)
        i = len(self.params)
        if self.dtype == "bf16":
            self.params.append(f"  {name} = bf16[{dims}] parameter({i}), sharding={sharding}")
            return name
        self.params.append(f"  {name}_q = {self.fp8}[{dims}] parameter({i}), sharding={sharding}")
        self.params.append(f"  {name}_s = bf16[] parameter({i + 1}), sharding={{replicated}}")
        self.body += [
            f"  {name}_c = bf16[{dims}] convert({name}_q)",
            f"  {name}_b = bf16[{dims}] broadcast({name}_s), dimensions={{}}",
            f"  {name} = bf16[{dims}] multiply({name}_b, {name}_c)",
        ]
        return name

    def text(self):
        return "\n".join([f"HloModule {self.name}_n{self.n}_{self.dtype}, num_partitions={self.n}",
                          "", "ENTRY main {"] + self.params + self.body + ["}", ""])


def dot(out, shape, a, b, lc, rc, extra=""):
    dims = ",".join(str(d) for d in shape)
    return f"  {out} = bf16[{dims}] dot({a}, {b}), lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{{rc}}}{extra}"


def build(form, n, dtype, fp8):
    m = Module(form.replace("-", "_"), n, dtype, fp8)
    b, s, d, f = 2, 4 * n, 48, 16 * n
    iota = f"<=[{n}]"
    if form in ("ag-multi", "ag", "ag-reshape"):
        x = m.operand("act", [b, s, d], f"{{devices=[1,{n},1]{iota}}}")
        if form == "ag-reshape":
            w = m.operand("w_up", [2, d // 2, f], f"{{devices=[1,1,{n}]{iota}}}")
            m.body.append(f"  w_up_r = bf16[{d},{f}] reshape({w})")
            w = "w_up_r"
        else:
            w = m.operand("w_up", [d, f], f"{{devices=[1,{n}]{iota}}}")
        m.body.append(dot("up", [b, s, f], x, w, 2, 0))
        if form != "ag-multi":
            m.body.append(f'  ROOT out = bf16[{b},{s},{f}] custom-call(up), custom_call_target="Sharding", sharding={{devices=[1,1,{n}]{iota}}}')
            return m.text()
        m.body.append(f'  up_c = bf16[{b},{s},{f}] custom-call(up), custom_call_target="Sharding", sharding={{devices=[1,1,{n}]{iota}}}')
        w2 = m.operand("w_gate", [d, f], f"{{devices=[1,{n}]{iota}}}")
        m.body.append(dot("gate", [b, s, f], x, w2, 2, 0))
        m.body.append(f"  both = bf16[{b},{s},{f}] add(up_c, gate)")
        w3 = m.operand("w_down", [f, d], f"{{devices=[{n},1]{iota}}}")
        m.body.append(dot("down", [b, s, d], "both", w3, 2, 0))
        m.body.append(f'  ROOT out = bf16[{b},{s},{d}] custom-call(down), custom_call_target="Sharding", sharding={{devices=[1,{n},1]{iota}}}')
        return m.text()
    if form == "rs":
        x = m.operand("hidden", [b, s, f], f"{{devices=[1,1,{n}]{iota}}}")
        w = m.operand("w_out", [f, d], f"{{devices=[{n},1]{iota}}}")
        m.body.append(dot("proj", [b, s, d], x, w, 2, 0))
        m.body.append(f'  ROOT out = bf16[{b},{s},{d}] custom-call(proj), custom_call_target="Sharding", sharding={{devices=[1,{n},1]{iota}}}')
        return m.text()
    if form == "partial-2d":
        if n < 4:
            raise SystemExit("partial-2d needs --partitions >= 4 (a 2 x N/2 mesh)")
        t = n // 2
        bb, ss, ff = 4, 4 * t, 16 * t
        x = m.operand("act", [bb, ss, d], f"{{devices=[2,{t},1]{iota}}}")
        w = m.operand("w_up", [d, ff], f"{{devices=[1,{t},2]<=[2,{t}]T(1,0) last_tile_dim_replicate}}")
        m.body.append(dot("up", [bb, ss, ff], x, w, 2, 0))
        m.body.append(f'  ROOT out = bf16[{bb},{ss},{ff}] custom-call(up), custom_call_target="Sharding", sharding={{devices=[2,1,{t}]{iota}}}')
        return m.text()
    if form == "col-big-act":
        x = m.operand("act", [2, 64 * n, 32], f"{{devices=[1,{n},1]{iota}}}")
        w = m.operand("w_up", [32, 8 * n], f"{{devices=[1,{n}]{iota}}}")
        m.body.append(dot("up", [2, 64 * n, 8 * n], x, w, 2, 0))
        m.body.append(f'  ROOT out = bf16[2,{64 * n},{8 * n}] custom-call(up), custom_call_target="Sharding", sharding={{devices=[1,1,{n}]{iota}}}')
        return m.text()
    if form == "e1b-nolook":
        x = m.operand("x", [4 * n, 64], f"{{devices=[{n},1]{iota}}}")
        w1 = m.operand("w1", [64, 16 * n], f"{{devices=[1,{n}]{iota}}}")
        w2 = m.operand("w2", [16 * n, 64], f"{{devices=[{n},1]{iota}}}")
        m.body.append(dot("h", [4 * n, 16 * n], x, w1, 1, 0))
        m.body.append(f"  g = bf16[{4 * n},{16 * n}] tanh(h)")
        m.body.append(dot("y", [4 * n, 64], "g", w2, 1, 0))
        m.body.append(f'  ROOT o = bf16[{4 * n},64] custom-call(y), custom_call_target="Sharding", sharding={{devices=[{n},1]{iota}}}')
        return m.text()
    if form == "partial":
        if n < 4:
            raise SystemExit("partial needs --partitions >= 4 (a 2 x N/2 mesh)")
        t = n // 2
        if dtype == "bf16":
            m.params = [f"  seq_act = f32[4,{8 * t},40] parameter(0), sharding={{devices=[2,{t},1]{iota}}}",
                        f"  w_col = f32[40,{12 * t}] parameter(1), sharding={{devices=[1,{t},2]<=[2,{t}]T(1,0) last_tile_dim_replicate}}"]
            ty, x, w = "f32", "seq_act", "w_col"
        else:
            ty = "bf16"
            x = m.operand("seq_act", [4, 8 * t, 40], f"{{devices=[2,{t},1]{iota}}}")
            w = m.operand("w_col", [40, 12 * t], f"{{devices=[1,{t},2]<=[2,{t}]T(1,0) last_tile_dim_replicate}}")
        m.body.append(f"  proj = {ty}[4,{8 * t},{12 * t}] dot({x}, {w}), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}")
        m.body.append(f'  ROOT out = {ty}[4,{8 * t},{12 * t}] custom-call(proj), custom_call_target="Sharding", sharding={{devices=[2,1,{t}]{iota}}}')
        return m.text()
    if form in ("gather-vocab", "gather-batch", "gather-2d"):
        if form == "gather-2d" and n < 4:
            raise SystemExit("gather-2d needs --partitions >= 4 (a 2 x N/2 mesh)")
        t = n // 2
        vocab, width = 8 * n + 3, 32
        rows = 4 * n if form != "gather-vocab" else 6
        table_s = {"gather-vocab": f"{{devices=[{n},1]{iota}}}", "gather-batch": "{replicated}",
                   "gather-2d": f"{{devices=[{t},1,2]<=[2,{t}]T(1,0) last_tile_dim_replicate}}"}[form]
        ids_s = {"gather-vocab": "{replicated}", "gather-batch": f"{{devices=[{n},1]{iota}}}",
                 "gather-2d": f"{{devices=[2,1,{t}]{iota} last_tile_dim_replicate}}"}[form]
        out_s = {"gather-vocab": "{replicated}", "gather-batch": f"{{devices=[{n},1,1]{iota}}}",
                 "gather-2d": f"{{devices=[2,1,1,{t}]{iota} last_tile_dim_replicate}}"}[form]
        table = m.operand("table", [vocab, width], table_s)
        # Ids spread over the whole vocab and past both ends (the evaluator's random integers
        # are in [0, 8)): raw * (N + 1) - 2, so that gather's clamping and every shard are hit.
        m.params.append(f"  ids_raw = s32[{rows},5] parameter({len(m.params)}), sharding={ids_s}")
        m.body += [f"  spread = s32[] constant({n + 1})", "  shift = s32[] constant(2)",
                   f"  spread_b = s32[{rows},5] broadcast(spread), dimensions={{}}",
                   f"  shift_b = s32[{rows},5] broadcast(shift), dimensions={{}}",
                   f"  ids_m = s32[{rows},5] multiply(ids_raw, spread_b)",
                   f"  ids = s32[{rows},5] subtract(ids_m, shift_b)"]
        m.body.append(f"  emb = bf16[{rows},5,{width}] gather({table}, ids), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=2, slice_sizes={{1,{width}}}")
        m.body.append(f"  act = bf16[{rows},5,{width}] tanh(emb)")
        m.body.append(f'  ROOT out = bf16[{rows},5,{width}] custom-call(act), custom_call_target="Sharding", sharding={out_s}')
        return m.text()
    if form in ("scatter-grad", "scatter-vocab"):
        vocab, width = 8 * n + 3, 32
        rows = 4 * n
        grad = form == "scatter-grad"
        table = m.operand("table", [vocab, width], "{replicated}" if grad else f"{{devices=[{n},1]{iota}}}")
        upd = m.operand("upd", [rows, 5, width], f"{{devices=[{n},1,1]{iota}}}" if grad else "{replicated}")
        ids_s = f"{{devices=[{n},1]{iota}}}" if grad else "{replicated}"
        m.params.append(f"  ids_raw = s32[{rows},5] parameter({len(m.params)}), sharding={ids_s}")
        m.body += [f"  spread = s32[] constant({n + 1})", "  shift = s32[] constant(2)",
                   f"  spread_b = s32[{rows},5] broadcast(spread), dimensions={{}}",
                   f"  shift_b = s32[{rows},5] broadcast(shift), dimensions={{}}",
                   f"  ids_m = s32[{rows},5] multiply(ids_raw, spread_b)",
                   f"  ids = s32[{rows},5] subtract(ids_m, shift_b)",
                   f"  acc = bf16[{vocab},{width}] scatter({table}, ids, {upd}), update_window_dims={{2}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=2, to_apply=addb",
                   f'  ROOT out = bf16[{vocab},{width}] custom-call(acc), custom_call_target="Sharding", sharding={"{replicated}" if grad else f"{{devices=[{n},1]{iota}}}"}']
        text = m.text()
        add = "addb {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT s = bf16[] add(a, b)\n}\n\n"
        return text.replace("ENTRY main {", add + "ENTRY main {", 1)
    if form == "e1b":
        x = m.operand("x", [4 * n, 64], f"{{devices=[{n},1]{iota}}}")
        w1 = m.operand("w1", [64, 16 * n], f"{{devices=[1,{n}]{iota}}}")
        w2 = m.operand("w2", [16 * n, 64], f"{{devices=[{n},1]{iota}}}")
        m.body.append(dot("h", [4 * n, 16 * n], x, w1, 1, 0, f", sharding={{devices=[1,{n}]{iota}}}"))
        m.body.append(f"  g = bf16[{4 * n},{16 * n}] tanh(h)")
        m.body.append(dot("y", [4 * n, 64], "g", w2, 1, 0))
        m.body.append(f'  ROOT o = bf16[{4 * n},64] custom-call(y), custom_call_target="Sharding", sharding={{devices=[{n},1]{iota}}}')
        return m.text()
    if form == "e2":
        seq, heads = 8 * n, 2 * n
        x = m.operand("x", [2, seq, 64], f"{{devices=[1,{n},1]{iota}}}")
        ws = [m.operand(w, [64, heads, 16], f"{{devices=[1,{n},1]{iota}}}") for w in ("wq", "wk", "wv")]
        wo = m.operand("wo", [heads, 16, 64], f"{{devices=[{n},1,1]{iota}}}")
        qkv = f"bf16[2,{seq},{heads},16]"
        for name, w in zip("qkv", ws):
            m.body.append(f"  {name} = {qkv} dot({x}, {w}), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,1,{n},1]{iota}}}")
        m.body += [
            f"  s = f32[2,{heads},{seq},{seq}] dot(q, k), lhs_batch_dims={{0,2}}, rhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, rhs_contracting_dims={{3}}",
            f"  p = bf16[2,{heads},{seq},{seq}] convert(s)",
            f"  o = bf16[2,{heads},{seq},16] dot(p, v), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, rhs_contracting_dims={{1}}",
            f"  ROOT y = bf16[2,{seq},64] dot(o, {wo}), lhs_contracting_dims={{1,3}}, rhs_contracting_dims={{0,1}}, sharding={{devices=[1,{n},1]{iota}}}",
        ]
        return m.text()
    if form == "e3b":
        m.params = [f"  xq = {fp8}[{8 * n},64] parameter(0), sharding={{devices=[{n},1]{iota}}}",
                    f"  wq = {fp8}[64,{32 * n}] parameter(1), sharding={{devices=[1,{n}]{iota}}}"]
        m.body = [f"  ROOT y = bf16[{8 * n},{32 * n}] dot(xq, wq), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,{n}]{iota}}}"]
        return m.text()
    if form in ("e4", "e4b", "e6"):
        if n < 4:
            raise SystemExit(f"{form} needs --partitions >= 4 (a 2 x N/2 mesh)")
        t = n // 2
        rep = "last_tile_dim_replicate"
        if form == "e6":
            m.name = "e6"
            mesh = f'frontend_attributes={{xla.sdy.meshes={{mesh = #sdy.mesh<["data"=2, "model"={t}]>}}}}'
            sdy = lambda dims: 'frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [' + dims + ']>"}'
            x = m.operand("x", [8, 16, 64], "{replicated}")
            w1 = m.operand("w1", [64, 32 * t], "{replicated}")
            w2 = m.operand("w2", [32 * t, 64], "{replicated}")
            shardings = {"x": r'{\"data\"}, {}, {}', "w1": r'{}, {\"model\"}', "w2": r'{\"model\"}, {}'}
            fixed = []
            for line in m.params:
                name = line.split("=")[0].strip()
                base = name[:-2] if name.endswith("_q") else name
                if base in shardings and not name.endswith("_s"):
                    line = line.replace("sharding={replicated}", sdy(shardings[base]))
                else:
                    line = line.replace(", sharding={replicated}", "")
                fixed.append(line)
            m.params = fixed
        else:
            x = m.operand("x", [8, 16, 64], f"{{devices=[2,1,1,{t}]{iota} {rep}}}")
            w1 = m.operand("w1", [64, 32 * t], f"{{devices=[1,{t},2]<=[2,{t}]T(1,0) {rep}}}")
            w2 = m.operand("w2", [32 * t, 64], f"{{devices=[{t},1,2]<=[2,{t}]T(1,0) {rep}}}")
        m.body.append(dot("h", [8, 16, 32 * t], x, w1, 2, 0))
        m.body.append(f"  g = bf16[8,16,{32 * t}] multiply(h, h)")
        if form == "e4":
            m.body.append(dot("y", [8, 16, 64], "g", w2, 2, 0, f", sharding={{devices=[2,1,1,{t}]{iota} {rep}}}").replace("  y =", "  ROOT y ="))
        elif form == "e4b":
            m.body.append(dot("y", [8, 16, 64], "g", w2, 2, 0, f", sharding={{devices=[2,{t},1]{iota}}}").replace("  y =", "  ROOT y ="))
        else:
            per_value = r'frontend_attributes={xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{\"data\"}, {\"model\"}, {}]>]>"}'
            m.body.append(dot("y", [8, 16, 64], "g", w2, 2, 0))
            m.body.append(f'  ys = bf16[8,16,64] custom-call(y), custom_call_target="Sharding", {per_value}')
            m.body.append(f'  ROOT r = bf16[8,16,64] custom-call(ys), custom_call_target="xla.sdy.FuncResultSharding", {per_value}')
            text = m.text()
            return text.replace(f"num_partitions={n}", f"num_partitions={n}, {mesh}", 1)
        return m.text()
    if form == "e5":
        t = "f32" if dtype == "bf16" else "bf16"
        m.dtype = dtype
        x = f"  x = {t}[8,32] parameter(0), sharding={{replicated}}"
        if dtype == "bf16":
            m.params = [x, f"  w1 = f32[32,10] parameter(1), sharding={{devices=[1,{n}]{iota}}}",
                        f"  w2 = f32[10,32] parameter(2), sharding={{devices=[{n},1]{iota}}}"]
        else:
            m.params = [x]
            m.operand("w1", [32, 10], f"{{devices=[1,{n}]{iota}}}")
            m.operand("w2", [10, 32], f"{{devices=[{n},1]{iota}}}")
        m.body += [
            f"  h = {t}[8,10] dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
            f"  e = {t}[8,10] exponential(h)",
            f"  c0 = {t}[] constant(0)",
            f"  s = {t}[8] reduce(e, c0), dimensions={{1}}, to_apply=addf",
            f"  y = {t}[8,32] dot(e, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
            f"  ROOT out = ({t}[8], {t}[8,32]) tuple(s, y), sharding={{{{replicated}}, {{replicated}}}}",
        ]
        text = m.text()
        add = f"addf {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] add(a, b)\n}}\n\n"
        return text.replace("ENTRY main {", add + "ENTRY main {", 1)
    if form == "e8b":
        t = "f32" if dtype == "bf16" else "bf16"
        rows = 4 * n
        if dtype == "bf16":
            m.params = [f"  x = f32[{rows},64] parameter(0), sharding={{replicated}}"]
        else:
            m.operand("x", [rows, 64], "{replicated}")
        m.body += [
            f'  xs = {t}[{rows},64] custom-call(x), custom_call_target="Sharding", sharding={{devices=[{n},1]{iota}}}',
            f'  xm = {t}[4,64] custom-call(xs), custom_call_target="SPMDFullToShardShape", sharding={{manual}}',
            f"  two = {t}[] constant(2)",
            f"  twob = {t}[4,64] broadcast(two), dimensions={{}}",
            f"  mm = {t}[4,64] multiply(xm, twob)",
            f"  r = {t}[4,64] all-reduce(mm), channel_id=1, replica_groups={{{{{','.join(str(i) for i in range(n))}}}}}, to_apply=addf",
            f"  o = {t}[4,64] add(r, xm)",
            f'  os = {t}[4,64] custom-call(o), custom_call_target="Sharding", sharding={{manual}}',
            f'  ROOT y = {t}[{rows},64] custom-call(os), custom_call_target="SPMDShardToFullShape", sharding={{devices=[{n},1]{iota}}}',
        ]
        text = m.text()
        add = f"addf {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] add(a, b)\n}}\n\n"
        return text.replace("ENTRY main {", add + "ENTRY main {", 1)
    raise SystemExit(f"unknown form {form}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("form", choices=["ag-multi", "ag", "ag-reshape", "rs", "partial-2d", "e1b",
                                     "col-big-act", "e1b-nolook", "partial", "gather-vocab",
                                     "gather-batch", "gather-2d", "scatter-grad", "scatter-vocab",
                                     "e2", "e3b", "e4", "e4b", "e5", "e6", "e8b"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--fp8", default="f8e4m3fn")
    a = ap.parse_args()
    print(build(a.form, a.partitions, a.dtype, a.fp8), end="")


if __name__ == "__main__":
    main()
