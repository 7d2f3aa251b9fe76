#!/usr/bin/env python3
"""Variants of the global (pre-partitioning) examples of ../shared/specs/spmd-partitioner.md §7
for the spmd-partitioner lit tests: other partition counts, element types and meshes.

  spmd_examples.py e1 --partitions N [--type f32|bf16] [--replicas R]
      MLP, column- then row-parallel. With --replicas R > 1 the weights are tiled N/R ways and
      replicated R ways (a 2-D mesh): the contracting all-reduce runs in groups of N/R.
  spmd_examples.py e3 --partitions N [--fp8 f8e4m3fn|f8e5m2] [--scale bf16|f32]
      FP8-dequantized operands: the row-sharded activation is gathered, the weight stays put.
  spmd_examples.py e7 --partitions N [--type f32|bf16] [--layers L]
      A scan over L stacked layers, data parallel, then the weight gradient (an all-reduce).
  spmd_examples.py e2 --partitions N [--type bf16|f32]
      Attention: Q/K/V read one sequence-sharded activation (one all-gather for the three dots),
      heads local, the output projection reduce-scattered over the sequence.
  spmd_examples.py e4b --partitions N [--type bf16|f32]
      Batch x tensor on a 2 x N/2 mesh; the second dot reduce-scattered over the model axis.
  spmd_examples.py e5 --partitions N
      Uneven dim: 10 hidden columns over N partitions (padding masked before the reduce and the
      contracted dim).

Shapes scale with N so that every sharded dim divides evenly. Writes HLO text to stdout.
"""
import argparse


def e1(n, t, replicas):
    tiles = n // replicas
    f = 16 * tiles
    rep = f"{{devices=[1,{tiles},{replicas}]<=[{n}] last_tile_dim_replicate}}" if replicas > 1 \
        else f"{{devices=[1,{n}]<=[{n}]}}"
    rep2 = f"{{devices=[{tiles},1,{replicas}]<=[{n}] last_tile_dim_replicate}}" if replicas > 1 \
        else f"{{devices=[{n},1]<=[{n}]}}"
    return f"""HloModule e1_n{n}_{t}, num_partitions={n}
ENTRY main {{
  x = {t}[8,32] parameter(0), sharding={{replicated}}
  w1 = {t}[32,{f}] parameter(1), sharding={rep}
  w2 = {t}[{f},32] parameter(2), sharding={rep2}
  h = {t}[8,{f}] dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  g = {t}[8,{f}] tanh(h)
  y = {t}[8,32] dot(g, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT o = {t}[8,32] custom-call(y), custom_call_target="Sharding", sharding={{replicated}}
}}
"""


def e3(n, fp8, scale):
    m = 8 * n
    k = 32
    f = 16 * n
    return f"""HloModule e3_n{n}_{fp8}, num_partitions={n}
ENTRY main {{
  xq = {fp8}[{m},{k}] parameter(0), sharding={{devices=[{n},1]<=[{n}]}}
  sx = {scale}[] parameter(1)
  wq = {fp8}[{k},{f}] parameter(2), sharding={{devices=[1,{n}]<=[{n}]}}
  sw = {scale}[] parameter(3)
  xc = {scale}[{m},{k}] convert(xq)
  xb = {scale}[{m},{k}] broadcast(sx), dimensions={{}}
  x = {scale}[{m},{k}] multiply(xc, xb)
  wc = {scale}[{k},{f}] convert(wq)
  wb = {scale}[{k},{f}] broadcast(sw), dimensions={{}}
  w = {scale}[{k},{f}] multiply(wc, wb)
  ROOT y = {scale}[{m},{f}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,{n}]<=[{n}]}}
}}
"""


def e7(n, t, layers):
    b = 2 * n
    tup = f"(s32[], {t}[{b},16], {t}[{layers},16,16])"
    return f"""HloModule e7_n{n}_{t}, num_partitions={n}
cond {{
  p = {tup} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({layers})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  p = {tup} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = {t}[{b},16] get-tuple-element(p), index=1
  ws = {t}[{layers},16,16] get-tuple-element(p), index=2
  z = s32[] constant(0)
  w = {t}[1,16,16] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={{1,16,16}}
  w2 = {t}[16,16] reshape(w)
  d = {t}[{b},16] dot(h, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  a = {t}[{b},16] tanh(d)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT r = {tup} tuple(i2, a, ws)
}}
ENTRY main {{
  x = {t}[{b},16] parameter(0), sharding={{devices=[{n},1]<=[{n}]}}
  ws = {t}[{layers},16,16] parameter(1), sharding={{replicated}}
  c = s32[] constant(0)
  in = {tup} tuple(c, x, ws)
  lp = {tup} while(in), condition=cond, body=body
  hN = {t}[{b},16] get-tuple-element(lp), index=1
  gw = {t}[16,16] dot(x, hN), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  ROOT o = ({t}[{b},16], {t}[16,16]) tuple(hN, gw), sharding={{{{devices=[{n},1]<=[{n}]}}, {{replicated}}}}
}}
"""


