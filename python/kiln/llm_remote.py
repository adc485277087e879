# SPDX-License-Identifier: Apache-2.0
"""kiln.llm_remote: kiln.llm.Engine on a board, through a ``kiln rpc-server`` (issue 36, docs/llm.md)::

    session = kiln.rpc.connect("board", 9090)        # or a tracker's request("jetson")
    engine = kiln.llm.Engine("model/lib.so", "model/params", "opencl",
                             runtime=kiln.llm_remote.RemoteRuntime(session))
    tokens = engine.generate([1, 2, 3, 4], max_new_tokens=12).tokens   # generated on the board

The model library and the weight folder are local files: :class:`RemoteRuntime` uploads the
library into the session's work directory and loads it there (a remote Relax VM), uploads the
tensor cache (its JSON and the shards it names) and loads it with the server's
``vm.builtin.tensor_cache.load`` onto the server's device, then removes the uploaded weights
(they are in the device's memory by then). Every forward pass, the KV cache and top-p sampling
run on the server; only token ids, shapes and each step's logits cross the wire.

What the server needs: the LLM builtins in the session's process. A ``kiln rpc-server`` session
process loads libkiln_llm.so from beside libkiln when it starts (docs/architecture.md, "Builtin
libraries"); a server without it answers with an error that names libkiln_llm.so. Relative paths
given to the session's functions resolve in its work directory, which is the session process's
current directory: sessions on the server's threads (``--session-isolation thread``,
kiln.rpc.LocalSession) do not have one, and are not supported.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, Tuple

from . import _kiln

if TYPE_CHECKING:
    import numpy

__all__ = ["RemoteRuntime", "RemoteObject"]

# The session's own functions RemoteRuntime calls besides the engine's builtins.
_TUPLE_GETITEM = "vm.builtin.tuple_getitem"
# An array of strings cannot cross the wire (only numbers, strings, shapes, tensors and handles
# do), so the names go as separate arguments to the unpacked variant, as TVM's RPC clients do.
_BY_NAME = "vm.builtin.param_array_from_cache_by_name"
_BY_NAME_UNPACKED = "vm.builtin.param_array_from_cache_by_name_unpacked"
_TENSOR_CACHE_LOAD = "vm.builtin.tensor_cache.load"
_CACHE_FILES = ("tensor-cache.json", "ndarray-cache.json")


class RemoteObject:
    """A server object the engine holds (the weights' array, a model function's result tuple,
    the KV cache): passed back to the server as it is; ``obj[i]`` is the server's
    vm.builtin.tuple_getitem(obj, i), and an object of known size (the weights) iterates."""

    def __init__(self, handle: Any, getitem: Callable[[Any, int], Any],
                 size: Optional[int] = None):
        self.handle = handle
        self._getitem = getitem
        self._size = size

    def __getitem__(self, index: int) -> Any:
        if self._size is not None:
            if not -self._size <= index < self._size:
                raise IndexError(f"kiln.llm_remote: index {index} of a remote array of "
                                 f"{self._size}")
            index %= self._size
        return _wrap(self._getitem(self.handle, int(index)), self._getitem)

    def __len__(self) -> int:
        if self._size is None:
            raise TypeError("kiln.llm_remote: the size of this remote object is unknown")
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        size = "" if self._size is None else f" of {self._size}"
        return f"<kiln.llm_remote.RemoteObject{size}>"


def _unwrap(value: Any) -> Any:
    return value.handle if isinstance(value, RemoteObject) else value


def _wrap(value: Any, getitem: Callable[[Any, int], Any], size: Optional[int] = None) -> Any:
    return RemoteObject(value, getitem, size) if isinstance(value, _kiln.Object) else value


class _RemoteFunction:
    """A server function that takes and returns RemoteObjects as the server's handles."""

    def __init__(self, function: Any, getitem: Callable[[Any, int], Any]):
        self._function = function
        self._getitem = getitem

    def __call__(self, *args: Any) -> Any:
        return _wrap(self._function(*(_unwrap(a) for a in args)), self._getitem)


class _RemoteVM:
    """The engine's view of a kiln.vm.VirtualMachine made on the server."""

    def __init__(self, vm: Any, getitem: Callable[[Any, int], Any]):
        self.vm = vm
        self._getitem = getitem

    def __getitem__(self, name: str) -> _RemoteFunction:
        return _RemoteFunction(self.vm[name], self._getitem)

    def has_function(self, name: str) -> bool:
        return bool(self.vm.has_function(name))


def _weight_files(folder: str) -> List[str]:
    """The files of the tensor cache in `folder` to upload, relative to it: its metadata JSON and
    every shard it names that exists here (a missing one is the server's error to name, as a
    local load's would be). A JSON that does not parse is uploaded alone, for the same reason."""
    files: List[str] = []
    for cache_file in _CACHE_FILES:
        path = os.path.join(folder, cache_file)
        if not os.path.isfile(path):
            continue
        files.append(cache_file)
        try:
            with open(path, encoding="utf-8") as f:
                shards = json.load(f).get("records", [])
            names = [str(s["dataPath"]) for s in shards if isinstance(s, dict) and "dataPath" in s]
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        for name in names:
            # Only plain relative names inside the folder: the server refuses the others itself.
            if (not os.path.isabs(name) and ".." not in name.split("/") and name not in files
                    and os.path.isfile(os.path.join(folder, name))):
                files.append(name)
    return files


