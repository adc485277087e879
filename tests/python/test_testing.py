# SPDX-License-Identifier: Apache-2.0
"""kiln.testing.local_run (SPEC §1.8, §1.9 checklist) on Kiln modules and on TVM modules
compiled here by apache-tvm, and the EvaluatorConfig of §1.6."""

import os

import numpy as np
import pytest

import kiln
from conftest import example_kernel, have_tvm
from kiln.testing import EvaluatorConfig, local_run

needs_tvm = pytest.mark.skipif(not have_tvm(), reason="apache-tvm is not installed in this "
                               "Python (tools/dev.sh test installs it; KILN_SKIP_TVM=1 does not)")


def vector_add_args(n=1000, scale=3.0):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return a, b, np.zeros(n, np.float32), scale


def test_evaluator_config_is_the_references_named_tuple():
    assert EvaluatorConfig() == (3, 1, 100, False)
    assert EvaluatorConfig._normalized(None) == EvaluatorConfig()
    c = EvaluatorConfig(number=5, repeat=2, min_repeat_ms=0, enable_cpu_cache_flush=True)
    assert EvaluatorConfig._normalized(c) == c
    with pytest.raises(AttributeError):
        c.number = 1  # immutable


def test_local_run_returns_numpy_outputs_and_repeat_results(vector_add):
    a, b, c, scale = vector_add_args()
    config = EvaluatorConfig(number=4, repeat=3, min_repeat_ms=0)
    outputs, profile = local_run(vector_add, "cpu", [a, b, c, scale], evaluator_config=config)
    assert [type(o) for o in outputs] == [np.ndarray, np.ndarray, np.ndarray, float]
    np.testing.assert_array_equal(outputs[2], a + scale * b)
    np.testing.assert_array_equal(outputs[0], a)
    assert not c.any(), "the caller's arrays are copied to the device, never written"
    assert isinstance(profile, kiln.BenchmarkResult) and len(profile.results) == 3
    assert profile.numbers == [4, 4, 4]


@pytest.mark.parametrize("export_func", ["tar", "ndk", "so"])
def test_local_run_with_each_named_exporter(vector_add, export_func, monkeypatch):
    # The ndk exporter cross-compiles with KILN_NDK_CC (the NDK's clang); the host compiler
    # stands in for it here.
    monkeypatch.setenv("KILN_NDK_CC", os.environ.get("CC", "cc"))
    a, b, c, scale = vector_add_args(64)
    outputs, _ = local_run(vector_add, "llvm", [a, b, c, scale], export_func=export_func,
                           evaluator_config=EvaluatorConfig(number=1, min_repeat_ms=0))
    np.testing.assert_array_equal(outputs[2], a + scale * b)


def test_local_run_with_a_callable_exporter(vector_add, tmp_path):
    seen = []

    def export(mod, path):
        seen.append((mod, os.path.basename(path)))
        mod.export_library(path, "so")

    a, b, c, scale = vector_add_args(64)
    outputs, _ = local_run(vector_add, "cpu", [a, b, c, scale], export_func=export,
                           output_format="so",
                           evaluator_config=EvaluatorConfig(number=1, min_repeat_ms=0))
    assert seen == [(vector_add, "kiln_tmp_mod.so")]
    np.testing.assert_array_equal(outputs[2], a + scale * b)


def test_local_run_errors_before_any_work(vector_add):
    args = list(vector_add_args(8))
    with pytest.raises(ValueError, match=r"^output_format must be specified if `export_func` is "
                                         r"callable$"):
        local_run(vector_add, "cpu", args, export_func=lambda m, p: None)
    with pytest.raises(ValueError, match="^Unsupported export_func: zip$"):
        local_run(vector_add, "cpu", args, export_func="zip")
    with pytest.raises(ValueError, match="^Unsupported input type: <class 'str'>$"):
        local_run(vector_add, "cpu", args[:3] + ["x"])
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        local_run(vector_add, "tpu", args)


def test_an_exception_in_a_callable_exporter_comes_back_and_cleans_up(vector_add):
    class ExportFailed(Exception):
        pass

    def export(mod, path):
        open(path, "w").close()  # a partial artifact in the temporary directory
        raise ExportFailed(path)

    with pytest.raises(ExportFailed) as failure:
        local_run(vector_add, "cpu", list(vector_add_args(8)), export_func=export,
                  output_format="so")
    assert not os.path.exists(os.path.dirname(str(failure.value))), "temp dir left behind"


