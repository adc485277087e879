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
alone is tests/llm/kv_sliding_window_test.cc; the kernel library, the cache's creation and the two
sides are tests/python/kv_cache_sides.py, shared with tests/python/test_llm_kv_cache.py.
"""

from __future__ import annotations

import pathlib

import pytest

import kiln

pytest.importorskip("tvm", reason="apache-tvm 0.27 builds the kernels and runs the reference")
from kv_cache_sides import (  # noqa: E402  (it needs tvm)
    CHUNK, MAX_SEQS, MAX_TOTAL, PAGE, Lockstep, Side, build_kernel_library, create_cache,
    load_kernels, make_sides,
)

ENABLE = "attention_kv_cache_enable_sliding_window_for_seq"
# How every cache here is created unless a test says otherwise: support_sliding_window = 1 with a
# layer window of 1024 (argument 0), and the library's sliding-window kernels (arguments 18, 19).
SLIDING = dict(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1, 1024], sliding=True)


@pytest.fixture(scope="module")
def kernel_library(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build_kernel_library(
        tmp_path_factory.mktemp("kv_sliding_kernels") / "kernels.so", sliding=True
    )


@pytest.fixture()
def sides(kernel_library: pathlib.Path) -> tuple[Side, Side]:
    return make_sides(kernel_library, **SLIDING)


class Script(Lockstep):
    """Lockstep with sliding windows: sequences added with one or given one later."""

    def __init__(self, sides: tuple[Side, Side]):
        super().__init__(sides)
        self.windows: dict[int, int] = {}

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

    def remove_all(self) -> None:
        for seq in list(self.lengths):
            self.both("kv_state_remove_sequence", seq)
        self.lengths.clear()
        self.check()
        assert all(self.both("attention_kv_cache_empty"))

    def grown(self, seq: int, n: int) -> int:
        # A sliding sequence holds (and is as long as) at most its window.
        return min(self.lengths[seq] + n, self.windows.get(seq, MAX_TOTAL))

    def check(self) -> None:
        self.check_counters()
        assert self.both("attention_kv_cache_get_total_sequence_length")[1] == sum(
            self.lengths.values()
        )
        self.check_kv()


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
    k = load_kernels(kiln.load_module, kernel_library, sliding=True)

    def create(**kwargs):
        return create_cache(
            kiln.get_global_func, kiln.ShapeTuple, kiln.tensor, k, **{**SLIDING, **kwargs}
        )

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
        create(attn_kinds=[0, 3])
    # Two more pages per sequence, as TVM allocates: 17 + 2 * 8.
    cache = create(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1])
    free_pages = kiln.get_global_func("vm.builtin.attention_kv_cache_get_num_available_pages")
    assert free_pages(cache) == 33
