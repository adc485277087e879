# SPDX-License-Identifier: Apache-2.0
"""kiln.vm: the Relax VM — TVM's ``tvm.runtime.vm.VirtualMachine`` API on Kiln's core::

    exe = kiln.load_module("mlp.kvm")           # or .kvmt, or a TVM Relax library (.so)
    vm = kiln.vm.VirtualMachine(exe, kiln.cpu())
    y = vm["main"](x, w1, b1, w2, b2)           # numpy arrays are shared through DLPack

    vm.set_input("main", x, w1, b1, w2, b2)     # the stateful API
    vm.invoke_stateful("main")
    y = vm.get_outputs("main")

    vm.save_function("main", "main_saved", x, w1, b1, w2, b2)
    print(vm.time_evaluator("main_saved", kiln.cpu(), number=100)())

Differences from the reference, all documented below: the device list passed in is not
modified (the VM appends the host CPU to its own copy), a bad ``memory_cfg`` string is a
ValueError (not an AssertionError), and keyword arguments that do not name a parameter are a
TypeError (not a printed warning).
"""

from __future__ import annotations

import enum
import numbers
import weakref
from typing import Any, Callable, Optional, Sequence, Union

from . import _kiln
from ._kiln import DataType, Device, Function, Module, Object, Tensor, from_dlpack
from .profiling import Report

__all__ = ["VMInstrumentReturnKind", "VirtualMachine"]


class VMInstrumentReturnKind(enum.IntEnum):
    """What an instrument returns from a before-call, as TVM's: NO_OP (0) lets the call run,
    SKIP_RUN (1) skips it (its destination register then holds None and no after-call is
    made)."""

    NO_OP = 0
    SKIP_RUN = 1


def _type_name(value):
    return type(value).__name__


def _host_copy(array):
    """A new CPU kiln.Tensor holding a copy of numpy `array` (0-d arrays stay 0-d)."""
    import numpy

    return from_dlpack(numpy.array(array, copy=True, order="C"))


def _scalar_tensor(value):
    """The reference's conversion of a Python number: a 0-d CPU tensor of dtype int32 for
    integers and bools, float16 for numpy.float16, float32 for other numbers."""
    import numpy

    if isinstance(value, (bool, numpy.bool_, numbers.Integral)):
        dtype = "int32"
    elif isinstance(value, numpy.float16):
        dtype = "float16"
    else:
        dtype = "float32"
    return _host_copy(numpy.array(value, dtype=dtype))


def _convert(arg):
    """The Python-side conversion of TVM's VM for set_input, save_function and profile: kiln
    values pass as they are; numpy arrays are copied into a new CPU tensor (so later changes to the
    array do not reach the VM); tuples and lists convert item by item; numbers become 0-d
    tensors; other DLPack producers (PyTorch, TVM tensors) and callables are passed on (shared,
    not copied). Anything else: TypeError("Unsupported type: <type>")."""
    import numpy

    if isinstance(arg, (Tensor, Object, Function, Module, Device, DataType, str)):
        return arg
    if isinstance(arg, numpy.ndarray):
        return _host_copy(arg)
    if isinstance(arg, (tuple, list)):
        return tuple(_convert(a) for a in arg)
    if isinstance(arg, (numbers.Number, bool, numpy.bool_)):
        return _scalar_tensor(arg)
    if hasattr(arg, "__dlpack__") or callable(arg):
        return arg
    raise TypeError(f"Unsupported type: {type(arg)}")


def _as_executable_module(rt_mod):
    """A kiln.Module for `rt_mod`: a kiln.Module (or a kiln.rpc.RemoteModule) as is; a TVM
    executable or module (anything with export_library) is exported by TVM into a temporary
    directory and loaded by Kiln."""
    if isinstance(rt_mod, (Module, _kiln.RemoteModule)):
        return rt_mod
    if hasattr(rt_mod, "export_library"):
        import os
        import tempfile

        from . import load_module

        with tempfile.TemporaryDirectory(prefix="kiln_vm_") as tmp:
            path = os.path.join(tmp, "vm_module.so")
            rt_mod.export_library(path)
            return load_module(path)
    raise ValueError("Expect the rt_mod to be an runtime.Module")


def _device_list(device):
    if isinstance(device, Device):
        return [device]
    if isinstance(device, (list, tuple)) and all(isinstance(d, Device) for d in device):
        return list(device)
    raise TypeError("dev is expected to be Device or List[Device]")


