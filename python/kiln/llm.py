# SPDX-License-Identifier: Apache-2.0
"""kiln.llm: a small engine for LLMs compiled the MLC way (issue 36, docs/llm.md)::

    engine = kiln.llm.Engine("model/llvm/lib.so", "model/params", "cpu")
    tokens = engine.generate([1, 2, 3, 4], max_new_tokens=12)            # greedy
    tokens = engine.generate([1, 2, 3, 4], 12, method="top_p", top_p=0.9, seed=7)

    a = engine.add_sequence()                 # the step API: sequences in the paged KV cache
    logits = engine.prefill([a], [[1, 2, 3, 4]])          # numpy, (batch, vocab)
    token = engine.sample(logits[0])
    logits = engine.decode([a], [token])
    b = engine.fork_sequence(a)               # shares a's cached tokens
    engine.popn(a, 2)                         # drops a's last two tokens
    engine.remove_sequence(b)

A model library is what `tvm.compile` makes of an MLC-style `nn.Module` (tests/llm/tiny_llama.py
is one): functions `embed`, `prefill`, `decode`, `batch_prefill`, `batch_decode` and
`create_tir_paged_kv_cache` (or `create_paged_kv_cache`), all weights packed into one tuple
passed last. Weights are a tensor cache (`tensor-cache.json` or `ndarray-cache.json` and
its shards, as `tvm.contrib.tvmjs.dump_tensor_cache` writes them), loaded onto the engine's device
through the runtime's `vm.builtin.tensor_cache.load` and `vm.builtin.param_array_from_cache*`.

Every prefill and decode is one or more forward passes, each bracketed by
`vm.builtin.kv_state_begin_forward` and `vm.builtin.kv_state_end_forward`, as MLC's engine does.
A prompt longer than the cache's prefill chunk is split into several passes.

The engine drives its model through a :class:`Runtime`: :class:`KilnRuntime` (the default) runs
it on Kiln's VM; the same engine code runs on another runtime with the same builtins (the tests
run it on TVM's, tests/llm/tvm_reference.py), so both are driven by the same sequence of calls.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Protocol,
                    Sequence, Tuple)

if TYPE_CHECKING:  # numpy is imported where it is used: `import kiln` does not load it
    import numpy

__all__ = ["Engine", "Generation", "KilnRuntime", "Runtime", "KV_CACHE_BUILTINS",
           "REQUIRED_BUILTINS"]

# The KV cache builtins the engine calls directly (the model library calls the others).
KV_CACHE_BUILTINS = (
    "vm.builtin.paged_attention_kv_cache_create",
    "vm.builtin.kv_state_add_sequence",
    "vm.builtin.kv_state_remove_sequence",
    "vm.builtin.kv_state_fork_sequence",
    "vm.builtin.kv_state_popn",
    "vm.builtin.kv_state_clear",
    "vm.builtin.kv_state_begin_forward",
    "vm.builtin.kv_state_end_forward",
)
# Every builtin a run of the engine needs from its runtime: the cache's, the weights', top-p
# sampling, and the model library's attention call.
REQUIRED_BUILTINS = KV_CACHE_BUILTINS + (
    "vm.builtin.attention_kv_cache_attention_with_fused_qkv",
    "vm.builtin.tensor_cache.load",
    "vm.builtin.tensor_cache.clear",
    "vm.builtin.param_array_from_cache_by_name",
    "vm.builtin.sample_top_p_from_logits",
    "vm.builtin.reshape",
)

# The cache-creating function, in the order they are looked for: the TIR cache as TVM's
# TIRPagedKVCache exports it, then MLC's generic name.
_CREATE_CACHE_FUNCTIONS = ("create_tir_paged_kv_cache", "create_paged_kv_cache")


class Runtime(Protocol):
    """What the engine needs of a Relax VM runtime. Values (tensors, the cache, devices) are the
    runtime's own; the engine only passes them back to it."""

    def device(self, device: Any) -> Any:
        """The runtime's device for `device` (a name such as "cpu" or "opencl:0", or a device)."""

    def device_type_and_id(self, device: Any) -> Tuple[int, int]:
        """DLPack's (device type, device id) of the runtime's `device`."""

    def load_vm(self, library: str, device: Any) -> Any:
        """A Relax VM over the model library at path `library`, on `device` (the host CPU too);
        `vm[name]` is its function `name`, a callable."""

    def has_function(self, vm: Any, name: str) -> bool:
        """Whether `vm` (from load_vm) has a function `name`."""

    def builtin(self, name: str) -> Callable[..., Any]:
        """The runtime's global function `name`; raises if it has none."""

    def shape(self, values: Sequence[int]) -> Any:
        """A shape value (TVM's ShapeTuple) holding `values`."""

    def tensor(self, array: numpy.ndarray, device: Any) -> Any:
        """A new tensor on `device` holding a copy of `array`."""

    def numpy(self, tensor: Any) -> numpy.ndarray:
        """A host numpy copy of `tensor`."""

    def call_argument(self, value: Any) -> Any:
        """`value` (the weights, which every call takes) in the form the runtime's calls take
        fastest; the identity where the runtime's own value already is that."""


