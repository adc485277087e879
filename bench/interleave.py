#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs benchmark programs in interleaved launches and prints median and range per case.

Every figure in docs/benchmarks.md comes from this script, so that all of them share one
method: each of --launches rounds starts every command once, in an order that rotates from
round to round (A B C, B C A, C A B, ...); a Google Benchmark program runs its cases with
--benchmark_enable_random_interleaving, so its floor and its cases alternate within a launch
too. The repetitions of all launches are pooled per case: the table shows their median, the
range of the per-launch medians, and the ratio of each case to the floor named with --floor.

A command is anything that accepts Google Benchmark's --benchmark_out=FILE and
--benchmark_out_format=json and writes that format (the peers' Python scripts in bench/tvm
do). Usage:

  python3 bench/interleave.py [--launches 3] [--repetitions 5] [--pin CPU] \
      [--versus LABEL:PATTERN=>REPLACEMENT ...] [--metric real_time|COUNTER] \
      [--unit ns|us|ms|s] --cmd "build/bin/kiln_bench_calls --benchmark_min_time=0.2" [--cmd ...]

--versus adds a column per LABEL: the ratio (and the difference) of each case to the case whose name is the case's
name with regex PATTERN replaced by REPLACEMENT (e.g. floor:^BM_Kiln=>BM_Floor); a case with no
such partner gets "-". Defaults: 3 launches, 5 repetitions per launch, no pinning, the metric
real_time in the first case's own unit, no columns. Exit status 1 when a command fails.
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cmd", action="append", required=True,
                   help="a benchmark command line (repeatable); its cases are pooled by name")
    p.add_argument("--launches", type=int, default=3, help="rounds of launches (default 3)")
    p.add_argument("--repetitions", type=int, default=5,
                   help="--benchmark_repetitions per launch (default 5)")
    p.add_argument("--pin", default=None, help="taskset CPU list for every launch (default none)")
    p.add_argument("--versus", action="append", default=[],
                   help="LABEL:PATTERN=>REPLACEMENT, a ratio column (repeatable; default none)")
    p.add_argument("--metric", default="real_time",
                   help="real_time, cpu_time or a user counter's name (default real_time)")
    p.add_argument("--unit", default=None, choices=sorted(UNIT_NS),
                   help="unit of the table (default: the first case's own time unit)")
    p.add_argument("--json", default=None, help="also write the pooled samples to this file")
    args = p.parse_args(argv)
    if args.launches < 3:
        p.error("--launches must be at least 3 (the method needs a range over launches)")
    if args.repetitions < 1:
        p.error("--repetitions must be at least 1")
    args.columns = []
    for spec in args.versus:
        m = re.fullmatch(r"([^:]+):(.*)=>(.*)", spec)
        if not m:
            p.error(f"--versus {spec!r} is not LABEL:PATTERN=>REPLACEMENT")
        args.columns.append((m.group(1), re.compile(m.group(2)), m.group(3)))
    return args


def run_once(command, repetitions, pin):
    """Runs one launch; returns its Google Benchmark JSON document."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        path = out.name
    try:
        argv = shlex.split(command)
        argv += [f"--benchmark_repetitions={repetitions}",
                 "--benchmark_enable_random_interleaving=true",
                 f"--benchmark_out={path}", "--benchmark_out_format=json"]
        if pin:
            argv = ["taskset", "-c", pin] + argv
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"interleave.py: {command!r} exited with {proc.returncode}")
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    finally:
        os.unlink(path)


def sample(run, metric, unit):
    """One repetition's value of `metric`, in nanoseconds when it is a time."""
    if metric in ("real_time", "cpu_time"):
        return run[metric] * UNIT_NS[run.get("time_unit", "ns")] / UNIT_NS[unit]
    if metric not in run:
        raise SystemExit(f"interleave.py: case {run['name']!r} has no counter {metric!r}")
    return run[metric]


def main(argv):
    args = parse_args(argv)
    # case name -> list of per-launch lists of samples
    cases = {}
    skipped = {}
    unit = args.unit
    for launch in range(args.launches):
        order = args.cmd[launch % len(args.cmd):] + args.cmd[:launch % len(args.cmd)]
        for command in order:
            doc = run_once(command, args.repetitions, args.pin)
            per_case = {}
            for run in doc.get("benchmarks", []):
                if run.get("run_type") == "aggregate":
                    continue
                name = run.get("run_name", run["name"])
                if run.get("error_occurred"):
                    skipped[name] = run.get("error_message", "skipped")
                    continue
                if unit is None:
                    unit = run.get("time_unit", "ns")
                per_case.setdefault(name, []).append(sample(run, args.metric, unit))
            for name, values in per_case.items():
                cases.setdefault(name, []).append(values)

    def median(name):
        return statistics.median(v for launch in cases[name] for v in launch)

    label = unit if args.metric in ("real_time", "cpu_time") else args.metric
    print(f"{args.launches} launches x {args.repetitions} repetitions, interleaved"
          + (f", pinned to CPU {args.pin}" if args.pin else ""))
    extra = "".join(f" vs {c[0]} |" for c in args.columns)
    print(f"| case | median ({label}) | range of launch medians | n |{extra}")
    print("| --- | --- | --- | --- |" + " --- |" * len(args.columns))
    for name in sorted(cases):
        launch_medians = [statistics.median(v) for v in cases[name]]
        n = sum(len(v) for v in cases[name])
        row = (f"| {name} | {median(name):.4g} | {min(launch_medians):.4g}–"
               f"{max(launch_medians):.4g} | {n} |")
        for _, pattern, replacement in args.columns:
            partner = pattern.sub(replacement, name)
            ok = partner != name and partner in cases
            row += (f" {median(name) / median(partner):.2f}x ({median(name) - median(partner):+.3g}) |"
                    if ok else " - |")
        print(row)
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | |" + " |" * len(args.columns))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"unit": label, "cases": cases, "skipped": skipped}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
