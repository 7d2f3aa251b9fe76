#!/usr/bin/env python3
"""Conformance run of Weave's fp8-gemm-rewriter over XLA's FP8 GEMM rewriter tests (issue 51).

Reads `xla/backends/gpu/transforms/gemm_rewriter_fp8_test.cc` from an XLA checkout or git
snapshot. For every test it takes the HLO module(s) of the test (the raw strings holding an
`ENTRY` or a bare computation; the parameterized tests' templates are expanded as their C++
loops expand them), replaces the type placeholders as the CUDA fixture does (f8e4m3fn, f8e5m2,
448), and runs

    weave opt M --passes=fp8-gemm-rewriter --gpu-compute-capability=CC -o OUT
    weave compare M OUT --num-partitions 1

at CC 9.0 (Hopper: what the CUDA expectations are written for), 10.0 for the Blackwell-only test
and 8.0 for the pre-Ada ones. XLA's expectation is read from the test's FileCheck text with the
CUDA prefixes (CHECK, CHECK-PTX; CHECK-GCN lines dropped): whether an FP8 call
`__cublas$lt$matmul$f8` is formed, and for the call its result type, operand count, `epilogue`,
`beta` and `damax_output`. A test "folds as XLA" when Weave forms the call exactly when XLA
does and every one of those fields that XLA's text states agrees. Tests without FileCheck text
(RunAndCompare only) count for numerics only.

Standard library only. Usage:
    python3 tests/xla/fp8_gemm_rewriter.py --xla-repo /work/.mirror/tpopp+xla/repo \\
        [--weave build/weave] [--summary tests/xla/fp8_gemm_rewriter_summary.md]
"""

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEST_FILE = "xla/backends/gpu/transforms/gemm_rewriter_fp8_test.cc"
TARGET = "__cublas$lt$matmul$f8"
PLACEHOLDERS = {"<<F8E4M3>>": "f8e4m3fn", "<<F8E5M2>>": "f8e5m2", "<<F8E4M3_AMAX>>": "448.",
                "<<CUBLAS_CUSTOM_CALL_TARGET_PLACEHOLDER>>": "__cublas$gemm"}
# Tests whose fixture condition selects another GPU than Hopper on CUDA.
CC_OF = {"NoTransposeOnBlackwellF8": "10.0", "DoNotRewriteToF8OnPreAda": "8.0",
         "DoNotRewriteOnPreAdaWithF32Output": "8.0"}


def read_source(repo, path):
    if os.path.exists(os.path.join(repo, "HEAD")) and not os.path.exists(os.path.join(repo, path)):
        return subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True,
                              capture_output=True, text=True).stdout
    with open(os.path.join(repo, path)) as f:
        return f.read()


