#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`kiln profile` end to end: figures that neither hold the first call nor count a nanosecond twice.

  vm      a VM program (configs/runs/vm_mlp.yaml): its calls' rows are nested in the call they
          ran in ("Nested in": "main", or "dense_relu" for that VM function's kernels), each
          call holds the time of its nested rows, and the top-level rows (the main calls) add up
          to no more than the device total, in the JSON and in the table's Sum row.
  opencl  an OpenCL kernel on PoCL with fresh program caches, so that the first call builds the
          program: the warm-up call took the build, the report says it was excluded (table and
          JSON), and no profiled call comes near the build's time.

Usage: profile_cli_test.py vm|opencl --kiln KILN --config RUN.yaml [--work DIR]
Exit 0 when every check holds, 1 otherwise (each failed check is printed with the output).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

CALLS = 3
failures = []


def check(ok, what, detail=""):
    """Records `what` as failed unless `ok`."""
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what + ("\n" + detail if detail else ""))


class KilnFailed(Exception):
    """kiln exited with an error (already recorded as a failure)."""


def kiln(args, env):
    """Runs kiln with `args`; its stdout. Raises KilnFailed unless it exits 0."""
    run = subprocess.run([ARGS.kiln] + args, capture_output=True, text=True, env=env,
                         timeout=240, check=False)
    check(run.returncode == 0, f"kiln {' '.join(args)} exits 0 (got {run.returncode})",
          run.stdout + run.stderr)
    if run.returncode != 0:
        raise KilnFailed()
    return run.stdout


def value(metric):
    """The number or string inside a JSON metric ({"microseconds": 1.5} -> 1.5)."""
    (kind, v), = metric.items()
    return v


def duration(row):
    return value(row["Duration (us)"])


def table_row(table, name):
    """The cells of the table's first row named `name`, split on runs of 2+ spaces."""
    for line in table.splitlines():
        if line.startswith(name + " "):
            return re.split(r"\s{2,}", line.strip())
    return None


def number(cell):
    return float(cell.replace(",", ""))


def check_warmup_note(doc, table):
    config = doc["configuration"]
    check(value(config.get("Warm-up calls (excluded)", {"count": None})) == 1,
          "the JSON's configuration says one warm-up call was excluded", json.dumps(config))
    check("Warm-up duration (us)" in config, "the JSON's configuration gives the warm-up's time")
    check(re.search(r"^Warm-up calls \(excluded\): 1$", table, re.M) is not None,
          "the table's configuration says one warm-up call was excluded", table)


def test_vm(env):
    doc = json.loads(kiln(["profile", "--json", "--calls", str(CALLS), ARGS.config], env))
    calls = doc["calls"]
    top = [c for c in calls if "Nested in" not in c]
    check([value(c["Name"]) for c in top] == ["main"] * CALLS,
          f"the top-level rows are the {CALLS} calls of main",
          json.dumps([value(c["Name"]) for c in top]))
    # mlp.kvmt's main calls the VM function dense_relu, whose kernels are nested in it in turn.
    parents = {value(c["Nested in"]) for c in calls if "Nested in" in c}
    check(parents == {"main", "dense_relu"}, "kernels are nested in main and in dense_relu",
          json.dumps(sorted(parents)))
    (device, total_row), = doc["device_metrics"].items()
    total = duration(total_row)
    top_sum = sum(duration(c) for c in top)
    check(top_sum <= total, f"the top-level rows ({top_sum:.1f} us) fit in Total ({total:.1f} us)")
    # Rows come in the order calls end, so a call's nested rows come before it: each call holds
    # the time of the rows nested in it that started after it (their intervals lie inside its).
    pending, contained = [], True
    for c in calls:
        start = value(c["Start (us)"])
        children = [p for p in pending
                    if value(p["Nested in"]) == value(c["Name"]) and value(p["Start (us)"]) >= start]
        inside = sum(duration(p) for p in children)
        if inside > duration(c) + 0.01:
            contained = False
            print(f"{value(c['Name'])} at {start} us: {duration(c)} us, its rows {inside} us")
        pending = [p for p in pending if not any(p is q for q in children)]
        if "Nested in" in c:
            pending.append(c)
    check(contained, "each call holds the time of the rows nested in it")
    check(not pending, "every nested row has the call it names around it",
          json.dumps([(value(p["Name"]), value(p["Nested in"])) for p in pending]))
    table = kiln(["profile", "--calls", str(CALLS), ARGS.config], env)
    print(table)
    sum_row, total_cells = table_row(table, "Sum"), table_row(table, "Total")
    check(sum_row is not None and total_cells is not None, "the table has Sum and Total rows")
    if sum_row and total_cells:
        check(number(sum_row[1]) <= number(total_cells[1]),
              f"the table's Sum ({sum_row[1]} us) is at most its Total ({total_cells[1]} us)")
        check(number(sum_row[2]) <= 100, f"the Sum's Percent ({sum_row[2]}) is at most 100")
        check(int(sum_row[3]) == CALLS, f"the Sum's Count is the {CALLS} main calls ({sum_row[3]})")
    check(re.search(r"^Name .*  Nested in  ", table, re.M) is not None,
          "the table has a Nested in column")
    check_warmup_note(doc, table)


def test_opencl(env):
    # Fresh caches: PoCL's and Kiln's program caches would otherwise skip the compiler.
    for var in ("POCL_CACHE_DIR",):
        shutil.rmtree(env[var], ignore_errors=True)
        os.makedirs(env[var])
    env.pop("KILN_OPENCL_CACHE_DIR", None)
    doc = json.loads(kiln(["profile", "--json", "--calls", str(CALLS), ARGS.config], env))
    warmup_us = value(doc["configuration"]["Warm-up duration (us)"])
    durations = [duration(c) for c in doc["calls"]]
    print(f"warm-up {warmup_us:.1f} us; profiled calls {durations} us")
    check(len(durations) == CALLS, f"{CALLS} profiled calls, the warm-up not among them")
    # The warm-up built the program: it took far longer than a call. Without a build in it (a
    # warm cache somewhere) this test would prove nothing, so that is a failure too.
    check(warmup_us >= 20_000, f"the warm-up ({warmup_us / 1e3:.1f} ms) holds the program build")
    slowest = max(durations) if durations else float("inf")
    check(slowest < warmup_us / 4,
          f"no profiled call ({slowest / 1e3:.2f} ms at most) comes near the first call's build "
          f"({warmup_us / 1e3:.1f} ms): it is not in the figures")
    table = kiln(["profile", "--calls", str(CALLS), ARGS.config], env)
    print(table)
    check_warmup_note(doc, table)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["vm", "opencl"])
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--work", default="", help="folder for the opencl case's fresh caches")
    ARGS = parser.parse_args()
    env = dict(os.environ, KILN_LOG="warn")
    try:
        if ARGS.case == "vm":
            test_vm(env)
        else:
            env["POCL_CACHE_DIR"] = os.path.join(ARGS.work, "pocl-cache")
            test_opencl(env)
    except KilnFailed:
        pass  # recorded, with kiln's output
    for f in failures:
        print("\nFAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
