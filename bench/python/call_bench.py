# SPDX-License-Identifier: Apache-2.0
"""Python call overhead: Kiln's Python package beside tvm-ffi's (apache-tvm-ffi), same process,
cases interleaved, median and range over rounds and launches (docs/benchmarks.md, "Python
calls").

Cases, each timed as ns per call over a loop of `--calls` calls:
  floor          a no-op bound with nanobind and no conversions (kiln._kiln._floor_noop): what
                 any call from Python into a nanobind extension costs
  kiln_noop      Kiln's kiln.Function of the SDK example `noop` (libcalls.so), no arguments
  tvm_nop        tvm-ffi's global function testing.nop, no arguments
  kiln_tvm1      the TVM-compiled noop.so (one float32[1] tensor; TVM's argument checks) called
                 through Kiln with a kiln.Tensor
  tvm_tvm1       the same library function through tvm_ffi.load_module with a tvm_ffi.Tensor
  kiln_tvm1_np   noop.so through Kiln with a numpy array (issue 30)
  tvm_tvm1_np    noop.so through tvm-ffi with a numpy array
  kiln_touch3    the SDK example `touch3` (libcalls.so) with three kiln.Tensors
  tvm_touch3     the same body through tvm-ffi (libkiln_bench_tvm_ffi_calls.so) with three
                 tvm_ffi.Tensors
  kiln_touch3_np Kiln's touch3 with three numpy arrays (float32[16])
  kiln_touch3_tvmt Kiln's touch3 with three tvm_ffi.Tensors (another DLPack producer's memory)
  tvm_touch3_np  tvm-ffi's touch3 with three numpy arrays

  PYTHONPATH=build/python build/.venv-tvm/bin/python bench/python/call_bench.py \
      [--calls 200000] [--rounds 7] [--launches 1] [--build build] [--cases REGEX]

With --launches N (N >= 3 for a figure) the script runs itself N times, one process each, and
prints per case the median of the launches' medians and their range. The TVM cases need
apache-tvm-ffi, build/tvm_fixtures/noop.so (ctest's tvm_fixtures) and
build/lib/libkiln_bench_tvm_ffi_calls.so (bench/CMakeLists.txt, built where tvm-ffi is found).
"""

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import time

import numpy as np

import kiln


def per_call_ns(f, args, calls):
    loop = range(calls)
    start = time.perf_counter_ns()
    for _ in loop:
        f(*args)
    return (time.perf_counter_ns() - start) / calls


def make_cases(build):
    calls = kiln.load_module(str(build / "examples" / "kernels" / "libcalls.so"))
    kiln_tensors = [kiln.from_dlpack(np.zeros(16, np.float32)) for _ in range(3)]
    arrays = [np.zeros(16, np.float32) for _ in range(3)]
    cases = {
        "floor": (kiln._kiln._floor_noop, ()),
        "kiln_noop": (calls["noop"], ()),
        "kiln_touch3": (calls["touch3"], tuple(kiln_tensors)),
        "kiln_touch3_np": (calls["touch3"], tuple(arrays)),
    }
    noop_so = build / "tvm_fixtures" / "noop.so"
    tvm_calls_so = build / "lib" / "libkiln_bench_tvm_ffi_calls.so"
    try:
        import tvm_ffi
    except ImportError:
        print("# apache-tvm-ffi is not installed: the tvm-ffi cases are left out")
        return cases
    cases["tvm_nop"] = (tvm_ffi.get_global_func("testing.nop"), ())
    cases["kiln_touch3_tvmt"] = (calls["touch3"],
                                 tuple(tvm_ffi.from_dlpack(np.zeros(16, np.float32))
                                       for _ in range(3)))
    if noop_so.exists():
        one = np.zeros(1, np.float32)
        kiln_noop1 = kiln.load_module(str(noop_so))["noop"]
        tvm_noop1 = tvm_ffi.load_module(str(noop_so))["noop"]
        cases["kiln_tvm1"] = (kiln_noop1, (kiln.from_dlpack(np.zeros(1, np.float32)),))
        cases["tvm_tvm1"] = (tvm_noop1, (tvm_ffi.from_dlpack(np.zeros(1, np.float32)),))
        cases["kiln_tvm1_np"] = (kiln_noop1, (one,))
        cases["tvm_tvm1_np"] = (tvm_noop1, (one,))
    else:
        print(f"# {noop_so} is missing: the noop.so cases are left out")
    if tvm_calls_so.exists():
        tvm_touch3 = tvm_ffi.load_module(str(tvm_calls_so))["touch3"]
        cases["tvm_touch3"] = (tvm_touch3,
                               tuple(tvm_ffi.from_dlpack(np.zeros(16, np.float32))
                                     for _ in range(3)))
        cases["tvm_touch3_np"] = (tvm_touch3, tuple(arrays))
    else:
        print(f"# {tvm_calls_so} is missing: the tvm-ffi touch3 cases are left out")
    return cases


def run_launch(options):
    """One process: every case, interleaved over rounds; {case: [ns per call per round]}."""
    cases = make_cases(pathlib.Path(options.build))
    names = [n for n in cases if re.search(options.cases, n)]
    for name in names:  # warm-up, and a check that each case runs at all
        per_call_ns(*cases[name], max(options.calls // 10, 1))
    results = {name: [] for name in names}
    for round_index in range(options.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(per_call_ns(*cases[name], options.calls))
    return results


def print_table(title, rows):
    print(title)
    print("| case | median | range |")
    print("| --- | --- | --- |")
    for name, (median, low, high) in rows.items():
        print(f"| {name} | {median:.1f} | {low:.1f}-{high:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--launches", type=int, default=1,
                        help="processes to run, each with all rounds (default 1)")
    parser.add_argument("--build", default="build")
    parser.add_argument("--cases", default="", help="only the cases whose name matches")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one launch
    options = parser.parse_args()

    if options.launches <= 1:
        results = run_launch(options)
        if options.json:
            print(json.dumps(results))
            return
        print_table(f"# {options.rounds} rounds of {options.calls} calls, interleaved; "
                    "ns per call, median and range over rounds",
                    {n: (statistics.median(r), min(r), max(r)) for n, r in results.items()})
        return

    medians = {}  # case -> one median per launch
    for _ in range(options.launches):
        command = [sys.executable, __file__, "--json", "--calls", str(options.calls),
                   "--rounds", str(options.rounds), "--build", options.build,
                   "--cases", options.cases]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("#"):
                print(line)
        launch = json.loads(out.splitlines()[-1])
        for name, r in launch.items():
            medians.setdefault(name, []).append(statistics.median(r))
    print_table(f"# {options.launches} launches x {options.rounds} rounds of {options.calls} "
                "calls, interleaved; ns per call, median of the launches' medians and their "
                "range",
                {n: (statistics.median(m), min(m), max(m)) for n, m in medians.items()})


if __name__ == "__main__":
    main()
