# SPDX-License-Identifier: Apache-2.0
"""Kiln's paged KV cache against TVM's, step by step, with the same TIR kernels.

TVM compiles the CPU kernels its TIRPagedKVCache passes to vm.builtin.paged_attention_kv_cache_create
(tvm.relax.frontend.nn.llm.kv_cache) into one library. TVM's cache runs on TVM's copy and Kiln's
cache on Kiln's copy, through the same script: sequences added, prefilled in batches, decoded,
forked (at the end, on a page boundary and inside a page), popped back into a shared prefix,
removed, past page boundaries. Every attention output and the cached K/V must be identical:
both caches hand the same kernels the same tables. Then the refusals: each is a clear error and
the cache goes on matching TVM's afterwards. A library whose kernels were compiled for another
layout (head dim, KV heads, page size) fails on the first kernel the cache runs, with an error
naming the builtin and the kernel, never a crash or a wrong answer, and leaves the cache's
bookkeeping intact; per-layer sliding window, MLA, FlashInfer kernels and KV transfer are refused
by name (per-sequence sliding window is tests/python/test_llm_sliding_window.py).
The bookkeeping alone (KvBlockPool) is tests/llm/kv_block_pool_test.cc. The kernel library, the
cache's creation and the two sides are tests/python/kv_cache_sides.py, shared with the sliding
window's test.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import pytest

import kiln

pytest.importorskip("tvm", reason="apache-tvm 0.27 builds the kernels and runs the reference")
from kv_cache_sides import (  # noqa: E402  (it needs tvm)
    CHUNK, DTYPE, HEAD_DIM, KILN, KV_HEADS, MAX_SEQS, MAX_TOTAL, PAGE, QO_HEADS, Lockstep, Side,
    build_kernel_library, create_cache, load_kernels, make_sides,
)


@pytest.fixture(scope="module")
def kernel_library(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build_kernel_library(tmp_path_factory.mktemp("kv_kernels") / "kernels.so")


@pytest.fixture()
def sides(kernel_library: pathlib.Path) -> tuple[Side, Side]:
    return make_sides(kernel_library)


class Script(Lockstep):
    """Lockstep with the sequence calls of these tests."""

    def add(self, seq: int) -> None:
        self.both("kv_state_add_sequence", seq)
        self.lengths[seq] = 0

    def fork(self, parent: int, child: int, pos: int = -1) -> None:
        self.both("kv_state_fork_sequence", parent, child, pos)
        self.lengths[child] = self.lengths[parent] if pos == -1 else pos

    def remove(self, seq: int) -> None:
        self.both("kv_state_remove_sequence", seq)
        del self.lengths[seq]


def test_matches_tvm_through_batches_forks_and_pops(sides: tuple[Side, Side]) -> None:
    s = Script(sides)
    s.add(0)
    s.step([(0, 20)])  # prefill across a page boundary
    for _ in range(13):  # decode past the next boundary (length 33)
        s.step([(0, 1)])
    s.add(1)
    s.add(2)
    s.step([(1, 5), (2, 17)])  # batch prefill of two new sequences
    s.step([(0, 1), (1, 1), (2, 1)])  # batch decode
    s.step([(1, 9), (0, 3)])  # a second prefill chunk for one, a short one for another
    s.fork(0, 3)  # at the end (length 37: inside a page)
    s.fork(0, 4, 32)  # on a page boundary
    s.fork(2, 5, 7)  # inside the first page
    s.step([(0, 1), (3, 2), (4, 1), (5, 4)])
    for _ in range(3):
        s.step([(3, 1), (4, 1), (5, 1), (0, 1)])
    s.fork(3, 6)  # a fork of a fork: three depths
    s.step([(6, 1), (3, 1)])
    s.popn(3, 2)  # within its own block
    s.popn(6, 10)  # back into the shared prefix
    s.step([(6, 3), (3, 1)])
    s.remove(0)  # the parent goes; its children keep the prefix
    s.step([(4, 2), (6, 1)])
    s.popn(5, 11)  # to nothing
    s.step([(5, 6)])
    for seq in list(s.lengths):
        s.remove(seq)
    s.check()
    assert all(r for r in s.both("attention_kv_cache_empty"))


def test_refused_calls_name_the_problem_and_leave_the_cache_usable(sides: tuple[Side, Side]) -> None:
    s = Script(sides)
    kiln_side = sides[1]
    s.add(0)
    s.step([(0, 10)])
    with pytest.raises(ValueError, match="sequence 7 is not in the KV cache"):
        kiln_side.call("kv_state_begin_forward", [7], [1])
    with pytest.raises(ValueError, match="listed twice"):
        kiln_side.call("kv_state_begin_forward", [0, 0], [1, 1])
    with pytest.raises(ValueError, match="exceed the prefill chunk of 128"):
        kiln_side.call("kv_state_begin_forward", [0], [CHUNK + 1])
    with pytest.raises(ValueError, match="already in the KV cache"):
        kiln_side.call("kv_state_add_sequence", 0)
    with pytest.raises(ValueError, match="cannot pop 11 tokens from sequence 0 of length 10"):
        kiln_side.call("kv_state_popn", 0, 11)
    with pytest.raises(ValueError, match="fork position 11 is outside"):
        kiln_side.call("kv_state_fork_sequence", 0, 1, 11)
    # Out of pages: the cache has 17 pages of 16 tokens.
    s.add(1)
    s.step([(0, 90), (1, 28)])  # 7 + 2 pages
    s.step([(0, 100)])  # 13 pages: 2 free
    with pytest.raises(ValueError, match="out of pages: this pass needs 3 more, 2 of 17 are free"):
        kiln_side.call("kv_state_begin_forward", [1], [40])
    s.step([(0, 1), (1, 1)])  # still usable, still equal to TVM
    # Attention outside a pass (after end_forward, or after a refused begin_forward) would run
    # on the last pass's tables.
    with pytest.raises(ValueError, match="no forward pass has begun"):
        kiln_side.attention(0, np.zeros((1, QO_HEADS + 2 * KV_HEADS, HEAD_DIM), DTYPE))
    kiln_side.call("kv_state_begin_forward", [1], [2])
    with pytest.raises(ValueError, match="out of pages"):
        kiln_side.call("kv_state_begin_forward", [1], [40])
    with pytest.raises(ValueError, match="no forward pass has begun"):
        kiln_side.attention(0, np.zeros((2, QO_HEADS + 2 * KV_HEADS, HEAD_DIM), DTYPE))
    kiln_side.call("kv_state_popn", 1, 2)  # undo the pass begun above (Kiln's side only)
    kiln_side.call("kv_state_begin_forward", [1], [2])
    with pytest.raises(IndexError, match="layer 2 is outside"):
        kiln_side.attention(2, np.zeros((2, QO_HEADS + 2 * KV_HEADS, HEAD_DIM), DTYPE))
    with pytest.raises(ValueError, match="qkv has shape"):
        kiln_side.attention(0, np.zeros((2, QO_HEADS, HEAD_DIM), DTYPE))
    kiln_side.call("kv_state_end_forward")
    kiln_side.call("kv_state_popn", 1, 2)
    s.step([(1, 2)])
    with pytest.raises(ValueError, match="does not support sliding window"):
        kiln.get_global_func("vm.builtin.attention_kv_cache_enable_sliding_window_for_seq")(
            kiln_side.cache, 0, 16, 4
        )
    with pytest.raises(NotImplementedError, match="token trees"):
        kiln_side.call("kv_state_begin_forward", [0], [1], [-1])
    s.step([(0, 1)])


# ---- a library whose kernels do not fit the cache, and features Kiln's cache refuses ----------

# Libraries compiled for another layout than the caches here are created with (head_dim 16,
# 2 KV heads, pages of 16): the kernels' own argument checks catch it, on the first kernel the
# cache runs. Each: the library's keywords, the kernel a fused-qkv attention fails in and the
# argument its check names, and the argument the page-copy kernel's check names.
MISMATCHED: dict[str, tuple[dict[str, Any], str | None, str | None, str | None]] = {
    "head_dim 32": (
        dict(head_dim=32),
        r"split rotary kernel \(split_rotary\)",
        r"qkv\.shape\[2\]",
        r"pages\.shape\[4\]",
    ),
    "4 KV heads": (
        dict(kv_heads=4),
        r"split rotary kernel \(split_rotary\)",
        r"qkv\.shape\[1\]",
        r"pages\.shape\[2\]",
    ),
    "page size 32": (
        dict(page=32),
        r"transpose-append kernel \(transpose_append\)",
        r"pages\.shape\[3\]",
        r"pages\.shape\[3\]",
    ),
    "paged prefill for head_dim 32": (dict(prefill_head_dim=32), None, None, None),
}


@pytest.fixture(scope="module")
def mismatched_library(tmp_path_factory: pytest.TempPathFactory):
    """The library of a MISMATCHED entry, built once per module."""
    built: dict[str, pathlib.Path] = {}

    def get(variant: str) -> pathlib.Path:
        if variant not in built:
            path = tmp_path_factory.mktemp("kv_mismatched") / "kernels.so"
            built[variant] = build_kernel_library(path, **MISMATCHED[variant][0])
        return built[variant]

    return get


def kiln_side(lib_path: pathlib.Path) -> Side:
    return Side(KILN, lib_path)


def qkv_rows(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, QO_HEADS + 2 * KV_HEADS, HEAD_DIM)).astype(
        DTYPE
    )


def forks_and_decodes(s: Script) -> None:
    """A short script over both caches: prefill, a fork inside a page, batches, a pop."""
    s.add(0)
    s.step([(0, 20)])
    s.fork(0, 1, 5)
    s.step([(0, 1), (1, 3)])
    s.step([(0, 1), (1, 1)])
    s.popn(1, 7)
    s.step([(1, 2), (0, 4)])
    s.remove(0)
    s.remove(1)
    s.check()


@pytest.mark.parametrize("variant", ["head_dim 32", "4 KV heads", "page size 32"])
def test_kernels_for_another_layout_fail_by_name_and_the_cache_stays_usable(
    variant: str, mismatched_library, kernel_library: pathlib.Path
) -> None:
    _, kernel, attention_arg, copy_arg = MISMATCHED[variant]
    broken = kiln_side(mismatched_library(variant))  # create runs no kernel: it succeeds
    pages = broken.call("attention_kv_cache_get_num_available_pages")
    broken.call("kv_state_add_sequence", 0)
    broken.call("kv_state_begin_forward", [0], [20])
    with pytest.raises(
        RuntimeError,
        match=rf"vm\.builtin\.attention_kv_cache_attention_with_fused_qkv: the library's {kernel} "
        rf"failed: .*kernels\.so: .*{attention_arg}",
    ):
        broken.attention(0, qkv_rows(20))
    broken.call("kv_state_end_forward")
    # The pass's tokens are in the bookkeeping (as under TVM) and hold no keys and values; the
    # page copy of a fork inside a page runs the library's copy kernel, which fails too, and the
    # fork leaves the cache as it was: the same free pages, no child.
    assert broken.call("attention_kv_cache_get_total_sequence_length") == 20
    free = broken.call("attention_kv_cache_get_num_available_pages")
    assert free == pages - 2
    with pytest.raises(
        RuntimeError,
        match=r"vm\.builtin\.kv_state_fork_sequence: the library's copy page kernel "
        rf"\(copy_single_page\) failed: .*{copy_arg}",
    ):
        broken.call("kv_state_fork_sequence", 0, 1, 5)
    assert broken.call("attention_kv_cache_get_num_available_pages") == free
    assert broken.call("attention_kv_cache_get_total_sequence_length") == 20
    broken.call("kv_state_fork_sequence", 0, 1, 16)  # on a page boundary: no copy, no kernel
    assert broken.call("attention_kv_cache_get_total_sequence_length") == 36
    broken.call("kv_state_remove_sequence", 1)
    broken.call("kv_state_popn", 0, 20)
    broken.call("kv_state_remove_sequence", 0)
    assert broken.call("attention_kv_cache_empty")
    assert broken.call("attention_kv_cache_get_num_available_pages") == pages
    # A cache on the right kernels, in the same process, still matches TVM's.
    forks_and_decodes(Script(make_sides(kernel_library)))


def test_a_mismatched_paged_prefill_kernel_fails_like_tvms_and_decode_goes_on(
    mismatched_library, kernel_library: pathlib.Path
) -> None:
    # Only the paged prefill kernel (queries against cached pages) is built for head_dim 32: the
    # first prefill has no cached pages and does not run it; the second does, and fails under
    # both runtimes. Popped back, both caches decode on (the decode kernel is right) and agree.
    s = Script(make_sides(mismatched_library("paged prefill for head_dim 32")))
    tvm_side, kiln_side_ = s.sides
    s.add(0)
    s.step([(0, 20)])
    s.both("kv_state_begin_forward", [0], [5])
    with pytest.raises(
        RuntimeError,
        match=r"the library's paged prefill kernel \(prefill\) failed: .*kernels\.so: prefill: "
        r".*q\.shape\[2\]",
    ):
        kiln_side_.attention(0, qkv_rows(5))
    with pytest.raises(ValueError, match=r"q\.(shape|strides)"):
        tvm_side.attention(0, qkv_rows(5))
    s.both("kv_state_end_forward")
    s.lengths[0] += 5
    s.popn(0, 5)
    for _ in range(3):
        s.step([(0, 1)])
    s.fork(0, 1, 5)
    s.step([(0, 1), (1, 1)])
    forks_and_decodes(Script(make_sides(kernel_library)))


def test_a_failing_attention_kernel_names_the_builtin(mismatched_library) -> None:
    broken = kiln_side(mismatched_library("paged prefill for head_dim 32"))
    broken.call("kv_state_add_sequence", 0)
    broken.call("kv_state_begin_forward", [0], [20])
    broken.attention(0, qkv_rows(20))
    broken.call("kv_state_end_forward")
    broken.call("kv_state_begin_forward", [0], [5])
    with pytest.raises(
        RuntimeError,
        match=r"^vm\.builtin\.attention_kv_cache_attention_with_fused_qkv: the library's paged "
        r"prefill kernel \(prefill\) failed",
    ):
        broken.attention(0, qkv_rows(5))


def test_unsupported_cache_features_are_refused_by_name(kernel_library: pathlib.Path) -> None:
    k = load_kernels(kiln.load_module, kernel_library)

    def create(**kwargs):
        return create_cache(kiln.get_global_func, kiln.ShapeTuple, kiln.tensor, k, **kwargs)

    create_name = r"vm\.builtin\.paged_attention_kv_cache_create: "
    with pytest.raises(
        ValueError,
        match=create_name + r"the model library passed no sliding-window paged prefill kernel "
        r"\(support_sliding_window = 1\)",
    ):
        create(config=[MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 1])  # a library without them
    with pytest.raises(
        ValueError,
        match=create_name + r"layer 0 uses attention kind 1 \(mla\); Kiln's KV cache supports "
        r'multi-head attention \("mha"\) only',
    ):
        create(attn_kinds=[1, 0])
    with pytest.raises(ValueError, match=r"layer 1 uses attention kind 3 \(mha_sliding\)"):
        create(attn_kinds=[0, 3])
    with pytest.raises(
        ValueError,
        match=create_name + r"argument 16 \(paged prefill kernel\) is a 'flashinfer' kernel; "
        r"Kiln's KV cache runs TIR kernels only",
    ):
        create(prefill=["flashinfer", k["prefill"], k["prefill"]])
    with pytest.raises(
        ValueError,
        match=create_name + r"KV transfer \(disaggregation\) is not supported by Kiln's KV cache",
    ):
        create(kv_transfer=True)
    cache = create()
    for name, what in [
        ("kv_cache_disagg_prepare_recv", "disaggregation"),
        ("kv_cache_disagg_mark_send", "disaggregation"),
        ("attention_kv_cache_append_mla_kv", "multi-head latent attention"),
        ("attention_kv_cache_debug_get_kv_mla", "multi-head latent attention"),
    ]:
        with pytest.raises(
            NotImplementedError, match=rf"vm\.builtin\.{name}: {what}.* is not supported"
        ):
            kiln.get_global_func(f"vm.builtin.{name}")(cache, 0, 1)
    # Nothing of that sticks: caches created afterwards, in the same process, match TVM's.
    forks_and_decodes(Script(make_sides(kernel_library)))
