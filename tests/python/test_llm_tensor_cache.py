# SPDX-License-Identifier: Apache-2.0
"""The tensor cache (weights) of the LLM runtime against TVM's own (issue 36, docs/llm.md).

Caches are written by TVM's writer (tvm.contrib.tvmjs.dump_tensor_cache) and loaded both by
Kiln's builtins and by TVM's (vm.builtin.tensor_cache.*, vm.builtin.param_array_from_cache*,
under the same names in both); every tensor must come out bit for bit the same: dtype, shape and
bytes. The cases without TVM (hand-written caches, every bad input) are tests/llm/
tensor_cache_test.cc.
"""
import json
import os
import shutil

import numpy as np
import pytest

import kiln

tvm = pytest.importorskip("tvm", reason="apache-tvm is not installed (KILN_SKIP_TVM=1?)")
from tvm.contrib import tvmjs  # noqa: E402

try:
    import ml_dtypes
except ImportError:  # TVM's writer then has no bfloat16 / float8 arrays to write
    ml_dtypes = None

CPU = 1  # DLPack device type codes, as both runtimes' builtins take them
OPENCL = 4

NAMES = [
    "vm.builtin.tensor_cache.load",
    "vm.builtin.tensor_cache.get",
    "vm.builtin.tensor_cache.update",
    "vm.builtin.tensor_cache.remove",
    "vm.builtin.tensor_cache.clear",
    "vm.builtin.param_array_from_cache",
    "vm.builtin.param_array_from_cache_by_name",
    "vm.builtin.param_array_from_cache_by_name_unpacked",
]


class Runtime:
    """One runtime's tensor cache builtins, by their short names (load, get, ...)."""

    def __init__(self, get_global_func):
        self.fn = {name.split(".")[-1]: get_global_func(name) for name in NAMES}
        self.fn.update({name.replace("vm.builtin.", ""): get_global_func(name) for name in NAMES})

    def __getattr__(self, short):
        return self.fn[short]


KILN = Runtime(kiln.get_global_func)
TVM = Runtime(tvm.get_global_func)


@pytest.fixture(autouse=True)
def empty_caches():
    """Both process-wide caches start and end empty."""
    KILN.clear()
    TVM.clear()
    yield
    KILN.clear()
    TVM.clear()


def dump(params, path, **kwargs):
    """Writes `params` with TVM's writer (no progress output)."""
    tvmjs.dump_tensor_cache(params, str(path), show_progress=False, **kwargs)
    return str(path)


def host(tensor):
    """A numpy array of a Kiln or TVM tensor (downloaded when on a device)."""
    return tensor.numpy()


def same_tensor(kiln_tensor, tvm_tensor, name):
    """Kiln's and TVM's tensors are equal bit for bit: dtype, shape, bytes."""
    assert kiln_tensor is not None, f"{name}: Kiln has no tensor"
    assert tvm_tensor is not None, f"{name}: TVM has no tensor"
    assert str(kiln_tensor.dtype) == str(tvm_tensor.dtype), name
    assert tuple(kiln_tensor.shape) == tuple(tvm_tensor.shape), name
    assert host(kiln_tensor).tobytes() == host(tvm_tensor).tobytes(), name


def cache_names(path):
    with open(os.path.join(path, "tensor-cache.json")) as f:
        meta = json.load(f)
    return [rec["name"] for shard in meta["records"] for rec in shard["records"]]


def load_both(path):
    KILN.load(path, CPU, 0)
    TVM.load(path, CPU, 0)


def compare_all(path):
    """Every tensor of the cache at `path`, in both caches, is the same; returns the names."""
    names = cache_names(path)
    assert names
    for name in names:
        same_tensor(KILN.get(name), TVM.get(name), name)
    return names


