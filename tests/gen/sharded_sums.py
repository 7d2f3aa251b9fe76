#!/usr/bin/env python3
"""Global modules that sum a sharded value (a `reduce` with an add reducer), for the
global-vs-partitioned check's reassociated-sum judgement (issue 55). The partitioned program sums
each shard in the value's type, then all-reduces the shard sums: the same terms added in another
order, which at bf16 rounds differently from the global program's one long sum.

  -L L            terms per sum (default 480)
  -n N            partitions; the summed dim is tiled N ways (uneven when N does not divide L)
  --type T        element type (bf16, f16, f32; default bf16)
  --rows R        R > 0: a [R, L] value summed along dim 1 (R sums of L terms, rows replicated),
                  else one full sum of [L] to a scalar

--double-shard FILE: instead of generating, print FILE (a partitioned module from `weave
partition`) with partition 0's shard sum added twice before the all-reduce: a wrong
partitioning the check must reject.

Python 3 standard library only; writes the module to stdout.
"""
import argparse
import re
import sys


def generate(terms, n, t, rows):
    if rows > 0:
        shape, out, sharding = f"{t}[{rows},{terms}]", f"{t}[{rows}]", f"{{devices=[1,{n}]<=[{n}]}}"
        dims = "{1}"
    else:
        shape, out, sharding = f"{t}[{terms}]", f"{t}[]", f"{{devices=[{n}]<=[{n}]}}"
        dims = "{0}"
    return (f"HloModule sharded_sum_{t}_L{terms}_n{n}, num_partitions={n}\n\n"
            "plus {\n"
            f"  a = {t}[] parameter(0)\n"
            f"  b = {t}[] parameter(1)\n"
            f"  ROOT ab = {t}[] add(a, b)\n"
            "}\n\n"
            "ENTRY main {\n"
            f"  x = {shape} parameter(0), sharding={sharding}\n"
            f"  zero = {t}[] constant(0)\n"
            f"  ROOT total = {out} reduce(x, zero), dimensions={dims}, to_apply=plus\n"
            "}\n")


def double_shard(text):
    # ROOT %r = T all-reduce(%s), ...  ->  the operand replaced by s + s on partition 0.
    m = re.search(r"^(\s*ROOT %[\w.\-]+ = )(\w+)\[([\d,]*)\]([^ ]*) all-reduce\((%[\w.\-]+)\)",
                  text, re.M)
    if not m:
        sys.exit("double-shard: no ROOT all-reduce")
    t, dims, operand = m.group(2), m.group(3), m.group(5)
    shape = f"{t}[{dims}]"
    pred = f"pred[{dims}]"
    extra = (f"  %mut.pid = u32[] partition-id()\n"
             f"  %mut.zero = u32[] constant(0)\n"
             f"  %mut.first = pred[] compare(%mut.pid, %mut.zero), direction=EQ\n"
             f"  %mut.firsts = {pred} broadcast(%mut.first), dimensions={{}}\n"
             f"  %mut.twice = {shape} add({operand}, {operand})\n"
             f"  %mut.pick = {shape} select(%mut.firsts, %mut.twice, {operand})\n")
    line_start = m.start()
    root = text[line_start:].replace(f"all-reduce({operand})", "all-reduce(%mut.pick)", 1)
    return text[:line_start] + extra + root


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-L", type=int, default=480)
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--type", default="bf16")
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--double-shard", metavar="FILE")
    a = ap.parse_args()
    if a.double_shard:
        with open(a.double_shard) as f:
            sys.stdout.write(double_shard(f.read()))
        return
    sys.stdout.write(generate(a.L, a.n, a.type, a.rows))


if __name__ == "__main__":
    main()
