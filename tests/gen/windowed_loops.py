#!/usr/bin/env python3
"""Generates windowed einsum loops as XLA's SPMD partitioner lays them out
(../shared/specs/spmd-windowed-einsum.md §2-3), the input of the windowed-einsum-handler pass:

  ag   all-gather loop: the windowed operand (--side lhs: the dot's lhs, rows sharded; --side rhs:
       the dot's rhs, columns sharded) circulates around the ring s -> s-1; unrolled by 2 (two
       dots and two collective-permutes per iteration, N/2 trips) for even N, rolled (one dot per
       iteration, the permute guarded by a conditional, N trips) for odd N or --rolled.
       --consumers K adds K more dots on an all-gather of the same operand (the handler's cache).
       --contracting: the windowed dim is the dot's contracting dim (the stationary operand is
       dynamic-sliced per block and every step adds its partial product into one accumulator;
       --acc f32 accumulates in f32 with one convert after the loop; --acc-init param starts
       the accumulator from a parameter instead of zeros).
  rs   reduce-scatter loop: the accumulator circulates; unrolled by 2 (two accumulators, permutes
       s -> s-2, an epilogue permute s -> s+1) for even N, rolled for odd N or --rolled.

--groups G splits the N partitions into G rings of N/G consecutive partitions (a 2-D mesh: the
operands are tiled within a ring and replicated across rings; collectives use those groups).

--dtype bf16|f16|f32 gives wide operands; --fp8 A,B (e4m3fn|e5m2|e4m3fnuz|e5m2fnuz each) gives
dequantized operands dequant(q, s) with the wide type --wide and the scaling --scale mul
(convert*broadcast), mulrev (broadcast*convert) or div (convert/broadcast). The scales' sources
(--xscale for the lhs x, --wscale for the rhs w): replicated (sharding={replicated}, default),
unannotated (no sharding: replicated by XLA's SPMD semantics), pid (computed from partition-id),
tiled (the partition's own element of a tiled vector: differs per partition), grouped (an
all-reduce(max) of the tiled vector within each ring group: equal within a ring, different
between rings). --views V1,V2 (bitcast, broadcast, copy, reshape, transpose, slice) puts those
ops between the dequantization of --view-operand (x or w) and the loop. --unread leaves the
loop's own result unread (ag: only the cache consumers are outputs; rs: only the first
accumulator, no epilogue).

Negative variants (--neg): vector-scale (a per-column scale), pid-scale (= --xscale pid),
unsharded-scale (= --xscale unannotated), init-user (the init tuple has another user), no-ring
(copies instead of collective-permutes), ag-other (the all-gather gathers another value),
ag-order (the all-gather's replica group lists the partitions in reverse order).

--run-matrix runs every variant of the acceptance matrix through
`weave opt --passes=windowed-einsum-handler` and `weave compare` (--weave names the binary), prints
one line per variant and `ALL <n> PASS` at the end (exit 1 if any failed). Variants marked as
refused must leave the loop wide and say why in a missed remark.

Python 3 standard library only. Writes the module to stdout or -o FILE.
"""
import argparse
import os
import subprocess
import sys
import tempfile

FP8 = {"e4m3fn": "f8e4m3fn", "e5m2": "f8e5m2", "e4m3fnuz": "f8e4m3fnuz", "e5m2fnuz": "f8e5m2fnuz"}
VIEWS = ("bitcast", "broadcast", "copy", "reshape", "transpose", "slice")


def pairs_str(pairs):
    return "{" + ",".join("{%d,%d}" % p for p in pairs) + "}"


def table_str(n, m):
    return "{" + ", ".join(str(i * m) for i in range(n)) + "}"


