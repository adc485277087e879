# SPDX-License-Identifier: Apache-2.0
"""Sliding window in Kiln's paged KV cache against TVM's, step by step, with the same TIR kernels.

Both caches are created with support_sliding_window = 1 from one library of TVM 0.27's CPU
kernels (TIRPagedKVCache's set for llvm, with its two sliding-window kernels, which such a cache
runs on every layer) and driven through the same script: sequences given a window with
vm.builtin.attention_kv_cache_enable_sliding_window_for_seq (windows of 24, 33 and 40 tokens
over pages of 16, sinks of 0, 4 and 16), prefilled past their window in one pass, decoded long
past it, batched with a sequence that does not slide, forked within their sink, popped. Every
attention output, the K/V each sequence still holds (debug_get_kv), the free pages and the total
length must be identical: both caches hand the same kernels the same tables. Then the refusals
(a cache without sliding window, an unknown sequence, a sink not below the window, enabling twice,
forks outside the sink, pops TVM would get wrong, a library without the sliding-window kernels):
each a ValueError naming the builtin, after which the caches go on matching. The bookkeeping
alone is tests/llm/kv_sliding_window_test.cc.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import kiln

tvm = pytest.importorskip("tvm", reason="apache-tvm 0.27 builds the kernels and runs the reference")
from tvm.relax.frontend.nn.llm import kv_cache as tvm_kv  # noqa: E402

NUM_LAYERS = 2
QO_HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
PAGE = 16
MAX_SEQS = 8
MAX_TOTAL = 256  # 17 pages, and 2 more per sequence with sliding window: 33
CHUNK = 128
DTYPE = "float32"
ROPE_NORMAL = 1  # a sliding-window cache applies it inline (TVM's rule), in both runtimes
SM_SCALE = HEAD_DIM**-0.5
ENABLE = "attention_kv_cache_enable_sliding_window_for_seq"


def build_kernel_library(path: pathlib.Path) -> pathlib.Path:
    """The CPU kernels TIRPagedKVCache passes for llvm, the sliding-window pair included."""
    funcs = {
        "transpose_append": tvm_kv._kv_cache_transpose_append(KV_HEADS, HEAD_DIM, DTYPE, PAGE),
        "debug_get_kv": tvm_kv._kv_cache_debug_get_kv(NUM_LAYERS, KV_HEADS, HEAD_DIM, DTYPE),
        "prefill": tvm_kv._attention_prefill_cpu(KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, False, {}),
        "decode": tvm_kv._attention_decode_cpu(
            KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, False, {}, PAGE
        ),
        "prefill_sliding": tvm_kv._attention_prefill_cpu(
            KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, True, {}
        ),
        "decode_sliding": tvm_kv._attention_decode_cpu(
            KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, True, {}, PAGE
        ),
        "prefill_ragged": tvm_kv._attention_prefill_ragged_cpu(
            KV_HEADS, QO_HEADS, HEAD_DIM, HEAD_DIM, DTYPE, {}
        ),
        "merge": tvm_kv._merge_state_inplace_cpu(DTYPE),
        "split_rotary": tvm_kv.llama_rope_with_position_map(
            1e4, 1.0, HEAD_DIM, QO_HEADS, KV_HEADS, DTYPE, {}
        ),
        "copy_single_page": tvm_kv._copy_single_page_cpu(KV_HEADS, PAGE, HEAD_DIM, DTYPE),
        "compact_copy": tvm_kv._compact_kv_copy_cpu(KV_HEADS, HEAD_DIM, DTYPE, PAGE),
    }
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    tvm.tirx.build(mod, target="llvm").export_library(str(path))
    return path


@pytest.fixture(scope="module")
def kernel_library(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build_kernel_library(tmp_path_factory.mktemp("kv_sliding_kernels") / "kernels.so")


def create_cache(get_func, shape, make_tensor, k: dict, config=None, sliding=True, kinds=None):
    """vm.builtin.paged_attention_kv_cache_create with TVM 0.27's arguments, as TIRPagedKVCache
    passes them for llvm (`sliding`: with the sliding-window kernels, arguments 18 and 19)."""
    return get_func("vm.builtin.paged_attention_kv_cache_create")(
        shape(config or [MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1, 1024]),
        shape([0, NUM_LAYERS]),
        QO_HEADS,
        KV_HEADS,
        HEAD_DIM,
        HEAD_DIM,
        shape(kinds or [0] * NUM_LAYERS),
        False,
        ROPE_NORMAL,
        1.0,
        1e4,
        None,
        make_tensor(np.zeros((), DTYPE)),
        k["transpose_append"],
        None,
        ["tirx", k["prefill_ragged"]],
        ["tirx", k["prefill"]],
        ["tirx", k["decode"]],
        ["tirx", k["prefill_sliding"]] if sliding else [],
        ["tirx", k["decode_sliding"]] if sliding else [],
        [],
        [],
        [],
        [k["merge"]],
        k["split_rotary"],
        k["copy_single_page"],
        k["debug_get_kv"],
        k["compact_copy"],
    )


class Side:
    """One runtime's cache and its builtins (TVM's or Kiln's), driven the same way."""

    def __init__(self, name, get_func, load, make_tensor, shape, lib_path, **create):
        self.name = name
        self.get_func = get_func
        self.shape = shape
        self.make_tensor = make_tensor
        lib = load(str(lib_path))
        self.kernels = {
            n: lib[n]
            for n in [
                "transpose_append", "debug_get_kv", "prefill", "decode", "prefill_sliding",
                "decode_sliding", "prefill_ragged", "merge", "split_rotary", "copy_single_page",
                "compact_copy",
            ]
        }
        self.cache = create_cache(get_func, shape, make_tensor, self.kernels, **create)

    def call(self, builtin: str, *args):
        converted = [self.shape(a) if isinstance(a, list) else a for a in args]
        return self.get_func(f"vm.builtin.{builtin}")(self.cache, *converted)

    def attention(self, layer: int, qkv: np.ndarray) -> np.ndarray:
        out = self.make_tensor(np.zeros((qkv.shape[0], QO_HEADS, HEAD_DIM), DTYPE))
        self.get_func("vm.builtin.attention_kv_cache_attention_with_fused_qkv")(
            self.cache, layer, SM_SCALE, self.make_tensor(qkv), out
        )
        return out.numpy()

    def cached_kv(self, seq: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        v = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        self.call("attention_kv_cache_debug_get_kv", seq, 0, length, k, v)
        return k.numpy(), v.numpy()


def make_sides(lib: pathlib.Path, **create) -> tuple[Side, Side]:
    """TVM's cache and Kiln's, each on its own copy of the library's kernels."""
    return (
        Side("tvm", tvm.get_global_func, tvm.runtime.load_module, tvm.runtime.tensor,
             tvm.runtime.ShapeTuple, lib, **create),
        Side("kiln", kiln.get_global_func, kiln.load_module, kiln.tensor, kiln.ShapeTuple, lib,
             **create),
    )


@pytest.fixture()
def sides(kernel_library: pathlib.Path) -> tuple[Side, Side]:
    return make_sides(kernel_library)


class Script:
    """Drives both caches and checks they agree after every step."""

    def __init__(self, sides: tuple[Side, Side]):
        self.sides = sides
        self.lengths: dict[int, int] = {}
        self.windows: dict[int, int] = {}
        self.rng = np.random.default_rng(36)

    def both(self, builtin: str, *args):
        return [side.call(builtin, *args) for side in self.sides]

    def add(self, seq: int, window: int | None = None, sink: int = 0) -> None:
        self.both("kv_state_add_sequence", seq)
        self.lengths[seq] = 0
        if window is not None:
            self.enable(seq, window, sink)

    def enable(self, seq: int, window: int, sink: int) -> None:
        self.both(ENABLE, seq, window, sink)
        self.windows[seq] = window

    def fork(self, parent: int, child: int, pos: int) -> None:
        self.both("kv_state_fork_sequence", parent, child, pos)
        self.lengths[child] = pos

    def popn(self, seq: int, n: int) -> None:
        self.both("kv_state_popn", seq, n)
        self.lengths[seq] -= n

    def remove_all(self) -> None:
        for seq in list(self.lengths):
            self.both("kv_state_remove_sequence", seq)
        self.lengths.clear()
        self.check()
        assert all(self.both("attention_kv_cache_empty"))

    def step(self, batch: list[tuple[int, int]]) -> None:
        seqs = [s for s, _ in batch]
        counts = [n for _, n in batch]
        self.both("kv_state_begin_forward", seqs, counts)
        tokens = sum(counts)
        for layer in range(NUM_LAYERS):
            shape = (tokens, QO_HEADS + 2 * KV_HEADS, HEAD_DIM)
            qkv = self.rng.standard_normal(shape).astype(DTYPE)
            outs = [side.attention(layer, qkv) for side in self.sides]
            np.testing.assert_array_equal(outs[1], outs[0], err_msg=f"layer {layer}, batch {batch}")
        self.both("kv_state_end_forward")
        for seq, n in batch:
            # A sliding sequence holds (and is as long as) at most its window.
            self.lengths[seq] = min(self.lengths[seq] + n, self.windows.get(seq, MAX_TOTAL))
        self.check()

    def check(self) -> None:
        for name in ("get_num_available_pages", "get_total_sequence_length", "empty"):
            results = self.both(f"attention_kv_cache_{name}")
            assert results[1] == results[0], (name, results)
        assert self.both("attention_kv_cache_get_total_sequence_length")[1] == sum(
            self.lengths.values()
        )
        for seq, length in self.lengths.items():
            if length == 0:
                continue
            (k0, v0), (k1, v1) = [side.cached_kv(seq, length) for side in self.sides]
            np.testing.assert_array_equal(k1, k0, err_msg=f"K of sequence {seq}")
            np.testing.assert_array_equal(v1, v0, err_msg=f"V of sequence {seq}")


def test_sliding_sequences_match_tvm_past_their_windows(sides: tuple[Side, Side]) -> None:
    s = Script(sides)
    s.add(0, window=24)  # no sink; 1.5 pages
    s.step([(0, 20)])
    for _ in range(40):  # long past the window: its start crosses 3 page boundaries
        s.step([(0, 1)])
    # Prefilled past its window in one pass (tokens 4-13 slide out before they are written),
    # then decoded with a normal sequence and a third window (sink of a whole page).
    s.add(1, window=40, sink=4)
    s.add(2)
    s.add(3, window=33, sink=16)
    s.step([(1, 50), (2, 7)])
    s.step([(3, 30), (0, 3), (2, 1)])
    for _ in range(45):
        s.step([(2, 1), (1, 1), (0, 1), (3, 1)])
    s.step([(3, 20), (1, 9)])  # prefill chunks on slid windows
    for _ in range(3):
        s.step([(1, 1), (3, 1)])
    s.remove_all()


def test_enabled_on_a_long_sequence_forks_and_pops_within_the_sink(
    sides: tuple[Side, Side],
) -> None:
    s = Script(sides)
    s.add(0)
    s.step([(0, 30)])
    s.enable(0, 20, 3)  # longer than the window already: the next pass slides it
    s.step([(0, 1)])
    for _ in range(5):
        s.step([(0, 1)])
    # Forks within the sink: at its end and inside the first page (a page copy).
    s.fork(0, 1, 3)
    s.fork(0, 2, 0)
    s.step([(1, 4), (2, 2), (0, 1)])
    # A sliding sequence with a sink that has not slid yet: forked inside its window, popped.
    s.add(3, window=40, sink=8)
    s.step([(3, 12)])
    s.fork(3, 4, 6)
    s.step([(3, 5), (4, 1)])
    s.popn(3, 4)
    s.step([(3, 2)])
    for _ in range(30):
        s.step([(3, 1), (0, 1), (4, 1)])
    s.remove_all()


def test_refused_calls_name_the_builtin_and_leave_the_caches_matching(
    sides: tuple[Side, Side], kernel_library: pathlib.Path
) -> None:
    tvm_side, kiln_side = sides
    s = Script(sides)
    s.add(0, window=20, sink=2)
    s.step([(0, 30)])
    enable = r"vm\.builtin\.attention_kv_cache_enable_sliding_window_for_seq: "
    refused = [
        ((7, 16, 0), enable + "sequence 7 is not in the KV cache"),
        ((0, 16, 16), enable + "the attention sink size 16 must be less than the sliding window"),
        ((0, 16, -1), enable + "the attention sink size -1 is negative"),
        ((0, 0, 0), enable + "the sliding window size 0 is outside"),
        ((0, 16, 0), enable + "sequence 0 already has a sliding window \\(size 20\\)"),
    ]
    for args, message in refused:
        with pytest.raises(Exception):
            tvm_side.call(ENABLE, *args)
        with pytest.raises(ValueError, match=message):
            kiln_side.call(ENABLE, *args)
    s.step([(0, 1)])
    # Forks past the sink (TVM refuses them too).
    for pos in (3, -1):
        with pytest.raises(Exception):
            tvm_side.call("kv_state_fork_sequence", 0, 1, pos)
        with pytest.raises(
            ValueError,
            match=r"vm\.builtin\.kv_state_fork_sequence: sequence 0 has a sliding window and can "
            r"be forked only within its attention sink \(2 tokens\)",
        ):
            kiln_side.call("kv_state_fork_sequence", 0, 1, pos)
    s.step([(0, 2)])
    # Kiln's alone: a pop into a slid window's sink (TVM 0.27 loses track of the window's pages).
    with pytest.raises(
        ValueError,
        match=r"vm\.builtin\.kv_state_popn: cannot pop 19 tokens from sequence 0: its window has "
        r"slid and the cut would fall inside its attention sink of 2 tokens",
    ):
        kiln_side.call("kv_state_popn", 0, 19)
    s.step([(0, 1)])

    # A cache without sliding window: enable is TVM's error, in both.
    plain = Script(
        make_sides(kernel_library, config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 0], sliding=False)
    )
    plain.add(0)
    with pytest.raises(Exception, match="does not support sliding window"):
        plain.sides[0].call(ENABLE, 0, 16, 0)
    with pytest.raises(ValueError, match=enable + "the KV cache does not support sliding window"):
        plain.sides[1].call(ENABLE, 0, 16, 0)
    plain.step([(0, 30)])
    plain.step([(0, 1)])
    s.step([(0, 1)])
    s.remove_all()


