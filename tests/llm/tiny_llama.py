# SPDX-License-Identifier: Apache-2.0
"""A tiny Llama-style model in tvm.relax.frontend.nn, compiled the way MLC-LLM compiles one: the
test fixture of Kiln's LLM runtime (issue 36, docs/llm.md).

The model is a real Llama block stack (RMSNorm, SwiGLU MLP, grouped-query attention with rotary
embedding) whose attention goes through TVM 0.27's TIRPagedKVCache
(`attention_with_fused_qkv`), so the compiled library calls the runtime's paged KV cache exactly
as an MLC-compiled LLM does. Its functions, as MLC-LLM names them:

    embed(input_ids: int32[n], params) -> float32[n, hidden]
    prefill(input_embed: [1, n, hidden], cache, params) -> (logits [1, 1, vocab], cache)
    decode(input_embed: [1, 1, hidden], cache, params) -> (logits [1, 1, vocab], cache)
    batch_prefill(input_embeds: [1, n, hidden], logit_positions: int32[b], cache, params)
        -> (logits [1, b, vocab], cache)
    batch_decode(input_embeds: [b, 1, hidden], cache, params) -> (logits [b, 1, vocab], cache)
    create_tir_paged_kv_cache(max_batch_size, max_total_seq_len, prefill_chunk_size, page_size,
        support_sliding_window: each a one-element shape) -> the cache

`params` is one tuple of all weights, passed last (nn's "packed" parameter mode, as MLC's).

Command line: `python tiny_llama.py OUT_DIR` writes

    OUT_DIR/llvm/lib.so       the CPU build
    OUT_DIR/opencl/lib.so     target "opencl" with host llvm (skipped, with the reason printed
                              and written to OUT_DIR/opencl/SKIPPED, when it does not build);
                              TVM's GPU merge kernel is replaced by a race-free one
                              (race_free_merge_state says why); --stock-kernels keeps TVM's
    OUT_DIR/params/           the weights, written by TVM's own tvm.contrib.tvmjs writer
                              (tensor-cache.json + params_shard_*.bin, raw float32); the
                              metadata holds the model configuration and the parameter names in
                              the order the functions take them
    OUT_DIR/config.json       the same configuration, for drivers
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np

import tvm
from tvm import relax as rx
from tvm import te
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op
from tvm.relax.frontend.nn.llm.kv_cache import PagedKVCache, RopeMode, TIRPagedKVCache


@dataclass
class TinyLlamaConfig:
    """The model's shape. Defaults: 3 layers, 4 query heads over 2 KV heads (GQA) of 16 dims."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 3
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    rms_norm_eps: float = 1e-5
    rope_theta: int = 10000
    dtype: str = "float32"
    seed: int = 2024
    # What a driver should create the cache with (the fixture's tests use these).
    kv_cache: Dict[str, int] = field(default_factory=lambda: {
        "max_batch_size": 8,
        "max_total_seq_len": 512,
        "prefill_chunk_size": 64,
        "page_size": 16,
        "support_sliding_window": 0,
    })


class LlamaAttention(nn.Module):  # pylint: disable=too-few-public-methods
    def __init__(self, config: TinyLlamaConfig):
        self.num_q_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size,
                                  (self.num_q_heads + 2 * self.num_kv_heads) * self.head_dim,
                                  bias=False)
        self.o_proj = nn.Linear(self.num_q_heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, hidden_states: Tensor, paged_kv_cache: PagedKVCache, layer_id: int):
        b, s, _ = hidden_states.shape
        qkv = op.reshape(self.qkv_proj(hidden_states),
                         (b, s, self.num_q_heads + 2 * self.num_kv_heads, self.head_dim))
        # The cache applies the rotary embedding to q and k (RopeMode.NORMAL), appends k and v
        # to the pages of each sequence and attends over everything cached.
        out = paged_kv_cache.attention_with_fused_qkv(layer_id, qkv, self.num_q_heads,
                                                      sm_scale=self.head_dim**-0.5)
        return self.o_proj(op.reshape(out, (b, s, self.num_q_heads * self.head_dim)))


