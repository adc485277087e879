# SPDX-License-Identifier: Apache-2.0
"""kiln.rpc and kiln.testing.rpc_run against real `kiln rpc-server` and `kiln tracker` processes
on loopback (SPEC.md §1.7, §1.10, §4.8; docs/rpc.md). The fixtures (conftest.py) start them on
free ports and stop them afterwards; timeouts here are hang guards, not speed bounds."""

import threading
import time

import numpy as np
import pytest

import kiln
from conftest import example_kernel, free_port

HOST = "127.0.0.1"
TRACKER_ENV = [
    f"{prefix}_TRACKER_{field}" for prefix in ("KILN", "TVM") for field in ("HOST", "PORT", "KEY")
]


def wait_until(condition, timeout=20.0, what="the condition"):
    """Polls `condition` until it is true; fails the test after `timeout` seconds (a hang guard)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what} did not hold within {timeout} s")


def free_servers(tracker_session, key):
    """The tracker's count of free servers for `key` (0 when it has no queue for it)."""
    return tracker_session.summary()["queue_info"].get(key, {}).get("free", 0)


@pytest.fixture
def session(rpc_server):
    """An RPCSession with a fresh server (key 'py-test'); closed afterwards."""
    port = rpc_server()
    s = kiln.rpc.connect(HOST, port, key="py-test", connect_timeout=20)
    yield s
    s.close()


# ---- sessions and remote functions (SPEC §4.8 items 1, 3, 13) --------------------------------


def test_connect_and_call_remote_functions(rpc_server):
    port = rpc_server(key="py-test")
    with kiln.rpc.connect(HOST, port, key="py-test") as s:
        assert isinstance(s, kiln.rpc.RPCSession)
        assert s.peer == f"{HOST}:{port}"
        assert s.server_key == "server:py-test"
        assert not s.closed
        addone = s.get_function("rpc.test.addone")
        assert isinstance(addone, kiln.Function)
        assert addone(10) == 11
        assert addone(-(2**40)) == -(2**40) + 1
        assert s.get_function("rpc.test.strcat")("abc", 11) == "abc:11"
        assert s.get_function("rpc.test.nop")() is None  # zero arguments
        assert s.device_count("cpu") >= 1
    assert s.closed


def test_echo_round_trips_values(session):
    echo = session.get_function("testing.echo")
    for value in [0, -7, 2**62, -(2**63), 2.5, -1e300, "", "hello", "ünïcødé ✓"]:
        result = echo(value)
        assert type(result) is type(value) and result == value, value
    raw = bytes(range(256)) + b"\x00tail"
    assert echo(raw) == raw and isinstance(echo(raw), bytes)
    assert echo(True) is True
    assert echo(None) is None
    assert echo(session.cpu(0)) == session.cpu(0)  # remote devices keep the session's mask


def test_remote_error_carries_the_remote_message(session):
    with pytest.raises(kiln.RPCError) as info:
        session.get_function("rpc.test.raise")("boom 42: something broke")
    text = str(info.value)
    assert text.startswith("RPCError: Error caught from RPC call:\n")
    assert "boom 42: something broke" in text
    assert isinstance(info.value, RuntimeError)  # as TVM's RPCError
    with pytest.raises(kiln.RPCError, match="no.such.function"):
        session.get_function("no.such.function")
    # The session survives a remote error.
    assert session.get_function("rpc.test.addone")(1) == 2


def test_connect_errors(rpc_server):
    port = rpc_server(key="right-key")
    with pytest.raises(RuntimeError, match=f"{HOST}:{port}"):
        kiln.rpc.connect(HOST, port, key="wrong-key", connect_timeout=10)
    nobody = free_port()
    with pytest.raises(RuntimeError, match=f"{HOST}:{nobody}"):
        kiln.rpc.connect(HOST, nobody, connect_timeout=1)
    with pytest.raises(ValueError, match="connect_timeout"):
        kiln.rpc.connect(HOST, port, key="right-key", connect_timeout=-1)


