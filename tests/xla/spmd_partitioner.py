#!/usr/bin/env python3
"""Conformance run of Weave over the HLO modules of XLA's SPMD partitioner tests (issue 47).

Reads XLA's `xla/service/spmd/spmd_partitioner_test.cc` (a file, or a git snapshot of XLA),
pulls out every HLO module written in a test body as a raw string together with the partition
count the test partitions it for, compiles each one as a global module with

    weave compile MODULE -o OUT --input-form=global --num-partitions N --verify-numerics
                  --cost-gate=off --report REPORT.json

and sorts the outcome of each into one class (see CLASSES below), with a short reason taken
from Weave's own output. Writes a Markdown summary and, on request, the same data as JSON.

Standard library only. See tests/xla/README.md.
"""

import argparse
import concurrent.futures
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale_down  # noqa: E402  (beside this script)

DEFAULT_XLA_PATH = "xla/service/spmd/spmd_partitioner_test.cc"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_WEAVE = os.path.join(REPO_ROOT, "build", "weave")

# Outcome classes, in the order the summary lists them.
CLASSES = [
    "numerics-pass",    # exit 0: compiled, and equal to the global program on one device
    "numerics-fail",    # exit 3: compiled, but the numbers differ beyond tolerance
    "unchecked",        # exit 5: compiled, but the numerics check could not run (why)
    "declined",         # exit 1 (or 2) from an input check or a pass, naming what it refuses
    "parse-error",      # exit 1: the parser (or the verifier of the input) rejects XLA's text
    "verify-fail",      # exit 1: the partitioned or compiled module fails Weave's verifier
    "crash",            # a signal, an exit code Weave does not document here, an internal error
    "timeout",          # ran past the per-module time limit
    "no-device-count",  # extraction could not tell the partition count: not run
    "rejected-as-xla",  # declined, and XLA's own test expects its partitioner to refuse it too
]

REASON_WIDTH = 160
# Weave's messages carry no status code: these words mark an internal invariant that broke
# (Weave's own InternalError texts), as opposed to an input Weave declines.
INTERNAL = re.compile(r"\binternal\b|read before it was partitioned|partitioned twice|"
                      r"dce: cannot remove|cache uses disagree|no running kernel makes progress",
                      re.I)
HEADER = re.compile(r"^weave compile: \S+ -> \S+\s+\(module")  # the report table's first line

# --------------------------------------------------------------------------------------------
# Extraction from the C++ test file
# --------------------------------------------------------------------------------------------

