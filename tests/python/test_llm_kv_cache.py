# SPDX-License-Identifier: Apache-2.0
"""Kiln's paged KV cache against TVM's, step by step, with the same TIR kernels.

TVM compiles the CPU kernels its TIRPagedKVCache passes to vm.builtin.paged_attention_kv_cache_create
(tvm.relax.frontend.nn.llm.kv_cache) into one library. TVM's cache runs on TVM's copy and Kiln's
cache on Kiln's copy, through the same script: sequences added, prefilled in batches, decoded,
forked (at the end, on a page boundary and inside a page), popped back into a shared prefix,
removed, past page boundaries. Every attention output and the cached K/V must be identical:
both caches hand the same kernels the same tables. Then the refusals: each is a clear error and
the cache goes on matching TVM's afterwards.
"""

from __future__ import annotations

import os
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
MAX_TOTAL = 256  # 17 pages
CHUNK = 128
DTYPE = "float32"
ROPE_NORMAL = 1
SM_SCALE = HEAD_DIM**-0.5

KERNELS = [
    "transpose_append",
    "debug_get_kv",
    "prefill",
    "decode",
    "prefill_ragged",
    "merge",
    "split_rotary",
    "copy_single_page",
    "compact_copy",
]


@pytest.fixture(scope="module")
def kernel_library(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    funcs = {
        "transpose_append": tvm_kv._kv_cache_transpose_append(KV_HEADS, HEAD_DIM, DTYPE),
        "debug_get_kv": tvm_kv._kv_cache_debug_get_kv(NUM_LAYERS, KV_HEADS, HEAD_DIM, DTYPE),
        "prefill": tvm_kv._attention_prefill_cpu(KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, False, {}),
        "decode": tvm_kv._attention_decode_cpu(KV_HEADS, QO_HEADS, HEAD_DIM, DTYPE, False, {}),
        "prefill_ragged": tvm_kv._attention_prefill_ragged_cpu(
            KV_HEADS, QO_HEADS, HEAD_DIM, HEAD_DIM, DTYPE, {}
        ),
        "merge": tvm_kv._merge_state_inplace_cpu(DTYPE),
        "split_rotary": tvm_kv.llama_rope_with_position_map(
            1e4, 1.0, HEAD_DIM, QO_HEADS, KV_HEADS, DTYPE, {}
        ),
        "copy_single_page": tvm_kv._copy_single_page_cpu(KV_HEADS, PAGE, HEAD_DIM, DTYPE),
        "compact_copy": tvm_kv._compact_kv_copy_cpu(KV_HEADS, HEAD_DIM, DTYPE),
    }
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    lib = tvm.tirx.build(mod, target="llvm")
    path = tmp_path_factory.mktemp("kv_kernels") / "kernels.so"
    lib.export_library(str(path))
    return path


class Side:
    """One runtime's cache and its builtins (TVM's or Kiln's), driven the same way."""

    def __init__(self, name: str, get_func, load, make_tensor, shape, lib_path: pathlib.Path):
        self.name = name
        self.f = lambda n: get_func(f"vm.builtin.{n}")
        self.shape = shape
        self.make_tensor = make_tensor
        lib = load(str(lib_path))
        k = {n: lib[n] for n in KERNELS}
        self.cache = self.f("paged_attention_kv_cache_create")(
            shape([MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 0]),
            shape([0, NUM_LAYERS]),
            QO_HEADS,
            KV_HEADS,
            HEAD_DIM,
            HEAD_DIM,
            shape([0] * NUM_LAYERS),
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
            [],
            [],
            [],
            [],
            [],
            [k["merge"]],
            k["split_rotary"],
            k["copy_single_page"],
            k["debug_get_kv"],
            k["compact_copy"],
        )

    def call(self, builtin: str, *args):
        converted = [self.shape(a) if isinstance(a, list) else a for a in args]
        return self.f(builtin)(self.cache, *converted)

    def attention(self, layer: int, qkv: np.ndarray) -> np.ndarray:
        out = self.make_tensor(np.zeros((qkv.shape[0], QO_HEADS, HEAD_DIM), DTYPE))
        self.f("attention_kv_cache_attention_with_fused_qkv")(
            self.cache, layer, SM_SCALE, self.make_tensor(qkv), out
        )
        return out.numpy()

    def cached_kv(self, seq: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        k = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        v = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        self.f("attention_kv_cache_debug_get_kv")(self.cache, seq, 0, length, k, v)
        return k.numpy(), v.numpy()


@pytest.fixture()
def sides(kernel_library: pathlib.Path) -> tuple[Side, Side]:
    tvm_side = Side(
        "tvm",
        tvm.get_global_func,
        tvm.runtime.load_module,
        lambda a: tvm.runtime.tensor(a),
        lambda s: tvm.runtime.ShapeTuple(s),
        kernel_library,
    )
    kiln_side = Side(
        "kiln", kiln.get_global_func, kiln.load_module, kiln.tensor, kiln.ShapeTuple, kernel_library
    )
    return tvm_side, kiln_side


class Script:
    """Drives both caches and checks they agree after every step."""

    def __init__(self, sides: tuple[Side, Side]):
        self.sides = sides
        self.lengths: dict[int, int] = {}
        self.rng = np.random.default_rng(36)

    def both(self, builtin: str, *args):
        results = [side.call(builtin, *args) for side in self.sides]
        return results

    def add(self, seq: int) -> None:
        self.both("kv_state_add_sequence", seq)
        self.lengths[seq] = 0

    def fork(self, parent: int, child: int, pos: int = -1) -> None:
        self.both("kv_state_fork_sequence", parent, child, pos)
        self.lengths[child] = self.lengths[parent] if pos == -1 else pos

    def popn(self, seq: int, n: int) -> None:
        self.both("kv_state_popn", seq, n)
        self.lengths[seq] -= n

    def remove(self, seq: int) -> None:
        self.both("kv_state_remove_sequence", seq)
        del self.lengths[seq]

    def step(self, batch: list[tuple[int, int]]) -> None:
        seqs = [s for s, _ in batch]
        counts = [n for _, n in batch]
        self.both("kv_state_begin_forward", seqs, counts)
        tokens = sum(counts)
        for layer in range(NUM_LAYERS):
            qkv = self.rng.standard_normal((tokens, QO_HEADS + 2 * KV_HEADS, HEAD_DIM)).astype(DTYPE)
            outs = [side.attention(layer, qkv) for side in self.sides]
            np.testing.assert_array_equal(outs[1], outs[0], err_msg=f"layer {layer}, batch {batch}")
        self.both("kv_state_end_forward")
        for s, n in batch:
            self.lengths[s] += n
        self.check()

    def check(self) -> None:
        for name in ("get_num_available_pages", "get_total_sequence_length", "empty"):
            results = self.both(f"attention_kv_cache_{name}")
            assert results[1] == results[0], name
        for seq, length in self.lengths.items():
            if length == 0:
                continue
            (k0, v0), (k1, v1) = [side.cached_kv(seq, length) for side in self.sides]
            np.testing.assert_array_equal(k1, k0, err_msg=f"K of sequence {seq}")
            np.testing.assert_array_equal(v1, v0, err_msg=f"V of sequence {seq}")


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
