# SPDX-License-Identifier: Apache-2.0
"""An LLM's decode step and prefill in Kiln beside TVM 0.27 (issue 36, docs/benchmarks.md "LLM
decode and prefill"): the same compiled model library and the same weights, in one process,
run by TVM's Relax VM with TVM's paged KV cache and by Kiln's VM with Kiln's KV cache.

Models (tests/llm/tiny_llama.py, compiled for llvm, weights from its tensor-cache writer):
  tiny    the test fixture: 3 layers, hidden 64, 4/2 heads of 16, vocab 256 (per-call overhead)
  medium  4 layers, hidden 256, intermediate 704, 4/2 heads of 64, vocab 2048 (kernels dominate)
  large   8 layers, hidden 512, intermediate 1408, 8/2 heads of 64, vocab 4096 (not by default:
          the unscheduled llvm build spends 125 ms a decode step and 4.7 s a 128-token prefill
          on this machine, mostly transposing weights, which would take the run past minutes)

Cases, each timed per step (time.perf_counter_ns around the step, nothing else):
  decode bB ctxC  B sequences of C-1 cached tokens take one token each: kv_state_begin_forward,
                  embed, vm.builtin.reshape, decode (B = 1) or batch_decode, kv_state_end_forward;
                  after the clock stops each sequence pops the token (kv_state_popn), so every
                  step attends over C tokens and stays inside its page (no page allocated)
  prefill 128     one empty sequence takes a 128-token prompt: begin_forward, embed, reshape,
                  prefill, end_forward (8 pages allocated); the sequence is removed and added
                  again after the clock stops
Inputs (token tensors, shape tuples, the weights in the form the engine passes them) are made
before the clock starts; logits stay on the device.
Before measuring, the two runtimes' logits of the same step are compared (1e-4): they run the
same computation.

Sides, interleaved per repeat (the order goes through the six permutations: TVM, Kiln, floor;
Kiln, TVM, floor; floor, TVM, Kiln; ...; TVM before Kiln in every other repeat):
  tvm    tvm.relax.VirtualMachine and TVM's builtins (tests/llm/tvm_reference.py's TvmRuntime)
  kiln   kiln.vm.VirtualMachine and Kiln's builtins (kiln.llm.KilnRuntime)
  floor  the compute floor: every Call the step's VM functions make to the library's own
         compiled functions (matmul, rms_norm, take, shape functions, ...), each timed by
         kiln.time_evaluator in a C++ loop (the fastest of 3 batches of at least 100 µs) on a
         private copy of the arguments that call had in a real step (captured once with the
         VM's instrument), summed. It leaves out the VM's builtins (allocation, shapes,
         reshape) and the KV cache's builtins with their kernels (rope, append, paged
         attention), whose page tables belong to the cache: a lower bound that no runtime can
         beat, not a tight one.
A sample is the mean step time of a batch of steps lasting at least --min-time (the same batch
size for both runtimes); a launch is a fresh process; the table gives, per case and side, the
median of all samples of all launches and the range of the launches' medians, and the paired
ratio: Kiln's sample over TVM's of the same repeat (taken one after the other), its median, the
range of its launch medians and how often Kiln was the faster of the pair. The --json file holds
every sample.

  PYTHONPATH=build/python KILN_LOG=warn build/.venv-tvm/bin/python bench/llm/llm_step_bench.py \
      [--launches 3] [--repeats 10] [--min-time 0.05] [--models tiny,medium] \
      [--models-dir build/llm_bench_models] [--json FILE]

Missing models are built first with tiny_llama.py (a few seconds each). Needs apache-tvm 0.27 and
the kiln package of a build tree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "llm"))

SIDES = ("tvm", "kiln", "floor")
# The sides' order in successive repeats: every permutation, so that TVM runs before Kiln in
# half of the repeats (and in two of every four): a side that gains from going first or second
# (caches, frequency, the other load's phase) gains on both alike.
ORDERS = (("tvm", "kiln", "floor"), ("kiln", "tvm", "floor"), ("floor", "tvm", "kiln"),
          ("floor", "kiln", "tvm"), ("tvm", "floor", "kiln"), ("kiln", "floor", "tvm"))
CACHE = {"max_batch_size": 8, "max_total_seq_len": 4096, "prefill_chunk_size": 256,
         "page_size": 16}
DECODE_CASES = ((1, 64), (4, 64), (1, 256), (4, 256))  # (batch, context)
PREFILL_TOKENS = 128
FLOOR_BATCH_NS = 100_000  # each kernel's evaluator batch lasts at least this long
FLOOR_BATCHES = 3  # batches per kernel and floor sample; the kernel's time is the fastest
LOGITS_ATOL = 1e-4


def model_configs() -> Dict[str, Any]:
    from tiny_llama import TinyLlamaConfig  # pylint: disable=import-outside-toplevel

    return {
        "tiny": TinyLlamaConfig(),
        "medium": TinyLlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=704,
                                  num_hidden_layers=4, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=64),
        "large": TinyLlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1408,
                                 num_hidden_layers=8, num_attention_heads=8,
                                 num_key_value_heads=2, head_dim=64),
    }


def ensure_model(models_dir: str, name: str, config: Any) -> str:
    """The folder of model `name` (llvm/lib.so, params/), built with tiny_llama.py unless a
    build of the same configuration is there already."""
    import tiny_llama  # pylint: disable=import-outside-toplevel

    folder = os.path.join(models_dir, name)
    config_path = os.path.join(folder, "config.json")
    if os.path.isfile(os.path.join(folder, "llvm", "lib.so")) and os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            if json.load(f).get("model_config") == json.loads(json.dumps(asdict(config))):
                return folder
    print(f"# building model {name} into {folder}", file=sys.stderr, flush=True)
    tiny_llama.build(folder, config, opencl=False)
    return folder


# -- one side's step ----------------------------------------------------------------------------


class Stepper:
    """The steps of one case on one runtime's engine: step() runs one timed step and returns
    its nanoseconds, then restores the cache untimed, so that every step sees the same state."""

    def __init__(self, engine: Any, kind: str, seq_ids: List[int], tokens: int):
        rt = engine.runtime
        self.engine = engine
        # The weights as the engine passes them on every call (Runtime.call_argument): TVM's
        # array as it is, Kiln's made into a VM array once; a Python tuple here would time its
        # conversion on each call, which no engine does.
        self.cache, self.params = engine.cache, rt.call_argument(engine.params)
        self.begin = rt.builtin("vm.builtin.kv_state_begin_forward")
        self.end = rt.builtin("vm.builtin.kv_state_end_forward")
        self.popn = rt.builtin("vm.builtin.kv_state_popn")
        self.add = rt.builtin("vm.builtin.kv_state_add_sequence")
        self.remove = rt.builtin("vm.builtin.kv_state_remove_sequence")
        self.reshape = rt.builtin("vm.builtin.reshape")
        self.embed = engine.vm["embed"]
        self.kind = kind
        self.seq_ids = seq_ids
        rng = np.random.default_rng(36)
        if kind == "decode":
            batch = len(seq_ids)
            ids = rng.integers(1, engine.vocab_size, size=batch).astype("int32")
            self.model = engine.vm["decode" if batch == 1 else "batch_decode"]
            self.lengths = rt.shape([1] * batch)
            self.embed_shape = rt.shape([batch, 1, engine.hidden_size])
        else:
            ids = rng.integers(1, engine.vocab_size, size=tokens).astype("int32")
            self.model = engine.vm["prefill"]
            self.lengths = rt.shape([tokens])
            self.embed_shape = rt.shape([1, tokens, engine.hidden_size])
        self.ids = rt.tensor(ids, engine.device)
        self.seqs = rt.shape(seq_ids)

    def run(self) -> Any:
        """One forward pass; returns the model's logits tensor (the cache is left advanced)."""
        self.begin(self.cache, self.seqs, self.lengths)
        out = self.model(self.reshape(self.embed(self.ids, self.params), self.embed_shape),
                         self.cache, self.params)
        self.end(self.cache)
        return out[0]

    def restore(self) -> None:
        if self.kind == "decode":
            for seq_id in self.seq_ids:
                self.popn(self.cache, seq_id, 1)
        else:
            for seq_id in self.seq_ids:
                self.remove(self.cache, seq_id)
                self.add(self.cache, seq_id)

    def step(self) -> int:
        begin, cache, seqs, lengths = self.begin, self.cache, self.seqs, self.lengths
        start = time.perf_counter_ns()
        begin(cache, seqs, lengths)
        out = self.model(self.reshape(self.embed(self.ids, self.params), self.embed_shape),
                         cache, self.params)
        self.end(cache)
        elapsed = time.perf_counter_ns() - start
        del out
        self.restore()
        return elapsed

    def sample(self, steps: int) -> float:
        """Mean nanoseconds of `steps` steps."""
        return sum(self.step() for _ in range(steps)) / steps


