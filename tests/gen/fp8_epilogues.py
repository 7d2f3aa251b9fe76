#!/usr/bin/env python3
"""One HLO module with an FP8 dot for every (epilogue, operand types, output) combination that
XLA's GemmRewriter folds into a cuBLASLt FP8 call (issue 51), each with its own parameters:

  epilogues: none, vector bias, matrix bias, ReLU, GELU (tanh), bias + ReLU, bias + GELU, output
             scale (a unscaled, wide outputs only)
  operands:  f8e4m3fn x f8e4m3fn, f8e5m2 x f8e4m3fn (cuBLASLt takes no E5M2 x E5M2)
  outputs:   bf16, f32, f8e4m3fn (the dot in bf16, then scaled, clamped to +-448, converted,
             with an amax of the epilogue's result)

Dots are named `<epilogue>_<a type>_<output>`, e.g. `bias_relu_e5m2_f8`. Shapes: [16,32] x
[32,16] (M, K, N multiples of 16: no padding). Standard library only; writes the module to -o or
stdout.
"""

import argparse
import sys

EPILOGUES = ["none", "bias", "matrix", "relu", "gelu", "bias_relu", "bias_gelu", "scale"]
A_TYPES = {"e4m3": "f8e4m3fn", "e5m2": "f8e5m2"}
OUTPUTS = ["bf16", "f32", "f8"]


class Module:
    def __init__(self):
        self.lines = []
        self.params = []
        self.outputs = []

    def param(self, name, shape):
        self.lines.append(f"  {name} = {shape} parameter({len(self.params)})")
        self.params.append(shape)

    def op(self, text):
        self.lines.append("  " + text)


