#!/usr/bin/env python3
"""Checks a `weave compile --report` JSON: every entry of collectives_left_alone whose reason
quotes a pass's remark ("pass: message") quotes a missed remark of that pass that considered the
collective: located at it, or naming it in the remark's "about" list (an async pair is named by
both halves). A reason that is not a pass's remark must be a structural one (it names no pass).
Prints one line per entry checked; exits 1 on the first violation. Python standard library only.

usage: check_reasons.py REPORT.json [REPORT.json ...]
"""
import json
import sys


def check(path):
    with open(path) as f:
        report = json.load(f)
    passes = {r["pass"] for r in report.get("remarks", [])} | set(report.get("pipeline", []))
    bad = 0
    for entry in report.get("collectives_left_alone", []):
        name, reason = entry["name"], entry["reason"]
        pass_name = reason.split(": ", 1)[0] if ": " in reason else ""
        if pass_name not in passes:
            print(f"{path}: {name}: structural: {reason[:100]}")
            continue
        message = reason.split(": ", 1)[1]
        ok = False
        for r in report["remarks"]:
            if r["pass"] != pass_name or r["message"] != message or r["kind"] != "missed":
                continue
            if r["location"] == name or name in r.get("about", []):
                ok = True
                break
        if not ok:
            print(f"{path}: {name}: VIOLATION: the reason quotes a {pass_name} remark that is not "
                  f"about '{name}': {reason[:160]}")
            bad += 1
        else:
            print(f"{path}: {name}: from {pass_name}")
    return bad


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bad = sum(check(p) for p in sys.argv[1:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