def test_create_checks_the_sliding_window_arguments(kernel_library: pathlib.Path) -> None:
    lib = kiln.load_module(str(kernel_library))
    k = {n: lib[n] for n in [
        "transpose_append", "debug_get_kv", "prefill", "decode", "prefill_sliding",
        "decode_sliding", "prefill_ragged", "merge", "split_rotary", "copy_single_page",
        "compact_copy",
    ]}

    def create(**kwargs):
        return create_cache(kiln.get_global_func, kiln.ShapeTuple, kiln.tensor, k, **kwargs)

    name = r"vm\.builtin\.paged_attention_kv_cache_create: "
    with pytest.raises(ValueError, match=name + r"the model library passed no sliding-window "
                       r"paged prefill kernel \(support_sliding_window = 1\)"):
        create(sliding=False)
    with pytest.raises(ValueError, match=name + r"support_sliding_window \(argument 0, value 4\) "
                       r"is 2, expected 0 or 1"):
        create(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 2])
    with pytest.raises(ValueError, match=name + r"layer_sliding_window_size \(argument 0, value "
                       r"5\) is 0, must be at least 1"):
        create(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1, 0])
    with pytest.raises(ValueError, match=name + r"layer 1 uses attention kind 3 \(mha_sliding\).*"
                       r"per-layer sliding window is not supported"):
        create(kinds=[0, 3])
    # Two more pages per sequence, as TVM allocates: 17 + 2 * 8.
    cache = create(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1])
    free_pages = kiln.get_global_func("vm.builtin.attention_kv_cache_get_num_available_pages")
    assert free_pages(cache) == 33
