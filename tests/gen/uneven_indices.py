#!/usr/bin/env python3
"""Global modules whose gather or scatter reads indices sharded unevenly over N partitions (the
last index tile holds padding), for the SPMD partitioner's padding mask (issue 55).

  scatter  table f32[R,W] (replicated) += updates at clamp(ids) with an add combiner; the ids
           s32[K] (or --index-type) tiled K over N, the updates replicated (--updates
           replicated: each partition slices its rows, the last one past the end) or tiled like
           the ids (--updates tiled: their padding rows are the check's poison)
  gather   rows of the table at clamp(ids), the result tiled like the ids

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


def drop_mask(text):
    # The local scatter's second operand is the masked ids; the mutant reads the ids as the
    # program computed them (`at`, padding rows included).
    out, count = re.subn(r"(scatter\(%[\w.\-]+, )%[\w.\-]+", r"\1%at", text)
    if count != 1:
        sys.exit("drop-mask: expected one scatter, found %d" % count)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["scatter", "gather"], default="scatter")
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
    sys.stdout.write(generate(a.kind, a.n, a.k, a.rows, a.width, a.index_type, a.updates))


if __name__ == "__main__":
    main()
