#!/usr/bin/env python3
"""Checks the stream annotations of windowed-einsum-handler output (HLO text on argv[1]):
every dot in a while body has a backend_config operation_queue_id > 0 and the ids are unique
across the module. With --waits (XLA 2024/2025 schema, `--xla-backend-config=2024`), each id is
also listed in exactly one wait_on_operation_queues, of the dot's user; without it (XLA 2026, the
default) no backend_config of the module may hold wait_on_operation_queues at all.
Prints `streams OK: <n> dots, ids <sorted ids>` or `streams BAD: <reason>` (exit 1)."""
import json
import re
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    with_waits = "--waits" in sys.argv[1:]
    text = open(args[0]).read()
    bodies = set(re.findall(r"while\([^)]*\),[^\n]*body=%?([\w.\-]+)", text))
    comp = None
    dots = {}      # name -> id
    waits = {}     # id -> list of (waiter name, operands)
    for line in text.splitlines():
        m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if m and not line.startswith(" "):
            comp = m.group(1)
            continue
        m = re.match(r"^\s+(?:ROOT )?%?([\w.\-]+) = .*? ([a-z\-]+)\((.*?)\)(.*)$", line)
        if not m:
            continue
        name, opcode, operands, rest = m.groups()
        cfg = {}
        b = rest.find("backend_config=")
        if b >= 0:
            try:
                cfg = json.JSONDecoder().raw_decode(rest[b + len("backend_config="):])[0]
            except ValueError:
                cfg = {}
        if opcode == "dot" and comp in bodies:
            qid = int(cfg.get("operation_queue_id", "0"))
            if qid <= 0:
                print("streams BAD: dot %s has no operation_queue_id > 0" % name)
                return 1
            if qid in dots.values():
                print("streams BAD: id %d used twice (%s)" % (qid, name))
                return 1
            dots[name] = qid
        if "wait_on_operation_queues" in cfg and not with_waits:
            print("streams BAD: %s has wait_on_operation_queues (removed in XLA 2026)" % name)
            return 1
        for w in cfg.get("wait_on_operation_queues", []):
            waits.setdefault(int(w), []).append((name, operands))
    for name, qid in dots.items():
        if not with_waits:
            continue
        ws = waits.get(qid, [])
        if len(ws) != 1 or not re.search(r"%%%s\b" % re.escape(name), ws[0][1]):
            print("streams BAD: id %d of %s is waited on by %s" % (qid, name, [w[0] for w in ws]))
            return 1
    print("streams OK: %d dots, ids %s" % (len(dots), sorted(dots.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
