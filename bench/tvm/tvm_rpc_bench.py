"""TVM's RPC on this machine, for docs/benchmarks.md "RPC": a no-op remote call's round trip and
a 64 MiB float32 upload and download, with TVM's own Python server on loopback.

Not part of the build or CI (Kiln never needs TVM). Run it pinned to one CPU, as the Kiln
benchmark is:  taskset -c 1 python3 bench/tvm/tvm_rpc_bench.py
Needs `pip install apache-tvm` (tested with 0.27.0.post1).
"""
import time

import numpy as np
import tvm
from tvm import rpc


def best_of(fn, repeats, inner):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def main():
    server = rpc.Server(host="127.0.0.1", port=9391, port_end=9491, key="", silent=True)
    try:
        session = rpc.connect("127.0.0.1", server.port)
        echo = session.get_function("testing.echo")
        call = best_of(lambda: echo(1), 5, 2000)
        print(f"tvm rpc call (testing.echo(1)) round trip: {call * 1e6:.1f} us")

        data = np.ones(64 << 18, dtype="float32")  # 64 MiB
        dev = session.cpu(0)
        remote = tvm.runtime.empty(data.shape, "float32", dev)
        up = best_of(lambda: remote.copyfrom(data), 3, 1)
        print(f"tvm rpc upload 64 MiB: {up * 1e3:.1f} ms = {data.nbytes / up / 1e9:.3f} GB/s")
        down = best_of(lambda: remote.numpy(), 3, 1)
        print(f"tvm rpc download 64 MiB: {down * 1e3:.1f} ms = {data.nbytes / down / 1e9:.3f} GB/s")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