def test_calls_release_the_gil(session):
    """Another Python thread keeps running while a remote call waits on the server."""
    sleep = session.get_function("rpc.test.sleep")
    worker = threading.Thread(target=sleep, args=(1.0,))
    ticks = 0
    worker.start()
    time.sleep(0.1)
    while worker.is_alive():
        ticks += 1
        time.sleep(0.001)
    worker.join(timeout=30)
    assert ticks > 50, "the main thread was blocked during the remote call"


def test_local_session_serves_testing_echo_and_the_applications_functions():
    """TVM's test_rpc_echo on LocalSession, and functions this process registered under any
    name, testing.* and rpc.test.* included (registering is the opt-in, as in TVM); Kiln's own
    diagnostic functions stay hidden (issue 30, item 7)."""
    kiln.register_func("testing.py_served_double", lambda x: 2 * x, override=True)
    kiln.register_func("rpc.test.py_served_strcat", lambda s, i: f"{s}:{i}", override=True)
    with kiln.rpc.LocalSession() as session:
        echo = session.get_function("testing.echo")
        assert echo(1, 2, 3) == 1
        assert echo(100, 2, 3) == 100
        assert echo("xyz") == "xyz"
        assert echo(b"123") == b"123"
        assert session.get_function("testing.py_served_double")(21) == 42
        assert session.get_function("rpc.test.py_served_strcat")("abc", 11) == "abc:11"
        for name in ["rpc.test.block", "rpc.test.sleep", "rpc.test.alloc", "rpc.test.crash"]:
            with pytest.raises(kiln.RPCError, match=f"no global function '{name}'"):
                session.get_function(name)


def test_a_registered_functions_error_comes_back_from_a_local_session():
    def fail(message):
        raise ValueError(message)

    kiln.register_func("testing.py_served_fail", fail, override=True)
    with kiln.rpc.LocalSession() as session:
        with pytest.raises(Exception, match="boom from the application") as info:
            session.get_function("testing.py_served_fail")("boom from the application")
        assert isinstance(info.value, (kiln.RPCError, ValueError))
        assert session.get_function("testing.echo")(5) == 5  # the session goes on


# ---- files (SPEC §4.8 item 4) ---------------------------------------------------------------


def test_upload_download_listdir_remove(session, tmp_path):
    data = bytes(range(256)) * 1000 + b"\x00end"
    session.upload(bytearray(data), "dat.bin")
    assert session.download("dat.bin") == data
    local = tmp_path / "local_file.txt"
    local.write_bytes(b"from a local file\n")
    session.upload(str(local))  # target defaults to the base name
    session.upload(local, "renamed.txt")  # os.PathLike
    session.upload_bytes(b"sub", "sub/inner.bin")
    assert session.listdir() == ["dat.bin", "local_file.txt", "renamed.txt", "sub/"]
    assert session.listdir("sub") == ["inner.bin"]
    assert session.download("local_file.txt") == b"from a local file\n"
    assert session.download("renamed.txt") == b"from a local file\n"
    session.upload(b"second version", "dat.bin")  # overwrites
    assert session.download("dat.bin") == b"second version"
    session.remove("dat.bin")
    session.remove("sub")
    session.remove("never-existed.bin")  # not an error
    assert session.listdir() == ["local_file.txt", "renamed.txt"]
    with pytest.raises(kiln.RPCError):
        session.download("dat.bin")
    with pytest.raises(ValueError, match="target must present"):
        session.upload(b"bytes need a name")


def test_paths_outside_the_work_directory_are_refused(session):
    for path in ["../escape.bin", "/tmp/escape.bin"]:
        with pytest.raises(kiln.RPCError):
            session.upload(b"x", path)
        with pytest.raises(kiln.RPCError):
            session.download(path)


# ---- remote tensors (SPEC §4.8 item 2) ------------------------------------------------------


@pytest.mark.parametrize(
    "shape,dtype", [((5041, 720), "float32"), ((3, 5, 7), "int64"), ((17,), "uint8")]
)
def test_remote_tensor_round_trip(session, shape, dtype):
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        array = rng.standard_normal(shape).astype(dtype)
    else:
        array = rng.integers(0, 200, size=shape).astype(dtype)
    dev = session.cpu(0)
    assert str(dev).startswith("remote")
    remote = kiln.empty(shape, dtype, dev)
    assert remote.device == dev
    remote.copyfrom(array)
    back = remote.numpy()
    assert back.shape == array.shape and back.dtype == array.dtype
    assert back.tobytes() == array.tobytes()
    # kiln.tensor copies onto a remote device too.
    assert kiln.tensor(array, dev).numpy().tobytes() == array.tobytes()


