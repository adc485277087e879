# SPDX-License-Identifier: Apache-2.0
"""What the paged KV cache comparisons with TVM share (tests/python/test_llm_kv_cache.py and
test_llm_sliding_window.py): the layout every cache there is created with, one library of TVM
0.27's CPU kernels (those TIRPagedKVCache passes for llvm), the cache's creation with TVM 0.27's
arguments, and a Side: one runtime's cache (TVM's or Kiln's) on its own copy of that library,
driven the same way. Not a test file: the tests import it (`from kv_cache_sides
import ...`, as they import conftest) after pytest.importorskip("tvm"), since it needs apache-tvm.
"""

from __future__ import annotations

import pathlib
from typing import Any, Callable, NamedTuple

import numpy as np
import tvm
from tvm.relax.frontend.nn.llm import kv_cache as tvm_kv

import kiln

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
# Argument 0 of a cache without sliding window: max sequences, max total length, prefill chunk,
# page size, support_sliding_window.
PLAIN_CONFIG = [MAX_SEQS, MAX_TOTAL, CHUNK, PAGE, 0]

# The kernels of every library build_kernel_library makes, and the pair it adds with
# sliding=True (the paged prefill and decode of a sliding-window cache).
KERNELS = (
    "transpose_append",
    "debug_get_kv",
    "prefill",
    "decode",
    "prefill_ragged",
    "merge",
    "split_rotary",
    "copy_single_page",
    "compact_copy",
)
SLIDING_KERNELS = ("prefill_sliding", "decode_sliding")


def build_kernel_library(
    path: pathlib.Path,
    head_dim: int = HEAD_DIM,
    kv_heads: int = KV_HEADS,
    page: int = PAGE,
    prefill_head_dim: int | None = None,
    sliding: bool = False,
) -> pathlib.Path:
    """Compiles the CPU kernels of TVM's TIRPagedKVCache into one library at `path` and returns
    `path`. The layout defaults to the one every cache here is created with; `prefill_head_dim`
    changes the paged prefill kernel's alone; `sliding` adds SLIDING_KERNELS."""
    funcs = {
        "transpose_append": tvm_kv._kv_cache_transpose_append(kv_heads, head_dim, DTYPE, page),
        "debug_get_kv": tvm_kv._kv_cache_debug_get_kv(NUM_LAYERS, kv_heads, head_dim, DTYPE),
        "prefill": tvm_kv._attention_prefill_cpu(
            kv_heads, QO_HEADS, prefill_head_dim or head_dim, DTYPE, False, {}
        ),
        "decode": tvm_kv._attention_decode_cpu(
            kv_heads, QO_HEADS, head_dim, DTYPE, False, {}, page
        ),
        "prefill_ragged": tvm_kv._attention_prefill_ragged_cpu(
            kv_heads, QO_HEADS, head_dim, head_dim, DTYPE, {}
        ),
        "merge": tvm_kv._merge_state_inplace_cpu(DTYPE),
        "split_rotary": tvm_kv.llama_rope_with_position_map(
            1e4, 1.0, head_dim, QO_HEADS, kv_heads, DTYPE, {}
        ),
        "copy_single_page": tvm_kv._copy_single_page_cpu(kv_heads, page, head_dim, DTYPE),
        "compact_copy": tvm_kv._compact_kv_copy_cpu(kv_heads, head_dim, DTYPE, page),
    }
    if sliding:
        funcs["prefill_sliding"] = tvm_kv._attention_prefill_cpu(
            kv_heads, QO_HEADS, head_dim, DTYPE, True, {}
        )
        funcs["decode_sliding"] = tvm_kv._attention_decode_cpu(
            kv_heads, QO_HEADS, head_dim, DTYPE, True, {}, page
        )
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    tvm.tirx.build(mod, target="llvm").export_library(str(path))
    return path


def load_kernels(load: Callable[[str], Any], lib_path: pathlib.Path, sliding: bool = False) -> dict:
    """The kernels of the library at `lib_path`, by name, loaded with the runtime's `load`
    (tvm.runtime.load_module or kiln.load_module): KERNELS, and SLIDING_KERNELS with `sliding`
    (the library must then have them)."""
    lib = load(str(lib_path))
    return {n: lib[n] for n in KERNELS + (SLIDING_KERNELS if sliding else ())}