class Gen:
    def __init__(self, a):
        self.a = a
        self.n = a.partitions
        self.groups = a.groups
        if self.n % self.groups:
            raise SystemExit("--groups must divide the partition count")
        self.r = self.n // self.groups  # ring size
        self.rolled = a.rolled or self.r % 2 == 1
        self.wide = a.wide if a.fp8 else a.dtype
        self.fp8 = [FP8[t] for t in a.fp8.split(",")] if a.fp8 else None
        self.xscale = a.xscale
        if a.neg == "pid-scale":
            self.xscale = "pid"
        elif a.neg == "unsharded-scale":
            self.xscale = "unannotated"
        self.lines = []
        self.comps = []
        self.channel = 10
        self.need_max = False

    def ch(self):
        self.channel += 1
        return self.channel

    # ---- rings and groups ----
    def ring_pairs(self, step):
        """Pairs s -> s+step within each ring group."""
        r = self.r
        return [(g * r + s, g * r + (s + step) % r) for g in range(self.groups) for s in range(r)]

    def group_list(self, reverse=False):
        r = self.r
        gs = []
        for g in range(self.groups):
            ids = list(range(g * r, (g + 1) * r))
            gs.append(list(reversed(ids)) if reverse else ids)
        return "{" + ",".join("{" + ",".join(map(str, ids)) + "}" for ids in gs) + "}"

    def tiled(self, rank, dim):
        """Sharding tiling `dim` over the ring (N/G tiles), replicated over the G rings."""
        dims = [1] * rank
        dims[dim] = self.r
        if self.groups == 1:
            return "{devices=[%s]<=[%d]}" % (",".join(map(str, dims)), self.n)
        return "{devices=[%s,%d]<=[%d,%d]T(1,0) last_tile_dim_replicate}" % (
            ",".join(map(str, dims)), self.groups, self.groups, self.r)

    # ---- shapes ----
    def t(self, dims, et=None):
        et = et or self.wide
        layout = ",".join(str(i) for i in reversed(range(len(dims))))
        return "%s[%s]{%s}" % (et, ",".join(str(d) for d in dims), layout) if dims else "%s[]" % et

    def dequant(self, out, name, q, scale, dims):
        """Lines computing `name` = dequant(q, scale) in the entry."""
        sc_dims = "{}"
        if self.a.neg == "vector-scale" and name.startswith("x"):
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

    def ring_branches(self, suffix, shape, step):
        send = "ring_send_%s" % suffix
        keep = "ring_keep_%s" % suffix
        if self.a.neg == "no-ring":
            body = "  ROOT sent = %s copy(window)" % shape
        else:
            body = "  ROOT sent = %s collective-permute(window), channel_id=%d, source_target_pairs=%s" % (
                shape, self.ch(), pairs_str(self.ring_pairs(step)))
        self.comps.append("%s {\n  window = %s parameter(0)\n%s\n}\n" % (send, shape, body))
        self.comps.append("%s {\n  ROOT window = %s parameter(0)\n}\n" % (keep, shape))
        return send, keep

    def permute(self, name, shape, src, step):
        if self.a.neg == "no-ring":
            return "  %s = %s copy(%s)" % (name, shape, src)
        return "  %s = %s collective-permute(%s), channel_id=%d, source_target_pairs=%s" % (
            name, shape, src, self.ch(), pairs_str(self.ring_pairs(step)))

    # ---- scales ----
    def scale(self, out, params, s, kind):
        w = self.wide
        if kind == "replicated":
            params.append(self.t([]))
            out.append("  %s = %s parameter(%d), sharding={replicated}" % (s, self.t([]), len(params) - 1))
        elif kind == "unannotated":
            params.append(self.t([]))
            out.append("  %s = %s parameter(%d)" % (s, self.t([]), len(params) - 1))
        elif kind == "pid":
            params.append(self.t([]))
            out.append("  %s.base = %s parameter(%d), sharding={replicated}" % (s, self.t([]), len(params) - 1))
            out.append("  %s.pid = u32[] partition-id()" % s)
            out.append("  %s.pidf = %s convert(%s.pid)" % (s, self.t([]), s))
            out.append("  %s = %s add(%s.base, %s.pidf)" % (s, self.t([]), s, s))
        elif kind in ("tiled", "grouped"):
            params.append(self.t([1]))
            out.append("  %s.shard = %s parameter(%d), sharding={devices=[%d]<=[%d]}"
                       % (s, self.t([1]), len(params) - 1, self.n, self.n))
            src = "%s.shard" % s
            if kind == "grouped":
                self.need_max = True
                out.append("  %s.amax = %s all-reduce(%s.shard), channel_id=%d, replica_groups=%s, "
                           "use_global_device_ids=true, to_apply=scale_max" % (s, self.t([1]), s, self.ch(),
                                                                              self.group_list()))
                src = "%s.amax" % s
            out.append("  %s = %s reshape(%s)" % (s, self.t([]), src))
        else:
            raise SystemExit("unknown scale source %s" % kind)
        del w

    # ---- views between the dequantization and the loop ----
    def view_chain(self, final):
        """(shape before the chain, [(op, out_shape, attrs)]) so that the chain ends at `final`."""
        ops = [v for v in self.a.views.split(",") if v]
        steps = []
        cur = list(final)
        for op in reversed(ops):
            if op in ("copy", "bitcast"):
                pre, attrs = list(cur), ""
            elif op == "transpose":
                pre = list(reversed(cur))
                attrs = ", dimensions={%s}" % ",".join(str(i) for i in reversed(range(len(cur))))
            elif op == "reshape":
                if cur[0] % 2 == 0:
                    pre = [2, cur[0] // 2] + cur[1:]  # split the leading dim
                else:
                    pre = [cur[0] * cur[1]] + cur[2:]
                attrs = ""
            elif op == "broadcast":
                if len(cur) >= 2:
                    pre = cur[1:]  # replicate along the leading dim
                    attrs = ", dimensions={%s}" % ",".join(str(i) for i in range(1, len(cur)))
                else:
                    pre = list(cur)
                    attrs = ", dimensions={0}"
            elif op == "slice":
                pre = cur[:-1] + [cur[-1] + 4]
                attrs = ", slice={%s}" % ", ".join(
                    ["[0:%d]" % d for d in cur[:-1]] + ["[2:%d]" % (cur[-1] + 2)])
            else:
                raise SystemExit("unknown view %s (one of %s)" % (op, ", ".join(VIEWS)))
            steps.append((op, list(cur), attrs))
            cur = pre
        steps.reverse()
        return cur, steps

    # ---- operand declarations in the entry ----
    def operand(self, out, params, name, dims, j, shard_dim, scale_kind):
        """Declares loop operand j (wide or dequantized); `shard_dim` is tiled over the ring (None:
        replicated). Returns the value name."""
        viewed = self.a.views and self.a.view_operand == name
        base_dims = dims
        steps = []
        if viewed:
            base_dims, steps = self.view_chain(dims)
        rank = len(base_dims)
        if shard_dim is None:
            sharding = "{replicated}"
        else:
            sharding = self.tiled(rank, min(shard_dim, rank - 1) if not viewed else 0)
        if not self.fp8:
            params.append(self.t(base_dims))
            out.append("  %s = %s parameter(%d), sharding=%s" % (name + ("v0" if viewed else ""), self.t(base_dims),
                                                               len(params) - 1, sharding))
            cur = name + ("v0" if viewed else "")
        else:
            q = name + "q"
            params.append(self.t(base_dims, self.fp8[j]))
            out.append("  %s = %s parameter(%d), sharding=%s" % (q, self.t(base_dims, self.fp8[j]), len(params) - 1,
                                                               sharding))
            s = name + "s"
            if self.a.neg == "vector-scale" and j == 0:
                params.append(self.t([base_dims[-1]]))
                out.append("  %s = %s parameter(%d), sharding={replicated}" % (s, self.t([base_dims[-1]]),
                                                                             len(params) - 1))
            else:
                self.scale(out, params, s, scale_kind)
            cur = name + "d"
            self.dequant(out, cur, q, s, base_dims)
        for i, (op, shape, attrs) in enumerate(steps):
            nxt = "%s.v%d" % (name, i + 1)
            out.append("  %s = %s %s(%s)%s" % (nxt, self.t(shape), op, cur, attrs))
            cur = nxt
        return cur

    # ---- all-gather loop ----
    def ag(self):
        a, r = self.a, self.r
        if a.contracting:
            return self.ag_contracting()
        m, K, c = 4, 16, 8  # shard rows, contracting size, stationary columns
        lhs = a.side == "lhs"
        shard = [m, K] if lhs else [K, m]
        stat = [K, c] if lhs else [c, K]
        blk = [m, c] if lhs else [c, m]
        outd = [r * m, c] if lhs else [c, r * m]
        gdim = 0 if lhs else 1
        gath = [r * m, K] if lhs else [K, r * m]
        X, W, O = self.t(shard), self.t(stat), self.t(outd)
        elems = [X, W] if lhs else [W, X]
        st = "(%s, %s, %s, %s, u32[])" % (elems[0], elems[1], O, O)
        wi = 0 if lhs else 1

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
             "  table = s32[%d]{0} constant(%s)" % (r, table_str(r, m)),
             "  pid = u32[] partition-id()",
             "  nparts = u32[] constant(%d)" % r,
             "  one = u32[] constant(1)",
             "  kp = u32[] add(k, pid)",
             "  blk0 = u32[] remainder(kp, nparts)",
             "  off0v = s32[1]{0} dynamic-slice(table, blk0), dynamic_slice_sizes={1}",
             "  off0 = s32[] reshape(off0v)",
             dot("part0", "shard", "wt"),
             dus("acc1", "acc", "part0", "off0"),
             "  k1 = u32[] add(k, one)"]
        if self.rolled:
            send, keep = self.ring_branches("ag", X, -1)
            b += ["  more = pred[] compare(k1, nparts), direction=LT",
                  "  nxt = %s conditional(more, shard, shard), true_computation=%s, false_computation=%s" % (X, send, keep)]
            root = ["nxt", "wt"] if lhs else ["wt", "nxt"]
            b += ["  ROOT next_state = %s tuple(%s, %s, acc1, spare, k1)" % (st, root[0], root[1]), "}"]
        else:
            b += [self.permute("nxt", X, "shard", -1), self.permute("nxt2", X, "nxt", -1),
                  "  k1p = u32[] add(k1, pid)",
                  "  blk1 = u32[] remainder(k1p, nparts)",
                  "  off1v = s32[1]{0} dynamic-slice(table, blk1), dynamic_slice_sizes={1}",
                  "  off1 = s32[] reshape(off1v)",
                  dot("part1", "nxt", "wt"),
                  dus("acc2", "acc1", "part1", "off1"),
                  "  k2 = u32[] add(k1, one)"]
            root = ["nxt2", "wt"] if lhs else ["wt", "nxt2"]
            b += ["  ROOT next_state = %s tuple(%s, %s, acc2, spare, k2)" % (st, root[0], root[1]), "}"]
        self.comps.append("\n".join(b) + "\n")
        self.comps.append("windowed_dot_general_cond_ag {\n  cst = %s parameter(0)\n"
                          "  ck = u32[] get-tuple-element(cst), index=4\n  trips = u32[] constant(%d)\n"
                          "  ROOT more = pred[] compare(ck, trips), direction=LT\n}\n" % (st, r))

        e, params = [], []
        x = self.operand(e, params, "x", shard, wi, gdim, self.xscale)
        wv = self.operand(e, params, "w", stat, 1 - wi, None, a.wscale)
        e += ["  fz = %s constant(0)" % self.t([]),
              "  zeros = %s broadcast(fz), dimensions={}" % O,
              "  k0 = u32[] constant(0)"]
        ops = (x, wv) if lhs else (wv, x)
        e.append("  init = %s tuple(%s, %s, zeros, zeros, k0)" % (st, ops[0], ops[1]))
        e.append("  loop = %s while(init), condition=windowed_dot_general_cond_ag, body=windowed_dot_general_body_ag" % st)
        outs, out_shapes = [], []
        if not a.unread:
            e.append("  y0 = %s get-tuple-element(loop), index=2" % O)
            outs.append("y0")
            out_shapes.append(O)
        if a.neg == "init-user":
            e.append("  peek = %s get-tuple-element(init), index=3" % O)
            outs.append("peek")
            out_shapes.append(O)
        if a.consumers:
            src = x
            if a.neg == "ag-other":
                params.append(self.t(shard))
                e.append("  other = %s parameter(%d), sharding=%s" % (self.t(shard), len(params) - 1,
                                                                    self.tiled(2, gdim)))
                src = "other"
            e.append("  xg = %s all-gather(%s), channel_id=5, replica_groups=%s, dimensions={%d}, use_global_device_ids=true"
                     % (self.t(gath), src, self.group_list(a.neg == "ag-order"), gdim))
            for i in range(a.consumers):
                params.append(self.t(stat))
                e.append("  wc%d = %s parameter(%d), sharding={replicated}" % (i, self.t(stat), len(params) - 1))
                yd = [r * m, c] if lhs else [c, r * m]
                ops = ("xg", "wc%d" % i) if lhs else ("wc%d" % i, "xg")
                e.append("  y%d = %s dot(%s, %s), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                         % (i + 1, self.t(yd), ops[0], ops[1]))
                outs.append("y%d" % (i + 1))
                out_shapes.append(self.t(yd))
        e.append("  ROOT result = (%s) tuple(%s)" % (", ".join(out_shapes), ", ".join(outs)))
        return params, e, out_shapes

    # ---- all-gather loop over the contracting dim ----
    def ag_contracting(self):
        """x [m, kb] sharded on its contracting dim circulates; w [r*kb, c] is whole and
        dynamic-sliced per block; every step adds its partial product (XLA's contracting case)."""
        a, r = self.a, self.r
        m, kb, c = 6, 8, 8
        K = r * kb
        X, W = self.t([m, kb]), self.t([K, c])
        acc_t = a.acc or self.wide
        O = self.t([m, c], acc_t)
        st = "(%s, %s, %s, %s, u32[])" % (X, W, O, O)

        def part(name, win, off):
            return ["  %s.w = %s dynamic-slice(wt, %s, zero), dynamic_slice_sizes={%d,%d}"
                    % (name, self.t([kb, c]), off, kb, c),
                    "  %s = %s dot(%s, %s.w), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                    % (name, self.t([m, c], acc_t), win, name)]

        b = ["windowed_dot_general_body_ag {", "  st = %s parameter(0)" % st,
             "  shard = %s get-tuple-element(st), index=0" % X,
             "  wt = %s get-tuple-element(st), index=1" % W,
             "  acc = %s get-tuple-element(st), index=2" % O,
             "  spare = %s get-tuple-element(st), index=3" % O,
             "  k = u32[] get-tuple-element(st), index=4",
             "  zero = s32[] constant(0)",
             "  table = s32[%d]{0} constant(%s)" % (r, table_str(r, kb)),
             "  pid = u32[] partition-id()",
             "  nparts = u32[] constant(%d)" % r,
             "  one = u32[] constant(1)",
             "  kp = u32[] add(k, pid)",
             "  blk0 = u32[] remainder(kp, nparts)",
             "  off0v = s32[1]{0} dynamic-slice(table, blk0), dynamic_slice_sizes={1}",
             "  off0 = s32[] reshape(off0v)"]
        b += part("part0", "shard", "off0")
        b += ["  acc1 = %s add(acc, part0)" % O, "  k1 = u32[] add(k, one)"]
        if self.rolled:
            send, keep = self.ring_branches("ag", X, -1)
            b += ["  more = pred[] compare(k1, nparts), direction=LT",
                  "  nxt = %s conditional(more, shard, shard), true_computation=%s, false_computation=%s" % (X, send, keep),
                  "  ROOT next_state = %s tuple(nxt, wt, acc1, spare, k1)" % st, "}"]
        else:
            b += [self.permute("nxt", X, "shard", -1), self.permute("nxt2", X, "nxt", -1),
                  "  k1p = u32[] add(k1, pid)",
                  "  blk1 = u32[] remainder(k1p, nparts)",
                  "  off1v = s32[1]{0} dynamic-slice(table, blk1), dynamic_slice_sizes={1}",
                  "  off1 = s32[] reshape(off1v)"]
            b += part("part1", "nxt", "off1")
            b += ["  acc2 = %s add(acc1, part1)" % O, "  k2 = u32[] add(k1, one)",
                  "  ROOT next_state = %s tuple(nxt2, wt, acc2, spare, k2)" % st, "}"]
        self.comps.append("\n".join(b) + "\n")
        self.comps.append("windowed_dot_general_cond_ag {\n  cst = %s parameter(0)\n"
                          "  ck = u32[] get-tuple-element(cst), index=4\n  trips = u32[] constant(%d)\n"
                          "  ROOT more = pred[] compare(ck, trips), direction=LT\n}\n" % (st, r))
        e, params = [], []
        x = self.operand(e, params, "x", [m, kb], 0, 1, self.xscale)
        wv = self.operand(e, params, "w", [K, c], 1, None, a.wscale)
        e += ["  fz = %s constant(0)" % self.t([], acc_t),
              "  zeros = %s broadcast(fz), dimensions={}" % O,
              "  k0 = u32[] constant(0)"]
        acc0 = "zeros"
        if a.acc_init == "param":  # the accumulator starts from a value (a bias), not zero
            params.append(O)
            e.append("  bias = %s parameter(%d), sharding={replicated}" % (O, len(params) - 1))
            acc0 = "bias"
        e += ["  init = %s tuple(%s, %s, %s, zeros, k0)" % (st, x, wv, acc0),
              "  loop = %s while(init), condition=windowed_dot_general_cond_ag, body=windowed_dot_general_body_ag" % st]
        outs, shapes = [], []
        if not a.unread:
            e.append("  y0a = %s get-tuple-element(loop), index=2" % O)
            y = "y0a"
            if acc_t != self.wide:
                e.append("  y0 = %s convert(y0a)" % self.t([m, c]))
                y = "y0"
            outs.append(y)
            shapes.append(self.t([m, c]))
        if a.consumers:
            e.append("  xg = %s all-gather(%s), channel_id=5, replica_groups=%s, dimensions={1}, use_global_device_ids=true"
                     % (self.t([m, K]), x, self.group_list(a.neg == "ag-order")))
            for i in range(a.consumers):
                params.append(self.t([K, c]))
                e.append("  wc%d = %s parameter(%d), sharding={replicated}" % (i, self.t([K, c]), len(params) - 1))
                e.append("  y%d = %s dot(xg, wc%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
                         % (i + 1, self.t([m, c]), i))
                outs.append("y%d" % (i + 1))
                shapes.append(self.t([m, c]))
        e.append("  ROOT result = (%s) tuple(%s)" % (", ".join(shapes), ", ".join(outs)))
        return params, e, shapes

    # ---- reduce-scatter loop ----
    def rs(self):
        r = self.r
        m, k, c = 4, 8, 8  # output rows per block, local contracting, columns
        M = r * m
        X, W, O = self.t([M, k]), self.t([k, c]), self.t([m, c])
        st = "(%s, %s, %s, %s, u32[])" % (X, W, O, O)
        b = ["windowed_dot_general_body_rs {", "  st = %s parameter(0)" % st,
             "  act = %s get-tuple-element(st), index=0" % X,
             "  wt = %s get-tuple-element(st), index=1" % W,
             "  k = u32[] get-tuple-element(st), index=4",
             "  zero = s32[] constant(0)",
             "  table = s32[%d]{0} constant(%s)" % (r, table_str(r, m)),
             "  pid = u32[] partition-id()",
             "  nparts = u32[] constant(%d)" % r,
             "  one = u32[] constant(1)"]
        if self.rolled:
            send, keep = self.ring_branches("rs", O, -1)
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
            b += ["  accA = %s get-tuple-element(st), index=2" % O,
                  self.permute("recvA", O, "accA", -2),
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
                  self.permute("sendB", O, "sumB", -2),
                  "  ROOT next_state = %s tuple(act, wt, newA, sendB, k2)" % st, "}"]
        self.comps.append("\n".join(b) + "\n")
        self.comps.append("windowed_dot_general_cond_rs {\n  cst = %s parameter(0)\n"
                          "  ck = u32[] get-tuple-element(cst), index=4\n  trips = u32[] constant(%d)\n"
                          "  ROOT more = pred[] compare(ck, trips), direction=LT\n}\n" % (st, r))
        e, params = [], []
        x = self.operand(e, params, "x", [M, k], 0, 1, self.xscale)
        wv = self.operand(e, params, "w", [k, c], 1, 0, self.a.wscale)
        e += ["  fz = %s constant(0)" % self.t([]),
              "  zeros = %s broadcast(fz), dimensions={}" % O,
              "  k0 = u32[] constant(0)",
              "  init = %s tuple(%s, %s, zeros, zeros, k0)" % (st, x, wv),
              "  loop = %s while(init), condition=windowed_dot_general_cond_rs, body=windowed_dot_general_body_rs" % st]
        if self.rolled:
            e.append("  y = %s get-tuple-element(loop), index=2" % O)
        elif self.a.unread:
            e.append("  y = %s get-tuple-element(loop), index=2" % O)
        else:
            e += ["  endA = %s get-tuple-element(loop), index=2" % O,
                  "  endB = %s get-tuple-element(loop), index=3" % O,
                  self.permute("shiftA", O, "endA", 1),
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
        if self.need_max:
            self.comps.insert(0, "scale_max {\n  a = %s parameter(0)\n  b = %s parameter(1)\n"
                                 "  ROOT m = %s maximum(a, b)\n}\n" % (self.t([]), self.t([]), self.t([])))
        name = self.a.name or "%s_n%d" % (self.a.kind, self.n)
        head = "HloModule %s, entry_computation_layout={(%s)->(%s)}, num_partitions=%d\n\n" % (
            name, ", ".join(params), ", ".join(outs), self.n)
        return head + "\n".join(self.comps) + "\nENTRY main {\n" + "\n".join(e) + "\n}\n"


def parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=["ag", "rs"], default="ag")
    p.add_argument("--partitions", "-n", type=int, default=4)
    p.add_argument("--groups", type=int, default=1, help="ring groups (consecutive partitions)")
    p.add_argument("--rolled", action="store_true", help="rolled layout even for even N")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    p.add_argument("--fp8", default="", help="FP8 pair, e.g. e4m3fn,e5m2 or e4m3fnuz,e5m2fnuz")
    p.add_argument("--wide", choices=["bf16", "f16", "f32"], default="bf16")
    p.add_argument("--scale", choices=["mul", "mulrev", "div"], default="mul")
    p.add_argument("--xscale", default="replicated",
                   choices=["replicated", "unannotated", "pid", "tiled", "grouped"])
    p.add_argument("--wscale", default="replicated",
                   choices=["replicated", "unannotated", "pid", "tiled", "grouped"])
    p.add_argument("--views", default="", help="comma-separated: " + ", ".join(VIEWS))
    p.add_argument("--view-operand", choices=["x", "w"], default="x")
    p.add_argument("--side", choices=["lhs", "rhs"], default="lhs")
    p.add_argument("--contracting", action="store_true", help="ag: the windowed dim is contracted")
    p.add_argument("--acc", choices=["", "f32"], default="", help="ag --contracting: accumulator type")
    p.add_argument("--acc-init", choices=["zeros", "param"], default="zeros",
                   help="ag --contracting: the accumulator's start (zeros, or a parameter)")
    p.add_argument("--consumers", type=int, default=0)
    p.add_argument("--unread", action="store_true", help="the loop's own result is not read")
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


# Expected outcome of a matrix variant: None = the rewrite applies (FP8: the loop carries FP8);
# a string = the FP8 shift is refused with a missed remark containing it.
def matrix(quick):
    """The acceptance matrix: (generator args, expected refusal or None)."""
    v = []
    for n in (2, 3, 4, 5, 8):
        for dt in ("bf16", "f16", "f32"):
            v.append((["--kind", "ag", "-n", str(n), "--dtype", dt, "--consumers", "1"], None))
        for pair in ("e4m3fn,e4m3fn", "e4m3fn,e5m2", "e5m2,e4m3fn"):
            v.append((["--kind", "ag", "-n", str(n), "--fp8", pair, "--consumers", "2"], None))
        v.append((["--kind", "rs", "-n", str(n), "--fp8", "e4m3fn,e4m3fn"], None))
        v.append((["--kind", "rs", "-n", str(n), "--dtype", "bf16"], None))
    for n in (2, 4, 8) if not quick else (4,):
        for sc in ("mul", "mulrev", "div"):
            for wide in ("bf16", "f16", "f32"):
                v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--scale", sc,
                           "--wide", wide, "--consumers", "1"], None))
    for n in (3, 4, 5):
        for side in ("lhs", "rhs"):
            for k in (1, 2, 3):
                v.append((["--kind", "ag", "-n", str(n), "--side", side, "--consumers", str(k)], None))
                v.append((["--kind", "ag", "-n", str(n), "--side", side, "--consumers", str(k),
                           "--fp8", "e5m2,e4m3fn", "--scale", "div"], None))
    v.append((["--kind", "ag", "-n", "4", "--rolled", "--fp8", "e4m3fn,e5m2", "--consumers", "2"], None))
    v.append((["--kind", "rs", "-n", "4", "--rolled", "--fp8", "e4m3fn,e5m2", "--scale", "mulrev"], None))
    # Look-through: each view alone and chained, on the windowed and on the stationary operand.
    for views in VIEWS + ("reshape,transpose", "slice,copy,bitcast", "transpose,broadcast,reshape"):
        for n in (4, 5) if not quick else (4,):
            v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--views", views,
                       "--consumers", "1"], None))
        v.append((["--kind", "ag", "-n", "4", "--fp8", "e4m3fn,e5m2", "--views", views,
                   "--view-operand", "w"], None))
    v.append((["--kind", "rs", "-n", "4", "--fp8", "e4m3fn,e4m3fn", "--views", "transpose,reshape"], None))
    # Scales: unannotated = replicated; per-partition scales only where nothing travels;
    # agreement within each ring group is enough.
    for n in (2, 4, 8) if not quick else (4,):
        v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--xscale", "unannotated",
                   "--wscale", "unannotated", "--consumers", "1"], None))
        v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--wscale", "tiled"], None))
        v.append((["--kind", "rs", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--xscale", "tiled",
                   "--wscale", "tiled"], None))
        v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--xscale", "tiled"],
                  "is not proven the same on every partition of the ring"))
    for n, g in ((4, 2), (8, 2), (8, 4)) if not quick else ((8, 2),):
        v.append((["--kind", "ag", "-n", str(n), "--groups", str(g), "--fp8", "e4m3fn,e4m3fn",
                   "--xscale", "grouped", "--wscale", "tiled", "--consumers", "1"], None))
        v.append((["--kind", "rs", "-n", str(n), "--groups", str(g), "--fp8", "e4m3fn,e4m3fn",
                   "--xscale", "grouped"], None))
    v.append((["--kind", "ag", "-n", "8", "--groups", "2", "--fp8", "e4m3fn,e4m3fn", "--xscale", "tiled"],
              "is not proven the same on every partition of the ring"))
    v.append((["--kind", "ag", "-n", "6", "--groups", "2", "--fp8", "e4m3fn,e4m3fn", "--xscale", "grouped",
               "--consumers", "2"], None))
    # ROCm FNUZ pairs (XLA's allowed pairs), and the pair XLA refuses.
    for pair in ("e4m3fnuz,e4m3fnuz", "e4m3fnuz,e5m2fnuz", "e5m2fnuz,e4m3fnuz"):
        for n in (2, 4) if not quick else (4,):
            v.append((["--kind", "ag", "-n", str(n), "--fp8", pair, "--consumers", "1"], None))
        v.append((["--kind", "rs", "-n", "4", "--fp8", pair], None))
    v.append((["--kind", "ag", "-n", "4", "--fp8", "e5m2fnuz,e5m2fnuz"], "is not a supported FP8 GEMM pair"))
    v.append((["--kind", "ag", "-n", "4", "--fp8", "e4m3fn,e4m3fnuz"], "is not a supported FP8 GEMM pair"))
    # The loop's own result unread: only its cache (AG) or its first accumulator (RS) is used.
    for n in (2, 4, 5):
        v.append((["--kind", "ag", "-n", str(n), "--fp8", "e4m3fn,e4m3fn", "--consumers", "2", "--unread"], None))
        v.append((["--kind", "ag", "-n", str(n), "--consumers", "1", "--unread"], None))
    v.append((["--kind", "rs", "-n", "4", "--fp8", "e4m3fn,e4m3fn", "--unread"], None))
    # Loops that contract the windowed dim: partial products collected outside the add chain.
    for n in (2, 3, 4, 8) if not quick else (4,):
        v.append((["--kind", "ag", "-n", str(n), "--contracting", "--consumers", "1"], None))
        v.append((["--kind", "ag", "-n", str(n), "--contracting", "--acc", "f32", "--dtype", "bf16"], None))
        v.append((["--kind", "ag", "-n", str(n), "--contracting", "--fp8", "e4m3fn,e4m3fn",
                   "--consumers", "1"], None))
        v.append((["--kind", "ag", "-n", str(n), "--contracting", "--acc-init", "param"], None))
    if quick:
        v = v[::3]
    return v


