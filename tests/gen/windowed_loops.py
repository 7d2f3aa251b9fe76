#!/usr/bin/env python3
"""Generates windowed einsum loops as XLA's SPMD partitioner lays them out
(../shared/specs/spmd-windowed-einsum.md §2-3), the input of the windowed-einsum-handler pass:

  ag   all-gather loop: the windowed operand (--side lhs: the dot's lhs, rows sharded; --side rhs:
       the dot's rhs, columns sharded) circulates around the ring s -> s-1; unrolled by 2 (two
       dots and two collective-permutes per iteration, N/2 trips) for even N, rolled (one dot per
       iteration, the permute guarded by a conditional, N trips) for odd N or --rolled.
       --consumers K adds K more dots on an all-gather of the same operand (the handler's cache).
  rs   reduce-scatter loop: the accumulator circulates; unrolled by 2 (two accumulators, permutes
       s -> s-2, an epilogue permute s -> s+1) for even N, rolled for odd N or --rolled.

--dtype bf16|f16|f32 gives wide operands; --fp8 A,B (e4m3fn|e5m2 each) gives dequantized operands
dequant(q, s) with the wide type --wide and the scaling --scale mul (convert*broadcast), mulrev
(broadcast*convert) or div (convert/broadcast). Negative variants (--neg): vector-scale (a
per-column scale), pid-scale (scale computed from partition-id), unsharded-scale (a scale
parameter without sharding={replicated}), init-user (the init tuple has another user), no-ring
(copies instead of collective-permutes), ag-other (the all-gather gathers another value),
ag-order (the all-gather's replica group lists the partitions in reverse order).

--run-matrix runs every variant of the acceptance matrix through
`weave opt --passes=windowed-einsum-handler` and `weave compare` (--weave names the binary), prints
one line per variant and `ALL <n> PASS` at the end (exit 1 if any failed).

Python 3 standard library only. Writes the module to stdout or -o FILE.
"""
import argparse
import os
import subprocess
import sys
import tempfile

FP8 = {"e4m3fn": "f8e4m3fn", "e5m2": "f8e5m2"}


def pairs_str(pairs):
    return "{" + ",".join("{%d,%d}" % p for p in pairs) + "}"


def table_str(n, m):
    return "{" + ", ".join(str(i * m) for i in range(n)) + "}"


