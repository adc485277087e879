# SPDX-License-Identifier: Apache-2.0
"""TVM's reference runs of the tiny Llama (tiny_llama.py): the scenarios of issue 36, driven by
kiln.llm.Engine over TVM's own Relax VM and runtime builtins (TvmRuntime below, the thin
adapter), so that Kiln's runs (the same Engine over KilnRuntime) make the same sequence of calls.

    python tvm_reference.py OUT_DIR      # OUT_DIR as tiny_llama.py wrote it

writes OUT_DIR/reference.json (tokens of every scenario, TVM's version, the self-checks) and
OUT_DIR/reference/<scenario>.<label>.npy (the logits each token was chosen from, float32).

Scenarios (SCENARIOS; each takes an Engine and returns {label: (tokens, logits)}):
  single      one prompt of 20 ids, 12 greedy tokens (prefill, then decode)
  batch       3 sequences of prompt lengths 5, 17, 33 prefilled in one batch_prefill, then
              8 batch_decode steps
  fork        a prompt of 20 prefilled, forked whole (fork_pos -1, mid-page: the page is
              copied); parent and child decode different next tokens, then 4 steps together; a
              second child forked at 10 is prefilled with 5 tokens of its own
  popn        decode 6, popn 3, decode 6 again (the first 3 steps after popn repeat steps 4-6)
  pages       4 sequences of 14, 16, 30, 32 prompt tokens (92 tokens: two prefill passes of the
              64-token chunk) decoded 20 steps across the 16/32/48 page boundaries, and one
              prompt of 70 tokens (two single-sequence passes)
  top_p       12 tokens sampled with vm.builtin.sample_top_p_from_logits from a fixed list of
              uniforms (temperature 0.8, top_p 0.9; then temperature 1.0, top_p 0.5)
  consistency decode after a prefill equals a prefill of the whole prefix (both runtimes must
              agree with themselves, which checks the driver's positions, not just the runtime)

The scenarios need the model's KV cache configuration (CACHE) and its prompts are fixed
(PROMPT_SEED), so TVM's and Kiln's runs see the same inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

# The engine is Kiln's (python/kiln/llm.py); it imports without a device or TVM.
from kiln.llm import Engine

CACHE = {
    "max_batch_size": 8,
    "max_total_seq_len": 512,
    "prefill_chunk_size": 64,
    "page_size": 16,
}
PROMPT_SEED = 1234
VOCAB = 256

Result = Dict[str, Tuple[List[int], np.ndarray]]


class TvmRuntime:
    """kiln.llm's Runtime over TVM: tvm.relax.VirtualMachine and tvm.get_global_func."""

    def __init__(self):
        import tvm  # pylint: disable=import-outside-toplevel

        self.tvm = tvm

    def device(self, device: Any) -> Any:
        if not isinstance(device, str):
            return device
        name, _, index = device.partition(":")
        return self.tvm.device(name, int(index or 0))

    def device_type_and_id(self, device: Any) -> Tuple[int, int]:
        return int(device.dlpack_device_type()), int(device.index)

    def load_vm(self, library: str, device: Any) -> Any:
        from tvm import relax  # pylint: disable=import-outside-toplevel

        devices = [device] if device.dlpack_device_type() == 1 else [device, self.tvm.cpu()]
        return relax.VirtualMachine(self.tvm.runtime.load_module(library), devices)

    def has_function(self, vm: Any, name: str) -> bool:
        try:
            vm[name]
            return True
        except (AttributeError, KeyError, ValueError, RuntimeError):
            return False

    def builtin(self, name: str) -> Callable[..., Any]:
        return self.tvm.get_global_func(name)

    def shape(self, values: Sequence[int]) -> Any:
        return self.tvm.runtime.ShapeTuple([int(v) for v in values])

    def tensor(self, array: np.ndarray, device: Any) -> Any:
        return self.tvm.runtime.tensor(np.ascontiguousarray(array), device)

    def numpy(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor.numpy())

    def call_argument(self, value: Any) -> Any:
        return value  # TVM's array already is what its calls take


def prompt(length: int, salt: int = 0) -> List[int]:
    """A fixed prompt of `length` ids (1..VOCAB-1) for salt `salt`."""
    rng = np.random.default_rng(PROMPT_SEED + 7919 * salt + length)
    return [int(t) for t in rng.integers(1, VOCAB, size=length)]


def uniforms(count: int, salt: int = 0) -> List[float]:
    """A fixed list of `count` uniforms in [0, 1) for top-p sampling."""
    rng = np.random.default_rng(PROMPT_SEED + 31 * salt)
    return [float(u) for u in rng.random(count)]


