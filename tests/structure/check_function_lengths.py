#!/usr/bin/env python3
"""Checks the length of every function and lambda in src/ (issue 54's limits).

Functions are found with universal-ctags (their first and last line); lambdas whose body opens
at the end of a line, by matching braces from that line. Limits: none over --max (150 lines),
at most --allowed-over (12) over --soft (120). Prints the longest ones and the counts; exits 1
when a limit is broken, 0 otherwise (and 0 with a note when ctags is not installed: the check
is skipped, saying so).

Usage: check_function_lengths.py [SRC_DIR] [--max N] [--soft N] [--allowed-over N]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

LAMBDA_OPEN = re.compile(r'\[[\w&=, *]*\]\s*(\([^()]*(\([^()]*\)[^()]*)*\))?[^;{}]*\{\s*$')


def ctags_functions(src):
    out = subprocess.run(['ctags', '--output-format=json', '--fields=+ne', '--kinds-C++=f',
                          '--languages=C++', '-R', '-f', '-', src],
                         capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        t = json.loads(line)
        if 'end' not in t:
            continue
        name = (t.get('scope', '') + '::' if t.get('scope') else '') + t['name']
        rows[(t['path'], t['line'])] = (t['end'] - t['line'] + 1, name)
    return rows


def lambdas(src):
    rows = {}
    for folder, _, files in os.walk(src):
        for f in files:
            if not f.endswith(('.cc', '.h')):
                continue
            path = os.path.join(folder, f)
            lines = open(path, encoding='utf-8').read().split('\n')
            for i, line in enumerate(lines):
                code = line.split('//')[0]
                if not LAMBDA_OPEN.search(code):
                    continue
                depth = 0
                for j in range(i, len(lines)):
                    text = lines[j].split('//')[0]
                    if j == i:
                        text = text[text.index('['):]
                    depth += text.count('{') - text.count('}')
                    if depth <= 0 and j > i:
                        rows[(path, i + 1)] = (j - i + 1, '<lambda>')
                        break
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument('src', nargs='?', default=os.path.join(here, '..', '..', 'src'))
    ap.add_argument('--max', type=int, default=150)
    ap.add_argument('--soft', type=int, default=120)
    ap.add_argument('--allowed-over', type=int, default=12)
    a = ap.parse_args()
    if shutil.which('ctags') is None:
        print('check_function_lengths: skipped: universal-ctags (ctags) is not installed')
        return 0
    rows = ctags_functions(a.src)
    for key, value in lambdas(a.src).items():
        rows.setdefault(key, value)
    ranked = sorted(((n, path, line, name) for (path, line), (n, name) in rows.items()),
                    reverse=True)
    over_max = [r for r in ranked if r[0] > a.max]
    over_soft = [r for r in ranked if r[0] > a.soft]
    for n, path, line, name in ranked[:10]:
        print('%4d  %s:%d  %s' % (n, os.path.relpath(path, os.path.join(a.src, '..')), line, name))
    print('check_function_lengths: %d functions and lambdas; %d over %d lines (at most %d '
          'allowed), %d over %d (none allowed)' % (len(rows), len(over_soft), a.soft,
                                                   a.allowed_over, len(over_max), a.max))
    return 1 if over_max or len(over_soft) > a.allowed_over else 0


if __name__ == '__main__':
    sys.exit(main())