class Gen:
    def __init__(self, a):
        self.a = a
        self.n = a.partitions
        self.rolled = a.rolled or self.n % 2 == 1
        self.wide = a.wide if a.fp8 else a.dtype
        self.fp8 = [FP8[t] for t in a.fp8.split(",")] if a.fp8 else None
        self.lines = []
        self.comps = []
        self.channel = 10

    def ch(self):
        self.channel += 1
        return self.channel

    # ---- shapes ----
    def t(self, dims, et=None):
        et = et or self.wide
        layout = ",".join(str(i) for i in reversed(range(len(dims))))
        return "%s[%s]{%s}" % (et, ",".join(str(d) for d in dims), layout) if dims else "%s[]" % et

    def dequant(self, out, name, q, scale, dims, j):
        """Lines computing `name` = dequant(q, scale) in the entry; j = operand index."""
        w = self.wide
        sc_dims = "{}"
        if self.a.neg == "vector-scale" and j == 0:
            sc_dims = "{%d}" % (len(dims) - 1)
        out.append("  %s.cvt = %s convert(%s)" % (name, self.t(dims), q))
        out.append("  %s.sbc = %s broadcast(%s), dimensions=%s" % (name, self.t(dims), scale, sc_dims))
        op = self.a.scale
        if op == "mul":
            out.append("  %s = %s multiply(%s.cvt, %s.sbc)" % (name, self.t(dims), name, name))
        elif op == "mulrev":
            out.append("  %s = %s multiply(%s.sbc, %s.cvt)" % (name, self.t(dims), name, name))
        else:
            out.append("  %s = %s divide(%s.cvt, %s.sbc)" % (name, self.t(dims), name, name))

    def ring_branches(self, suffix, shape):
        send = "ring_send_%s" % suffix
        keep = "ring_keep_%s" % suffix
        pairs = [(s, (s - 1) % self.n) for s in range(self.n)]
        if self.a.neg == "no-ring":
            body = "  ROOT sent = %s copy(window)" % shape
        else:
            body = "  ROOT sent = %s collective-permute(window), channel_id=%d, source_target_pairs=%s" % (
                shape, self.ch(), pairs_str(pairs))
        self.comps.append("%s {\n  window = %s parameter(0)\n%s\n}\n" % (send, shape, body))
        self.comps.append("%s {\n  ROOT window = %s parameter(0)\n}\n" % (keep, shape))
        return send, keep

    def permute(self, name, shape, src, pairs):
        if self.a.neg == "no-ring":
            return "  %s = %s copy(%s)" % (name, shape, src)
        return "  %s = %s collective-permute(%s), channel_id=%d, source_target_pairs=%s" % (
            name, shape, src, self.ch(), pairs_str(pairs))

    # ---- operand declarations in the entry ----
    def operand(self, out, params, name, dims, j, sharding):
        """Declares loop operand j (wide or dequantized); returns the value name."""
        if not self.fp8:
            params.append(self.t(dims))
            out.append("  %s = %s parameter(%d), sharding=%s" % (name, self.t(dims), len(params) - 1, sharding))
            return name
        q = name + "q"
        params.append(self.t(dims, self.fp8[j]))
        out.append("  %s = %s parameter(%d), sharding=%s" % (q, self.t(dims, self.fp8[j]), len(params) - 1, sharding))
        s = name + "s"
        if self.a.neg == "vector-scale" and j == 0:
            params.append(self.t([dims[-1]]))
            out.append("  %s = %s parameter(%d), sharding={replicated}" % (s, self.t([dims[-1]]), len(params) - 1))
        elif self.a.neg == "unsharded-scale" and j == 0:
            params.append(self.t([]))
            out.append("  %s = %s parameter(%d)" % (s, self.t([]), len(params) - 1))
        elif self.a.neg == "pid-scale" and j == 0:
            params.append(self.t([]))
            out.append("  %s.base = %s parameter(%d), sharding={replicated}" % (s, self.t([]), len(params) - 1))
            out.append("  %s.pid = u32[] partition-id()" % s)
            out.append("  %s.pidf = %s convert(%s.pid)" % (s, self.t([]), s))
            out.append("  %s = %s add(%s.base, %s.pidf)" % (s, self.t([]), s, s))
        else:
            params.append(self.t([]))
            out.append("  %s = %s parameter(%d), sharding={replicated}" % (s, self.t([]), len(params) - 1))
        d = name + "d"
        self.dequant(out, d, q, s, dims, j)
        return d

    # ---- all-gather loop ----
    def ag(self):
        a, n = self.a, self.n
        m, K, c = 4, 16, 8  # shard rows, contracting size, stationary columns
        lhs = a.side == "lhs"
        shard = [m, K] if lhs else [K, m]
        stat = [K, c] if lhs else [c, K]
        blk = [m, c] if lhs else [c, m]
        outd = [n * m, c] if lhs else [c, n * m]
        gdim = 0 if lhs else 1
        gath = [n * m, K] if lhs else [K, n * m]
        X, W, O = self.t(shard), self.t(stat), self.t(outd)
        elems = [X, W] if lhs else [W, X]
        st = "(%s, %s, %s, %s, u32[])" % (elems[0], elems[1], O, O)
        wi = 0 if lhs else 1
        pairs = [(s, (s - 1) % n) for s in range(n)]

        def dot(name, win, sta):
            ops = (win, sta) if lhs else (sta, win)
            cd = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
            return "  %s = %s dot(%s, %s), %s" % (name, self.t(blk), ops[0], ops[1], cd)

        def dus(name, acc, part, off):
            offs = (off, "zero") if lhs else ("zero", off)
            return "  %s = %s dynamic-update-slice(%s, %s, %s, %s)" % (name, O, acc, part, offs[0], offs[1])

        b = ["windowed_dot_general_body_ag {", "  st = %s parameter(0)" % st,
             "  shard = %s get-tuple-element(st), index=%d" % (X, wi),
             "  wt = %s get-tuple-element(st), index=%d" % (W, 1 - wi),
             "  acc = %s get-tuple-element(st), index=2" % O,
             "  spare = %s get-tuple-element(st), index=3" % O,
             "  k = u32[] get-tuple-element(st), index=4",
             "  zero = s32[] constant(0)",
             "  table = s32[%d]{0} constant(%s)" % (n, table_str(n, m)),
             "  pid = u32[] partition-id()",
             "  nparts = u32[] constant(%d)" % n,
             "  one = u32[] constant(1)",
             "  kp = u32[] add(k, pid)",
             "  blk0 = u32[] remainder(kp, nparts)",
             "  off0v = s32[1]{0} dynamic-slice(table, blk0), dynamic_slice_sizes={1}",
             "  off0 = s32[] reshape(off0v)",
             dot("part0", "shard", "wt"),
             dus("acc1", "acc", "part0", "off0"),
             "  k1 = u32[] add(k, one)"]
        if self.rolled:
            send, keep = self.ring_branches("ag", X)
            b += ["  more = pred[] compare(k1, nparts), direction=LT",
                  "  nxt = %s conditional(more, shard, shard), true_computation=%s, false_computation=%s" % (X, send, keep)]
            root = ["nxt", "wt"] if lhs else ["wt", "nxt"]
            b += ["  ROOT next_state = %s tuple(%s, %s, acc1, spare, k1)" % (st, root[0], root[1]), "}"]
            trips = n
        else:
            b += [self.permute("nxt", X, "shard", pairs), self.permute("nxt2", X, "nxt", pairs),
                  "  k1p = u32[] add(k1, pid)",
                  "  blk1 = u32[] remainder(k1p, nparts)",
                  "  off1v = s32[1]{0} dynamic-slice(table, blk1), dynamic_slice_sizes={1}",
                  "  off1 = s32[] reshape(off1v)",
                  dot("part1", "nxt", "wt"),
                  dus("acc2", "acc1", "part1", "off1"),
                  "  k2 = u32[] add(k1, one)"]
            root = ["nxt2", "wt"] if lhs else ["wt", "nxt2"]
            b += ["  ROOT next_state = %s tuple(%s, %s, acc2, spare, k2)" % (st, root[0], root[1]), "}"]
            trips = n
        self.comps.append("\n".join(b) + "\n")
        self.comps.append("windowed_dot_general_cond_ag {\n  cst = %s parameter(0)\n"
                          "  ck = u32[] get-tuple-element(cst), index=4\n  trips = u32[] constant(%d)\n"
                          "  ROOT more = pred[] compare(ck, trips), direction=LT\n}\n" % (st, trips))

        e, params = [], []
        xs = "{devices=[%d,1]<=[%d]}" % (n, n) if lhs else "{devices=[1,%d]<=[%d]}" % (n, n)
        x = self.operand(e, params, "x", shard, wi, xs)
        wv = self.operand(e, params, "w", stat, 1 - wi, "{replicated}")
        e += ["  fz = %s constant(0)" % self.t([]),
              "  zeros = %s broadcast(fz), dimensions={}" % O,
              "  k0 = u32[] constant(0)"]
        ops = (x, wv) if lhs else (wv, x)
        e.append("  init = %s tuple(%s, %s, zeros, zeros, k0)" % (st, ops[0], ops[1]))
        e.append("  loop = %s while(init), condition=windowed_dot_general_cond_ag, body=windowed_dot_general_body_ag" % st)
        e.append("  y0 = %s get-tuple-element(loop), index=2" % O)
        outs = ["y0"]
        out_shapes = [O]
        if a.neg == "init-user":
            e.append("  peek = %s get-tuple-element(init), index=3" % O)
            outs.append("peek")
            out_shapes.append(O)
        if a.consumers:
            src = x
            if a.neg == "ag-other":
                params.append(self.t(shard))
                e.append("  other = %s parameter(%d), sharding=%s" % (self.t(shard), len(params) - 1, xs))
                src = "other"
            groups = list(range(n))
            if a.neg == "ag-order":
                groups = list(reversed(groups))
            e.append("  xg = %s all-gather(%s), channel_id=5, replica_groups={{%s}}, dimensions={%d}, use_global_device_ids=true"
                     % (self.t(gath), src, ",".join(map(str, groups)), gdim))
            for i in range(a.consumers):
                params.append(self.t(stat))
                e.append("  wc%d = %s parameter(%d), sharding={replicated}" % (i, self.t(stat), len(params) - 1))
                yd = [n * m, c] if lhs else [c, n * m]
                ops = ("xg", "wc%d" % i) if lhs else ("wc%d" % i, "xg")
                e.append("  y%d = %s dot(%s, %s), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                         % (i + 1, self.t(yd), ops[0], ops[1]))
                outs.append("y%d" % (i + 1))
                out_shapes.append(self.t(yd))
        e.append("  ROOT result = (%s) tuple(%s)" % (", ".join(out_shapes), ", ".join(outs)))
        return params, e, out_shapes

    # ---- reduce-scatter loop ----
    def rs(self):
        n = self.n
        m, k, c = 4, 8, 8  # output rows per block, local contracting, columns
        M = n * m
        X, W, O = self.t([M, k]), self.t([k, c]), self.t([m, c])
        st = "(%s, %s, %s, %s, u32[])" % (X, W, O, O)
        b = ["windowed_dot_general_body_rs {", "  st = %s parameter(0)" % st,
             "  act = %s get-tuple-element(st), index=0" % X,
             "  wt = %s get-tuple-element(st), index=1" % W,
             "  k = u32[] get-tuple-element(st), index=4",
             "  zero = s32[] constant(0)",
             "  table = s32[%d]{0} constant(%s)" % (n, table_str(n, m)),
             "  pid = u32[] partition-id()",
             "  nparts = u32[] constant(%d)" % n,
             "  one = u32[] constant(1)"]
        if self.rolled:
            send, keep = self.ring_branches("rs", O)
            b += ["  acc = %s get-tuple-element(st), index=2" % O,
                  "  spare = %s get-tuple-element(st), index=3" % O,
                  "  k1 = u32[] add(k, one)",
                  "  kq = u32[] add(k1, pid)",
                  "  blk = u32[] remainder(kq, nparts)",
                  "  offv = s32[1]{0} dynamic-slice(table, blk), dynamic_slice_sizes={1}",
                  "  off = s32[] reshape(offv)",
                  "  rows = %s dynamic-slice(act, off, zero), dynamic_slice_sizes={%d,%d}" % (self.t([m, k]), m, k),
                  "  part = %s dot(rows, wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}" % O,
                  "  sum = %s add(acc, part)" % O,
                  "  more = pred[] compare(k1, nparts), direction=LT",
                  "  nacc = %s conditional(more, sum, sum), true_computation=%s, false_computation=%s" % (O, send, keep),
                  "  ROOT next_state = %s tuple(act, wt, nacc, spare, k1)" % st, "}"]
        else:
            p2 = [(s, (s - 2) % n) for s in range(n)]
            b += ["  accA = %s get-tuple-element(st), index=2" % O,
                  self.permute("recvA", O, "accA", p2),
                  "  two = u32[] constant(2)",
                  "  k2 = u32[] add(k, two)",
                  "  k3 = u32[] add(k2, one)",
                  "  kA = u32[] add(k3, pid)",
                  "  blkA = u32[] remainder(kA, nparts)",
                  "  offAv = s32[1]{0} dynamic-slice(table, blkA), dynamic_slice_sizes={1}",
                  "  offA = s32[] reshape(offAv)",
                  "  rowsA = %s dynamic-slice(act, offA, zero), dynamic_slice_sizes={%d,%d}" % (self.t([m, k]), m, k),
                  "  partA = %s dot(rowsA, wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}" % O,
                  "  newA = %s add(recvA, partA)" % O,
                  "  accB = %s get-tuple-element(st), index=3" % O,
                  "  kB = u32[] add(k, pid)",
                  "  blkB = u32[] remainder(kB, nparts)",
                  "  offBv = s32[1]{0} dynamic-slice(table, blkB), dynamic_slice_sizes={1}",
                  "  offB = s32[] reshape(offBv)",
                  "  rowsB = %s dynamic-slice(act, offB, zero), dynamic_slice_sizes={%d,%d}" % (self.t([m, k]), m, k),
                  "  partB = %s dot(rowsB, wt), lhs_contracting_dims={1}, rhs_contracting_dims={0}" % O,
                  "  sumB = %s add(accB, partB)" % O,
                  self.permute("sendB", O, "sumB", p2),
                  "  ROOT next_state = %s tuple(act, wt, newA, sendB, k2)" % st, "}"]
        self.comps.append("\n".join(b) + "\n")
        self.comps.append("windowed_dot_general_cond_rs {\n  cst = %s parameter(0)\n"
                          "  ck = u32[] get-tuple-element(cst), index=4\n  trips = u32[] constant(%d)\n"
                          "  ROOT more = pred[] compare(ck, trips), direction=LT\n}\n" % (st, n))
        e, params = [], []
        x = self.operand(e, params, "x", [M, k], 0, "{devices=[1,%d]<=[%d]}" % (n, n))
        wv = self.operand(e, params, "w", [k, c], 1, "{devices=[%d,1]<=[%d]}" % (n, n))
        e += ["  fz = %s constant(0)" % self.t([]),
              "  zeros = %s broadcast(fz), dimensions={}" % O,
              "  k0 = u32[] constant(0)",
              "  init = %s tuple(%s, %s, zeros, zeros, k0)" % (st, x, wv),
              "  loop = %s while(init), condition=windowed_dot_general_cond_rs, body=windowed_dot_general_body_rs" % st]
        outs, shapes = [], []
        if self.rolled:
            e.append("  y = %s get-tuple-element(loop), index=2" % O)
        else:
            p1 = [(s, (s + 1) % n) for s in range(n)]
            e += ["  endA = %s get-tuple-element(loop), index=2" % O,
                  "  endB = %s get-tuple-element(loop), index=3" % O,
                  self.permute("shiftA", O, "endA", p1),
                  "  y = %s add(shiftA, endB)" % O]
        outs, shapes = ["y"], [O]
        if self.a.neg == "init-user":
            e.append("  peek = %s get-tuple-element(init), index=3" % O)
            outs.append("peek")
            shapes.append(O)
        e.append("  ROOT result = (%s) tuple(%s)" % (", ".join(shapes), ", ".join(outs)))
        return params, e, shapes

    def module(self):
        params, e, outs = self.ag() if self.a.kind == "ag" else self.rs()
        name = self.a.name or "%s_n%d" % (self.a.kind, self.n)
        head = "HloModule %s, entry_computation_layout={(%s)->(%s)}, num_partitions=%d\n\n" % (
            name, ", ".join(params), ", ".join(outs), self.n)
        return head + "\n".join(self.comps) + "\nENTRY main {\n" + "\n".join(e) + "\n}\n"


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=["ag", "rs"], default="ag")
    p.add_argument("--partitions", "-n", type=int, default=4)
    p.add_argument("--rolled", action="store_true", help="rolled layout even for even N")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    p.add_argument("--fp8", default="", help="FP8 pair, e.g. e4m3fn,e5m2")
    p.add_argument("--wide", choices=["bf16", "f16", "f32"], default="bf16")
    p.add_argument("--scale", choices=["mul", "mulrev", "div"], default="mul")
    p.add_argument("--side", choices=["lhs", "rhs"], default="lhs")
    p.add_argument("--consumers", type=int, default=0)
    p.add_argument("--neg", default="", choices=["", "vector-scale", "pid-scale", "unsharded-scale",
                                                 "init-user", "no-ring", "ag-other", "ag-order"])
    p.add_argument("--name", default="")
    p.add_argument("-o", "--output", default="")
    p.add_argument("--run-matrix", action="store_true")
    p.add_argument("--weave", default="weave")
    p.add_argument("--quick", action="store_true", help="with --run-matrix: a smaller matrix")
    p.add_argument("--opt-arg", action="append", default=[],
                   help="with --run-matrix: extra argument for weave opt (repeatable)")
    return p


