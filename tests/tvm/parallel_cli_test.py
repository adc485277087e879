#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`kiln run` / `kiln profile` of a library whose parallel tasks meet at a barrier, on one CPU
and with num_threads 1, 2 and 64 (more threads than this machine's CPUs).

    parallel_cli_test.py KILN BARRIER_LIBRARY

The library (tests/tvm/bad_libraries/parallel_barrier.c) is compiled the way TVM's CPU code
reaches Kiln's parallel services; main(slots: int64[256]) runs one parallel launch whose tasks
write their slot, wait at the barrier, then sum every slot (slots[128 + task]), and task 0 writes
the task count to slots[255]. Each run must finish (a barrier that waits for a task no thread
runs would hang: the timeout fails it), every task must have seen every other, the task count
must be the team's, and `kiln profile` must report that count and where it came from.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TIMEOUT_S = 120


def read_int64_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", data[8:10])[0]
    body = data[10 + header_len:]
    return list(struct.unpack(f"<{len(body) // 8}q", body))


def write_files(folder, library, num_threads):
    plugin_set = os.path.join(folder, "plugins.yaml")
    options = "" if num_threads is None else f", options: {{num_threads: {num_threads}}}"
    with open(plugin_set, "w") as f:
        f.write(f"plugins:\n  - {{name: cpu{options}}}\n  - package\n")
    config = os.path.join(folder, "barrier.yaml")
    with open(config, "w") as f:
        f.write(f"module: {library}\nfunction: main\ndevice: cpu\n"
                "evaluator: {number: 3, repeat: 2, min_repeat_ms: 0}\n"
                "inputs:\n  - {name: slots, shape: [256], dtype: int64, init: zeros}\n"
                "outputs:\n  - {name: slots, save: slots.npy}\n")
    return plugin_set, config


def run(kiln, args, env, taskset):
    command = ([shutil.which("taskset"), "-c", taskset] if taskset else []) + [kiln] + args
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def check(kiln, library, num_threads, taskset, expected_tasks, expected_source):
    with tempfile.TemporaryDirectory() as folder:
        plugin_set, config = write_files(folder, library, num_threads)
        env = dict(os.environ, KILN_PLUGIN_SET=plugin_set)
        env.pop("KILN_NUM_THREADS", None)
        run(kiln, ["run", config], env, taskset)
        slots = read_int64_npy(os.path.join(folder, "slots.npy"))
        n = slots[255]
        label = f"num_threads={num_threads} taskset={taskset}"
        assert n == expected_tasks, f"{label}: the launch ran {n} tasks, expected {expected_tasks}"
        for task in range(n):
            assert slots[128 + task] == n * (n + 1) // 2, f"{label}: task {task} saw {slots}"
        profile = run(kiln, ["profile", config], env, taskset)
        assert f"Number of threads: {expected_tasks}" in profile, f"{label}:\n{profile}"
        assert f"Threads from: {expected_source}" in profile, f"{label}:\n{profile}"
        print(f"parallel_cli: {label}: {n} tasks met at the barrier; profile says so")


def main():
    kiln, library = sys.argv[1], os.path.abspath(sys.argv[2])
    cpus = len(os.sched_getaffinity(0))
    for n in (1, 2, 64):
        check(kiln, library, n, None, n, "option num_threads")
    first_cpu = str(min(os.sched_getaffinity(0)))
    if shutil.which("taskset"):
        check(kiln, library, None, first_cpu, 1, "the process's CPU affinity (1 CPU)")
        check(kiln, library, 2, first_cpu, 2, "option num_threads")
    else:
        print("parallel_cli: taskset is not installed: the one-CPU runs are skipped")
    check(kiln, library, None, None, cpus,
          f"the process's CPU affinity ({cpus} CPU{'s' if cpus > 1 else ''})")


if __name__ == "__main__":
    main()