def sample_params(rng):
    """Every dtype TVM's writer and Kiln both have, several shapes and a scalar; big enough to
    spread over several 1 MB shards, one of them out of band. No empty tensor: TVM 0.27's loader
    refuses one ("Check failed: (data != nullptr)"); tensor_cache_test.cc loads it in Kiln."""
    params = {
        "embed.weight": rng.standard_normal((256, 384)).astype("float32"),  # 384 KB
        "layer.0.q": rng.standard_normal((128, 256)).astype("float16"),
        "layer.0.q_scale": rng.integers(-128, 128, size=(4096,), dtype=np.int8),
        "layer.0.packed": rng.integers(0, 2**32, size=(64, 1024), dtype=np.uint32),  # 256 KB
        "layer.0.norm": rng.standard_normal((384,)).astype("float32"),
        "pos": np.arange(77, dtype=np.int64),
        "ids": rng.integers(-(2**31), 2**31, size=(33,), dtype=np.int32),
        "bytes": rng.integers(0, 256, size=(5, 7), dtype=np.uint8),
        "scalar": np.array(3.25, dtype="float32"),
        "layer.1.w": rng.standard_normal((512, 512)).astype("float16"),  # 512 KB
        "big": rng.standard_normal((160, 1024)).astype("float32"),  # 640 KB: out of band at 1 MB
        "f64": rng.standard_normal((9,)),
        "i16": rng.integers(-(2**15), 2**15, size=(10,), dtype=np.int16),
        "u16": rng.integers(0, 2**16, size=(10,), dtype=np.uint16),
    }
    if ml_dtypes is not None:
        params["bf16.weight"] = rng.standard_normal((31,)).astype(ml_dtypes.bfloat16)
    return params


@pytest.mark.parametrize("encode_format", ["raw", "f32-to-bf16"])
def test_tvm_written_cache_loads_bit_for_bit(tmp_path, encode_format):
    params = sample_params(np.random.default_rng(0))
    path = dump(params, tmp_path / "cache", encode_format=encode_format, shard_cap_mb=1)
    with open(os.path.join(path, "tensor-cache.json")) as f:
        assert len(json.load(f)["records"]) >= 2, "the cache should span several shards"
    load_both(path)
    names = compare_all(path)
    assert sorted(names) == sorted(params)
    for name, value in params.items():
        k = host(KILN.get(name))
        if encode_format == "raw" or value.dtype != np.float32:
            assert k.tobytes() == value.tobytes(), name
        else:  # bf16 keeps the upper half of each float32, rounded by the writer
            assert k.view(np.uint32).tolist() == (
                tvmjs._convert_f32_to_bf16(value).astype(np.uint32) << 16).tolist(), name


def test_bf16_encoding_of_extreme_values(tmp_path):
    """The writer rounds to nearest even within bfloat16's range and truncates beyond it
    (attention masks); decoding is the same shift in both runtimes."""
    f32 = np.finfo(np.float32)
    value = np.array([0.0, -0.0, 1.0, -1.0, 1 / 3, 65504.0, 1e-40, -1e-45, f32.max, f32.min,
                      f32.tiny, np.inf, -np.inf, 3.0e38, -3.4e38, 1.00390625, 1.01171875],
                     dtype=np.float32)
    path = dump({"w": value}, tmp_path / "cache", encode_format="f32-to-bf16")
    load_both(path)
    same_tensor(KILN.get("w"), TVM.get("w"), "w")


def test_per_name_encode_formats(tmp_path):
    rng = np.random.default_rng(1)
    params = {"raw.w": rng.standard_normal((5, 5)).astype("float32"),
              "bf.w": rng.standard_normal((5, 5)).astype("float32"),
              "half": rng.standard_normal((3,)).astype("float16")}
    path = dump(params, tmp_path / "cache", encode_format={"raw.w": "raw", "*": "f32-to-bf16"})
    load_both(path)
    compare_all(path)
    assert host(KILN.get("raw.w")).tobytes() == params["raw.w"].tobytes()
    assert host(KILN.get("bf.w")).tobytes() != params["bf.w"].tobytes()


@pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")
def test_the_b16_metadata_loads_as_bfloat16(tmp_path):
    """The writer also lists f32-to-bf16 records as raw bfloat16 (tensor-cache-b16.json); Kiln
    loads a metadata file named directly (TVM's builtin takes folders only), and its bfloat16
    bits are the upper halves of the float32 tensors both runtimes decode."""
    value = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    path = dump({"w": value}, tmp_path / "cache", encode_format="f32-to-bf16")
    TVM.load(path, CPU, 0)
    KILN.load(os.path.join(path, "tensor-cache-b16.json"), CPU, 0)
    k = KILN.get("w")
    assert k.dtype == "bfloat16"
    assert (host(k).view(np.uint16).astype(np.uint32) << 16).tobytes() == host(
        TVM.get("w")).tobytes()


def test_the_older_ndarray_cache_json(tmp_path):
    """Caches written before the rename name their metadata ndarray-cache.json."""
    params = sample_params(np.random.default_rng(3))
    path = dump(params, tmp_path / "cache", shard_cap_mb=1)
    TVM.load(path, CPU, 0)  # TVM 0.27 reads tensor-cache.json only
    names = cache_names(path)
    os.rename(os.path.join(path, "tensor-cache.json"), os.path.join(path, "ndarray-cache.json"))
    KILN.load(path, CPU, 0)
    for name in names:
        same_tensor(KILN.get(name), TVM.get(name), name)


def test_param_arrays(tmp_path):
    rng = np.random.default_rng(4)
    params = {f"param_{i}": rng.standard_normal((i + 1, 3)).astype("float32") for i in range(5)}
    params["other"] = np.arange(4, dtype=np.int32)
    path = dump(params, tmp_path / "cache", encode_format="raw")
    load_both(path)

    def same_arrays(k, t):
        assert len(k) == len(t)
        for i, (a, b) in enumerate(zip(k, t)):
            same_tensor(a, b, f"item {i}")

    same_arrays(KILN.param_array_from_cache("param", 5), TVM.param_array_from_cache("param", 5))
    same_arrays(KILN.param_array_from_cache("param", -1), TVM.param_array_from_cache("param", -1))
    same_arrays(KILN.param_array_from_cache("param", 2), TVM.param_array_from_cache("param", 2))
    same_arrays(KILN.param_array_from_cache("nope", -1), TVM.param_array_from_cache("nope", -1))
    names = ["other", "param_3", "param_0", "param_3"]
    same_arrays(KILN.param_array_from_cache_by_name(names),
                TVM.param_array_from_cache_by_name(names))
    same_arrays(KILN.param_array_from_cache_by_name_unpacked(*names),
                TVM.param_array_from_cache_by_name_unpacked(*names))
    same_arrays(KILN.param_array_from_cache_by_name([]), TVM.param_array_from_cache_by_name([]))

    # Missing names: both refuse, Kiln naming the builtin and the name.
    with pytest.raises(Exception):
        TVM.param_array_from_cache("param", 6)
    with pytest.raises(kiln.NotFoundError, match=r"param_array_from_cache: .*'param_5'"):
        KILN.param_array_from_cache("param", 6)
    with pytest.raises(Exception):
        TVM.param_array_from_cache_by_name(["param_0", "missing"])
    with pytest.raises(kiln.NotFoundError, match="'missing'"):
        KILN.param_array_from_cache_by_name(["param_0", "missing"])
    with pytest.raises(Exception):
        TVM.param_array_from_cache_by_name_unpacked("param_0", 3)
    with pytest.raises(TypeError, match="argument 1"):
        KILN.param_array_from_cache_by_name_unpacked("param_0", 3)


def test_update_get_remove_clear():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(3, dtype=np.int8)
    for rt, make in ((KILN, kiln.tensor), (TVM, tvm.runtime.tensor)):
        rt.update("a", make(a))
        rt.update("b", make(b), False)
    same_tensor(KILN.get("a"), TVM.get("a"), "a")
    same_tensor(KILN.get("b"), TVM.get("b"), "b")
    with pytest.raises(Exception):
        TVM.update("a", tvm.runtime.tensor(b))
    with pytest.raises(ValueError, match=r"tensor_cache.update: .*'a'.*override"):
        KILN.update("a", kiln.tensor(b))
    KILN.update("a", kiln.tensor(b), True)
    TVM.update("a", tvm.runtime.tensor(b), True)
    same_tensor(KILN.get("a"), TVM.get("a"), "a")
    for rt in (KILN, TVM):
        rt.remove("a")
        rt.remove("a")  # absent: nothing to do, as in TVM
        assert rt.get("a") is None
        assert rt.get("b") is not None
        rt.clear()
        assert rt.get("b") is None