class LlamaMLP(nn.Module):  # pylint: disable=too-few-public-methods
    def __init__(self, config: TinyLlamaConfig):
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: Tensor):
        gate, up = op.split(self.gate_up_proj(x), 2, axis=-1)
        return self.down_proj(op.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):  # pylint: disable=too-few-public-methods
    def __init__(self, config: TinyLlamaConfig):
        self.input_layernorm = nn.RMSNorm(config.hidden_size, -1, config.rms_norm_eps, bias=False)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, -1, config.rms_norm_eps,
                                                   bias=False)
        self.mlp = LlamaMLP(config)

    def forward(self, hidden_states: Tensor, paged_kv_cache: PagedKVCache, layer_id: int):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states),
                                                       paged_kv_cache, layer_id)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaModel(nn.Module):  # pylint: disable=too-few-public-methods
    def __init__(self, config: TinyLlamaConfig):
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = nn.RMSNorm(config.hidden_size, -1, config.rms_norm_eps, bias=False)

    def forward(self, input_embed: Tensor, paged_kv_cache: PagedKVCache):
        hidden_states = input_embed
        for layer_id, layer in enumerate(self.layers):
            hidden_states = layer(hidden_states, paged_kv_cache, layer_id)
        return self.norm(hidden_states)


class TinyLlamaForCausalLM(nn.Module):
    """The exported model; `target` decides which TIR attention kernels the cache is given."""

    def __init__(self, config: TinyLlamaConfig, target: tvm.target.Target):
        self.config = config
        self.target = target
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def _logits(self, hidden_states: Tensor) -> Tensor:
        return self.lm_head(hidden_states)

    def embed(self, input_ids: Tensor):
        return self.model.embed_tokens(input_ids)

    def prefill(self, input_embed: Tensor, paged_kv_cache: PagedKVCache):
        def _last(x: te.Tensor):
            b, s, d = x.shape
            return te.compute((b, 1, d), lambda i, _, k: x[i, s - 1, k], name="last_token")

        hidden_states = self.model(input_embed, paged_kv_cache)
        hidden_states = op.tensor_expr_op(_last, name_hint="last_token", args=[hidden_states])
        return self._logits(hidden_states), paged_kv_cache

    def decode(self, input_embed: Tensor, paged_kv_cache: PagedKVCache):
        return self._logits(self.model(input_embed, paged_kv_cache)), paged_kv_cache

    def batch_prefill(self, input_embeds: Tensor, logit_positions: Tensor,
                      paged_kv_cache: PagedKVCache):
        hidden_states = self.model(input_embeds, paged_kv_cache)
        hidden_states = op.take(hidden_states, logit_positions, axis=1)
        return self._logits(hidden_states), paged_kv_cache

    def batch_decode(self, input_embeds: Tensor, paged_kv_cache: PagedKVCache):
        return self._logits(self.model(input_embeds, paged_kv_cache)), paged_kv_cache

    def create_tir_paged_kv_cache(self, max_batch_size: tvm.tirx.Var,
                                  max_total_seq_len: tvm.tirx.Var,
                                  prefill_chunk_size: tvm.tirx.Var, page_size: tvm.tirx.Var,
                                  support_sliding_window: tvm.tirx.Var) -> PagedKVCache:
        c = self.config
        return TIRPagedKVCache(
            attn_kind="mha",
            max_batch_size=max_batch_size,
            max_total_seq_len=max_total_seq_len,
            prefill_chunk_size=prefill_chunk_size,
            page_size=page_size,
            support_sliding_window=support_sliding_window,
            layer_partition=rx.ShapeExpr([0, c.num_hidden_layers]),
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            qk_head_dim=c.head_dim,
            v_head_dim=c.head_dim,
            mla_original_qk_head_dim=0,
            mla_original_v_head_dim=0,
            rope_mode=RopeMode.NORMAL,
            rope_scale=1,
            rope_theta=c.rope_theta,
            rope_scaling={},
            rope_ext_factors=rx.prim_value(0),
            rotary_dim=c.head_dim,
            enable_disaggregation=False,
            dtype=c.dtype,
            target=self.target,
        )

    def get_default_spec(self) -> nn.spec.ModuleSpec:
        hidden, dtype = self.config.hidden_size, self.config.dtype
        packed = {"param_mode": "packed", "effect_mode": "none"}
        cache = nn.spec.Object(object_type=PagedKVCache)
        spec = {
            "embed": {"input_ids": nn.spec.Tensor(["seq_len"], "int32"), "$": packed},
            "prefill": {
                "input_embed": nn.spec.Tensor([1, "seq_len", hidden], dtype),
                "paged_kv_cache": cache,
                "$": packed,
            },
            "decode": {
                "input_embed": nn.spec.Tensor([1, 1, hidden], dtype),
                "paged_kv_cache": cache,
                "$": packed,
            },
            "batch_prefill": {
                "input_embeds": nn.spec.Tensor([1, "seq_len", hidden], dtype),
                "logit_positions": nn.spec.Tensor(["batch_size"], "int32"),
                "paged_kv_cache": cache,
                "$": packed,
            },
            "batch_decode": {
                "input_embeds": nn.spec.Tensor(["batch_size", 1, hidden], dtype),
                "paged_kv_cache": cache,
                "$": packed,
            },
            "create_tir_paged_kv_cache": {
                "max_batch_size": int,
                "max_total_seq_len": int,
                "prefill_chunk_size": int,
                "page_size": int,
                "support_sliding_window": int,
                "$": {"param_mode": "none", "effect_mode": "none"},
            },
        }
        return nn.spec.ModuleSpec.from_raw(spec, self)


