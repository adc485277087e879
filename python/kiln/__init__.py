# SPDX-License-Identifier: Apache-2.0
"""Kiln: run compiled kernel modules on any device, time them honestly, profile them.

The APIs follow TVM's (SPEC.md), on Kiln's core and plugins::

    import numpy as np, kiln
    mod = kiln.load_module("vadd.so")          # a TVM export_library output, or Kiln's own
    a, b = np.ones(1024, "float32"), np.ones(1024, "float32")
    c = kiln.empty((1024,), "float32")
    mod["vadd"](a, b, c)                       # numpy arrays are shared through DLPack
    print(mod.time_evaluator("vadd", kiln.cpu(0), number=100)(a, b, c))

Submodules: kiln.testing (local_run, rpc_run), kiln.vm (VirtualMachine), kiln.profiling
(Report, profile_function), kiln.rpc (connect, connect_tracker). docs/python.md has the guide.
"""

import atexit

from ._kiln import (
    AbiError,
    BenchmarkResult,
    DataType,
    Device,
    Function,
    KilnError,
    Module,
    NotFoundError,
    Object,
    OutOfMemoryError,
    RPCError,
    WorkerError,
    RPCSessionTimeoutError,
    Tensor,
    TimeEvaluator,
    UnavailableError,
    UnimplementedError,
    backends,
    device,
    devices,
    empty,
    from_dlpack,
    get_global_func,
    list_global_func_names,
    load_module,
    plugins,
    register_func,
    time_evaluator,
)
from . import _kiln

__version__ = _kiln.__version__  # as `kiln --version` and the package metadata say


class ShapeTuple(tuple):
    """A shape passed to Kiln as a shape value (TVM's ShapeTuple); shapes come back as these."""

    def __repr__(self):
        return "ShapeTuple(" + tuple.__repr__(tuple(self)) + ")"


_kiln._set_shape_tuple_type(ShapeTuple)
# Python callables registered as global functions hold their modules; drop them before the
# interpreter goes.
atexit.register(_kiln._unregister_python_functions)


def cpu(index=0):
    """The host CPU device `index`."""
    return device("cpu", index)


def cuda(index=0):
    """CUDA device `index`."""
    return device("cuda", index)


def opencl(index=0):
    """OpenCL device `index`."""
    return device("opencl", index)


def rocm(index=0):
    """ROCm (HIP) device `index`."""
    return device("rocm", index)


def tensor(array, device=None):
    """A new kiln.Tensor on `device` (a kiln.Device or a name such as "cuda:1"; default cpu:0)
    holding a copy of `array` (a kiln.Tensor, numpy, PyTorch, TVM, or anything numpy.asarray
    takes). kiln.from_dlpack shares memory instead of copying."""
    import numpy

    if isinstance(array, Tensor):
        source = array  # copied device to device, with no trip through numpy
    else:
        if not hasattr(array, "__dlpack__"):
            array = numpy.asarray(array)
        if isinstance(array, numpy.ndarray) and not array.flags.c_contiguous:
            array = numpy.array(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        source = from_dlpack(array)
    out = empty(source.shape, source.dtype, device)
    out.copyfrom(source)
    return out


from . import testing, vm, profiling, rpc  # noqa: E402  (they use the names above)

__all__ = [
    "AbiError",
    "BenchmarkResult",
    "DataType",
    "Device",
    "Function",
    "KilnError",
    "Module",
    "NotFoundError",
    "Object",
    "OutOfMemoryError",
    "RPCError",
    "WorkerError",
    "RPCSessionTimeoutError",
    "ShapeTuple",
    "Tensor",
    "TimeEvaluator",
    "UnavailableError",
    "UnimplementedError",
    "backends",
    "cpu",
    "cuda",
    "device",
    "devices",
    "empty",
    "from_dlpack",
    "get_global_func",
    "list_global_func_names",
    "load_module",
    "opencl",
    "plugins",
    "profiling",
    "register_func",
    "rocm",
    "rpc",
    "tensor",
    "testing",
    "time_evaluator",
    "vm",
]
