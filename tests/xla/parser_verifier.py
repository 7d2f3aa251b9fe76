#!/usr/bin/env python3
"""Weave against the HLO modules of XLA's parser and verifier tests (issue 50).

Reads two test files of XLA (from a git snapshot of XLA, or given as files):

    xla/hlo/parser/hlo_parser_test.cc     the parser's tests
    xla/service/hlo_verifier_test.cc      the verifier's tests

and pulls out every HLO module text a test hands to XLA's module parser, together with what the
test expects of it:

  * the parser's tables of valid modules (the `{name, module_string}` entries of the
    `std::vector<TestData>` / `std::vector<NonRoundtripTestData>` functions, which XLA parses,
    verifies and prints back);
  * module texts in TEST / TEST_F bodies passed to `ParseAndReturnUnverifiedModule` or
    `ParseAndReturnVerifiedModule` (the text may be a raw string, an ordinary string, a name
    bound to one in the test or at file scope, or an `absl::StrCat` / `StrFormat` /
    `StrReplaceAll` of those), and the modules built by the verifier test's
    `Make...Computation` helpers (a template with replica groups filled in);
  * the expectation the test asserts: the parse succeeds (`ASSERT_OK_AND_ASSIGN`, `TF_EXPECT_OK`,
    `EXPECT_TRUE(r.ok())`, ...) or fails (`EXPECT_FALSE(r.ok())`, `EXPECT_NE(OkStatus(), ...)`,
    `ExpectHasSubstr(...message(), "...")`, `StatusIs(...)`), and for a parsed module, what the
    first `verifier().Run(module)` of the test (before any C++ change to the module) must give,
    with the text the error must hold. The verifier that decides is recorded: the parser test's
    (XLA's default verifier, mixed precision allowed), the verifier test's default fixture
    `HloVerifierTest`, or a non-default one (another fixture: layout-sensitive, mixed precision,
    collective deadlocks, no replica-group check; or an `HloVerifier{opts}` built in the test).
    Where the test does not say, the module is `unknown-expectation`.

Strings given to XLA's sub-parsers (ParseSharding, ParseShape, ParseWindow, ...) are not modules
and are only counted; so are module texts built at run time (loops, printed modules) and
DISABLED_ tests. A replica count or partition count the test sets in the module's config is
written into the module's header (Weave reads it there).

Each module is written to a scratch directory as input.hlo and given to Weave:

    weave opt input.hlo -o print1.hlo      parse and print, no passes (Weave's parser)
    weave verify input.hlo                 parse and verify
    weave opt print1.hlo -o print2.hlo     print -> parse -> print must be a fixed point
    weave verify print1.hlo                (where the input verifies) the print still verifies
    weave run input.hlo --max-memory-gib 2 (where the input verifies) only to detect crashes

each with a time limit and an address-space cap. A crash is a signal, an exit code Weave does not
document (0 ok, 1 error, 2 usage, 3/4/5 compile-specific), or a sanitizer report. The outcome
classes are listed in CLASSES below. The Markdown summary has the totals, issue 50's three
measures, the misses grouped by cause and one row per module (no module text in it).

Run, from the repository root:

    python3 tests/xla/parser_verifier.py --xla-repo /work/.mirror/tpopp+xla/repo -j 2 \\
        --summary tests/xla/parser_verifier_summary.md

`--list` only prints what was extracted; `--filter REGEX` keeps the modules whose name matches;
`--keep DIR` keeps each module's files under DIR/NAME/ (to reproduce a row:
`build/weave verify DIR/NAME/input.hlo`). Standard library only.
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

PARSER_PATH = "xla/hlo/parser/hlo_parser_test.cc"
VERIFIER_PATH = "xla/service/hlo_verifier_test.cc"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_WEAVE = os.path.join(REPO_ROOT, "build", "weave")

# Outcome classes, in the order the summary lists them.
CLASSES = [
    "accept-ok",            # XLA accepts; Weave parses, verifies and prints it stably
    "accept-parse-error",   # XLA accepts; Weave's parser rejects it
    "accept-verify-error",  # XLA parses and verifies it; Weave's verifier rejects it
    "accept-unstable-print",  # XLA accepts; Weave's print does not parse back to the same print
    "reject-ok",            # XLA rejects it; so does Weave (parser or verifier)
    "reject-missed",        # XLA rejects it; Weave parses and verifies it
    "crash",                # verify, print or run: a signal, an undocumented exit code, a sanitizer
    "timeout",              # parse, verify or print ran past the time limit
    "unknown-expectation",  # the test does not say what XLA expects (Weave still run for crashes)
]
MISSES = {"accept-parse-error", "accept-verify-error", "accept-unstable-print", "reject-missed"}
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 5}
SANITIZER = re.compile(r"AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|"
                       r"ThreadSanitizer|MemorySanitizer|runtime error:|terminate called|"
                       r"Assertion .* failed|\binternal error\b", re.I)
MESSAGE_WIDTH = 150

# Verifier labels. The measure counts the first two.
V_PARSER = "parser-test"       # hlo_parser_test's ParseAndReturnVerifiedModule: XLA's default
#                                verifier, mixed precision allowed
V_DEFAULT = "default"          # hlo_verifier_test's HloVerifierTest fixture: verifier()
DEFAULT_FIXTURES = {"HloVerifierTest"}

SUB_PARSERS = ("ParseSharding", "ParseShape", "ParseShapeOnly", "ParseWindow", "ParseLayout",
               "ParseLayoutOnly", "ParseReplicaGroupsOnly", "ParseCollectiveDeviceListBase",
               "ParsePaddingConfig", "ParseConvolutionDimensionNumbers",
               "ParseFrontendAttributes", "ParseOriginalValue", "ParseStatisticsViz",
               "LexesAsJsonDict")

# --------------------------------------------------------------------------------------------
# Reading C++: the source with every literal replaced by a placeholder and comments dropped
# --------------------------------------------------------------------------------------------


def decode_c_string(body):
    """The value of an ordinary C++ string literal's body (between the quotes)."""
    out, i, n = [], 0, len(body)
    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "?": "?",
              "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e == "x":
            j = i + 2
            while j < n and body[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(body[i + 2:j] or "0", 16)))
            i = j
        elif e in "01234567":
            j = i + 1
            while j < n and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(chr(int(body[i + 1:j], 8)))
            i = j
        else:
            out.append(e)
            i += 2
    return "".join(out)


def mask_source(src):
    """(masked, strings): src with comments blanked (newlines kept) and each string literal
    replaced by `__S<n>__` followed by the newlines it spanned (so line numbers hold);
    strings[n] is the literal's value."""
    out, strings = [], []
    i, n = 0, len(src)
    ident = re.compile(r"[A-Za-z0-9_]")
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j) + " ")
            i = j
            continue
        if c == "R" and src.startswith('R"', i) and (i == 0 or not ident.match(src[i - 1])):
            k = src.find("(", i + 2)
            delim = src[i + 2:k] if k > 0 else None
            if delim is not None and len(delim) <= 16 and not re.search(r'[\s\\)"]', delim):
                close = ")" + delim + '"'
                j = src.find(close, k + 1)
                if j >= 0:
                    strings.append(src[k + 1:j])
                    out.append("__S%d__" % (len(strings) - 1) + "\n" * src.count("\n", i, j))
                    i = j + len(close)
                    continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            strings.append(decode_c_string(src[i + 1:j]))
            out.append("__S%d__" % (len(strings) - 1))
            i = j + 1
            continue
        if c == "'" and not (i > 0 and src[i - 1].isalnum()):  # 1'000 is no literal
            j = i + 1
            while j < n and src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), strings


