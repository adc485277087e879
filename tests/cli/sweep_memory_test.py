#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A sweep's memory is bounded by its largest point, not the sum of its points (issue 29 item 4).

    sweep_memory_test.py KILN EXAMPLES

relu on two 16 MiB float32 tensors, swept over `number` (same shapes at every point): the peak
resident memory of `kiln run` (and its worker) at 20 points must stay within 48 MiB of that at
2 points, in a worker process (a sweep's default) and in kiln's own (--isolation none). Before
the fix each point kept its inputs and outputs to the end: 249 MB at 2 points, 2.0 GB at 20.
"""
import os
import subprocess
import sys
import tempfile

PEAK = ("import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.write(p.stderr)\n")


def config(folder, points):
    path = os.path.join(folder, f"sweep_{points}.yaml")
    with open(path, "w") as f:
        f.write("module: ${KILN_EXAMPLES}/librelu.so\n"
                "evaluator: {number: 1, repeat: 1, min_repeat_ms: 0}\n"
                "inputs:\n"
                "  - {name: in, shape: [4194304], init: random, low: -1, high: 1}\n"
                "  - {name: out, shape: [4194304]}\n"
                f"sweep:\n  number: [{', '.join(str(n) for n in range(1, points + 1))}]\n")
    return path


def peak_kib(kiln, env, path, *options):
    out = subprocess.run([sys.executable, "-c", PEAK, kiln, "run", *options, path],
                         capture_output=True, text=True, env=env, timeout=600)
    code, kib = out.stdout.split()
    if code != "0":
        raise SystemExit(f"kiln run {' '.join(options)} {path}: exit {code}\n{out.stderr}")
    return int(kib)


def main():
    kiln, examples = (os.path.abspath(a) for a in sys.argv[1:3])
    env = dict(os.environ, KILN_EXAMPLES=examples, KILN_PROGRESS="never")
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        two, twenty = config(folder, 2), config(folder, 20)
        for options in ([], ["--isolation", "none"]):
            small = peak_kib(kiln, env, two, *options)
            large = peak_kib(kiln, env, twenty, *options)
            what = " ".join(options) or "(isolated)"
            print(f"{what}: peak RSS {small // 1024} MiB at 2 points, {large // 1024} MiB at 20")
            if large > small + 48 * 1024:
                print(f"FAIL: {what}: 20 points took {(large - small) // 1024} MiB more than 2")
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
