# SPDX-License-Identifier: Apache-2.0
"""kiln.Tensor as numpy and TVM users expect it (issue 30, item 3): zero-size arrays in, out and as
kernel arguments; bfloat16 through ml_dtypes; numpy's __array__ and the buffer protocol on host
tensors (device tensors refuse them, pointing at .numpy()); a numpy-like repr; kiln.empty and
kiln.tensor taking numpy dtypes, int shapes and device names; ValueErrors naming a bad dtype or
device, with nothing from nanobind on stderr."""

import re
import sys


import numpy as np
import pytest

import kiln
from conftest import example_kernel

QUICK = kiln.testing.EvaluatorConfig(number=1, repeat=1, min_repeat_ms=0)


@pytest.fixture(scope="module")
def relu():
    return kiln.load_module(example_kernel("relu"))


@pytest.fixture(scope="module")
def session():
    """A session whose devices are not host memory (remote0:cpu:0), like a GPU's."""
    with kiln.rpc.LocalSession() as s:
        yield s


# ---- zero-size arrays ------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 4)])
def test_zero_size_arrays_go_in_and_come_out(shape):
    a = np.zeros(shape, np.float32)  # numpy gives zero strides: not a reason to refuse it
    shared = kiln.from_dlpack(a)
    assert shared.shape == shape and shared.size == 0 and shared.is_contiguous
    for t in (shared, kiln.tensor(a), kiln.empty(shape, "float32")):
        assert t.numpy().shape == shape and t.numpy().dtype == np.float32
        assert np.from_dlpack(t).shape == shape
        assert np.asarray(t).shape == shape


def test_zero_size_arrays_are_kernel_arguments(relu):
    relu["relu"](np.zeros(0, np.float32), np.zeros(0, np.float32))
    out = kiln.empty(0)
    relu["relu"](kiln.empty(0), out)
    assert out.numpy().shape == (0,)
    outputs, _ = kiln.testing.local_run(
        relu, "cpu", [np.zeros(0, np.float32), np.zeros(0, np.float32)], evaluator_config=QUICK)
    assert [o.shape for o in outputs] == [(0,), (0,)]


def test_zero_size_tensors_on_a_device(session):
    t = kiln.tensor(np.zeros((3, 0), np.int32), session.cpu(0))
    assert t.numpy().shape == (3, 0)
    assert kiln.tensor(t).numpy().shape == (3, 0)  # back to the host


# ---- bfloat16 --------------------------------------------------------------------------------


def test_bfloat16_round_trips_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -2.0, 0.25, 3.0e38], ml_dtypes.bfloat16)
    t = kiln.tensor(a)
    assert t.dtype == "bfloat16" and t.nbytes == 8
    back = t.numpy()
    assert back.dtype == ml_dtypes.bfloat16 and np.array_equal(back, a)
    assert np.array_equal(np.asarray(t), a)
    shared = kiln.from_dlpack(a)  # shares the array's memory, as for any other dtype
    assert shared.dtype == "bfloat16" and shared.data_ptr == a.ctypes.data
    assert kiln.empty(2, ml_dtypes.bfloat16).dtype == "bfloat16"
    assert kiln.empty(2, np.dtype(ml_dtypes.bfloat16)).dtype == "bfloat16"
    assert repr(t) == "kiln.Tensor([1.5, -2, 0.25, 3.00406e+38], dtype=bfloat16, device=cpu:0)"


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch):
    t = kiln.empty(2, "bfloat16")
    try:
        import ml_dtypes

        t.copyfrom(np.array([1.0, -2.0], ml_dtypes.bfloat16))
        known = True
    except ImportError:
        known = False
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"bfloat16.*pip install ml_dtypes"):
        t.numpy()
    with pytest.raises(ImportError, match="ml_dtypes"):
        np.asarray(t)
    # repr still shows the values (widened to float32 for display).
    assert repr(t).endswith("dtype=bfloat16, device=cpu:0)")
    if known:
        assert repr(t) == "kiln.Tensor([ 1., -2.], dtype=bfloat16, device=cpu:0)"


def test_lanes_become_a_last_dimension():
    t = kiln.empty(3, "float32x4")
    assert t.numpy().shape == (3, 4) and t.numpy().dtype == np.float32


# ---- numpy's protocols -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64", "float16",
                                   "float32", "float64"])
def test_host_tensors_are_arrays_to_numpy_sharing_memory(dtype):
    a = (np.arange(6) % 2 == 0) if dtype == "bool" else np.arange(6).astype(dtype)
    t = kiln.tensor(a.reshape(2, 3))
    view = np.asarray(t)
    assert view.dtype == a.dtype and view.shape == (2, 3)
    assert view.ctypes.data == t.data_ptr  # shared: no copy
    assert np.array_equal(view.ravel(), a)
    m = memoryview(t)
    assert m.shape == (2, 3) and m.itemsize == a.itemsize and not m.readonly
    copy = np.array(t)
    assert copy.ctypes.data != t.data_ptr and np.array_equal(copy, view)


def test_array_takes_numpy_2s_dtype_and_copy():
    t = kiln.tensor(np.arange(4, dtype=np.float32))
    np.asarray(t)[0] = 7.0
    assert t.numpy()[0] == 7.0
    assert t.__array__().ctypes.data == t.data_ptr
    assert t.__array__(copy=True).ctypes.data != t.data_ptr
    as_f64 = t.__array__(np.float64)
    assert as_f64.dtype == np.float64 and as_f64.tolist() == [7.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="copy=False"):
        t.__array__(np.float64, copy=False)
    assert np.asarray(t, dtype=np.int64).tolist() == [7, 1, 2, 3]