def race_free_merge_state(num_heads: int, dtype: str) -> tvm.tirx.PrimFunc:
    """A GPU merge of two attention states (V, S) <- merge((V, S), (V_other, S_other)) with one
    thread per (token, head), computed with the arithmetic of TVM's kernels.

    Why: TVM 0.27's GPU kernel (_merge_state_inplace in nn/llm/_decode_kernels.py) runs
    head_dim / 4 threads per (token, head); each reads S[n, h] and each writes it back, with no
    barrier between. On a GPU the threads of a warp read before any writes; on PoCL the
    work-items of a group run one after another, so all but the first read the merged S and
    their V lanes come out wrong (logits off by units wherever the cache merges two states:
    a prefill onto cached tokens, a decode over a forked prefix). This kernel has no shared
    value to race on."""
    from tvm.script import tirx as T  # pylint: disable=import-outside-toplevel

    # pylint: disable=invalid-name,no-member
    @T.prim_func(s_tir=True)
    def merge_state_inplace(v: T.handle, s: T.handle, v_other: T.handle, s_other: T.handle):
        T.func_attr({"tirx.is_scheduled": True})
        N = T.int32()
        H = T.int32()
        D = T.int32()
        V = T.match_buffer(v, (N, H, D), dtype)
        S = T.match_buffer(s, (N, H), "float32")
        V_other = T.match_buffer(v_other, (N, H, D), dtype)
        S_other = T.match_buffer(s_other, (N, H), "float32")
        for bx in T.thread_binding(N, thread="blockIdx.x"):
            for tx in T.thread_binding(num_heads, thread="threadIdx.x"):
                with T.sblock("merge"):
                    s_val = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    s_other_val = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    s_max = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    scale = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    other_scale = T.sblock_alloc_buffer((1,), "float32", scope="local")
                    s_val[0] = S[bx, tx]
                    s_other_val[0] = S_other[bx, tx]
                    s_max[0] = T.max(s_val[0], s_other_val[0])
                    s_val[0] = T.exp2(s_val[0] - s_max[0])
                    s_other_val[0] = T.exp2(s_other_val[0] - s_max[0])
                    scale[0] = s_val[0] / (s_val[0] + s_other_val[0])
                    other_scale[0] = s_other_val[0] / (s_val[0] + s_other_val[0])
                    for d in T.serial(D):
                        V[bx, tx, d] = V[bx, tx, d] * scale[0] + V_other[bx, tx, d] * other_scale[0]
                    S[bx, tx] = T.log2(s_val[0] + s_other_val[0]) + s_max[0]

    # pylint: enable=invalid-name,no-member
    return merge_state_inplace


# The GPU merge kernel TIRPagedKVCache adds, by its name in the module.
GPU_MERGE_KERNEL = "tir_attention_merge_state"


def export(config: TinyLlamaConfig, target: tvm.target.Target, stock_kernels: bool = False
           ) -> Tuple[tvm.IRModule, List[Tuple[str, Any]]]:
    """The model's Relax IRModule for `target` and its (name, parameter) list in the order the
    functions take them. For GPU targets TVM's merge kernel is replaced by
    race_free_merge_state (unless `stock_kernels`): see there why."""
    model = TinyLlamaForCausalLM(config, target)
    model.to(config.dtype)
    mod, named_params = model.export_tvm(spec=model.get_default_spec())
    if not stock_kernels and any(gv.name_hint == GPU_MERGE_KERNEL
                                 for gv in mod.get_global_vars()):
        kernel = race_free_merge_state(config.num_attention_heads, config.dtype)
        mod[mod.get_global_var(GPU_MERGE_KERNEL)] = kernel.with_attr("global_symbol",
                                                                     GPU_MERGE_KERNEL)
    return mod, named_params