class _RemoteCore:
    """What VirtualMachine needs of its core, for a VM on an RPC server: the VM is made there
    (the executable's vm_load_executable, then vm_initialization) and every call goes to the
    VM module's functions on the server. Values a call returns stay there (remote
    tensors); tuples are rebuilt here from get_output_arity and get_output."""

    def __init__(self, exec_module, devices, memory_cfg, profile):
        self._remote = _kiln._RemoteVirtualMachine(exec_module, devices, memory_cfg, profile)
        self.module = self._remote.module
        self.devices = self._remote.devices

    def convert(self, arg):
        """_convert's conversion, onto the VM's first device: numpy arrays and numbers are
        uploaded into new remote tensors; remote values pass as they are."""
        import numpy

        from . import tensor

        if isinstance(arg, numpy.ndarray):
            return tensor(arg, self.devices[0])
        if isinstance(arg, (numbers.Number, bool, numpy.bool_)):
            return tensor(_scalar_tensor(arg), self.devices[0])
        if isinstance(arg, (tuple, list)):
            return tuple(self.convert(a) for a in arg)
        return _convert(arg)

    def get_function(self, name: str) -> Function:
        return self.module.get_function(name)

    def has_function(self, name: str) -> bool:
        try:
            self.module.get_function(name)
            return True
        except _kiln.RPCError:
            return False

    def invoke_closure(self, closure, args):
        return self.module["invoke_closure"](closure, *args)

    def param_names(self, func_name):
        arity = self.module["get_function_arity"](func_name)
        get_name = self.module["get_function_param_name"]
        return [get_name(func_name, i) for i in range(arity)]

    def save_function(self, func_name, saved_name, args, include_return):
        self.module["save_function"](func_name, saved_name, include_return, *args)

    def set_input(self, func_name, args):
        self.module["set_input"](func_name, *args)

    def invoke_stateful(self, func_name: str) -> None:
        self.module["invoke_stateful"](func_name)

    def get_output_arity(self, func_name, indices):
        return self.module["get_output_arity"](func_name, *indices)

    def get_output(self, func_name, indices):
        return self.module["get_output"](func_name, *indices)

    def get_outputs(self, func_name, indices=()):
        arity = self.get_output_arity(func_name, list(indices))
        if arity < 0:
            return self.get_output(func_name, list(indices))
        return tuple(self.get_outputs(func_name, (*indices, i)) for i in range(arity))

    def set_instrument(self, instrument):
        if instrument is None:
            self.module["set_instrument"](None)
            return
        raise TypeError(
            "set_instrument: an instrument runs in the VM's process, and this VM runs on an RPC "
            "server (a callable here cannot be called there)"
        )

    def time_evaluator(self, func_name, dev, **options):
        return self.module.time_evaluator(func_name, dev, **options)

    def profile(self, func_name, args):
        from .profiling import Report

        return Report.from_json(self.module["profile"](func_name, *args))


def _instrument_trampoline(vm_ref):
    """The callable the core calls for a Python instrument: it reaches the instrument through a
    weak reference to the VirtualMachine object, because a reference held by C++ is invisible
    to Python's garbage collector (an instrument that refers to its VM would otherwise make a
    cycle that is never collected)."""

    def instrument(*args):
        vm = vm_ref()
        f = None if vm is None else vm._instrument
        return None if f is None else f(*args)

    return instrument


