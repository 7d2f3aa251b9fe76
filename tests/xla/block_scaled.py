#!/usr/bin/env python3
"""Conformance run of Weave over XLA's own block-scaled (MXFP8 / NVFP4) test modules (issue 53).

Two kinds of module, read from an XLA checkout or git snapshot:

1. `xla/backends/gpu/tests/collective_ops_sharded_unsharded_e2e_test.cc`, the tests whose module
   holds a `__op$block_scaled_dot`: XLA runs each sharded and unsharded and compares. Weave
   compiles each as a global module, at compute capability 9.0 and 10.0:
       weave compile M -o OUT --input-form=global --verify-numerics --cost-gate=off
                     [--gpu-compute-capability=10.0]
   and records the numerics verdict, the windowed loops block-scaled-windowed-einsum built and
   the cuDNN calls in the result.
2. `xla/backends/gpu/transforms/block_scaling_rewriter_test.cc` and `..._cudnn_test.cc`, every
   test that runs `BlockScalingRewriter`: Weave runs its block-scaling-rewriter at compute
   capability 10.0 where the test gives the pass a cuDNN version that has the block-scaled dot
   (kCudnnSupportsBlockScaledDot, kCudnnVersion), else 9.0, and checks (a) a `__cudnn$blockScaledDot`
   call appears exactly when XLA's expectations name one, (b) `weave compare` of the module and
   its rewrite passes. The cuDNN tests are run both ways, as XLA's test does.

Standard library only. Usage:
    python3 tests/xla/block_scaled.py --xla-repo /work/.mirror/tpopp+xla/repo \
        [--weave build/weave] [--summary tests/xla/block_scaled_summary.md]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
E2E = "xla/backends/gpu/tests/collective_ops_sharded_unsharded_e2e_test.cc"
REWRITER = ["xla/backends/gpu/transforms/block_scaling_rewriter_test.cc",
            "xla/backends/gpu/transforms/block_scaling_rewriter_cudnn_test.cc"]


def read_source(args, path):
    if args.xla_repo and os.path.isdir(os.path.join(args.xla_repo, "objects")) or (
            args.xla_repo and os.path.exists(os.path.join(args.xla_repo, "HEAD"))):
        return subprocess.run(["git", "--git-dir", args.xla_repo, "show", "HEAD:" + path],
                              check=True, capture_output=True, text=True).stdout
    with open(os.path.join(args.xla_repo, path)) as f:
        return f.read()


def tests_of(text):
    """(name, body) for each TEST/TEST_F, brace-matched (good enough for these files)."""
    out = []
    for m in re.finditer(r"TEST(?:_F|_P)?\(\s*\w+\s*,\s*(\w+)\s*\)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append((m.group(1), text[m.end():i]))
    return out


def modules_of(body):
    return [s for s in re.findall(r'R"\((.*?)\)"', body, re.S) if "ENTRY" in s]


def run(cmd, timeout=120):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, "timeout"


def e2e_rows(args, weave, tmp):
    rows = []
    for name, body in tests_of(read_source(args, E2E)):
        for text in modules_of(body):
            if "__op$block_scaled_dot" not in text:
                continue
            src = os.path.join(tmp, name + ".hlo")
            with open(src, "w") as f:
                f.write(text)
            for cc in ("9.0", "10.0"):
                out = os.path.join(tmp, name + "." + cc + ".out.hlo")
                rc, log = run([weave, "compile", src, "-o", out, "--input-form=global", "--verify-numerics",
                               "--cost-gate=off", "--gpu-compute-capability=" + cc])
                m = re.search(r"Numerics: (\w+) on (\d+) partitions", log)
                verdict = (m.group(1) if m else "rc=%d" % rc)
                loops = len(re.findall(r"block-scaled-windowed-einsum: \S+ \[applied\]", log))
                cudnn = 0
                if rc == 0 and os.path.exists(out):
                    with open(out) as f:
                        cudnn = f.read().count('custom_call_target="__cudnn$blockScaledDot"')
                rows.append((name, cc, m.group(2) if m else "?", verdict, loops, cudnn))
    return rows


def rewriter_rows(args, weave, tmp):
    rows = []
    for path in REWRITER:
        for name, body in tests_of(read_source(args, path)):
            mods = modules_of(body)
            if not mods or "BlockScalingRewriter" not in body:
                continue
            variants = []
            if "RunAndFilecheckHloRewrite(hlo_string, BlockScalingRewriter(kCudnnDisabled)" in body:
                variants = [("9.0", False), ("10.0", True)]
            else:
                m = re.search(r"BlockScalingRewriter pass\(([^)]*\)?)\)", body)
                arg = m.group(1) if m else ""
                cudnn = "kCudnnSupportsBlockScaledDot" in arg or "kCudnnVersion" in arg
                expect = cudnn  # every test that gives the pass such a cuDNN expects the call
                variants = [("10.0" if cudnn else "9.0", expect)]
            src = os.path.join(tmp, name + ".in.hlo")
            with open(src, "w") as f:
                f.write(mods[0])
            for cc, expect in variants:
                out = os.path.join(tmp, name + "." + cc + ".hlo")
                rc, log = run([weave, "opt", src, "--passes=block-scaling-rewriter", "--gpu-compute-capability=" + cc,
                               "-o", out])
                if rc != 0:
                    rows.append((name, cc, expect, "-", "opt rc=%d: %s" % (rc, log.strip().splitlines()[-1][:100] if log.strip() else "")))
                    continue
                with open(out) as f:
                    got = "__cudnn$blockScaledDot" in f.read()
                rc2, clog = run([weave, "compare", src, out])
                verdict = "PASS" if rc2 == 0 else ("FAIL" if rc2 == 3 else "rc=%d" % rc2)
                rows.append((name, cc, expect, got, verdict))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xla-repo", required=True, help="XLA checkout or bare git snapshot")
    ap.add_argument("--weave", default=os.path.join(REPO_ROOT, "build", "weave"))
    ap.add_argument("--summary", help="write the Markdown summary here")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weave_bs_")
    weave = os.path.join(tmp, "weave")
    shutil.copy(args.weave, weave)
    e2e = e2e_rows(args, weave, tmp)
    rew = rewriter_rows(args, weave, tmp)
    lines = ["# Block-scaled (MXFP8 / NVFP4) modules of XLA's tests through Weave", "",
             "Generated by `python3 tests/xla/block_scaled.py --xla-repo <XLA snapshot>` (issue 53).", "",
             "## Sharded vs unsharded end-to-end modules (`%s`)" % E2E, "",
             "Each compiled as a global module; numerics against the global program.", "",
             "| test | cc | partitions | numerics | windowed loops | cuDNN calls |",
             "|---|---|---:|---|---:|---:|"]
    for r in e2e:
        lines.append("| %s | %s | %s | %s | %d | %d |" % r)
    npass = sum(1 for r in e2e if r[3] == "PASS")
    lines += ["", "%d of %d runs pass." % (npass, len(e2e)), "",
              "## BlockScalingRewriter tests (`%s`)" % "`, `".join(REWRITER), "",
              "| test | cc | XLA forms a cuDNN call | Weave does | weave compare |", "|---|---|---|---|---|"]
    for r in rew:
        lines.append("| %s | %s | %s | %s | %s |" % r)
    agree = sum(1 for r in rew if r[2] == r[3])
    rpass = sum(1 for r in rew if r[4] == "PASS")
    lines += ["", "cuDNN decision as XLA's: %d of %d; numerics pass: %d of %d." % (agree, len(rew), rpass, len(rew)), ""]
    text = "\n".join(lines)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(text)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
