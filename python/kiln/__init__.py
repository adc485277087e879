# SPDX-License-Identifier: Apache-2.0
"""Kiln: run compiled kernel modules on any device, time them honestly, profile them.

The APIs follow TVM's Python APIs (tvm.runtime, tvm.testing, tvm.rpc, the Relax VM,
tvm.runtime.profiling), on Kiln's core and plugins::

    import numpy as np, kiln
    mod = kiln.load_module("vadd.so")          # a TVM export_library output, or Kiln's own
    a, b = np.ones(1024, "float32"), np.ones(1024, "float32")
    c = kiln.empty((1024,), "float32")
    mod["vadd"](a, b, c)                       # numpy arrays are shared through DLPack
    print(mod.time_evaluator("vadd", kiln.cpu(0), number=100)(a, b, c))

Submodules: kiln.testing (local_run, rpc_run), kiln.vm (VirtualMachine), kiln.profiling
(Report, profile_function), kiln.rpc (connect, connect_tracker),
kiln.llm (Engine: LLMs compiled the MLC way). docs/python.md has the guide;
the package is typed (kiln/_kiln.pyi, py.typed) and inspect.signature works on its functions,
classes and methods.
"""

import atexit
from typing import Any, Optional, Union

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
    RPCServerLostError,
    Tensor,
    TimeEvaluator,
    UnavailableError,
    UnimplementedError,
)
from . import _kiln
from ._signatures import add_constructor_signatures, add_method_signatures, python_function

# The extension's functions as Python functions with the same parameters, which
# inspect.signature reads (kiln/_signatures.py).
backends = python_function(_kiln.backends, __name__)
device = python_function(_kiln.device, __name__)
devices = python_function(_kiln.devices, __name__)
empty = python_function(_kiln.empty, __name__)
from_dlpack = python_function(_kiln.from_dlpack, __name__)
get_global_func = python_function(_kiln.get_global_func, __name__)
list_global_func_names = python_function(_kiln.list_global_func_names, __name__)
load_module = python_function(_kiln.load_module, __name__)
plugins = python_function(_kiln.plugins, __name__)
register_func = python_function(_kiln.register_func, __name__)
time_evaluator = python_function(_kiln.time_evaluator, __name__)
add_constructor_signatures(_kiln)
# Methods (Tensor.copyfrom, Module.time_evaluator, ...) stay nanobind's objects; their types get
# a __signature__ property: a function, a method and a bound method name the three types.
add_method_signatures(_kiln, _kiln.empty, vars(DataType)["__repr__"], DataType("float32").__repr__)

__version__ = _kiln.__version__  # as `kiln --version` and the package metadata say


class ShapeTuple(tuple):
    """A shape passed to Kiln as a shape value (TVM's ShapeTuple); shapes come back as these."""

    def __repr__(self):
        return "ShapeTuple(" + tuple.__repr__(tuple(self)) + ")"


_kiln._set_shape_tuple_type(ShapeTuple)
# Python callables registered as global functions or held by Functions hold their modules;
# drop them before the interpreter goes.
atexit.register(_kiln._unregister_python_functions)


def cpu(index: int = 0) -> Device:
    """The host CPU device `index`."""
    return _kiln.device("cpu", index)


def cuda(index: int = 0) -> Device:
    """CUDA device `index`."""
    return _kiln.device("cuda", index)


def opencl(index: int = 0) -> Device:
    """OpenCL device `index`."""
    return _kiln.device("opencl", index)


def rocm(index: int = 0) -> Device:
    """ROCm (HIP) device `index`."""
    return _kiln.device("rocm", index)


def tensor(array: Any, device: Optional[Union[Device, str]] = None) -> Tensor:
    """A new kiln.Tensor on `device` (a kiln.Device or a name such as "cuda:1"; default cpu:0)
    holding a copy of `array` (a kiln.Tensor, numpy, PyTorch, TVM, or anything numpy.asarray
    takes; a read-only or non-contiguous numpy array too). kiln.from_dlpack shares memory
    instead of copying."""
    import numpy

    if isinstance(array, Tensor):
        source = array  # copied device to device, with no trip through numpy
    else:
        if not hasattr(array, "__dlpack__"):
            array = numpy.asarray(array)
        if isinstance(array, numpy.ndarray) and not (array.flags.c_contiguous
                                                     and array.flags.writeable):
            # A compact, writable copy, which from_dlpack shares: it refuses read-only memory
            # (kernels may write to what it shares; numpy before 2 cannot even export it) and
            # non-contiguous memory. ascontiguousarray would make 0-d arrays 1-d.
            array = numpy.array(array, order="C")
        source = _kiln.from_dlpack(array)
    out = _kiln.empty(source.shape, source.dtype, device)
    out.copyfrom(source)
    return out


from . import testing, vm, profiling, rpc  # noqa: E402  (they use the names above)
from . import llm  # noqa: E402  (kiln.llm: the LLM engine over the VM, docs/llm.md)

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
    "RPCServerLostError",
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
    "llm",
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
