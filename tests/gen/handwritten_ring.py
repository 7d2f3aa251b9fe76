#!/usr/bin/env python3
"""Generates hand-written collective matmuls: the steps of a ring written out without a while loop
(XLA issues 10640 and 19555), for dot-merger's tests (it must never merge the steps).

  ag: step s computes dot(x_s, w), where x_s is the shard x after s collective-permutes (s -> s-1);
      the N step results are the output tuple.
  rs: the partial result of step s is sent on by a collective-permute and added to step s+1's
      dot(x_{s+1}, w) (N-1 transfers), the reduce-scatter ring written out.

--dtype fp8 writes the moving operand as FP8 data (it stays FP8 on the wire in the AG form) and the
weight as FP8, each dequantized before its dot by a replicated scalar scale (multiply by
broadcast). Standard library only. Usage:
  handwritten_ring.py ag|rs --partitions N [--dtype bf16|fp8] [--fp8-type e4m3fn|e5m2] -o FILE
"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["ag", "rs"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    ap.add_argument("--fp8-type", choices=["e4m3fn", "e5m2"], default="e4m3fn")
    ap.add_argument("--acc", choices=["bf16", "f32"], default=None,
                    help="rs: type of the partial dots and the sums sent on (default f32)")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--cols", type=int, default=6)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    n = a.partitions
    if n < 2:
        sys.exit("handwritten_ring.py: --partitions must be >= 2")
    fp8 = a.dtype == "fp8"
    q = "f8" + a.fp8_type
    wide = "bf16"
    acc = (a.acc or "f32") if a.kind == "rs" else wide
    pairs = "{" + ",".join("{%d,%d}" % (i, (i - 1) % n) for i in range(n)) + "}"
    xs = f"[{a.rows},{a.k}]{{1,0}}"
    ws = f"[{a.k},{a.cols}]{{1,0}}"
    ys = f"[{a.rows},{a.cols}]{{1,0}}"
    lines = [f"HloModule handwritten_{a.kind}_ring_{a.dtype}_{n}, num_partitions={n}", "",
             "ENTRY main {"]
    p = 0

    def param(name, ty, shp):
        nonlocal p
        lines.append(f"  {name} = {ty}{shp} parameter({p})")
        p += 1

    def dequant(name, src, shp, scale):
        lines.append(f"  {name}.c = {wide}{shp} convert({src})")
        lines.append(f"  {name}.b = {wide}{shp} broadcast({scale}), dimensions={{}}")
        lines.append(f"  {name} = {wide}{shp} multiply({name}.c, {name}.b)")

    dims = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    if fp8:
        param("wq", q, ws)
        param("ws", wide, "[]")
        param("xs", wide, "[]")
        dequant("w", "wq", ws, "ws")
    else:
        param("w", wide, ws)
    if a.kind == "ag":
        param("x0", q if fp8 else wide, xs)
        outs = []
        for s in range(n):
            if s > 0:
                lines.append(f"  x{s} = {q if fp8 else wide}{xs} collective-permute(x{s-1}), "
                             f"channel_id={s}, source_target_pairs={pairs}")
            operand = f"x{s}"
            if fp8:
                dequant(f"x{s}.dq", f"x{s}", xs, "xs")
                operand = f"x{s}.dq"
            lines.append(f"  y{s} = {wide}{ys} dot({operand}, w), {dims}")
            outs.append(f"y{s}")
        tys = ", ".join(f"{wide}{ys}" for _ in outs)
        lines.append(f"  ROOT r = ({tys}) tuple({', '.join(outs)})")
    else:
        for s in range(n):
            param(f"x{s}", q if fp8 else wide, xs)
        prev = None
        for s in range(n):
            operand = f"x{s}"
            if fp8:
                dequant(f"x{s}.dq", f"x{s}", xs, "xs")
                operand = f"x{s}.dq"
            lines.append(f"  p{s} = {acc}{ys} dot({operand}, w), {dims}")
            if prev is None:
                prev = f"p{s}"
                continue
            lines.append(f"  a{s} = {acc}{ys} collective-permute({prev}), channel_id={s}, "
                         f"source_target_pairs={pairs}")
            root = "ROOT " if s == n - 1 else ""
            lines.append(f"  {root}s{s} = {acc}{ys} add(a{s}, p{s})")
            prev = f"s{s}"
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
