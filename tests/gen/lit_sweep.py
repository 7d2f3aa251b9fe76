#!/usr/bin/env python3
"""One lit RUN line for a generated module over several partition counts.

For each N of --partitions (in order, seed = --seed + its index), runs what a hand-written block
of RUN lines would:

  python3 plain_collectives.py GEN --partitions N -o TMP.N.hlo
  weave opt TMP.N.hlo --passes=PASSES --verify-each --remarks -o TMP.N.out.hlo 2> TMP.N.rem
  FileCheck TEST --check-prefix=P < TMP.N.out.hlo      for every P of --check
  FileCheck TEST --check-prefix=P < TMP.N.rem          for every P of --check-remarks
  weave compare TMP.N.hlo TMP.N.out.hlo --num-partitions N --seed SEED

`weave` and `FileCheck` are found on PATH (lit's configuration puts the build first). Stops at the
first command that fails, printing it and its output, and exits 1. Usage, from a lit test:

  // RUN: python3 %S/../gen/lit_sweep.py %s %t.pre --gen "ag --dtype fp8" \
  //        --passes=windowed-einsum-decomposer --check FP8,NOAG --seed 300
"""
import argparse
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, stdin=None, stdout=None, stderr=None):
    """Runs cmd (a list); on failure prints it with its output and exits 1."""
    shown = " ".join(shlex.quote(c) for c in cmd)
    res = subprocess.run(cmd, stdin=stdin, stdout=stdout or subprocess.PIPE,
                         stderr=stderr or subprocess.STDOUT, text=True)
    if res.returncode != 0:
        print(f"lit_sweep: failed (exit {res.returncode}): {shown}", file=sys.stderr)
        if res.stdout:
            sys.stderr.write(res.stdout)
        sys.exit(1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("test", help="the lit test file holding the FileCheck lines (%s)")
    ap.add_argument("tmp", help="prefix of the temporary files (%t.something)")
    ap.add_argument("--gen", required=True, help="plain_collectives.py arguments, one string")
    ap.add_argument("--passes", required=True, help="weave opt --passes")
    ap.add_argument("--partitions", default="2,3,4,8", help="comma-separated partition counts")
    ap.add_argument("--seed", type=int, required=True, help="weave compare seed of the first N")
    ap.add_argument("--check", default="", help="FileCheck prefixes for the output module")
    ap.add_argument("--check-remarks", default="", help="FileCheck prefixes for the remarks")
    a = ap.parse_args()

    counts = [int(n) for n in a.partitions.split(",") if n]
    if not counts:
        ap.error("--partitions names no partition count")
    for i, n in enumerate(counts):
        base = f"{a.tmp}{n}"
        module, out, rem = base + ".hlo", base + ".out.hlo", base + ".rem"
        run([sys.executable, os.path.join(HERE, "plain_collectives.py"), *shlex.split(a.gen),
             "--partitions", str(n), "-o", module])
        with open(rem, "w") as remarks:
            run(["weave", "opt", module, f"--passes={a.passes}", "--verify-each", "--remarks",
                 "-o", out], stderr=remarks)
        for files, prefixes in ((out, a.check), (rem, a.check_remarks)):
            for prefix in filter(None, prefixes.split(",")):
                with open(files) as f:
                    run(["FileCheck", a.test, f"--check-prefix={prefix}"], stdin=f)
        run(["weave", "compare", module, out, "--num-partitions", str(n), "--seed",
             str(a.seed + i)])
    print(f"lit_sweep: {a.gen} | {a.passes}: N = {a.partitions} passed")


if __name__ == "__main__":
    main()
