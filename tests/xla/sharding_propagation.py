#!/usr/bin/env python3
"""Conformance survey of Weave's sharding propagation on XLA's own propagation tests (issue 49).

Reads XLA's `xla/service/sharding_propagation_test.cc` (a file, or a git snapshot of XLA), pulls
out every test's HLO module, the flags its `ShardingPropagation(...)` call passes, and the
shardings its assertions expect of named instructions (`op::Sharding("...")`,
`op::NoSharding()`, `has_sharding()` false, `IsReplicated()` / `IsManual()`, `EXPECT_EQ` against
a `ParseSharding(...)`), runs

    weave opt --passes=sharding-import,spmd-prepare,sharding-propagation MODULE -o OUT

on each module (the propagate-to-output / propagate-to-parameters flags written into the module
header, where Weave reads them), and compares each asserted sharding with the one Weave's output
gives the instruction of that name, semantically (tile assignments expanded, metadata dropped).
Writes a Markdown summary and, on request, the same data as JSON.

Standard library only. See tests/xla/README.md.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spmd_partitioner as sp  # noqa: E402  (beside this script: the C++ scanner and runner)

DEFAULT_XLA_PATH = "xla/service/sharding_propagation_test.cc"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_WEAVE = os.path.join(REPO_ROOT, "build", "weave")
PASSES = "sharding-import,spmd-prepare,sharding-propagation"

# Per-assertion classes, in the order the summary lists them.
ASSERT_CLASSES = [
    "agree",      # the same sharding (semantically), or XLA: no sharding / Weave: replicated
    "differ",     # both have a sharding, and they differ
    "missing",    # XLA's test expects a sharding, Weave's output gives the instruction none
    "absent",     # no instruction of that name in Weave's output (renamed or removed)
    "not-run",    # the module did not run to the end (its class says why)
]
# Per-module classes.
MODULE_CLASSES = [
    "ok",               # exit 0: propagated, assertions compared
    "parse-error",      # exit 1 with a file:line:col message from Weave's parser
    "declined",         # exit 1 (or 2) from a pass, naming what it refuses
    "crash",            # a signal, an undocumented exit code, or an internal-invariant message
    "timeout",          # past the time limit
    "rejected-as-xla",  # declined, and XLA's own test expects its pass to fail too
    "accepted-xla-errs",  # XLA's test expects the pass to fail; Weave propagated
]
TEXT_WIDTH = 90

# --------------------------------------------------------------------------------------------
# Extraction from the C++ test file
# --------------------------------------------------------------------------------------------


def read_source(args):
    if args.xla_repo:
        path = args.xla_path or DEFAULT_XLA_PATH
        try:
            out = subprocess.run(["git", "--git-dir", args.xla_repo, "show", "HEAD:" + path],
                                 check=True, capture_output=True)
        except subprocess.CalledProcessError:
            try:
                out = subprocess.run(["git", "-C", args.xla_repo, "show", "HEAD:" + path],
                                     check=True, capture_output=True)
            except subprocess.CalledProcessError as e:
                sys.exit("git show HEAD:%s in %s failed: %s" %
                         (path, args.xla_repo, e.stderr.decode(errors="replace").strip()))
        return out.stdout.decode("utf-8", errors="replace"), "%s:%s" % (args.xla_repo, path)
    with open(args.xla_file, encoding="utf-8", errors="replace") as f:
        return f.read(), args.xla_file


def clean_code(src, b0, b1, raw_at, raw_text):
    """src[b0:b1] with comments blanked and each raw string replaced by a `__RAW<k>__` token
    (k indexes the returned list of their texts); ordinary string literals are kept."""
    out, raws = [], []
    i = b0
    while i < b1:
        if i in raw_at:
            out.append(" __RAW%d__ " % len(raws))
            raws.append(raw_text[i])
            i = raw_at[i]
            continue
        if src.startswith("//", i) or src.startswith("/*", i):
            i = sp.skip_literal(src, i, raw_at)
            out.append(" ")
            continue
        if src[i] in "\"'":
            j = sp.skip_literal(src, i, raw_at)
            if j is not None:
                out.append(src[i:j])
                i = j
                continue
        out.append(src[i])
        i += 1
    return "".join(out), raws


def skip_string(text, i):
    """text[i] is a quote: the index after the literal."""
    q = text[i]
    j = i + 1
    while j < len(text) and text[j] != q:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def match_in(text, i, open_ch, close_ch):
    """text[i] == open_ch: the index of its match (string literals skipped), or -1."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
            i = skip_string(text, i)
            continue
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def split_args(text):
    """A call's argument texts (the text between its parentheses), split at top-level commas;
    angle brackets are not counted (arguments are expressions)."""
    parts, depth, first, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = skip_string(text, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[first:i].strip())
            first = i + 1
        i += 1
    last = text[first:].strip()
    if parts or last:
        parts.append(last)
    return parts