def e2(n, t):
    h = 2 * n
    return f"""HloModule e2_n{n}_{t}, num_partitions={n}
ENTRY main {{
  x = {t}[2,{4*n},32] parameter(0), sharding={{devices=[1,{n},1]<=[{n}]}}
  wq = {t}[32,{h},8] parameter(1), sharding={{devices=[1,{n},1]<=[{n}]}}
  wk = {t}[32,{h},8] parameter(2), sharding={{devices=[1,{n},1]<=[{n}]}}
  wv = {t}[32,{h},8] parameter(3), sharding={{devices=[1,{n},1]<=[{n}]}}
  wo = {t}[{h},8,32] parameter(4), sharding={{devices=[{n},1,1]<=[{n}]}}
  q = {t}[2,{4*n},{h},8] dot(x, wq), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,1,{n},1]<=[{n}]}}
  k = {t}[2,{4*n},{h},8] dot(x, wk), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,1,{n},1]<=[{n}]}}
  v = {t}[2,{4*n},{h},8] dot(x, wv), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}, sharding={{devices=[1,1,{n},1]<=[{n}]}}
  s = f32[2,{h},{4*n},{4*n}] dot(q, k), lhs_batch_dims={{0,2}}, rhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, rhs_contracting_dims={{3}}
  p = {t}[2,{h},{4*n},{4*n}] convert(s)
  o = {t}[2,{h},{4*n},8] dot(p, v), lhs_batch_dims={{0,1}}, rhs_batch_dims={{0,2}}, lhs_contracting_dims={{3}}, rhs_contracting_dims={{1}}
  ROOT y = {t}[2,{4*n},32] dot(o, wo), lhs_contracting_dims={{1,3}}, rhs_contracting_dims={{0,1}}, sharding={{devices=[1,{n},1]<=[{n}]}}
}}
"""


def e4b(n, t):
    m = n // 2
    return f"""HloModule e4b_n{n}_{t}, num_partitions={n}
ENTRY main {{
  x = {t}[4,{4*m},32] parameter(0), sharding={{devices=[2,1,1,{m}]<=[{n}] last_tile_dim_replicate}}
  w1 = {t}[32,{16*m}] parameter(1), sharding={{devices=[1,{m},2]<=[2,{m}]T(1,0) last_tile_dim_replicate}}
  w2 = {t}[{16*m},32] parameter(2), sharding={{devices=[{m},1,2]<=[2,{m}]T(1,0) last_tile_dim_replicate}}
  h = {t}[4,{4*m},{16*m}] dot(x, w1), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  g = {t}[4,{4*m},{16*m}] multiply(h, h)
  ROOT y = {t}[4,{4*m},32] dot(g, w2), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}, sharding={{devices=[2,{m},1]<=[{n}]}}
}}
"""


def e5(n):
    return f"""HloModule e5_n{n}, num_partitions={n}
addf {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[8,32] parameter(0), sharding={{replicated}}
  w1 = f32[32,10] parameter(1), sharding={{devices=[1,{n}]<=[{n}]}}
  w2 = f32[10,32] parameter(2), sharding={{devices=[{n},1]<=[{n}]}}
  h = f32[8,10] dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  e = f32[8,10] exponential(h)
  c0 = f32[] constant(0)
  s = f32[8] reduce(e, c0), dimensions={{1}}, to_apply=addf
  y = f32[8,32] dot(e, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT t = (f32[8], f32[8,32]) tuple(s, y), sharding={{{{replicated}}, {{replicated}}}}
}}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("example", choices=["e1", "e2", "e3", "e4b", "e5", "e7"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--type", default="f32")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--fp8", default="f8e4m3fn")
    ap.add_argument("--scale", default="bf16")
    ap.add_argument("--layers", type=int, default=3)
    a = ap.parse_args()
    if a.example == "e1":
        print(e1(a.partitions, a.type, a.replicas), end="")
    elif a.example == "e2":
        print(e2(a.partitions, a.type), end="")
    elif a.example == "e4b":
        print(e4b(a.partitions, a.type), end="")
    elif a.example == "e5":
        print(e5(a.partitions), end="")
    elif a.example == "e3":
        print(e3(a.partitions, a.fp8, a.scale), end="")
    else:
        print(e7(a.partitions, a.type, a.layers), end="")


if __name__ == "__main__":
    main()
