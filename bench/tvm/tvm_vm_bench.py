# SPDX-License-Identifier: Apache-2.0
"""TVM's Relax VM beside kiln_bench_vm (docs/benchmarks.md "VM dispatch"): a VM function of 1000
Call instructions to one packed function, built with TVM's own ExecBuilder, timed with TVM's
time_evaluator; reported per Call instruction:

  BM_Tvm_VMNoop        kiln_bench.noop()
  BM_Tvm_VMInt64x3     kiln_bench.add3(r0, r1, r2), three int registers, result dropped
  BM_Tvm_VMTensorx3    kiln_bench.touch3(r0, r1, r2), three tensor registers (float32[16])

The callees are the bodies of Kiln's libcalls.so built as a tvm-ffi library
(bench/tvm/tvm_ffi_calls.cc, build/lib/libkiln_bench_tvm_ffi_calls.so), registered as global
functions when it loads; TVM's VM resolves a Call's callee there. Each repetition is one
time_evaluator call (repeat 1, number grown until a batch lasts --benchmark_min_time). Speaks
Google Benchmark's flags and JSON (bench/tvm/gbench.py), plus --lib=PATH. Needs apache-tvm:

  python3 bench/interleave.py --pin 1 --cmd "build/bin/kiln_bench_vm --benchmark_filter=VM" \
      --cmd "build/.venv-py/bin/python bench/tvm/tvm_vm_bench.py"
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gbench  # noqa: E402  pylint: disable=wrong-import-position

CALLS = 1000


def make_cases(lib):
    import tvm  # pylint: disable=import-outside-toplevel
    import tvm_ffi  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    keep = tvm_ffi.load_module(lib)  # registers kiln_bench.noop, .add3, .touch3
    dev = tvm.cpu()
    tensor = tvm.runtime.tensor(np.zeros(16, np.float32), dev)

    def case(callee, num_args, args):
        ib = relax.ExecBuilder()
        with ib.function("run", num_inputs=3):
            for _ in range(CALLS):
                ib.emit_call(callee, args=[ib.r(i) for i in range(num_args)])
            ib.emit_ret(ib.r(0))
        vm = relax.VirtualMachine(ib.get(), dev)

        def measure(min_time):
            evaluator = vm.time_evaluator("run", dev, number=1, repeat=1,
                                          min_repeat_ms=int(min_time * 1000))
            result = evaluator(*args)
            _ = keep
            return 1, result.mean / CALLS * 1e9

        return measure

    ints = [1, 2, 3]
    return {
        "BM_Tvm_VMNoop": case("kiln_bench.noop", 0, ints),
        "BM_Tvm_VMInt64x3": case("kiln_bench.add3", 3, ints),
        "BM_Tvm_VMTensorx3": case("kiln_bench.touch3", 3, [tensor] * 3),
    }


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default_lib = os.path.join(here, "..", "..", "build", "lib", "libkiln_bench_tvm_ffi_calls.so")
    opts, extra = gbench.parse(argv, "tvm_vm_bench.py", {"--lib": default_lib})
    gbench.run(make_cases(extra["--lib"]), opts, "tvm_vm_bench.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
