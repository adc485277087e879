# SPDX-License-Identifier: Apache-2.0
"""`kiln compare` and `kiln run --benchmark-out` end to end (issue 21 items 3 and 4).

    compare_test.py verdicts KILN
        Synthetic Google Benchmark files: exit codes, verdicts and the messages for bad input.
    compare_test.py compare_py KILN EXAMPLES [PYTHON...]
        Two `kiln run --benchmark-out` files of the relu example read as is by compare.py from
        Debian's libbenchmark-tools (/usr/share/benchmark/compare.py, or $KILN_GBENCH_COMPARE),
        run with the first PYTHON that has scipy (compare.py imports it). Exits 77 (skipped, with
        the reason) where either is missing.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

SKIP = 77


def gbench(benchmarks, unit="ns"):
    """A Google Benchmark document: {name: [per-repeat times]}."""
    out = []
    for name, times in benchmarks.items():
        for i, t in enumerate(times):
            out.append({"name": name, "run_name": name, "run_type": "iteration",
                        "repetitions": len(times), "repetition_index": i, "threads": 1,
                        "iterations": 10, "real_time": t, "cpu_time": t, "time_unit": unit})
    return {"context": {"date": "2026-11-24T12:00:00+00:00"}, "benchmarks": out}


def write(folder, name, doc):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def compare(kiln, *args):
    p = subprocess.run([kiln, "compare", *args], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def expect(kiln, code, needles, *args):
    got, text = compare(kiln, *args)
    ok = got == code and all(n in text for n in needles)
    if not ok:
        print(f"FAIL: kiln compare {' '.join(args)}: exit {got} (expected {code}), "
              f"expected {needles} in:\n{text}")
    return ok


def busy_run(rng, n, scale=1.0, noise=0.6, drift_after=None, drift=1.0, pressure=0.9):
    """n repeats of a kernel on a busy machine: a 10 ms floor, one-sided noise (the waits for a
    CPU, up to +`noise`), `scale` times the work, and from repeat `drift_after` on a machine
    `drift` times slower; every repeat under `pressure`."""
    times = []
    for i in range(n):
        t = 10e6 * scale * (1 + rng.uniform(0, noise))
        if drift_after is not None and i >= drift_after:
            t *= drift
        times.append(t)
    doc = gbench({"k": times})
    for entry in doc["benchmarks"]:
        entry["kiln_cpu_pressure"] = pressure
    return doc


def verdicts_from_blocks(kiln, d):
    """With 40 or more repeats on each side, a busy machine is judged by the blocks of 5
    repeats of each run: a real slowdown fails even under heavy noise, an unchanged kernel
    under steady noise passes, heavy noise leaves an unchanged kernel could not tell (saying how
    many repeats would decide), and a run whose machine changed halfway could not tell."""
    rng = random.Random(35)
    ok = True
    a = write(d, "busy_a.json", busy_run(rng, 40))
    same = write(d, "busy_same.json", busy_run(rng, 40))
    slower = write(d, "busy_slower.json", busy_run(rng, 40, scale=1.3))
    drifted = write(d, "busy_drift.json", busy_run(rng, 40, noise=0.1, drift_after=20,
                                                   drift=1.4))
    steady_a = write(d, "steady_a.json", busy_run(rng, 40, noise=0.1))
    steady_b = write(d, "steady_b.json", busy_run(rng, 40, noise=0.1))
    ok &= expect(kiln, 1, ["slower, significant", "1 significant regression: k"], a, slower)
    ok &= expect(kiln, 0, ["no change", "no significant regression"], steady_a, steady_b)
    ok &= expect(kiln, 4, ["could not tell", "repeats on each side would decide it",
                           "drift", "within the runs"], a, same)
    ok &= expect(kiln, 4, ["could not tell", "inside the noise band", "drift"], steady_a,
                 drifted)
    got, text = compare(kiln, "--json", a, slower)
    row = json.loads(text)["benchmarks"][0] if got == 1 else {}
    if not (row.get("blocks") == [8, 8] and row.get("direction") == "slower"
            and 0 < row.get("drift", -1) < 0.3 and row.get("could_not_tell") is False):
        print(f"FAIL: --json of blocked runs: exit {got}:\n{text}")
        ok = False
    got, text = compare(kiln, "--json", steady_a, drifted)
    doc = json.loads(text) if got == 4 else {}
    if not (doc.get("could_not_tell") == ["k"] and doc["benchmarks"][0]["drift"] > 0.1):
        print(f"FAIL: --json of a drifting run: exit {got}:\n{text}")
        ok = False
    return ok


def verdicts(kiln):
    base = [100.0, 102, 99, 101, 100.5, 98.5, 101.5, 99.5]
    slower = [t * 1.2 for t in base]
    faster = [t * 0.8 for t in base]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        a = write(d, "a.json", gbench({"k/1024/float32/cpu:0": base, "gone": base}))
        same = write(d, "same.json", gbench({"k/1024/float32/cpu:0": base[::-1]}))
        slow = write(d, "slow.json", gbench({"k/1024/float32/cpu:0": slower, "new": base}))
        fast = write(d, "fast.json", gbench({"k/1024/float32/cpu:0": faster}))
        # The same times in microseconds: units are converted.
        slow_us = write(d, "slow_us.json",
                        gbench({"k/1024/float32/cpu:0": [t / 1e3 for t in slower]}, "us"))
        few_a = write(d, "few_a.json", gbench({"k": [100.0, 101, 99]}))
        few_b = write(d, "few_b.json", gbench({"k": [150.0, 151, 149]}))
        # `kiln run --json` nests the document under "benchmark".
        run_json = write(d, "run.json", {"function": "k", "benchmark": gbench(
            {"k/1024/float32/cpu:0": slower})})
        aggregates_only = write(d, "agg.json", {"benchmarks": [
            {"name": "k/1024/float32/cpu:0_median", "run_name": "k/1024/float32/cpu:0",
             "run_type": "aggregate", "aggregate_name": "median", "real_time": 150,
             "cpu_time": 150, "time_unit": "ns"}]})
        ok &= expect(kiln, 0, ["no change, not significant", "only in A: gone",
                               "no significant regression"], a, same)
        ok &= expect(kiln, 1, ["+20.0%", "slower, significant", "only in B: new",
                               "1 significant regression: k/1024/float32/cpu:0"], a, slow)
        ok &= expect(kiln, 1, ["slower, significant"], a, slow_us)
        ok &= expect(kiln, 1, ["slower, significant"], a, run_json)
        ok &= expect(kiln, 0, ["-20.0%", "faster, significant"], a, fast)
        # A 20% regression within a 25% threshold is no change.
        ok &= expect(kiln, 0, ["no change, significant"], a, slow, "--threshold", "25%")
        ok &= expect(kiln, 1, ["slower, significant"], a, slow, "--metric", "min")
        # Too few repeats to bound the interval: could not tell (exit 4), saying what would.
        ok &= expect(kiln, 4, ["could not tell", "3 and 3 repeats cannot bound a 95% interval",
                               "time at least 4 repeats on each side",
                               "could not tell for 1 benchmark: k"], few_a, few_b)
        # Noise: the same 20% slowdown, but B ran while threads waited for a CPU 30% of the
        # time (kiln_cpu_pressure), or A's machine had a load of 3 on 2 CPUs: with 8 repeats a
        # side, could not tell (exit 4, not 0), and the note says what would decide.
        pressed = gbench({"k/1024/float32/cpu:0": slower})
        for entry in pressed["benchmarks"]:
            entry["kiln_cpu_pressure"] = 0.3
        pressed_b = write(d, "pressed.json", pressed)
        ok &= expect(kiln, 4, ["could not tell, significant", "too busy (CPU pressure 30% in B)",
                               "for 8 and 8 repeats", "with 40 or more repeats on each side",
                               "kiln ab", "busy"], a, pressed_b)
        # Pressure under the noise verdict's 10% is an allowance of its own size.
        mild = gbench({"k/1024/float32/cpu:0": [t * 1.07 for t in base]})
        for entry in mild["benchmarks"]:
            entry["kiln_cpu_pressure"] = 0.08
        ok &= expect(kiln, 4, ["could not tell, significant", "noise band of 8.0%",
                               "CPU pressure 8.0% in B", "more repeats would not decide it"], a,
                     write(d, "mild.json", mild))
        loaded = gbench({"k/1024/float32/cpu:0": base, "gone": base})
        loaded["context"].update({"load_avg": [3.0, 2.0, 1.0], "num_cpus": 2})
        loaded_a = write(d, "loaded.json", loaded)
        ok &= expect(kiln, 4, ["could not tell", "load 1.5 per CPU in A"], loaded_a, slow)
        # A quiet machine (pressure 1%) leaves the threshold as the band: still a regression.
        quiet = gbench({"k/1024/float32/cpu:0": slower})
        for entry in quiet["benchmarks"]:
            entry["kiln_cpu_pressure"] = 0.01
        ok &= expect(kiln, 1, ["slower, significant"], a, write(d, "quiet.json", quiet))
        # An untested slowdown (aggregates only) is could not tell, never a pass.
        ok &= expect(kiln, 4, ["slower, untested", "no per-repeat times"], a, aggregates_only)
        # Issue 35: a run's 5 repeats scaled by exactly 1.5x is never "no regression" (exit 0):
        # a regression on a quiet machine, could not tell on a busy one.
        five = [100.0, 103, 98, 101, 99]
        five_a = write(d, "five_a.json", gbench({"k": five}))
        ok &= expect(kiln, 1, ["+50.0%", "slower, significant"], five_a,
                     write(d, "five_b.json", gbench({"k": [t * 1.5 for t in five]})))
        busy_five = gbench({"k": [t * 1.5 for t in five]})
        for entry in busy_five["benchmarks"]:
            entry["kiln_cpu_pressure"] = 0.6
        ok &= expect(kiln, 4, ["could not tell", "with 40 or more repeats on each side"], five_a,
                     write(d, "five_busy.json", busy_five))
        ok &= verdicts_from_blocks(kiln, d)
        got, text = compare(kiln, "--json", a, slow)
        doc = json.loads(text) if got == 1 else {}
        row = doc.get("benchmarks", [{}])[0]
        # scipy.stats.mannwhitneyu: exact for 8 and 8 without ties, U = 0 -> 2 / C(16, 8).
        # The interval of B/A: with 8 and 8 repeats (exact U distribution, P(U <= 13) <= 0.025)
        # the 14th to the 51st of the 64 pairwise ratios, all above 1.
        if not (abs(row.get("p_value", 1) - 2 / 12870) < 1e-15 and row.get("p_exact")
                and doc.get("regressions") == ["k/1024/float32/cpu:0"]
                and 1 < row.get("ratio_low", 0) < 1.2 < row.get("ratio_high", 0)
                and row.get("direction") == "slower" and row.get("detectable", 1) < 0.2):
            print(f"FAIL: --json: {text}")
            ok = False
        # Bad input: exit 2 naming the file and what is wrong.
        missing = os.path.join(d, "missing.json")
        ok &= expect(kiln, 2, [f"{missing}: cannot read"], missing, a)
        ok &= expect(kiln, 2, [f"{write(d, 'bad.json', '{nope')}: not JSON"], a,
                     os.path.join(d, "bad.json"))
        nob = write(d, "nob.json", {"context": {}})
        ok &= expect(kiln, 2, [f"{nob}: no \"benchmarks\" array"], nob, a)
        empty = write(d, "empty.json", {"benchmarks": []})
        ok &= expect(kiln, 2, [f"{empty}: holds no benchmark results"], a, empty)
        unit = write(d, "unit.json", gbench({"k": [1.0]}, "fortnights"))
        ok &= expect(kiln, 2, [f"{unit}: benchmarks[0]: unknown time_unit 'fortnights'"], a, unit)
        ok &= expect(kiln, 2, ["no benchmark is in both files", "has k"], a, few_b)
        ok &= expect(kiln, 2, ["--threshold: expected a percentage"], a, same,
                     "--threshold", "lots")
        ok &= expect(kiln, 2, ["--metric"], a, same, "--metric", "p90")
        ok &= refused_times(kiln, d, a)
        ok &= escaped_names(kiln, d)
    return ok


def refused_times(kiln, d, a):
    """Issue 37: a contender (or baseline) with a time of 0 or less is refused (exit 2, naming
    the file and the entry), never 'faster' with exit 0; aggregates too."""
    ok = True
    for label, times in (("zero", [0.0] * 8), ("negative", [-100.0, 102, 99, 101, 100, 98, 101,
                                                             99])):
        bad = write(d, f"{label}.json", gbench({"k/1024/float32/cpu:0": times}))
        ok &= expect(kiln, 2, [f"{bad}: benchmarks[0] ('k/1024/float32/cpu:0')",
                               "a time of 0 or less"], a, bad)
        ok &= expect(kiln, 2, [f"{bad}: benchmarks[0]", "a time of 0 or less"], bad, a)
    zero_aggregate = write(d, "zero_agg.json", {"benchmarks": [
        {"name": "k/1024/float32/cpu:0_median", "run_name": "k/1024/float32/cpu:0",
         "run_type": "aggregate", "aggregate_name": "median", "real_time": 0,
         "cpu_time": 0, "time_unit": "ns"}]})
    ok &= expect(kiln, 2, [f"{zero_aggregate}: benchmarks[0]", "a time of 0 or less"], a,
                 zero_aggregate)
    return ok


def escaped_names(kiln, d):
    """Issue 37: ANSI escapes and other control characters in benchmark names and error
    messages never reach the terminal from the text report: they are written out (\\x1b);
    the JSON report keeps the names as they are (its encoder escapes them)."""
    evil = "k\x1b[2J\x1b]0;owned\x07\u009b31m\r"
    base = [100.0, 102, 99, 101, 100.5, 98.5, 101.5, 99.5]
    a = write(d, "evil_a.json", gbench({evil: base, "gone\x1b[1A": base}))
    b_doc = gbench({evil: [t * 1.2 for t in base]})
    b_doc["benchmarks"].append({"name": "gone\x1b[1A", "run_name": "gone\x1b[1A",
                                "error_occurred": True, "error_message": "died\x1b[31m red"})
    b = write(d, "evil_b.json", b_doc)
    got, text = compare(kiln, a, b)
    ok = got == 1 and "\x1b" not in text and "\x07" not in text and "\r" not in text \
        and "\u009b" not in text and "k\\x1b[2J\\x1b]0;owned\\x07\\u009b31m\\x0d" in text \
        and "failed in B: gone\\x1b[1A: died\\x1b[31m red" in text
    if not ok:
        print(f"FAIL: control characters in names: exit {got}:\n{text!r}")
    got, text = compare(kiln, "--json", a, b)
    doc = json.loads(text) if got == 1 else {}
    if doc.get("regressions") != [evil]:
        print(f"FAIL: --json must keep the name as it is: exit {got}:\n{text!r}")
        ok = False
    return ok


def python_with_scipy(candidates):
    for py in candidates:
        if py and subprocess.run([py, "-c", "import scipy, numpy"],
                                 capture_output=True).returncode == 0:
            return py
    return None


def compare_py(kiln, examples, pythons):
    script = os.environ.get("KILN_GBENCH_COMPARE", "/usr/share/benchmark/compare.py")
    if not os.path.exists(script):
        print(f"skipped: no {script} (apt package libbenchmark-tools; tools/install-deps.sh)")
        return SKIP
    py = python_with_scipy(pythons + [sys.executable])
    if not py:
        print(f"skipped: compare.py needs scipy; none of {pythons + [sys.executable]} has it")
        return SKIP
    config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs",
                          "runs", "relu.yaml")
    env = dict(os.environ, KILN_EXAMPLES=os.path.abspath(examples))
    with tempfile.TemporaryDirectory() as d:
        outs = []
        for i in range(2):
            out = os.path.join(d, f"run{i}.json")
            subprocess.run([kiln, "run", "--no-progress", "--benchmark-out", out, config],
                           check=True, env=env, stdout=subprocess.DEVNULL, timeout=120)
            outs.append(out)
        doc = json.load(open(outs[0]))
        names = {b["name"] for b in doc["benchmarks"]}
        want = {"relu/1048576/float32/cpu:0" + s for s in ["", "_mean", "_median", "_stddev",
                                                          "_cv"]}
        cv = [b for b in doc["benchmarks"] if b.get("aggregate_name") == "cv"]
        context = doc["context"]
        if (names != want or cv[0]["aggregate_unit"] != "percentage" or not context["caches"]
                or len(context["load_avg"]) != 3 or context["num_cpus"] < 1):
            print(f"FAIL: unexpected document: {json.dumps(doc, indent=1)}")
            return 1
        p = subprocess.run([py, script, "benchmarks", outs[0], outs[1]], capture_output=True,
                           text=True, timeout=120)
        print(p.stdout + p.stderr)
        # compare.py reads both as they are: a row per benchmark and aggregate, and the U-test.
        for needle in ["relu/1048576/float32/cpu:0_pvalue", "relu/1048576/float32/cpu:0_cv",
                       "relu/1048576/float32/cpu:0_median", "OVERALL_GEOMEAN"]:
            if p.returncode != 0 or needle not in p.stdout:
                print(f"FAIL: compare.py exit {p.returncode}, no '{needle}'")
                return 1
        # And kiln compare reads the same files.
        code, text = compare(kiln, outs[0], outs[1])
        if code not in (0, 1, 4) or "relu/1048576/float32/cpu:0" not in text:
            print(f"FAIL: kiln compare: exit {code}:\n{text}")
            return 1
    return 0


def main():
    if sys.argv[1] == "verdicts":
        ok = verdicts(sys.argv[2])
        print("ok" if ok else "failed")
        return 0 if ok else 1
    return compare_py(sys.argv[2], sys.argv[3], sys.argv[4:])


if __name__ == "__main__":
    sys.exit(main())
