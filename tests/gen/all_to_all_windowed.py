#!/usr/bin/env python3
"""Generates partitioned modules with an all-to-all next to a dot, the input of the
all-to-all-windowed-einsum pass (../shared/specs/all-to-all-windowed-einsum.md):

  A   dot(chain(all-to-all(x)), w): the exchange feeds the dot (--side lhs: the dot's lhs
      [E,T,K] is exchanged; --side rhs: its rhs [E,K,N]);
  B   all-to-all(chain(dot(x, w))): the exchange follows the dot ([E,T,N]).

The dot contracts K with E as a batch dim. --split D names the split dim at the dot side (the
exchanged dot operand for A, the dot's result for B); the all-to-all's own split dim is tracked
through --chain, a comma list of transpose (swaps the last two dims), reshape (splits the last
dim in two when it is not the split dim, else adds a leading 1) and copy, in data-flow order.
--partitions P with --group-size G gives P/G groups of G consecutive partitions ({{0..3},{4..7}}
for P=8, G=4; one group of all when G=P); --iota writes them in iota form. Extents: every dim that
may be split is a multiple of G; K = 4G.
--dtype bf16|f32 gives wide operands; fp8 gives dequant(f8e4m3fn, scale) operands (bf16 wide,
scalar scales with sharding={replicated}), fp8e5m2 the same with f8e5m2; fp8post (A only)
exchanges the f8e4m3fn value itself and dequantizes after the exchange (convert right after it,
the multiply by a per-partition scale after the layout chain).

--run-matrix runs the acceptance matrix: for G = 2, 4, 8, groups {{0..G-1},...} over 8
partitions and one group of all, bf16 and FP8, every allowed split position of A (lhs and rhs
side) and B, each look-through op alone and all three, iota groups and chunk counts other than G:
`weave opt --passes=all-to-all-windowed-einsum` forced (XLA's flag, or
--all-to-all-windowed-einsum-chunks), a check of the structure (an applied remark, one
all-to-all and one operation_queue_id per chunk, FP8 on the wire for A with FP8 operands) and
`weave compare` before vs after. One line per variant, `ALL <n> PASS` at the
end (exit 1 if any failed). --run-matrix --random N --seed S runs N random variants instead
(every option drawn from its allowed values, chunk counts any divisor of K up to 16).

Python 3 standard library only. Writes the module to stdout or -o FILE.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def layout(dims):
    return "{" + ",".join(str(d) for d in reversed(range(len(dims)))) + "}"


def sh(t, dims):
    return "%s[%s]%s" % (t, ",".join(str(d) for d in dims), layout(dims))


class Gen:
    def __init__(self, a):
        self.a = a
        self.lines = []
        self.params = []
        self.n = 0

    def emit(self, name, text):
        self.lines.append("  %s = %s" % (name, text))
        return name

    def param(self, name, t, dims, replicated=False):
        self.params.append(sh(t, dims))
        return self.emit(name, "%s parameter(%d)%s" % (sh(t, dims), len(self.params) - 1,
                                                      ", sharding={replicated}" if replicated else ""))

    def groups(self):
        a = self.a
        g = a.group_size or a.partitions
        if a.iota:
            return "[%d,%d]<=[%d]" % (a.partitions // g, g, a.partitions)
        gs = [list(range(s, s + g)) for s in range(0, a.partitions, g)]
        return "{" + ",".join("{" + ",".join(map(str, x)) + "}" for x in gs) + "}"

    def operand(self, name, dims):
        """A dot operand of `dims`: a parameter, or dequant(fp8 parameter, scale)."""
        a = self.a
        if a.dtype in ("bf16", "f32"):
            return self.param(name, a.dtype, dims)
        if a.dtype == "fp8post" and name != "wt":
            raise SystemExit("--dtype fp8post is for rewrite A (FP8 exchanged, dequantized after)")
        f8 = "f8e4m3fn" if a.dtype == "fp8" else "f8e5m2"
        q = self.param(name + "_q", f8, dims)
        s = self.param(name + "_scale", "bf16", [], replicated=True)
        c = self.emit(name + "_cvt", "%s convert(%s)" % (sh("bf16", dims), q))
        b = self.emit(name + "_sb", "%s broadcast(%s), dimensions={}" % (sh("bf16", dims), s))
        return self.emit(name, "%s multiply(%s, %s)" % (sh("bf16", dims), c, b))

    def wide(self):
        return self.a.dtype if self.a.dtype in ("bf16", "f32") else "bf16"

    def module(self):
        a = self.a
        g = a.group_size or a.partitions
        chain = [c for c in a.chain.split(",") if c]
        e = g if a.split == 0 or a.split_e else 2
        t, k, n = 2 * g, 4 * g, 2 * g
        w = self.wide()
        lhs_dims, rhs_dims, out_dims = [e, t, k], [e, k, n], [e, t, n]
        dot_attrs = ("lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                     "rhs_contracting_dims={1}")
        groups = self.groups()
        if a.rewrite == "A":
            x_dims = lhs_dims if a.side == "lhs" else rhs_dims
            # Walk the chain backwards from the dot operand to the all-to-all.
            ops = []  # (kind, in_dims, out_dims)
            dims, s = list(x_dims), a.split
            for op in reversed(chain):
                if op == "copy":
                    ops.append(("copy", list(dims), list(dims)))
                elif op == "transpose":
                    p = list(range(len(dims)))
                    p[-1], p[-2] = p[-2], p[-1]
                    ind = [dims[p.index(j)] for j in range(len(dims))]
                    ops.append(("transpose", ind, list(dims), p))
                    s = p[s]
                    dims = ind
                elif op == "reshape":
                    if s != len(dims) - 1 and dims[-1] % 2 == 0:
                        ind = dims[:-1] + [dims[-1] // 2, 2]
                    else:
                        ind = [1] + dims
                        s += 1
                    ops.append(("reshape", ind, list(dims)))
                    dims = ind
                else:
                    raise SystemExit("unknown chain op " + op)
            ops.reverse()
            if a.dtype == "fp8post":
                # FP8 on the wire already: the exchange carries f8e4m3fn, the dequantization
                # (convert first, scale last, a per-partition scale) comes after it.
                q = self.param("tok_q", "f8e4m3fn", dims)
                v = self.emit("exchanged", "%s all-to-all(%s), channel_id=1, replica_groups=%s, dimensions={%d}"
                              % (sh("f8e4m3fn", dims), q, groups, s))
                v = self.emit("exchanged_cvt", "%s convert(%s)" % (sh(w, dims), v))
            else:
                src = self.operand("tok", dims)
                v = self.emit("exchanged", "%s all-to-all(%s), channel_id=1, replica_groups=%s, dimensions={%d}"
                              % (sh(w, dims), src, groups, s))
            for i, op in enumerate(ops):
                if op[0] == "transpose":
                    v = self.emit("lay%d" % i, "%s transpose(%s), dimensions={%s}"
                                  % (sh(w, op[2]), v, ",".join(map(str, op[3]))))
                else:
                    v = self.emit("lay%d" % i, "%s %s(%s)" % (sh(w, op[2]), op[0], v))
            if a.dtype == "fp8post":
                sc = self.emit("tok_scale", "bf16[] parameter(%d), sharding={manual}" % len(self.params))
                self.params.append("bf16[]")
                sb = self.emit("tok_sb", "%s broadcast(%s), dimensions={}" % (sh(w, x_dims), sc))
                v = self.emit("tok_dq", "%s multiply(%s, %s)" % (sh(w, x_dims), v, sb))
            other = self.operand("wt", rhs_dims if a.side == "lhs" else lhs_dims)
            l, r = (v, other) if a.side == "lhs" else (other, v)
            root = self.emit("ROOT out", "%s dot(%s, %s), %s" % (sh(w, out_dims), l, r, dot_attrs))
        else:
            l = self.operand("act", lhs_dims)
            r = self.operand("wt", rhs_dims)
            v = self.emit("mm", "%s dot(%s, %s), %s" % (sh(w, out_dims), l, r, dot_attrs))
            dims, s = list(out_dims), a.split
            for i, op in enumerate(chain):
                if op == "copy":
                    v = self.emit("lay%d" % i, "%s copy(%s)" % (sh(w, dims), v))
                elif op == "transpose":
                    p = list(range(len(dims)))
                    p[-1], p[-2] = p[-2], p[-1]
                    od = [dims[p[j]] for j in range(len(dims))]
                    v = self.emit("lay%d" % i, "%s transpose(%s), dimensions={%s}"
                                  % (sh(w, od), v, ",".join(map(str, p))))
                    s = p.index(s)
                    dims = od
                elif op == "reshape":
                    if s != len(dims) - 1 and dims[-1] % 2 == 0:
                        od = dims[:-1] + [dims[-1] // 2, 2]
                    else:
                        od = [1] + dims
                        s += 1
                    v = self.emit("lay%d" % i, "%s reshape(%s)" % (sh(w, od), v))
                    dims = od
                else:
                    raise SystemExit("unknown chain op " + op)
            root = self.emit("ROOT out", "%s all-to-all(%s), channel_id=1, replica_groups=%s, dimensions={%d}"
                             % (sh(w, dims), v, groups, s))
        del root
        name = a.name or "a2a_%s" % a.rewrite.lower()
        head = "HloModule %s, num_partitions=%d\n\nENTRY main {\n" % (name, a.partitions)
        return head + "\n".join(self.lines) + "\n}\n"


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rewrite", choices=["A", "B"], default="A")
    p.add_argument("--partitions", "-n", type=int, default=4)
    p.add_argument("--group-size", "-g", type=int, default=0, help="default: all partitions")
    p.add_argument("--iota", action="store_true")
    p.add_argument("--dtype", choices=["bf16", "f32", "fp8", "fp8e5m2", "fp8post"], default="bf16")
    p.add_argument("--side", choices=["lhs", "rhs"], default="lhs")
    p.add_argument("--split", type=int, default=1)
    p.add_argument("--split-e", action="store_true", help="make E a multiple of G as well")
    p.add_argument("--chain", default="")
    p.add_argument("--name", default="")
    p.add_argument("-o", "--output", default="")
    p.add_argument("--run-matrix", action="store_true")
    p.add_argument("--weave", default="weave")
    p.add_argument("--random", type=int, default=0,
                   help="with --run-matrix: N random variants instead of the matrix")
    p.add_argument("--seed", type=int, default=1, help="with --random")
    return p


def matrix():
    """(generator args, extra opt args, expected chunks)."""
    v = []
    for g in (2, 4, 8):
        layouts = [["-n", "8", "-g", str(g)]] + ([["-n", str(g)]] if g != 8 else [])
        for lay in layouts:
            for dt in ("bf16", "fp8"):
                for s in (0, 1):
                    v.append((["--rewrite", "A", "--side", "lhs", "--split", str(s), "--dtype", dt] + lay, [], g))
                for s in (0, 2):
                    v.append((["--rewrite", "A", "--side", "rhs", "--split", str(s), "--dtype", dt] + lay, [], g))
                for s in (0, 1, 2):
                    v.append((["--rewrite", "B", "--split", str(s), "--dtype", dt] + lay, [], g))
    for rw in ("A", "B"):
        for chain in ("transpose", "reshape", "copy", "transpose,reshape,copy", "copy,transpose,reshape,transpose"):
            for dt in ("bf16", "fp8"):
                v.append((["--rewrite", rw, "--chain", chain, "--dtype", dt, "-n", "8", "-g", "4",
                           "--split", "1"], [], 4))
    v.append((["--rewrite", "A", "--iota", "-n", "8", "-g", "4", "--dtype", "fp8e5m2"], [], 4))
    for chain in ("", "transpose,reshape,copy"):
        for g in (2, 4):
            v.append((["--rewrite", "A", "--chain", chain, "--dtype", "fp8post", "-n", "8", "-g", str(g),
                       "--split", "1"], [], g))
    v.append((["--rewrite", "B", "--iota", "-n", "8", "-g", "2", "--dtype", "f32"], [], 2))
    for c in (2, 8):
        v.append((["--rewrite", "A", "-n", "8", "-g", "4", "--dtype", "fp8"],
                  ["--all-to-all-windowed-einsum-chunks=%d" % c], c))
        v.append((["--rewrite", "B", "-n", "8", "-g", "4", "--dtype", "bf16", "--split", "2"],
                  ["--all-to-all-windowed-einsum-chunks=%d" % c], c))
    return v


def random_variants(n, seed):
    """n random variants: rewrite, side, split, groups, dtype, layout chain and chunk count drawn
    from every allowed combination."""
    import random
    rng = random.Random(seed)
    v = []
    for _ in range(n):
        rw = rng.choice(["A", "B"])
        g = rng.choice([2, 4, 8])
        p = rng.choice(sorted({g, 8}))
        args = ["--rewrite", rw, "-n", str(p), "-g", str(g)]
        dtypes = ["bf16", "f32", "fp8", "fp8e5m2"] + (["fp8post"] if rw == "A" else [])
        args += ["--dtype", rng.choice(dtypes)]
        if rw == "A":
            side = rng.choice(["lhs", "rhs"])
            args += ["--side", side, "--split", str(rng.choice([0, 1] if side == "lhs" else [0, 2]))]
        else:
            args += ["--split", str(rng.choice([0, 1, 2]))]
        chain = [rng.choice(["transpose", "reshape", "copy"]) for _ in range(rng.randint(0, 4))]
        if chain:
            args += ["--chain", ",".join(chain)]
        if rng.random() < 0.3:
            args.append("--iota")
        k = 4 * g
        chunks = rng.choice([d for d in range(2, k + 1) if k % d == 0 and d <= 16])
        v.append((args, ["--all-to-all-windowed-einsum-chunks=%d" % chunks], chunks))
    return v


def run_matrix(a):
    failures = 0
    variants = matrix() if not a.random else random_variants(a.random, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (args, extra, chunks) in enumerate(variants):
            g = parser().parse_args(args + ["--name", "v%d" % i])
            src = os.path.join(tmp, "v%d.hlo" % i)
            dst = os.path.join(tmp, "v%d.out.hlo" % i)
            with open(src, "w") as f:
                f.write(Gen(g).module())
            desc = " ".join(args + extra)
            force = extra or ["--xla_gpu_experimental_enable_alltoall_windowed_einsum=true"]
            r = subprocess.run([a.weave, "opt", src, "--passes=all-to-all-windowed-einsum",
                                "--verify-each", "--remarks", "-o", dst] + force,
                               capture_output=True, text=True)
            if r.returncode != 0 or "[applied] rewrite %s" % g.rewrite not in r.stderr:
                print("FAIL opt %s: rc %d %s" % (desc, r.returncode, r.stderr.strip()[:400]))
                failures += 1
                continue
            out = open(dst).read()
            n_a2a = len(re.findall(r" all-to-all\(", out))
            queues = set(re.findall(r'"operation_queue_id":"(\d+)"', out))
            wire = set(re.findall(r"= (\w+)\[[^\]]*\]\S* all-to-all\(", out))
            want = ({"f8e4m3fn"} if g.dtype in ("fp8", "fp8post")
                    else {"f8e5m2"} if g.dtype == "fp8e5m2" else None)
            if g.rewrite == "A" and want is not None and wire != want:
                print("FAIL wire %s: the chunks exchange %s, not FP8" % (desc, sorted(wire)))
                failures += 1
                continue
            if n_a2a != chunks or len(queues) != chunks:
                print("FAIL structure %s: %d all-to-alls, %d queue ids, %d chunks expected"
                      % (desc, n_a2a, len(queues), chunks))
                failures += 1
                continue
            r = subprocess.run([a.weave, "compare", src, dst, "--num-partitions", str(g.partitions),
                                "--seed", str(i + 1)], capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL compare (rc %d) %s: %s" % (r.returncode, desc, (r.stdout + r.stderr).strip()[-400:]))
                failures += 1
                continue
            print("PASS %s" % desc)
    if failures:
        print("%d of %d FAILED" % (failures, len(variants)))
        return 1
    print("ALL %d PASS" % len(variants))
    return 0


def main():
    a = parser().parse_args()
    if a.run_matrix:
        sys.exit(run_matrix(a))
    text = Gen(a).module()
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