def matrix(quick):
    """The acceptance matrix: (description, generator args, partitions)."""
    v = []
    for n in (2, 3, 4, 5, 8):
        for dt in ("bf16", "f16", "f32"):
            v.append(["--kind", "ag", "-n", str(n), "--dtype", dt, "--consumers", "1"])
        for pair in ("e4m3fn,e4m3fn", "e4m3fn,e5m2", "e5m2,e4m3fn"):
            v.append(["--kind", "ag", "-n", str(n), "--fp8", pair, "--consumers", "2"])
        v.append(["--kind", "rs", "-n", str(n), "--fp8", "e4m3fn,e4m3fn"])
        v.append(["--kind", "rs", "-n", str(n), "--dtype", "bf16"])
    for n in (2, 4, 8) if not quick else (4,):
        for sc in ("mul", "mulrev", "div"):
            for wide in ("bf16", "f16", "f32"):
                v.append(["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--scale", sc,
                          "--wide", wide, "--consumers", "1"])
    for n in (3, 4, 5):
        for side in ("lhs", "rhs"):
            for k in (1, 2, 3):
                v.append(["--kind", "ag", "-n", str(n), "--side", side, "--consumers", str(k)])
                v.append(["--kind", "ag", "-n", str(n), "--side", side, "--consumers", str(k),
                          "--fp8", "e5m2,e4m3fn", "--scale", "div"])
    v.append(["--kind", "ag", "-n", "4", "--rolled", "--fp8", "e4m3fn,e5m2", "--consumers", "2"])
    v.append(["--kind", "rs", "-n", "4", "--rolled", "--fp8", "e4m3fn,e5m2", "--scale", "mulrev"])
    if quick:
        v = v[::3]
    return v


def run_matrix(a):
    failures = 0
    variants = matrix(a.quick)
    with tempfile.TemporaryDirectory() as tmp:
        for i, args in enumerate(variants):
            g = parser().parse_args(args + ["--name", "v%d" % i])
            src = os.path.join(tmp, "v%d.hlo" % i)
            dst = os.path.join(tmp, "v%d.out.hlo" % i)
            with open(src, "w") as f:
                f.write(Gen(g).module())
            desc = " ".join(args)
            r = subprocess.run([a.weave, "opt", src, "--passes=windowed-einsum-handler", "-o", dst]
                               + a.opt_arg,
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL opt %s: %s" % (desc, r.stderr.strip()[:300]))
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