class Floor:
    """The library's compiled functions that one step calls, with copies of that step's
    arguments, each timed with kiln.time_evaluator; sample() is their sum in nanoseconds."""

    def __init__(self, kiln_stepper: Stepper):
        import kiln  # pylint: disable=import-outside-toplevel

        vm = kiln_stepper.engine.vm
        device = kiln_stepper.engine.device
        calls: List[Tuple[str, Any, List[Any]]] = []

        def copy(arg: Any) -> Any:
            return kiln.tensor(arg.numpy(), arg.device) if isinstance(arg, kiln.Tensor) else arg

        def instrument(func, symbol, before_run, _ret, *args):
            if before_run and not symbol.startswith("vm.builtin.") and isinstance(
                    func, kiln.Function):
                calls.append((symbol, func, [copy(a) for a in args]))

        vm.set_instrument(instrument)
        try:
            kiln_stepper.run()
        finally:
            vm.set_instrument(None)
            kiln_stepper.restore()
        if not calls:
            raise RuntimeError("llm_step_bench: the step made no call to the library's functions")
        self.kernels = []
        for symbol, func, args in calls:
            probe = kiln.time_evaluator(func, device, number=1, repeat=1)
            once_ns = max(probe(*args).mean * 1e9, 1.0)
            number = max(1, int(FLOOR_BATCH_NS / once_ns))
            self.kernels.append((symbol, kiln.time_evaluator(func, device, number=number,
                                                             repeat=FLOOR_BATCHES), args))

    def sample(self) -> float:
        # The fastest of a kernel's batches: a floor is a lower bound, and a batch that the
        # machine's other load slowed down must not lift it above the steps it bounds.
        return sum(evaluator(*args).min for _, evaluator, args in self.kernels) * 1e9


