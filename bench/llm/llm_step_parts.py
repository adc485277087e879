# SPDX-License-Identifier: Apache-2.0
"""Where a decode step's difference between Kiln and TVM comes from (docs/benchmarks.md, "LLM
decode and prefill"): llm_step_bench.py's step taken apart, in one process, TVM and Kiln
alternating (ABBA...) over --rounds rounds; median per part.

Parts, for one decode case of llm_step_bench.py (default "tiny decode b4 ctx64"):
  kv begin+end      kv_state_begin_forward + kv_state_end_forward of the step's sequences (the
                    cache's own work: page tables, auxiliary arrays), popn untimed
  kv attention      one vm.builtin.attention_kv_cache_attention_with_fused_qkv of layer 0 on the
                    step's shapes, inside one forward (it writes the same cache slots each time)
  whole step        llm_step_bench.py's step; then once more beside a third side, Kiln's VM
                    on its naive allocator (memory_cfg="naive") instead of the pooled one
  kernel placement  the step's first call of --kernel (default matmul2, the MLP's gate/up
                    projection) on the tensors each VM really gave it, called through the same
                    kiln.Function with the same (random) values in every variant: Kiln's VM's
                    buffers, TVM's VM's buffers (their addresses modulo 4096 are printed); then
                    fresh buffers all placed at page boundaries and at the offsets TVM's
                    buffers had

  PYTHONPATH=build/python KILN_LOG=warn build/.venv-tvm/bin/python bench/llm/llm_step_parts.py \
      [--model tiny] [--case "decode b4 ctx64"] [--kernel matmul2] [--rounds 10]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_step_bench as bench  # noqa: E402  pylint: disable=wrong-import-position

PAGE = 4096


class NaiveKilnRuntime:
    """kiln.llm's KilnRuntime with the VM on its naive allocator (every tensor a fresh
    allocation at the alignment its storage asks for) instead of the pooled one."""

    def __init__(self):
        from kiln.llm import KilnRuntime  # pylint: disable=import-outside-toplevel

        self._base = KilnRuntime()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def load_vm(self, library: str, device: Any) -> Any:
        import kiln  # pylint: disable=import-outside-toplevel
        from kiln.vm import VirtualMachine  # pylint: disable=import-outside-toplevel

        return VirtualMachine(kiln.load_module(library), device, memory_cfg="naive")


def per_call_ns(f: Callable[..., Any], args: List[Any], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        f(*args)
    return (time.perf_counter_ns() - start) / calls


def cache_parts(stepper: bench.Stepper, config: Any, calls: int) -> Dict[str, float]:
    """ns of the cache's parts of `stepper`'s step on its runtime."""
    rt = stepper.engine.runtime
    batch = len(stepper.seq_ids)
    heads, kv_heads, dim = (config.num_attention_heads, config.num_key_value_heads,
                            config.head_dim)
    rng = np.random.default_rng(0)
    qkv = rt.tensor(rng.standard_normal((batch, heads + 2 * kv_heads, dim)).astype("float32"),
                    stepper.engine.device)
    out = rt.tensor(np.zeros((batch, heads, dim), "float32"), stepper.engine.device)
    attention = rt.builtin("vm.builtin.attention_kv_cache_attention_with_fused_qkv")
    spent = 0
    for _ in range(calls):
        start = time.perf_counter_ns()
        stepper.begin(stepper.cache, stepper.seqs, stepper.lengths)
        stepper.end(stepper.cache)
        spent += time.perf_counter_ns() - start
        stepper.restore()
    parts = {"kv begin+end": spent / calls}
    stepper.begin(stepper.cache, stepper.seqs, stepper.lengths)
    try:
        parts["kv attention"] = per_call_ns(attention, [stepper.cache, 0, dim**-0.5, qkv, out],
                                            calls)
    finally:
        stepper.end(stepper.cache)
        stepper.restore()
    parts["whole step"] = stepper.sample(calls)
    return parts


def kernel_args(stepper: bench.Stepper, kernel: str) -> Optional[List[Any]]:
    """The arguments (the VM's own tensors, not copies) of the step's first call of `kernel`;
    None (after printing the kernels the step does call) when it calls no such kernel."""
    found: List[List[Any]] = []
    called: List[str] = []

    def instrument(_func, symbol, before_run, _ret, *args):
        if before_run and not symbol.startswith("vm.builtin.") and symbol not in called:
            called.append(symbol)
        if before_run and symbol == kernel and not found:
            found.append(list(args))

    vm = stepper.engine.vm
    vm.set_instrument(instrument)
    try:
        stepper.run()
    finally:
        vm.set_instrument(None)
        stepper.restore()
    if not found:
        print(f"\n(the step calls no kernel {kernel!r}; it calls {', '.join(called)})")
        return None
    return found[0]


def placed(arrays: List[np.ndarray], offsets: List[int], pool: np.ndarray) -> List[Any]:
    """kiln tensors holding `arrays`, the i-th at offsets[i] (bytes, from a page boundary) in
    its own page-aligned region of `pool`."""
    import kiln  # pylint: disable=import-outside-toplevel

    base = (-pool.ctypes.data) % PAGE
    region = max(a.nbytes for a in arrays) + PAGE
    region = (region + PAGE - 1) // PAGE * PAGE
    tensors = []
    for i, (array, offset) in enumerate(zip(arrays, offsets)):
        start = base + i * region + offset
        view = pool[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
        view[...] = array
        tensors.append(kiln.from_dlpack(view))
    return tensors


def main(argv: List[str]) -> int:
    import kiln  # pylint: disable=import-outside-toplevel
    import tvm  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny", choices=sorted(bench.model_configs()))
    parser.add_argument("--case", default="decode b4 ctx64")
    parser.add_argument("--kernel", default="matmul2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200, help="calls per part and round")
    parser.add_argument("--models-dir",
                        default=os.path.join(bench.ROOT, "build", "llm_bench_models"))
    args = parser.parse_args(argv)
    config = bench.model_configs()[args.model]
    folder = bench.ensure_model(args.models_dir, args.model, config)
    cases = bench.prepare_model(args.model, folder, {"kiln naive": NaiveKilnRuntime()})
    name = f"{args.model} {args.case}"
    if name not in cases or not args.case.startswith("decode"):
        raise SystemExit(f"llm_step_parts: no decode case {name!r}; cases: {sorted(cases)}")
    steppers = cases[name]

    samples: Dict[str, List[float]] = collections.defaultdict(list)
    for index in range(args.rounds):
        order = ("tvm", "kiln") if index % 4 in (0, 3) else ("kiln", "tvm")
        for side in order:
            for part, ns in cache_parts(steppers[side], config, args.calls).items():
                samples[f"{part}|{side}"].append(ns)
    # The whole step once more, with Kiln's VM on its naive allocator as a third side.
    sides = ("tvm", "kiln", "kiln naive")
    for index in range(args.rounds):
        shift = index % len(sides)
        for side in sides[shift:] + sides[:shift]:
            samples[f"step|{side}"].append(steppers[side].sample(args.calls))
    print(f"{name}: {args.rounds} rounds, TVM and Kiln alternating; median ns per call")
    print()
    print("| part | TVM | Kiln | Kiln − TVM |")
    print("| --- | --- | --- | --- |")
    for part in ("kv begin+end", "kv attention", "whole step"):
        t, k = (statistics.median(samples[f"{part}|{s}"]) for s in ("tvm", "kiln"))
        print(f"| {part} | {t / 1e3:.2f} µs | {k / 1e3:.2f} µs | {(k - t) / 1e3:+.2f} µs |")
    print()
    print(f"The whole step, TVM / Kiln (pooled allocator, its default) / Kiln with "
          f"memory_cfg='naive', rotating over {args.rounds} rounds:")
    print()
    print("| side | µs per step | / TVM |")
    print("| --- | --- | --- |")
    tvm_step = statistics.median(samples["step|tvm"])
    for side in sides:
        step = statistics.median(samples[f"step|{side}"])
        print(f"| {side} | {step / 1e3:.2f} | {step / tvm_step:.3f}× |")

    # The kernel on each VM's own buffers, both through Kiln's function (the code is the same
    # library; only the memory differs), then on buffers placed on purpose.
    kiln_args = kernel_args(steppers["kiln"], args.kernel)
    tvm_found = kernel_args(steppers["tvm"], args.kernel) if kiln_args is not None else None
    if kiln_args is None or tvm_found is None:
        return 0
    tvm_args = [kiln.from_dlpack(a) if isinstance(a, tvm.runtime.Tensor) else a
                for a in tvm_found]
    function = kiln.load_module(os.path.join(folder, "llvm", "lib.so"))[args.kernel]
    tensors = [a for a in kiln_args if isinstance(a, kiln.Tensor)]
    arrays = [np.random.default_rng(i).standard_normal(a.shape).astype(a.dtype)
              for i, a in enumerate(tensors)]
    # The VMs' buffers hold whatever the rest of the step left there (the pools reuse them):
    # the same values go into every variant, so that only the placement differs.
    for vm_args in (kiln_args, tvm_args):
        for tensor, array in zip([a for a in vm_args if isinstance(a, kiln.Tensor)], arrays):
            tensor.copyfrom(array)
    tvm_offsets = [a.data_ptr % PAGE for a in tvm_args if isinstance(a, kiln.Tensor)]
    pool = np.zeros(len(arrays) * (max(a.nbytes for a in arrays) + 2 * PAGE) + PAGE, np.uint8)
    pool_b = np.zeros_like(pool)
    variants = {
        "Kiln's VM buffers": kiln_args,
        "TVM's VM buffers": tvm_args,
        "fresh, all at page boundaries": placed(arrays, [0] * len(arrays), pool),
        "fresh, at TVM's offsets": placed(arrays, tvm_offsets, pool_b),
    }
    per_call_ns(function, kiln_args, 20)  # warm-up
    calls = max(10, int(2_000_000 / max(per_call_ns(function, kiln_args, 20), 1.0)))
    timings: Dict[str, List[float]] = collections.defaultdict(list)
    names = list(variants)
    for index in range(args.rounds * 2):
        shift = index % len(names)
        for variant in names[shift:] + names[:shift]:
            timings[variant].append(per_call_ns(function, variants[variant], calls))
    print()
    print(f"{args.kernel}{[tuple(t.shape) for t in tensors]}, {calls} calls a sample, "
          f"{args.rounds * 2} samples each, rotating; median µs per call")
    print()
    print("| buffers | offsets mod 4096 | µs per call |")
    print("| --- | --- | --- |")
    for variant in names:
        offsets = [hex(a.data_ptr % PAGE) for a in variants[variant]
                   if isinstance(a, kiln.Tensor)]
        print(f"| {variant} | {', '.join(offsets)} | "
              f"{statistics.median(timings[variant]) / 1e3:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
