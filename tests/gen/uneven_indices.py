#!/usr/bin/env python3
"""Global modules whose gather or scatter reads indices sharded unevenly over N partitions (the
last index tile holds padding), for the SPMD partitioner's padding mask (issue 55).

  scatter  table f32[R,W] (replicated) += updates at clamp(ids) with an add combiner; the ids
           s32[K] (or --index-type) tiled K over N, the updates replicated (--updates
           replicated: each partition slices its rows, the last one past the end) or tiled like
           the ids (--updates tiled: their padding rows are the check's poison)
  gather   rows of the table at clamp(ids), the result tiled like the ids
  dynamic-slice, dynamic-update-slice, sort
           the same padding question for the other ops that read a tiled value at a computed
           position: f32[R,W] tiled N ways along --dim (0 or 1; R = --rows, W = --width, uneven
           when N does not divide them), a dynamic-slice of 4 rows / an update of 3 rows at a
           replicated row offset (the evaluator draws it in [0, 8): past the end at times,
           clamped), or a sort along --sort-dim

--drop-mask FILE: instead of generating, print FILE (a partitioned module) with the scatter's
index operand replaced by the unmasked ids, a mutant the global check must reject.

Python 3 standard library only; writes the module to stdout.
"""
import argparse
import re
import sys


def generate(kind, n, k, rows, width, index_type, updates):
    ids = f"{index_type}[{k}]"
    tiled = f"{{devices=[{n}]<=[{n}]}}"
    head = f"HloModule uneven_{kind}_n{n}_k{k}, num_partitions={n}\n\n"
    top = min(rows - 1, {"s8": 127, "u8": 255, "s16": 32767, "u16": 65535}.get(index_type, rows - 1))
    clamp = (f"  floor = {ids} broadcast({index_type}[] constant(0)), dimensions={{}}\n"
             f"  ceil = {ids} broadcast({index_type}[] constant({top})), dimensions={{}}\n"
             f"  at = {ids} clamp(floor, ids, ceil)\n")
    if kind == "gather":
        return head + (
            "ENTRY main {\n"
            f"  table = f32[{rows},{width}] parameter(0), sharding={{replicated}}\n"
            f"  ids = {ids} parameter(1), sharding={tiled}\n" + clamp +
            f"  ROOT rows = f32[{k},{width}] gather(table, at), offset_dims={{1}}, "
            "collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, "
            f"slice_sizes={{1,{width}}}, sharding={{devices=[{n},1]<=[{n}]}}\n"
            "}\n")
    upd_sharding = "{replicated}" if updates == "replicated" else f"{{devices=[{n},1]<=[{n}]}}"
    return head + (
        "sum {\n"
        "  x = f32[] parameter(0)\n"
        "  y = f32[] parameter(1)\n"
        "  ROOT xy = f32[] add(x, y)\n"
        "}\n\n"
        "ENTRY main {\n"
        f"  table = f32[{rows},{width}] parameter(0), sharding={{replicated}}\n"
        f"  ids = {ids} parameter(1), sharding={tiled}\n"
        f"  delta = f32[{k},{width}] parameter(2), sharding={upd_sharding}\n" + clamp +
        f"  ROOT grown = f32[{rows},{width}] scatter(table, at, delta), update_window_dims={{1}}, "
        "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
        "to_apply=sum\n"
        "}\n")


def positional(kind, n, rows, width, dim, sort_dim):
    tiles = ["1", "1"]
    tiles[dim] = str(n)
    sh = f"{{devices=[{','.join(tiles)}]<=[{n}]}}"
    head = f"HloModule uneven_{kind.replace('-', '_')}_n{n}_d{dim}, num_partitions={n}\n\n"
    x = f"  x = f32[{rows},{width}] parameter(0), sharding={sh}\n"
    if kind == "sort":
        return head + (
            "less {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT lt = pred[] compare(a, b), direction=LT\n}\n\n"
            "ENTRY main {\n" + x +
            f"  ROOT sorted = f32[{rows},{width}] sort(x), dimensions={{{sort_dim}}}, to_apply=less, "
            f"sharding={sh}\n}}\n")
    if kind == "dynamic-slice":
        return head + (
            "ENTRY main {\n" + x +
            "  at = s32[] parameter(1), sharding={replicated}\n"
            "  zero = s32[] constant(0)\n"
            f"  ROOT window = f32[4,{width}] dynamic-slice(x, at, zero), dynamic_slice_sizes={{4,{width}}}, "
            f"sharding={sh}\n}}\n")
    tiles_u = sh
    return head + (
        "ENTRY main {\n" + x +
        f"  patch = f32[3,{width}] parameter(1), sharding={tiles_u if dim == 1 else '{replicated}'}\n"
        "  at = s32[] parameter(2), sharding={replicated}\n"
        "  zero = s32[] constant(0)\n"
        f"  ROOT patched = f32[{rows},{width}] dynamic-update-slice(x, patch, at, zero), sharding={sh}\n}}\n")


def drop_mask(text):
    # The local scatter's second operand is the masked ids; the mutant reads the ids as the
    # program computed them (`at`, padding rows included).
    out, count = re.subn(r"(scatter\(%[\w.\-]+, )%[\w.\-]+", r"\1%at", text)
    if count != 1:
        sys.exit("drop-mask: expected one scatter, found %d" % count)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="scatter",
                    choices=["scatter", "gather", "dynamic-slice", "dynamic-update-slice", "sort"])
    ap.add_argument("--dim", type=int, default=0)
    ap.add_argument("--sort-dim", type=int, default=1)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--index-type", default="s32")
    ap.add_argument("--updates", choices=["replicated", "tiled"], default="replicated")
    ap.add_argument("--drop-mask", metavar="FILE")
    a = ap.parse_args()
    if a.drop_mask:
        with open(a.drop_mask) as f:
            sys.stdout.write(drop_mask(f.read()))
        return
    if a.kind in ("scatter", "gather"):
        sys.stdout.write(generate(a.kind, a.n, a.k, a.rows, a.width, a.index_type, a.updates))
    else:
        sys.stdout.write(positional(a.kind, a.n, a.rows, a.width, a.dim, a.sort_dim))


if __name__ == "__main__":
    main()