def test_local_values_stay_local(session):
    echo = session.get_function("testing.echo")
    with pytest.raises(ValueError, match="local tensor"):
        echo(np.ones(4, "float32"))  # copy it to a device of the session first
    with pytest.raises(ValueError, match="local device"):
        echo(kiln.cpu(0))
    assert echo(4) == 4  # the session is still usable


# ---- remote modules and the remote time evaluator (SPEC §4.8 item 5) ------------------------


def test_remote_module_and_time_evaluator(session):
    session.upload(example_kernel("vector_add"))
    assert "libvector_add.so" in session.listdir()
    mod = session.load_module("libvector_add.so")
    assert isinstance(mod, kiln.rpc.RemoteModule)
    assert mod.entry_name == "vector_add"
    dev = session.cpu(0)
    n = 1000
    a_np = np.linspace(-3, 3, n, dtype="float32")
    b_np = np.arange(n, dtype="float32") / 7
    a = kiln.tensor(a_np, dev)
    b = kiln.tensor(b_np, dev)
    out = kiln.empty((n,), "float32", dev)
    f = mod["vector_add"]
    assert isinstance(f, kiln.Function)
    f(a, b, out, 2.0)
    np.testing.assert_allclose(out.numpy(), a_np + np.float32(2.0) * b_np, rtol=1e-6)
    mod(a, b, out, -0.5)  # the entry function
    np.testing.assert_allclose(out.numpy(), a_np - np.float32(0.5) * b_np, rtol=1e-6)

    evaluator = mod.time_evaluator("vector_add", dev, number=4, repeat=3)
    assert isinstance(evaluator, kiln.rpc.RemoteTimeEvaluator)
    result = evaluator(a, b, out, 2.0)
    assert isinstance(result, kiln.BenchmarkResult)
    assert len(result.results) == 3
    assert all(t >= 0 for t in result.results) and result.max > 0
    np.testing.assert_allclose(out.numpy(), a_np + np.float32(2.0) * b_np, rtol=1e-6)

    with pytest.raises(kiln.RPCError):
        mod.get_function("no_such_function")
    with pytest.raises(ValueError, match="number"):
        mod.time_evaluator("vector_add", dev, number=0)
    with pytest.raises(ValueError):
        mod.time_evaluator("vector_add", kiln.cpu(0))  # not a device of this session


# ---- timeouts and closed sessions (SPEC §4.8 item 11) ---------------------------------------


def test_session_timeout_raises_rpc_session_timeout_error(rpc_server):
    port = rpc_server()
    s = kiln.rpc.connect(HOST, port, key="py-test", session_timeout=1)
    sleep = s.get_function("rpc.test.sleep")
    start = time.monotonic()
    with pytest.raises(kiln.RPCSessionTimeoutError) as info:
        sleep(30.0)
    # A hang guard: a client that learned only when the call returned would take 30 s.
    assert time.monotonic() - start < 20
    assert isinstance(info.value, kiln.RPCError) and isinstance(info.value, TimeoutError)
    assert "session has expired" in str(info.value)
    assert s.closed
    with pytest.raises(RuntimeError):
        s.get_function("rpc.test.addone")


def test_closed_session_raises_instead_of_crashing(session):
    echo = session.get_function("testing.echo")
    dev = session.cpu(0)
    tensor = kiln.tensor(np.arange(4, dtype="float32"), dev)
    session.upload(example_kernel("vector_add"))
    mod = session.load_module("libvector_add.so")
    evaluator = mod.time_evaluator("vector_add", dev)
    session.close()
    session.close()  # idempotent
    assert session.closed
    assert "closed" in repr(session)
    calls = [
        lambda: session.get_function("testing.echo"),
        lambda: echo(1),
        lambda: tensor.numpy(),
        lambda: kiln.empty((4,), "float32", dev),
        lambda: session.download("libvector_add.so"),
        lambda: session.listdir(),
        lambda: mod["vector_add"],
        lambda: evaluator(tensor, tensor, tensor, 1.0),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="is closed"):
            call()


