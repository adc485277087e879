# SPDX-License-Identifier: Apache-2.0
"""numpy arrays as arguments of kernel calls (issue 30, item 4). A kernel's function (a kernel
library's, a TVM library's, a plugin's) borrows its arguments for the call, so an exact
numpy.ndarray is lent to it through the buffer protocol: no DLPack capsule and no Tensor per
argument. These tests check that a kernel sees what kiln.from_dlpack would give it (memory,
dtype, shape), that everything the lent path cannot take goes the DLPack way with the same
result or error, that buffers are released after every call, also failed ones, and that a
function that may keep its argument (a Python callable, a host function) still gets a tensor
that keeps the array alive.

Other DLPack producers' host memory (a TVM tensor, an ndarray subclass, any object with
__dlpack__) is lent to a kernel the same way, from its capsule, with no Tensor; what cannot be
lent keeps the Tensor path and its errors.

The example kernels are the observers: relu writes into its output and names the dtype and
shape it was given in its errors; touch3 reads only the ndim of three tensors."""

import gc
import sys
import weakref

import numpy as np
import pytest

import kiln
from conftest import example_kernel, tvm_fixture

# Every numpy element type Kiln has, by name as the SDK's dtype_name prints it; numpy's aliases
# of them map to the same names.
KILN_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64"]
ALIASES = {np.intc: "int32", np.uintc: "uint32", np.longlong: "int64", np.ulonglong: "uint64",
           np.int_: "int64", np.uint: "uint64", np.half: "float16", np.single: "float32",
           np.double: "float64", np.bool_: "bool", np.byte: "int8", np.ubyte: "uint8"}


@pytest.fixture(scope="module")
def relu_module():
    return kiln.load_module(example_kernel("relu"))


@pytest.fixture(scope="module")
def relu(relu_module):
    return relu_module["relu"]


@pytest.fixture(scope="module")
def touch3():
    return kiln.load_module(example_kernel("calls"))["touch3"]


def seen_dtype(relu, array):
    """The dtype relu saw for `array` (its error names it unless it is float32)."""
    try:
        relu(array, np.zeros(array.size, np.float32))
    except ValueError as e:
        message = str(e)
        assert "in has dtype " in message, message
        return message.split("in has dtype ")[1].split(",")[0]
    return "float32"


def error_of(call, *args):
    with pytest.raises(Exception) as info:
        call(*args)
    return type(info.value), str(info.value)


# ---- what a kernel sees --------------------------------------------------------------------


def test_a_kernel_writes_into_the_callers_array():
    relu = kiln.load_module(example_kernel("relu"))["relu"]
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    out = np.full(4, 9.0, np.float32)
    relu(x, out)
    assert out.tolist() == [0.0, 2.0, 0.0, 4.0]
    relu(x, x)  # in place: the same memory twice
    assert x.tolist() == [0.0, 2.0, 0.0, 4.0]


def test_module_call_lends_arrays_too(relu_module):
    x, out = np.array([-1.0, 5.0], np.float32), np.zeros(2, np.float32)
    relu_module(x, out)  # the module's entry function
    assert out.tolist() == [0.0, 5.0]


@pytest.mark.parametrize("name", KILN_DTYPES)
def test_every_kiln_dtype_arrives_as_itself(relu, name):
    assert seen_dtype(relu, np.zeros(3, name)) == name
    assert kiln.from_dlpack(np.zeros(3, name)).dtype == name  # what the DLPack path gives


@pytest.mark.parametrize("alias", list(ALIASES), ids=lambda t: t.__name__)
def test_numpy_aliases_arrive_as_their_kiln_dtype(relu, alias):
    assert seen_dtype(relu, np.zeros(2, alias)) == ALIASES[alias]


def test_unaligned_arrays_are_lent(touch3):
    raw = bytearray(4 * 3 + 1)
    a = np.frombuffer(raw, np.float32, count=3, offset=1)
    assert not a.flags.aligned and a.flags.writeable
    touch3(a, a, a)  # reads only ndim: no unaligned loads in the kernel


def test_shapes_arrive_as_they_are(relu):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"in has 6 elements \[2, 3\] but out has 4 \[4\]"):
        relu(x, np.zeros(4, np.float32))
    out = np.zeros((3, 2), np.float32)
    relu(np.arange(-3, 3, dtype=np.float32).reshape(2, 3), out)  # shapes may differ, sizes not
    assert out.ravel().tolist() == [0, 0, 0, 0, 1, 2]


def test_zero_dimensional_arrays(relu):
    out = np.zeros((), np.float32)
    relu(np.array(3.5, np.float32), out)
    assert out.shape == () and float(out) == 3.5
    with pytest.raises(ValueError, match=r"in has 1 elements \[\] but out has 2 \[2\]"):
        relu(np.array(1.0, np.float32), np.zeros(2, np.float32))


@pytest.mark.parametrize("shape", [(0,), (2, 0, 3), (0, 4)])
def test_zero_size_arrays(relu, shape):
    relu(np.zeros(shape, np.float32), np.zeros(0, np.float32))


