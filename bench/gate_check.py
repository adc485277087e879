#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Can a CI gate fail, and is it right both ways? `kiln ab` and `kiln compare` on a real 1.3x
slowdown and on an unchanged kernel, under a CPU hog this script starts itself (issue 35 item 4;
docs/benchmarks.md "A gate that can fail").

The kernel is tests/cli/gate_kernel.cc's spin(units, parallel): a dependent multiply-add chain
whose cost is proportional to `units`, spread over the cpu plugin's threads. A is libgate_a.so
with --units units; B is libgate_b.so (the same code, another file, as a rebuild of an unchanged
kernel is) with the same units ("unchanged") or 1.3x as many ("slower"). Each try runs four
cases in a shuffled order:

  ab-unchanged       kiln ab A B_unchanged                  right: not slower (exit 0)
  ab-slower          kiln ab A B_slower                     right: slower (exit 1)
  compare-unchanged  kiln run A > a.json; kiln run B_unchanged > b.json; kiln compare a b
  compare-slower     kiln run A > a.json; kiln run B_slower > b.json; kiln compare a b
                     (B's benchmark renamed to A's: the same benchmark after a change)

A false alarm is exit 1 on an unchanged kernel; a catch is exit 1 on the slower one; "could
not tell" (exit 4) is neither. While it runs, --hogs processes spin on the CPUs (default 1 on a
2-CPU machine). Prints a table of verdicts and writes every result to --out (JSON). Usage:

  python3 bench/gate_check.py --kiln build/bin/kiln --kernels build/tests/cli \\
      [--tries 20] [--units 400] [--slowdown 1.3] [--repeats 40] [--hogs 1] [--serial]
