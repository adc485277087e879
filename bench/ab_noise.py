#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""False alarms and detection of `kiln ab` and `kiln compare` under a CPU hog that comes and goes.

The measurement behind docs/benchmarks.md "Noise-aware verdicts" (issue 29): on this machine,
with a hog process that spins one CPU for a random 0.2-2 s, rests for a random 0.2-2 s, and
so on for the whole run, each of --runs rounds runs four cases in a shuffled order:

  ab-same        kiln ab A A            identical sides: the right verdict is "same module"
                                        (exit 5; before issue 35 it was "no change")
  ab-more        kiln ab A B            B adds 10% more elements (10% more work): "slower"
  compare-same   kiln run A > a.json; kiln run A > b.json; kiln compare a.json b.json
  compare-more   kiln run A > a.json; kiln run B > b.json; kiln compare a.json b.json
                 (B's benchmark renamed to A's: the same benchmark after a change)

A is configs/runs/vector_add.yaml (2^20 float32, number 10, repeat 5, min_repeat_ms 50) and B
the same with 1153434 elements. For compare it also prints what the verdict was before it
weighed the noise (slower beyond the threshold with p < alpha). Prints one table of verdict
counts and writes every verdict to --out (JSON). Usage:

  python3 bench/ab_noise.py --kiln build/bin/kiln --examples build/examples/kernels \
      [--runs 20] [--rounds 20] [--no-hog] [--out ab_noise.json]
"""

import argparse
import collections
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hog(stop, seed):
    """Spins one CPU in bursts until `stop` is set."""
    rng = random.Random(seed)
    while not stop.is_set():
        end = time.monotonic() + rng.uniform(0.2, 2.0)
        while time.monotonic() < end and not stop.is_set():
            pass
        stop.wait(rng.uniform(0.2, 2.0))


def configs(folder):
    with open(os.path.join(ROOT, "configs", "runs", "vector_add.yaml")) as f:
        text = f.read()
    a = os.path.join(folder, "a.yaml")
    b = os.path.join(folder, "b.yaml")
    with open(a, "w") as f:
        f.write(text)
    with open(b, "w") as f:
        f.write(text.replace("1048576", "1153434"))
    return a, b


def run(cmd, env, expect=(0, 1)):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode not in expect:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout


def ab_case(args, env, a, b):
    doc = json.loads(run([args.kiln, "ab", "--json", "--no-progress", "--rounds",
                          str(args.rounds), a, b], env, (0, 1, 4, 5)))
    return {"verdict": doc["verdict"], "ratio": doc["ratio"], "low": doc["low"],
            "high": doc["high"]}


def compare_case(args, env, a, b, folder):
    files = []
    for i, config in enumerate((a, b)):
        out = os.path.join(folder, f"run{i}.json")
        run([args.kiln, "run", "--no-progress", "--benchmark-out", out, config], env, (0,))
        files.append(out)
    # B's benchmark carries its size in its name; named as A's, it stands for A's benchmark
    # after a change that made it do 10% more work.
    with open(files[1]) as f:
        text = f.read()
    with open(files[1], "w") as f:
        f.write(text.replace("/1153434/", "/1048576/"))
    doc = json.loads(run([args.kiln, "compare", "--json", *files], env, (0, 1, 4)))
    row = doc["benchmarks"][0]
    before = ("slower" if row["change"] > doc["threshold"] and row["p_value"] < doc["alpha"]
              else "not slower")
    return {"verdict": row["direction"], "change": row["change"], "noise": row["noise_band"],
            "before": before}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kiln", required=True)
    p.add_argument("--examples", required=True)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--no-hog", action="store_true")
    p.add_argument("--out", default="ab_noise.json")
    args = p.parse_args()
    env = dict(os.environ, KILN_EXAMPLES=os.path.abspath(args.examples))
    stop = multiprocessing.Event()
    hogger = None
    if not args.no_hog:
        hogger = multiprocessing.Process(target=hog, args=(stop, 1), daemon=True)
        hogger.start()
    results = collections.defaultdict(list)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as folder:
            a, b = configs(folder)
            cases = {
                "ab-same": lambda: ab_case(args, env, a, a),
                "ab-more": lambda: ab_case(args, env, a, b),
                "compare-same": lambda: compare_case(args, env, a, a, folder),
                "compare-more": lambda: compare_case(args, env, a, b, folder),
            }
            order = random.Random(2)
            for i in range(args.runs):
                names = list(cases)
                order.shuffle(names)
                for name in names:
                    results[name].append(cases[name]())
                print(f"run {i + 1}/{args.runs} done after {time.monotonic() - started:.0f} s",
                      file=sys.stderr)
    finally:
        stop.set()
        if hogger:
            hogger.join()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    hogging = "off" if args.no_hog else "on and off"
    print(f"{args.runs} runs per case, CPU hog {hogging}, {os.cpu_count()} CPUs")
    print(f"{'case':<14} {'right verdict':<14} verdicts")
    for name, right in [("ab-same", "same module"), ("ab-more", "slower"),
                        ("compare-same", "no change"), ("compare-more", "slower")]:
        counts = collections.Counter(r["verdict"] for r in results[name])
        line = ", ".join(f"{v} {n}" for v, n in counts.most_common())
        print(f"{name:<14} {right:<14} {counts[right]}/{len(results[name])} right ({line})")
        if name.startswith("compare"):
            before = collections.Counter(r["before"] for r in results[name])
            print(f"{'':<14} {'':<14} before noise weighing: "
                  + ", ".join(f"{v} {n}" for v, n in before.most_common()))
    for name in ("ab-same", "ab-more"):
        ratios = sorted(r["ratio"] for r in results[name])
        print(f"{name}: B/A median {ratios[len(ratios) // 2]:.3f}, range "
              f"{ratios[0]:.3f}-{ratios[-1]:.3f}")
    for name in ("compare-same", "compare-more"):
        changes = sorted(r["change"] for r in results[name])
        busy = sum(r["noise"] is None for r in results[name])
        print(f"{name}: change median {changes[len(changes) // 2]:+.1%}, range "
              f"{changes[0]:+.1%}..{changes[-1]:+.1%}; {busy} of {len(changes)} pairs had a "
              f"run under CPU pressure above 10% (noise band unbounded)")


if __name__ == "__main__":
    main()