# ---- the tracker (SPEC §4.5, §4.8 items 9-10) -----------------------------------------------


def test_tracker_summary_and_request(tracker, rpc_server):
    host, port = tracker
    rpc_server(key="py-tracked", tracker=tracker)
    with kiln.rpc.connect_tracker(host, port) as t:
        assert isinstance(t, kiln.rpc.TrackerSession)
        assert (t.host, t.port) == (host, port)
        assert t.ping()
        wait_until(lambda: free_servers(t, "py-tracked") == 1, what="the server's registration")
        summary = t.summary()
        assert summary["queue_info"]["py-tracked"] == {"free": 1, "pending": 0}
        assert [s["key"] for s in summary["server_info"]] == ["server:py-tracked"]
        text = t.text_summary()
        assert text.startswith("Server List\n")
        assert "server:py-tracked" in text and "Queue Status" in text
        assert "py-tracked" in text.split("Queue Status")[1]

        remote = t.request("py-tracked", session_timeout=30, wait=20)
        assert isinstance(remote, kiln.rpc.RPCSession)
        assert remote.server_key == "server:py-tracked"
        assert remote.get_function("rpc.test.addone")(41) == 42
        assert free_servers(t, "py-tracked") == 0  # held by this session
        remote.close()
        wait_until(lambda: free_servers(t, "py-tracked") == 1, what="the server's return")

        # A key nobody serves: the wait bound turns TVM's endless wait into an error.
        start = time.monotonic()
        with pytest.raises(kiln.NotFoundError, match="no-such-key"):
            t.request("no-such-key", wait=0.5, max_retry=1)
        assert time.monotonic() - start < 15
    assert t.closed
    with pytest.raises(ValueError, match="closed"):
        t.summary()
    t.close()  # idempotent


def test_connect_tracker_errors():
    nobody = free_port()
    with pytest.raises(RuntimeError, match=f"{HOST}:{nobody}"):
        kiln.rpc.connect_tracker(HOST, nobody, connect_timeout=0.5)


def test_tracker_session_is_refused_across_threads(tracker):
    """A TrackerSession is not thread-safe: a call while another thread's call runs is refused."""
    host, port = tracker
    t = kiln.rpc.connect_tracker(host, port)
    waiting = threading.Thread(
        target=lambda: pytest.raises(kiln.NotFoundError, t.request, "nobody", wait=2, max_retry=1)
    )
    waiting.start()
    time.sleep(0.5)
    try:
        with pytest.raises(ValueError, match="another thread"):
            t.summary()
        with pytest.raises(ValueError, match="another thread"):
            t.close()
    finally:
        waiting.join(timeout=30)
    assert t.ping()
    t.close()


# ---- kiln.testing.rpc_run and RPCConfig (SPEC §1.7, §1.10) ----------------------------------


def test_rpc_run_through_the_tracker(tracker, rpc_server, vector_add):
    host, port = tracker
    rpc_server(key="py-run", tracker=tracker)
    with kiln.rpc.connect_tracker(host, port) as t:
        wait_until(lambda: free_servers(t, "py-run") == 1, what="the server's registration")
    n = 4096
    a = np.random.default_rng(1).standard_normal(n).astype("float32")
    b = np.random.default_rng(2).standard_normal(n).astype("float32")
    c = np.zeros(n, "float32")
    a_before, b_before = a.copy(), b.copy()
    config = kiln.testing.RPCConfig(
        tracker_host=host,
        tracker_port=port,
        tracker_key="py-run",
        session_timeout_sec=60,
        request_wait_sec=20,
    )
    outputs, profile = kiln.testing.rpc_run(
        vector_add,
        "cpu",
        [a, b, c, 2.0],
        evaluator_config=kiln.testing.EvaluatorConfig(number=2, repeat=4, min_repeat_ms=0),
        rpc_config=config,
    )
    assert len(outputs) == 4
    assert all(isinstance(o, np.ndarray) for o in outputs[:3]) and outputs[3] == 2.0
    np.testing.assert_allclose(outputs[2], a + np.float32(2.0) * b, rtol=1e-6)
    np.testing.assert_array_equal(outputs[0], a)
    assert np.array_equal(a, a_before) and np.array_equal(b, b_before)  # inputs untouched
    assert not c.any()  # copied to the server, not written in place
    assert isinstance(profile, kiln.BenchmarkResult)
    assert len(profile.results) == 4


