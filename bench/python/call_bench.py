"""Python call overhead: Kiln's Python package beside tvm-ffi's (apache-tvm-ffi), same process,
cases interleaved, median and range over rounds (docs/benchmarks.md, "Python calls").

Cases, each timed as ns per call over a loop of `--calls` calls:
  floor        a no-op bound with nanobind and no conversions (kiln._kiln._floor_noop): what any
               call from Python into a nanobind extension costs
  kiln_noop    Kiln's kiln.Function of the SDK example `noop` (libcalls.so), no arguments
  tvm_nop      tvm-ffi's global function testing.nop, no arguments
  kiln_tvm1    the TVM-compiled noop.so (one float32[1] tensor; TVM's argument checks) called
               through Kiln with a kiln.Tensor
  tvm_tvm1     the same library function through tvm_ffi.load_module with a tvm_ffi.Tensor

  PYTHONPATH=build/python build/.venv-tvm/bin/python bench/python/call_bench.py \
      [--calls 200000] [--rounds 7] [--build build]
The TVM cases need apache-tvm-ffi and build/tvm_fixtures/noop.so (ctest's tvm_fixtures).
"""

import argparse
import pathlib
import statistics
import time

import numpy as np

import kiln


def per_call_ns(f, args, calls):
    loop = range(calls)
    start = time.perf_counter_ns()
    for _ in loop:
        f(*args)
    return (time.perf_counter_ns() - start) / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--build", default="build")
    options = parser.parse_args()
    build = pathlib.Path(options.build)

    calls = kiln.load_module(str(build / "examples" / "kernels" / "libcalls.so"))
    cases = {
        "floor": (kiln._kiln._floor_noop, ()),
        "kiln_noop": (calls["noop"], ()),
    }
    noop_so = build / "tvm_fixtures" / "noop.so"
    try:
        import tvm_ffi

        cases["tvm_nop"] = (tvm_ffi.get_global_func("testing.nop"), ())
        if noop_so.exists():
            cases["kiln_tvm1"] = (kiln.load_module(str(noop_so))["noop"],
                                  (kiln.from_dlpack(np.zeros(1, np.float32)),))
            cases["tvm_tvm1"] = (tvm_ffi.load_module(str(noop_so))["noop"],
                                 (tvm_ffi.from_dlpack(np.zeros(1, np.float32)),))
        else:
            print(f"# {noop_so} is missing: the TVM library cases are left out")
    except ImportError:
        print("# apache-tvm-ffi is not installed: the tvm-ffi cases are left out")

    results = {name: [] for name in cases}
    names = list(cases)
    for name in names:  # warm-up
        per_call_ns(*cases[name], options.calls // 10)
    for round_index in range(options.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            results[name].append(per_call_ns(*cases[name], options.calls))

    print(f"# {options.rounds} rounds of {options.calls} calls, interleaved; ns per call")
    print("| case | median | range |")
    print("| --- | --- | --- |")
    for name in names:
        r = results[name]
        print(f"| {name} | {statistics.median(r):.1f} | {min(r):.1f}-{max(r):.1f} |")


if __name__ == "__main__":
    main()