def test_enable_cpu_cache_flush_runs_on_tensor_arguments():
    relu = kiln.load_module(example_kernel("relu"))
    x = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    config = EvaluatorConfig(number=2, repeat=2, min_repeat_ms=0, enable_cpu_cache_flush=True)
    outputs, profile = local_run(relu, "cpu", [x, np.zeros_like(x)], evaluator_config=config)
    np.testing.assert_array_equal(outputs[1], np.maximum(x, 0))
    assert len(profile.results) == 2


def test_cache_flush_refuses_a_scalar_after_the_first_argument(vector_add):
    # SPEC §1.4: every argument but the first is flushed as a tensor.
    config = EvaluatorConfig(number=1, min_repeat_ms=0, enable_cpu_cache_flush=True)
    with pytest.raises(TypeError, match="argument 3 expects tensor, got float"):
        local_run(vector_add, "cpu", list(vector_add_args(8)), evaluator_config=config)


# ---- TVM modules -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tvm_vadd():
    import tvm
    from tvm import te

    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    func = te.create_prim_func([A, B, C]).with_attr("global_symbol", "main")
    return tvm.compile(func, target="llvm")


@needs_tvm
@pytest.mark.parametrize("export_func", ["tar", "so"])
def test_a_tvm_module_runs_in_kiln_as_in_tvm(tvm_vadd, export_func):
    import tvm.testing

    rng = np.random.default_rng(3)
    a = rng.standard_normal(4096).astype(np.float32)
    b = rng.standard_normal(4096).astype(np.float32)
    c = np.zeros(4096, np.float32)
    config = EvaluatorConfig(number=3, repeat=2, min_repeat_ms=0)
    outputs, profile = local_run(tvm_vadd, "cpu", [a, b, c], evaluator_config=config,
                                 export_func=export_func)
    np.testing.assert_array_equal(outputs[2], a + b)
    assert len(profile.results) == 2
    if export_func == "tar":  # the reference, side by side, on the same arrays
        reference, _ = tvm.testing.local_run(tvm_vadd, "cpu", [a, b, c])
        np.testing.assert_array_equal(outputs[2], reference[2])


@needs_tvm
def test_tvms_own_evaluator_config_is_accepted(tvm_vadd):
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig as TvmEvaluatorConfig

    a = np.ones(64, np.float32)
    outputs, profile = local_run(tvm_vadd, "cpu", [a, a, np.zeros(64, np.float32)],
                                 evaluator_config=TvmEvaluatorConfig(number=2, repeat=4,
                                                                     min_repeat_ms=0))
    assert len(profile.results) == 4 and profile.numbers == [2, 2, 2, 2]
    np.testing.assert_array_equal(outputs[2], a + a)


@needs_tvm
def test_tvm_tensors_are_shared_by_dlpack(tvm_vadd):
    import tvm

    a = tvm.runtime.tensor(np.arange(8, dtype=np.float32))
    t = kiln.from_dlpack(a)
    assert t.data_ptr == np.from_dlpack(a).ctypes.data  # one memory, no copy
    np.testing.assert_array_equal(t.numpy(), np.arange(8, dtype=np.float32))
    back = tvm.runtime.from_dlpack(kiln.tensor(np.arange(3, dtype=np.int32)))
    np.testing.assert_array_equal(back.numpy(), [0, 1, 2])


@needs_tvm
def test_an_opencl_tvm_module_runs_on_kilns_opencl_device():
    if kiln.opencl(0) not in kiln.devices():
        pytest.skip("no OpenCL device (PoCL is installed by tools/install-deps.sh)")
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def vadd(a: T.Buffer((1024,), "float32"), b: T.Buffer((1024,), "float32"),
             c: T.Buffer((1024,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        for bx in T.thread_binding(16, thread="blockIdx.x"):
            for tx in T.thread_binding(64, thread="threadIdx.x"):
                c[bx * 64 + tx] = a[bx * 64 + tx] + b[bx * 64 + tx]

    mod = tvm.compile(vadd, target=tvm.target.Target("opencl", host="llvm"))
    rng = np.random.default_rng(5)
    a = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    outputs, profile = local_run(mod, "opencl", [a, b, np.zeros(1024, np.float32)],
                                 evaluator_config=EvaluatorConfig(number=2, min_repeat_ms=0))
    np.testing.assert_allclose(outputs[2], a + b, rtol=1e-6)
    assert profile.timer == "device"  # OpenCL events on the device