def _greedy_steps(engine: Engine, seq_ids: List[int], logits: np.ndarray, steps: int
                  ) -> Tuple[List[List[int]], List[np.ndarray]]:
    """`steps` greedy tokens for every sequence from their current `logits` (rows), decoding
    together; returns (tokens per sequence, the logits rows of every step: (steps, b, vocab))."""
    tokens: List[List[int]] = [[] for _ in seq_ids]
    rows = []
    for step in range(steps):
        rows.append(logits)
        chosen = [engine.sample(row) for row in logits]
        for i, t in enumerate(chosen):
            tokens[i].append(t)
        if step + 1 < steps:
            logits = engine.decode(seq_ids, chosen)
    return tokens, rows


def scenario_single(engine: Engine) -> Result:
    gen = engine.generate(prompt(20), 12)
    return {"tokens": (gen.tokens, gen.logits)}


def scenario_batch(engine: Engine) -> Result:
    lengths = [5, 17, 33]
    ids = [engine.add_sequence() for _ in lengths]
    logits = engine.prefill(ids, [prompt(n, salt=1) for n in lengths])
    tokens, rows = _greedy_steps(engine, ids, logits, 9)
    stacked = np.stack(rows)  # (steps, b, vocab)
    for seq_id in ids:
        engine.remove_sequence(seq_id)
    return {f"seq{n}": (tokens[i], stacked[:, i]) for i, n in enumerate(lengths)}


def scenario_fork(engine: Engine) -> Result:
    parent = engine.add_sequence()
    logits = engine.prefill([parent], [prompt(20, salt=2)])[0]
    child = engine.fork_sequence(parent)
    order = np.argsort(-logits, kind="stable")
    first = [int(order[0]), int(order[1])]  # the parent takes the best token, the child the next
    after = engine.decode([parent, child], first)
    tokens, rows = _greedy_steps(engine, [parent, child], after, 5)
    stacked = np.stack(rows)
    # A child forked in the middle of the first page, then prefilled with tokens of its own.
    late = engine.fork_sequence(parent, fork_pos=10)
    late_logits = engine.prefill([late], [prompt(5, salt=3)])
    late_tokens, late_rows = _greedy_steps(engine, [late], late_logits, 4)
    for seq_id in (parent, child, late):
        engine.remove_sequence(seq_id)
    return {
        "parent": ([first[0]] + tokens[0], np.concatenate([logits[None], stacked[:, 0]])),
        "child": ([first[1]] + tokens[1], np.concatenate([logits[None], stacked[:, 1]])),
        "late_child": (late_tokens[0], np.stack(late_rows)[:, 0]),
    }


def scenario_popn(engine: Engine) -> Result:
    seq = engine.add_sequence()
    logits = engine.prefill([seq], [prompt(20, salt=4)])
    before, rows_before = _greedy_steps(engine, [seq], logits, 7)  # feeds 6 tokens
    engine.popn(seq, 3)  # back to the prompt and the first 3 fed tokens
    logits = engine.decode([seq], [before[0][3]])
    after, rows_after = _greedy_steps(engine, [seq], logits, 6)
    engine.remove_sequence(seq)
    return {
        "before": (before[0], np.stack(rows_before)[:, 0]),
        "after": (after[0], np.stack(rows_after)[:, 0]),
    }


def scenario_pages(engine: Engine) -> Result:
    lengths = [14, 16, 30, 32]
    ids = [engine.add_sequence() for _ in lengths]
    logits = engine.prefill(ids, [prompt(n, salt=5) for n in lengths])
    tokens, rows = _greedy_steps(engine, ids, logits, 20)
    stacked = np.stack(rows)
    for seq_id in ids:
        engine.remove_sequence(seq_id)
    result = {f"seq{n}": (tokens[i], stacked[:, i]) for i, n in enumerate(lengths)}
    gen = engine.generate(prompt(70, salt=6), 6)  # a prompt over the 64-token prefill chunk
    result["long_prompt"] = (gen.tokens, gen.logits)
    return result


def scenario_top_p(engine: Engine) -> Result:
    a = engine.generate(prompt(20, salt=7), 12, "top_p", temperature=0.8, top_p=0.9,
                        uniforms=uniforms(12, salt=1))
    b = engine.generate(prompt(20, salt=8), 12, "top_p", temperature=1.0, top_p=0.5,
                        uniforms=uniforms(12, salt=2))
    return {"t0.8_p0.9": (a.tokens, a.logits), "t1.0_p0.5": (b.tokens, b.logits)}


