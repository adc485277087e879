# SPDX-License-Identifier: Apache-2.0
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
import os
import re
import subprocess
import sys
import time

import gbench

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
            cpu_ns = (time.process_time() - cpu_start) / iters * 1e9
            return iters, seconds / iters * 1e9, {"cpu_time": cpu_ns}
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
        return result

    def transfer(mib, upload):
        def run(min_time):
            n = (mib << 20) // 4
            session = rpc.connect("127.0.0.1", port)
            remote = tvm.runtime.empty((n,), "float32", session.cpu(0))
            host = tvm.runtime.tensor(np.full(n, 1.5, dtype="float32"))
            host.copyto(remote)
            body = (lambda: host.copyto(remote)) if upload else (lambda: remote.copyto(host))
            iterations, ns, fields = timed(body, min_time)
            del body, remote, host, session
            fields["bytes_per_second"] = (mib << 20) * 1e9 / ns
            return iterations, ns, fields

        return run

    cases = {"BM_Tvm_Call/real_time": call}
    for direction, upload in (("Upload", True), ("Download", False)):
        for mib in SIZES_MIB:
            cases[f"BM_Tvm_{direction}/MiB:{mib}/real_time"] = transfer(mib, upload)
    return cases


def main(argv):
    if "--serve" in argv:
        return serve()
    opts, extra = gbench.parse(argv, "tvm_rpc_bench.py", {"--server_cpu": None})
    cpu = extra["--server_cpu"]
    server, port = start_server(int(cpu) if cpu is not None else None)
    try:
        gbench.run(make_cases(port), opts, __file__)
    finally:
        server.stdin.close()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
