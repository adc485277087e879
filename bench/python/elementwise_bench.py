# SPDX-License-Identifier: Apache-2.0
"""The example kernels as baselines (issue 21 item 8): relu and vector_add of the SDK examples
(examples/kernels, built at -O3) through Kiln's time evaluator, beside numpy doing the same work
into a preallocated output, in GB/s of memory traffic (relu reads and writes n float32: 8n
bytes; vector_add reads two and writes one: 12n bytes).

Cases (Google Benchmark JSON for bench/interleave.py, real_time = ns per call, and a
bytes_per_second counter):
  BM_Kiln_Relu/N, BM_Numpy_Relu/N            out = max(in, 0)         numpy.maximum(x, 0, out=o)
  BM_Kiln_VectorAdd/N, BM_Numpy_VectorAdd/N  out = a + 0.5 * b        numpy.multiply + numpy.add
for N = 2^20 (4 MiB per tensor: in the last-level cache) and 2^24 (64 MiB: memory). Kiln's
evaluator runs number=10 calls per repeat, repeat=1 per Google Benchmark iteration; numpy is
timed over the same number of calls. Kiln's kernels use the CPU backend's threads
(KILN_NUM_THREADS, default: all cores); numpy uses one, so the second command below runs Kiln
on one thread too (its cases renamed with --kiln_label=Kiln1T).

  PYTHONPATH=build/python python3 bench/interleave.py --metric bytes_per_second \
      --versus 'numpy:^BM_Kiln(1T)?_=>BM_Numpy_' \
      --cmd 'build/.venv-py/bin/python bench/python/elementwise_bench.py' \
      --cmd 'env KILN_NUM_THREADS=1 build/.venv-py/bin/python bench/python/elementwise_bench.py
             --kiln_label=Kiln1T --benchmark_filter=Kiln1T'
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tvm"))
import gbench  # noqa: E402  pylint: disable=wrong-import-position

import kiln  # noqa: E402  pylint: disable=wrong-import-position

SIZES = (1 << 20, 1 << 24)
CALLS = 10


def repeat_until(min_time, one_batch):
    """Batches of CALLS calls until min_time has passed; (calls, ns per call)."""
    calls, total = 0, 0.0
    while total < min_time:
        total += one_batch()
        calls += CALLS
    return calls, total / calls * 1e9


def make_cases(kernels, label):
    relu = kiln.load_module(os.path.join(kernels, "librelu.so"))["relu"]
    vadd = kiln.load_module(os.path.join(kernels, "libvector_add.so"))["vector_add"]
    cases = {}
    for n in SIZES:
        rng = np.random.default_rng(21)
        x = rng.uniform(-1, 1, n).astype(np.float32)
        y = rng.uniform(-1, 1, n).astype(np.float32)
        out, tmp = np.empty_like(x), np.empty_like(x)
        kx, ky, kout = (kiln.tensor(v) for v in (x, y, out))
        relu_eval = kiln.time_evaluator(relu, kiln.cpu(), number=CALLS, repeat=1)
        vadd_eval = kiln.time_evaluator(vadd, kiln.cpu(), number=CALLS, repeat=1)

        def kiln_case(evaluator, args, nbytes):
            def run(min_time):
                calls, ns = repeat_until(min_time, lambda: evaluator(*args).mean * CALLS)
                return calls, ns, {"bytes_per_second": nbytes / ns * 1e9}
            return run

        def numpy_case(body, nbytes):
            def batch():
                start = time.perf_counter()
                for _ in range(CALLS):
                    body()
                return time.perf_counter() - start

            def run(min_time):
                body()
                calls, ns = repeat_until(min_time, batch)
                return calls, ns, {"bytes_per_second": nbytes / ns * 1e9}
            return run

        def numpy_vadd(x=x, y=y, out=out, tmp=tmp):
            np.multiply(y, 0.5, out=tmp)
            np.add(x, tmp, out=out)

        cases[f"BM_{label}_Relu/{n}"] = kiln_case(relu_eval, (kx, kout), 8 * n)
        cases[f"BM_Numpy_Relu/{n}"] = numpy_case(
            lambda x=x, out=out: np.maximum(x, 0, out=out), 8 * n)
        cases[f"BM_{label}_VectorAdd/{n}"] = kiln_case(vadd_eval, (kx, ky, kout, 0.5), 12 * n)
        cases[f"BM_Numpy_VectorAdd/{n}"] = numpy_case(numpy_vadd, 12 * n)
    return cases


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "build", "examples", "kernels")
    opts, extra = gbench.parse(argv, "elementwise_bench.py",
                               {"--kernels": default, "--kiln_label": "Kiln"})
    gbench.run(make_cases(extra["--kernels"], extra["--kiln_label"]), opts,
               "elementwise_bench.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