class KilnRuntime:
    """Kiln's VM and builtins (kiln.vm.VirtualMachine, kiln.get_global_func): the engine's
    default runtime."""

    def device(self, device: Any) -> Any:
        from . import Device
        from . import device as make_device

        return device if isinstance(device, Device) else make_device(str(device))

    def device_type_and_id(self, device: Any) -> Tuple[int, int]:
        return int(device.device_type), int(device.device_id)

    def load_vm(self, library: str, device: Any) -> Any:
        from . import load_module
        from .vm import VirtualMachine

        return VirtualMachine(load_module(library), device)

    def has_function(self, vm: Any, name: str) -> bool:
        return bool(vm.has_function(name))

    def builtin(self, name: str) -> Callable[..., Any]:
        from . import NotFoundError, get_global_func

        function = get_global_func(name)
        if function is None:
            raise NotFoundError(f"kiln.llm: Kiln has no global function {name}")
        return function

    def shape(self, values: Sequence[int]) -> Any:
        from . import ShapeTuple

        return ShapeTuple(int(v) for v in values)

    def tensor(self, array: numpy.ndarray, device: Any) -> Any:
        from . import tensor

        return tensor(array, device)

    def numpy(self, tensor: Any) -> numpy.ndarray:
        import numpy

        return numpy.asarray(tensor.numpy())

    def call_argument(self, value: Any) -> Any:
        # Kiln hands a VM array to Python as a tuple; made into the VM's array once here, the
        # weights are not converted again on every call.
        from . import _kiln

        return _kiln._as_vm_array(tuple(value)) if isinstance(value, tuple) else value


@dataclass
class Generation:
    """What Engine.generate made: the new tokens (prompt excluded) and, row by row, the logits
    each of them was sampled from (float32, (len(tokens), vocab))."""

    tokens: List[int]
    logits: numpy.ndarray
    uniforms: List[float] = field(default_factory=list)


