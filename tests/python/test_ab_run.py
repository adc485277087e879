# SPDX-License-Identifier: Apache-2.0
"""kiln.testing.ab_run (issue 29 item 2, issue 35 item 3): A and B timed in one run, alternating
in a random order per round; each side's module file and SHA-256; the ratio B/A with its
interval and a verdict, "same module" for identical sides. The kernels are the relu example at
two sizes: 8x the elements is 8x the work, far beyond any noise."""

import hashlib
import shutil

import numpy as np
import pytest

import kiln
import kiln.testing
from conftest import example_kernel

QUICK = kiln.testing.EvaluatorConfig(number=20, repeat=1, min_repeat_ms=0)


def relu_args(n):
    return [np.linspace(-1, 1, n, dtype="float32"), np.zeros(n, dtype="float32")]


def test_eight_times_the_work_is_slower():
    relu = kiln.load_module(example_kernel("relu"))
    r = kiln.testing.ab_run(relu, example_kernel("relu"), "cpu", relu_args(1 << 14),
                            args_b=relu_args(1 << 17), evaluator_config=QUICK, rounds=10)
    assert isinstance(r, kiln.testing.AbResult)
    assert r.verdict == "slower", r
    assert r.significant and r.low > 1 and r.low <= r.ratio <= r.high
    assert len(r.a_seconds) == len(r.b_seconds) == len(r.b_first) == 10
    assert all(t > 0 for t in r.a_seconds + r.b_seconds)
    assert 0.9 < r.confidence < 1 and r.detectable >= 0.05
    # One module at two sizes: named as the same module, differing in its inputs.
    with open(example_kernel("relu"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert r.a_module.sha256 == r.b_module.sha256 == digest
    assert r.a_module.file == str(example_kernel("relu")) and r.a_module.hashed == "file"
    assert r.same_module and list(r.differences) == ["inputs"]
    assert r.looks == 1 and r.planned_looks == 5  # 10, 20, 40, 80 and 160 rounds at most
    assert len(r.a_pressure) == len(r.b_pressure) == 10


def test_the_seed_fixes_the_order_and_identical_sides_are_the_same_module(tmp_path):
    relu = kiln.load_module(example_kernel("relu"))
    args = relu_args(1 << 12)
    first = kiln.testing.ab_run(relu, relu, "cpu", args, evaluator_config=QUICK, rounds=8,
                                seed=42)
    again = kiln.testing.ab_run(relu, relu, "cpu", args, evaluator_config=QUICK, rounds=8,
                                seed=42)
    assert first.seed == again.seed == 42
    assert list(first.b_first) == list(again.b_first)
    assert 0 < any(first.b_first) <= 8  # both orders occur with this seed
    assert not all(first.b_first)
    # The same function on the same data: never "no change", but named as the same module,
    # with its hash; the ratio is A against itself, near 1 whatever the noise.
    assert first.verdict == "same module", first
    assert first.same_module and list(first.differences) == []
    assert first.a_module.sha256 in first.reason and "same module" in first.reason
    assert first.looks == 1 and len(first.a_seconds) == 8
    assert 0.5 < first.ratio < 2 and first.low <= first.ratio <= first.high
    # A byte-identical copy at another path is the same module too; its file is named.
    copy = str(tmp_path / "copy.so")
    shutil.copyfile(example_kernel("relu"), copy)
    r = kiln.testing.ab_run(relu, copy, "cpu", args, evaluator_config=QUICK, rounds=8)
    assert r.verdict == "same module" and r.b_module.file == copy, r


def test_bad_arguments_are_errors():
    relu = kiln.load_module(example_kernel("relu"))
    with pytest.raises(ValueError, match="rounds must be at least 6"):
        kiln.testing.ab_run(relu, relu, "cpu", relu_args(64), rounds=3)
    with pytest.raises(TypeError, match="mod_b must be"):
        kiln.testing.ab_run(relu, 42, "cpu", relu_args(64))
    with pytest.raises(ValueError, match="Unsupported input type"):
        kiln.testing.ab_run(relu, relu, "cpu", [object()])
    with pytest.raises(kiln.KilnError, match="side B"):
        kiln.testing.ab_run(relu, relu, "cpu", relu_args(64), function_b="no_such_function")


def test_a_module_is_named_by_the_bytes_it_was_loaded_from_not_its_file_now(tmp_path):
    """A library rebuilt at its path after it was loaded: the loaded module's hash is of what
    runs (the bytes it was loaded from); the side loaded from the path now is another module."""
    path = tmp_path / "librelu.so"
    shutil.copyfile(example_kernel("relu"), path)
    loaded = kiln.load_module(str(path))
    original = hashlib.sha256(path.read_bytes()).hexdigest()
    with open(path, "ab") as f:  # a different file that still loads: bytes past the ELF's end
        f.write(b"\0" * 64)
    rebuilt = hashlib.sha256(path.read_bytes()).hexdigest()
    r = kiln.testing.ab_run(loaded, str(path), "cpu", relu_args(1 << 10), evaluator_config=QUICK,
                            rounds=10)
    assert r.a_module.sha256 == original and r.a_module.hashed == "file"
    assert r.b_module.sha256 == rebuilt
    assert not r.same_module
