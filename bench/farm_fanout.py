#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Farm fan-out (issue 28; docs/benchmarks.md, "Isolated measurement workers"): the wall time
of `kiln run --jobs N` on a 12-point remote sweep, for N = 1 and 3, on a farm of a `kiln
tracker` and three `kiln rpc-server`s on loopback that this script starts (once per launch,
like kiln_bench_rpc's servers) and stops. Cases, each repetition one whole `kiln run` process:

  BM_Farm_Sweep/jobs:N    the wall time of `kiln run --jobs N --json CONFIG`, from its start
                          to its exit (every point must end "ok", else the script fails)
  BM_Ideal_Sweep/jobs:N   the ideal fan-out, N > 1: a jobs:1 repetition's time / N (paired by
                          repetition index, so it comes from the same launch)
  BM_Floor_Sweep/jobs:N   the floor: the sweep's kernel time (the points' own "time" and
                          "call" steps, summed) / N, from the same repetition: what no
                          fan-out over N servers can go below

The default sweep is tests/cli/sweep/farm_slow.yaml: 12 points of libfaulty.so's `slow`, which
sleeps 20 ms a call (22 calls a point), so the points are sleep-bound and fan out even on a
2-CPU machine; a CPU-bound point would be limited by the CPUs the servers share instead.

It speaks bench/tvm/gbench.py's subset of Google Benchmark's command line, so that
bench/interleave.py runs it as a --cmd (the repetitions of the cases in a shuffled order with
--benchmark_enable_random_interleaving), plus:
  --benchmark_min_time   accepted and ignored: a repetition is one whole sweep
  --kiln=PATH            the kiln tool (default build/bin/kiln)
  --config=PATH          the sweep (default tests/cli/sweep/farm_slow.yaml)
  --examples=DIR         $KILN_EXAMPLES, where libfaulty.so is (default build/tests/cli)
  --jobs=LIST            the values of N (default 1,3)
  --server_cpus=LIST     the CPU each server is pinned to with `taskset -c` (default 1,1,1:
                         three servers sharing CPU 1); its length is the number of servers.
                         The tracker and `kiln run` keep this script's affinity (interleave.py
                         --pin 0 puts them on CPU 0)
Python standard library only, plus bench/tvm/gbench.py. Example:

  python3 bench/interleave.py --pin 0 --unit s --cmd "python3 bench/farm_fanout.py"