"""

import argparse
import collections
import json
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import tempfile
import time


def spin(stop):
    """Spins one CPU until `stop` is set."""
    while not stop.is_set():
        for _ in range(100000):
            pass


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_config(path, module, units, parallel, repeats):
    with open(path, "w") as f:
        f.write(f"module: {module}\nfunction: spin\ndevice: cpu\n"
                f"evaluator: {{number: 1, repeat: {repeats}, min_repeat_ms: 5}}\n"
                f"inputs:\n  - {{name: units, scalar: {units}}}\n"
                f"  - {{name: parallel, scalar: {parallel}}}\n")
    return path


def run(cmd, expect):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode not in expect:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def ab_case(args, a, b):
    start = time.monotonic()
    p = run([args.kiln, "ab", "--json", "--no-progress", a, b], (0, 1, 4, 5))
    doc = json.loads(p.stdout)
    return {"exit": p.returncode, "verdict": doc["verdict"], "ratio": doc["ratio"],
            "low": doc["low"], "high": doc["high"], "rounds": doc["rounds"],
            "seconds": time.monotonic() - start}


def compare_case(args, a, b, folder):
    start = time.monotonic()
    files = []
    for i, config in enumerate((a, b)):
        out = os.path.join(folder, f"run{i}.json")
        run([args.kiln, "run", "--no-progress", "--benchmark-out", out, config], (0,))
        files.append(out)
    # Named as A's benchmark: the same benchmark after a change.
    with open(files[1]) as f:
        doc = json.load(f)
    with open(files[0]) as f:
        name = next(e["run_name"] for e in json.load(f)["benchmarks"])
    for entry in doc["benchmarks"]:
        entry["name"] = entry["name"].replace(entry["run_name"], name)
        entry["run_name"] = name
    with open(files[1], "w") as f:
        json.dump(doc, f)
    p = run([args.kiln, "compare", "--json", *files], (0, 1, 4))
    row = json.loads(p.stdout)["benchmarks"][0]
    return {"exit": p.returncode, "verdict": row["direction"], "change": row["change"],
            "drift": row["drift"], "noise_band": row["noise_band"],
            "seconds": time.monotonic() - start}


def load1():
    return os.getloadavg()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kiln", required=True)
    p.add_argument("--kernels", required=True, help="the folder of libgate_a.so, libgate_b.so")
    p.add_argument("--tries", type=int, default=20)
    p.add_argument("--units", type=int, default=400)
    p.add_argument("--slowdown", type=float, default=1.3)
    p.add_argument("--repeats", type=int, default=40, help="repeats of each kiln run (compare)")
    p.add_argument("--hogs", type=int, default=1, help="busy-loop processes beside the runs")
    p.add_argument("--serial", action="store_true", help="spin on one thread, not all CPUs")
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--out", default="gate_check.json")
    args = p.parse_args()
    kernels = os.path.abspath(args.kernels)
    parallel = 0 if args.serial else 1
    slow_units = round(args.units * args.slowdown)
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=spin, args=(stop,), daemon=True)
            for _ in range(args.hogs)]
    load_before = load1()
    for h in hogs:
        h.start()
    results = collections.defaultdict(list)
    loads = []
    started = time.monotonic()
    date = time.strftime("%Y-%m-%d %H:%M %Z")
    try:
        with tempfile.TemporaryDirectory() as folder:
            a = write_config(os.path.join(folder, "a.yaml"),
                             os.path.join(kernels, "libgate_a.so"), args.units, parallel,
                             args.repeats)
            same = write_config(os.path.join(folder, "unchanged.yaml"),
                                os.path.join(kernels, "libgate_b.so"), args.units, parallel,
                                args.repeats)
            slow = write_config(os.path.join(folder, "slower.yaml"),
                                os.path.join(kernels, "libgate_b.so"), slow_units, parallel,
                                args.repeats)
            cases = {
                "ab-unchanged": lambda: ab_case(args, a, same),
                "ab-slower": lambda: ab_case(args, a, slow),
                "compare-unchanged": lambda: compare_case(args, a, same, folder),
                "compare-slower": lambda: compare_case(args, a, slow, folder),
            }
            order = random.Random(args.seed)
            for i in range(args.tries):
                names = list(cases)
                order.shuffle(names)
                for name in names:
                    results[name].append(cases[name]())
                    loads.append(load1())
                print(f"try {i + 1}/{args.tries} done after {time.monotonic() - started:.0f} s "
                      f"(load {loads[-1]:.1f})", file=sys.stderr)
    finally:
        stop.set()
        for h in hogs:
            h.join()
    elapsed = time.monotonic() - started
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "date": date, "results": results}, f, indent=1)

    print(f"gate check: {args.tries} tries per case, {date}")
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), {args.hogs} busy-loop hog(s); "
          f"1-minute load {load_before:.1f} before, {min(loads):.1f}-{max(loads):.1f} during "
          f"(mean {sum(loads) / len(loads):.1f}); {elapsed / 60:.1f} min in all")
    print(f"kernel: spin({args.units} units, {'serial' if args.serial else 'parallel'}) vs "
          f"{slow_units} units ({slow_units / args.units:.3f}x); compare runs of {args.repeats} "
          f"repeats; kiln ab with its defaults (20 rounds, up to 160)")
    print(f"{'case':<18} {'right':<11} {'exit 1':>7}  verdicts")
    for name, right in [("ab-unchanged", "not slower"), ("ab-slower", "slower"),
                        ("compare-unchanged", "not slower"), ("compare-slower", "slower")]:
        rs = results[name]
        counts = collections.Counter(r["verdict"] for r in rs)
        failed = sum(r["exit"] == 1 for r in rs)
        label = "caught" if right == "slower" else "false alarms"
        line = ", ".join(f"{v} {n}" for v, n in counts.most_common())
        print(f"{name:<18} {right:<11} {failed:>3}/{len(rs):<3}  {label} {failed}/{len(rs)}: "
              f"{line}")
    for name in ("ab-unchanged", "ab-slower"):
        rs = results[name]
        ratios = sorted(r["ratio"] for r in rs)
        rounds = sorted(r["rounds"] for r in rs)
        print(f"{name}: B/A median {ratios[len(ratios) // 2]:.3f} "
              f"(range {ratios[0]:.3f}-{ratios[-1]:.3f}); rounds median {rounds[len(rounds) // 2]}"
              f", max {rounds[-1]}; {sum(r['seconds'] for r in rs) / len(rs):.1f} s per try")
    for name in ("compare-unchanged", "compare-slower"):
        rs = results[name]
        changes = sorted(r["change"] for r in rs)
        drifts = sorted(r["drift"] for r in rs if r["drift"] is not None)
        drift = f"drift band median {drifts[len(drifts) // 2]:.1%}" if drifts else "no blocks"
        print(f"{name}: change median {changes[len(changes) // 2]:+.1%} "
              f"(range {changes[0]:+.1%}..{changes[-1]:+.1%}); {drift}; "
              f"{sum(r['seconds'] for r in rs) / len(rs):.1f} s per try")


if __name__ == "__main__":
    main()