def test_size_one_dimensions_may_have_any_stride(relu):
    base = np.arange(8, dtype=np.float32).reshape(4, 2)
    corner = base[1:2, 0:1]  # shape (1, 1) with the parent's strides: compact all the same
    out = np.zeros((1, 1), np.float32)
    relu(corner, out)
    assert out[0, 0] == 2.0
    row = base[2:3]  # shape (1, 2)
    out = np.zeros(2, np.float32)
    relu(row, out)
    assert out.tolist() == [4.0, 5.0]


def test_fortran_order(relu):
    f = np.asfortranarray(np.arange(-3, 3, dtype=np.float32).reshape(2, 3))
    with pytest.raises(ValueError, match=r"non-contiguous array \(shape \(2, 3\), strides "
                                         r"\(1, 2\).*numpy.ascontiguousarray"):
        relu(f, np.zeros(6, np.float32))
    row = np.asfortranarray(np.array([[-1.0, 2.0]], np.float32))  # C- and F-contiguous at once
    out = np.zeros(2, np.float32)
    relu(row, out)
    assert out.tolist() == [0.0, 2.0]


def test_non_contiguous_arrays_get_the_dlpack_paths_error(relu):
    x = np.zeros(8, np.float32)[::2]
    expected = error_of(kiln.from_dlpack, x)
    assert error_of(relu, x, np.zeros(4, np.float32)) == expected
    assert expected[0] is ValueError and "numpy.ascontiguousarray" in expected[1]


def test_read_only_arrays_are_refused_as_by_from_dlpack(relu):
    # Kernels may write any argument, and nothing says which ones they write: a read-only array
    # is refused even as an input, as kiln.from_dlpack refuses it. (TVM's tvm-ffi refuses it
    # too, with numpy's BufferError from __dlpack__.)
    x = np.ones(4, np.float32)
    x.flags.writeable = False
    expected = error_of(kiln.from_dlpack, x)
    assert expected[0] is ValueError and "read-only" in expected[1]
    assert error_of(relu, x, np.zeros(4, np.float32)) == expected
    assert error_of(relu, np.zeros(4, np.float32), x) == expected


@pytest.mark.parametrize("dtype", [">f4", "longdouble", "complex64", "datetime64[s]"])
def test_other_element_types_go_the_dlpack_way(relu, dtype):
    a = np.zeros(4, dtype)
    try:
        kiln.from_dlpack(a)
    except Exception as e:  # noqa: BLE001  (the DLPack path's own verdict is what counts)
        assert error_of(relu, a, np.zeros(4, np.float32)) == (type(e), str(e))
    else:
        assert "in has dtype" in error_of(relu, a, np.zeros(4, np.float32))[1]


def test_bfloat16_arrays_keep_their_dtype(relu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert seen_dtype(relu, np.zeros(2, ml_dtypes.bfloat16)) == "bfloat16"


def test_subclasses_go_the_dlpack_way(relu):
    calls = []

    class Tracked(np.ndarray):
        def __dlpack__(self, *args, **kwargs):
            calls.append(kwargs)
            return super().__dlpack__(*args, **kwargs)

    x = np.array([-1.0, 1.0], np.float32).view(Tracked)
    out = np.zeros(2, np.float32)
    relu(x, out)
    assert out.tolist() == [0.0, 1.0] and len(calls) == 1


def test_tvm_library_functions_take_arrays():
    noop = kiln.load_module(tvm_fixture("noop.so"))["noop"]
    noop(np.zeros(1, np.float32))
    with pytest.raises(TypeError, match="dtype"):  # TVM's own argument checks see float64
        noop(np.zeros(1, np.float64))
    with pytest.raises(ValueError, match="ndim"):
        noop(np.zeros((), np.float32))


# ---- buffers are released ------------------------------------------------------------------


def test_buffers_are_released_after_calls_that_succeed_and_fail(touch3):
    a, b, c = (np.zeros(4, np.float32) for _ in range(3))
    before = [sys.getrefcount(x) for x in (a, b, c)]
    for _ in range(1000):
        touch3(a, b, c)
    with pytest.raises(TypeError, match="argument 2"):
        touch3(a, b, object())  # fails while converting, after two arrays were lent
    with pytest.raises(ValueError, match="read-only"):
        touch3(a, b, np.frombuffer(b"\0" * 16, np.float32))
    with pytest.raises(TypeError):
        touch3(a, b)  # the kernel refuses the call
    assert [sys.getrefcount(x) for x in (a, b, c)] == before
    a.resize(8)  # numpy refuses while anyone holds a reference or a buffer
    assert a.shape == (8,)


@pytest.mark.parametrize("count", [9, 1000])
def test_many_array_arguments(touch3, count):
    arrays = [np.zeros(i % 5 + 1, np.float32) for i in range(count)]
    before = [sys.getrefcount(x) for x in arrays]
    with pytest.raises(TypeError):
        touch3(*arrays)  # takes three; every array was converted before the call
    assert [sys.getrefcount(x) for x in arrays] == before

    seen = []
    kiln.register_func("test.numpy_args.count", lambda *args: seen.append(args) or len(args),
                       override=True)
    assert kiln.get_global_func("test.numpy_args.count")(*arrays) == count
    assert [t.shape for t in seen[0]] == [x.shape for x in arrays]
    assert all(t.data_ptr == x.ctypes.data for t, x in zip(seen[0], arrays))


# ---- other DLPack producers ----------------------------------------------------------------


class Producer:
    """A DLPack producer that is not a numpy array (as a TVM or PyTorch tensor is): hands out
    `array`'s memory and records how it was asked."""

    def __init__(self, array, old_style=False):
        self.array = array
        self.asked = []
        self.old_style = old_style  # a producer from before DLPack 1.0: no max_version

    def __dlpack__(self, **kwargs):
        if self.old_style and kwargs:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.asked.append(kwargs)
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.mark.parametrize("old_style", [False, True])
def test_a_producers_host_memory_is_lent_to_kernels(relu, old_style):
    """Host memory of another producer goes to the kernel in place, asked for once per call
    (DLPack 1.0 first), and is given back after the call: the capsule's reference to the array
    is gone, also after a call the kernel refused."""
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    out = np.zeros(3, np.float32)
    px, pout = Producer(x, old_style), Producer(out, old_style)
    before = [sys.getrefcount(x), sys.getrefcount(out)]
    for _ in range(100):
        relu(px, pout)
    assert out.tolist() == [0.0, 2.0, 0.0]
    assert len(px.asked) == 100 and len(pout.asked) == 100
    assert px.asked[0] == ({} if old_style else {"max_version": (1, 0)})
    with pytest.raises(ValueError, match="out has"):
        relu(px, Producer(np.zeros(4, np.float32)))  # lent, then refused by the kernel
    assert [sys.getrefcount(x), sys.getrefcount(out)] == before


def test_a_producers_memory_that_cannot_be_lent_gets_from_dlpacks_error(relu):
    out = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match="read-only"):
        relu(Producer(np.frombuffer(b"\0" * 8, np.float32)), out)
    with pytest.raises(ValueError, match="non-contiguous"):
        relu(Producer(np.zeros(4, np.float32)[::2]), out)
    with pytest.raises(ValueError, match="non-contiguous"):
        relu(np.zeros(2, np.float32), Producer(np.zeros(4, np.float32)[::2]))


