# SPDX-License-Identifier: Apache-2.0
"""kiln.rpc: run on a device of another machine through a ``kiln rpc-server``, directly or
through a ``kiln tracker`` — TVM's ``tvm.rpc`` API (docs/rpc.md) on Kiln's core.

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
kiln.RPCSessionTimeoutError; a server that went away (the connection dropped, or no server of
the key could be reached) raises kiln.RPCServerLostError. Every network call releases the GIL.
"""

from __future__ import annotations

from typing import Collection, Optional, Union

from . import _kiln
from ._kiln import (
    RPCError,
    RPCServerLostError,
    RPCSession,
    RPCSessionTimeoutError,
    RemoteModule,
    RemoteTimeEvaluator,
    TrackerSession,
)

__all__ = [
    "RPCError",
    "RPCServerLostError",
    "RPCSession",
    "RPCSessionTimeoutError",
    "RemoteModule",
    "RemoteTimeEvaluator",
    "TrackerSession",
    "LocalSession",
    "connect",
    "connect_tracker",
    "random_key",
    "split_random_key",
]


def connect(host: str, port: Union[int, str], key: str = "", session_timeout: float = 0,
            token: str = "", connect_timeout: float = 10) -> RPCSession:
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


def connect_tracker(host: str, port: Union[int, str], connect_timeout: float = 10,
                    tracker_token: Optional[str] = None) -> TrackerSession:
    """Connects to the RPC tracker at `host`:`port` (TVM's ``tvm.rpc.connect_tracker``).

    tracker_token: the tracker's token, when it requires one (the connection is then TLS 1.3
        keyed by it); None (the default): ``$KILN_TRACKER_TOKEN``, where an unset or empty
        variable means no token, as in the C++ API and the command line.

    A refused connection is retried every 0.5 s until `connect_timeout` seconds have passed,
    then RuntimeError names host:port and the last error. Returns a TrackerSession:
    ``summary()`` and ``text_summary()`` describe the servers and queues, and
    ``request(key, priority=1, session_timeout=0, max_retry=5, wait=None)`` returns an
    RPCSession with a free server of that key (``wait`` bounds the wait in seconds; TVM waits
    forever, as does ``wait=None``). Also a context manager that closes it.
    """
    if tracker_token is None:
        # The one resolver (kiln::rpc::resolve_token): $KILN_TRACKER_TOKEN, unset or empty: none.
        tracker_token = _kiln._rpc_resolve_token(variable="tracker")
    return _kiln._rpc_connect_tracker(host, int(port), connect_timeout=connect_timeout,
                                      tracker_token=tracker_token)


def LocalSession() -> RPCSession:  # noqa: N802  (TVM's name: rpc.LocalSession() makes a session)
    """An in-process session (TVM's ``rpc.LocalSession``): the RPCSession API over a server
    that runs inside this process on a loopback port, with its files in a fresh private
    temporary directory removed when the session closes. For tests, and for code that treats
    local and remote devices alike: ``session.cpu(0)``, upload, load_module, remote tensors and
    time evaluators behave as with a remote server (only this client can use that server: a
    random token, one session)."""
    return _kiln._rpc_local_session()


def random_key(prefix: str, cmap: Optional[Collection[str]] = None) -> str:
    """A match key ``"<prefix>:<random fraction>"`` that is not a key of `cmap` (any container
    of keys), as TVM's ``rpc.base.random_key`` makes them."""
    return _kiln._random_key(prefix, set(cmap) if cmap else set())


def split_random_key(key: str) -> list[str]:
    """`key` split at its last ':' into ``[key, random]``, or ``[key]`` when it has none (TVM's
    ``split_random_key``: keys that contain ':' of their own, like ``127.0.0.1:5555:0.5``,
    keep them)."""
    head, tail = _kiln._split_random_key(key)
    return [head, tail] if ":" in key else [head]
