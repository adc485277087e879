# SPDX-License-Identifier: Apache-2.0
"""TVM's time evaluator beside kiln_bench_evaluator (docs/benchmarks.md "Evaluator overhead"):
the same no-op body (libcalls.so's noop, built as a tvm-ffi library by
bench/tvm/tvm_ffi_calls.cc: build/lib/libkiln_bench_tvm_ffi_calls.so) timed by TVM 0.27's
time_evaluator (runtime.RPCTimeEvaluator, number=1000, repeat=10):

  BM_Tvm_EvalNoop            TVM's reported median, ns per call
  BM_Tvm_EvalNoopOuterClock  a clock around the whole evaluator call (from Python: it includes
                             the Python wrapper's call and unpacking) over the 1 + 1000 x 10
                             calls it made

Speaks Google Benchmark's flags and JSON (bench/tvm/gbench.py), plus --lib=PATH. Each
repetition runs the evaluator until --benchmark_min_time has passed and reports the median
over those runs, as a Google Benchmark repetition averages its iterations. Needs apache-tvm:

  python3 bench/interleave.py --pin 1 --cmd "build/bin/kiln_bench_evaluator --benchmark_filter=Eval" \
      --cmd "build/.venv-py/bin/python bench/tvm/tvm_evaluator_bench.py"
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbench  # noqa: E402  pylint: disable=wrong-import-position

NUMBER, REPEAT = 1000, 10


def make_cases(lib):
    import tvm  # pylint: disable=import-outside-toplevel

    dev = tvm.cpu()
    module = tvm.runtime.load_module(lib)
    evaluator = module.time_evaluator("noop", dev, number=NUMBER, repeat=REPEAT)

    def repeat_until(min_time, one):
        samples, deadline = [], time.perf_counter() + min_time
        while not samples or time.perf_counter() < deadline:
            samples.append(one())
        return len(samples), statistics.median(samples)

    def reported(min_time):
        return repeat_until(min_time, lambda: evaluator().median * 1e9)

    def outer(min_time):
        def one():
            start = time.perf_counter_ns()
            evaluator()
            return (time.perf_counter_ns() - start) / (1 + NUMBER * REPEAT)
        return repeat_until(min_time, one)

    return {"BM_Tvm_EvalNoop": reported, "BM_Tvm_EvalNoopOuterClock": outer}


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default_lib = os.path.join(here, "..", "..", "build", "lib", "libkiln_bench_tvm_ffi_calls.so")
    opts, extra = gbench.parse(argv, "tvm_evaluator_bench.py", {"--lib": default_lib})
    gbench.run(make_cases(extra["--lib"]), opts, "tvm_evaluator_bench.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
