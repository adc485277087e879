"""TVM's RPC beside kiln_bench_rpc (docs/benchmarks.md "RPC"): TVM 0.27's own server in a
process of its own and its client in this one, the same cases as bench/rpc_bench.cc:

  BM_Tvm_Call/real_time                 testing.nop() with no arguments (tvm-ffi's C++ no-op)
  BM_Tvm_Upload/MiB:N/real_time         host.copyto(remote): N MiB of float32 into a remote CPU
                                        tensor, from a tensor allocated (and written) beforehand
  BM_Tvm_Download/MiB:N/real_time       remote.copyto(host): the same back (host preallocated)

for N in 1, 4, 16, 64, 256. It speaks enough of Google Benchmark's command line for
bench/interleave.py: --benchmark_filter=REGEX, --benchmark_min_time=SECONDS (default 0.5),
--benchmark_repetitions=N, --benchmark_enable_random_interleaving=true|false (each repetition of
each case in a shuffled order), --benchmark_out=FILE with --benchmark_out_format=json (Google
Benchmark's JSON: one "iteration" run per repetition), plus --server_cpu=N, which pins the
server to CPU N as kiln_bench_rpc's flag of that name does. As Google Benchmark does, each
repetition sets its case up afresh (a new session, a new remote tensor), uploads the data once
untimed (which touches every page either side), then runs as many iterations as fill the minimum time.

Not part of the build or CI (Kiln never needs TVM). Needs apache-tvm (tested with 0.27.0.post1):
  python3 bench/interleave.py --pin 0 --cmd "build/.venv-py/bin/python bench/tvm/tvm_rpc_bench.py --server_cpu=1"
"""
import json
import os
import random
import re
import subprocess
import sys
import time

SIZES_MIB = (1, 4, 16, 64, 256)


def serve():
    """The server process: what tvm.rpc.Server runs in its worker process (the listening thread;
    each session served by TVM's C++ ServerLoop in a forked child). Called directly because
    rpc.Server needs cloudpickle to reach its worker, which apache-tvm does not install."""
    from tvm.rpc import server  # pylint: disable=import-outside-toplevel

    port = server._popen_start_rpc_server(  # pylint: disable=protected-access
        "127.0.0.1", port=9391, port_end=9491, silent=True)
    print(f"tvm rpc server listening on 127.0.0.1:{port}", flush=True)
    # Until the client process closes the pipe. os.read, not sys.stdin: a session's child,
    # forked from the listening thread, closes sys.stdin, which would wait forever for the
    # lock this thread held inside sys.stdin.read().
    while os.read(0, 4096):
        pass
    os._exit(0)  # the listening thread never returns


def start_server(cpu):
    def pin():
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, preexec_fn=pin)
    line = proc.stdout.readline()
    match = re.search(r":(\d+)$", line.strip())
    if not match:
        proc.kill()
        raise SystemExit(f"tvm_rpc_bench.py: the TVM server did not start ({line!r})")
    return proc, int(match.group(1))


def timed(body, min_time):
    """Google Benchmark's iteration rule: grow the count until one run lasts min_time."""
    iters = 1
    while True:
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(iters):
            body()
        seconds = time.perf_counter() - start
        if seconds >= min_time or iters >= 1_000_000_000:
            return iters, seconds, time.process_time() - cpu_start
        multiplier = min_time * 1.4 / max(seconds, 1e-9)
        if seconds / min_time <= 0.1:
            multiplier = min(multiplier, 10.0)
        iters = max(int(multiplier * iters), iters + 1)


def make_cases(port):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    def call(min_time):
        session = rpc.connect("127.0.0.1", port)
        nop = session.get_function("testing.nop")
        nop()
        result = timed(nop, min_time)
        del nop, session
        return result + (0,)

    def transfer(mib, upload):
        def run(min_time):
            n = (mib << 20) // 4
            session = rpc.connect("127.0.0.1", port)
            remote = tvm.runtime.empty((n,), "float32", session.cpu(0))
            host = tvm.runtime.tensor(np.full(n, 1.5, dtype="float32"))
            host.copyto(remote)
            body = (lambda: host.copyto(remote)) if upload else (lambda: remote.copyto(host))
            result = timed(body, min_time)
            del body, remote, host, session
            return result + (mib << 20,)

        return run

    cases = {"BM_Tvm_Call/real_time": call}
    for direction, upload in (("Upload", True), ("Download", False)):
        for mib in SIZES_MIB:
            cases[f"BM_Tvm_{direction}/MiB:{mib}/real_time"] = transfer(mib, upload)
    return cases


def main(argv):
    opts = {"filter": ".", "min_time": 0.5, "repetitions": 1, "interleave": False, "out": None,
            "cpu": None}
    for arg in argv:
        key, _, value = arg.partition("=")
        if key == "--serve":
            return serve()
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
                raise SystemExit("tvm_rpc_bench.py: only --benchmark_out_format=json")
        elif key == "--server_cpu":
            opts["cpu"] = int(value)
        else:
            raise SystemExit(f"tvm_rpc_bench.py: unknown argument {arg!r}")

    server, port = start_server(opts["cpu"])
    try:
        cases = make_cases(port)
        names = [n for n in cases if re.search(opts["filter"], n)]
        runs = [(n, r) for n in names for r in range(opts["repetitions"])]
        if opts["interleave"]:
            random.shuffle(runs)
        results = []
        for name, rep in runs:
            iters, seconds, cpu_seconds, nbytes = cases[name](opts["min_time"])
            per_iter_ns = seconds / iters * 1e9
            run = {"name": name, "family_index": names.index(name), "run_name": name,
                   "run_type": "iteration", "repetitions": opts["repetitions"],
                   "repetition_index": rep, "threads": 1, "iterations": iters,
                   "real_time": per_iter_ns, "cpu_time": cpu_seconds / iters * 1e9,
                   "time_unit": "ns"}
            if nbytes:
                run["bytes_per_second"] = nbytes * iters / seconds
            results.append(run)
            print(f"{name:40s} {per_iter_ns:14.0f} ns {iters:8d}", flush=True)
    finally:
        server.stdin.close()
        server.wait()
    doc = {"context": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "executable": __file__,
                       "library_build_type": "release"},
           "benchmarks": results}
    if opts["out"]:
        with open(opts["out"], "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
