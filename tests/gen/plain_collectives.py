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
    def __init__(self, wide):
        self.lines = []
        self.params = []
        self.wide = wide

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
        q = self.param(name + "q", "f8e4m3fn", dims)
        s = self.param(name + "s", self.wide, [], "{replicated}")
        self.lines.append(f"  {name}.cvt = {shape(self.wide, dims)} convert({q})")
        self.lines.append(f"  {name}.sbc = {shape(self.wide, dims)} broadcast({s}), dimensions={{}}")
        self.lines.append(f"  {name} = {shape(self.wide, dims)} multiply({name}.cvt, {name}.sbc)")
        return name


def dot_out(lhs, rhs, lc, rc):
    return [d for i, d in enumerate(lhs) if i != lc] + [d for i, d in enumerate(rhs) if i != rc]


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
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--block", type=int, default=2, help="shard length along the collective dim")
    ap.add_argument("--channel", type=int, default=1)
    ap.add_argument("-o", "--output")
    a = ap.parse_args()

    groups, groups_text = parse_groups(a.groups, a.partitions)
    n = len(groups[0])
    wide = "f32" if a.dtype == "f32" else "bf16"
    mode = "fp8" if a.dtype == "fp8" else "plain"
    m = Module(wide)
    b = a.block
    attrs = f"channel_id={a.channel}, replica_groups={groups_text}"
    body = []
    results = []
    comps = ""
    if a.kind == "ag" and a.batch:
        # lhs [B, M, K], rhs [B, K, F], batch dims {0}; the all-gather on --side along dim 0.
        M, K, F = 3, 4, 5
        B = n * b
        lhs_dims, rhs_dims = [B, M, K], [B, K, F]
        local = list(lhs_dims if a.side == "lhs" else rhs_dims)
        full = list(local)
        local[0] = b
        x = m.operand("x", local, mode)
        m.lines.append(f"  xg = {shape(wide, full)} all-gather({x}), {attrs}, dimensions={{0}}, "
                       "use_global_device_ids=true")
        for c in range(a.consumers):
            w = m.operand(f"w{c}", rhs_dims if a.side == "lhs" else lhs_dims, mode)
            ops = f"xg, {w}" if a.side == "lhs" else f"{w}, xg"
            out = [B, M, F]
            m.lines.append(f"  y{c} = {shape(wide, out)} dot({ops}), lhs_batch_dims={{0}}, "
                           "lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}")
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
        gtype = "f8e4m3fn" if a.dtype == "fp8direct" else wide
        if a.dtype == "fp8direct":
            x = m.param("x", "f8e4m3fn", local)
        else:
            x = m.operand("x", local, mode)
        m.lines.append(f"  xg = {shape(gtype, full)} all-gather({x}), {attrs}, dimensions={{{dim}}}, "
                       "use_global_device_ids=true")
        for c in range(a.consumers):
            if a.side == "lhs":
                w = m.operand(f"w{c}", rhs_dims, mode)
                out = dot_out(full, rhs_dims, 2, 0)
                m.lines.append(f"  y{c} = {shape(wide, out)} dot(xg, {w}), lhs_contracting_dims={{2}}, "
                               "rhs_contracting_dims={0}")
            else:
                w = m.operand(f"w{c}", lhs_dims, mode)
                out = dot_out(lhs_dims, full, 2, 0)
                m.lines.append(f"  y{c} = {shape(wide, out)} dot({w}, xg), lhs_contracting_dims={{2}}, "
                               "rhs_contracting_dims={0}")
            results.append((f"y{c}", shape(wide, out)))
    else:
        # lhs [M, K], rhs [K, F] with K sharded (local K), output [M, F] scattered on dim 0 (lhs
        # sliced) or 1 (rhs sliced).
        K = 3
        if a.batch:
            # lhs [B, 4, K], rhs [B, K, 5], output [B, 4, 5] scattered on the batch dim 0.
            B = n * b
            x = m.operand("x", [B, 4, K], mode)
            w = m.operand("w", [B, K, 5], mode)
            full = [B, 4, 5]
            dim = 0
            dims = "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"
        else:
            M = n * b if a.side == "lhs" else 4
            F = n * b if a.side == "rhs" else 5
            dim = 0 if a.side == "lhs" else 1
            x = m.operand("x", [M, K], mode)
            w = m.operand("w", [K, F], mode)
            full = [M, F]
            dims = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
        local = list(full)
        local[dim] = b
        m.lines.append(f"  partial = {shape(wide, full)} dot({x}, {w}), {dims}")
        comps = (f"sum {{\n  a = {wide}[] parameter(0)\n  b = {wide}[] parameter(1)\n"
                 f"  ROOT s = {wide}[] add(a, b)\n}}\n\n")
        if a.kind == "rs":
            m.lines.append(f"  y = {shape(wide, local)} reduce-scatter(partial), {attrs}, "
                           f"dimensions={{{dim}}}, use_global_device_ids=true, to_apply=sum")
        else:
            index = [0] * a.partitions
            for g in groups:
                for i, p in enumerate(g):
                    index[p] = i * b
            m.lines.append(f"  summed = {shape(wide, full)} all-reduce(partial), {attrs}, "
                           "use_global_device_ids=true, to_apply=sum")
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