RAW_OPEN = re.compile(r'\bR"([^()\\\s"]{0,16})\(')
TEST_HEAD = re.compile(r"^[ \t]*(TEST|TEST_P|TEST_F)\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)
ASSIGNED_NAME = re.compile(r"(\w+)\s*=\s*$")
INT_LITERAL = re.compile(r"^\d+$")


def read_source(args):
    if args.xla_repo:
        path = args.xla_path or DEFAULT_XLA_PATH
        try:
            out = subprocess.run(["git", "-C", args.xla_repo, "show", "HEAD:" + path],
                                 check=True, capture_output=True)
        except subprocess.CalledProcessError as e:
            sys.exit("git show HEAD:%s in %s failed: %s" %
                     (path, args.xla_repo, e.stderr.decode(errors="replace").strip()))
        return out.stdout.decode("utf-8", errors="replace"), "%s:%s" % (args.xla_repo, path)
    with open(args.xla_file, encoding="utf-8", errors="replace") as f:
        return f.read(), args.xla_file


def find_raw_strings(src):
    """Every raw string literal: (start of R, end after closing quote, delimiter, text)."""
    found = []
    pos = 0
    while True:
        m = RAW_OPEN.search(src, pos)
        if not m:
            return found
        delim = m.group(1)
        close = ")" + delim + '"'
        end = src.find(close, m.end())
        if end < 0:
            return found
        found.append((m.start(), end + len(close), delim, src[m.end():end]))
        pos = end + len(close)


def skip_literal(src, i, raw_at):
    """If a comment or literal starts at i, the index after it; else None."""
    if i in raw_at:
        return raw_at[i]
    c = src[i]
    if c == "/" and src.startswith("//", i):
        j = src.find("\n", i)
        return len(src) if j < 0 else j + 1
    if c == "/" and src.startswith("/*", i):
        j = src.find("*/", i + 2)
        return len(src) if j < 0 else j + 2
    if c in "\"'":
        # a digit separator (1'000) is no literal
        if c == "'" and i > 0 and src[i - 1].isalnum():
            return None
        j = i + 1
        while j < len(src) and src[j] != c:
            j += 2 if src[j] == "\\" else 1
        return j + 1
    return None


def match_close(src, i, raw_at, open_ch, close_ch):
    """src[i] == open_ch; the index of its matching close_ch."""
    depth = 0
    n = len(src)
    while i < n:
        nxt = skip_literal(src, i, raw_at)
        if nxt is not None:
            i = nxt
            continue
        c = src[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def split_args(src, start, end, raw_at):
    """The texts of src[start:end] between its top-level commas (a call's arguments)."""
    args, depth, first, i = [], 0, start, start
    while i < end:
        nxt = skip_literal(src, i, raw_at)
        if nxt is not None:
            i = nxt
            continue
        c = src[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(src[first:i])
            first = i + 1
        i += 1
    args.append(src[first:end])
    return args


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return " ".join(text.split())


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


def calls_in(src, start, end, name, raw_at):
    """Each call `name(...)` in src[start:end]: (offset, [argument texts, comments stripped])."""
    out = []
    for m in re.finditer(r"\b%s\s*\(" % re.escape(name), src[start:end]):
        open_at = start + m.end() - 1
        close_at = match_close(src, open_at, raw_at, "(", ")")
        if close_at < 0:
            continue
        raw_args = split_args(src, open_at + 1, close_at, raw_at)
        out.append((start + m.start(), [strip_comments(a) for a in raw_args]))
    return out


def is_hlo_module(text):
    return re.search(r"^\s*ENTRY\b", text, re.M) is not None


# The collectives a test body asserts about the partitioned module (issue 48's measure): op::
# matchers, NumOfInstructions(..., HloOpcode::kX) counts, FileCheck lines. "present" kinds must
# be in the module, "absent" ones must not.
COLLECTIVE_KINDS = {"AllToAll": "all-to-all", "CollectivePermute": "collective-permute",
                    "AllGather": "all-gather", "AllReduce": "all-reduce",
                    "ReduceScatter": "reduce-scatter"}
COLLECTIVE_TEXT = re.compile(r"\b(all-to-all|collective-permute|all-gather|all-reduce|reduce-scatter)"
                             r"(?:-start)?\(")


def asserted_collectives(body):
    present, absent = set(), set()
    names = "|".join(COLLECTIVE_KINDS)
    for m in re.finditer(r"(Not\(\s*)?op::(%s)\b" % names, body):
        (absent if m.group(1) else present).add(COLLECTIVE_KINDS[m.group(2)])
    for m in re.finditer(r"HloOpcode::k(%s)\s*\)\s*,\s*(\d+)" % names, body):
        (present if int(m.group(2)) > 0 else absent).add(COLLECTIVE_KINDS[m.group(1)])
    for line in body.splitlines():
        m = re.search(r"CHECK(-[A-Z]+)?:", line)
        if not m:
            continue
        for k in COLLECTIVE_TEXT.finditer(line[m.end():]):
            (absent if m.group(1) == "-NOT" else present).add(k.group(1))
    present -= absent
    return sorted(present), sorted(absent)


def collective_cell(r):
    """'as asserted', or what the test asserts that the partitioned module misses; '' if no
    assertion or no partitioned module."""
    want, avoid, has = r.get("asserted_present"), r.get("asserted_absent"), r.get("collectives")
    if has is None or not (want or avoid):
        return ""
    missing = [k for k in want if k not in has]
    extra = [k for k in avoid if k in has]
    if not missing and not extra:
        return "as asserted"
    parts = []
    if missing:
        parts.append("lacks " + ", ".join(missing))
    if extra:
        parts.append("has " + ", ".join(extra) + " (asserted absent)")
    return "; ".join(parts) + "; has: " + (", ".join(has) or "none")


def partitioned_collectives(*paths):
    """The collective kinds in Weave's partitioned module and in its compiled module (the
    windowed-einsum loops XLA's partitioner makes come from Weave's later passes), with a
    reduce-scatter also counting as the all-reduce XLA's partitioner writes before its own
    reduce-scatter creator; None when the partitioned module was not written."""
    kinds = None
    for path in paths:
        try:
            with open(path) as f:
                found = {m.group(1) for m in COLLECTIVE_TEXT.finditer(f.read())}
        except OSError:
            if kinds is None and path == paths[0]:
                return None
            continue
        kinds = (kinds or set()) | found
    if kinds is None:
        return None
    if "reduce-scatter" in kinds:
        kinds.add("all-reduce")
    return sorted(kinds)


def extract_modules(src):
    """The test modules of the file, in file order.

    Each: dict(name, test, fixture, line, n (int or None), n_source, note, hlo)."""
    raws = find_raw_strings(src)
    raw_at = {s: e for s, e, _, _ in raws}

    tests = []
    for m in TEST_HEAD.finditer(src):
        brace = src.find("{", m.end())
        if brace < 0:
            continue
        close = match_close(src, brace, raw_at, "{", "}")
        if close < 0:
            continue
        tests.append(dict(macro=m.group(1), fixture=m.group(2), name=m.group(3),
                          start=m.start(), body=(brace, close + 1)))

    def inside_test(pos):
        return any(t["body"][0] <= pos < t["body"][1] for t in tests)

    def assigned_name(pos):
        m = ASSIGNED_NAME.search(src[max(0, pos - 200):pos])
        return m.group(1) if m else None

    # HLO raw strings outside any test body, bound to a name (file-scope constants).
    file_scope = {}
    for s, e, _, text in raws:
        if not inside_test(s) and is_hlo_module(text):
            nm = assigned_name(s)
            if nm:
                file_scope[nm] = (text, line_of(src, s))

    modules = []
    for t in tests:
        b0, b1 = t["body"]
        # Modules written in the body, by the variable they are bound to (None: used inline).
        local = []
        for s, e, _, text in raws:
            if b0 <= s < b1 and is_hlo_module(text):
                local.append(dict(var=assigned_name(s), text=text, line=line_of(src, s), pos=s))
        # The partition count each PartitionComputation call gives each module.
        uses = {}  # key: id of module entry -> list of (n or None, arg text, extra args)
        for pos, args in calls_in(src, b0, b1, "PartitionComputation", raw_at):
            if not args:
                continue
            first = args[0]
            target = None
            if first.startswith('R"'):  # the module written inline, as the argument
                target = min((x for x in local if x["pos"] > pos), key=lambda x: x["pos"],
                             default=None)
            else:  # the latest module bound to that name before the call
                target = max((x for x in local if x["var"] == first and x["pos"] < pos),
                             key=lambda x: x["pos"], default=None)
            if target is None and first in file_scope:
                text, ln = file_scope[first]
                target = next((x for x in local if x["var"] == first and x.get("shared")), None)
                if target is None:
                    target = dict(var=first, text=text, line=ln, pos=-1, shared=True)
                    local.append(target)
            if target is None:
                continue
            n_arg = args[1] if len(args) > 1 else ""
            n = int(n_arg) if INT_LITERAL.match(n_arg) else None
            uses.setdefault(id(target), []).append((n, n_arg, args[2:]))
        # Tests that build the partitioner by hand: its first argument is the partition count.
        direct = []
        for _, args in calls_in(src, b0, b1, "SpmdPartitioner", raw_at):
            direct.append(args[0] if args else "")
        for m in re.finditer(r"SpmdPartitioner\s+\w+\s*\(([^,)]*)", src[b0:b1]):
            direct.append(strip_comments(m.group(1)))

        local.sort(key=lambda x: (x["pos"] < 0, x["pos"]))
        entries = []
        for mod in local:
            calls = uses.get(id(mod), [])
            note = []
            flags = []
            if calls:
                ns = sorted({c[0] for c in calls if c[0] is not None})
                unresolved = sorted({c[1] for c in calls if c[0] is None})
                # PartitionComputation(module, n, options, enable_enzyme_opt): the last is
                # XLA's xla_enable_enzyme_comms_opt, which Weave takes; default options are none.
                kept = []
                for _, _, extra in calls:
                    e = [strip_comments(x).strip() for x in extra]
                    if len(e) >= 2 and e[1] == "true":
                        flags = ["--xla_enable_enzyme_comms_opt"]
                    if len(e) >= 2 and e[1] in ("true", "false"):
                        extra = extra[:1]
                    if extra and strip_comments(extra[0]).strip() != "SpmdPartitionerOptions()":
                        kept.append(extra)
                if kept:
                    extras = sorted({", ".join(e) for e in kept})
                    note.append("the XLA test also passes (not reproduced): " + "; ".join(extras))
                if unresolved:
                    entries.append((mod, None, "PartitionComputation",
                                    "partition count is an expression: " + ", ".join(unresolved), []))
                    continue
                for n in ns:
                    entries.append((mod, n, "PartitionComputation", "; ".join(note), flags))
                continue
            lits = sorted({int(d) for d in direct if INT_LITERAL.match(d)})
            if len(lits) == 1 and all(INT_LITERAL.match(d) for d in direct):
                entries.append((mod, lits[0], "SpmdPartitioner",
                                "partitioned by a hand-built SpmdPartitioner", []))
            elif direct:
                entries.append((mod, None, "SpmdPartitioner",
                                "SpmdPartitioner built with " + ", ".join(sorted(set(direct))), []))
            else:
                entries.append((mod, None, "",
                                "no PartitionComputation or SpmdPartitioner call uses it", []))
        # A test that expects the partitioner to refuse the module (EXPECT_FALSE(...ok())), and the
        # text its message must hold.
        expect_error = None
        body = src[b0:b1]
        if re.search(r"EXPECT_FALSE\([^;]*\.ok\(\)\s*\)", body):
            sub = re.search(r'HasSubstr\(\s*"((?:[^"\\]|\\.)*)"(?:\s*"((?:[^"\\]|\\.)*)")*', body)
            expect_error = "".join(x for x in (sub.groups() if sub else ()) if x) or ""
        asserted = asserted_collectives(body)
        for k, (mod, n, n_source, note, flags) in enumerate(entries):
            name = t["name"] if len(entries) == 1 else "%s.%d" % (t["name"], k + 1)
            modules.append(dict(name=name, test=t["name"], fixture=t["fixture"],
                                line=mod["line"], test_line=line_of(src, t["start"]), n=n,
                                n_source=n_source, note=note, hlo=mod["text"], flags=flags,
                                expect_error=expect_error, asserted=asserted))
        if not entries:
            modules.append(dict(name=t["name"], test=t["name"], fixture=t["fixture"],
                                line=line_of(src, t["start"]), test_line=line_of(src, t["start"]),
                                n=None, n_source="", note="no HLO module found in the test body",
                                hlo=None))
    return modules, len(tests)


# --------------------------------------------------------------------------------------------
# Running Weave
# --------------------------------------------------------------------------------------------

RUNNING = set()  # the weave processes now running (each leads its own process group)
RUNNING_LOCK = threading.Lock()
STOPPING = False


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all():
    """On an interruption: start nothing more, and end the weave processes this runner began."""
    global STOPPING
    with RUNNING_LOCK:
        STOPPING = True
        for proc in list(RUNNING):
            kill_group(proc)


def limit_child(mem_bytes):
    def apply():
        os.setsid()
        if mem_bytes > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def first_line_with(text, *needles):
    for line in text.splitlines():
        if all(n in line for n in needles):
            return line.strip()
    return None


def clip(text, width=REASON_WIDTH):
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def strip_prefix(line, input_path):
    """Drop Weave's `weave compile: INPUT: ` prefixes from a message line."""
    line = re.sub(r"^weave compile:\s*", "", line)
    for p in (input_path, os.path.basename(input_path)):
        if line.startswith(p + ":"):
            line = line[len(p) + 1:].lstrip()
    return line


def count_remat(report, text):
    """Involuntary full rematerializations: the partitioner's summary remark, else a count of
    the remarks that name one, else a count of the lines of the output that do."""
    if report:
        for r in report.get("remarks", []):
            m = re.search(r"(\d+) involuntary full rematerializations?", r.get("message", ""))
            if m and r.get("pass") == "spmd-partitioner":
                return int(m.group(1))
        return sum(1 for r in report.get("remarks", [])
                   if "involuntary full rematerialization" in r.get("message", "")
                   and r.get("kind") == "missed")
    m = re.search(r"(\d+) involuntary full rematerializations?", text)
    if m:
        return int(m.group(1))
    return text.count("(involuntary full rematerialization)") or None


def classify(rc, timed_out, stdout, stderr, input_path, report, timeout_s, mem_gib):
    """(class, reason) for one run."""
    err_lines = [l for l in stderr.splitlines() if l.strip()]
    last_err = err_lines[-1].strip() if err_lines else ""
    if timed_out:
        # --timing prints each finished phase as it goes: the last one says where it stopped.
        phases = re.findall(r"^timing: (.+?)\s{2,}", stderr, re.M)
        if not phases:
            where = "before parsing finished"
        elif phases[-1].startswith("analysis"):
            where = "in the numerics check (the evaluator), after compiling"
        elif phases[-1] == "parse":
            where = "in the SPMD partitioning, after parsing"
        else:
            where = "after %s" % phases[-1]
        return "timeout", "no result within %g s: %s" % (timeout_s, where)
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = "signal %d" % -rc
        oom = any("bad_alloc" in l or "allocation failed" in l or "out of memory" in l.lower()
                  for l in err_lines)
        why = "killed by %s" % sig
        if oom:
            why += " (out of memory under the %g GiB cap)" % mem_gib
        detail = next((l for l in reversed(err_lines) if "Check failed" in l or "terminate" in l
                       or "bad_alloc" in l or "Assertion" in l), last_err)
        return "crash", why + (": " + strip_prefix(detail, input_path) if detail else "")
    internal = next((l for l in err_lines if l.startswith("weave compile") and not HEADER.match(l)
                     and INTERNAL.search(l)), None)
    if internal:
        return "crash", "internal error: " + strip_prefix(internal, input_path)
    both = stdout + "\n" + stderr  # the report table goes to stderr
    if rc == 0:
        line = first_line_with(both, "Numerics:") or "exit 0"
        return "numerics-pass", re.sub(r"^Numerics:\s*", "", line)
    if rc == 3:
        line = first_line_with(both, "Numerics:") or last_err
        return "numerics-fail", re.sub(r"^Numerics:\s*", "", line)
    if rc == 5:
        why = (report or {}).get("numerics", {}).get("skipped")
        if not why:
            line = first_line_with(stderr, "could not be verified") or last_err
            why = re.sub(r".*could not be verified:\s*", "", line)
            why = re.sub(r"\.\s*The output was not written\.?$", "", why)
        est = (report or {}).get("numerics", {}).get("estimated_bytes")
        if est and "too large" in why.lower() and "%" not in why and "GiB" not in why:
            why += " (estimate %.2f GiB)" % (est / 2**30)
        return "unchecked", why
    if rc in (1, 2):
        k = next((k for k, l in enumerate(err_lines)
                  if l.startswith("weave compile") and not HEADER.match(l)), None)
        if k is None:
            msg = last_err
        else:  # a message may run on over indented lines (a sharding as written, a list)
            msg = err_lines[k]
            for l in err_lines[k + 1:]:
                if not l[:1].isspace():
                    break
                msg += " " + l.strip()
        text = strip_prefix(msg, input_path)
        if "does not verify (a Weave bug)" in msg:
            return "verify-fail", "partitioned module: " + re.sub(
                r"^the partitioned module does not verify \(a Weave bug\):\s*", "", text)
        if "the compiled module does not verify" in msg or "does not verify after" in msg:
            return "verify-fail", "compiled module: " + re.sub(
                r"^the (compiled )?module does not verify\s*", "", text).lstrip(": ")
        if re.search(r"(^|\s)" + re.escape(input_path) + r":\d+:\d+:", msg) or \
                re.search(r"^weave compile: [^:]+:\d+:\d+:", msg):
            return "parse-error", re.sub(r"^(?:\S*?input\.hlo:)?(\d+:\d+):\s*", r"at \1: ", text)
        if "the input does not verify" in msg:
            return "parse-error", "input verifier: " + re.sub(r"^the input does not verify:\s*",
                                                              "", text)
        # "SPMD partitioning failed: pass P: P: msg" and "pass P failed: msg" read as "P: msg"
        text = re.sub(r"^SPMD partitioning failed: pass ([\w-]+): (?:\1: )?", r"\1: ", text)
        text = re.sub(r"^pass ([\w-]+) failed: (?:\1: )?", r"\1: ", text)
        if rc == 2:
            return "declined", "usage (exit 2): " + text
        return "declined", text
    if rc == 4:
        return "crash", "exit 4 (a required rewrite) without --require: " + strip_prefix(
            last_err, input_path)
    return "crash", "exit %d: %s" % (rc, strip_prefix(last_err, input_path))


def snapshot_weave(weave, scratch):
    """A private copy of the weave binary, so that a rebuild during the run cannot mix two
    versions (or hit a half-linked file). Waits for the file to stay unchanged for 5 s and to
    answer --help."""
    dest = os.path.join(scratch, ".weave-bin")
    for _ in range(60):
        try:
            st = os.stat(weave)
            if time.time() - st.st_mtime < 5:
                time.sleep(5)
                continue
            shutil.copy2(weave, dest)
            if os.stat(weave).st_mtime != st.st_mtime:
                continue
            if subprocess.run([dest, "--help"], capture_output=True).returncode == 0:
                return dest
        except OSError:
            pass
        time.sleep(5)
    sys.exit("could not take a stable copy of %s" % weave)


def run_weave(cmd, args):
    """Runs one weave command under the time limit and address-space cap: (exit code, timed
    out, stdout, stderr), or None when the runner is stopping."""
    timed_out = False
    with RUNNING_LOCK:
        if STOPPING:
            return None
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=limit_child(int(args.mem_gib * 2**30)))
        RUNNING.add(proc)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        stdout, stderr = proc.communicate()
    finally:
        with RUNNING_LOCK:
            RUNNING.discard(proc)
    return (proc.returncode, timed_out, stdout.decode("utf-8", errors="replace"),
            stderr.decode("utf-8", errors="replace"))


def run_one(mod, args, scratch):
    if mod["hlo"] is None or mod["n"] is None:
        return dict(cls="no-device-count",
                    reason=mod["note"] or "partition count not found", rc=None, seconds=0.0,
                    remat=None)
    d = os.path.join(scratch, safe_name(mod["name"]))
    os.makedirs(d, exist_ok=True)
    inp = os.path.join(d, "input.hlo")
    with open(inp, "w") as f:
        f.write(mod["hlo"].lstrip("\n") + "\n")
    out = os.path.join(d, "output.hlo")
    rep = os.path.join(d, "report.json")
    cmd = [args.weave, "compile", inp, "-o", out, "--input-form=global",
           "--num-partitions", str(mod["n"]), "--verify-numerics", "--cost-gate=off",
           "--numerics-memory-gib", "%g" % args.numerics_gib,
           "--report", rep, "--timing"] + mod.get("flags", [])
    part = os.path.join(d, "partitioned.hlo")
    cmd += ["--partitioned-output", part]
    t0 = time.monotonic()
    ran = run_weave(cmd, args)
    if ran is None:
        return dict(cls="timeout", reason="not run: the runner was interrupted", rc=None,
                    seconds=0.0, remat=None)
    rc, timed_out, stdout, stderr = ran
    seconds = time.monotonic() - t0
    report = None
    if os.path.exists(rep):
        try:
            with open(rep) as f:
                report = json.load(f)
        except (OSError, ValueError):
            report = None
    with open(os.path.join(d, "command.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")
    with open(os.path.join(d, "stdout.txt"), "w") as f:
        f.write(stdout)
    with open(os.path.join(d, "stderr.txt"), "w") as f:
        f.write(stderr)
    with open(os.path.join(d, "exit_code.txt"), "w") as f:
        f.write("timeout\n" if timed_out else "%d\n" % rc)
    cls, reason = classify(rc, timed_out, stdout, stderr, inp, report,
                           args.timeout, args.mem_gib)
    if mod.get("expect_error") is not None and cls == "declined":
        # XLA's own test expects the partitioner to refuse this module: Weave agrees.
        cls = "rejected-as-xla"
        reason = "XLA's test expects an error%s; Weave: %s" % (
            (' ("%s")' % mod["expect_error"]) if mod["expect_error"] else "", reason)
    if cls == "unchecked" and not os.path.exists(out):
        # The check could not run (the module too large to evaluate): compile it again without
        # the check, for the compiled module's collectives (its windowed loops).
        plain = [a for a in cmd if a != "--verify-numerics"]
        plain = plain[:plain.index("--report")]
        try:
            subprocess.run(plain, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=args.timeout, preexec_fn=limit_child(int(args.mem_gib * 2**30)))
        except subprocess.TimeoutExpired:
            pass
    collectives = partitioned_collectives(part, out)
    scaled = None
    if too_large(dict(reason=reason, **{"class": cls})):
        scaled = check_scaled_copy(mod, cmd, inp, d, args, collectives)
    return dict(cls=cls, reason=clip(reason, 1000), rc=None if timed_out else rc,
                seconds=round(seconds, 3), remat=count_remat(report, stdout + stderr),
                collectives=collectives, scaled=scaled)


def check_scaled_copy(mod, cmd, inp, d, args, collectives):
    """The global-vs-partitioned check on scaled-down copies of a module too large to evaluate
    (scale_down.py): the same command on each copy in turn until one runs. Returns a dict
    (g, cls, reason, same_collectives) or None when no copy could be made."""
    with open(inp) as f:
        text = f.read()
    last = None
    for g, scaled_text in scale_down.scaled_copies(text, mod["n"]):
        sd = os.path.join(d, "scaled-%d" % g)
        os.makedirs(sd, exist_ok=True)
        sinp = os.path.join(sd, "input.hlo")
        with open(sinp, "w") as f:
            f.write(scaled_text)
        paths = {inp: sinp}
        for flag in ("-o", "--report", "--partitioned-output"):
            paths[cmd[cmd.index(flag) + 1]] = os.path.join(
                sd, os.path.basename(cmd[cmd.index(flag) + 1]))
        scmd = [paths.get(a, a) for a in cmd]
        ran = run_weave(scmd, args)
        if ran is None:
            break
        rc, timed_out, stdout, stderr = ran
        report = None
        try:
            with open(os.path.join(sd, "report.json")) as f:
                report = json.load(f)
        except (OSError, ValueError):
            pass
        cls, reason = classify(rc, timed_out, stdout, stderr, sinp, report, args.timeout,
                               args.mem_gib)
        mine = partitioned_collectives(os.path.join(sd, "partitioned.hlo"),
                                       os.path.join(sd, "output.hlo"))
        last = dict(g=g, cls=cls, reason=clip(reason, 400),
                    same_collectives=(mine is not None and mine == collectives),
                    collectives=mine)
        # Still too large (by the estimate, or the evaluator ran out of memory or time): the
        # next, smaller copy.
        if not (cls == "timeout" or (cls == "unchecked" and ("too large to evaluate" in reason
                                                            or "ran out of memory" in reason))):
            break
    return last


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def md_cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def write_summary(results, source, totals_tests, fh, elapsed, args):
    counts = {c: 0 for c in CLASSES}
    for r in results:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    fh.write("# Weave on XLA's SPMD partitioner test modules\n\n")
    fh.write("Source: `%s` (%d tests, %d modules)%s. Each module compiled as a global module:\n"
             "`weave compile --input-form=global --num-partitions N --verify-numerics "
             "--cost-gate=off --numerics-memory-gib %g`, limits %g s and %g GiB per module; weave %s. Generated by "
             "`tests/xla/spmd_partitioner.py` in %.0f s.\n\n"
             % (source, totals_tests, len(results),
                (", filter `%s`" % args.filter) if args.filter else "",
                args.numerics_gib, args.timeout, args.mem_gib, args.weave_desc, elapsed))
    fh.write("| class | modules |\n|---|---:|\n")
    for c in CLASSES:
        fh.write("| %s | %d |\n" % (c, counts.get(c, 0)))
    fh.write("| total | %d |\n\n" % len(results))
    # Issue 47's measures: the share that partitions (every class but crash, parse-error,
    # verify-fail, declined, no-device-count), and of every third module by name among those,
    # the share the global check passes.
    # Modules XLA's own tests expect to be refused are left out of both measures.
    bad = {"crash", "parse-error", "verify-fail", "declined", "no-device-count"}
    counted = [r for r in results if r["class"] != "rejected-as-xla"]
    partitioned = sorted((r for r in counted if r["class"] not in bad), key=lambda r: r["name"])
    third = partitioned[::3]
    passed = sum(1 for r in third if r["class"] == "numerics-pass")
    # Over the memory limit: the global program alone over it (the check cannot run at this size
    # whatever the partitioning), or only the partitioned module (a costlier partitioning).
    global_big = sum(1 for r in third if r["class"] == "unchecked" and "global program alone" in r["reason"]
                     and "too large" in r["reason"] and "fits" not in r["reason"])
    if results:
        fh.write("Partitioned: %d of %d (%.1f%%)%s. Every third partitioned module by name: %d of "
                 "%d pass the global-vs-partitioned check (%.1f%%), %d fail it; %d more are over "
                 "the memory limit with the global program alone over it (%d of %d = %.1f%% pass "
                 "among the rest).\n\n"
                 % (len(partitioned), len(counted), 100.0 * len(partitioned) / max(1, len(counted)),
                    (", not counting %d module(s) XLA's own test expects its partitioner to refuse"
                     % (len(results) - len(counted))) if len(results) != len(counted) else "",
                    passed, len(third), 100.0 * passed / max(1, len(third)),
                    sum(1 for r in third if r["class"] == "numerics-fail"), global_big,
                    passed, len(third) - global_big,
                    100.0 * passed / max(1, len(third) - global_big)))
    # Scaled-down copies of the modules too large to evaluate (scale_down.py): the check on a
    # copy with its large sizes divided by g, counted only where the copy's partitioned module
    # has the module's own collective kinds (the same partitioning path).
    tried = [r for r in counted if r.get("scaled")]
    if tried:
        def scaled_pass(r):
            sc = r.get("scaled") or {}
            return sc.get("cls") == "numerics-pass" and sc.get("same_collectives")
        spass = [r for r in tried if scaled_pass(r)]
        sfail = [r for r in tried if (r["scaled"] or {}).get("cls") == "numerics-fail"]
        third_scaled = sum(1 for r in third if too_large(r) and scaled_pass(r))
        big = [r for r in counted if too_large(r)]
        fh.write("Scaled-down copies (`tests/xla/scale_down.py`: every size that is a multiple of "
                 "g*M (M: the tile counts' least common multiple) divided by a power of two g, "
                 "the same map on slice bounds, slice sizes, "
                 "windows and pads; the same command on the copy): of %d modules too large to "
                 "evaluate (by the estimate, out of memory, or out of time in the check), %d have a copy that is checked; %d pass with the module's own "
                 "collective kinds, %d fail the check. Every third partitioned module by name, "
                 "counting a scaled-down pass: %d of %d (%.1f%%).\n\n"
                 % (len(big), sum(1 for r in tried if r["scaled"]["cls"] in
                                  ("numerics-pass", "numerics-fail")),
                    len(spass), len(sfail), passed + third_scaled, len(third),
                    100.0 * (passed + third_scaled) / max(1, len(third))))
    # Issue 48's measure: of the partitioned modules whose test asserts collective kinds, those
    # whose partitioned module has every kind asserted present and none asserted absent.
    asserting = [r for r in results if (r.get("asserted_present") or r.get("asserted_absent"))
                 and r.get("collectives") is not None]
    if asserting:
        agree = [r for r in asserting if set(r["asserted_present"]) <= set(r["collectives"])
                 and not set(r["asserted_absent"]) & set(r["collectives"])]
        fh.write("Collectives as XLA's test asserts them (issue 48): %d of %d partitioned modules "
                 "whose test names collective kinds (op:: matchers, NumOfInstructions counts, "
                 "FileCheck lines) have every kind asserted present and none asserted absent "
                 "(Weave's kinds: the partitioned and the compiled module's, compiled again "
                 "without the check where it could not run; a reduce-scatter also counting as "
                 "an all-reduce).\n\n"
                 % (len(agree), len(asserting)))
    opts = sum(1 for r in results if "not reproduced" in (r.get("note") or ""))
    hand = sum(1 for r in results if r.get("n_source") == "SpmdPartitioner")
    if opts or hand:
        fh.write("Partition counts come from each test's `PartitionComputation` call%s. %d "
                 "modules' tests also pass partitioner options Weave does not take (they run "
                 "with Weave's defaults; the JSON's `note` lists them).\n\n"
                 % ((", or, for the %d test(s) that build an `SpmdPartitioner` by hand, from its "
                     "first argument" % hand) if hand else "", opts))
    remat = [r for r in results if r.get("remat")]
    if remat:
        fh.write("Modules with involuntary full rematerializations (Weave's remark): %d, "
                 "%d in all.\n\n" % (len(remat), sum(r["remat"] for r in remat)))
    fh.write("| module | N | class | reason | remat | collectives (issue 48) | scaled-down check |\n"
             "|---|---:|---|---|---:|---|---|\n")
    for r in results:
        reason = clip(r["reason"])
        fh.write("| %s | %s | %s | %s | %s | %s | %s |\n" % (
            md_cell(r["name"]), r["n"] if r["n"] is not None else "?", r["class"],
            md_cell(reason), r["remat"] if r.get("remat") else "", md_cell(collective_cell(r)),
            md_cell(scaled_cell(r))))


def too_large(r):
    """Whether the check could not run for the module's size: the evaluator's estimate over the
    limit, the evaluator out of memory, or out of time in the check after compiling."""
    if r["class"] == "timeout":
        return "numerics check" in r["reason"]
    return r["class"] == "unchecked" and ("too large" in r["reason"]
                                          or "ran out of memory" in r["reason"])


def scaled_cell(r):
    """The scaled-down copy's outcome for the table: '' when none was tried."""
    sc = r.get("scaled")
    if not too_large(r):
        return ""
    if not sc:
        return "no copy: no size is a multiple of 2N, or none brings it under the budget"
    same = "" if sc["same_collectives"] else (
        "; other collectives: %s" % ", ".join(sc.get("collectives") or ["none"]))
    if sc["cls"] == "numerics-pass":
        return "sizes / %d: PASS%s" % (sc["g"], same)
    if sc["cls"] == "numerics-fail":
        return "sizes / %d: FAIL: %s" % (sc["g"], clip(sc["reason"], 100))
    return "sizes / %d: %s: %s" % (sc["g"], sc["cls"], clip(sc["reason"], 100))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--xla-file", help="path of spmd_partitioner_test.cc")
    src.add_argument("--xla-repo", help="an XLA git repository (bare is fine): reads HEAD:PATH")
    ap.add_argument("--xla-path", default=None,
                    help="with --xla-repo: the file inside it (default %s)" % DEFAULT_XLA_PATH)
    ap.add_argument("--weave", default=DEFAULT_WEAVE, help="the weave binary (default build/weave)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="modules compiled at once (2)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per module (60)")
    ap.add_argument("--mem-gib", type=float, default=4.0,
                    help="address-space cap of each weave process, GiB (4; 0 = none)")
    ap.add_argument("--numerics-gib", type=float, default=3.5,
                    help="weave's --numerics-memory-gib: the evaluator's estimate limit (3.5, under "
                         "the 4 GiB cap with room for the rest of the process)")
    ap.add_argument("--filter", default=None, help="only modules whose name matches this regex")
    ap.add_argument("--keep", default=None,
                    help="keep each module's input, output, report and logs under DIR/NAME/")
    ap.add_argument("--summary", default="-", help="Markdown summary to FILE (default stdout)")
    ap.add_argument("--json", default=None, help="the same data as JSON to FILE")
    ap.add_argument("--list", action="store_true", help="only list the extracted modules")
    args = ap.parse_args()

    text, source = read_source(args)
    modules, n_tests = extract_modules(text)
    if args.filter:
        rx = re.compile(args.filter)
        modules = [m for m in modules if rx.search(m["name"])]
    if args.list:
        for m in modules:
            print("%-70s N=%-4s line %-6d %s" % (m["name"], m["n"], m["line"], m["note"]))
        return 0
    if not os.access(args.weave, os.X_OK):
        sys.exit("weave binary not found or not executable: %s" % args.weave)

    if args.keep:
        scratch = os.path.abspath(args.keep)
        os.makedirs(scratch, exist_ok=True)
    else:
        scratch = tempfile.mkdtemp(prefix="weave-xla-spmd-")
    args.weave_desc = "`%s` built %s" % (
        os.path.relpath(args.weave, REPO_ROOT) if args.weave.startswith(REPO_ROOT) else args.weave,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.stat(args.weave).st_mtime)))
    args.weave = snapshot_weave(args.weave, scratch)
    t0 = time.monotonic()
    results = [None] * len(modules)
    done = 0
    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
        futs = {pool.submit(run_one, m, args, scratch): i for i, m in enumerate(modules)}
        try:
            for fut in concurrent.futures.as_completed(futs):
                i = futs[fut]
                m = modules[i]
                r = fut.result()
                results[i] = dict(name=m["name"], test=m["test"], fixture=m["fixture"],
                                  line=m["line"], n=m["n"], n_source=m["n_source"],
                                  note=m["note"], **{"class": r["cls"]}, reason=r["reason"],
                                  exit_code=r["rc"], seconds=r["seconds"], remat=r["remat"],
                                  asserted_present=m.get("asserted", ([], []))[0],
                                  asserted_absent=m.get("asserted", ([], []))[1],
                                  collectives=r.get("collectives"), scaled=r.get("scaled"))
                done += 1
                sys.stderr.write("[%d/%d] %-60s %s\n" % (done, len(modules), m["name"], r["cls"]))
                sys.stderr.flush()
        except BaseException:
            stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    except KeyboardInterrupt:
        stop_all()
        sys.stderr.write("interrupted: the running weave processes were ended\n")
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - t0

    if args.summary == "-":
        write_summary(results, source, n_tests, sys.stdout, elapsed, args)
    else:
        with open(args.summary, "w") as fh:
            write_summary(results, source, n_tests, fh, elapsed, args)
    if args.json:
        counts = {c: sum(1 for r in results if r["class"] == c) for c in CLASSES}
        with open(args.json, "w") as fh:
            json.dump(dict(source=source, tests=n_tests, modules=len(results), totals=counts,
                           timeout_s=args.timeout, mem_gib=args.mem_gib, filter=args.filter,
                           results=results), fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