"""
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tvm"))
import gbench  # noqa: E402  pylint: disable=wrong-import-position

SCRIPT = "farm_fanout.py"
KEY = "farm"


class Farm:
    """A tracker and one server per entry of `cpus` under KEY, each server pinned to its CPU."""

    def __init__(self, kiln, env, cpus):
        self.kiln, self.env, self.procs = kiln, env, []
        tracker = self._start([kiln, "tracker", "--port", "0"], stdout=subprocess.PIPE)
        line = tracker.stdout.readline()
        match = re.search(r"listening on [\d.]+:(\d+)", line)
        if not match:
            self.close()
            raise SystemExit(f"{SCRIPT}: the tracker did not start: {line!r}")
        self.port = int(match.group(1))
        # The tracker logs on: drain its pipe so that it never blocks on a full one.
        threading.Thread(target=tracker.stdout.read, daemon=True).start()
        for cpu in cpus:
            self._start(["taskset", "-c", str(cpu), kiln, "rpc-server", "--tracker",
                         f"127.0.0.1:{self.port}", "--key", KEY, "--port", "0"],
                        stdout=subprocess.DEVNULL)
        self._wait_for_servers(len(cpus))

    def _start(self, argv, stdout):
        proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                                env=self.env)
        self.procs.append(proc)
        return proc

    def _wait_for_servers(self, count):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            query = subprocess.run([self.kiln, "query", "--tracker", f"127.0.0.1:{self.port}",
                                    "--json"], capture_output=True, text=True, env=self.env)
            if query.returncode == 0 and query.stdout.count(f"server:{KEY}") >= count:
                return
            time.sleep(0.2)
        self.close()
        raise SystemExit(f"{SCRIPT}: {count} servers did not register with the tracker in 30 s")

    def run_env(self):
        """The environment `kiln run` finds the farm by."""
        return dict(self.env, KILN_TRACKER_HOST="127.0.0.1", KILN_TRACKER_PORT=str(self.port),
                    KILN_TRACKER_KEY=KEY)

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sweep_once(kiln, config, jobs, env):
    """Runs the sweep once; returns (wall seconds, kernel seconds, servers used)."""
    start = time.perf_counter()
    proc = subprocess.run([kiln, "run", "--jobs", str(jobs), "--json", config],
                          capture_output=True, text=True, env=env, timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{SCRIPT}: kiln run --jobs {jobs} exited with {proc.returncode}:\n"
                         f"{proc.stderr}")
    points = json.loads(proc.stdout)["points"]
    bad = [p["index"] for p in points if p.get("status") != "ok"]
    if bad:
        raise SystemExit(f"{SCRIPT}: kiln run --jobs {jobs}: points {bad} did not end ok")
    kernel = sum(p["steps_s"]["time"] + p["steps_s"]["call"] for p in points)
    return seconds, kernel, len({p.get("server") for p in points})


def record(name, rep, repetitions, seconds, fields=None):
    """One Google Benchmark "iteration" run of `seconds`."""
    ns = seconds * 1e9
    return {"name": name, "run_name": name, "run_type": "iteration", "repetitions": repetitions,
            "repetition_index": rep, "threads": 1, "iterations": 1, "real_time": ns,
            "cpu_time": ns, "time_unit": "ns", **(fields or {})}


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    opts, extra = gbench.parse(argv, SCRIPT, {
        "--kiln": os.path.join(root, "build/bin/kiln"),
        "--config": os.path.join(root, "tests/cli/sweep/farm_slow.yaml"),
        "--examples": os.path.join(root, "build/tests/cli"),
        "--jobs": "1,3",
        "--server_cpus": "1,1,1"})
    jobs_list = [int(j) for j in extra["--jobs"].split(",")]
    cpus = [int(c) for c in extra["--server_cpus"].split(",")]
    if max(jobs_list) > len(cpus):
        raise SystemExit(f"{SCRIPT}: --jobs {max(jobs_list)} needs as many servers "
                         f"(--server_cpus has {len(cpus)})")
    names = {j: f"BM_Farm_Sweep/jobs:{j}" for j in jobs_list}
    wanted = [j for j in jobs_list if re.search(opts["filter"], names[j])]
    runs = [(j, rep) for j in wanted for rep in range(opts["repetitions"])]
    if opts["interleave"]:
        random.shuffle(runs)
    env = dict(os.environ, KILN_EXAMPLES=os.path.abspath(extra["--examples"]),
               KILN_PROGRESS="never")
    farm = Farm(os.path.abspath(extra["--kiln"]), env, cpus)
    measured = {}
    try:
        # One untimed sweep, so that every server has served a session before the clock runs.
        sweep_once(farm.kiln, extra["--config"], len(cpus), farm.run_env())
        for jobs, rep in runs:
            measured[jobs, rep] = sweep_once(farm.kiln, extra["--config"], jobs, farm.run_env())
            seconds, _, servers = measured[jobs, rep]
            print(f"{names[jobs]:28s} {seconds:8.3f} s  {servers} server(s)", flush=True)
    finally:
        farm.close()

    results = []
    for (jobs, rep), (seconds, kernel, servers) in sorted(measured.items()):
        results.append(record(names[jobs], rep, opts["repetitions"], seconds,
                              {"servers_used": servers, "kernel_s": kernel}))
        results.append(record(f"BM_Floor_Sweep/jobs:{jobs}", rep, opts["repetitions"],
                              kernel / jobs))
        if jobs > 1 and (1, rep) in measured:
            results.append(record(f"BM_Ideal_Sweep/jobs:{jobs}", rep, opts["repetitions"],
                                  measured[1, rep][0] / jobs))
    doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "executable": SCRIPT,
                       "server_cpus": extra["--server_cpus"], "config": extra["--config"]},
           "benchmarks": results}
    if opts["out"]:
        with open(opts["out"], "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