class VirtualMachine:
    """Runs a VM executable, as TVM's VirtualMachine: ``VirtualMachine(rt_mod, device,
    memory_cfg=None, profile=False)``.

    rt_mod: an executable module (kiln.load_module of a .kvm / .kvmt file, a package, or a TVM
    Relax library), or a TVM executable (exported and loaded). Anything else: ValueError.
    A kiln.rpc.RemoteModule (session.load_module of the same files) makes the VM on the RPC
    server, as the reference does over a session: `device` then names devices of that
    session, numpy arguments are uploaded to the first one, outputs stay remote tensors, and
    time_evaluator and profile run on the server; set_instrument takes only None or the name
    of a factory registered on the server.

    device: a kiln.Device or a list of them; the host CPU is appended (to the VM's own copy)
    unless the last device is a CPU. Tensor constants and stateful inputs go to the first one.

    memory_cfg: None (pooled allocators), "naive" or "pooled" for every device, or a dict
    Device -> "naive"/"pooled" (the reference's codes 1 and 2 are accepted too); devices not in
    the dict are pooled. Another string is a ValueError, another type a TypeError.

    profile: enables profile().

    A VM runs one call at a time: do not call one VM from two threads at once.
    """

    NAIVE_ALLOCATOR = 1
    POOLED_ALLOCATOR = 2

    def __init__(self, rt_mod: Any, device: Union[Device, Sequence[Device]],
                 memory_cfg: Optional[Union[str, dict]] = None, profile: bool = False) -> None:
        module = _as_executable_module(rt_mod)
        devices = _device_list(device)
        if memory_cfg is not None and not isinstance(memory_cfg, (str, dict)):
            raise TypeError(
                "memory_cfg is expected be string or dictionary, but received "
                f"{_type_name(memory_cfg)}"
            )
        self._vm: "_RemoteCore | _kiln._VirtualMachine"
        if isinstance(module, _kiln.RemoteModule):
            self._vm = _RemoteCore(module, devices, memory_cfg, bool(profile))
            self._convert = self._vm.convert
        else:
            self._vm = _kiln._VirtualMachine(module, devices, memory_cfg, bool(profile))
            self._convert = _convert
        self._exec_module = module
        self._instrument: Optional[Callable[..., Any]] = None

    # ---- functions --------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Function:
        """The kiln.Function `name`: a fixed VM module function (set_input, invoke_stateful,
        get_output, ..., as TVM's VM module has), a function saved with save_function, or a VM
        function. Calling it passes the arguments as they are (no device conversion).
        kiln.NotFoundError "Unknown function: <name>" when there is none."""
        return self._vm.get_function(name)

    def get_function(self, name: str) -> Function:
        """The same as ``vm[name]``."""
        return self._vm.get_function(name)

    def __contains__(self, name: str) -> bool:
        """Whether ``vm[name]`` finds a function."""
        return self._vm.has_function(name)

    def has_function(self, name: str) -> bool:
        """Whether ``vm[name]`` finds a function."""
        return self._vm.has_function(name)

    @property
    def module(self) -> Union[Module, _kiln.RemoteModule]:
        """The VM as a kiln.Module with the function table of TVM's VM module (set_input,
        invoke_stateful,
        get_output, save_function, invoke_closure, set_instrument, profile, get_function_arity,
        get_function_param_name and every VM function), for callers that speak packed
        functions."""
        return self._vm.module

    @property
    def devices(self) -> list[Device]:
        """The VM's devices, the host CPU last."""
        return self._vm.devices

    @property
    def executable(self) -> Union[Module, _kiln.RemoteModule]:
        """The executable module the VM runs (its ``as_text``/``stats`` functions describe
        it)."""
        return self._exec_module

    def invoke_closure(self, closure: Any, *args: Any) -> Any:
        """Calls a VM closure (for example one a VM function returned) or any function with
        `args`; no argument conversion is made."""
        return self._vm.invoke_closure(closure, list(args))

    # ---- arguments --------------------------------------------------------------------------

    def _arguments(self, func_name, args, kwargs):
        """Positional `args` and keyword `kwargs` as one converted list: keywords
        fill the parameters they name, positional arguments the remaining slots in order."""
        if not kwargs:
            return [self._convert(a) for a in args]
        names = list(self._vm.param_names(func_name))
        if not names:
            raise TypeError(
                f"{func_name} records no parameter names, so keyword arguments cannot be "
                f"mapped; pass its {len(args) + len(kwargs)} arguments positionally"
            )
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(
                f"{func_name} has no parameter named {', '.join(repr(k) for k in unknown)} "
                f"(its parameters: {', '.join(names)})"
            )
        if len(args) + len(kwargs) != len(names):
            raise TypeError(
                f"{func_name} takes {len(names)} arguments ({', '.join(names)}), got "
                f"{len(args)} positional and {len(kwargs)} keyword arguments"
            )
        slots = [None] * len(names)
        filled = [False] * len(names)
        for key, value in kwargs.items():
            index = names.index(key)
            slots[index] = value
            filled[index] = True
        positional = iter(args)
        for i in range(len(slots)):
            if not filled[i]:
                slots[i] = next(positional)
        return [self._convert(a) for a in slots]

    def save_function(self, func_name: str, saved_name: str, *args: Any,
                      include_return: bool = True, **kwargs: Any) -> None:
        """Saves `func_name` with `args` (and `kwargs` by parameter name) bound, converted to
        the first device, as `saved_name`: ``vm[saved_name]()`` then runs it with
        no lookups or conversions, the way to time a call with time_evaluator. Without
        include_return the saved function returns None. A saved name shadows a VM function of
        the same name for vm[...]."""
        arguments = self._arguments(func_name, args, kwargs)
        self._vm.save_function(func_name, saved_name, arguments, bool(include_return))

    # ---- the stateful API ------------------------------------------------------------------

    def set_input(self, func_name: str, *args: Any, **kwargs: Any) -> None:
        """Stores the inputs of `func_name` for invoke_stateful, converted to the first device
        (numpy arrays copied, numbers as 0-d tensors). Keyword arguments fill the parameters
        they name (TypeError when the executable records no names, or for a name that is not a
        parameter). ValueError "Unknown function: <name>"; TypeError for a wrong count. Inputs
        persist until set_input is called again."""
        arguments = self._arguments(func_name, args, kwargs)
        self._vm.set_input(func_name, arguments)

    def invoke_stateful(self, func_name: str) -> None:
        """Runs `func_name` on the inputs set_input stored and keeps its output for
        get_outputs. ValueError when no inputs were set."""
        self._vm.invoke_stateful(func_name)

    def get_outputs(self, func_name: str) -> Any:
        """The output of the last invoke_stateful(func_name): a value, or nested Python tuples
        for tuple outputs. ValueError before invoke_stateful."""
        return self._vm.get_outputs(func_name)

    def get_output_arity(self, func_name: str, *indices: int) -> int:
        """The size of the tuple at `indices` inside the saved output, or -1 when that value is
        not a tuple. ValueError before invoke_stateful, IndexError for an index out of
        range."""
        return self._vm.get_output_arity(func_name, list(indices))

    def get_output(self, func_name: str, *indices: int) -> Any:
        """The value at `indices` inside the saved output; ValueError when it is a tuple (index
        further) or before invoke_stateful."""
        return self._vm.get_output(func_name, list(indices))

    # ---- instrumentation, timing, profiling -------------------------------------------------

    def set_instrument(self, instrument: Union[Callable[..., Any], str, None]) -> None:
        """Calls ``instrument(func, func_symbol, before_run, ret_value, *args)`` around every
        Call instruction the VM executes, as TVM's VM does. `func` is the callee (a kiln.Function,
        or a kiln.Object for a VM closure), `func_symbol` its name in the executable,
        `before_run` True before the call (then `ret_value` is None) and False after it, `args`
        the call's arguments (data types as strings). A before-call returning
        VMInstrumentReturnKind.SKIP_RUN (1) skips the call; any other result runs it. A Python
        exception raised by the instrument stops the run and comes out of the VM call
        unchanged. None removes the instrument (the reference has no way to). A str names a
        global function called (with no arguments) to make the instrument, the reference's
        factory form.

        The instrument is kept by this VirtualMachine object; functions taken from it earlier
        (vm["main"]) stop calling it once the object is gone."""
        if isinstance(instrument, str):  # a global factory's name (TVM's factory form)
            self._instrument = None
            self._vm.module["set_instrument"](instrument)
            return
        if instrument is None or isinstance(instrument, Function):
            self._instrument = None
            self._vm.set_instrument(instrument)
            return
        if not callable(instrument):
            raise TypeError(f"set_instrument: expected a callable or None, got {instrument!r}")
        self._instrument = instrument
        self._vm.set_instrument(_instrument_trampoline(weakref.ref(self)))

    def time_evaluator(
        self,
        func_name: str,
        dev: Device,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: int = 0,
        cooldown_interval_ms: int = 0,
        repeats_to_cooldown: int = 1,
        f_preproc: str = "",
        *,
        limit_zero_time_iterations: int = 100,
        cache_flush_bytes: int = 0,
    ) -> Union[_kiln.TimeEvaluator, _kiln.RemoteTimeEvaluator]:
        """A kiln.TimeEvaluator for ``vm[func_name]`` on `dev` (TVM's parameter order): call it
        with the function's arguments for a BenchmarkResult in seconds per call. Any name
        vm[...] finds works: ``vm.time_evaluator("main", dev)(x, ...)``,
        ``vm.time_evaluator("invoke_stateful", dev)("main")`` after set_input, and
        ``vm.time_evaluator("saved", dev)()`` after save_function. Parameters as
        kiln.Module.time_evaluator."""
        return self._vm.time_evaluator(
            func_name,
            dev,
            number=number,
            repeat=repeat,
            min_repeat_ms=min_repeat_ms,
            limit_zero_time_iterations=limit_zero_time_iterations,
            cooldown_interval_ms=cooldown_interval_ms,
            repeats_to_cooldown=repeats_to_cooldown,
            cache_flush_bytes=cache_flush_bytes,
            f_preproc=f_preproc,
        )

    def profile(self, func_name: str, *args: Any) -> Report:
        """Profiles one call of `func_name` after one warm-up call and returns a
        kiln.profiling.Report: one row per Call instruction with tensor arguments (name,
        duration, device, argument shapes), the device totals and the configuration
        (Executor: VM). `args` are converted as for set_input; with no args the inputs
        set_input stored are used. Needs ``profile=True`` (RuntimeError otherwise)."""
        arguments = [self._convert(a) for a in args]
        return self._vm.profile(func_name, arguments)

    def __repr__(self) -> str:
        devices = ", ".join(str(d) for d in self.devices)
        return f"<kiln.vm.VirtualMachine on [{devices}]>"