# -- one launch ---------------------------------------------------------------------------------


def make_engines(folder: str, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """{"tvm": Engine over TVM, "kiln": Engine over Kiln, and one per `extra` {side: kiln.llm
    Runtime}} of the model in `folder`, each with the CACHE configuration."""
    from kiln.llm import Engine  # pylint: disable=import-outside-toplevel
    from tvm_reference import TvmRuntime  # pylint: disable=import-outside-toplevel

    lib, params = os.path.join(folder, "llvm", "lib.so"), os.path.join(folder, "params")
    engines = {"tvm": Engine(lib, params, "cpu", runtime=TvmRuntime(), **CACHE),
               "kiln": Engine(lib, params, "cpu", **CACHE)}
    for side, runtime in (extra or {}).items():
        engines[side] = Engine(lib, params, "cpu", runtime=runtime, **CACHE)
    return engines


def prepare_model(name: str, folder: str, extra: Optional[Dict[str, Any]] = None
                  ) -> Dict[str, Dict[str, Any]]:
    """{case: {"tvm": Stepper, "kiln": Stepper, "floor": Floor, and a Stepper per `extra`
    runtime (see make_engines)}} of model `name`, its sequences prefilled on every runtime with
    the same prompts, and every runtime's logits of the same step compared with TVM's."""
    engines = make_engines(folder, extra)
    contexts = sorted({c for _, c in DECODE_CASES})
    max_batch = max(b for b, _ in DECODE_CASES)
    groups: Dict[str, Dict[Any, List[int]]] = {}
    rng = np.random.default_rng(2036)
    prompts = {c: [rng.integers(1, engines["kiln"].vocab_size, size=c - 1).tolist()
                   for _ in range(max_batch)] for c in contexts}
    for side, engine in engines.items():
        groups[side] = {}
        for context in contexts:
            ids = [engine.add_sequence() for _ in range(max_batch)]
            engine.prefill(ids, prompts[context])
            groups[side][context] = ids
        groups[side]["prefill"] = [engine.add_sequence()]
    cases: Dict[str, Dict[str, Any]] = {}
    for batch, context in DECODE_CASES:
        cases[f"{name} decode b{batch} ctx{context}"] = {
            side: Stepper(engines[side], "decode", groups[side][context][:batch], 0)
            for side in engines}
    cases[f"{name} prefill {PREFILL_TOKENS}"] = {
        side: Stepper(engines[side], "prefill", groups[side]["prefill"], PREFILL_TOKENS)
        for side in engines}
    for case, steppers in cases.items():
        tvm_logits = steppers["tvm"].run().numpy()
        steppers["tvm"].restore()
        for side in engines:
            if side == "tvm":
                continue
            logits = steppers[side].run().numpy()
            steppers[side].restore()
            diff = (float(np.abs(tvm_logits - logits).max())
                    if logits.shape == tvm_logits.shape else float("inf"))
            if diff > LOGITS_ATOL:
                raise AssertionError(f"llm_step_bench: {case}: {side}'s logits differ from "
                                     f"TVM's (shapes {logits.shape} / {tvm_logits.shape}, max "
                                     f"difference {diff})")
        steppers["floor"] = Floor(steppers["kiln"])
    return cases


def calibrate(steppers: Dict[str, Any], min_time: float) -> int:
    """Warms both runtimes up for about min_time each; returns the steps a sample takes so that
    it lasts at least min_time on the slower one."""
    longest = 0.0
    for side in ("tvm", "kiln"):
        steps, spent = 0, 0
        while spent < min_time * 1e9 or steps < 2:
            spent += steppers[side].step()
            steps += 1
        longest = max(longest, spent / steps)
    steppers["floor"].sample()
    return max(1, int(min_time * 1e9 / longest + 0.999))


def run_launch(models: List[str], models_dir: str, repeats: int, min_time: float
               ) -> Dict[str, Any]:
    """One process's samples: {"cases": {case: {side: [ns per step]}}, "steps": {...},
    "kernels": {case: number of floor kernels}}."""
    cases: Dict[str, Dict[str, Any]] = {}
    for name in models:
        cases.update(prepare_model(name, os.path.join(models_dir, name)))
    steps = {case: calibrate(steppers, min_time) for case, steppers in cases.items()}
    samples: Dict[str, Dict[str, List[float]]] = {c: {s: [] for s in SIDES} for c in cases}
    for repeat in range(repeats):
        order = ORDERS[repeat % len(ORDERS)]
        for case, steppers in cases.items():
            for side in order:
                value = (steppers[side].sample() if side == "floor"
                         else steppers[side].sample(steps[case]))
                samples[case][side].append(value)
    return {"cases": samples, "steps": steps,
            "kernels": {case: len(s["floor"].kernels) for case, s in cases.items()}}


# -- the report ---------------------------------------------------------------------------------


def fmt(ns: float) -> str:
    """ns as µs or ms with 4 significant digits."""
    return f"{ns / 1e6:.4g} ms" if ns >= 1e6 else f"{ns / 1e3:.4g} µs"


def summarise(launches: List[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{case: {side: {median, low, high}}}: the median of all samples and the range of the
    launches' medians, in ns; and {case: {"paired": {median, low, high, kiln_faster}}}: the
    ratio Kiln / TVM of the two samples of each repeat (taken one after the other), its median
    over all repeats, the range of its launch medians, and the share of repeats Kiln was faster
    in (a figure the machine's other load moves less than the ratio of the medians)."""
    summary: Dict[str, Dict[str, Dict[str, float]]] = {}
    for case in launches[0]["cases"]:
        summary[case] = {}
        for side in SIDES:
            per_launch = [launch["cases"][case][side] for launch in launches]
            medians = [statistics.median(v) for v in per_launch]
            summary[case][side] = {"median": statistics.median(v for s in per_launch for v in s),
                                   "low": min(medians), "high": max(medians)}
        ratios = [[k / t for k, t in zip(launch["cases"][case]["kiln"],
                                         launch["cases"][case]["tvm"])] for launch in launches]
        pooled = [r for launch in ratios for r in launch]
        medians = [statistics.median(r) for r in ratios]
        summary[case]["paired"] = {"median": statistics.median(pooled), "low": min(medians),
                                   "high": max(medians),
                                   "kiln_faster": sum(r < 1 for r in pooled) / len(pooled)}
    return summary


def print_table(summary: Dict[str, Dict[str, Dict[str, float]]], launches: int, repeats: int
                ) -> None:
    print(f"{launches} launch(es) x {repeats} repeats, TVM / Kiln / floor interleaved per "
          "repeat; time per step, median [range of launch medians]")
    print()
    print("| case | floor (kernels) | TVM | Kiln | Kiln / TVM | paired Kiln / TVM "
          "[launches], Kiln faster | Kiln − TVM | TVM − floor | Kiln − floor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, sides in summary.items():
        cells = [f"{fmt(v['median'])} [{fmt(v['low'])}–{fmt(v['high'])}]"
                 for v in (sides["floor"], sides["tvm"], sides["kiln"])]
        tvm, kiln_ns, floor = (sides[s]["median"] for s in ("tvm", "kiln", "floor"))
        paired = sides["paired"]
        sign = "+" if kiln_ns >= tvm else "−"
        print(f"| {case} | {cells[0]} | {cells[1]} | **{cells[2]}** | {kiln_ns / tvm:.3f}× | "
              f"{paired['median']:.3f}× [{paired['low']:.3f}–{paired['high']:.3f}], "
              f"{paired['kiln_faster']:.0%} | {sign}{fmt(abs(kiln_ns - tvm))} | "
              f"{fmt(tvm - floor)} | {fmt(kiln_ns - floor)} |")
    below = [f"{case} ({side})" for case, sides in summary.items() for side in ("tvm", "kiln")
             if sides[side]["median"] < sides["floor"]["median"]]
    if below:
        print(f"\nBELOW THE FLOOR (a bug in the method): {', '.join(below)}")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launches", type=int, default=3,
                        help="processes, each with every case (default 3; at least 3 for a "
                             "figure)")
    parser.add_argument("--repeats", type=int, default=10, help="samples per side and case "
                        "in a launch (default 10)")
    parser.add_argument("--min-time", type=float, default=0.05,
                        help="seconds a runtime's sample lasts at least (default 0.05)")
    parser.add_argument("--models", default="tiny,medium",
                        help="comma-separated: tiny, medium, large (default tiny,medium)")
    parser.add_argument("--models-dir", default=os.path.join(ROOT, "build", "llm_bench_models"),
                        help="where the compiled models are kept (default build/llm_bench_models)")
    parser.add_argument("--json", default=None, help="also write the samples and the summary "
                        "to this file")
    parser.add_argument("--one-launch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    configs = model_configs()
    unknown = [m for m in models if m not in configs]
    if unknown or not models:
        parser.error(f"--models: unknown {unknown}; choose from {sorted(configs)}")
    if args.launches < 1 or args.repeats < 1 or args.min_time <= 0:
        parser.error("--launches and --repeats must be positive, --min-time above 0")

    if args.one_launch:
        print(json.dumps(run_launch(models, args.models_dir, args.repeats, args.min_time)))
        return 0

    for name in models:
        ensure_model(args.models_dir, name, configs[name])
    started = time.time()
    launches = []
    for index in range(args.launches):
        command = [sys.executable, os.path.abspath(__file__), "--one-launch",
                   "--models", ",".join(models), "--models-dir", args.models_dir,
                   "--repeats", str(args.repeats), "--min-time", str(args.min_time)]
        proc = subprocess.run(command, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            print(f"llm_step_bench: launch {index + 1} exited with {proc.returncode}",
                  file=sys.stderr)
            return 1
        launches.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"# launch {index + 1}/{args.launches} done ({time.time() - started:.0f} s)",
              file=sys.stderr, flush=True)
    summary = summarise(launches)
    if args.launches < 3:
        print("# fewer than 3 launches: for trying the script, not a figure")
    print_table(summary, args.launches, args.repeats)
    print(f"\nsteps per sample: {launches[0]['steps']}")
    print(f"floor kernels per step: {launches[0]['kernels']}")
    print(f"wall time {time.time() - started:.0f} s")
    if args.json:
        import tvm  # pylint: disable=import-outside-toplevel

        doc = {"command": [os.path.basename(sys.executable)] + sys.argv,
               "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "load_average": os.getloadavg()},
               "tvm_version": tvm.__version__, "unit": "ns per step", "cache": CACHE,
               "models": {m: asdict(configs[m]) for m in models},
               "summary": summary, "launches": launches}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
