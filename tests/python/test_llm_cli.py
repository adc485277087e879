# SPDX-License-Identifier: Apache-2.0
"""`kiln llm generate|bench` (docs/llm.md) on the tiny Llama of tests/llm/tiny_llama.py: the
tool's tokens are TVM's, bench prints its figures with their range and a profile of one decode
step with the KV cache's kernels, and bad input is a clear error with the usage (2) or runtime
(3) exit code."""

import json
import shutil
import subprocess
import sys

import pytest

from conftest import KILN_TOOL, LLM_TESTS

sys.path.insert(0, str(LLM_TESTS))

import tvm_reference  # noqa: E402  (tests/llm/, on the path above)


def _kiln(*args, check=True):
    done = subprocess.run([str(KILN_TOOL), "llm", *map(str, args)], capture_output=True,
                          text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        pytest.fail(f"kiln llm {' '.join(map(str, args))} exited {done.returncode}:\n"
                    f"{done.stdout}{done.stderr}")
    return done


def _nested_in(table, parent):
    """The names of the profile table's rows whose "Nested in" column is `parent`."""
    return {row[0] for row in (line.split() for line in table.splitlines())
            if len(row) > 1 and row[-1] == parent}


@pytest.fixture(scope="module")
def model(llm_fixture_dir):
    if not KILN_TOOL.is_file():
        pytest.skip(f"no kiln tool at {KILN_TOOL}")
    return llm_fixture_dir / "llvm" / "lib.so", llm_fixture_dir / "params"


@pytest.fixture(scope="module")
def tvm_engine(llm_fixture_dir):
    return tvm_reference.make_engine(str(llm_fixture_dir), runtime=tvm_reference.TvmRuntime())


@pytest.mark.parametrize("length,chunk", [(20, 512), (70, 32)])
def test_generate_gives_tvms_greedy_tokens(model, tvm_engine, length, chunk):
    lib, params = model
    prompt = tvm_reference.prompt(length, salt=5)
    expected = tvm_engine.generate(prompt, 12).tokens
    done = _kiln("generate", lib, "--weights", params, "--prompt", ",".join(map(str, prompt)),
                 "--max-new-tokens", 12, "--prefill-chunk", chunk, "--json")
    doc = json.loads(done.stdout)
    assert doc["tokens"] == expected
    assert doc["prompt"] == prompt and doc["sampling"] == "greedy"


def test_top_p_is_reproducible_from_its_seed(model):
    lib, params = model
    args = ["generate", lib, "--weights", params, "--prompt", "5 6 7", "--max-new-tokens", 10,
            "--temperature", 0.8, "--top-p", 0.9]
    first = _kiln(*args, "--seed", 11).stdout
    assert _kiln(*args, "--seed", 11).stdout == first
    assert len(first.split()) == 10


def test_bench_prints_figures_with_their_range_and_profiles_a_decode_step(model, tmp_path):
    lib, params = model
    out = tmp_path / "bench.json"
    done = _kiln("bench", lib, "--weights", params, "--prompt-length", 24, "--decode-tokens", 4,
                 "--batch", 2, "--repeats", 3, "--profile", "--benchmark-out", out)
    text = done.stdout
    assert "3 launches after one warm-up" in text
    assert "tokens/s median (range" in text and "ms/step median (range" in text
    assert "KV cache" in text and "peak RSS" in text
    # The profile: the VM's rows and the KV cache's kernels nested in the builtin that ran them.
    names = _nested_in(text, "vm.builtin.attention_kv_cache_attention_with_fused_qkv")
    assert "batch_decode_paged_kv_cpu" in names, text
    assert "tir_kv_cache_transpose_append" in names, text
    doc = json.loads(out.read_text())
    runs = {b["name"]: b for b in doc["benchmarks"] if b.get("run_type") != "aggregate"}
    assert any(name.startswith("llm/prefill/batch:2/prompt:24/") for name in runs), runs
    assert any(name.startswith("llm/decode_step/batch:2/") for name in runs), runs


def test_bench_json(model):
    lib, params = model
    doc = json.loads(_kiln("bench", lib, "--weights", params, "--prompt-length", 8,
                           "--decode-tokens", 2, "--repeats", 3, "--json").stdout)
    assert doc["launches"] == 3 and doc["batch"] == 1
    for key in ("prefill_tokens_per_s", "decode_ms_per_step"):
        figure = doc[key]
        assert 0 < figure["min"] <= figure["median"] <= figure["max"], figure
    assert doc["weight_bytes"] > 0 and doc["kv_cache_bytes"] > 0


def test_bad_input_is_a_clear_error(model, tmp_path):
    lib, params = model
    base = ["generate", lib, "--weights", params, "--max-new-tokens", 2]
    done = _kiln(*base, "--prompt", "1,x", check=False)
    assert done.returncode == 2 and "'x' is not a token id" in done.stderr
    done = _kiln(*base, "--prompt", "1,2,256", check=False)
    assert done.returncode == 3 and "token id 256 is outside the vocabulary [0, 256)" in done.stderr
    done = _kiln("generate", lib, "--weights", tmp_path / "nowhere", "--prompt", "1",
                 check=False)
    assert done.returncode == 3 and "nowhere" in done.stderr
    # A weight folder whose shard was cut short names the shard.
    broken = tmp_path / "params"
    shutil.copytree(params, broken)
    shard = next(broken.glob("params_shard_*.bin"))
    shard.write_bytes(shard.read_bytes()[:1000])
    done = _kiln("generate", lib, "--weights", broken, "--prompt", "1", check=False)
    assert done.returncode == 3 and shard.name in done.stderr, done.stderr
    # A library that is not a model compiled the MLC way.
    done = _kiln("generate", KILN_TOOL, "--weights", params, "--prompt", "1", check=False)
    assert done.returncode == 3 and done.stderr.startswith("kiln: error:"), done.stderr


def test_generate_and_profile_on_opencl_give_the_cpu_tokens(model, llm_fixture_dir):
    """The OpenCL build on Kiln's OpenCL plugin (PoCL here) through the tool: TVM's CPU tokens,
    and a profile of its decode step with the cache's kernels nested in their builtin."""
    import kiln

    lib = llm_fixture_dir / "opencl" / "lib.so"
    if not lib.is_file():
        skipped = llm_fixture_dir / "opencl" / "SKIPPED"
        pytest.skip(skipped.read_text() if skipped.is_file() else "no OpenCL build of the model")
    if not any(b["type_name"] == "opencl" and b["devices"] for b in kiln.backends()):
        pytest.skip("no OpenCL device in Kiln (PoCL)")
    cpu_lib, params = model
    prompt = ",".join(map(str, tvm_reference.prompt(14, salt=6)))
    args = ["--weights", params, "--prompt", prompt, "--max-new-tokens", 8]
    on_cpu = _kiln("generate", cpu_lib, *args).stdout
    on_opencl = _kiln("generate", lib, *args, "--device", "opencl").stdout
    assert on_opencl == on_cpu and len(on_cpu.split()) == 8
    text = _kiln("bench", lib, "--weights", params, "--device", "opencl", "--prompt-length", 8,
                 "--decode-tokens", 2, "--repeats", 3, "--profile").stdout
    assert "on opencl:0" in text
    nested = _nested_in(text, "vm.builtin.attention_kv_cache_attention_with_fused_qkv")
    assert "batch_decode_paged_kv" in nested, text
