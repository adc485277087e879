# SPDX-License-Identifier: Apache-2.0
"""local_run from Python vs from C++ on the same module: the example vector add of 2^20 float32
(number=10, repeat=3, min_repeat_ms=0, export "tar" and "so"), interleaved by round. The C++
side is kiln_bench_evaluator's BM_LocalRunVectorAdd1M (0.3 s of warm-up, then 5 iterations, their mean), run
as a subprocess each round; the Python side is kiln.testing.local_run, 5 calls per round, their
mean. Reports the median and range over rounds, in ms (docs/benchmarks.md, "Python local_run").

  PYTHONPATH=build/python build/.venv-tvm/bin/python bench/python/local_run_bench.py \
      [--rounds 5] [--build build]
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import time

import numpy as np

import kiln
from kiln.testing import EvaluatorConfig, local_run


def python_ms(module, export_func, args, config, iterations=5):
    local_run(module, "cpu", args, config, export_func=export_func)  # warm-up
    start = time.perf_counter()
    for _ in range(iterations):
        local_run(module, "cpu", args, config, export_func=export_func)
    return (time.perf_counter() - start) * 1e3 / iterations


def cpp_ms(build):
    out = subprocess.run(
        [str(build / "bin" / "kiln_bench_evaluator"), "--benchmark_filter=LocalRun",
         "--benchmark_min_warmup_time=0.3",
         "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    return {b["label"]: b["real_time"] for b in json.loads(out)["benchmarks"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", default="build")
    options = parser.parse_args()
    build = pathlib.Path(options.build)
    module = kiln.load_module(str(build / "examples" / "kernels" / "libvector_add.so"))
    n = 1 << 20
    args = [np.ones(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32), 0.5]
    config = EvaluatorConfig(number=10, repeat=3, min_repeat_ms=0)
    results = {(side, fmt): [] for side in ("python", "c++") for fmt in ("tar", "so")}
    for _ in range(options.rounds):
        for fmt, ms in cpp_ms(build).items():
            results[("c++", fmt)].append(ms)
        for fmt in ("tar", "so"):
            results[("python", fmt)].append(python_ms(module, fmt, args, config))
    print(f"# {options.rounds} rounds, interleaved; ms per local_run")
    print("| export | C++ median [range] | Python median [range] | Python - C++ |")
    print("| --- | --- | --- | --- |")
    for fmt in ("tar", "so"):
        c, p = results[("c++", fmt)], results[("python", fmt)]
        print(f"| {fmt} | {statistics.median(c):.2f} [{min(c):.2f}-{max(c):.2f}] | "
              f"{statistics.median(p):.2f} [{min(p):.2f}-{max(p):.2f}] | "
              f"{statistics.median(p) - statistics.median(c):+.2f} |")


if __name__ == "__main__":
    main()