def create_cache(
    get_func,
    shape,
    make_tensor,
    k: dict,
    config: list[int] | None = None,
    attn_kinds: list[int] | None = None,
    kv_transfer: bool = False,
    prefill=None,
    sliding: bool = False,
):
    """vm.builtin.paged_attention_kv_cache_create with TVM 0.27's arguments, as TIRPagedKVCache
    passes them for llvm, through one runtime's `get_func`, `shape` and `make_tensor`; `k`: the
    kernels by name (load_kernels). The keywords replace one argument each: `config` (0,
    default PLAIN_CONFIG), `attn_kinds` (6, default mha on every layer), `kv_transfer` (7),
    `prefill` (16, the paged prefill kernel) and `sliding` (18 and 19: the sliding-window
    kernels of `k`, else none)."""
    return get_func("vm.builtin.paged_attention_kv_cache_create")(
        shape(config or PLAIN_CONFIG),
        shape([0, NUM_LAYERS]),
        QO_HEADS,
        KV_HEADS,
        HEAD_DIM,
        HEAD_DIM,
        shape(attn_kinds or [0] * NUM_LAYERS),
        kv_transfer,
        ROPE_NORMAL,
        1.0,
        1e4,
        None,
        make_tensor(np.zeros((), DTYPE)),
        k["transpose_append"],
        None,
        ["tirx", k["prefill_ragged"]],
        prefill if prefill is not None else ["tirx", k["prefill"]],
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


class Runtime(NamedTuple):
    """What a Side needs of one runtime: its global functions, module loader, tensor and shape
    constructors."""

    name: str
    get_func: Callable[[str], Any]
    load: Callable[[str], Any]
    make_tensor: Callable[[np.ndarray], Any]
    shape: Callable[[list[int]], Any]


TVM = Runtime(
    "tvm", tvm.get_global_func, tvm.runtime.load_module, tvm.runtime.tensor, tvm.runtime.ShapeTuple
)
KILN = Runtime("kiln", kiln.get_global_func, kiln.load_module, kiln.tensor, kiln.ShapeTuple)


class Side:
    """One runtime's cache and its builtins (TVM's or Kiln's), driven the same way. The cache is
    created by create_cache on the runtime's own copy of the library at `lib_path`, with the
    keywords `create` (with sliding=True the library must have the sliding-window kernels)."""

    def __init__(self, runtime: Runtime, lib_path: pathlib.Path, **create):
        self.name = runtime.name
        self.get_func = runtime.get_func
        self.shape = runtime.shape
        self.make_tensor = runtime.make_tensor
        self.kernels = load_kernels(runtime.load, lib_path, create.get("sliding", False))
        self.cache = create_cache(
            runtime.get_func, runtime.shape, runtime.make_tensor, self.kernels, **create
        )

    def call(self, builtin: str, *args):
        """vm.builtin.<builtin> on this cache, lists passed as shapes."""
        converted = [self.shape(a) if isinstance(a, list) else a for a in args]
        return self.get_func(f"vm.builtin.{builtin}")(self.cache, *converted)

    def attention(self, layer: int, qkv: np.ndarray) -> np.ndarray:
        """Attention with fused qkv of `layer` in the current forward pass; the output."""
        out = self.make_tensor(np.zeros((qkv.shape[0], QO_HEADS, HEAD_DIM), DTYPE))
        self.get_func("vm.builtin.attention_kv_cache_attention_with_fused_qkv")(
            self.cache, layer, SM_SCALE, self.make_tensor(qkv), out
        )
        return out.numpy()

    def cached_kv(self, seq: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The K and V of the first `length` positions of sequence `seq`, all layers."""
        k = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        v = self.make_tensor(np.zeros((NUM_LAYERS, length, KV_HEADS, HEAD_DIM), DTYPE))
        self.call("attention_kv_cache_debug_get_kv", seq, 0, length, k, v)
        return k.numpy(), v.numpy()


def make_sides(lib_path: pathlib.Path, **create) -> tuple[Side, Side]:
    """TVM's cache and Kiln's, each on its own copy of the library's kernels, both created with
    the keywords `create` (see Side)."""
    return Side(TVM, lib_path, **create), Side(KILN, lib_path, **create)


class Lockstep:
    """Drives both sides' caches through the same calls and checks they agree after every step;
    `lengths` is what each sequence is expected to hold. A test's script adds its own sequence
    calls (add, fork, remove) and, where a sequence's length is not just what was appended,
    overrides grown."""

    def __init__(self, sides: tuple[Side, Side]):
        self.sides = sides
        self.lengths: dict[int, int] = {}
        self.rng = np.random.default_rng(36)

    def both(self, builtin: str, *args) -> list:
        """vm.builtin.<builtin> on both caches; their results, TVM's first."""
        return [side.call(builtin, *args) for side in self.sides]

    def popn(self, seq: int, n: int) -> None:
        self.both("kv_state_popn", seq, n)
        self.lengths[seq] -= n

    def grown(self, seq: int, n: int) -> int:
        """The length of sequence `seq` after a pass appended `n` tokens to it."""
        return self.lengths[seq] + n

    def step(self, batch: list[tuple[int, int]]) -> None:
        """One forward pass of (sequence, token count) pairs: every layer's attention on the same
        random qkv must give the same output on both sides; then check."""
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
            self.lengths[seq] = self.grown(seq, n)
        self.check()

    def check(self) -> None:
        self.check_counters()
        self.check_kv()

    def check_counters(self) -> None:
        """Both caches report the same free pages, total length and emptiness."""
        for name in ("get_num_available_pages", "get_total_sequence_length", "empty"):
            results = self.both(f"attention_kv_cache_{name}")
            assert results[1] == results[0], (name, results)

    def check_kv(self) -> None:
        """Both caches hold the same K and V for every sequence, over its expected length."""
        for seq, length in self.lengths.items():
            if length == 0:
                continue
            (k0, v0), (k1, v1) = [side.cached_kv(seq, length) for side in self.sides]
            np.testing.assert_array_equal(k1, k0, err_msg=f"K of sequence {seq}")
            np.testing.assert_array_equal(v1, v0, err_msg=f"V of sequence {seq}")
