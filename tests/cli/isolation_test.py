#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Isolated measurements and farm fan-out from `kiln run` (issue 28 items 1, 2 and 4).

    isolation_test.py KILN SOURCE_DIR FAULTY_DIR

FAULTY_DIR holds libfaulty.so (tests/cli/faulty_kernel.cc: copy, scale, slow, segfault,
abort, hang). Each case runs the real `kiln` tool; the farm cases start a real `kiln tracker`
and three `kiln rpc-server`s on loopback. Every case has its own $TMPDIR, which must be empty
of Kiln's directories at the end, and the worker processes a run names must be gone.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

FAILURES = []
# Session processes each farm server keeps started ahead (kiln rpc-server's default, given
# explicitly): a server has that many children while it serves no session.
PRESTARTED = 1


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message)


def run(kiln, env, *args, timeout=120):
    p = subprocess.run([kiln, *args], capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def no_leftovers(tmp, text, what, allowed=()):
    left = [n for n in os.listdir(tmp) if n.startswith("kiln") and n not in allowed]
    check(not left, f"{what}: left in $TMPDIR: {left}")
    for pid in re.findall(r"\(pid (\d+)\)", text):
        check(not os.path.exists(f"/proc/{pid}"), f"{what}: worker {pid} still runs")


def sweep_with_faults(kiln, source, env, tmp):
    config = os.path.join(source, "tests/cli/sweep/faulty.yaml")
    bench = os.path.join(tmp, "bench.json")
    code, out, err = run(kiln, env, "run", "--json", "--point-timeout", "2",
                         "--benchmark-out", bench, config)
    check(code == 3, f"faulty sweep: exit {code}, expected 3\n{err}")
    points = json.loads(out)["points"]
    statuses = [p["status"] for p in points]
    check(statuses == ["ok", "crashed", "ok", "hung", "crashed", "ok"], f"statuses: {statuses}")
    for p in points:
        if p["status"] == "ok":
            check(p["timing"]["median_s"] > 0, f"a good point has no timing: {p}")
    messages = {p["settings"]["function"]: p.get("error", "") for p in points}
    for function, words in {"segfault": ["SIGSEGV", "'segfault'", "cpu:0", "plugin"],
                            "abort": ["SIGABRT", "'abort'"],
                            "hang": ["'hang'", "did not finish within 2 s"]}.items():
        for word in words:
            check(word in messages[function], f"{function}'s error lacks {word!r}: "
                                              f"{messages[function]!r}")
    benchmarks = json.load(open(bench))["benchmarks"]
    # Numbered as Google Benchmark numbers them: a family per function, in point order.
    numbers = sorted({(b["family_index"], b["per_family_instance_index"], b["run_name"])
                      for b in benchmarks})
    check([(f, i) for f, i, _ in numbers] == [(f, 0) for f in range(6)]
          and [n.split("/")[0] for _, _, n in numbers] == [p["settings"]["function"]
                                                           for p in points],
          f"family_index / per_family_instance_index: {numbers}")
    failed = {b["run_name"] for b in benchmarks if b.get("error_occurred")}
    check(len(failed) == 3, f"--benchmark-out marks {len(failed)} failed points, expected 3")
    no_leftovers(tmp, out, "faulty sweep --json")
    # The table: each failure named beneath it, the count of points ok.
    code, out, err = run(kiln, env, "run", "--point-timeout", "2", config)
    check(code == 3, f"faulty sweep (table): exit {code}")
    check("crashed (exit 3)" in out and "hung (exit 3)" in out, f"table:\n{out}")
    check(re.search(r"point 2 \(function=segfault\): .*died of SIGSEGV", out) is not None,
          f"the table names point 2's crash:\n{out}")
    check("3 of 6 points ok" in out, f"table summary:\n{out}")
    no_leftovers(tmp, out, "faulty sweep")


def single_runs(kiln, source, env, tmp, faulty_dir):
    sweep_config = os.path.join(source, "tests/cli/sweep/faulty.yaml")
    config = os.path.join(tmp, "segfault.yaml")
    with open(config, "w") as f:
        f.write(f"module: {faulty_dir}/libfaulty.so\nfunction: segfault\ninputs:\n"
                "  - {name: in, shape: [16]}\n  - {name: out, shape: [16]}\n")
    # In-process (a single run's default): the process dies of the signal, naming the kernel.
    code, out, err = run(kiln, env, "run", config)
    check(code == -signal.SIGSEGV, f"in-process segfault: exit {code}, expected -SIGSEGV")
    check("kiln: SIGSEGV" in err and "'segfault' on cpu:0 (plugin cpu)" in err
          and "--isolation process" in err, f"in-process crash note:\n{err}")
    # Isolated: a runtime error (exit 3) naming the signal; nothing left behind.
    code, out, err = run(kiln, env, "run", "--isolation", "process", config)
    check(code == 3 and "died of SIGSEGV" in err, f"isolated segfault: exit {code}\n{err}")
    no_leftovers(tmp, err, "isolated single run")
    # kiln profile: in-process by default (the crash note), in a child with --isolation process.
    code, out, err = run(kiln, env, "profile", "--isolation", "process", config)
    check(code == 3 and "'segfault' on cpu:0 (plugin cpu)" in err
          and "died of SIGSEGV (signal 11) in its worker process" in err,
          f"kiln profile --isolation process on a segfault: exit {code}\n{err}")
    code, out, err = run(kiln, env, "profile", config)
    check(code == -signal.SIGSEGV and "kiln: SIGSEGV" in err, f"kiln profile: exit {code}\n{err}")
    # --jobs is for remote sweeps: a local sweep refuses it before anything runs (its points
    # would disturb each other's timing); a single run has one point and ignores it.
    code, out, err = run(kiln, env, "run", "--jobs", "2", sweep_config)
    check(code == 2 and "--jobs 2:" in err and "one at a time" in err,
          f"a local sweep with --jobs 2: exit {code}\n{err}")
    good = os.path.join(tmp, "copy.yaml")
    with open(good, "w") as f:
        f.write(f"module: {faulty_dir}/libfaulty.so\nfunction: copy\ninputs:\n"
                "  - {name: in, shape: [16]}\n  - {name: out, shape: [16]}\n")
    code, out, err = run(kiln, env, "run", "--jobs", "2", good)
    check(code == 0, f"a single run with --jobs 2: exit {code}\n{err}")


def child_count(pid):
    """The child processes of process `pid`, all its threads' (the children file lists those
    of one thread each)."""
    count = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                count += len(f.read().split())
    except OSError:
        pass
    return count


class Farm:
    """A tracker and three servers under the key 'farm'."""

    def __init__(self, kiln, env, servers=3):
        self.procs = []
        tracker = subprocess.Popen([kiln, "tracker", "--port", "0"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
        self.procs.append(tracker)
        line = tracker.stdout.readline()
        m = re.search(r"listening on [\d.]+:(\d+)", line)
        if not m:
            raise RuntimeError(f"tracker: {line}")
        self.port = int(m.group(1))
        self.servers = []
        for _ in range(servers):
            server = subprocess.Popen(
                [kiln, "rpc-server", "--tracker", f"127.0.0.1:{self.port}", "--key", "farm",
                 "--port", "0", "--prestarted-sessions", str(PRESTARTED)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            self.procs.append(server)
            self.servers.append(server)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            q = subprocess.run([kiln, "query", "--tracker", f"127.0.0.1:{self.port}", "--json"],
                               capture_output=True, text=True, env=env)
            if q.returncode == 0 and q.stdout.count("server:farm") >= servers:
                return
            time.sleep(0.2)
        raise RuntimeError("the servers did not register")

    def env(self, env, key="farm"):
        return dict(env, KILN_TRACKER_HOST="127.0.0.1", KILN_TRACKER_PORT=str(self.port),
                    KILN_TRACKER_KEY=key)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def farm_fan_out(kiln, source, env, tmp):
    killed = -1
    farm = Farm(kiln, env)
    try:
        config = os.path.join(source, "tests/cli/sweep/farm.yaml")
        bench = os.path.join(tmp, "farm-bench.json")
        code, out, err = run(kiln, farm.env(env), "run", "--jobs", "3", "--json",
                             "--benchmark-out", bench, config)
        check(code == 0, f"farm sweep: exit {code}\n{err}")
        points = json.loads(out)["points"]
        check([p["index"] for p in points] == list(range(12)), "points in point order")
        check(all(p["status"] == "ok" for p in points), f"{[p['status'] for p in points]}")
        servers = {p.get("server") for p in points}
        check(None not in servers and len(servers) >= 2,
              f"each point names its server, several servers used: {servers}")
        entries = json.load(open(bench))["benchmarks"]
        names = {b["run_name"] for b in entries}
        check(len(names) == 12, f"--benchmark-out has {len(names)} points, expected 12")
        check(all(b.get("kiln_server") in servers for b in entries),
              "every --benchmark-out entry names its point's server (kiln_server)")

        # A server killed mid-sweep: its point is tried again elsewhere, none lost or doubled.
        slow = os.path.join(source, "tests/cli/sweep/farm_slow.yaml")
        sweep = subprocess.Popen([kiln, "run", "--jobs", "3", "--json", slow],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=farm.env(env))
        # Killed while it serves a point: a server with a session has its session worker as
        # a child process (kiln-rpc-session) beside the one it keeps started ahead (which every
        # server has, serving or not: under ASan the sweep took 1 s to start, and a server killed
        # for its pool's process alone had served no point); 0.1 s in, the point is
        # mid-measurement.
        victim = None
        deadline = time.monotonic() + 30
        while victim is None and time.monotonic() < deadline and sweep.poll() is None:
            for server in farm.servers:
                if child_count(server.pid) > PRESTARTED:
                    victim = server
                    break
            time.sleep(0.02)
        check(victim is not None, "a server took a session")
        if victim is not None:
            time.sleep(0.1)
            victim.kill()
            killed = victim.pid
        out, err = sweep.communicate(timeout=120)
        check(sweep.returncode == 0, f"farm sweep with a lost server: exit {sweep.returncode}\n"
                                     f"{err}")
        points = json.loads(out)["points"]
        check(len(points) == 12 and all(p["status"] == "ok" for p in points),
              f"every point measured once: {[p['status'] for p in points]}")
        retried = [p for p in points if p.get("attempts", 1) > 1]
        check(retried and all("lost the connection" in " ".join(p["retried_because"])
                              for p in retried),
              f"a point of the killed server was tried again: {[p.get('attempts') for p in points]}"
              f"\n{err}")
        check("trying again on another server" in err or "tried again" in err,
              f"the retry is said in the output:\n{err}")
    finally:
        farm.close()

    # No server for the key: a clear wait message, and Ctrl-C stops the wait.
    farm = Farm(kiln, env, servers=0)
    try:
        waiting = subprocess.Popen([kiln, "run", "--jobs", "2", config], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True,
                                   env=farm.env(env, key="nobody"))
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(waiting.stderr), daemon=True)
        reader.start()
        # The notice comes 3 s into the wait (later under a sanitizer, which starts slower).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("waiting for" in x for x in lines):
            time.sleep(0.1)
        waiting.send_signal(signal.SIGINT)
        start = time.monotonic()
        waiting.wait(timeout=30)
        reader.join(10)
        err = "".join(lines)
        check(time.monotonic() - start < 10, "Ctrl-C stops the wait promptly")
        check("waiting for a 'nobody' server" in err and "no server is registered" in err
              and "Ctrl-C" in err, f"wait message:\n{err}")
        check(waiting.returncode != 0, "an interrupted sweep does not succeed")
    finally:
        farm.close()
    # What a server killed with SIGKILL cannot remove: its own work directory.
    no_leftovers(tmp, "", "farm",
                 [n for n in os.listdir(tmp) if n.startswith(f"kiln-rpc-0-{killed}-")])


def main():
    kiln, source, faulty_dir = (os.path.abspath(a) for a in sys.argv[1:4])
    cases = sys.argv[4:] or ["faults", "single", "farm"]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, KILN_EXAMPLES=faulty_dir, KILN_PROGRESS="never", TMPDIR=tmp)
        # A sanitizer build (CI's second pass): the crashes end in their signals, not in
        # ASan's report and exit(1). Other builds ignore ASAN_OPTIONS.
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "handle_segv=0"

        if "faults" in cases:
            sweep_with_faults(kiln, source, env, tmp)
        if "single" in cases:
            single_runs(kiln, source, env, tmp, faulty_dir)
        if "farm" in cases:
            farm_fan_out(kiln, source, env, tmp)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