def scenario_consistency(engine: Engine) -> Result:
    """Logits after decoding tokens one by one, and after prefilling the same prefix at once."""
    text = prompt(20, salt=9)
    gen = engine.generate(text, 4)
    seq = engine.add_sequence()
    whole = engine.prefill([seq], [text + gen.tokens[:3]])
    engine.remove_sequence(seq)
    return {"decoded": (gen.tokens[3:], gen.logits[3:]), "prefilled": ([], whole)}


SCENARIOS: Dict[str, Callable[[Engine], Result]] = {
    "single": scenario_single,
    "batch": scenario_batch,
    "fork": scenario_fork,
    "popn": scenario_popn,
    "pages": scenario_pages,
    "top_p": scenario_top_p,
    "consistency": scenario_consistency,
}


def self_checks(results: Dict[str, Result], atol: float) -> List[str]:
    """What must hold within one runtime's results (independent of the other runtime): the
    failures, as sentences (empty: all hold)."""
    failures = []
    popn = results["popn"]
    if popn["after"][0][:3] != popn["before"][0][4:7]:
        failures.append(f"popn: tokens after popn {popn['after'][0][:3]} are not the earlier "
                        f"steps 5-7 {popn['before'][0][4:7]}")
    diff = np.abs(popn["after"][1][:3] - popn["before"][1][4:7]).max()
    if diff > atol:
        failures.append(f"popn: logits after popn differ from the earlier steps by {diff}")
    cons = results["consistency"]
    diff = np.abs(cons["decoded"][1][0] - cons["prefilled"][1][0]).max()
    if diff > atol:
        failures.append(f"consistency: decode and prefill of one prefix differ by {diff}")
    single = results["single"]["tokens"]
    if len(single[0]) != 12:
        failures.append(f"single: {len(single[0])} tokens, not 12")
    return failures


def make_engine(fixture_dir: str, target: str = "llvm", device: str = "cpu",
                runtime: Any = None) -> Engine:
    """An Engine over the fixture's library for `target` on `device` (runtime: kiln.llm's Runtime;
    default Kiln's)."""
    return Engine(os.path.join(fixture_dir, target, "lib.so"),
                  os.path.join(fixture_dir, "params"), device, runtime=runtime, **CACHE)


def run_all(engine: Engine) -> Dict[str, Result]:
    """Every scenario in order on one engine (each leaves the cache empty)."""
    results = {}
    for name, scenario in SCENARIOS.items():
        results[name] = scenario(engine)
        if engine.sequences:
            raise AssertionError(f"scenario {name} left sequences {engine.sequences}")
    return results


def write_reference(fixture_dir: str) -> str:
    """Run every scenario on TVM's CPU build and write reference.json and the .npy logits into
    `fixture_dir`; returns the JSON's path. Raises AssertionError if a self-check fails."""
    import tvm  # pylint: disable=import-outside-toplevel

    engine = make_engine(fixture_dir, runtime=TvmRuntime())
    results = run_all(engine)
    failures = self_checks(results, atol=1e-4)
    if failures:
        raise AssertionError("TVM's reference runs fail their self-checks: " + "; ".join(failures))
    npy_dir = os.path.join(fixture_dir, "reference")
    os.makedirs(npy_dir, exist_ok=True)
    doc: Dict[str, Any] = {"tvm_version": tvm.__version__, "cache": CACHE, "scenarios": {}}
    for name, result in results.items():
        entry = doc["scenarios"][name] = {}
        for label, (tokens, logits) in result.items():
            file_name = f"{name}.{label}.npy"
            np.save(os.path.join(npy_dir, file_name), np.asarray(logits, dtype="float32"))
            entry[label] = {"tokens": tokens, "logits": os.path.join("reference", file_name)}
    path = os.path.join(fixture_dir, "reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    return path


def load_reference(fixture_dir: str) -> Dict[str, Result]:
    """reference.json and its .npy files, as run_all returns results."""
    with open(os.path.join(fixture_dir, "reference.json"), encoding="utf-8") as f:
        doc = json.load(f)
    return {
        name: {label: (entry["tokens"], np.load(os.path.join(fixture_dir, entry["logits"])))
               for label, entry in labels.items()}
        for name, labels in doc["scenarios"].items()
    }


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fixture_dir", help="the folder tiny_llama.py wrote")
    args = parser.parse_args(argv)
    print(write_reference(args.fixture_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