def chain_parts(expr):
    """`a->f(x).g(y)[0]` -> ['a', 'f(x)', 'g(y)[0]']: split at the top-level `->` and `.`."""
    parts, depth, first, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c == '"':
            i = skip_string(expr, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and (expr.startswith("->", i) or
                             (c == "." and not expr[i + 1:i + 2].isdigit())):
            parts.append(expr[first:i])
            i += 2 if c == "-" else 1
            first = i
            continue
        i += 1
    parts.append(expr[first:])
    return parts


STRING_LIT = re.compile(r'"((?:[^"\\]|\\.)*)"')


def unescape(s):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def string_value(expr):
    """The value of one or more adjacent string literals (C++ concatenation), else None."""
    e = expr.strip()
    if not e.startswith('"'):
        return None
    pos, out = 0, []
    while pos < len(e):
        m = STRING_LIT.match(e, pos)
        if not m:
            return None
        out.append(unescape(m.group(1)))
        pos = m.end()
        while pos < len(e) and e[pos].isspace():
            pos += 1
    return "".join(out)


# --- HLO module text: instruction names, opcodes, operands, computations ---------------------

INSTR_START = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(?=\(|[\w\-]+\[|[\w\-]+\()")
COMP_START = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\b[^=]*\{\s*$")


def hlo_statements(text):
    """(computation, is_entry, is_root, name, statement text) for every instruction; a
    statement's continuation lines are joined to it."""
    comp, entry = None, False
    cur = None
    out = []
    for line in text.splitlines():
        code = re.sub(r"/\*.*?\*/", "", line)  # Weave prints /*index=5*/ in long lists
        code = code.split("//")[0] if "//" in code and '"' not in code else code
        m = INSTR_START.match(code)
        if m and comp is not None:
            if cur:
                out.append(cur)
            cur = [comp, entry, bool(m.group(1)), m.group(2), code[m.end():]]
            continue
        if re.match(r"^\s*\}", code) and (cur is None or balanced(cur[4])):
            if cur:
                out.append(cur)
                cur = None
            comp = None
            continue
        h = COMP_START.match(code)
        if h and (cur is None or balanced(cur[4])):
            if cur:
                out.append(cur)
                cur = None
            comp, entry = h.group(2), bool(h.group(1))
            continue
        if cur is not None:
            cur[4] += " " + code.strip()
    if cur:
        out.append(cur)
    return out


def balanced(text):
    depth = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = skip_string(text, i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        i += 1
    return depth <= 0


def top_level_attr(text, start, key):
    """The value text of `key=` at the top level of text[start:] (a brace group or a word)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = skip_string(text, i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0 and text.startswith(key + "=", i) and (i == 0 or text[i - 1] in ", "):
            j = i + len(key) + 1
            if j < len(text) and text[j] == "{":
                k = match_in(text, j, "{", "}")
                return text[j:k + 1] if k >= 0 else text[j:]
            m = re.match(r'%?[\w.\-]+', text[j:])
            return m.group(0).lstrip("%") if m else None
        i += 1
    return None


def parse_instruction(rest):
    """From the text after `name =`: (opcode, operand names, operand text, sharding text)."""
    i = 0
    rest = rest.strip()
    if rest.startswith("("):
        i = match_in(rest, 0, "(", ")") + 1
    else:
        m = re.match(r"[\w\-]+", rest)
        if m and rest[m.end():m.end() + 1] == "[":
            i = rest.find("]", m.end()) + 1
            if rest[i:i + 1] == "{":
                i = match_in(rest, i, "{", "}") + 1
    while i < len(rest) and rest[i].isspace():
        i += 1
    m = re.match(r"[\w\-]+", rest[i:])
    if not m:
        return None, [], "", None
    opcode = m.group(0)
    j = i + m.end()
    operands, operand_text, after = [], "", j
    if rest[j:j + 1] == "(":
        k = match_in(rest, j, "(", ")")
        operand_text = rest[j + 1:k] if k >= 0 else rest[j + 1:]
        after = k + 1 if k >= 0 else len(rest)
        for a in split_args(operand_text):
            n = re.findall(r"%?([\w.\-]+)\s*$", a)
            operands.append(n[0] if n else a)
    return opcode, operands, operand_text, rest[after:]


def parse_hlo(text):
    """dict(instrs={name: dict(opcode, operands, comp, param, attrs, sharding)},
    comps={name: dict(root, params, entry)}, entry=NAME)."""
    instrs, comps, entry = {}, {}, None
    for comp, is_entry, is_root, name, rest in hlo_statements(text):
        opcode, operands, operand_text, attrs = parse_instruction(rest)
        c = comps.setdefault(comp, dict(root=None, params={}, entry=is_entry))
        if is_entry:
            entry = comp
        if is_root:
            c["root"] = name
        param = None
        if opcode == "parameter" and re.match(r"^\s*\d+\s*$", operand_text):
            param = int(operand_text)
            c["params"][param] = name
        if name not in instrs:  # names are module-unique in XLA; the first wins otherwise
            instrs[name] = dict(opcode=opcode, operands=operands, comp=comp, param=param,
                                attrs=attrs or "",
                                sharding=top_level_attr(attrs or "", 0, "sharding"))
    return dict(instrs=instrs, comps=comps, entry=entry)


# --- The body of a test: bindings, loops and assertions ---------------------------------------

class Walker:
    """Walks a test body statement by statement, with the variables bound so far (instructions
    by name, strings, sharding texts, lists), expanding range-for loops over initializer lists
    and lists bound earlier, and records the sharding assertions it meets."""

    def __init__(self, module, variant_true):
        self.mod = module           # parse_hlo of the test's module (None: none)
        self.variant_true = variant_true  # GetParam().allow_root_sharding_propagation taken true
        self.asserts = []           # dict(instr, leaf, expected (None = no sharding), how)
        self.unbound = []           # the statement texts of sharding assertions not bound
        self.metadata_only = 0

    # -- expressions ---------------------------------------------------------------------------

    def root_of(self, comp):
        c = (self.mod or {}).get("comps", {}).get(comp) if comp else None
        return c["root"] if c else None

    def param_of(self, comp, n):
        c = (self.mod or {}).get("comps", {}).get(comp) if comp else None
        return c["params"].get(n) if c else None

    def instr_attr(self, name, key):
        ins = (self.mod or {}).get("instrs", {}).get(name)
        return top_level_attr(ins["attrs"], 0, key) if ins else None

    def eval(self, expr, env):
        """('instr', name) | ('sharding_of', name, leaf) | ('str', text) | ('list', [...]) |
        ('has', name) | None."""
        e = expr.strip()
        while e.startswith("(") and match_in(e, 0, "(", ")") == len(e) - 1:
            e = e[1:-1].strip()
        e = re.sub(r"^[*&]\s*", "", e)
        e = re.sub(r"\s*\.value\(\)$", "", e)
        e = re.sub(r"^(?:const\s+)?HloInstruction\s*\*\s*", "", e)
        s = string_value(e)
        if s is not None:
            return ("str", s)
        if e.startswith("{") and match_in(e, 0, "{", "}") == len(e) - 1:
            return ("list", [self.eval(x, env) for x in split_args(e[1:-1])])
        parts = chain_parts(e)
        if len(parts) > 1 or not re.match(r"^[\w:<>, ]+\(", e) or \
                match_in(e, e.index("("), "(", ")") != len(e) - 1:
            return self.eval_chain(parts, env)
        m = re.match(r"^std::(?:make_pair|pair<[^(]*>)\((.*)\)$", e, re.S)
        if m:
            return ("list", [self.eval(x, env) for x in split_args(m.group(1))])
        m = re.match(r"^(?:xla::)?ParseSharding\((.*)\)$", e, re.S)
        if m:
            v = self.eval(m.group(1), env)
            return ("str", v[1]) if v and v[0] == "str" else None
        m = re.match(r"^HloSharding::(Replicate|Manual|AssignDevice)\((.*)\)$", e, re.S)
        if m:
            if m.group(1) == "AssignDevice":
                return ("str", "{maximal device=%s}" % m.group(2).strip()) \
                    if re.match(r"^\d+$", m.group(2).strip()) else None
            return ("str", "{replicated}" if m.group(1) == "Replicate" else "{manual}")
        m = re.match(r"^FindInstruction\(\s*(?:module\.get\(\)|module|\w+)\s*,(.*)\)$", e, re.S)
        if m:
            v = self.eval(m.group(1), env)
            return ("instr", v[1]) if v and v[0] == "str" else None
        return None

    def eval_chain(self, parts, env):
        """A chain: base ->method(args) ->method(args) ... (base a name or a call)."""
        base, calls = parts[0].strip(), parts[1:]
        if base == "module" and calls and calls[0].strip() == "get()":
            calls = calls[1:]
        if base in ("module", "module_"):
            cur = ("module",)
        elif re.match(r"^\w+$", base):
            cur = env.get(base)
        elif calls:
            cur = self.eval(base, env)
        else:
            return None
        if cur is None:
            return None
        for call in calls:
            m = re.match(r"^(\w+)\s*\((.*)\)\s*(\[\s*(\w+)\s*\])?\s*$", call.strip(), re.S)
            if not m:
                return None
            meth, arg, idx = m.group(1), m.group(2).strip(), m.group(4)
            cur = self.step(cur, meth, arg, idx, env)
            if cur is None:
                return None
        return cur

    def step(self, cur, meth, arg, idx, env):
        kind = cur[0]
        if kind == "module" and meth == "entry_computation":
            return ("comp", (self.mod or {}).get("entry"))
        if kind == "module" and meth == "get":
            return ("module",)
        if kind == "comp":
            if meth == "root_instruction":
                r = self.root_of(cur[1])
                return ("instr", r) if r else None
            if meth == "parameter_instruction" and re.match(r"^\d+$", arg):
                p = self.param_of(cur[1], int(arg))
                return ("instr", p) if p else None
            return None
        if kind == "instr":
            name = cur[1]
            if meth == "operand" and re.match(r"^\d+$", arg):
                ins = (self.mod or {}).get("instrs", {}).get(name)
                if ins and int(arg) < len(ins["operands"]):
                    return ("instr", ins["operands"][int(arg)])
                return None
            if meth in ("while_body", "while_condition") and not arg:
                c = self.instr_attr(name, "body" if meth == "while_body" else "condition")
                return ("comp", c) if c else None
            if meth == "sharding" and not arg:
                return ("sharding_of", name, None)
            if meth == "has_sharding" and not arg:
                return ("has", name)
            return None
        if kind == "sharding_of" and meth == "tuple_elements" and not arg and cur[2] is None:
            if idx is not None and re.match(r"^\d+$", idx):
                return ("sharding_of", cur[1], int(idx))
            return None
        if kind == "sharding_of" and meth in ("IsReplicated", "IsManual", "IsTuple",
                                              "IsTileMaximal") and not arg:
            return ("pred", meth, cur[1], cur[2])
        return None

    # -- statements ----------------------------------------------------------------------------

    def walk(self, text, env):
        i, n = 0, len(text)
        while i < n:
            while i < n and (text[i].isspace() or text[i] == ";"):
                i += 1
            if i >= n:
                return
            m = re.match(r"(for|if|while)\s*\(", text[i:])
            if m:
                open_at = i + m.end() - 1
                close_at = match_in(text, open_at, "(", ")")
                if close_at < 0:
                    return
                head = text[open_at + 1:close_at]
                body, i = self.block_after(text, close_at + 1)
                if m.group(1) == "for":
                    self.walk_for(head, body, env)
                elif m.group(1) == "if":
                    branches = [body]
                    rest = re.match(r"\s*else\b", text[i:])
                    if rest:
                        j = i + rest.end()
                        if re.match(r"\s*if\s*\(", text[j:]):
                            # else if: the remaining chain is one statement
                            els, i = self.statement_after(text, j)
                        else:
                            els, i = self.block_after(text, j)
                        branches.append(els)
                    else:
                        branches.append("")
                    if "allow_root_sharding_propagation" in head:
                        neg = head.strip().startswith("!")
                        take = branches[1] if (neg == self.variant_true) else branches[0]
                        self.walk(take, dict(env))
                    else:
                        for b in branches:
                            self.walk(b, dict(env))
                else:
                    self.walk(body, dict(env))
                continue
            if text[i] == "{":
                close = match_in(text, i, "{", "}")
                if close < 0:
                    return
                self.walk(text[i + 1:close], dict(env))
                i = close + 1
                continue
            stmt, i = self.statement_after(text, i)
            self.statement(stmt.strip(), env)

    def block_after(self, text, i):
        """The loop / branch body after position i: (its text, the index after it)."""
        while i < len(text) and text[i].isspace():
            i += 1
        if i < len(text) and text[i] == "{":
            close = match_in(text, i, "{", "}")
            if close < 0:
                return text[i + 1:], len(text)
            return text[i + 1:close], close + 1
        return self.statement_after(text, i)

    def statement_after(self, text, i):
        """Text up to the next top-level ';' (a whole if/else chain for `if`)."""
        start = i
        m = re.match(r"\s*if\s*\(", text[i:])
        if m:
            close = match_in(text, i + m.end() - 1, "(", ")")
            _, j = self.block_after(text, close + 1)
            rest = re.match(r"\s*else\b", text[j:])
            if rest:
                _, j = self.block_after(text, j + rest.end())
            return text[start:j], j
        depth = 0
        while i < len(text):
            c = text[i]
            if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):
                i = skip_string(text, i)
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == ";" and depth == 0:
                return text[start:i + 1], i + 1
            i += 1
        return text[start:], len(text)

    def walk_for(self, head, body, env):
        parts = re.split(r"(?<!:):(?!:)", head)
        if len(parts) != 2:
            self.walk(body, dict(env))  # a counting loop: once, its variables unbound
            return
        decl, rng = parts[0].strip(), parts[1].strip()
        sb = re.search(r"\[\s*([\w\s,]+)\]\s*$", decl)
        names = [x.strip() for x in sb.group(1).split(",")] if sb else \
            [re.findall(r"(\w+)\s*$", decl)[0]] if re.findall(r"(\w+)\s*$", decl) else []
        v = self.eval(rng, env)
        if not names or not v or v[0] != "list":
            self.walk(body, dict(env))
            return
        for elem in v[1]:
            e2 = dict(env)
            if len(names) == 1:
                e2[names[0]] = elem
            elif elem and elem[0] == "list" and len(elem[1]) == len(names):
                for nm, x in zip(names, elem[1]):
                    e2[nm] = x
            else:
                for nm in names:
                    e2.pop(nm, None)
            self.walk(body, e2)

    def statement(self, stmt, env):
        stmt = stmt.rstrip(";").strip()
        if not stmt:
            return
        # A lambda in the statement: its body is walked where it stands (its parameters unbound).
        lam = re.search(r"\[[^\]]*\]\s*\([^)]*\)\s*(?:->\s*[\w:<>*&]+\s*)?\{", stmt)
        if lam:
            close = match_in(stmt, lam.end() - 1, "{", "}")
            if close > 0:
                self.walk(stmt[lam.end():close], dict(env))
            return
        m = re.match(r"^(EXPECT|ASSERT)_(THAT|EQ|TRUE|FALSE|NE)\s*\((.*)\)$", stmt, re.S)
        if m:
            self.assertion(m.group(2), split_args(m.group(3)), stmt, env)
            return
        # Declarations and assignments.
        m = re.match(r"^(?:const\s+)?(?:auto|[\w:]+(?:<.*>)?)(?:\s+|\s*[*&]+\s*)(?:const\s+)?"
                     r"[*&]*\s*(\w+)\s*(=\s*(.*)|\((.*)\)|(\{.*\}))$", stmt, re.S)
        if not m:
            m2 = re.match(r"^(\w+)\s*=\s*(.*)$", stmt, re.S)
            if m2:
                env[m2.group(1)] = self.eval(m2.group(2), env)
            return
        var = m.group(1)
        if m.group(3) is not None:
            val = self.eval(m.group(3), env)
        elif m.group(4) is not None:
            inner = m.group(4).strip()
            val = self.eval(inner, env) if inner.startswith("{") else None
        else:
            val = self.eval(m.group(5), env)
        env[var] = val

    def assertion(self, kind, args, stmt, env):
        text = " ".join(stmt.split())
        if "ShardingMetadata" in text:
            self.metadata_only += 1
            return
        mentions = re.search(r"op::(No)?Sharding\b|has_sharding|sharding\(\)", text)
        if not mentions or re.search(r"\.size\(\)", text):
            return
        if kind == "THAT" and len(args) == 2:
            tgt = self.eval(args[0], env)
            matcher = args[1]
            exp = None
            sm = re.search(r"op::Sharding\s*\(", matcher)
            if sm:
                close = match_in(matcher, sm.end() - 1, "(", ")")
                v = self.eval(matcher[sm.end():close], env)
                if not v or v[0] != "str":
                    return self.unbound.append(text)
                exp = v[1]
            elif not re.search(r"op::NoSharding\s*\(", matcher):
                return  # a matcher on something else (op::Shape, ...)
            if tgt and tgt[0] == "instr":
                return self.record(tgt[1], None, exp, "op::Sharding" if exp else "op::NoSharding")
            if tgt and tgt[0] == "sharding_of" and exp is not None:
                return self.record(tgt[1], tgt[2], exp, "op::Sharding")
            return self.unbound.append(text)
        if kind in ("TRUE", "FALSE") and len(args) == 1:
            v = self.eval(args[0], env)
            if v and v[0] == "has" and kind == "FALSE":
                return self.record(v[1], None, None, "has_sharding() false")
            if v and v[0] == "pred" and kind == "TRUE" and v[1] in ("IsReplicated", "IsManual"):
                return self.record(v[2], v[3], "{replicated}" if v[1] == "IsReplicated"
                                   else "{manual}", v[1] + "()")
            return self.unbound.append(text)
        if kind == "EQ" and len(args) == 2:
            a, b = self.eval(args[0], env), self.eval(args[1], env)
            for x, y in ((a, b), (b, a)):
                if x and x[0] == "sharding_of" and y and y[0] == "str":
                    return self.record(x[1], x[2], y[1], "EXPECT_EQ")
            if not re.search(r"sharding\(\)", text):
                return
            return self.unbound.append(text)
        if kind == "NE":
            return
        self.unbound.append(text)

    def record(self, name, leaf, expected, how):
        key = (name, leaf, expected)
        if any((a["instr"], a["leaf"], a["expected"]) == key for a in self.asserts):
            return  # the same assertion met twice (both branches of a metadata-only `if`)
        self.asserts.append(dict(instr=name, leaf=leaf, expected=expected, how=how))


def bool_list(arg):
    """`{true, false}` / `true` -> [True, False] / [True]; 'param' for a GetParam() value;
    None when it is something else."""
    a = sp.strip_comments(arg).strip()
    if "GetParam()" in a:
        return "param"
    if a.startswith("{") and a.endswith("}"):
        items = [x.strip() for x in a[1:-1].split(",") if x.strip()]
    else:
        items = [a]
    if all(x in ("true", "false") for x in items):
        return [x == "true" for x in items]
    return None


def extract_tests(src):
    """The tests of the file, in file order: dict(name, fixture, macro, line, hlo, flags...,
    asserts, unbound, expect_error, notes)."""
    raws = sp.find_raw_strings(src)
    raw_at = {s: e for s, e, _, _ in raws}
    raw_text = {s: t for s, _, _, t in raws}
    heads = []
    for m in sp.TEST_HEAD.finditer(src):
        brace = src.find("{", m.end())
        close = sp.match_close(src, brace, raw_at, "{", "}") if brace >= 0 else -1
        if close < 0:
            continue
        heads.append((m, brace, close))
    tests = []
    for m, brace, close in heads:
        code, body_raws = clean_code(src, brace + 1, close, raw_at, raw_text)
        hlo_idx = [k for k, t in enumerate(body_raws) if sp.is_hlo_module(t)]
        t = dict(name=m.group(3), fixture=m.group(2), macro=m.group(1),
                 line=sp.line_of(src, m.start()), hlo=None, notes=[])
        if len(hlo_idx) > 1:
            t["notes"].append("%d modules in the body: the first is run" % len(hlo_idx))
        if hlo_idx:
            t["hlo"] = body_raws[hlo_idx[0]]
        # The ShardingPropagation call(s): flags of the first.
        calls = []
        for cm in re.finditer(r"\bShardingPropagation\s*\(", code):
            close_at = match_in(code, cm.end() - 1, "(", ")")
            calls.append((split_args(code[cm.end():close_at]), code[close_at + 1:close_at + 200]))
        t["is_spmd"] = None
        t["to_output"] = None
        t["to_parameters"] = None
        t["param_output"] = False
        if calls:
            args, after = calls[0]
            names = ["is_spmd", "propagate_metadata", "to_output", "to_parameters",
                     "cse_prevention_only"]
            vals = {k: (bool_list(a) if k in ("to_output", "to_parameters") else
                        sp.strip_comments(a).strip()) for k, a in zip(names, args)}
            spmd = vals.get("is_spmd", "false")
            t["is_spmd"] = True if spmd == "true" else False if spmd == "false" else spmd
            for k in ("to_output", "to_parameters"):
                v = vals.get(k)
                if v == "param":
                    t["param_output"] = t["param_output"] or k == "to_output"
                    v = [True]  # the TEST_P's PropagateToRoot case (its assertions assume it)
                    t["notes"].append("%s from GetParam(): run with {true}" % k)
                elif v is None and k in vals:
                    t["notes"].append("%s is an expression (%s): not passed" %
                                      (k, sp.strip_comments(args[names.index(k)])))
                t[k] = v
            extra = ["cse_prevention_only", "sharding_helper"]
            if len(args) > 4:
                t["notes"].append("the test also passes (not reproduced): " + ", ".join(
                    "%s=%s" % (extra[k] if k < len(extra) else "argument %d" % (k + 5),
                               sp.strip_comments(a)) for k, a in enumerate(args[4:])))
            thr = re.match(r"\s*\.Run\(\s*[\w.()]+\s*,\s*(\{[^}]*\})", after)
            if thr:
                t["notes"].append("run on execution threads %s only (not reproduced)" %
                                  thr.group(1))
            flag_sets = {(json.dumps(c[0][2:4]) if len(c[0]) > 2 else "") for c in calls}
            if len(calls) > 1:
                t["notes"].append("%d ShardingPropagation runs%s: the first one's flags" % (
                    len(calls), "" if len(flag_sets) == 1 else " with different flags"))
        else:
            t["notes"].append("no ShardingPropagation call")
        for helper in ("HloConstantSplitter", "HloDCE", "set_sharding", "CallInliner"):
            if re.search(r"\b%s\b" % helper, code):
                t["notes"].append("the test %s in C++ (not reproduced)" % (
                    "sets shardings" if helper == "set_sharding" else "also runs " + helper))
        # XLA's pass expected to fail.
        t["expect_error"] = None
        if re.search(r"EXPECT_FALSE\([^;]*\.ok\(\)\s*\)|status\(\)\.message\(\)|"
                     r"\bStatusIs\(|IsOkAndHolds\(false|EXPECT_THAT\(\s*\w+\.status\(\)", code):
            sub = re.search(r'HasSubstr\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', code)
            t["expect_error"] = string_value(sub.group(1)) if sub else ""
        mod = parse_hlo(t["hlo"]) if t["hlo"] else None
        w = Walker(mod, variant_true=True)
        w.walk(code, {})
        t["asserts"] = w.asserts
        t["unbound"] = w.unbound
        t["metadata_only"] = w.metadata_only
        for a in t["asserts"]:
            ins = (mod or {}).get("instrs", {}).get(a["instr"])
            a["opcode"] = ins["opcode"] if ins else None
            a["comp_entry"] = bool(ins and mod["comps"].get(ins["comp"], {}).get("entry"))
        tests.append(t)
    return tests


def module_text(t):
    """The test's module with the propagation flags its call passes written into the header
    (`allow_spmd_sharding_propagation_to_output={...}`, `..._to_parameters={...}`), replacing
    any the module text already has."""
    text = t["hlo"].lstrip("\n")
    lines = text.split("\n")
    k = next((i for i, l in enumerate(lines) if l.strip().startswith("HloModule")), None)
    if k is None:
        return text + "\n"
    head = lines[k]
    for key in ("to_output", "to_parameters"):
        attr = "allow_spmd_sharding_propagation_" + key
        v = t.get(key)
        m = re.search(r",\s*%s=\{[^}]*\}" % attr, head)
        if v is None and not m:
            continue
        val = "{%s}" % ",".join("true" if b else "false" for b in (v or [False]))
        if m:
            head = head[:m.start()] + ", %s=%s" % (attr, val) + head[m.end():]
        else:
            nm = re.match(r"^(\s*HloModule\s+[^\s,]+)", head)
            head = nm.group(1) + ", %s=%s" % (attr, val) + head[nm.end():]
    lines[k] = head
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Shardings: parsing and a canonical form
# --------------------------------------------------------------------------------------------

class ShardingError(ValueError):
    pass


def strip_metadata(text):
    """Drops `metadata={...}` groups and `shard_as N` / `shard_like N` from a sharding text."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("metadata={", i):
            k = match_in(text, i + len("metadata="), "{", "}")
            i = k + 1 if k >= 0 else len(text)
            continue
        if text[i] == '"':
            j = skip_string(text, i)
            out.append(text[i:j])
            i = j
            continue
        out.append(text[i])
        i += 1
    s = re.sub(r"/\*.*?\*/", " ", "".join(out))
    return re.sub(r"\bshard_(?:as|like)\s+\d+", " ", s)


def iota_devices(reshape, perm, n):
    total = 1
    for d in reshape:
        total *= d
    if total != n:
        raise ShardingError("iota of %d devices for %d tiles" % (total, n))
    flat = list(range(total))
    if perm:
        flat = transpose(reshape, flat, perm)
    return flat


def transpose(shape, flat, perm):
    """flat (row-major over shape) transposed by perm (out dim k = in dim perm[k])."""
    if sorted(perm) != list(range(len(shape))):
        raise ShardingError("bad permutation %s for %s" % (perm, shape))
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    out_shape = [shape[p] for p in perm]
    out_strides = [strides[p] for p in perm]
    out = []
    idx = [0] * len(out_shape)
    total = len(flat)
    for _ in range(total):
        out.append(flat[sum(i * s for i, s in zip(idx, out_strides))])
        for k in range(len(idx) - 1, -1, -1):
            idx[k] += 1
            if idx[k] < out_shape[k]:
                break
            idx[k] = 0
    return out


SUBGROUP_ORDER = {"manual": 0, "unreduced": 1, "replicated": 2}


def parse_single(s):
    s = " ".join(s.split())
    if s in ("replicated", ""):
        return ("replicated",) if s else ("tuple", ())
    if s == "manual":
        return ("manual",)
    if s == "unknown":
        return ("unknown",)
    if s == "unreduced":
        return ("unreduced",)
    m = re.match(r"^maximal device=(\d+)$", s)
    if m:
        return ("maximal", int(m.group(1)))
    m = re.match(r"^devices=\[([\d,\s]+)\]\s*(.*)$", s)
    if not m:
        raise ShardingError("unknown sharding form: %s" % s)
    dims = [int(x) for x in m.group(1).split(",") if x.strip()]
    rest = m.group(2)
    n = 1
    for d in dims:
        n *= d
    im = re.match(r"^<=\[([\d,\s]+)\](?:\s*T\(([\d,\s]+)\))?\s*(.*)$", rest)
    if im:
        reshape = [int(x) for x in im.group(1).split(",") if x.strip()]
        perm = [int(x) for x in im.group(2).split(",")] if im.group(2) else None
        devs = iota_devices(reshape, perm, n)
        rest = im.group(3)
    else:
        dm = re.match(r"^([\d,\s]+?)(?=\s+[a-z]|$)(.*)$", rest)
        if not dm:
            raise ShardingError("no device list: %s" % s)
        devs = [int(x) for x in dm.group(1).replace(" ", "").split(",") if x]
        rest = dm.group(2)
        if len(devs) != n:
            raise ShardingError("%d devices for %d tiles: %s" % (len(devs), n, s))
    types = []
    rest = rest.strip()
    while rest:
        if rest.startswith("last_tile_dim_replicate"):
            types.append("replicated")
            rest = rest[len("last_tile_dim_replicate"):].strip()
            continue
        lm = re.match(r"^last_tile_dims=\{([^}]*)\}\s*(.*)$", rest)
        if lm:
            types.extend(x.strip() for x in lm.group(1).split(",") if x.strip())
            rest = lm.group(2)
            continue
        raise ShardingError("unknown sharding attribute: %s" % rest)
    if len(types) > len(dims):
        raise ShardingError("more subgroup dims than dims: %s" % s)
    return canon_tiled(dims, types, devs)


def canon_tiled(dims, types, devs):
    """Canonical ('tiled', data dims, subgroup types, devices): subgroup dims of size 1 dropped,
    subgroup dims ordered manual, unreduced, replicated and merged per type, the devices of a
    replicated group sorted (their order there means nothing); all-1 data dims with one
    replicated (manual) subgroup is replicated (manual)."""
    nd = len(dims) - len(types)
    data, sub = list(dims[:nd]), list(zip(dims[nd:], types))
    for t in types:
        if t not in SUBGROUP_ORDER:
            raise ShardingError("unknown subgroup type %s" % t)
    # order: data dims, then subgroups by type (stable)
    order = list(range(nd)) + [nd + k for k, _ in sorted(enumerate(sub), key=lambda x:
                                                         SUBGROUP_ORDER[x[1][1]])]
    shape = list(dims)
    if order != list(range(len(dims))):
        devs = transpose(shape, devs, order)
        shape = [shape[p] for p in order]
        sub = [sub[p - nd] for p in order[nd:]]
    merged = []
    for size, typ in sub:
        if size == 1:
            continue
        if merged and merged[-1][1] == typ:
            merged[-1] = (merged[-1][0] * size, typ)
        else:
            merged.append((size, typ))
    if merged and merged[-1][1] == "replicated":
        g = merged[-1][0]
        devs = [d for k in range(0, len(devs), g) for d in sorted(devs[k:k + g])]
    if all(d == 1 for d in data):
        if [t for _, t in merged] == ["replicated"]:
            return ("replicated",)
        if [t for _, t in merged] == ["manual"]:
            return ("manual",)
    return ("tiled", tuple(data), tuple(merged), tuple(devs))


def parse_sharding(text):
    """Canonical form of a sharding text `{...}` (tuple shardings as ('tuple', (...)))."""
    s = strip_metadata(text).strip()
    if not (s.startswith("{") and s.endswith("}")):
        raise ShardingError("not a sharding: %s" % text)
    inner = s[1:-1].strip()
    if inner.startswith("{"):
        return ("tuple", tuple(parse_sharding(x.strip()) for x in split_args(inner)))
    return parse_single(inner)


def leaves(c):
    if c[0] == "tuple":
        out = []
        for x in c[1]:
            out.extend(leaves(x))
        return out
    return [c]


def same_sharding(a, b):
    """Semantic equality; a non-tuple sharding on one side against a tuple on the other is
    that sharding on every leaf."""
    la, lb = leaves(a), leaves(b)
    if a[0] == "tuple" and b[0] == "tuple":
        return la == lb
    if a[0] == "tuple":
        return all(x == b for x in la)
    if b[0] == "tuple":
        return all(x == a for x in lb)
    return a == b


def is_replicated(c):
    return all(x == ("replicated",) for x in leaves(c)) and bool(leaves(c))


def compare(expected, weave_text, leaf):
    """(class, note) of one assertion against Weave's sharding text (None: none)."""
    if weave_text is None:
        return ("agree", "no sharding on either side") if expected is None else ("missing", "")
    try:
        w = parse_sharding(weave_text)
    except ShardingError as e:
        return "differ", "Weave's sharding not understood: %s" % e
    if leaf is not None:
        lw = leaves(w)
        if w[0] == "tuple":
            if leaf >= len(lw):
                return "differ", "Weave's tuple sharding has %d leaves" % len(lw)
            w = lw[leaf]
    if expected is None:
        if is_replicated(w):
            return "agree", "no sharding expected, Weave: replicated"
        return "differ", ""
    try:
        e = parse_sharding(expected)
    except ShardingError as err:
        return "differ", "XLA's sharding not understood: %s" % err
    return ("agree", "") if same_sharding(e, w) else ("differ", "")


# --------------------------------------------------------------------------------------------
# Running Weave
# --------------------------------------------------------------------------------------------

def classify_run(rc, timed_out, stderr, timeout_s, mem_gib):
    """(module class, reason) of one weave opt run."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    last = lines[-1].strip() if lines else ""
    if timed_out:
        return "timeout", "no result within %g s" % timeout_s
    if rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = "signal %d" % -rc
        oom = any("bad_alloc" in l or "out of memory" in l.lower() for l in lines)
        return "crash", "killed by %s%s%s" % (sig, " (out of memory under the %g GiB cap)" %
                                              mem_gib if oom else "",
                                              (": " + last) if last else "")
    msg = next((l.strip() for l in lines if l.startswith("weave")), last)
    text = re.sub(r"^weave( opt)?:\s*", "", msg)
    text = re.sub(r"^\S*input\.hlo:\s*", "", text)
    if rc == 0:
        return "ok", ""
    if sp.INTERNAL.search(msg):
        return "crash", "internal error: " + text
    if rc in (1, 2):
        if re.search(r"input\.hlo:\d+:\d+:", msg):
            return "parse-error", re.sub(r"^(?:\S*?input\.hlo:)?(\d+:\d+):\s*", r"at \1: ", text)
        return "declined", ("usage (exit 2): " if rc == 2 else "") + text
    return "crash", "exit %d: %s" % (rc, text)


def run_test(t, args, scratch):
    """Runs one test's module; returns dict(cls, reason, rc, seconds, out: parse_hlo or None)."""
    if not t["hlo"]:
        return dict(cls="not-run", reason="no HLO module in the test", rc=None, seconds=0.0,
                    out=None)
    d = os.path.join(scratch, sp.safe_name(t["name"]))
    os.makedirs(d, exist_ok=True)
    inp = os.path.join(d, "input.hlo")
    with open(inp, "w") as f:
        f.write(module_text(t))
    out = os.path.join(d, "output.hlo")
    cmd = [args.weave, "opt", "--passes=" + PASSES, inp, "-o", out]
    t0 = time.monotonic()
    ran = sp.run_weave(cmd, args)
    if ran is None:
        return dict(cls="timeout", reason="not run: the runner was interrupted", rc=None,
                    seconds=0.0, out=None)
    rc, timed_out, stdout, stderr = ran
    seconds = time.monotonic() - t0
    for nm, data in (("command.txt", " ".join(cmd) + "\n"), ("stdout.txt", stdout),
                     ("stderr.txt", stderr),
                     ("exit_code.txt", "timeout\n" if timed_out else "%d\n" % rc)):
        with open(os.path.join(d, nm), "w") as f:
            f.write(data)
    cls, reason = classify_run(rc, timed_out, stderr, args.timeout, args.mem_gib)
    parsed = None
    verify = None
    if cls == "ok":
        try:
            with open(out) as f:
                parsed = parse_hlo(f.read())
        except OSError:
            cls, reason = "crash", "exit 0 without an output file"
    if cls == "ok":
        # Weave's verifier on the input and on the propagated module: a module that verifies
        # before the passes and not after them points at the passes.
        verify = {}
        for key, path in (("input", inp), ("output", out)):
            ran = sp.run_weave([args.weave, "verify", path], args)
            if ran is None:
                break
            vrc, vto, _, verr = ran
            lines = [l.strip() for l in verr.splitlines() if l.strip()]
            verify[key] = None if (vrc == 0 and not vto) else sp.clip(
                (lines[0] if lines else "exit %s" % vrc).replace(path + ": ", ""), 400)
    if t.get("expect_error") is not None:
        if cls == "declined":
            cls = "rejected-as-xla"
            reason = "XLA's test expects an error%s; Weave: %s" % (
                (' ("%s")' % t["expect_error"]) if t["expect_error"] else "", reason)
        elif cls == "ok":
            cls = "accepted-xla-errs"
            reason = "XLA's test expects an error%s; Weave propagated" % (
                (' ("%s")' % t["expect_error"]) if t["expect_error"] else "")
    return dict(cls=cls, reason=reason, rc=None if timed_out else rc,
                seconds=round(seconds, 3), out=parsed, verify=verify)


def judge(t, run):
    """The test's assertions, each with Weave's sharding and a class."""
    rows = []
    out = run.get("out")
    for a in t["asserts"]:
        row = dict(test=t["name"], instr=a["instr"], leaf=a["leaf"], how=a["how"],
                   opcode=a["opcode"], expected=a["expected"], weave=None, note="")
        if out is None:
            row["class"] = "not-run"
            row["note"] = run["cls"]
        else:
            ins = out["instrs"].get(a["instr"])
            if ins is None:
                row["class"] = "absent"
            else:
                row["opcode"] = row["opcode"] or ins["opcode"]
                row["weave"] = ins["sharding"]
                row["class"], row["note"] = compare(a["expected"], ins["sharding"], a["leaf"])
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

def cell(text, width=TEXT_WIDTH):
    if text is None:
        return "—"
    return sp.md_cell(sp.clip(text, width))


def write_summary(tests, runs, rows, source, fh, elapsed, args):
    fh.write("# Weave's sharding propagation on XLA's propagation tests\n\n")
    fh.write("Source: `%s` (%d tests%s). Command per test module: `weave opt --passes=%s "
             "input.hlo -o output.hlo`, the test's `allow_spmd_sharding_propagation_to_output` / "
             "`_to_parameters` arguments written into the module header; limits %g s and %g GiB "
             "per module; weave %s. Generated by `tests/xla/sharding_propagation.py` on %s in "
             "%.0f s.\n\n"
             % (source, len(tests), (", filter `%s`" % args.filter) if args.filter else "",
                PASSES, args.timeout, args.mem_gib, args.weave_desc,
                time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), elapsed))
    bound = len(rows)
    unbound = sum(len(t["unbound"]) for t in tests)
    counts = {c: sum(1 for r in rows if r["class"] == c) for c in ASSERT_CLASSES}
    agree = counts["agree"]
    nosh = sum(1 for r in rows if r["class"] == "agree" and r["expected"] is None
               and r["note"].startswith("no sharding expected"))
    fh.write("Sharding assertions found: %d; bound to a named instruction: %d (%d unbound: "
             "assertions whose target or expected sharding the extraction cannot tell, e.g. "
             "relations `EXPECT_EQ(a->sharding(), b->sharding())`, `has_sharding()` true, loop "
             "indices; `ShardingMetadata` checks are skipped, %d of them).\n\n"
             % (bound + unbound, bound, unbound, sum(t["metadata_only"] for t in tests)))
    fh.write("**Agreement: %d of %d bound assertions (%.1f%%)**; of them %d where XLA expects "
             "no sharding (`op::NoSharding()`, `has_sharding()` false) and Weave's output says "
             "replicated (Weave shards every instruction it propagates; counted as agreeing).\n\n"
             % (agree, bound, 100.0 * agree / max(1, bound), nosh))
    differ = [r for r in rows if r["class"] == "differ"]
    repl = 0
    for r in differ:
        try:
            w = parse_sharding(r["weave"])
            if r["leaf"] is not None and w[0] == "tuple" and r["leaf"] < len(leaves(w)):
                w = leaves(w)[r["leaf"]]
            repl += is_replicated(w)
        except ShardingError:
            pass
    fh.write("Of the %d that differ, %d have Weave's sharding replicated where XLA's test "
             "expects a tiled, manual or maximal one (no rule carried it there), %d have another "
             "non-replicated sharding.\n\n" % (len(differ), repl, len(differ) - repl))
    fh.write("| assertion class | count |\n|---|---:|\n")
    for c in ASSERT_CLASSES:
        fh.write("| %s | %d |\n" % (c, counts[c]))
    fh.write("| total bound | %d |\n| unbound | %d |\n\n" % (bound, unbound))
    mcounts = {c: sum(1 for r in runs.values() if r["cls"] == c) for c in MODULE_CLASSES}
    mcounts["not-run"] = sum(1 for r in runs.values() if r["cls"] == "not-run")
    fh.write("| module class | tests |\n|---|---:|\n")
    for c in MODULE_CLASSES + ["not-run"]:
        fh.write("| %s | %d |\n" % (c, mcounts.get(c, 0)))
    fh.write("| total | %d |\n\n" % len(runs))
    nonspmd = [t for t in tests if t.get("is_spmd") is False]
    fh.write("%d tests run XLA's pass with `is_spmd=false` (Weave has only the SPMD mode); "
             "%d of their %d bound assertions agree.\n\n"
             % (len(nonspmd), sum(1 for r in rows if r["class"] == "agree" and
                                  r["test"] in {t["name"] for t in nonspmd}),
                sum(1 for r in rows if r["test"] in {t["name"] for t in nonspmd})))
    # Misses by opcode.
    by_op = {}
    for r in rows:
        k = r["opcode"] or "?"
        e = by_op.setdefault(k, {c: 0 for c in ASSERT_CLASSES})
        e[r["class"]] += 1
    fh.write("### Misses by opcode of the asserted instruction\n\n"
             "| opcode | asserted | agree | differ | missing | absent | not-run | misses |\n"
             "|---|---:|---:|---:|---:|---:|---:|---:|\n")
    for k, e in sorted(by_op.items(), key=lambda kv: (-(sum(kv[1].values()) - kv[1]["agree"]),
                                                       kv[0])):
        total = sum(e.values())
        fh.write("| %s | %d | %d | %d | %d | %d | %d | %d |\n" % (
            k, total, e["agree"], e["differ"], e["missing"], e["absent"], e["not-run"],
            total - e["agree"]))
    fh.write("\n")
    failed = [(t, runs[t["name"]]) for t in tests if runs[t["name"]]["cls"] != "ok"]
    if failed:
        fh.write("### Tests whose module did not propagate (or where XLA expects an error)\n\n"
                 "| test | class | reason |\n|---|---|---|\n")
        for t, r in failed:
            fh.write("| %s | %s | %s |\n" % (t["name"], r["cls"], cell(r["reason"], 200)))
        fh.write("\n")
    broke = [(t, runs[t["name"]]["verify"]) for t in tests
             if (runs[t["name"]].get("verify") or {}).get("output")
             and not runs[t["name"]]["verify"].get("input")]
    rejected_in = sum(1 for t in tests if (runs[t["name"]].get("verify") or {}).get("input"))
    fh.write("`weave verify` on each module that propagated: %d inputs do not verify in Weave "
             "(the propagation passes ran on them anyway; the JSON's `verify` says why); %d "
             "modules verify before the passes and not after them%s\n\n"
             % (rejected_in, len(broke), ":" if broke else "."))
    if broke:
        fh.write("| test | Weave's verifier on the propagated module |\n|---|---|\n")
        for t, v in broke:
            fh.write("| %s | %s |\n" % (t["name"], cell(v["output"], 300)))
        fh.write("\n")
    noted = [t for t in tests if t["notes"]]
    if noted:
        fh.write("### Test setups not reproduced exactly\n\n| test | note |\n|---|---|\n")
        for t in noted:
            fh.write("| %s | %s |\n" % (t["name"], cell("; ".join(t["notes"]), 200)))
        fh.write("\n")
    fh.write("### Assertions\n\n`leaf` is the tuple element the assertion names "
             "(`tuple_elements()[k]`). Texts are cut to %d characters (the JSON has them "
             "whole).\n\n| test | instruction | opcode | expected (XLA) | Weave | class |\n"
             "|---|---|---|---|---|---|\n" % TEXT_WIDTH)
    for r in rows:
        name = r["instr"] + ("" if r["leaf"] is None else " [leaf %d]" % r["leaf"])
        exp = r["expected"] if r["expected"] is not None else "(no sharding)"
        cls = r["class"] + ((" (%s)" % r["note"]) if r["note"] and r["class"] != "agree" else "")
        fh.write("| %s | %s | %s | %s | %s | %s |\n" % (
            r["test"], sp.md_cell(name), r["opcode"] or "?", cell(exp), cell(r["weave"]),
            sp.md_cell(cls)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--xla-file", help="path of sharding_propagation_test.cc")
    src.add_argument("--xla-repo", help="an XLA git repository (bare is fine): reads HEAD:PATH")
    ap.add_argument("--xla-path", default=None,
                    help="with --xla-repo: the file inside it (default %s)" % DEFAULT_XLA_PATH)
    ap.add_argument("--weave", default=DEFAULT_WEAVE, help="the weave binary (default build/weave)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="modules run at once (1)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per module (30)")
    ap.add_argument("--mem-gib", type=float, default=4.0,
                    help="address-space cap of each weave process, GiB (4; 0 = none)")
    ap.add_argument("--filter", default=None, help="only tests whose name matches this regex")
    ap.add_argument("--keep", default=None,
                    help="keep each test's input.hlo, output.hlo and logs under DIR/NAME/")
    ap.add_argument("--summary", default="-", help="Markdown summary to FILE (default stdout)")
    ap.add_argument("--json", default=None, help="the same data as JSON to FILE")
    ap.add_argument("--list", action="store_true",
                    help="only list the extracted tests, flags and assertions")
    args = ap.parse_args()

    text, source = read_source(args)
    tests = extract_tests(text)
    if args.filter:
        rx = re.compile(args.filter)
        tests = [t for t in tests if rx.search(t["name"])]
    if args.list:
        for t in tests:
            print("%s (line %d) spmd=%s to_output=%s to_parameters=%s%s%s" % (
                t["name"], t["line"], t["is_spmd"], t["to_output"], t["to_parameters"],
                "" if t["expect_error"] is None else " expects-error",
                ("  [" + "; ".join(t["notes"]) + "]") if t["notes"] else ""))
            for a in t["asserts"]:
                print("    %-28s %-14s %s%s" % (
                    a["instr"] + ("" if a["leaf"] is None else "[%d]" % a["leaf"]),
                    a["opcode"] or "?", a["expected"] if a["expected"] is not None
                    else "(no sharding)", "" if a["how"] == "op::Sharding" else
                    "   <- " + a["how"]))
            for u in t["unbound"]:
                print("    unbound: %s" % sp.clip(u, 110))
        print("%d tests, %d bound assertions, %d unbound" % (
            len(tests), sum(len(t["asserts"]) for t in tests),
            sum(len(t["unbound"]) for t in tests)))
        return 0
    if not os.access(args.weave, os.X_OK):
        sys.exit("weave binary not found or not executable: %s" % args.weave)
    if args.keep:
        scratch = os.path.abspath(args.keep)
        os.makedirs(scratch, exist_ok=True)
    else:
        scratch = tempfile.mkdtemp(prefix="weave-xla-prop-")
    args.weave_desc = "`%s` built %s" % (
        os.path.relpath(args.weave, REPO_ROOT) if os.path.abspath(args.weave).startswith(
            REPO_ROOT) else args.weave,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.stat(args.weave).st_mtime)))
    args.weave = sp.snapshot_weave(args.weave, scratch)
    t0 = time.monotonic()
    runs = {}

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
        futs = {pool.submit(run_test, t, args, scratch): t for t in tests}
        try:
            for k, fut in enumerate(concurrent.futures.as_completed(futs)):
                t = futs[fut]
                runs[t["name"]] = fut.result()
                sys.stderr.write("[%d/%d] %-60s %s\n" % (k + 1, len(tests), t["name"],
                                                         runs[t["name"]]["cls"]))
                sys.stderr.flush()
        except BaseException:
            sp.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    except KeyboardInterrupt:
        sp.stop_all()
        sys.stderr.write("interrupted: the running weave processes were ended\n")
        return 130
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - t0
    rows = []
    for t in tests:
        rows.extend(judge(t, runs[t["name"]]))
    if args.summary == "-":
        write_summary(tests, runs, rows, source, sys.stdout, elapsed, args)
    else:
        with open(args.summary, "w") as fh:
            write_summary(tests, runs, rows, source, fh, elapsed, args)
    if args.json:
        out_tests = []
        for t in tests:
            r = runs[t["name"]]
            out_tests.append(dict(
                name=t["name"], fixture=t["fixture"], line=t["line"], is_spmd=t["is_spmd"],
                to_output=t["to_output"], to_parameters=t["to_parameters"],
                expect_error=t["expect_error"], notes=t["notes"], unbound=t["unbound"],
                metadata_only=t["metadata_only"], **{"class": r["cls"]}, reason=r["reason"],
                exit_code=r["rc"], seconds=r["seconds"], verify=r.get("verify")))
        counts = {c: sum(1 for r in rows if r["class"] == c) for c in ASSERT_CLASSES}
        with open(args.json, "w") as fh:
            json.dump(dict(source=source, command="weave opt --passes=" + PASSES,
                           weave=args.weave_desc, elapsed_s=round(elapsed, 1),
                           filter=args.filter, totals=counts,
                           bound=len(rows), unbound=sum(len(t["unbound"]) for t in tests),
                           tests=out_tests, assertions=rows), fh, indent=1)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
