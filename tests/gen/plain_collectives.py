#!/usr/bin/env python3
"""Generates small partitioned HLO modules with plain collective matmuls, the input of the
windowed-einsum-decomposer pass:

  ag    dot(all-gather(x), w)                 (the all-gather on --side lhs|rhs, gathering a
                                                non-contracting dim or, with --contracting, a
                                                contracting dim)
  rs    reduce-scatter(dot(x, w))             (scattering the output dim owned by --side)
  ards  dynamic-slice(all-reduce(dot(x, w)))  (offsets from a partition-id table)

Options choose the ring: --partitions P and --groups, either `all` (one group {0..P-1}), a list
`{{0,1},{2,3}}`, or an iota form `[2,4]<=[8]` / `[4,2]<=[2,4]T(1,0)`. --dtype bf16|f32 gives plain
operands; fp8 gives dequantized operands multiply(convert(f8e4m3fn), broadcast(scale)) in bf16;
fp8direct gives a dot that reads the FP8 all-gather directly (bf16 x f8e4m3fn, as FSDP dumps do).
--consumers K adds K dots on one all-gather (ag only).

FP8 forms (ag, with --dtype fp8): --quant pre (dequantize the shard, then all-gather: what the
collective quantizer reads), post (all-gather the FP8 shard, then dequantize: what it writes),
convert (an unscaled convert after the FP8 all-gather); --fp8-type e4m3fn|e5m2; --scale
replicated (a scalar parameter), partition (a scalar computed from partition-id), row (a per-row
scale of the gathered dim, sharded with the data: applied to the shard before the all-gather, or
all-gathered with it after; --scale-groups gathers it over other groups, which breaks that);
--weight fp8|wide (the stationary operand dequantized, or a plain wide parameter).
For rs/ards with --dtype fp8, --scale row gives the lhs a per-row and the rhs a per-column scale.
--view transpose|reshape|reshape-bad puts a view between the all-gather and the dot (ag, lhs,
non-contracting) or between the dot and the reduce-scatter (rs: reshape of a batched dot; bad:
one that splits the scattered dim). --async writes the collective in XLA's async form
(all-gather-start/-done, an async-start/-done wrapping the reduce-scatter (--async-sugar:
reduce-scatter-start/-done), all-reduce-start/-done); --early-reader adds a reader of the
all-gather-done that is not a dot.

Python 3 standard library only. Writes the module to stdout or -o FILE.
"""
import argparse
import re
import sys


def expand_iota(text):
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if not m:
        raise SystemExit(f"bad iota groups: {text}")
    dims = [int(v) for v in m.group(1).split(",")]
    reshape = [int(v) for v in m.group(2).split(",")]
    perm = [int(v) for v in m.group(3).split(",")] if m.group(3) else list(range(len(reshape)))
    total = 1
    for r in reshape:
        total *= r
    # iota(total) reshaped to `reshape`, transposed by `perm`, flattened.
    tdims = [reshape[p] for p in perm]
    strides = [1] * len(reshape)
    for i in range(len(reshape) - 2, -1, -1):
        strides[i] = strides[i + 1] * reshape[i + 1]
    flat = []
    idx = [0] * len(tdims)
    for _ in range(total):
        src = sum(idx[j] * strides[perm[j]] for j in range(len(tdims)))
        flat.append(src)
        for j in range(len(tdims) - 1, -1, -1):
            idx[j] += 1
            if idx[j] < tdims[j]:
                break
            idx[j] = 0
    size = dims[-1]
    return [flat[i:i + size] for i in range(0, total, size)]


def parse_groups(text, partitions):
    if text == "all":
        return [list(range(partitions))], "{{%s}}" % ",".join(str(i) for i in range(partitions))
    if text.startswith("["):
        return expand_iota(text), text
    groups = [[int(v) for v in g.split(",")] for g in re.findall(r"\{([\d,]+)\}", text)]
    return groups, text


def shape(dtype, dims):
    if not dims:
        return f"{dtype}[]"
    layout = ",".join(str(i) for i in range(len(dims) - 1, -1, -1))
    return f"{dtype}[{','.join(str(d) for d in dims)}]{{{layout}}}"