def run_matrix(a):
    failures = 0
    variants = matrix(a.quick)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (args, refusal) in enumerate(variants):
            g = parser().parse_args(args + ["--name", "v%d" % i])
            src = os.path.join(tmp, "v%d.hlo" % i)
            dst = os.path.join(tmp, "v%d.out.hlo" % i)
            with open(src, "w") as f:
                f.write(Gen(g).module())
            desc = " ".join(args)
            r = subprocess.run([a.weave, "opt", src, "--passes=windowed-einsum-handler", "--remarks", "-o", dst]
                               + a.opt_arg,
                               capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL opt %s: %s" % (desc, r.stderr.strip()[:300]))
                failures += 1
                continue
            shifted = "[applied] FP8 dequantization shifted into the loop" in r.stderr
            if g.fp8 and refusal is None and not shifted:
                print("FAIL shift %s: expected the FP8 shift; remarks: %s" % (desc, r.stderr.strip()[-400:]))
                failures += 1
                continue
            if refusal is not None and (shifted or refusal not in r.stderr):
                print("FAIL refusal %s: expected a missed remark with '%s'; remarks: %s"
                      % (desc, refusal, r.stderr.strip()[-400:]))
                failures += 1
                continue
            r = subprocess.run([a.weave, "compare", src, dst, "--num-partitions", str(g.partitions),
                                "--seed", str(i + 1)], capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL compare (rc %d) %s: %s" % (r.returncode, desc, (r.stdout + r.stderr).strip()[-400:]))
                failures += 1
                continue
            print("PASS %s%s" % (desc, " (refused as expected)" if refusal else ""))
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