@pytest.fixture
def no_tracker_env(monkeypatch):
    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_rpc_config_missing_fields_before_any_network_access(no_tracker_env, vector_add):
    def message(field, env):
        return (
            f"RPCConfig.{field} is not provided. Please provide it explicitly,"
            f"or set environment variable {env}"
        )

    args = [np.ones(4, "float32"), np.ones(4, "float32"), np.zeros(4, "float32"), 1.0]
    # Nothing listens on this port: a connection attempt would fail differently.
    nobody = free_port()
    cases = [
        (kiln.testing.RPCConfig(), message("tracker_host", "TVM_TRACKER_HOST")),
        (kiln.testing.RPCConfig(tracker_host=HOST), message("tracker_port", "TVM_TRACKER_PORT")),
        (
            kiln.testing.RPCConfig(tracker_host=HOST, tracker_port=nobody),
            message("tracker_key", "TVM_TRACKER_KEY"),
        ),
        (
            kiln.testing.RPCConfig(tracker_host="", tracker_port=0, tracker_key="k"),
            message("tracker_host", "TVM_TRACKER_HOST"),
        ),
    ]
    for config, expected in cases:
        start = time.monotonic()
        with pytest.raises(ValueError) as info:
            kiln.testing.rpc_run(vector_add, "cpu", args, rpc_config=config)
        assert str(info.value) == expected
        assert time.monotonic() - start < 5
    # The environment fills the gaps, KILN_* before TVM_*, and then the port is checked.
    no_tracker_env.setenv("TVM_TRACKER_HOST", "tvm-host")
    no_tracker_env.setenv("KILN_TRACKER_HOST", "kiln-host")
    no_tracker_env.setenv("TVM_TRACKER_PORT", "9190")
    no_tracker_env.setenv("TVM_TRACKER_KEY", "tvm-key")
    normalized = kiln.testing.RPCConfig._normalized(None)
    assert (normalized.tracker_host, normalized.tracker_port, normalized.tracker_key) == (
        "kiln-host",
        9190,
        "tvm-key",
    )


def test_rpc_run_without_rpc_config_reads_the_environment(no_tracker_env, vector_add):
    args = [np.ones(4, "float32"), np.ones(4, "float32"), np.zeros(4, "float32"), 1.0]
    with pytest.raises(ValueError) as info:
        kiln.testing.rpc_run(vector_add, "cpu", args)  # rpc_config=None
    assert str(info.value) == (
        "RPCConfig.tracker_host is not provided. Please provide it explicitly,"
        "or set environment variable TVM_TRACKER_HOST"
    )


def test_rpc_config_port_as_text(no_tracker_env):
    config = kiln.testing.RPCConfig(tracker_host=HOST, tracker_port="9190", tracker_key="k")
    assert config.tracker_port == 9190
    assert kiln.testing.RPCConfig._normalized(config).tracker_port == 9190
    with pytest.raises(ValueError):
        kiln.testing.RPCConfig(tracker_host=HOST, tracker_port="http", tracker_key="k")
    # kiln.rpc.connect_tracker takes text ports too.
    nobody = free_port()
    with pytest.raises(RuntimeError, match=str(nobody)):
        kiln.rpc.connect_tracker(HOST, str(nobody), connect_timeout=0.2)


def test_rpc_config_connects_through_the_tracker(tracker, rpc_server):
    host, port = tracker
    rpc_server(key="py-config", tracker=tracker)
    config = kiln.testing.RPCConfig(
        tracker_host=host, tracker_port=str(port), tracker_key="py-config", request_wait_sec=20
    )
    with config.connect_tracker() as t:
        assert isinstance(t, kiln.rpc.TrackerSession)
        wait_until(lambda: free_servers(t, "py-config") == 1, what="the server's registration")
    assert config.count_num_servers() == 1
    with config.connect_server() as remote:
        assert isinstance(remote, kiln.rpc.RPCSession)
        assert remote.get_function("rpc.test.addone")(1) == 2