@pytest.mark.parametrize("error", [RuntimeError("the producer refuses"), KeyboardInterrupt()])
def test_what_a_producers_dlpack_raises_reaches_the_caller(relu, error):
    class Refusing(Producer):
        def __dlpack__(self, **kwargs):
            self.asked.append(kwargs)
            raise error

    x = np.zeros(2, np.float32)
    before = sys.getrefcount(x)
    refusing = Refusing(np.zeros(2, np.float32))
    with pytest.raises(type(error)):
        relu(Producer(x), refusing)  # after x was lent
    assert len(refusing.asked) == 1  # raised at once, not asked again by a fallback
    assert sys.getrefcount(x) == before


def test_tvm_ffi_tensors_are_lent_to_kernels(relu):
    tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed here")
    x = tvm_ffi.from_dlpack(np.array([-1.0, 2.0], np.float32))
    out_array = np.zeros(2, np.float32)
    out = tvm_ffi.from_dlpack(out_array)  # shares out_array's memory
    relu(x, out)
    assert out_array.tolist() == [0.0, 2.0]


def test_a_python_callable_gets_a_producers_memory_as_an_owning_tensor():
    kept = []
    kiln.register_func("test.numpy_args.keep_producer", kept.append, override=True)
    a = np.arange(3, dtype=np.float32)
    kiln.get_global_func("test.numpy_args.keep_producer")(Producer(a))
    assert kept[0].data_ptr == a.ctypes.data and kept[0].numpy().tolist() == [0.0, 1.0, 2.0]


# ---- functions that may keep their arguments ----------------------------------------------


def test_a_python_callable_that_keeps_its_argument_keeps_the_array_alive():
    kept = []
    kiln.register_func("test.numpy_args.keep", kept.append, override=True)
    keep = kiln.get_global_func("test.numpy_args.keep")
    a = np.arange(4, dtype=np.float32)
    alive = weakref.ref(a)
    address = a.ctypes.data
    keep(a)
    del a
    gc.collect()
    assert alive() is not None  # the kept tensor owns a reference to the array
    assert kept[0].data_ptr == address and kept[0].numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    kept.clear()
    gc.collect()
    assert alive() is None


def test_host_functions_get_owning_tensors():
    # vm.builtin.reshape (a host function) returns a view of its argument's memory: it must
    # keep the array alive after the call.
    reshape = kiln.get_global_func("vm.builtin.reshape")
    a = np.arange(6, dtype=np.float32)
    alive = weakref.ref(a)
    view = reshape(a, kiln.ShapeTuple((2, 3)))
    del a
    gc.collect()
    assert alive() is not None
    assert view.shape == (2, 3) and view.numpy().ravel().tolist() == [0, 1, 2, 3, 4, 5]
    del view
    gc.collect()
    assert alive() is None
