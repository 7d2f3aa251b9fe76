#!/usr/bin/env python3
"""Scaled-down copies of HLO modules too large for the evaluator (issues 47 and 48).

A test module of XLA's may hold arrays of tens of GiB (`f32[32,39295,64,128]`): Weave partitions
it at its own size, but the global-vs-partitioned check cannot run it on this machine. A
scaled-down copy divides every large dimension by a power of two g, keeping each scaled size a
multiple of g * M (M the least common multiple of the tile counts the module's shardings name,
or N, the partition count, when it names none), so that every tiling the module writes still
divides it evenly, and leaves every other size as written (the odd, uneven
ones among them, so an uneven tiling stays uneven). The same map applies to the sizes written in
attributes: slice bounds, `slice_sizes`, `dynamic_slice_sizes`, window sizes and paddings, pad
edges. Dimension numbers, scalar constants and device lists are left alone.

The map is linear where it applies, so the shapes of elementwise ops, dots, transposes,
broadcasts, reduces and slices on aligned bounds stay consistent. Where it cannot (a reshape
that merges two scaled dims, an array literal, an unaligned slice) the copy no longer verifies:
the caller runs `weave verify` (or the compile itself) on it and gives up with that message. The
copy is a valid module of its own, so its global-vs-partitioned check is a real check; the caller
also compares the collective kinds of the copy's partitioned module with the module's own, so a
copy that partitions a different way is reported as such.

Standard library only.
"""

import math
import re
import sys

TYPES = (r"(?:pred|s(?:2|4|8|16|32|64)|u(?:2|4|8|16|32|64)|f(?:16|32|64)|bf16|"
         r"f8e\w+?|f4e2m1fn|f6e\w+?|c64|c128)")
SHAPE = re.compile(r"\b(%s)\[([0-9,]*)\]" % TYPES)
SLICE_ATTR = re.compile(r"\bslice=\{([^}]*)\}")
SLICE_RANGE = re.compile(r"\[(\d+):(\d+)((?::\d+)?)\]")
SIZES_ATTR = re.compile(r"\b((?:dynamic_)?slice_sizes)=\{([0-9,\s]*)\}")
WINDOW_ATTR = re.compile(r"\bwindow=\{([^}]*)\}")
PADDING_ATTR = re.compile(r"\bpadding=([0-9_x]+)")

# Bytes per element as the evaluator stores it (4 per float of 32 bits or fewer, 8 otherwise).
def _elem_bytes(ty):
    if ty in ("f64", "c64", "c128") or ty.startswith(("s", "u")) or ty == "pred":
        return 8
    return 4


def _map_size(v, g, n):
    return v // g if v % (g * n) == 0 else v


def _map_list(text, g, n, sep):
    return sep.join(str(_map_size(int(x), g, n)) if x.strip().isdigit() else x
                    for x in text.split(sep))


def scale_text(text, g, n):
    """The module text with every size that is a multiple of g*n divided by g (see the module
    docstring). Pure text rewriting: the caller verifies the result."""
    def shape(m):
        dims = m.group(2)
        if not dims:
            return m.group(0)
        return "%s[%s]" % (m.group(1), _map_list(dims, g, n, ","))

    def slice_attr(m):
        inner = SLICE_RANGE.sub(
            lambda r: "[%d:%d%s]" % (_map_size(int(r.group(1)), g, n),
                                     _map_size(int(r.group(2)), g, n), r.group(3)),
            m.group(1))
        return "slice={%s}" % inner

    def sizes_attr(m):
        return "%s={%s}" % (m.group(1), _map_list(m.group(2), g, n, ","))

    def window_attr(m):
        parts = []
        for field in m.group(1).split():
            key, eq, val = field.partition("=")
            if key == "size":
                val = _map_list(val, g, n, "x")
            elif key == "pad":
                val = "x".join(_map_list(p, g, n, "_") for p in val.split("x"))
            parts.append("%s=%s" % (key, val) if eq else field)
        return "window={%s}" % " ".join(parts)

    def padding_attr(m):
        edges = []
        for p in m.group(1).split("x"):
            lo_hi = p.split("_")
            # low and high edges scale; an interior padding (third number) stays
            lo_hi[:2] = [str(_map_size(int(x), g, n)) for x in lo_hi[:2]]
            edges.append("_".join(lo_hi))
        return "padding=" + "x".join(edges)

    out = SHAPE.sub(shape, text)
    out = SLICE_ATTR.sub(slice_attr, out)
    out = SIZES_ATTR.sub(sizes_attr, out)
    out = WINDOW_ATTR.sub(window_attr, out)
    out = PADDING_ATTR.sub(padding_attr, out)
    return out


def result_bytes(text):
    """Sum over the instructions of the text of their results' evaluator storage, in bytes
    (each line's first shape after '='), a rough size of the module."""
    total = 0
    for line in text.splitlines():
        _, eq, rest = line.partition("=")
        if not eq:
            continue
        m = SHAPE.search(rest)
        if not m or not m.group(2):
            continue
        count = 1
        for d in m.group(2).split(","):
            count *= int(d)
        total += count * _elem_bytes(m.group(1))
    return total


TILE_COUNTS = re.compile(r"devices=\[([0-9,]+)\]")
MESH_AXIS = re.compile(r"'\w+'\s*=\s*(\d+)")


def tile_multiple(text, n):
    """The least common multiple of the tile counts the module's shardings name (the tile
    assignment dims of `devices=[...]`, the axis sizes of named meshes): a size that stays a
    multiple of it splits the same way under every tiling the module writes. n (the partition
    count) when the module names none, or when it is not smaller."""
    counts = [int(x) for m in TILE_COUNTS.finditer(text) for x in m.group(1).split(",") if x]
    counts += [int(m.group(1)) for m in MESH_AXIS.finditer(text)]
    m = 1
    for c in counts:
        if c > 0:
            m = m * c // math.gcd(m, c)
    return m if 1 < m < n else n


def scaled_copies(text, n, budget_bytes=256 << 20, max_log2=12):
    """Yields (g, text): first the copy for the smallest power of two g whose results sum to at
    most `budget_bytes`, then that copy scaled again by 4 and by 4 once more (tried in turn when a
    copy is still too large to evaluate; a larger g alone would scale fewer sizes, as fewer are
    multiples of g*n). Yields nothing when no size of the module is a multiple of 2n or no g
    brings it under the budget."""
    n = tile_multiple(text, n)
    first = None
    for k in range(1, max_log2 + 1):
        g = 1 << k
        scaled = scale_text(text, g, n)
        if scaled == text:
            return
        if result_bytes(scaled) <= budget_bytes:
            first = (g, scaled)
            break
    if first is None:
        return
    g, scaled = first
    yield g, scaled
    for _ in range(2):
        again = scale_text(scaled, 4, n)
        if again == scaled:
            return
        g, scaled = g * 4, again
        yield g, scaled


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: scale_down.py MODULE.hlo N  (prints the first scaled-down copy)")
    with open(sys.argv[1]) as f:
        src = f.read()
    for g, t in scaled_copies(src, int(sys.argv[2])):
        sys.stderr.write("sizes divided by %d\n" % g)
        sys.stdout.write(t)
        break
    else:
        sys.exit("no size of the module is a multiple of 2N")