def test_a_broken_cache_loads_nothing(tmp_path):
    """A truncated shard: both runtimes refuse; Kiln names the file and the first record past
    the end, and its cache keeps what it held (TVM's keeps the shards before the broken one)."""
    rng = np.random.default_rng(5)
    good = dump({"keep": np.arange(3, dtype=np.float32)}, tmp_path / "good", encode_format="raw")
    params = {"big0": rng.standard_normal((200, 1024)).astype("float32"),
              "big1": rng.standard_normal((200, 1024)).astype("float32"),
              "keep": np.zeros(3, dtype=np.float32)}
    bad = dump(params, tmp_path / "bad", shard_cap_mb=1, encode_format="raw")
    with open(os.path.join(bad, "tensor-cache.json")) as f:
        shards = json.load(f)["records"]
    last = shards[-1]
    assert len(shards) >= 2
    shard_path = os.path.join(bad, last["dataPath"])
    os.truncate(shard_path, last["nbytes"] - 1)
    KILN.load(good, CPU, 0)
    with pytest.raises(ValueError, match=rf"{last['dataPath']}.*truncated.*"
                                         rf"'{last['records'][-1]['name']}'"):
        KILN.load(bad, CPU, 0)
    with pytest.raises(Exception):
        TVM.load(bad, CPU, 0)
    assert host(KILN.get("keep")).tolist() == [0, 1, 2]
    assert KILN.get("big0") is None
    assert KILN.get("big1") is None

    os.remove(shard_path)
    with pytest.raises(RuntimeError, match=rf"{last['dataPath']}.* is missing"):
        KILN.load(bad, CPU, 0)
    shutil.rmtree(bad)
    with pytest.raises(kiln.NotFoundError, match="no such folder"):
        KILN.load(bad, CPU, 0)


@pytest.mark.skipif(ml_dtypes is None or not hasattr(ml_dtypes, "float8_e4m3fn"),
                    reason="ml_dtypes with float8_e4m3fn is not installed")
def test_a_dtype_kiln_lacks_is_refused_by_name(tmp_path):
    """float8 weights load in TVM; Kiln has no float8 dtype and says so, naming the record."""
    params = {"ok": np.ones(2, dtype=np.float32),
              "f8": np.array([1.5, -2], dtype=ml_dtypes.float8_e4m3fn)}
    path = dump(params, tmp_path / "cache", encode_format="raw")
    TVM.load(path, CPU, 0)
    assert TVM.get("f8").dtype == "float8_e4m3fn"
    with pytest.raises(ValueError, match=r"tensor-cache.json, shard 0 .*record 1 'f8'.*"
                                         r"dtype 'float8_e4m3fn'"):
        KILN.load(path, CPU, 0)
    assert KILN.get("ok") is None


def opencl_device():
    for d in kiln.devices():
        if str(d).startswith("opencl"):
            return d
    return None


def test_loads_onto_opencl(tmp_path):
    """The same cache on Kiln's OpenCL device (PoCL here) equals TVM's CPU load bit for bit."""
    if opencl_device() is None:
        pytest.skip("Kiln has no OpenCL device (the opencl plugin is not loaded or finds none)")
    params = sample_params(np.random.default_rng(6))
    path = dump(params, tmp_path / "cache", shard_cap_mb=1)
    KILN.load(path, OPENCL, 0)
    TVM.load(path, CPU, 0)
    for name in cache_names(path):
        k = KILN.get(name)
        assert str(k.device).startswith("opencl"), (name, k.device)
        same_tensor(k, TVM.get(name), name)
    arr = KILN.param_array_from_cache_by_name(["embed.weight", "pos"])
    assert all(str(t.device).startswith("opencl") for t in arr)