def _read_cache_metadata(weights: str) -> Tuple[dict, List[str]]:
    """(metadata, record names in file order) of the tensor cache in folder `weights`."""
    for file_name in ("tensor-cache.json", "ndarray-cache.json"):
        path = os.path.join(weights, file_name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                try:
                    cache = json.load(f)
                except json.JSONDecodeError as err:
                    raise ValueError(f"kiln.llm: {path} is not JSON: {err}") from None
            if not isinstance(cache, dict) or not isinstance(cache.get("records"), list):
                raise ValueError(f"kiln.llm: {path} has no 'records' list")
            try:
                names = [str(record["name"]) for shard in cache["records"]
                         for record in shard["records"]]
            except (KeyError, TypeError) as err:
                raise ValueError(f"kiln.llm: {path}: a record without its name or records "
                                 f"({type(err).__name__}: {err})") from None
            metadata = cache.get("metadata")
            return (metadata if isinstance(metadata, dict) else {}), names
    raise FileNotFoundError(
        f"kiln.llm: {weights} holds no tensor-cache.json (nor ndarray-cache.json)")


class Engine:
    """A model library, its weights on one device, and one paged KV cache; sequences in it are
    named by integer ids. Not thread-safe: one caller at a time.

    Parameters
    ----------
    library: path of the compiled model library (an export_library output).
    weights: folder of the tensor cache (tensor-cache.json + shards).
    device: where the model runs: a device name ("cpu", "opencl", "opencl:1") or the runtime's
        device object.
    max_batch_size, max_total_seq_len, prefill_chunk_size, page_size, support_sliding_window:
        the KV cache's, passed to the library's create function. Sequences in one forward pass
        are at most max_batch_size; all sequences' tokens together at most max_total_seq_len;
        one forward pass takes at most prefill_chunk_size tokens.
    param_names: the parameter names in the order the functions take them. Default: the cache's
        metadata "ParamNames" when it has them, else its records in file order.
    vocab_size: token ids must be below it (an id past the embedding table is refused before it
        reaches the model). Default: the metadata's model_config.vocab_size, else the first
        dimension of the parameter named "*embed_tokens.weight".
    runtime: the VM runtime (default KilnRuntime()).

    Errors: FileNotFoundError / ValueError for a missing or malformed weight folder; the
    runtime's error when the library lacks a function or a builtin is missing (Kiln: NotFoundError
    naming it).
    """

    def __init__(self, library: str, weights: str, device: Any = "cpu", *,
                 max_batch_size: int = 8, max_total_seq_len: int = 2048,
                 prefill_chunk_size: int = 256, page_size: int = 16,
                 support_sliding_window: int = 0, param_names: Optional[Sequence[str]] = None,
                 vocab_size: Optional[int] = None, runtime: Optional[Runtime] = None):
        for name, value in (("max_batch_size", max_batch_size),
                            ("max_total_seq_len", max_total_seq_len),
                            ("prefill_chunk_size", prefill_chunk_size), ("page_size", page_size)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"kiln.llm.Engine: {name} must be a positive int, not {value!r}")
        self.runtime: Runtime = runtime if runtime is not None else KilnRuntime()
        rt = self.runtime
        self.device = rt.device(device)
        self.library = library
        self.weights = weights
        self.max_batch_size = max_batch_size
        self.max_total_seq_len = max_total_seq_len
        self.prefill_chunk_size = prefill_chunk_size
        self.page_size = page_size

        metadata, record_names = _read_cache_metadata(weights)
        if param_names is None:
            listed = metadata.get("ParamNames")
            param_names = listed if isinstance(listed, list) else record_names
        self.param_names: List[str] = [str(n) for n in param_names]
        if vocab_size is None:
            config = metadata.get("model_config")
            if isinstance(config, dict) and isinstance(config.get("vocab_size"), int):
                vocab_size = config["vocab_size"]

        self.vm = rt.load_vm(library, self.device)
        self._f_begin = rt.builtin("vm.builtin.kv_state_begin_forward")
        self._f_end = rt.builtin("vm.builtin.kv_state_end_forward")
        self._f_add = rt.builtin("vm.builtin.kv_state_add_sequence")
        self._f_remove = rt.builtin("vm.builtin.kv_state_remove_sequence")
        self._f_fork = rt.builtin("vm.builtin.kv_state_fork_sequence")
        self._f_popn = rt.builtin("vm.builtin.kv_state_popn")
        self._f_clear = rt.builtin("vm.builtin.kv_state_clear")
        self._f_reshape = rt.builtin("vm.builtin.reshape")
        self.params = self._load_params()
        self._params_arg = rt.call_argument(self.params)
        vocab, self.hidden_size = self._embedding_shape()
        # A configured vocabulary larger than the table would let ids past it reach the gather.
        self.vocab_size: int = vocab if vocab_size is None else min(int(vocab_size), vocab)

        create = next((n for n in _CREATE_CACHE_FUNCTIONS if rt.has_function(self.vm, n)), None)
        if create is None:
            raise ValueError(f"kiln.llm.Engine: {library} has none of the functions "
                             f"{', '.join(_CREATE_CACHE_FUNCTIONS)}: not an MLC-style model "
                             "library")
        self.cache = self.vm[create](rt.shape([max_batch_size]), rt.shape([max_total_seq_len]),
                                     rt.shape([prefill_chunk_size]), rt.shape([page_size]),
                                     rt.shape([support_sliding_window]))
        self._lengths: Dict[int, int] = {}  # cached tokens of each sequence
        self._next_id = 0

    # -- weights --------------------------------------------------------------------------------

    def _load_params(self) -> Any:
        """The weights as the runtime's array, in param_names' order. The runtime's tensor cache is
        process-wide: it is cleared after the array is taken (the array holds the tensors)."""
        rt = self.runtime
        device_type, device_id = rt.device_type_and_id(self.device)
        rt.builtin("vm.builtin.tensor_cache.load")(self.weights, device_type, device_id)
        try:
            return rt.builtin("vm.builtin.param_array_from_cache_by_name")(self.param_names)
        finally:
            rt.builtin("vm.builtin.tensor_cache.clear")()

    def _embedding_shape(self) -> Tuple[int, int]:
        """(vocab, hidden) of the embedding table: the parameter named *embed_tokens.weight."""
        for name, param in zip(self.param_names, self.params):
            if name.endswith("embed_tokens.weight"):
                vocab, hidden = (int(d) for d in param.shape)
                return vocab, hidden
        raise ValueError(f"kiln.llm.Engine: {self.weights} has no parameter named "
                         "'*embed_tokens.weight': the hidden size is unknown")

    # -- sequences ------------------------------------------------------------------------------

    @property
    def sequences(self) -> Dict[int, int]:
        """A copy of {sequence id: number of cached tokens}."""
        return dict(self._lengths)

    def sequence_length(self, seq_id: int) -> int:
        """The number of tokens cached for `seq_id` (KeyError if there is no such sequence)."""
        self._check_known(seq_id)
        return self._lengths[seq_id]

    def _new_id(self, seq_id: Optional[int]) -> int:
        if seq_id is None:
            while self._next_id in self._lengths:
                self._next_id += 1
            return self._next_id
        if not isinstance(seq_id, int) or isinstance(seq_id, bool) or seq_id < 0:
            raise ValueError(f"kiln.llm: a sequence id is an int >= 0, not {seq_id!r}")
        if seq_id in self._lengths:
            raise ValueError(f"kiln.llm: sequence {seq_id} exists already")
        return seq_id

    def _check_known(self, seq_id: int) -> None:
        if seq_id not in self._lengths:
            raise KeyError(f"kiln.llm: no sequence {seq_id!r} (sequences: "
                           f"{sorted(self._lengths) or 'none'})")

    def add_sequence(self, seq_id: Optional[int] = None) -> int:
        """Add an empty sequence (id `seq_id`, default the lowest unused id); returns its id.
        ValueError if the id is in use."""
        seq_id = self._new_id(seq_id)
        self._f_add(self.cache, seq_id)
        self._lengths[seq_id] = 0
        return seq_id

    def remove_sequence(self, seq_id: int) -> None:
        """Remove `seq_id` and free its pages (KeyError if there is no such sequence)."""
        self._check_known(seq_id)
        self._f_remove(self.cache, seq_id)
        del self._lengths[seq_id]

    def fork_sequence(self, parent_id: int, child_id: Optional[int] = None,
                      fork_pos: int = -1) -> int:
        """A new sequence `child_id` (default the lowest unused id) holding the first `fork_pos`
        tokens of `parent_id` (-1: all of them), sharing its pages; returns the child's id."""
        self._check_known(parent_id)
        parent_length = self._lengths[parent_id]
        if fork_pos != -1 and not 0 <= fork_pos <= parent_length:
            raise ValueError(f"kiln.llm: fork_pos {fork_pos} is outside sequence {parent_id}'s "
                             f"0..{parent_length} tokens (or -1 for all)")
        child_id = self._new_id(child_id)
        self._f_fork(self.cache, parent_id, child_id, fork_pos)
        self._lengths[child_id] = parent_length if fork_pos == -1 else fork_pos
        return child_id

    def popn(self, seq_id: int, n: int) -> None:
        """Drop the last `n` cached tokens of `seq_id` (ValueError if it has fewer)."""
        self._check_known(seq_id)
        if not 0 <= n <= self._lengths[seq_id]:
            raise ValueError(f"kiln.llm: cannot pop {n} tokens from sequence {seq_id}, which "
                             f"has {self._lengths[seq_id]}")
        self._f_popn(self.cache, seq_id, n)
        self._lengths[seq_id] -= n

    def clear(self) -> None:
        """Remove every sequence."""
        self._f_clear(self.cache)
        self._lengths.clear()

    # -- forward passes -------------------------------------------------------------------------

    def _check_batch(self, seq_ids: Sequence[int], token_lists: Sequence[Sequence[int]],
                     what: str) -> List[List[int]]:
        if len(seq_ids) != len(token_lists):
            raise ValueError(f"kiln.llm.{what}: {len(seq_ids)} sequence ids but "
                             f"{len(token_lists)} token lists")
        if not seq_ids:
            raise ValueError(f"kiln.llm.{what}: no sequences")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"kiln.llm.{what}: a sequence appears twice in {list(seq_ids)}")
        if len(seq_ids) > self.max_batch_size:
            raise ValueError(f"kiln.llm.{what}: {len(seq_ids)} sequences, over the cache's "
                             f"max_batch_size {self.max_batch_size}")
        lists = []
        for seq_id, tokens in zip(seq_ids, token_lists):
            self._check_known(seq_id)
            tokens = [int(t) for t in tokens]
            if not tokens:
                raise ValueError(f"kiln.llm.{what}: no tokens for sequence {seq_id}")
            bad = [t for t in tokens if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"kiln.llm.{what}: token id {bad[0]} of sequence {seq_id} is "
                                 f"outside the vocabulary 0..{self.vocab_size - 1}")
            lists.append(tokens)
        total = sum(self._lengths.values()) + sum(len(t) for t in lists)
        if total > self.max_total_seq_len:
            raise ValueError(f"kiln.llm.{what}: {total} tokens in all would exceed the cache's "
                             f"max_total_seq_len {self.max_total_seq_len}")
        return lists

    def _embed(self, tokens: List[int], shape: Sequence[int]) -> Any:
        import numpy

        rt = self.runtime
        ids = rt.tensor(numpy.asarray(tokens, dtype="int32"), self.device)
        return self._f_reshape(self.vm["embed"](ids, self._params_arg), rt.shape(shape))

    def _forward(self, seq_ids: List[int], lengths: List[int],
                 call: Callable[[], Any]) -> numpy.ndarray:
        """One forward pass: begin_forward, `call` (the model function), end_forward; returns the
        logits as (rows, vocab). A failed pass is undone (the sequences get back their
        lengths) so that the engine stays usable."""
        rt = self.runtime
        self._f_begin(self.cache, rt.shape(seq_ids), rt.shape(lengths))
        try:
            out = call()
            self._f_end(self.cache)
        except BaseException:
            for seq_id, length in zip(seq_ids, lengths):
                try:
                    self._f_popn(self.cache, seq_id, length)
                except Exception:  # pylint: disable=broad-except
                    pass  # the original error says more
            raise
        for seq_id, length in zip(seq_ids, lengths):
            self._lengths[seq_id] += length
        logits = rt.numpy(out[0])
        return logits.reshape(-1, logits.shape[-1])

    def _chunks(self, token_lists: List[List[int]]) -> List[List[Tuple[int, int, int]]]:
        """The forward passes of a prefill: each a list of (sequence index, begin, end) pieces
        with at most prefill_chunk_size tokens in all, every sequence at most once per pass,
        in order."""
        offsets = [0] * len(token_lists)
        passes = []
        while any(o < len(t) for o, t in zip(offsets, token_lists)):
            budget, pieces = self.prefill_chunk_size, []
            for index, tokens in enumerate(token_lists):
                if budget == 0:
                    break
                take = min(budget, len(tokens) - offsets[index])
                if take > 0:
                    pieces.append((index, offsets[index], offsets[index] + take))
                    offsets[index] += take
                    budget -= take
            passes.append(pieces)
        return passes

    def prefill(self, seq_ids: Sequence[int], token_lists: Sequence[Sequence[int]]
                ) -> numpy.ndarray:
        """Append `token_lists[i]` to sequence `seq_ids[i]` for every i; returns the logits after
        each sequence's last token, float32 (len(seq_ids), vocab). One sequence goes through the
        library's `prefill`, several through `batch_prefill`; more tokens than the prefill chunk
        take several passes."""
        import numpy

        seq_ids = [int(s) for s in seq_ids]
        lists = self._check_batch(seq_ids, token_lists, "prefill")
        result: List[Optional[numpy.ndarray]] = [None] * len(seq_ids)
        for pieces in self._chunks(lists):
            ids = [seq_ids[index] for index, _, _ in pieces]
            parts = [lists[index][begin:end] for index, begin, end in pieces]
            lengths = [len(p) for p in parts]
            flat = [t for part in parts for t in part]
            logits = self._forward(ids, lengths,
                                   functools.partial(self._call_prefill, flat, lengths))
            for row, (index, _, end) in enumerate(pieces):
                if end == len(lists[index]):
                    result[index] = logits[row]
        return numpy.stack([r for r in result if r is not None])

    def _call_prefill(self, flat: List[int], lengths: List[int]) -> Any:
        """The model's prefill of one pass: `flat` holds the pieces of `lengths` tokens end to
        end; the logits of each piece's last token come back."""
        import numpy

        embeds = self._embed(flat, self._hidden_shape(1, len(flat)))
        if len(lengths) == 1:
            return self.vm["prefill"](embeds, self.cache, self._params_arg)
        positions = numpy.cumsum(lengths, dtype="int64").astype("int32") - 1
        pos = self.runtime.tensor(positions, self.device)
        return self.vm["batch_prefill"](embeds, pos, self.cache, self._params_arg)

    def decode(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> numpy.ndarray:
        """Append one token to each sequence (`tokens[i]` to `seq_ids[i]`); returns the logits
        after it, float32 (len(seq_ids), vocab). One sequence goes through the library's
        `decode`, several through `batch_decode`."""
        seq_ids = [int(s) for s in seq_ids]
        lists = self._check_batch(seq_ids, [[t] for t in tokens], "decode")
        flat = [t[0] for t in lists]
        name = "decode" if len(seq_ids) == 1 else "batch_decode"

        def call():
            embeds = self._embed(flat, self._hidden_shape(len(flat), 1))
            return self.vm[name](embeds, self.cache, self._params_arg)

        return self._forward(seq_ids, [1] * len(seq_ids), call)

    def _hidden_shape(self, batch: int, length: int) -> List[int]:
        """The shape prefill/decode take their embeddings in: (batch, length, hidden)."""
        return [batch, length, self.hidden_size]

    # -- sampling -------------------------------------------------------------------------------

    def sample(self, logits: Any, method: Literal["greedy", "top_p"] = "greedy", *,
               temperature: float = 1.0, top_p: float = 1.0,
               uniform: Optional[float] = None, seed: Optional[int] = None) -> int:
        """One token from one row of logits (shape (vocab,) or (1, vocab)).

        greedy: the first index of the largest logit (temperature and top_p are not used).
        top_p: the runtime's vm.builtin.sample_top_p_from_logits(logits, temperature, top_p,
        uniform) -- TVM's nucleus sampling over softmax(logits / temperature); `uniform` in
        [0, 1) is the random draw, default one draw of numpy.random.default_rng(seed).
        """
        import numpy

        row = numpy.ascontiguousarray(numpy.asarray(logits, dtype="float32"))
        if row.ndim == 2 and row.shape[0] == 1:
            row = row[0]
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"kiln.llm.sample: expected one row of logits, got shape {row.shape}")
        if numpy.isnan(row).any():
            raise ValueError("kiln.llm.sample: the logits hold NaN")
        if method == "greedy":
            return int(numpy.argmax(row))
        if method != "top_p":
            raise ValueError(f"kiln.llm.sample: method is 'greedy' or 'top_p', not {method!r}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"kiln.llm.sample: top_p {top_p} is outside (0, 1]")
        if temperature < 0:
            raise ValueError(f"kiln.llm.sample: temperature {temperature} is negative")
        if uniform is None:
            uniform = float(numpy.random.default_rng(seed).random())
        if not 0.0 <= uniform < 1.0:
            raise ValueError(f"kiln.llm.sample: uniform {uniform} is outside [0, 1)")
        rt = self.runtime
        host = rt.tensor(row.reshape(1, -1), rt.device("cpu"))
        return int(rt.builtin("vm.builtin.sample_top_p_from_logits")(
            host, float(temperature), float(top_p), float(uniform)))

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 method: Literal["greedy", "top_p"] = "greedy", *, temperature: float = 1.0,
                 top_p: float = 1.0, seed: Optional[int] = None,
                 uniforms: Optional[Sequence[float]] = None,
                 stop_token_ids: Sequence[int] = ()) -> Generation:
        """Generate up to `max_new_tokens` tokens after `prompt_ids` in a sequence of its own,
        removed at the end. top_p draws its uniforms from `uniforms` (one per token) when given,
        else from numpy.random.default_rng(seed). Stops after a token in `stop_token_ids`."""
        import numpy

        if max_new_tokens < 0:
            raise ValueError(f"kiln.llm.generate: max_new_tokens {max_new_tokens} is negative")
        if uniforms is not None and len(uniforms) < max_new_tokens:
            raise ValueError(f"kiln.llm.generate: {len(uniforms)} uniforms for "
                             f"{max_new_tokens} tokens")
        rng = numpy.random.default_rng(seed)
        seq_id = self.add_sequence()
        tokens: List[int] = []
        rows: List[numpy.ndarray] = []
        drawn: List[float] = []
        try:
            if max_new_tokens == 0:
                return Generation([], numpy.zeros((0, self.vocab_size), "float32"))
            logits = self.prefill([seq_id], [list(prompt_ids)])[0]
            while True:
                uniform = None
                if method == "top_p":
                    uniform = float(uniforms[len(tokens)] if uniforms is not None
                                    else rng.random())
                    drawn.append(uniform)
                token = self.sample(logits, method, temperature=temperature, top_p=top_p,
                                    uniform=uniform)
                tokens.append(token)
                rows.append(logits)
                if len(tokens) == max_new_tokens or token in stop_token_ids:
                    break
                logits = self.decode([seq_id], [token])[0]
        finally:
            self.remove_sequence(seq_id)
        return Generation(tokens, numpy.stack(rows), drawn)