class RemoteRuntime:
    """kiln.llm's Runtime over an RPC session (kiln.rpc.RPCSession): the engine runs on the
    server's devices, with the server's VM and builtins.

    Parameters
    ----------
    session: an open kiln.rpc.RPCSession with a ``kiln rpc-server`` (process isolation, the
        default).
    folder: the folder of the session's work directory that uploads go to; each upload gets a
        fresh subfolder of its own, so two engines on one session never share files.
    keep_weights: leave the uploaded weight files on the server after loading them (default:
        removed once the tensors are on the device, to spare the board's disk).

    Devices are the server's: ``engine = Engine(lib, weights, "opencl:0", runtime=rt)`` runs on
    the board's OpenCL device 0 (a device of the session, such as ``session.opencl(0)``, works
    too). Errors on the server arrive as kiln.RPCError carrying the server's message.
    """

    def __init__(self, session: Any, *, folder: str = "kiln-llm", keep_weights: bool = False):
        if not isinstance(session, _kiln.RPCSession):
            raise TypeError(f"kiln.llm_remote.RemoteRuntime: expected a kiln.rpc.RPCSession, "
                            f"not {type(session).__name__}")
        if not folder or os.path.isabs(folder) or ".." in folder.split("/"):
            raise ValueError(f"kiln.llm_remote.RemoteRuntime: folder {folder!r} must be a "
                             "relative path inside the session's work directory")
        self.session = session
        self.folder = folder.rstrip("/")
        self.keep_weights = keep_weights
        # A remote device's type is the server's plus the session's mask (RPCSession.device).
        self._mask = int(session.cpu(0).device_type) - 1  # kDLCPU is 1
        getitem = session.get_function(_TUPLE_GETITEM)
        self._getitem: Callable[[Any, int], Any] = lambda obj, i: getitem(obj, i)

    # -- uploads --------------------------------------------------------------------------------

    def _new_folder(self) -> str:
        return f"{self.folder}/{uuid.uuid4().hex[:16]}"

    def upload_library(self, library: str) -> str:
        """Uploads the model library at local path `library`; returns its path on the server."""
        if not os.path.isfile(library):
            raise FileNotFoundError(f"kiln.llm_remote: no model library {library}")
        remote = f"{self._new_folder()}/{os.path.basename(library)}"
        self.session.upload(library, remote)
        return remote

    def upload_weights(self, weights: str) -> str:
        """Uploads the tensor cache in local folder `weights` (its JSON and shards); returns the
        folder's path on the server."""
        if not os.path.isdir(weights):
            raise FileNotFoundError(f"kiln.llm_remote: no weight folder {weights}")
        files = _weight_files(weights)
        if not files:
            raise FileNotFoundError(f"kiln.llm_remote: {weights} holds no "
                                    f"{' nor '.join(_CACHE_FILES)}")
        remote = f"{self._new_folder()}/{os.path.basename(os.path.normpath(weights))}"
        for name in files:
            self.session.upload(os.path.join(weights, name), f"{remote}/{name}")
        return remote

    def _tensor_cache_load(self, function: Any) -> Callable[..., Any]:
        """The server's tensor_cache.load taking a local weight folder: uploaded, loaded there,
        then removed (unless keep_weights). A path that is no local folder goes as it is (a
        folder already on the server)."""

        def load(path: Any, device_type: int, device_id: int = 0) -> Any:
            path = os.fspath(path)
            if not os.path.isdir(path):
                return function(path, device_type, device_id)
            remote = self.upload_weights(path)
            try:
                return function(remote, device_type, device_id)
            finally:
                if not self.keep_weights:
                    self.session.remove(remote.rsplit("/", 1)[0])

        return load

    # -- kiln.llm.Runtime -----------------------------------------------------------------------

    def device(self, device: Any) -> Any:
        """The session's device for `device`: a name ("cpu", "opencl:1"), a device of the
        session (as it is), or a local kiln.Device (the server's device of its type and id)."""
        if isinstance(device, _kiln.Device):
            if int(device.device_type) > self._mask:  # already the session's
                return device
            return self.session.device(int(device.device_type), int(device.device_id))
        name, _, index = str(device).partition(":")
        if index and not index.isdigit():
            raise ValueError(f"kiln.llm_remote: device {device!r} is not 'type' or 'type:id'")
        return self.session.device(name, int(index) if index else 0)

    def device_type_and_id(self, device: Any) -> Tuple[int, int]:
        """The server's (device type, id): what its builtins take."""
        return int(device.device_type) - self._mask, int(device.device_id)

    def load_vm(self, library: str, device: Any) -> _RemoteVM:
        from .vm import VirtualMachine

        module = self.session.load_module(self.upload_library(library))
        return _RemoteVM(VirtualMachine(module, device), self._getitem)

    def has_function(self, vm: _RemoteVM, name: str) -> bool:
        return vm.has_function(name)

    def builtin(self, name: str) -> Callable[..., Any]:
        """The server's global function `name` (kiln.RPCError when it has none)."""
        if name == _BY_NAME:
            unpacked = self.session.get_function(_BY_NAME_UNPACKED)
            return lambda names: _wrap(unpacked(*(str(n) for n in names)), self._getitem,
                                       len(names))
        function = self.session.get_function(name)
        if name == _TENSOR_CACHE_LOAD:
            return self._tensor_cache_load(function)
        return _RemoteFunction(function, self._getitem)

    def shape(self, values: Sequence[int]) -> Any:
        from . import ShapeTuple

        return ShapeTuple(int(v) for v in values)

    def tensor(self, array: numpy.ndarray, device: Any) -> Any:
        from . import tensor

        return tensor(array, device)

    def numpy(self, tensor: Any) -> numpy.ndarray:
        import numpy

        return numpy.asarray(_unwrap(tensor).numpy())

    def call_argument(self, value: Any) -> Any:
        return value  # the weights stay on the server; the handle is what calls take
