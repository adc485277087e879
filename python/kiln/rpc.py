"""kiln.rpc: run on a device of another machine through a ``kiln rpc-server``, directly or
through a ``kiln tracker`` — TVM's ``tvm.rpc`` (SPEC.md §4, docs/rpc.md) on Kiln's core.

A TVM user's script changes one import::

    # remote = tvm.rpc.connect_tracker("farm", 9190).request("jetson")
    remote = kiln.rpc.connect_tracker("farm", 9190).request("jetson", session_timeout=60)
    remote.upload("vadd.tar")
    mod = remote.load_module("vadd.tar")
    dev = remote.cpu(0)
    a = kiln.empty((1024,), "float32", dev)
    a.copyfrom(numpy_array)                      # copied to the server
    mod["vadd"](a, b, c)                         # runs there
    print(mod.time_evaluator("vadd", dev, number=100, repeat=3)(a, b, c))
    result = c.numpy()                           # copied back

Remote tensors are kiln.Tensors on a remote device (``str(dev)`` starts with ``remote``);
remote functions are ordinary kiln.Functions. Failures on the server raise kiln.RPCError
carrying the server's message; a session that outlives its timeout raises
kiln.RPCSessionTimeoutError. Every network call releases the GIL.
"""

from . import _kiln
from ._kiln import (
    RPCError,
    RPCSession,
    RPCSessionTimeoutError,
    RemoteModule,
    RemoteTimeEvaluator,
    TrackerSession,
)

__all__ = [
    "RPCError",
    "RPCSession",
    "RPCSessionTimeoutError",
    "RemoteModule",
    "RemoteTimeEvaluator",
    "TrackerSession",
    "connect",
    "connect_tracker",
]


def connect(host, port, key="", session_timeout=0, token="", connect_timeout=10):
    """Opens a session with the RPC server at `host`:`port` (TVM's ``tvm.rpc.connect``).

    key: the server's key ('' matches a server started without one).
    session_timeout: seconds after which the server ends the session (0: unlimited, unless the
        server imposes its own); calls then raise kiln.RPCSessionTimeoutError.
    token: the shared token of a server started with ``--token`` (both sides prove they hold
        it; it never crosses the wire).
    connect_timeout: seconds to wait for the connection and the handshake.

    Returns an RPCSession, also a context manager that closes it. Raises RuntimeError naming
    host:port for a refused or silent peer, a peer that is not a Kiln RPC server, a key that
    does not match, a busy server or a wrong token.
    """
    return _kiln._rpc_connect(
        host,
        int(port),
        key=key,
        session_timeout=session_timeout,
        token=token,
        connect_timeout=connect_timeout,
    )


def connect_tracker(host, port, connect_timeout=10):
    """Connects to the RPC tracker at `host`:`port` (TVM's ``tvm.rpc.connect_tracker``).

    A refused connection is retried every 0.5 s until `connect_timeout` seconds have passed,
    then RuntimeError names host:port and the last error. Returns a TrackerSession:
    ``summary()`` and ``text_summary()`` describe the servers and queues, and
    ``request(key, priority=1, session_timeout=0, max_retry=5, wait=None)`` returns an
    RPCSession with a free server of that key (``wait`` bounds the wait in seconds; TVM waits
    forever, as does ``wait=None``). Also a context manager that closes it.
    """
    return _kiln._rpc_connect_tracker(host, int(port), connect_timeout=connect_timeout)