def make_weights(config: TinyLlamaConfig, named_params) -> Dict[str, np.ndarray]:
    """Deterministic random weights from config.seed. Norm weights are 1; matrices are scaled by
    1/sqrt(fan_in), and the embedding and lm_head by more, so that logits are spread over
    several units and the greedy token is never a near-tie (a 1e-4 difference cannot flip it)."""
    rng = np.random.default_rng(config.seed)
    weights: Dict[str, np.ndarray] = {}
    for name, param in named_params:
        shape = tuple(int(d) for d in param.shape)
        if name.endswith("norm.weight"):
            value = np.ones(shape, "float32") + 0.1 * rng.standard_normal(shape)
        elif name.endswith("embed_tokens.weight"):
            value = rng.standard_normal(shape)
        elif name.endswith("lm_head.weight"):
            value = 3.0 * rng.standard_normal(shape) / math.sqrt(shape[1])
        else:
            value = rng.standard_normal(shape) / math.sqrt(shape[-1])
        weights[name] = np.ascontiguousarray(value, dtype=config.dtype)
    return weights


def compile_for(config: TinyLlamaConfig, target: tvm.target.Target, path: str,
                stock_kernels: bool = False) -> None:
    """Compile the model for `target` with TVM's default pipeline for it (dlight schedules for
    GPU targets) and export the library to `path`."""
    mod, _ = export(config, target, stock_kernels)
    ex = tvm.compile(mod, target=target)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ex.export_library(path)


def write_weights(config: TinyLlamaConfig, out_dir: str) -> List[str]:
    """Write the weights with TVM's tensor-cache writer into out_dir/params; returns the
    parameter names in the functions' order."""
    from tvm.contrib import tvmjs

    _, named_params = export(config, tvm.target.Target("llvm"))
    weights = make_weights(config, named_params)
    names = [name for name, _ in named_params]
    tvmjs.dump_tensor_cache(
        ((name, weights[name]) for name in names),
        os.path.join(out_dir, "params"),
        encode_format="raw",
        meta_data={"ParamNames": names, "model_config": asdict(config)},
        show_progress=False,
    )
    return names


def build(out_dir: str, config: TinyLlamaConfig | None = None, opencl: bool = True,
          stock_kernels: bool = False) -> dict:
    """Build everything into out_dir (see the module's docstring). Returns what was built:
    {"llvm": path, "opencl": path or None, "opencl_skipped": reason or None, "params": dir}."""
    config = config or TinyLlamaConfig()
    os.makedirs(out_dir, exist_ok=True)
    result: Dict[str, Any] = {"params": os.path.join(out_dir, "params")}
    names = write_weights(config, out_dir)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"model_config": asdict(config), "param_names": names}, f, indent=1)

    llvm_path = os.path.join(out_dir, "llvm", "lib.so")
    compile_for(config, tvm.target.Target("llvm"), llvm_path)
    result["llvm"] = llvm_path

    result["opencl"] = None
    result["opencl_skipped"] = None
    if opencl:
        opencl_path = os.path.join(out_dir, "opencl", "lib.so")
        try:
            compile_for(config, tvm.target.Target("opencl", host="llvm"), opencl_path,
                        stock_kernels)
            result["opencl"] = opencl_path
        except Exception as err:  # pylint: disable=broad-except
            # TVM's error text can be long: the first line says what failed.
            reason = f"OpenCL build failed: {type(err).__name__}: {str(err).strip()[:2000]}"
            os.makedirs(os.path.dirname(opencl_path), exist_ok=True)
            with open(os.path.join(out_dir, "opencl", "SKIPPED"), "w", encoding="utf-8") as f:
                f.write(reason + "\n")
            print(f"tiny_llama: skipping OpenCL: {reason.splitlines()[0]}", file=sys.stderr)
            result["opencl_skipped"] = reason
    return result


def kv_cache_create_args(target: str = "llvm", config: TinyLlamaConfig | None = None) -> str:
    """The Relax IR of create_tir_paged_kv_cache for `target`: the call to
    vm.builtin.paged_attention_kv_cache_create with the kernels it passes, as text."""
    config = config or TinyLlamaConfig()
    tgt = tvm.target.Target(target) if target == "llvm" else tvm.target.Target(target,
                                                                               host="llvm")
    mod, _ = export(config, tgt)
    return mod["create_tir_paged_kv_cache"].script()


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="where to write llvm/lib.so, opencl/lib.so, params/")
    parser.add_argument("--no-opencl", action="store_true", help="build the CPU library only")
    parser.add_argument("--stock-kernels", action="store_true",
                        help="keep TVM's GPU merge kernel (racy on PoCL) in the OpenCL build")
    parser.add_argument("--print-kv-cache-create", metavar="TARGET",
                        help="print create_tir_paged_kv_cache's Relax IR for TARGET and exit")
    args = parser.parse_args(argv)
    if args.print_kv_cache_create:
        print(kv_cache_create_args(args.print_kv_cache_create))
        return 0
    result = build(args.out_dir, opencl=not args.no_opencl, stock_kernels=args.stock_kernels)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