def tests_of(text):
    """(name, body) of each TEST/TEST_F; braces inside string literals, raw strings and comments
    do not count (the FileCheck texts are full of them)."""
    out = []
    for m in re.finditer(r"TEST(?:_F|_P)?\(\s*\w+\s*,\s*(\w+)\s*\)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text.startswith('R"(', i):
                j = text.find(')"', i + 3)
                i = len(text) if j < 0 else j + 2
                continue
            c = text[i]
            if c == '"':
                i += 1
                while i < len(text) and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
                continue
            if text.startswith("//", i):
                j = text.find("\n", i)
                i = len(text) if j < 0 else j
                continue
            depth += {"{": 1, "}": -1}.get(c, 0)
            i += 1
        out.append((m.group(1), text[m.end():i]))
    return out


def raw_strings(body):
    return [m.group(1) for m in re.finditer(r'R"\((.*?)\)"', body, re.S)]


def is_module(s):
    return "parameter(" in s and ("ENTRY" in s or re.search(r"^\s*\w+\s*\{", s, re.M))


def subst(s, table):
    for k, v in table.items():
        s = s.replace(k, v)
    return s


def expand_templates(name, module):
    """The modules a parameterized test builds from its template, as its C++ loops do."""
    if "<<precision>>" in module:
        return [module.replace("<<precision>>", p) for p in ("default", "highest")]
    if "<<Ashape>>" not in module:
        return [module]
    out = []
    if name == "ScaledABUnscaledDF8Parameterized":
        for d_col, a_col, b_col, lcd, rcd in itertools.product(
                (False, True), (False, True), (False, True), (0, 1), (0, 1)):
            out.append(subst(module, {
                "<<Lcd>>": "{%d}" % lcd, "<<Rcd>>": "{%d}" % rcd,
                "<<Ashape>>": "[64,32]" if lcd == 1 else "[32,64]",
                "<<Bshape>>": "[32,16]" if rcd == 0 else "[16,32]",
                "<<Alayout>>": "{0,1}" if a_col else "{1,0}",
                "<<Blayout>>": "{0,1}" if b_col else "{1,0}",
                "<<Olayout>>": "{0,1}" if d_col else "{1,0}"}))
    elif name == "ScaledABUnscaledDF8ParameterizedBatched":
        for o_col, lcd, rcd, a_layout, b_layout in itertools.product(
                (False, True), (2, 1), (2, 1), ("{2,1,0}", "{1,2,0}"), ("{2,1,0}", "{1,2,0}")):
            out.append(subst(module, {
                "<<Lcd>>": "{%d}" % lcd, "<<Rcd>>": "{%d}" % rcd,
                "<<Ashape>>": "[2,64,32]" if lcd == 2 else "[2,32,64]",
                "<<Bshape>>": "[2,32,16]" if rcd == 1 else "[2,16,32]",
                "<<Alayout>>": a_layout, "<<Blayout>>": b_layout,
                "<<Olayout>>": "{2, 0, 1}" if o_col else "{2, 1, 0}"}))
    return out


def cuda_checks(text):
    lines = []
    for line in text.splitlines():
        s = line.strip().lstrip(";").strip()
        if s.startswith("CHECK-GCN"):
            continue
        if s.startswith("CHECK"):
            lines.append(s)
    return lines


def expectation(checks):
    """What XLA's CUDA FileCheck lines state about the FP8 call (None: the text states nothing)."""
    if not checks:
        return None
    text = "\n".join(checks)
    exp = {"call": TARGET in text}
    if not exp["call"]:
        return exp
    for line in checks:
        m = re.search(r"=\s*\(([a-z0-9]+)\[[^)]*\)\s*custom-call\((.*?)\)(,|$)", line)
        if m and "d_type" not in exp:
            exp["d_type"] = m.group(1)
            args = [a for a in re.split(r",\s*", re.sub(r"/\*index=\d+\*/", "", m.group(2))) if a]
            if all("{{" not in a or a.startswith("[[") for a in args):
                exp["operands"] = len(args)
            exp["damax"] = bool(re.search(r"\(\w+\[[^\]]*\]\{[^}]*\}, f32\[\]", line))
    for key, pat in (("epilogue", r'"epilogue":"(\w+)"'), ("beta", r'"beta":([0-9.]+)')):
        m = re.search(pat, text)
        if m:
            exp[key] = m.group(1) if key == "epilogue" else float(m.group(1))
    m = re.search(r'"damax_output":(true|false)', text)
    if m:
        exp["damax"] = m.group(1) == "true"
    return exp


def weave_call(hlo_text):
    for line in hlo_text.splitlines():
        if TARGET not in line or "custom-call(" not in line:
            continue
        got = {"call": True}
        m = re.search(r"=\s*\(([a-z0-9]+)\[[^=]*?\)\s*custom-call\(", line)
        if m:
            got["d_type"] = m.group(1)
        tuple_shape = line.split("custom-call(")[0]
        got["damax"] = ", f32[]" in tuple_shape
        args = line.split("custom-call(", 1)[1].split(")", 1)[0]
        got["operands"] = len([a for a in args.split(",") if a.strip()])
        m = re.search(r'"epilogue":"(\w+)"', line)
        got["epilogue"] = m.group(1) if m else None
        m = re.search(r'"beta":([0-9.]+)', line)
        got["beta"] = float(m.group(1)) if m else None
        return got
    return {"call": False}


def run(cmd, timeout=120):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xla-repo", required=True)
    ap.add_argument("--weave", default=os.path.join(REPO_ROOT, "build", "weave"))
    ap.add_argument("--summary")
    args = ap.parse_args()
    src = read_source(args.xla_repo, TEST_FILE)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in tests_of(src):
            strings = raw_strings(body)
            modules = [s for s in strings if is_module(s)]
            checks = [s for s in strings if "CHECK" in s]
            if not modules:
                continue
            # Every FileCheck string of the test, in order (several are appended per branch).
            exp = (expectation(cuda_checks(subst("\n".join(checks), PLACEHOLDERS)))
                   if checks else None)
            if name == "FnuzTypeF8":
                exp = {"call": False}  # CUDA: not rewritten (the test's else branch)
            cc = CC_OF.get(name, "9.0")
            if cc == "8.0":
                exp = {"call": False}
            variants = []
            for m in modules[:1]:
                variants += expand_templates(name, subst(m, PLACEHOLDERS))
            for k, text in enumerate(variants):
                label = name if len(variants) == 1 else "%s/%d" % (name, k)
                inp = os.path.join(tmp, "in.hlo")
                out = os.path.join(tmp, "out.hlo")
                with open(inp, "w") as f:
                    f.write(text)
                rc, log = run([args.weave, "opt", inp, "--passes=fp8-gemm-rewriter",
                               "--gpu-compute-capability=" + cc, "--remarks", "-o", out])
                row = {"test": label, "cc": cc, "xla": exp, "remarks": log.strip()}
                if rc != 0:
                    row.update(status="opt-error", detail=log.strip().splitlines()[-1:])
                    rows.append(row)
                    continue
                got = weave_call(open(out).read())
                row["weave"] = got
                diffs = []
                if exp is not None:
                    if exp["call"] != got["call"]:
                        diffs.append("call: XLA %s, Weave %s" % (exp["call"], got["call"]))
                    elif exp["call"]:
                        for key in ("d_type", "operands", "epilogue", "beta", "damax"):
                            if key in exp and exp[key] != got.get(key):
                                diffs.append("%s: XLA %s, Weave %s" % (key, exp[key], got.get(key)))
                row["diffs"] = diffs
                crc, clog = run([args.weave, "compare", inp, out, "--num-partitions", "1",
                                 "--seed", "7"])
                row["numerics"] = "pass" if crc == 0 else "FAIL"
                if crc != 0:
                    row["numerics_log"] = clog.strip().splitlines()[-3:]
                row["status"] = "checked" if exp is not None else "numerics-only"
                rows.append(row)
    checked = [r for r in rows if r.get("status") == "checked"]
    xla_calls = [r for r in checked if r["xla"]["call"]]
    folds = [r for r in xla_calls if not r["diffs"]]
    same_decision = [r for r in checked if not r["diffs"]]
    num_fail = [r for r in rows if r.get("numerics") == "FAIL"]
    errors = [r for r in rows if r.get("status") == "opt-error"]
    lines = ["# fp8-gemm-rewriter on XLA's FP8 GEMM rewriter tests", "",
             "Generated by `tests/xla/fp8_gemm_rewriter.py` from `%s` (issue 51)." % TEST_FILE,
             "", "| measure | count |", "|---|---:|",
             "| modules run (parameterized tests expanded) | %d |" % len(rows),
             "| with a CUDA expectation in FileCheck text | %d |" % len(checked),
             "| ... XLA forms an FP8 call | %d |" % len(xla_calls),
             "| ... Weave forms it and folds as XLA (type, operands, epilogue, beta, amax) | %d (%.1f%%) |"
             % (len(folds), 100.0 * len(folds) / max(1, len(xla_calls))),
             "| ... same decision and form overall (calls and non-calls) | %d / %d |"
             % (len(same_decision), len(checked)),
             "| numerics (weave compare, input vs rewrite) failing | %d |" % len(num_fail),
             "| weave opt errors | %d |" % len(errors), "",
             "| test | cc | XLA call | Weave call | differences | numerics |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        xla = r["xla"]
        xs = "-" if xla is None else ("%s %s %s" % (xla.get("d_type", ""), xla.get("epilogue", ""),
                                                     "beta=%g" % xla["beta"] if "beta" in xla else "")
                                      if xla["call"] else "no")
        w = r.get("weave", {})
        ws = ("%s %s beta=%s" % (w.get("d_type"), w.get("epilogue"), w.get("beta"))
              if w.get("call") else ("no" if w else r.get("status")))
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            r["test"], r["cc"], xs.strip(), ws, "; ".join(r.get("diffs", [])) or "",
            r.get("numerics", "-")))
    text = "\n".join(lines) + "\n"
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
