# SPDX-License-Identifier: Apache-2.0
"""Enough of Google Benchmark's command line and JSON output for a Python peer of a C++
benchmark, so that bench/interleave.py runs it as a --cmd: --benchmark_filter=REGEX,
--benchmark_min_time=SECONDS, --benchmark_repetitions=N, --benchmark_enable_random_interleaving
(each repetition of each case in a shuffled order), --benchmark_out=FILE with
--benchmark_out_format=json (one "iteration" run per repetition). Used by bench/tvm/*_bench.py.
"""
import json
import random
import re
import time


def parse(argv, script, extra=None):
    """Google Benchmark's flags from argv, plus `extra` ({"--flag": default}) as strings."""
    opts = {"filter": ".", "min_time": 0.5, "repetitions": 1, "interleave": False, "out": None}
    extra = dict(extra or {})
    for arg in argv:
        key, _, value = arg.partition("=")
        if key == "--benchmark_filter":
            opts["filter"] = value
        elif key == "--benchmark_min_time":
            opts["min_time"] = float(value.rstrip("s"))
        elif key == "--benchmark_repetitions":
            opts["repetitions"] = int(value)
        elif key == "--benchmark_enable_random_interleaving":
            opts["interleave"] = value in ("true", "1", "")
        elif key == "--benchmark_out":
            opts["out"] = value
        elif key == "--benchmark_out_format":
            if value != "json":
                raise SystemExit(f"{script}: only --benchmark_out_format=json")
        elif key in extra:
            extra[key] = value
        else:
            raise SystemExit(f"{script}: unknown argument {arg!r}")
    return opts, extra


def run(cases, opts, script):
    """Runs `cases` ({name: f(min_time) -> (iterations, ns per iteration[, fields])}) as opts
    say; `fields` (a dict, e.g. cpu_time or bytes_per_second) go into the run's JSON. Prints a
    line per run and writes Google Benchmark's JSON to --benchmark_out."""
    names = [n for n in cases if re.search(opts["filter"], n)]
    runs = [(n, r) for n in names for r in range(opts["repetitions"])]
    if opts["interleave"]:
        random.shuffle(runs)
    results = []
    for name, rep in runs:
        iterations, ns, *fields = cases[name](opts["min_time"])
        results.append({"name": name, "family_index": names.index(name), "run_name": name,
                        "run_type": "iteration", "repetitions": opts["repetitions"],
                        "repetition_index": rep, "threads": 1, "iterations": iterations,
                        "real_time": ns, "cpu_time": ns, "time_unit": "ns",
                        **(fields[0] if fields else {})})
        print(f"{name:40s} {ns:14.4g} ns {iterations:8d}", flush=True)
    doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "executable": script,
                       "library_build_type": "release"},
           "benchmarks": results}
    if opts["out"]:
        with open(opts["out"], "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