def emit(m, epi, at, out):
    name = f"{epi}_{at}_{out}"
    wide = "f32" if out == "f32" else "bf16"
    M, K, N = 16, 32, 16
    mk, kn, mn = f"[{M},{K}]", f"[{K},{N}]", f"[{M},{N}]"
    m.param(f"{name}.a8", f"{A_TYPES[at]}{mk}")
    m.param(f"{name}.b8", f"f8e4m3fn{kn}")
    m.op(f"{name}.aw = {wide}{mk} convert({name}.a8)")
    if epi == "scale":
        a = f"{name}.aw"  # unscaled a: the output scale becomes a_scale
    else:
        m.param(f"{name}.as", "f32[]")
        m.op(f"{name}.asw = {wide}[] convert({name}.as)")
        m.op(f"{name}.asb = {wide}{mk} broadcast({name}.asw), dimensions={{}}")
        m.op(f"{name}.a = {wide}{mk} multiply({name}.aw, {name}.asb)")
        a = f"{name}.a"
    m.op(f"{name}.b = {wide}{kn} convert({name}.b8)")
    m.op(f"{name} = {wide}{mn} dot({a}, {name}.b), lhs_contracting_dims={{1}}, "
         f"rhs_contracting_dims={{0}}")
    v = name
    if epi in ("bias", "bias_relu", "bias_gelu"):
        m.param(f"{name}.bias", f"bf16[{N}]")
        bias = f"{name}.bias"
        if wide == "f32":
            m.op(f"{name}.bias32 = f32[{N}] convert({name}.bias)")
            bias = f"{name}.bias32"
        m.op(f"{name}.bb = {wide}{mn} broadcast({bias}), dimensions={{1}}")
        m.op(f"{name}.biased = {wide}{mn} add({v}, {name}.bb)")
        v = f"{name}.biased"
    if epi == "matrix":
        m.param(f"{name}.c", f"bf16{mn}" if out == "f8" else f"{wide}{mn}")
        m.op(f"{name}.plus = {wide}{mn} add({name}.c, {v})")
        v = f"{name}.plus"
    if epi in ("relu", "bias_relu"):
        m.op(f"{name}.z = {wide}[] constant(0)")
        m.op(f"{name}.zb = {wide}{mn} broadcast({name}.z), dimensions={{}}")
        m.op(f"{name}.relu = {wide}{mn} maximum({v}, {name}.zb)")
        v = f"{name}.relu"
    if epi in ("gelu", "bias_gelu"):
        for c, val in (("c0", "0.044715"), ("c1", "0.7978845608"), ("one", "1"), ("half", "0.5")):
            m.op(f"{name}.{c} = {wide}[] constant({val})")
            m.op(f"{name}.{c}b = {wide}{mn} broadcast({name}.{c}), dimensions={{}}")
        m.op(f"{name}.sq = {wide}{mn} multiply({v}, {v})")
        m.op(f"{name}.cube = {wide}{mn} multiply({v}, {name}.sq)")
        m.op(f"{name}.t = {wide}{mn} multiply({name}.cube, {name}.c0b)")
        m.op(f"{name}.sum = {wide}{mn} add({v}, {name}.t)")
        m.op(f"{name}.in = {wide}{mn} multiply({name}.sum, {name}.c1b)")
        m.op(f"{name}.tanh = {wide}{mn} tanh({name}.in)")
        m.op(f"{name}.p1 = {wide}{mn} add({name}.tanh, {name}.oneb)")
        m.op(f"{name}.cdf = {wide}{mn} multiply({name}.p1, {name}.halfb)")
        m.op(f"{name}.gelu = {wide}{mn} multiply({v}, {name}.cdf)")
        v = f"{name}.gelu"
    if epi == "scale":
        m.param(f"{name}.z", f"{wide}[]")
        m.op(f"{name}.zb = {wide}{mn} broadcast({name}.z), dimensions={{}}")
        m.op(f"{name}.scaled = {wide}{mn} divide({v}, {name}.zb)")
        v = f"{name}.scaled"
    if out == "f8":
        m.param(f"{name}.d", f"{wide}[]")
        m.op(f"{name}.db = {wide}{mn} broadcast({name}.d), dimensions={{}}")
        m.op(f"{name}.q = {wide}{mn} divide({v}, {name}.db)")
        m.op(f"{name}.lo = {wide}[] constant(-448)")
        m.op(f"{name}.lob = {wide}{mn} broadcast({name}.lo), dimensions={{}}")
        m.op(f"{name}.hi = {wide}[] constant(448)")
        m.op(f"{name}.hib = {wide}{mn} broadcast({name}.hi), dimensions={{}}")
        m.op(f"{name}.cl = {wide}{mn} clamp({name}.lob, {name}.q, {name}.hib)")
        m.op(f"{name}.f8 = f8e4m3fn{mn} convert({name}.cl)")
        m.op(f"{name}.abs = {wide}{mn} abs({v})")
        m.op(f"{name}.ninf = {wide}[] constant(-inf)")
        m.op(f"{name}.amax = {wide}[] reduce({name}.abs, {name}.ninf), dimensions={{0,1}}, "
             f"to_apply=max_{wide}")
        m.outputs += [(f"{name}.f8", f"f8e4m3fn{mn}"), (f"{name}.amax", f"{wide}[]")]
    else:
        m.outputs.append((v, f"{wide}{mn}"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output")
    args = ap.parse_args()
    m = Module()
    for epi in EPILOGUES:
        for at in A_TYPES:
            for out in OUTPUTS:
                if epi == "scale" and out == "f8":
                    continue  # an output scale before an FP8 output is its d scale
                emit(m, epi, at, out)
    comps = "".join(f"max_{t} {{\n  l = {t}[] parameter(0)\n  r = {t}[] parameter(1)\n"
                    f"  ROOT m = {t}[] maximum(l, r)\n}}\n\n" for t in ("bf16", "f32"))
    shapes = ", ".join(s for _, s in m.outputs)
    names = ", ".join(n for n, _ in m.outputs)
    text = (f"HloModule fp8_epilogue_matrix, num_partitions=2\n\n{comps}ENTRY main {{\n"
            + "\n".join(m.lines) + f"\n  ROOT out = ({shapes}) tuple({names})\n}}\n")
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
