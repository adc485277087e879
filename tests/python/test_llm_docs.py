# SPDX-License-Identifier: Apache-2.0
"""docs/llm.md's four lines from an nn.Module to tokens, run as written (the first python block
of "From an `nn.Module` to tokens") on the tiny Llama of tests/llm/tiny_llama.py: they compile,
write the weights with TVM's writer and generate, and the tokens are TVM's."""

import os
import re
import sys

import pytest

from conftest import LLM_TESTS, REPO

tvm = pytest.importorskip("tvm", reason="apache-tvm 0.27 compiles the model in the documented lines")


def _documented_lines():
    text = (REPO / "docs" / "llm.md").read_text()
    section = text.split("## From an `nn.Module` to tokens", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "docs/llm.md lost its python block"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 4, lines
    return "\n".join(lines)


def test_the_four_documented_lines_give_tvms_tokens(tmp_path, llm_fixture_dir):
    sys.path.insert(0, str(LLM_TESTS))
    import tiny_llama
    import tvm_reference
    from tvm.contrib import tvmjs

    import kiln.llm

    config = tiny_llama.TinyLlamaConfig()
    model = tiny_llama.TinyLlamaForCausalLM(config, tvm.target.Target("llvm"))
    model.to(config.dtype)
    _, named_params = model.export_tvm(spec=model.get_default_spec())
    weights = tiny_llama.make_weights(config, named_params)
    prompt_ids = tvm_reference.prompt(12, salt=9)
    scope = {"model": model, "tvm": tvm, "tvmjs": tvmjs, "weights": weights, "kiln": kiln,
             "prompt_ids": prompt_ids}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(_documented_lines(), "docs/llm.md", "exec"), scope)  # noqa: S102
    finally:
        os.chdir(cwd)
    expected = tvm_reference.make_engine(str(llm_fixture_dir),
                                         runtime=tvm_reference.TvmRuntime()).generate(
                                             prompt_ids, 16).tokens
    assert list(scope["tokens"]) == expected