PLACEHOLDER = re.compile(r"__S(\d+)__")
TEST_HEAD = re.compile(r"^[ \t]*(TEST|TEST_F|TEST_P)\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)


def match_close(text, i):
    """text[i] is an opening bracket; the index of its match (literals are masked)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for j in range(i, len(text)):
        c = text[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def split_top(text, sep=","):
    """text split at the separators outside brackets."""
    parts, depth, first = [], 0, 0
    for j, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            if sep == "+" and (text[j + 1:j + 2] in ("+", "=") or text[j - 1:j] == "+"):
                continue
            parts.append(text[first:j])
            first = j + 1
    parts.append(text[first:])
    return [p.strip() for p in parts]


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def match_open(text, j):
    """text[j] is a closing bracket; the index of its opening one (literals are masked)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    for i in range(j, -1, -1):
        c = text[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in "([{":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


def statements(masked, b0, b1):
    """(start, end) of each statement in masked[b0:b1]: split at ';' outside brackets, and at
    the braces of blocks (a block's header, `for (...) {`, is dropped; an initializer's braces
    stay in their statement)."""
    out, start, j = [], b0, b0
    while j < b1:
        c = masked[j]
        if c in "([":
            close = match_close(masked, j)
            j = close + 1 if 0 < close < b1 else j + 1
            continue
        if c == "{":
            prev = masked[start:j].rstrip()
            if not prev or prev.endswith(")") or re.search(r"\b(?:else|do|try)$", prev):
                start = j + 1
                j += 1
                continue
            close = match_close(masked, j)
            j = close + 1 if 0 < close < b1 else j + 1
            continue
        if c in ";}":
            if masked[start:j].strip():
                out.append((start, j))
            start = j + 1
        j += 1
    if masked[start:b1].strip():
        out.append((start, b1))
    return out


def expr_before(text, end):
    """The start of the expression that ends at text[end] (exclusive): names, `::`, calls,
    brace-initializers and member accesses, read backwards."""
    i = end
    while True:
        while i > 0 and text[i - 1].isspace():
            i -= 1
        if i > 0 and text[i - 1] in ")]}":
            o = match_open(text, i - 1)
            if o < 0:
                return i
            i = o
            continue
        j = i
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
            j -= 1
        if j == i:
            return i
        i = j
        k = i
        while k > 0 and text[k - 1].isspace():
            k -= 1
        if k > 0 and text[k - 1] == "." :
            i = k - 1
            continue
        if k > 1 and text[k - 2:k] == "->":
            i = k - 2
            continue
        return i


def norm(text):
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# Evaluating a string expression of a test (literals, names, StrCat, StrFormat, StrReplaceAll)
# --------------------------------------------------------------------------------------------

class Unknown(Exception):
    pass


class Scope:
    """String bindings visible at a point of a test body: the test's own, then file scope."""

    def __init__(self, ctx, local_binds, dynamic, pos):
        self.ctx, self.local, self.dynamic, self.pos = ctx, local_binds, dynamic, pos

    def lookup(self, name):
        if name in self.dynamic:
            raise Unknown("%s is built at run time" % name)
        cands = [b for b in self.local.get(name, []) if b[0] < self.pos]
        if cands:
            pos, expr = cands[-1]
            return self.ctx.eval(expr, Scope(self.ctx, self.local, self.dynamic, pos))
        cands = [b for b in self.ctx.file_binds.get(name, []) if b[0] < self.pos] or \
            self.ctx.file_binds.get(name, [])
        if cands:
            pos, expr = cands[-1]
            return self.ctx.eval(expr, Scope(self.ctx, {}, set(), pos))
        raise Unknown("%s is not a string the test binds" % name)


def find_assignment(stmt):
    """(name, rhs) of a declaration or assignment `... NAME = RHS` / `... NAME[] = RHS`, or
    None. The left side must be a plain declaration (no call, no member access)."""
    m = re.search(r"(?<![=!<>+\-*/%&|^])=(?!=)", stmt)
    if not m:
        return None
    lhs, rhs = stmt[:m.start()], stmt[m.end():]
    lhs = re.sub(r"^[\s{}]+", "", lhs)
    if re.search(r"[()]|->|\w\s*\.\s*\w|\[\s*[^\]\s]|^\s*\*", lhs):
        return None
    mm = re.search(r"(\w+)\s*(?:\[\s*\])?\s*$", lhs)
    if not mm or mm.group(1) in ("operator",):
        return None
    return mm.group(1), rhs.strip()


class Context:
    def __init__(self, masked, strings):
        self.masked, self.strings = masked, strings
        self.file_binds = {}

    def eval(self, expr, scope, depth=0):
        if depth > 20:
            raise Unknown("expression too deep")
        expr = expr.strip()
        while expr.startswith("(") and match_close(expr, 0) == len(expr) - 1:
            expr = expr[1:-1].strip()
        terms = split_top(expr, "+")
        if len(terms) > 1:
            return "".join(self.eval(t, scope, depth + 1) for t in terms)
        if re.fullmatch(r"(?:__S\d+__\s*)+", expr):
            return "".join(self.strings[int(k)] for k in PLACEHOLDER.findall(expr))
        if re.fullmatch(r"-?\d+", expr):
            return expr
        m = re.fullmatch(r"((?:\w+::)*\w+)\s*(\(.*\)|\{.*\})", expr, re.S)
        if m and match_close(expr, m.start(2)) == len(expr) - 1:
            fn, args = m.group(1), split_top(m.group(2)[1:-1])
            base = fn.split("::")[-1]
            if base in ("string", "string_view") and len(args) == 1:
                return self.eval(args[0], scope, depth + 1)
            if base == "StrCat":
                return "".join(self.eval(a, scope, depth + 1) for a in args if a)
            if base == "StrFormat":
                return self.str_format(args, scope, depth)
            if base == "StrReplaceAll" and len(args) == 2:
                text = self.eval(args[0], scope, depth + 1)
                pairs = args[1].strip()
                if not (pairs.startswith("{") and pairs.endswith("}")):
                    raise Unknown("StrReplaceAll with a computed table")
                for p in split_top(pairs[1:-1]):
                    p = p.strip()
                    if not p:
                        continue
                    if not (p.startswith("{") and p.endswith("}")):
                        raise Unknown("StrReplaceAll with a computed pair")
                    a, b = split_top(p[1:-1])
                    text = text.replace(self.eval(a, scope, depth + 1),
                                        self.eval(b, scope, depth + 1))
                return text
            raise Unknown("built by %s(...)" % fn)
        if re.fullmatch(r"\w+", expr):
            return scope.lookup(expr)
        raise Unknown("built at run time")

    def str_format(self, args, scope, depth):
        fmt = self.eval(args[0], scope, depth + 1)
        vals = [self.eval(a, scope, depth + 1) for a in args[1:]]
        out, k = [], 0
        for m in re.finditer(r"%%|%[-+ #0]*\d*(?:\.\d+)?[sdiu]|%|[^%]+", fmt):
            t = m.group(0)
            if t == "%%":
                out.append("%")
            elif t.startswith("%") and len(t) > 1:
                if k >= len(vals):
                    raise Unknown("StrFormat with too few arguments")
                out.append(vals[k])
                k += 1
            else:
                out.append(t)
        return "".join(out)


# --------------------------------------------------------------------------------------------
# What a test asserts about a status (of a parse, or of a verifier run)
# --------------------------------------------------------------------------------------------

def assertion(stmt, subj, ctx, scope):
    """('ok' | 'fail' | None, expected substring or None, weak) of one statement about SUBJ: a
    regex for the value (a StatusOr, a Status, or a message string)."""
    s = norm(stmt)
    st = r"(?:\s*\.\s*status\s*\(\s*\))?"
    msg = r"(?:\s*\.\s*(?:message|ToString)\s*\(\s*\))?"
    subj_full = r"(?:\(\s*\*?\s*)?" + subj + st + r"(?:\s*\))?"
    def substr_of(text):
        m = re.search(r"\b(?:HasSubstr|StrContains|ExpectHasSubstr)\s*\(", text)
        if not m:
            return None
        close = match_close(text, m.end() - 1)
        args = split_top(text[m.end():close])
        arg = args[-1] if args else ""
        try:
            return ctx.eval(arg, scope)
        except Unknown:
            return None
    # failures
    fail_res = [
        r"\b(?:EXPECT|ASSERT)_FALSE\s*\(\s*" + subj_full + r"\s*\.\s*ok\s*\(\s*\)\s*\)",
        r"\b(?:EXPECT|ASSERT)_TRUE\s*\(\s*!\s*" + subj_full + r"\s*\.\s*ok\s*\(\s*\)\s*\)",
        r"\b(?:EXPECT|ASSERT)_NE\s*\(\s*(?:absl|::absl|tsl)::OkStatus\s*\(\s*\)\s*,\s*" + subj_full,
        r"\b(?:EXPECT|ASSERT)_NE\s*\(\s*" + subj_full + r"\s*,\s*(?:absl|::absl|tsl)::OkStatus",
        r"\bExpectHasSubstr\s*\(\s*" + subj_full + msg,
        r"\b(?:EXPECT|ASSERT)_THAT\s*\(\s*" + subj_full + msg + r"\s*,\s*(?:[\w:]*::)?HasSubstr\b",
        r"\b(?:EXPECT|ASSERT)_TRUE\s*\(\s*absl::StrContains\s*\(\s*" + subj_full + msg,
        r"\b(?:EXPECT|ASSERT)_THAT\s*\(\s*" + subj_full + r"\s*,\s*(?:[\w:]*::)?Not\s*\(\s*(?:[\w:]*::)?IsOk",
    ]
    for rx in fail_res:
        if re.search(rx, s):
            return "fail", substr_of(s), False
    m = re.search(r"\b(?:EXPECT|ASSERT)_THAT\s*\(\s*" + subj_full +
                  r"\s*,\s*(?:[\w:]*::)?StatusIs\s*\(", s)
    if m:
        tail = s[m.end():]
        if re.match(r"\s*(?:[\w:]*::)?(?:kOk|OK)\b", tail):
            return "ok", None, False
        return "fail", substr_of(s[m.end() - 1:]), False
    ok_res = [
        r"\b(?:TF_)?(?:EXPECT|ASSERT)_(?:OK|IS_OK)\s*\(\s*" + subj_full + r"\s*\)",
        r"\b(?:EXPECT|ASSERT)_TRUE\s*\(\s*" + subj_full + r"\s*\.\s*ok\s*\(\s*\)\s*\)",
        r"\b(?:EXPECT|ASSERT)_EQ\s*\(\s*(?:absl|::absl|tsl)::OkStatus\s*\(\s*\)\s*,\s*" + subj_full + r"\s*\)",
        r"\b(?:EXPECT|ASSERT)_EQ\s*\(\s*" + subj_full + r"\s*,\s*(?:absl|::absl|tsl)::OkStatus\s*\(\s*\)\s*\)",
        r"\b(?:EXPECT|ASSERT)_THAT\s*\(\s*" + subj_full + r"\s*,\s*(?:[\w:]*::)?IsOk(?:AndHolds)?\b",
    ]
    for rx in ok_res:
        if re.search(rx, s):
            return "ok", None, False
    # Using the value: the test relies on success (checked last, and only as weak evidence).
    if re.search(r"(?:\b" + subj + r"\s*(?:\.\s*value\s*\(|->)|\*\s*" + subj + r"\b)", s):
        return "ok", None, True
    return None, None, False


def judge(stmts, first, subj, ctx, scope_at, rebinds):
    """The expectation about SUBJ from statements stmts[first:], stopping where SUBJ is bound
    again. (verdict, substring, evidence) with verdict 'ok' | 'fail' | None ('conflict' when
    the statements disagree)."""
    strong, weak = [], []
    for k in range(first, len(stmts)):
        text = stmts[k][2]
        if k > first and rebinds(text):
            break
        v, sub, is_weak = assertion(text, subj, ctx, scope_at(stmts[k][0]))
        if v:
            (weak if is_weak else strong).append((v, sub, norm(text)[:120]))
    use = strong or weak
    if not use:
        return None, None, None
    verdicts = {v for v, _, _ in use}
    if len(verdicts) > 1:
        return "conflict", None, "; ".join(e for _, _, e in use)
    subs = [s for _, s, _ in use if s]
    return use[0][0], (subs[0] if subs else None), use[0][2]


MUTATION = re.compile(
    r"(?:\b(?:set_\w+|mutable_\w+|Replace\w*|Add\w*|Remove\w*|Set\w*|Append\w*|Clear\w*|"
    r"Delete\w*|Drop\w*|MoveTo\w*|CopyFrom|push_back|emplace\w*|add_\w+|clear_\w+|"
    r"Cleanup\w*|Detach\w*|Fuse\w*|Clone\w*|ReplaceWith\w*|TF_CHECK_OK|RunHloPass|Run)\s*\()|"
    r"^\s*\*")


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

def module_form(text):
    t = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    t = re.sub(r"//[^\n]*", " ", t).strip()
    if re.match(r"HloModule\b", t):
        return "module"
    if re.search(r"^\s*(?:ENTRY\s+)?%?[\w.\-]+\s*(?:\([^)]*\)\s*->\s*[^{\n]*)?\{\s*$", t, re.M):
        return "no-header"
    if not t:
        return "empty"
    return "single-instruction"


def set_header(text, replica_count=None, num_partitions=None):
    """The module with replica_count / num_partitions in its HloModule header (if not there)."""
    m = re.match(r"(\s*HloModule\s+[^\s,]+)", text)
    if not m:
        return text, []
    header_end = text.find("\n", m.end())
    header = text[:header_end if header_end >= 0 else len(text)]
    added = []
    for key, val in (("replica_count", replica_count), ("num_partitions", num_partitions)):
        if val is not None and val >= 1 and not re.search(r"\b%s\s*=" % key, header):
            added.append("%s=%d" % (key, val))
    if not added:
        return text, []
    return text[:m.end()] + ", " + ", ".join(added) + text[m.end():], added


def find_tests(masked):
    tests = []
    for m in TEST_HEAD.finditer(masked):
        brace = masked.find("{", m.end())
        close = match_close(masked, brace) if brace >= 0 else -1
        if close < 0:
            continue
        tests.append(dict(macro=m.group(1), fixture=m.group(2), name=m.group(3),
                          start=m.start(), body=(brace + 1, close)))
    return tests


DECLARATION = re.compile(
    r"(?:^|(?<=[;{}]))\s*(?:(?:static|const|constexpr|inline)\s+)*"
    r"(?:char|std::string|absl::string_view|std::string_view|auto)\s*(?:const\s*)?\*?\s*"
    r"(?:const\s+)?(\w+)\s*(?:\[\s*\])?\s*=\s*([^;]*);", re.M)


def file_scope_bindings(ctx, tests, helpers):
    """NAME -> [(pos, expr)] of the string declarations outside test and helper bodies."""
    spans = [t["body"] for t in tests] + [h["body"] for h in helpers.values()]
    binds = {}
    for m in DECLARATION.finditer(ctx.masked):
        if any(a <= m.start(1) < b for a, b in spans) or not PLACEHOLDER.search(m.group(2)):
            continue
        binds.setdefault(m.group(1), []).append((m.start(1), m.group(2)))
    return binds


def find_helpers(ctx):
    """The verifier test's `Make...Computation(replica_groups, replica_count, num_partitions,
    other_attributes)` helpers: name -> dict(body, template)."""
    helpers = {}
    masked = ctx.masked
    for m in re.finditer(r"StatusOr<\s*std::unique_ptr<HloModule>\s*>\s+(Make\w+Computation)\s*\(",
                         masked):
        paren = m.end() - 1
        close = match_close(masked, paren)
        brace = masked.find("{", close)
        if close < 0 or brace < 0 or masked[close + 1:brace].strip():
            continue
        end = match_close(masked, brace)
        body = masked[brace + 1:end]
        params = masked[paren + 1:close]
        helpers[m.group(1)] = dict(body=(brace + 1, end), params=params, text=body)
    for name, h in helpers.items():
        tm = re.search(r"kTemplate\s*=\s*((?:__S\d+__\s*)+);", h["text"])
        h["template"] = ctx.eval(tm.group(1), Scope(ctx, {}, set(), 0)) if tm else None
        h["generic"] = "template_str" in h["params"] and "StrReplaceAll" in h["text"]
    return helpers


def replica_groups_text(arg):
    """The verifier test's ReplicaGroupsStr of a literal {{0,1},{2}}: '{{0,1}, {2}}'."""
    a = arg.strip()
    if not (a.startswith("{") and a.endswith("}")):
        raise Unknown("replica groups are not a literal")
    groups = []
    for g in split_top(a[1:-1]):
        if not g:
            continue
        if not (g.startswith("{") and g.endswith("}")):
            raise Unknown("replica group is not a literal")
        ids = [x for x in split_top(g[1:-1]) if x]
        if not all(re.fullmatch(r"\d+", x) for x in ids):
            raise Unknown("replica id is not a literal")
        groups.append([int(x) for x in ids])
    return "{%s}" % ", ".join("{%s}" % ",".join(str(x) for x in g) for g in groups), \
        sum(len(g) for g in groups)


def expand_helper(h, args, ctx, scope):
    """(module text, replica_count, num_partitions) a Make...Computation call builds."""
    if not h.get("template"):
        raise Unknown("helper without a template")
    groups, count = replica_groups_text(args[0] if args else "{}")
    def opt_int(k):
        if len(args) <= k or args[k] in ("", "std::nullopt"):
            return None
        if not re.fullmatch(r"\d+", args[k]):
            raise Unknown("count is an expression")
        return int(args[k])
    replicas = opt_int(1)
    parts = opt_int(2)
    other = ctx.eval(args[3], scope) if len(args) > 3 and args[3] else ""
    text = h["template"].replace("REPLICA_GROUPS", groups)
    text = text.replace("OTHER_ATTRIBUTES", ("," + other) if other else "")
    return text, (replicas if replicas is not None else count), (parts if parts is not None else 1)


def verifier_label(kind, fixture, expr):
    """The verifier a Run uses: expr is the text before `.Run(`."""
    e = norm(expr)
    if re.fullmatch(r"(?:this\s*->\s*)?verifier\s*\(\s*\)", e):
        if kind == "parser":
            return V_PARSER
        return V_DEFAULT if fixture in DEFAULT_FIXTURES else "fixture " + fixture
    opts = re.findall(r"\.\s*(\w+)\s*\(", e)
    if opts:
        return "HloVerifierOpts{}.%s" % ".".join(o + "()" for o in opts)
    if re.fullmatch(r"\w+", e):
        return "the test's HloVerifier %s" % e
    return "HloVerifier from %s" % e[:60]


def table_modules(ctx, kind):
    """The parser test's tables: {name, module[, expected print or replica count]} entries."""
    out = []
    masked = ctx.masked
    for m in re.finditer(r"std::vector<\s*(\w*TestData)\s*>\s+(\w+)\s*\(\s*\)\s*\{", masked):
        brace = m.end() - 1
        end = match_close(masked, brace)
        body = masked[brace + 1:end]
        ret = re.search(r"return\s+std::vector<\s*\w+\s*>\s*\(\s*\{", body)
        if not ret:
            continue
        open_at = brace + 1 + ret.end() - 1
        close = match_close(masked, open_at)
        for entry in split_top(masked[open_at + 1:close]):
            if not entry.startswith("{"):
                continue
            fields = split_top(entry[1:-1])
            fields = [f for f in fields if f]
            if len(fields) < 2:
                continue
            scope = Scope(ctx, {}, set(), open_at)
            try:
                name = ctx.eval(fields[0], scope)
                text = ctx.eval(fields[1], scope)
            except Unknown:
                continue
            pos = masked.find(fields[1], open_at)
            note = []
            replicas = None
            if m.group(1) == "TestData" and len(fields) > 2 and re.fullmatch(r"\d+", fields[2]):
                replicas = int(fields[2])
            if m.group(1) != "TestData":
                note.append("input of a non-round-trip case")
            text2, added = set_header(text, replica_count=replicas)
            if added:
                note.append("header: " + ", ".join(added) + " (the test's config)")
            out.append(dict(
                name="%s.%s" % (m.group(2), name), test="%s/%s" % (m.group(2), name),
                fixture=m.group(2), file=kind, line=line_of(masked, pos if pos >= 0 else open_at),
                hlo=text2, form=module_form(text), parse_call="ParseAndReturnVerifiedModule",
                expect="accept", verifier=V_PARSER, expect_error=None,
                evidence="table entry (parsed, verified and printed back by XLA)",
                note="; ".join(note)))
    return out


def extract(src, kind):
    """(modules, stats) of one test file. kind: 'parser' or 'verifier'."""
    masked, strings = mask_source(src)
    ctx = Context(masked, strings)
    tests = find_tests(masked)
    helpers = find_helpers(ctx) if kind == "verifier" else {}
    ctx.file_binds = file_scope_bindings(ctx, tests, helpers)
    stats = dict(tests=len(tests), disabled=0, no_text_module=0, sub_parser={},
                 runtime_built=[], table_entries=0, reparsed=0)
    modules = table_modules(ctx, kind) if kind == "parser" else []
    stats["table_entries"] = len(modules)

    call_rx = re.compile(r"\b(?:xla::)?(ParseAndReturnUnverifiedModule|ParseAndReturnVerifiedModule"
                         + "".join("|" + re.escape(h) for h in helpers) + r")\s*\(")
    sub_rx = re.compile(r"\b(%s)\s*\(" % "|".join(SUB_PARSERS))
    for t in tests:
        b0, b1 = t["body"]
        body = masked[b0:b1]
        tname = "%s.%s" % (t["fixture"], t["name"])
        for sm in sub_rx.finditer(body):
            stats["sub_parser"][sm.group(1)] = stats["sub_parser"].get(sm.group(1), 0) + 1
        if t["name"].startswith("DISABLED_"):
            if call_rx.search(body):
                stats["disabled"] += 1
            continue
        stmts = [(s, e, masked[s:e]) for s, e in statements(masked, b0, b1)]
        local, dynamic = {}, set()
        for s, e, text in stmts:
            a = find_assignment(text)
            if a:
                local.setdefault(a[0], []).append((s, a[1]))
            for dm in re.finditer(r"\b(\w+)\s*\+=", text):
                dynamic.add(dm.group(1))
        def scope_at(pos):
            return Scope(ctx, local, dynamic, pos)
        def stmt_index(pos):
            for k, (s, e, _) in enumerate(stmts):
                if s <= pos < e:
                    return k
            return None
        # config settings of the test: config.set_replica_count(N), ...
        config_sets = re.findall(r"\b(\w+)\s*\.\s*set_(\w+)\s*\(\s*([^()]*?)\s*\)", body)
        found = []
        for cm in call_rx.finditer(body):
            pos = b0 + cm.start()
            open_at = b0 + cm.end() - 1
            close = match_close(masked, open_at)
            if close < 0:
                continue
            # A call whose argument is itself a parse call is a separate (nested) call.
            args = split_top(masked[open_at + 1:close])
            fn = cm.group(1)
            k = stmt_index(pos)
            if k is None:
                continue
            found.append(dict(fn=fn, pos=pos, end=close + 1, args=args, k=k))
        if not found:
            stats["no_text_module"] += 1
            continue
        # Parse calls nested in another's argument (printing a parsed module back) are no
        # module texts of the test.
        outer = [c for c in found if not any(o is not c and o["pos"] < c["pos"] < o["end"]
                                             for o in found)]
        entries = []
        for c in outer:
            fn, args, k = c["fn"], c["args"], c["k"]
            scope = scope_at(c["pos"])
            note = []
            replicas = parts = None
            try:
                if fn in helpers:
                    text, replicas, parts = expand_helper(helpers[fn], args, ctx, scope)
                    note.append("built by %s" % fn)
                    parse_fn = "ParseAndReturnUnverifiedModule"
                else:
                    if fn == "ParseAndReturnVerifiedModule" and kind == "parser" and len(args) == 3:
                        args = args[1:]  # xla::ParseAndReturnVerifiedModule(name, text, config)
                    if args and "GetParam" in args[0]:
                        continue  # a parameterized body: its modules are the table's
                    if args and re.search(r"(?:->|\.)\s*ToString\s*\(", args[0]):
                        stats["reparsed"] += 1  # a module XLA printed, parsed again
                        continue
                    text = ctx.eval(args[0], scope) if args and args[0] else None
                    parse_fn = fn
                    if text is None:
                        raise Unknown("no argument")
            except Unknown as why:
                stats["runtime_built"].append("%s (%s)" % (tname, why))
                continue
            # Config and parser options passed along.
            nondefault_config = []
            for extra in args[1:]:
                e = norm(extra)
                if not e or e in ("{}", "HloModuleConfig()"):
                    continue
                if re.fullmatch(r"\d+", e):   # test base: (text, replica_count, num_partitions)
                    if replicas is None:
                        replicas = int(e)
                    else:
                        parts = int(e)
                    continue
                if "HloParserOptions" in e or e == "options":
                    note.append("parser options: " + e[:80])
                    if "max_recursion_depth" in e or e == "options":
                        nondefault_config.append("parser options")
                    continue
                if re.fullmatch(r"\w+", e):
                    for var, key, val in config_sets:
                        if var != e:
                            continue
                        if key == "replica_count" and re.fullmatch(r"\d+", val):
                            replicas = int(val)
                        elif key == "num_partitions" and re.fullmatch(r"\d+", val):
                            parts = int(val)
                        elif key in ("use_spmd_partitioning", "content_aware_computation_sorting"):
                            pass
                        else:
                            nondefault_config.append("config.set_%s" % key)
                    continue
                nondefault_config.append(e[:60])
            text, added = set_header(text, replicas, parts)
            if added:
                note.append("header: " + ", ".join(added) + " (the test's config)")
            if nondefault_config:
                note.append("non-default " + ", ".join(sorted(set(nondefault_config))))
            # What the test expects of the parse.
            stmt_text = stmts[k][2]
            call_text = masked[c["pos"]:c["end"]]
            local_stmt = stmt_text.replace(call_text, " __CALL__ ", 1)
            verdict, sub, evidence, module_var = None, None, None, None
            am = re.search(r"\b(?:TF_)?ASSERT_OK_AND_ASSIGN\s*\(\s*(.*?)\s*,\s*__CALL__\s*\)",
                           norm(local_stmt), re.S)
            if am:
                verdict, evidence = "ok", "ASSERT_OK_AND_ASSIGN"
                mv = re.search(r"(\w+)\s*$", am.group(1))
                module_var = mv.group(1) if mv else None
            else:
                v, s, weak = assertion(local_stmt, r"__CALL__", ctx, scope)
                if v and not weak:
                    verdict, sub, evidence = v, s, norm(stmt_text)[:120]
                else:
                    a = find_assignment(local_stmt)
                    if a and a[1].lstrip().startswith("__CALL__"):
                        var = a[0]
                        rebind = re.compile(r"(?:^|[;{}\s])%s\s*=(?!=)" % re.escape(var))
                        first_k = k + 1
                        # the statement binding var counts too when it holds the assertion
                        verdict, sub, evidence = judge(
                            stmts, first_k, r"\b%s\b" % re.escape(var), ctx, scope_at,
                            lambda text: bool(rebind.search(text)))
                        if verdict == "ok" and not re.search(r"\.\s*status\s*\(", a[1]):
                            module_var = var
            if verdict == "conflict" or verdict is None:
                expect, verifier = "unknown", None
                why = ("the test's assertions disagree: " + (evidence or "")) if verdict else \
                    "no assertion on the parse result"
                entries.append(dict(text=text, parse_fn=parse_fn, expect=expect, verifier=None,
                                    expect_error=None, evidence=why, note=note, line=c["pos"]))
                continue
            verifier = None
            if parse_fn == "ParseAndReturnVerifiedModule":
                verifier = V_PARSER if kind == "parser" else (
                    V_DEFAULT if t["fixture"] in DEFAULT_FIXTURES else "fixture " + t["fixture"])
            if verdict == "fail":
                expect = "reject" if parse_fn == "ParseAndReturnVerifiedModule" else "reject-parse"
                if nondefault_config:
                    expect = "unknown"
                    evidence = "rejection under a non-default config or parser options"
                entries.append(dict(text=text, parse_fn=parse_fn, expect=expect, verifier=verifier,
                                    expect_error=sub, evidence=evidence, note=note, line=c["pos"]))
                continue
            expect = "accept" if parse_fn == "ParseAndReturnVerifiedModule" else "accept-parse"
            verify_note = None
            if module_var and kind == "verifier":
                # The first verifier run on this module, before any change to it in C++.
                run_rx = re.compile(r"\.\s*Run\s*\(\s*%s\s*\.\s*get\s*\(\s*\)\s*\)"
                                    % re.escape(module_var))
                mutated = None
                for j in range(k + 1, len(stmts)):
                    text_j = stmts[j][2]
                    if re.search(r"\b(?:TF_)?ASSERT_OK_AND_ASSIGN\s*\(\s*[^,]*\b%s\s*," %
                                 re.escape(module_var), text_j):
                        break  # the name is bound to another module
                    rm = run_rx.search(text_j)
                    if not rm:
                        if MUTATION.search(text_j) or \
                                re.search(r"^\s*\*|(?:->|\.)\s*\w+\s*\(\s*\)\s*=[^=]", text_j):
                            mutated = mutated or norm(text_j)[:70]
                        continue
                    v0 = expr_before(text_j, rm.start())
                    label = verifier_label(kind, t["fixture"], text_j[v0:rm.start()])
                    if mutated:
                        verify_note = "changed in C++ before verifying: %s" % mutated
                        break
                    vlocal = text_j[:v0] + " __RUN__ " + text_j[rm.end():]
                    v, vsub, weak = assertion(vlocal, r"__RUN__", ctx, scope_at(stmts[j][0]))
                    ev = norm(text_j)
                    if not v or weak:
                        v, vsub, ev = None, None, None
                        asg = find_assignment(vlocal)
                        dm = re.search(r"\b(\w+)\s*\(\s*__RUN__[^;]*\.\s*message\s*\(", vlocal)
                        var = asg[0] if asg and "__RUN__" in asg[1] else dm.group(1) if dm else None
                        if var:
                            rebind = re.compile(r"(?:^|[;{}\s])%s\s*=(?!=)" % re.escape(var))
                            v, vsub, ev = judge(stmts, j + 1, r"\b%s\b" % re.escape(var), ctx,
                                                scope_at, lambda text: bool(rebind.search(text)))
                    if v == "ok":
                        if expect == "accept-parse":
                            expect, verifier = "accept", label
                        evidence = (ev or "")[:120]
                    elif v == "fail":
                        if expect == "accept-parse":
                            expect, verifier, sub = "reject-verify", label, vsub
                            evidence = (ev or "")[:120]
                        elif label != verifier:
                            verify_note = "%s rejects it afterwards" % label
                        else:
                            expect = "unknown"
                            evidence = "parsed and verified, then the same verifier must fail"
                    else:
                        verify_note = "the verifier's result is not asserted" + (
                            " (%s)" % ev[:60] if v == "conflict" and ev else "")
                    break
            if verify_note:
                note.append(verify_note)
            entries.append(dict(text=text, parse_fn=parse_fn, expect=expect, verifier=verifier,
                                expect_error=sub, evidence=evidence, note=note, line=c["pos"]))
        for n_e, e in enumerate(entries):
            name = tname if len(entries) == 1 else "%s#%d" % (tname, n_e + 1)
            modules.append(dict(name=name, test=tname, fixture=t["fixture"], file=kind,
                                line=line_of(masked, e["line"]), hlo=e["text"],
                                form=module_form(e["text"]), parse_call=e["parse_fn"],
                                expect=e["expect"], verifier=e["verifier"],
                                expect_error=e["expect_error"], evidence=e["evidence"],
                                note="; ".join(e["note"])))
    return modules, stats


# --------------------------------------------------------------------------------------------
# Running Weave
# --------------------------------------------------------------------------------------------

RUNNING = set()
RUNNING_LOCK = threading.Lock()
STOPPING = False


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all():
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


def clip(text, width=MESSAGE_WIDTH):
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[:width - 3] + "..."


def weave_message(stderr, stdout, paths):
    """Weave's first message line, without the file-name prefix."""
    lines = [l.strip() for l in (stderr + "\n" + stdout).splitlines() if l.strip()]
    if not lines:
        return ""
    line = lines[0]
    for p in paths:
        for q in (p, os.path.basename(p)):
            if line.startswith(q + ":"):
                line = line[len(q) + 1:].lstrip()
    return re.sub(r"^(?:weave(?: \w+)?:\s*)", "", line)


def run_weave(args, argv, cwd, timeout, paths):
    """One weave process: dict(rc, timed_out, crash (reason or None), message, seconds)."""
    if STOPPING:
        raise KeyboardInterrupt
    t0 = time.monotonic()
    proc = subprocess.Popen([args.weave] + argv, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=limit_child(int(args.mem_gib * 2**30)))
    with RUNNING_LOCK:
        RUNNING.add(proc)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        out, err = proc.communicate()
    finally:
        with RUNNING_LOCK:
            RUNNING.discard(proc)
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")
    rc = proc.returncode
    crash = None
    if not timed_out:
        if rc < 0:
            try:
                crash = "killed by " + signal.Signals(-rc).name
            except ValueError:
                crash = "killed by signal %d" % -rc
            if re.search(r"bad_alloc|out of memory|allocation failed", err, re.I):
                crash += " (out of memory under the %g GiB cap)" % args.mem_gib
        elif rc not in DOCUMENTED_EXITS:
            crash = "exit code %d (not documented)" % rc
        else:
            sm = SANITIZER.search(err)
            if sm:
                crash = "sanitizer / abort text: " + clip(err[sm.start():].splitlines()[0], 100)
    msg = weave_message(err, out if rc != 0 else "", paths)
    if crash:
        detail = next((l for l in err.splitlines() if SANITIZER.search(l)), "")
        msg = clip(crash + (": " + detail.strip() if detail and detail.strip() not in crash else ""),
                   300)
    shown = " ".join(os.path.basename(a) if a.startswith(cwd) else a for a in argv)
    return dict(rc=rc, timed_out=timed_out, crash=crash, message=msg, command="weave " + shown,
                seconds=round(time.monotonic() - t0, 3))


def snapshot_weave(path, scratch):
    """A private copy of the binary, so that a rebuild during the run does not change it."""
    dst = os.path.join(scratch, ".weave-bin")
    shutil.copy2(path, dst)
    os.chmod(dst, 0o755)
    return dst


def run_one(m, args, scratch):
    d = os.path.join(scratch, safe_name(m["name"]))
    os.makedirs(d, exist_ok=True)
    inp = os.path.join(d, "input.hlo")
    p1 = os.path.join(d, "print1.hlo")
    p2 = os.path.join(d, "print2.hlo")
    with open(inp, "w") as f:
        f.write(m["hlo"])
    paths = [inp, p1, p2]
    steps = {}
    steps["parse"] = run_weave(args, ["opt", inp, "-o", p1], d, args.timeout, paths)
    steps["verify"] = run_weave(args, ["verify", inp], d, args.timeout, paths)
    parsed = steps["parse"]["rc"] == 0 and not steps["parse"]["timed_out"]
    verified = steps["verify"]["rc"] == 0 and not steps["verify"]["timed_out"]
    stable = None
    if parsed:
        steps["print"] = run_weave(args, ["opt", p1, "-o", p2], d, args.timeout, paths)
        if steps["print"]["rc"] == 0:
            with open(p1) as f1, open(p2) as f2:
                a, b = f1.read(), f2.read()
            stable = a == b
            if not stable:
                al, bl = a.splitlines(), b.splitlines()
                k = next((i for i in range(min(len(al), len(bl))) if al[i] != bl[i]),
                         min(len(al), len(bl)))
                steps["print"]["message"] = "second print differs from the first at line %d" % (k + 1)
        else:
            stable = False
            if not steps["print"]["crash"]:
                steps["print"]["message"] = "the print does not parse back: " + \
                    steps["print"]["message"]
        if verified and stable:
            steps["reverify"] = run_weave(args, ["verify", p1], d, args.timeout, paths)
            if steps["reverify"]["rc"] != 0 and not steps["reverify"]["crash"]:
                stable = False
                steps["reverify"]["message"] = "the print does not verify: " + \
                    steps["reverify"]["message"]
    if verified:
        steps["run"] = run_weave(args, ["run", inp, "--max-memory-gib", "2"], d,
                                 args.run_timeout, paths)
    return steps, parsed, verified, stable


def classify(m, steps, parsed, verified, stable):
    """(class, message, crash commands)."""
    crashes = ["`%s`: %s" % (s["command"], s["message"]) for s in steps.values() if s["crash"]]
    if crashes:
        return "crash", "; ".join(crashes)
    for k in ("parse", "verify", "print", "reverify"):
        if k in steps and steps[k]["timed_out"]:
            return "timeout", "%s: no result within the time limit" % k
    exp = m["expect"]
    parse_msg = steps["parse"]["message"]
    verify_msg = steps["verify"]["message"]
    if steps.get("reverify", {}).get("rc"):
        unstable_msg = steps["reverify"]["message"]
    else:
        unstable_msg = steps.get("print", {}).get("message")
    if exp == "unknown":
        if not parsed:
            return "unknown-expectation", "weave parse error: " + parse_msg
        if not verified:
            return "unknown-expectation", "weave verify error: " + verify_msg
        return "unknown-expectation", "weave accepts"
    if exp.startswith("accept"):
        if not parsed:
            return "accept-parse-error", parse_msg
        if exp == "accept" and not verified:
            return "accept-verify-error", verify_msg
        if not stable:
            return "accept-unstable-print", unstable_msg or "print not stable"
        if not verified:
            return "accept-ok", "parses and prints stably; weave verify rejects it (XLA's test " \
                "only parses it): " + verify_msg
        return "accept-ok", ""
    if not parsed:
        return "reject-ok", "parse: " + parse_msg
    if not verified:
        return "reject-ok", "verify: " + verify_msg
    return "reject-missed", "weave parses and verifies it"


# --------------------------------------------------------------------------------------------
# Causes of the misses
# --------------------------------------------------------------------------------------------

# Causes of a miss on a module XLA accepts: (regex on Weave's message or the test's name, cause);
# first match wins; \1 is replaced by the regex's first group.
ACCEPT_CAUSES = [
    (r"unknown opcode 'b'", "buffer shape b(...) read as an opcode"),
    (r"unknown opcode '([\w\-]+)'", "opcode \\1 not supported"),
    (r"unknown computation '", "inline computation to_apply={...}"),
    (r"expected a computation name, found ':'", "`HloModule name:` header (trailing colon)"),
    (r"nested operand .* needs a shape", "nested instruction as an operand, without its shape"),
    (r"no result shape .* for (\w[\w\-]*)", "result shape left out (\\1 not inferred)"),
    (r"CustomCallWithLiteral", "custom-call literal= attribute"),
    (r"invalid integer value '-\d+' for u", "negative literal of an unsigned type"),
    (r"is get-tuple-element, not async-start", "async chain through a while loop (loop-crossing async)"),
    (r"async-update: expects 1 operand, got", "async-update binding more operands"),
    (r"async-(?:update|done): result shape .* does not match", "async-update / async-done binding outputs"),
    (r"collective-permute(?:-start)?: expects 1 operand \(or 4", "combined collective-permute (several operands)"),
    (r"source_target_pairs: source \d+ appears more than once",
     "in-place collective-permute repeating a source over slices"),
    (r"different shapes|is f\d+\[\]; the bounds|not f\d+\[\]|expected f\d+", "mixed precision"),
]

# Causes of a rejection Weave misses: (regex on the test's name and expected message, cause).
REJECT_CAUSES = [
    (r"Constant\w*(Overflow|Underflow)|out of range for literal|NanPayload", "constant out of range / NaN payload"),
    (r"LiteralDimensions", "literal dimensions"),
    (r"Aliasing|BufferDonor", "input_output_alias / buffer_donor syntax"),
    (r"DynamicReshape", "dynamic-reshape checks"),
    (r"CustomCall\w*(Constraints|Version)", "custom-call api_version / operand layout constraints"),
    (r"ShapeMismatchInOperand", "declared operand shape vs the operand"),
    (r"unexpected attribute", "attribute the opcode does not take"),
    (r"DimLevelType|PhysicalShape", "sparse layout syntax"),
    (r"WithSyntaxSugarWrongOp|WrongComputation|WrongDefaultThread", "async wrapped op / computation / thread"),
    (r"Accuracy", "result_accuracy attribute"),
    (r"SendStart|RecvStart", "send-start / recv-start are no XLA opcodes"),
    (r"DebugLogMode", "debug_log_mode value"),
    (r"NoOperands|NonTupleShape", "operand count / shape of an opcode"),
    (r"Composite", "composite call attributes"),
    (r"Thread", "execution thread names"),
    (r"AliasConfig", "async aliasing config"),
    (r"(CopyStart|CopyDone|AllReduceStart|AllReduceDone|AllGatherStart|CollectivePermuteStart|"
     r"CollectivePermuteDone)\w*(Multiple|No|Without|Wrong|Unexpected)", "start / done pairing and shapes"),
    (r"Async", "async start / update / done checks"),
    (r"ComparisonType", "comparison type vs element type"),
    (r"SelectTuple", "select on tuples"),
    (r"Fusion", "fusion parameters vs operands"),
    (r"AllToAll|RaggedAllToAll", "all-to-all / ragged-all-to-all operands"),
    (r"ReplicaGroup|OOR|GlobalDeviceIds", "replica groups / source-target ids"),
    (r"Sharding", "sharding checks"),
    (r"Unbounded", "unbounded dynamic shapes"),
    (r"OriginalValue", "original_value"),
    (r"SameChannel", "host-transfer send/recv on one channel"),
    (r"GetRngSeed", "get-rng-seed"),
    (r"Scatter", "scatter dimension numbers"),
    (r"AllReduceVerifier", "mixed constrained / unconstrained all-reduce"),
]


def derive_cause(r):
    cls = r["class"]
    msg = r.get("message") or ""
    if cls == "reject-missed":
        key = r["test"] + " " + (r.get("expect_error") or "")
        for rx, cause in REJECT_CAUSES:
            if re.search(rx, key):
                return "XLA rejects, Weave accepts: " + cause
        return "XLA rejects, Weave accepts: other"
    if r.get("form") == "single-instruction":
        return "single instruction, not a module"
    if r.get("form") in ("no-header", "empty"):
        return "computations without an HloModule line"
    for rx, cause in ACCEPT_CAUSES:
        m = re.search(rx, msg) or re.search(rx, r["test"])
        if m:
            return m.expand(cause) if "\\1" in cause else cause
    if cls == "accept-unstable-print":
        return "print not stable: " + re.sub(r"\d+", "N", msg)[:60]
    short = re.sub(r"^\d+:\d+:\s*", "", msg)
    short = re.sub(r"instruction '[^']*' in computation '[^']*':\s*", "", short)
    short = re.sub(r"'[^']*'", "'_'", short)
    short = re.sub(r"\b\d+\b", "N", short)
    return ("parser: " if cls == "accept-parse-error" else "verifier: ") + clip(short, 70)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def md(text):
    return (text or "").replace("|", "\\|").replace("\n", " ")


def in_measure(r):
    """'accept' / 'reject' / None: whether the row counts in issue 50's measures (XLA's parser,
    the parser test's verifier or the default verifier decides)."""
    exp = r["expect"]
    if exp == "unknown" or "non-default" in (r.get("note") or ""):
        return None
    if exp.startswith("accept"):
        if exp == "accept-parse" or r["verifier"] in (V_PARSER, V_DEFAULT):
            return "accept"
        return None
    if exp == "reject-parse":
        return "reject"
    if r["verifier"] in (V_PARSER, V_DEFAULT):
        return "reject"
    return None


def expectation_cell(r):
    exp = r["expect"]
    if exp == "unknown":
        return "unknown"
    v = r.get("verifier")
    if exp == "accept-parse":
        s = "accept (parse only)"
    elif exp == "accept":
        s = "accept (verifier: %s)" % v
    elif exp == "reject-parse":
        s = "reject (parser)"
    elif exp == "reject":
        s = "reject (parser or verifier: %s)" % v
    else:
        s = "reject (verifier: %s)" % v
    if r.get("expect_error"):
        s += ': "%s"' % clip(r["expect_error"], 70)
    return s


def write_summary(results, sources, stats, fh, elapsed, args):
    def count(rows):
        c = {k: 0 for k in CLASSES}
        for r in rows:
            c[r["class"]] += 1
        return c
    by_file = {k: [r for r in results if r["file"] == k] for k in ("parser", "verifier")}
    fh.write("# Weave on the modules of XLA's parser and verifier tests (issue 50)\n\n")
    for kind, src in sources.items():
        st = stats[kind]
        fh.write("- `%s`: %d tests%s; %d modules.\n" % (
            src, st["tests"],
            (", %d table entries" % st["table_entries"]) if st["table_entries"] else "",
            len(by_file[kind])))
    fh.write("\nGenerated by `python3 tests/xla/parser_verifier.py%s -j %d --timeout %g%s` in %.0f s "
             "with weave %s. Per module (limits %g s, run %g s, %g GiB address space each):\n\n"
             "```\nweave opt input.hlo -o print1.hlo       # parse + print (no passes)\n"
             "weave verify input.hlo\n"
             "weave opt print1.hlo -o print2.hlo      # print1 == print2 required\n"
             "weave verify print1.hlo                 # where the input verifies\n"
             "weave run input.hlo --max-memory-gib 2  # where the input verifies; crashes only\n```\n\n"
             % (" --xla-repo " + args.xla_repo if args.xla_repo else "".join(" --xla-file " + f for f in args.xla_file),
                args.jobs, args.timeout, (" --filter '%s'" % args.filter) if args.filter else "",
                elapsed, args.weave_desc, args.timeout, args.run_timeout, args.mem_gib))

    # Totals per class and file.
    cp, cv, ct = count(by_file["parser"]), count(by_file["verifier"]), count(results)
    fh.write("## Totals\n\n| class | hlo_parser_test | hlo_verifier_test | total |\n|---|---:|---:|---:|\n")
    for c in CLASSES:
        fh.write("| %s | %d | %d | %d |\n" % (c, cp[c], cv[c], ct[c]))
    fh.write("| total | %d | %d | %d |\n\n" % (len(by_file["parser"]), len(by_file["verifier"]),
                                               len(results)))

    # Expectations.
    groups = {}
    for r in results:
        key = (r["file"], expectation_cell(dict(r, expect_error=None)))
        groups[key] = groups.get(key, 0) + 1
    fh.write("What XLA's tests expect, and which verifier decides (`parser-test`: the parser "
             "test's `ParseAndReturnVerifiedModule`, XLA's default verifier with mixed precision "
             "allowed; `default`: the verifier test's `HloVerifierTest` fixture, XLA's default "
             "verifier; `parse only`: the test parses the module and never verifies it):\n\n"
             "| file | expectation | modules |\n|---|---|---:|\n")
    for (f, e), n in sorted(groups.items()):
        fh.write("| %s | %s | %d |\n" % (f, md(e), n))
    fh.write("\n")

    # Measures.
    acc = [r for r in results if in_measure(r) == "accept"]
    rej = [r for r in results if in_measure(r) == "reject"]
    acc_ok = [r for r in acc if r["class"] == "accept-ok"]
    acc_ver = [r for r in acc if r["expect"] == "accept"]
    acc_ver_ok = [r for r in acc_ver if r["class"] == "accept-ok"]
    acc_parse = [r for r in acc if r["expect"] == "accept-parse"]
    acc_parse_ok = [r for r in acc_parse if r["class"] == "accept-ok"]
    acc_parse_vfail = [r for r in acc_parse_ok if r["message"]]
    rej_ok = [r for r in rej if r["class"] == "reject-ok"]
    rej_p = [r for r in rej if r["file"] == "parser"]
    rej_v = [r for r in rej if r["file"] == "verifier"]
    crashes = [r for r in results if r["class"] == "crash"]
    def pct(a, b):
        return 100.0 * a / b if b else 0.0
    fh.write("## Issue 50's measures\n\n")
    fh.write("| measure | result | bar |\n|---|---|---|\n")
    fh.write("| (1) of the modules XLA accepts: parse, verify and print back stably | %d of %d = **%.1f%%** | 97%% |\n"
             % (len(acc_ok), len(acc), pct(len(acc_ok), len(acc))))
    fh.write("| (1a) of those XLA parses and verifies | %d of %d = %.1f%% | |\n"
             % (len(acc_ver_ok), len(acc_ver), pct(len(acc_ver_ok), len(acc_ver))))
    fh.write("| (1b) of those XLA's test only parses (Weave: parse and print; verify not required) | %d of %d = %.1f%% | |\n"
             % (len(acc_parse_ok), len(acc_parse), pct(len(acc_parse_ok), len(acc_parse))))
    fh.write("| (2) of the modules XLA's parser or default verifier rejects: Weave rejects | %d of %d = **%.1f%%** | 90%% |\n"
             % (len(rej_ok), len(rej), pct(len(rej_ok), len(rej))))
    fh.write("| (2a) parser rejections (hlo_parser_test) | %d of %d = %.1f%% | |\n"
             % (sum(r["class"] == "reject-ok" for r in rej_p), len(rej_p),
                pct(sum(r["class"] == "reject-ok" for r in rej_p), len(rej_p))))
    fh.write("| (2b) default-verifier rejections (hlo_verifier_test) | %d of %d = %.1f%% | |\n"
             % (sum(r["class"] == "reject-ok" for r in rej_v), len(rej_v),
                pct(sum(r["class"] == "reject-ok" for r in rej_v), len(rej_v))))
    fh.write("| (3) crashes of verify / print / run | **%d** | 0 |\n\n" % len(crashes))
    fh.write("Counted in (1): XLA's parse succeeds and, where the test verifies, the parser "
             "test's or the default verifier accepts. A module counted in (1) and in a crash "
             "counts as a miss. %d modules of (1b) parse and print stably but fail `weave verify` "
             "(XLA's test never verifies them; their rows say so). Modules under a non-default "
             "verifier, config or parser options, and `unknown-expectation` ones, are outside "
             "(1) and (2); they are listed below.\n\n" % len(acc_parse_vfail))

    named = [r for r in results if r["class"] == "reject-ok" and r.get("expect_error")]
    same = [r for r in named if r.get("same_message")]
    if named:
        fh.write("Of the %d `reject-ok` modules whose test names the text XLA's error must hold, "
                 "Weave's message holds the same text in %d (Weave words its own messages; "
                 "the rows give them).\n\n"
                 % (len(named), len(same)))

    # Extraction notes.
    fh.write("## Extraction\n\n")
    for kind in ("parser", "verifier"):
        st = stats[kind]
        sub = ", ".join("%s %d" % (k, v) for k, v in sorted(st["sub_parser"].items()))
        fh.write("- %s: %d modules (%d from the tables); %d tests have no module text (built "
                 "with C++ builders or sub-parsers only); %d DISABLED_ tests left out; %d parses "
                 "of a module XLA printed left out; %d module texts built at run time left "
                 "out%s; sub-parser strings skipped (not modules): %s.\n"
                 % (sources[kind], len(by_file[kind]), st["table_entries"], st["no_text_module"],
                    st["disabled"], st["reparsed"], len(st["runtime_built"]),
                    (" (" + "; ".join(st["runtime_built"]) + ")") if st["runtime_built"] else "",
                    sub or "none"))
    forms = {}
    for r in results:
        forms[r["form"]] = forms.get(r["form"], 0) + 1
    fh.write("- Forms: %s (a single instruction, or computations without the `HloModule` line, "
             "are modules to XLA's `ParseAndReturnUnverifiedModule`, which wraps them).\n\n"
             % ", ".join("%s %d" % kv for kv in sorted(forms.items())))

    # Causes.
    misses = [r for r in results if r["class"] in MISSES and in_measure(r)]
    causes = {}
    for r in misses:
        causes.setdefault(r["cause"], []).append(r)
    fh.write("## Misses by cause\n\nThe misses counted in (1) and (2), by a short cause taken from "
             "Weave's message (or, for a rejection Weave misses, from the test's name and expected "
             "message).\n\n| cause | modules | examples |\n|---|---:|---|\n")
    for cause, rows in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        fh.write("| %s | %d | %s |\n" % (md(cause), len(rows),
                                         md(", ".join(r["name"] for r in rows[:3]))))
    fh.write("\n")

    if crashes:
        fh.write("## Crashes\n\nTo reproduce: run this script with `--filter '^NAME$' --keep DIR`, "
                 "then, in `DIR/NAME/`, the command shown (`build/weave` for `weave`).\n\n"
                 "| module | command: what happened |\n|---|---|\n")
        for r in crashes:
            fh.write("| %s | %s |\n" % (md(r["name"]), md(clip(r["message"], 300))))
        fh.write("\n")

    others = [r for r in results if in_measure(r) is None]
    if others:
        fh.write("## Outside the measures\n\nNon-default verifiers (another fixture, an "
                 "`HloVerifier{opts}` of the test), non-default configs or parser options, and "
                 "`unknown-expectation`:\n\n| module | expectation | class | note | Weave |\n"
                 "|---|---|---|---|---|\n")
        for r in others:
            fh.write("| %s | %s | %s | %s | %s |\n" % (
                md(r["name"]), md(expectation_cell(r)), r["class"],
                md(clip(r.get("note") or (r.get("evidence") if r["expect"] == "unknown" else ""), 100)),
                md(clip(r["message"]))))
        fh.write("\n")

    fh.write("## Modules\n\n| module | file | line | form | expectation | class | Weave's message |\n"
             "|---|---|---:|---|---|---|---|\n")
    for r in results:
        fh.write("| %s | %s | %d | %s | %s | %s | %s |\n" % (
            md(r["name"]), r["file"], r["line"], r["form"], md(expectation_cell(r)),
            r["class"], md(clip(r["message"]))))


def read_sources(args):
    """[(kind, text, label)] of the two test files."""
    out = []
    if args.xla_repo:
        commit = subprocess.run(["git", "--git-dir", args.xla_repo, "rev-parse", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        if not commit:
            commit = subprocess.run(["git", "-C", args.xla_repo, "rev-parse", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()
        for kind, path in (("parser", args.parser_path), ("verifier", args.verifier_path)):
            res = subprocess.run(["git", "--git-dir", args.xla_repo, "show", "HEAD:" + path],
                                 capture_output=True)
            if res.returncode != 0:
                res = subprocess.run(["git", "-C", args.xla_repo, "show", "HEAD:" + path],
                                     capture_output=True)
            if res.returncode != 0:
                sys.exit("git show HEAD:%s in %s failed: %s" %
                         (path, args.xla_repo, res.stderr.decode(errors="replace").strip()))
            out.append((kind, res.stdout.decode("utf-8", "replace"),
                        "%s @ %s" % (path, commit[:12] or "HEAD")))
        return out
    for path in args.xla_file:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        base = os.path.basename(path)
        kind = "parser" if "parser" in base else "verifier" if "verifier" in base else (
            "verifier" if "HloVerifierTest" in text else "parser")
        out.append((kind, text, path))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--xla-repo", help="an XLA git repository (bare is fine): reads HEAD:PATH")
    src.add_argument("--xla-file", action="append",
                     help="hlo_parser_test.cc or hlo_verifier_test.cc (repeat for both)")
    ap.add_argument("--parser-path", default=PARSER_PATH, help="with --xla-repo (%(default)s)")
    ap.add_argument("--verifier-path", default=VERIFIER_PATH, help="with --xla-repo (%(default)s)")
    ap.add_argument("--weave", default=DEFAULT_WEAVE, help="the weave binary (default build/weave)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="modules run at once (2)")
    ap.add_argument("--timeout", type=float, default=20.0,
                    help="seconds per weave process (parse, verify, print) (20)")
    ap.add_argument("--run-timeout", type=float, default=10.0,
                    help="seconds for `weave run` (10); running out is no crash")
    ap.add_argument("--mem-gib", type=float, default=4.0,
                    help="address-space cap of each weave process, GiB (4; 0 = none)")
    ap.add_argument("--filter", default=None, help="only modules whose name matches this regex")
    ap.add_argument("--keep", default=None, help="keep each module's files under DIR/NAME/")
    ap.add_argument("--summary", default="-", help="Markdown summary to FILE (default stdout)")
    ap.add_argument("--json", default=None, help="the same data as JSON to FILE")
    ap.add_argument("--list", action="store_true", help="only list the extracted modules")
    args = ap.parse_args()

    sources, stats, modules = {}, {}, []
    for kind, text, label in read_sources(args):
        mods, st = extract(text, kind)
        sources[kind], stats[kind] = label, st
        modules.extend(mods)
    # Unique names.
    seen = {}
    for m in modules:
        k = seen.get(m["name"], 0)
        seen[m["name"]] = k + 1
        if k:
            m["name"] = "%s~%d" % (m["name"], k + 1)
    if args.filter:
        rx = re.compile(args.filter)
        modules = [m for m in modules if rx.search(m["name"])]
    if args.list:
        for m in modules:
            print("%-8s %-70s %-5d %-18s %-14s %-28s %s | %s | %s" % (
                m["file"], m["name"], m["line"], m["form"], m["expect"], m["verifier"] or "-",
                m["expect_error"] or "", m["evidence"] or "", m["note"]))
        for kind in stats:
            st = stats[kind]
            print("%s: tests %d, no text module %d, disabled %d, runtime-built %d %s, sub-parsers %s"
                  % (kind, st["tests"], st["no_text_module"], st["disabled"],
                     len(st["runtime_built"]), st["runtime_built"], st["sub_parser"]),
                  file=sys.stderr)
        return 0
    if not os.access(args.weave, os.X_OK):
        sys.exit("weave binary not found or not executable: %s" % args.weave)

    if args.keep:
        scratch = os.path.abspath(args.keep)
        os.makedirs(scratch, exist_ok=True)
    else:
        scratch = tempfile.mkdtemp(prefix="weave-xla-pv-")
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
                steps, parsed, verified, stable = fut.result()
                cls, message = classify(m, steps, parsed, verified, stable)
                r = {k: v for k, v in m.items() if k != "hlo"}
                r.update({"class": cls, "message": message, "parsed": parsed,
                          "verified": verified, "stable": stable,
                          "steps": {k: dict(command=s["command"], rc=s["rc"], timed_out=s["timed_out"],
                                            crash=s["crash"], seconds=s["seconds"],
                                            message=clip(s["message"], 300))
                                    for k, s in steps.items()}})
                if r["expect"] != "unknown" and r["expect"].startswith("reject") and \
                        r["expect_error"] is not None:
                    r["same_message"] = r["expect_error"].lower() in message.lower()
                r["cause"] = derive_cause(r) if cls in MISSES else ""
                results[i] = r
                done += 1
                sys.stderr.write("[%d/%d] %-70s %s\n" % (done, len(modules), m["name"], cls))
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
        write_summary(results, sources, stats, sys.stdout, elapsed, args)
    else:
        with open(args.summary, "w") as fh:
            write_summary(results, sources, stats, fh, elapsed, args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(sources=sources, stats=stats,
                           totals={c: sum(1 for r in results if r["class"] == c) for c in CLASSES},
                           timeout_s=args.timeout, run_timeout_s=args.run_timeout,
                           mem_gib=args.mem_gib, filter=args.filter, results=results),
                      fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
