# SPDX-License-Identifier: Apache-2.0
"""`kiln run` sweeps end to end (issue 21 items 5 and 6): one JSON document and one Google
Benchmark file for every point, `kiln compare` on two sweeps point by point, a failed point in
the contender failing the comparison, and per-point saved files.

    sweep_test.py KILN SOURCE_DIR EXAMPLES
"""
import json
import os
import subprocess
import sys
import tempfile


def run(kiln, env, *args):
    p = subprocess.run([kiln, *args], capture_output=True, text=True, timeout=240, env=env)
    return p.returncode, p.stdout, p.stderr


FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message)


def main():
    kiln, source, examples = sys.argv[1:4]
    env = dict(os.environ, KILN_EXAMPLES=examples, KILN_PROGRESS="never")
    partial = os.path.join(source, "tests/cli/sweep/partial.yaml")
    with tempfile.TemporaryDirectory() as d:
        # --json: one document, every point with its status, device and error.
        code, out, err = run(kiln, env, "run", "--json", partial)
        check(code == 3, f"partial sweep --json: exit {code}, expected 3\n{err}")
        doc = json.loads(out)
        check(doc["sweep"]["points"] == 6 and doc["sweep"]["failed"] == 4,
              f"sweep summary: {doc['sweep']}")
        check([a["name"] for a in doc["sweep"]["axes"]] == ["dtype", "shape"],
              f"axes: {doc['sweep']['axes']}")
        points = doc["points"]
        check([p["status"] for p in points] ==
              ["ok", "ok", "error", "error", "invalid", "invalid"],
              f"statuses: {[p['status'] for p in points]}")
        check([p["exit_code"] for p in points] == [0, 0, 3, 3, 2, 2],
              f"exit codes: {[p['exit_code'] for p in points]}")
        check(points[0]["device"] == "cpu:0" and "median_s" in points[0]["timing"]
              and "noisy" in points[0]["noise"] and "gb_per_s" in points[0]["throughput"],
              f"point 1 lacks device, timing, noise or throughput: {sorted(points[0])}")
        check(points[2]["device"] == "cpu:0" and "float64" in points[2]["error"],
              f"point 3 (failed while running) names its device and error: {points[2]}")
        check("flaot16" in points[4]["error"] and points[4]["settings"] ==
              {"dtype": "flaot16", "shape": "[256]"}, f"point 5: {points[4]}")
        names = [p["name"] for p in points]
        check(len(set(names)) == 6, f"point names are not unique: {names}")
        benchmarks = doc["benchmark"]["benchmarks"]
        run_names = {b["run_name"] for b in benchmarks}
        check(run_names == set(names), f"benchmark run names {run_names} != point names {names}")
        errors = [b for b in benchmarks if b.get("error_occurred")]
        check(len(errors) == 4 and all(b["error_message"] for b in errors),
              f"failed points in the benchmark document: {errors}")

        # Two runs of the same sweep, compared point by point.
        quick = os.path.join(d, "quick.yaml")
        with open(quick, "w") as f:
            f.write(f"""module: {examples}/librelu.so
evaluator: {{number: 2, repeat: 5, min_repeat_ms: 1}}
inputs:
  - {{name: in, shape: [256], init: random, low: -1, high: 1}}
  - {{name: out, shape: [256]}}
outputs:
  - {{name: out, save: saved/out.npy}}
sweep:
  shape: [[256], [64, 64], [128, 128]]
  number: [1, 2]
""")
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        for path in (a, b):
            code, out, err = run(kiln, env, "run", "--benchmark-out", path, quick)
            check(code == 0, f"quick sweep: exit {code}\n{out}{err}")
        for k in range(1, 7):
            check(os.path.exists(os.path.join(d, "saved", f"out.point{k}.npy")),
                  f"point {k} did not save saved/out.point{k}.npy")
        check(not os.path.exists(os.path.join(d, "saved", "out.npy")),
              "a sweep point saved to the shared out.npy")
        code, out, err = run(kiln, env, "compare", "--json", a, b)
        # 0 or 1, or 4 when two runs seconds apart could not tell (issue 35).
        check(code in (0, 1, 4), f"compare: exit {code}\n{err}")
        cmp = json.loads(out)
        compared = [r["name"] for r in cmp["benchmarks"]]
        check(len(compared) == 6 and not cmp["only_in_baseline"] and not cmp["only_in_contender"],
              f"compare did not match the 6 points one to one: {compared}, "
              f"{cmp['only_in_baseline']}, {cmp['only_in_contender']}")
        check(all(r["repeats"] == [5, 5] for r in cmp["benchmarks"]),
              f"repeats per point: {[r['repeats'] for r in cmp['benchmarks']]}")

        # A point that failed in the contender fails the comparison, with its error.
        with open(b) as f:
            broken = json.load(f)
        victim = broken["benchmarks"][0]["run_name"]
        kept = [x for x in broken["benchmarks"] if x.get("run_name") != victim]
        kept.append({"name": victim, "run_name": victim, "run_type": "iteration",
                     "error_occurred": True, "error_message": "the device is gone"})
        broken["benchmarks"] = kept
        c = os.path.join(d, "c.json")
        with open(c, "w") as f:
            json.dump(broken, f)
        code, out, err = run(kiln, env, "compare", a, c)
        check(code == 1, f"compare with a failed point: exit {code}, expected 1\n{out}{err}")
        check(f"failed in B: {victim}: the device is gone" in out,
              f"compare does not name the failed point:\n{out}")
        code, out, err = run(kiln, env, "compare", "--json", a, c)
        cmp = json.loads(out)
        check(code == 1 and cmp["failed_in_contender"] ==
              [{"name": victim, "error": "the device is gone"}] and
              cmp["failed_in_baseline"] == [] and victim not in cmp["only_in_baseline"],
              f"compare --json with a failed point: exit {code}, "
              f"failed_in_contender {cmp['failed_in_contender']}, "
              f"failed_in_baseline {cmp['failed_in_baseline']}")
        code, out, err = run(kiln, env, "compare", c, a)
        check(f"failed in A: {victim}: the device is gone" in out,
              f"compare does not note a point that failed in A:\n{out}")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all sweep checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