class Module:
    def __init__(self, wide, fp8="f8e4m3fn"):
        self.lines = []
        self.params = []
        self.wide = wide
        self.fp8 = fp8
        self.count = 0

    def fresh(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def scalar_scale(self, name, kind):
        """A scalar scale: a replicated parameter, or one computed from partition-id."""
        if kind != "partition":
            return self.param(name, self.wide, [], "{replicated}")
        self.lines.append(f"  {name}.pid = u32[] partition-id()")
        self.lines.append(f"  {name}.pidf = {self.wide}[] convert({name}.pid)")
        self.lines.append(f"  {name}.half = {self.wide}[] constant(0.5)")
        self.lines.append(f"  {name}.one = {self.wide}[] constant(1)")
        self.lines.append(f"  {name}.mul = {self.wide}[] multiply({name}.pidf, {name}.half)")
        self.lines.append(f"  {name} = {self.wide}[] add({name}.mul, {name}.one)")
        return name

    def dequant(self, name, q, dims, scale, bdims):
        self.lines.append(f"  {name}.cvt = {shape(self.wide, dims)} convert({q})")
        self.lines.append(f"  {name}.sbc = {shape(self.wide, dims)} broadcast({scale}), "
                          f"dimensions={{{','.join(str(d) for d in bdims)}}}")
        self.lines.append(f"  {name} = {shape(self.wide, dims)} multiply({name}.cvt, {name}.sbc)")
        return name

    def param(self, name, dtype, dims, sharding=None):
        n = len(self.params)
        s = f", sharding={sharding}" if sharding else ""
        self.lines.append(f"  {name} = {shape(dtype, dims)} parameter({n}){s}")
        self.params.append(shape(dtype, dims))
        return name

    def operand(self, name, dims, mode):
        """An operand of the dot: plain wide parameter, or dequantized FP8 (mode fp8)."""
        if mode != "fp8":
            return self.param(name, self.wide, dims)
        q = self.param(name + "q", self.fp8, dims)
        s = self.param(name + "s", self.wide, [], "{replicated}")
        self.lines.append(f"  {name}.cvt = {shape(self.wide, dims)} convert({q})")
        self.lines.append(f"  {name}.sbc = {shape(self.wide, dims)} broadcast({s}), dimensions={{}}")
        self.lines.append(f"  {name} = {shape(self.wide, dims)} multiply({name}.cvt, {name}.sbc)")
        return name


def dot_out(lhs, rhs, lc, rc):
    return [d for i, d in enumerate(lhs) if i != lc] + [d for i, d in enumerate(rhs) if i != rc]


def epilogue(m, kind, r, sh, k):
    """Elementwise ops after result r (shape text sh); returns the new (name, shape) result."""
    dtype = sh.split("[")[0]
    dims = [int(d) for d in sh.split("[")[1].split("]")[0].split(",")]
    full = shape(dtype, dims)
    bdim = 1 if kind == "rowbias" else len(dims) - 1
    L = m.lines
    if kind in ("bias-relu", "rowbias", "twice"):
        m.param(f"bias{k}", dtype, [dims[bdim]], "{replicated}")
        L.append(f"  bias{k}.b = {full} broadcast(bias{k}), dimensions={{{bdim}}}")
        L.append(f"  {r}.biased = {full} add({r}, bias{k}.b)")
        if kind == "twice":
            L.append(f"  {r}.neg = {full} negate({r}.biased)")
            L.append(f"  {r}.pair = ({full}, {full}) tuple({r}.biased, {r}.neg)")
            return (f"{r}.pair", f"({full}, {full})")
        L.append(f"  {r}.zero = {dtype}[] constant(0)")
        L.append(f"  {r}.zeros = {full} broadcast({r}.zero), dimensions={{}}")
        L.append(f"  {r}.relu = {full} maximum({r}.biased, {r}.zeros)")
        return (f"{r}.relu", full)
    # tanh GELU: x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
    c = lambda n, v: (L.append(f"  {r}.{n} = {dtype}[] constant({v})"),
                      L.append(f"  {r}.{n}b = {full} broadcast({r}.{n}), dimensions={{}}"))
    c("c0", 0.044715)
    c("c1", 0.7978845608)
    c("one", 1)
    c("half", 0.5)
    L.append(f"  {r}.sq = {full} multiply({r}, {r})")
    L.append(f"  {r}.cube = {full} multiply({r}.sq, {r})")
    L.append(f"  {r}.t = {full} multiply({r}.c0b, {r}.cube)")
    L.append(f"  {r}.sum = {full} add({r}, {r}.t)")
    L.append(f"  {r}.in = {full} multiply({r}.c1b, {r}.sum)")
    L.append(f"  {r}.tanh = {full} tanh({r}.in)")
    L.append(f"  {r}.p1 = {full} add({r}.oneb, {r}.tanh)")
    L.append(f"  {r}.cdf = {full} multiply({r}.halfb, {r}.p1)")
    L.append(f"  {r}.gelu = {full} multiply({r}, {r}.cdf)")
    return (f"{r}.gelu", full)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["ag", "rs", "ards"])
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--groups", default="all")
    ap.add_argument("--side", choices=["lhs", "rhs"], default="lhs")
    ap.add_argument("--contracting", action="store_true")
    ap.add_argument("--batch", action="store_true",
                    help="ag: gather a batch dim; rs/ards: scatter the output batch dim")
    ap.add_argument("--dtype", choices=["bf16", "f32", "fp8", "fp8direct"], default="bf16")
    ap.add_argument("--fp8-type", choices=["e4m3fn", "e5m2"], default="e4m3fn")
    ap.add_argument("--quant", choices=["pre", "post", "convert"], default="pre")
    ap.add_argument("--scale", choices=["replicated", "partition", "row"], default="replicated")
    ap.add_argument("--scale-groups", default=None,
                    help="ag --quant post --scale row: gather the row scale over these groups")
    ap.add_argument("--weight", choices=["fp8", "wide"], default=None)
    ap.add_argument("--consumer-weights", default=None,
                    help="ag: per consumer, fp8|wide (comma-separated), and --consumer-cols: "
                         "per consumer output columns (the owner choice tests)")
    ap.add_argument("--consumer-cols", default=None)
    ap.add_argument("--view", choices=["none", "transpose", "reshape", "reshape-bad"],
                    default="none")
    ap.add_argument("--async", dest="async_", action="store_true")
    ap.add_argument("--async-sugar", action="store_true")
    ap.add_argument("--early-reader", action="store_true")
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--block", type=int, default=2, help="shard length along the collective dim")
    ap.add_argument("--channel", type=int, default=1)
    ap.add_argument("--epilogue", choices=["none", "bias-relu", "gelu", "rowbias", "twice"],
                    default="none",
                    help="after each result: a bias along the last dim then ReLU; the tanh GELU; "
                         "a bias along dim 1 (the gathered rows); a bias whose sum is read twice")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()

    groups, groups_text = parse_groups(a.groups, a.partitions)
    n = len(groups[0])
    wide = "f32" if a.dtype == "f32" else "bf16"
    mode = "fp8" if a.dtype == "fp8" else "plain"
    fp8t = "f8" + a.fp8_type
    m = Module(wide, fp8t)
    b = a.block
    attrs = f"channel_id={a.channel}, replica_groups={groups_text}"
    wmode = a.weight if a.weight else ("fp8" if mode == "fp8" else "plain")
    if wmode == "wide":
        wmode = "plain"
    results = []
    comps = ""

    def all_gather(name, operand, dtype, full, dim, channel=None, groups=None):
        """An all-gather (or all-gather-start/-done with --async); returns the value's name."""
        at = attrs if channel is None else f"channel_id={channel}, replica_groups={groups}"
        tail = f"{at}, dimensions={{{dim}}}, use_global_device_ids=true"
        if not a.async_:
            m.lines.append(f"  {name} = {shape(dtype, full)} all-gather({operand}), {tail}")
            return name
        local = list(full)
        local[dim] //= n if groups is None else len(parse_groups(groups, a.partitions)[0][0])
        m.lines.append(f"  {name}.start = ({shape(dtype, local)}, {shape(dtype, full)}) "
                       f"all-gather-start({operand}), {tail}")
        m.lines.append(f"  {name} = {shape(dtype, full)} all-gather-done({name}.start)")
        return name

    def window(local, full, dim):
        """The gathered operand of the dot (FP8 forms, scales, async); returns (name, type)."""
        if a.dtype == "fp8direct":
            x = m.param("x", fp8t, local)
            return all_gather("xg", x, fp8t, full, dim), fp8t
        if mode != "fp8":
            x = m.operand("x", local, mode)
            return all_gather("xg", x, wide, full, dim), wide
        q = m.param("xq", fp8t, local)
        if a.quant == "pre":
            if a.scale == "row":
                s = m.param("xs", wide, [local[dim]])
                x = m.dequant("x", q, local, s, [dim])
            else:
                s = m.scalar_scale("xs", a.scale)
                x = m.dequant("x", q, local, s, [])
            return all_gather("xg", x, wide, full, dim), wide
        g = all_gather("xg", q, fp8t, full, dim)
        if a.quant == "convert":
            m.lines.append(f"  xw = {shape(wide, full)} convert({g})")
            return "xw", wide
        if a.scale == "row":
            s = m.param("xs", wide, [local[dim]])
            if a.scale_groups:
                sg_groups, sg_text = parse_groups(a.scale_groups, a.partitions)
                sfull = [local[dim] * len(sg_groups[0])]
                if sfull[0] != full[dim]:
                    raise SystemExit("--scale-groups must give groups of the data's group size")
                sg = all_gather("xsg", s, wide, sfull, 0, channel=a.channel + 50, groups=sg_text)
            else:
                sg = all_gather("xsg", s, wide, [full[dim]], 0, channel=a.channel + 50,
                                groups=groups_text)
            return m.dequant("xd", g, full, sg, [dim]), wide
        s = m.scalar_scale("xs", a.scale)
        return m.dequant("xd", g, full, s, []), wide

    cweights = a.consumer_weights.split(",") if a.consumer_weights else None
    ccols = [int(c) for c in a.consumer_cols.split(",")] if a.consumer_cols else None

    def weight(name, dims, col_dim=None, mode_override=None):
        """The stationary operand: dequantized FP8 (a per-column scale with --scale row) or wide."""
        wm = wmode if mode_override is None else ("fp8" if mode_override == "fp8" else "plain")
        if wm != "fp8":
            return m.param(name, wide, dims)
        q = m.param(name + "q", fp8t, dims)
        if a.scale == "row" and col_dim is not None:
            s = m.param(name + "s", wide, [dims[col_dim]])
            return m.dequant(name, q, dims, s, [col_dim])
        s = m.param(name + "s", wide, [], "{replicated}")
        return m.dequant(name, q, dims, s, [])

    if a.kind == "ag" and a.batch:
        # lhs [B, M, K], rhs [B, K, F], batch dims {0}; the all-gather on --side along dim 0.
        M, K, F = 3, 4, 5
        B = n * b
        lhs_dims, rhs_dims = [B, M, K], [B, K, F]
        local = list(lhs_dims if a.side == "lhs" else rhs_dims)
        full = list(local)
        local[0] = b
        xg, _ = window(local, full, 0)
        for c in range(a.consumers):
            w = m.operand(f"w{c}", rhs_dims if a.side == "lhs" else lhs_dims, wmode)
            ops = f"{xg}, {w}" if a.side == "lhs" else f"{w}, {xg}"
            out = [B, M, F]
            m.lines.append(f"  y{c} = {shape(wide, out)} dot({ops}), lhs_batch_dims={{0}}, "
                           "lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}")
            results.append((f"y{c}", shape(wide, out)))
    elif a.kind == "ag" and a.view != "none":
        # lhs only, non-contracting; the view sits between the all-gather and the dot.
        K, F = 4, 5
        G = n * b
        if a.view == "transpose":
            full, dim = [2, G, K], 1
        elif a.view == "reshape":
            full, dim = [G, 3, K], 0
        else:
            full, dim = [3, G, K], 1
        local = list(full)
        local[dim] = b
        xg, _ = window(local, full, dim)
        if a.view == "transpose":
            vdims = [full[1], full[0], K]
            m.lines.append(f"  xv = {shape(wide, vdims)} transpose({xg}), dimensions={{1,0,2}}")
            lc = 2
        else:
            vdims = [full[0] * full[1], K]
            m.lines.append(f"  xv = {shape(wide, vdims)} reshape({xg})")
            lc = 1
        if a.early_reader:
            m.lines.append(f"  early = {shape(wide, full)} negate({xg})")
            results.append(("early", shape(wide, full)))
        for c in range(a.consumers):
            w = weight(f"w{c}", [K, F], col_dim=1)
            out = [d for i, d in enumerate(vdims) if i != lc] + [F]
            m.lines.append(f"  y{c} = {shape(wide, out)} dot(xv, {w}), "
                           f"lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{0}}")
            results.append((f"y{c}", shape(wide, out)))
    elif a.kind == "ag":
        # lhs [2, M, K], rhs [K, F]; lhs_contracting {2}, rhs_contracting {0}.
        M, K, F = 3, 4, 5
        if a.side == "lhs":
            dim = 2 if a.contracting else 1
            full = [2, M, K]
            full[dim] = n * b
            local = list(full)
            local[dim] = b
            rhs_dims = [full[2], F]
        else:
            dim = 0 if a.contracting else 1
            full = [K, F]
            full[dim] = n * b
            local = list(full)
            local[dim] = b
            lhs_dims = [2, M, full[0]]
        xg, gtype = window(local, full, dim)
        if a.early_reader:
            m.lines.append(f"  early = {shape(gtype, full)} negate({xg})")
            results.append(("early", shape(gtype, full)))
        for c in range(a.consumers):
            if a.side == "lhs":
                wd = list(rhs_dims)
                if ccols:
                    wd[1] = ccols[c]
                w = weight(f"w{c}", wd, col_dim=1,
                           mode_override=cweights[c] if cweights else None)
                out = dot_out(full, wd, 2, 0)
                m.lines.append(f"  y{c} = {shape(wide, out)} dot({xg}, {w}), "
                               "lhs_contracting_dims={2}, rhs_contracting_dims={0}")
            else:
                w = weight(f"w{c}", lhs_dims, col_dim=None)
                out = dot_out(lhs_dims, full, 2, 0)
                m.lines.append(f"  y{c} = {shape(wide, out)} dot({w}, {xg}), "
                               "lhs_contracting_dims={2}, rhs_contracting_dims={0}")
            results.append((f"y{c}", shape(wide, out)))
    else:
        # lhs [M, K], rhs [K, F] with K sharded (local K), output [M, F] scattered on dim 0 (lhs
        # sliced) or 1 (rhs sliced).
        K = 3
        row = mode == "fp8" and a.scale == "row"

        def rs_operand(name, dims, row_dim):
            if row:
                q = m.param(name + "q", fp8t, dims)
                s = m.param(name + "s", wide, [dims[row_dim]])
                return m.dequant(name, q, dims, s, [row_dim])
            return m.operand(name, dims, mode)

        view_dims = None
        if a.batch or a.view != "none":
            # lhs [B, 4, K], rhs [B, K, 5], output [B, 4, 5] scattered on the batch dim 0 (or,
            # with --view, reshaped to [B*4, 5] and scattered on dim 0).
            B = n * b if a.view != "reshape-bad" else 3
            M = 4 if a.view != "reshape-bad" else n * b
            x = rs_operand("x", [B, M, K], 1)
            w = rs_operand("w", [B, K, 5], 2)
            full = [B, M, 5]
            dim = 0
            dims = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"
            if a.view != "none":
                view_dims = [B * M, 5]
        else:
            M = n * b if a.side == "lhs" else 4
            F = n * b if a.side == "rhs" else 5
            dim = 0 if a.side == "lhs" else 1
            x = rs_operand("x", [M, K], 0)
            w = rs_operand("w", [K, F], 1)
            full = [M, F]
            dims = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
        m.lines.append(f"  partial = {shape(wide, full)} dot({x}, {w}), {dims}")
        scattered = "partial"
        if view_dims is not None:
            m.lines.append(f"  view = {shape(wide, view_dims)} reshape(partial)")
            scattered, full = "view", view_dims
        comps = (f"sum {{\n  a = {wide}[] parameter(0)\n  b = {wide}[] parameter(1)\n"
                 f"  ROOT s = {wide}[] add(a, b)\n}}\n\n")
        local = list(full)
        local[dim] = full[dim] // n
        rs_attrs = f"{attrs}, dimensions={{{dim}}}, use_global_device_ids=true, to_apply=sum"
        if a.kind == "rs" and not a.async_:
            m.lines.append(f"  y = {shape(wide, local)} reduce-scatter({scattered}), {rs_attrs}")
        elif a.kind == "rs" and a.async_sugar:
            m.lines.append(f"  y.start = (({shape(wide, full)}), {shape(wide, local)}) "
                           f"reduce-scatter-start({scattered}), {rs_attrs}")
            m.lines.append(f"  y = {shape(wide, local)} reduce-scatter-done(y.start)")
        elif a.kind == "rs":
            comps += (f"wrapped_reduce_scatter {{\n  p = {shape(wide, full)} parameter(0)\n"
                      f"  ROOT rs = {shape(wide, local)} reduce-scatter(p), {rs_attrs}\n}}\n\n")
            m.lines.append(f"  y.start = (({shape(wide, full)}), {shape(wide, local)}) "
                           f"async-start({scattered}), calls=wrapped_reduce_scatter")
            m.lines.append(f"  y = {shape(wide, local)} async-done(y.start)")
        else:
            index = [0] * a.partitions
            for g in groups:
                for i, p in enumerate(g):
                    index[p] = i * b
            ar_attrs = f"{attrs}, use_global_device_ids=true, to_apply=sum"
            if a.async_:
                m.lines.append(f"  summed.start = {shape(wide, full)} all-reduce-start({scattered}), "
                               f"{ar_attrs}")
                m.lines.append(f"  summed = {shape(wide, full)} all-reduce-done(summed.start)")
            else:
                m.lines.append(f"  summed = {shape(wide, full)} all-reduce({scattered}), {ar_attrs}")
            m.lines.append("  pid = u32[] partition-id()")
            m.lines.append(f"  offsets = s32[{a.partitions}]{{0}} constant({{{', '.join(map(str, index))}}})")
            m.lines.append("  off.ds = s32[1]{0} dynamic-slice(offsets, pid), dynamic_slice_sizes={1}")
            m.lines.append("  off = s32[] reshape(off.ds)")
            m.lines.append("  zero = s32[] constant(0)")
            offs = ["zero"] * len(full)
            offs[dim] = "off"
            m.lines.append(f"  y = {shape(wide, local)} dynamic-slice(summed, {', '.join(offs)}), "
                           f"dynamic_slice_sizes={{{','.join(map(str, local))}}}")
        results.append(("y", shape(wide, local)))
    if a.epilogue != "none":
        results = [epilogue(m, a.epilogue, r, sh, k) for k, (r, sh) in enumerate(results)]
    body = m.lines
    root_shape = "(" + ", ".join(s for _, s in results) + ")"
    body.append(f"  ROOT result = {root_shape} tuple({', '.join(r for r, _ in results)})")
    layout = f"{{({', '.join(m.params)})->{root_shape}}}"
    text = (f"HloModule plain_{a.kind}, entry_computation_layout={layout}, "
            f"num_partitions={a.partitions}\n\n{comps}ENTRY main {{\n" + "\n".join(body) + "\n}\n")
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