def test_device_tensors_refuse_array_and_buffer_pointing_at_numpy(session):
    t = kiln.tensor(np.arange(3, dtype=np.float32), session.cpu(0))
    with pytest.raises(TypeError, match=r"remote[0-9]+:cpu:0, not in host memory; call \.numpy\(\)"):
        np.asarray(t)
    with pytest.raises(TypeError, match=r"call \.numpy\(\)"):
        t.__array__()
    with pytest.raises(TypeError, match=r"call \.numpy\(\)"):
        memoryview(t)
    assert t.numpy().tolist() == [0.0, 1.0, 2.0]


# ---- repr ------------------------------------------------------------------------------------


def test_repr_shows_values_as_numpy_does():
    assert (repr(kiln.tensor(np.arange(3, dtype=np.float32)))
            == "kiln.Tensor([0., 1., 2.], dtype=float32, device=cpu:0)")
    assert (repr(kiln.tensor(np.arange(6, dtype=np.int32).reshape(2, 3)))
            == "kiln.Tensor([[0, 1, 2],\n             [3, 4, 5]], dtype=int32, device=cpu:0)")
    assert repr(kiln.tensor(np.array(5, np.int64))) == "kiln.Tensor(5, dtype=int64, device=cpu:0)"
    assert (repr(kiln.empty((2, 0)))
            == "kiln.Tensor([], shape=(2, 0), dtype=float32, device=cpu:0)")
    big = repr(kiln.tensor(np.arange(100000, dtype=np.float64)))
    assert "..." in big and len(big) < 200  # truncated by numpy's print options


def test_repr_of_device_tensors_copies_only_small_ones(session):
    small = kiln.tensor(np.arange(3, dtype=np.float32), session.cpu(0))
    # remote<N>: the session's index in this process (earlier tests open sessions too).
    assert re.fullmatch(r"kiln\.Tensor\(\[0\., 1\., 2\.\], dtype=float32, device=remote[0-9]+:cpu:0\)",
                        repr(small)), repr(small)
    big = kiln.empty((1 << 19,), "float32", session.cpu(0))  # 2 MiB: over the 1 MiB limit
    assert re.fullmatch(r"kiln\.Tensor\(<2097152 bytes on the device, not copied for display: "
                        r"call \.numpy\(\)>, shape=\(524288,\), dtype=float32, "
                        r"device=remote[0-9]+:cpu:0\)", repr(big)), repr(big)


# ---- kiln.empty and kiln.tensor: dtypes, shapes, devices --------------------------------------


@pytest.mark.parametrize("dtype", ["float32", np.float32, np.dtype("float32"),
                                   kiln.DataType("float32")])
@pytest.mark.parametrize("device", [None, "cpu", "cpu:0", "llvm", kiln.cpu(0)])
def test_empty_takes_numpy_dtypes_int_shapes_and_device_names(dtype, device):
    t = kiln.empty(4, dtype, device)
    assert t.shape == (4,) and t.dtype == "float32" and t.device == kiln.cpu(0)
    assert kiln.empty((2, np.int64(3)), dtype=dtype, device=device).shape == (2, 3)


def test_numpy_types_map_to_kiln_dtypes():
    for np_type, name in [(np.int8, "int8"), (np.uint64, "uint64"), (np.float16, "float16"),
                          (np.bool_, "bool"), (float, "float64"), (np.dtype("<i4"), "int32")]:
        assert kiln.empty(1, np_type).dtype == name


def test_tensor_and_copies_take_device_names(session):
    t = kiln.tensor([1.0, 2.0], "cpu")
    assert t.device == kiln.cpu(0) and t.dtype == "float64"
    assert t.to("cpu:0").numpy().tolist() == [1.0, 2.0]
    assert t.copyto("cpu").numpy().tolist() == [1.0, 2.0]
    remote = kiln.tensor(t, session.cpu(0))
    assert remote.device == session.cpu(0) and remote.numpy().tolist() == [1.0, 2.0]


def test_bad_dtypes_and_devices_are_value_errors_naming_them(capfd):
    with pytest.raises(ValueError, match=r"unknown dtype 'floaty'.*float32"):
        kiln.empty((4,), "floaty")
    with pytest.raises(ValueError, match=r"numpy dtype 'complex64' has no Kiln equivalent.*int8"):
        kiln.empty(4, np.complex64)
    with pytest.raises(ValueError, match="byte order"):
        kiln.empty(4, np.dtype(">f4"))
    with pytest.raises(ValueError, match=r"unknown device type 'warp' in 'warp:1'.*known: cpu"):
        kiln.empty(4, "float32", "warp:1")
    with pytest.raises(ValueError, match="unknown device type 'warp'"):
        kiln.tensor([1.0], "warp")
    with pytest.raises(ValueError, match="unknown device type 'warp'"):
        kiln.empty(1).to("warp")
    for call, message in [(lambda: kiln.empty(4, ["float32"]), "dtype must be"),
                          (lambda: kiln.empty(4, None), "dtype must be"),
                          (lambda: kiln.empty(4, "float32", 3), "device must be"),
                          (lambda: kiln.empty("four"), "shape must be"),
                          (lambda: kiln.empty((4, 2.5)), "each extent must be an int")]:
        with pytest.raises(TypeError, match=message) as raised:
            call()
        assert "incompatible function arguments" not in str(raised.value)
    with pytest.raises(ValueError, match="negative dimension"):
        kiln.empty(-1)
    err = capfd.readouterr().err
    assert "nanobind" not in err and "incompatible" not in err, err
