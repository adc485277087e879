# SPDX-License-Identifier: Apache-2.0
"""kiln.tensor() copies a read-only numpy array (issue 35, item 8). It used to hand the array to
kiln.from_dlpack first, which refuses to share read-only memory (kernels may write to what it
shares), so kiln.tensor(np.frombuffer(data, "float32")) raised ValueError although it only reads
the array. kiln.from_dlpack itself still refuses (tests/python/test_numpy_args.py)."""

import numpy as np
import pytest

import kiln


def read_only_arrays():
    """Read-only arrays as numpy makes them: over bytes, marked so, broadcast (strides 0), 0-d,
    and a read-only view of part of an array (non-contiguous as well)."""
    marked = np.arange(12, dtype="int32").reshape(3, 4)
    marked.flags.writeable = False
    scalar = np.array(2.5, dtype="float64")
    scalar.flags.writeable = False
    strided = np.arange(24, dtype="float32").reshape(4, 6)[::2, 1::2]
    strided.flags.writeable = False
    return {
        "frombuffer": np.frombuffer(np.arange(8, dtype="float32").tobytes(), "float32"),
        "marked": marked,
        "broadcast": np.broadcast_to(np.arange(4, dtype="float16"), (3, 4)),
        "0-d": scalar,
        "strided": strided,
    }


ARRAYS = read_only_arrays()


@pytest.mark.parametrize("name", list(ARRAYS))
def test_tensor_copies_a_read_only_array(name):
    array = ARRAYS[name]
    assert not array.flags.writeable
    before = array.copy()
    t = kiln.tensor(array)
    assert t.shape == array.shape and t.dtype == str(array.dtype)
    np.testing.assert_array_equal(t.numpy(), array)
    # A copy of its own: writing the tensor leaves the array as it was.
    shared = np.from_dlpack(t)
    assert shared.flags.writeable
    shared[...] = 7
    np.testing.assert_array_equal(array, before)
    np.testing.assert_array_equal(t.numpy(), np.full(array.shape, 7, array.dtype))


def test_tensor_copies_a_read_only_array_to_a_named_device():
    array = ARRAYS["frombuffer"]
    t = kiln.tensor(array, "cpu")
    assert str(t.device) == str(kiln.cpu(0))
    np.testing.assert_array_equal(t.numpy(), array)


def test_tensor_copies_a_file_mapped_read_only(tmp_path):
    # np.load(..., mmap_mode="r"): a large input read from disk without a copy of its own.
    path = tmp_path / "x.npy"
    np.save(path, np.arange(-3, 5, dtype="float32"))
    mapped = np.load(path, mmap_mode="r")
    assert not mapped.flags.writeable
    t = kiln.tensor(mapped)
    np.testing.assert_array_equal(t.numpy(), np.arange(-3, 5, dtype="float32"))


def test_from_dlpack_still_refuses_to_share_read_only_memory():
    with pytest.raises(ValueError, match="read-only"):
        kiln.from_dlpack(ARRAYS["marked"])
