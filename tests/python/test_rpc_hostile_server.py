# SPDX-License-Identifier: Apache-2.0
"""kiln.rpc against servers that cannot be trusted (issue 37 items 7 and 8): a reply's length is
a claim, not a size to allocate; and connect_tracker reads $KILN_TRACKER_TOKEN as its error
message says. The fake server below speaks just enough of the session protocol
(docs/rpc-protocol.md: the plaintext hello, then frames) from a raw socket."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kiln
from conftest import Process, free_port, wait_for_port

HOST = "127.0.0.1"

# A child process (its peak resident memory is its own): a fake server on a thread accepts one
# client, completes the hello, answers the first request (a Download) with a Data frame that
# announces ANNOUNCED bytes, sends 100 of them and closes. The client's download must fail
# naming the closed connection, and its peak resident set (VmHWM) must not grow by anything
# like the announced size.
CHILD = textwrap.dedent(r"""
    import json, socket, struct, sys, threading
    import kiln

    ANNOUNCED = int(sys.argv[1])

    def recvall(conn, n):
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the client closed")
            data += chunk
        return data

    def serve(listener):
        conn, _ = listener.accept()
        with conn:
            # The client's hello: magic, version, reserved, key, session timeout.
            hello = recvall(conn, 8 + 2 + 2 + 4)
            assert hello[:8] == b"KILN-RPC", hello
            (key_length,) = struct.unpack("<I", hello[12:16])
            recvall(conn, key_length + 8)
            message = b"server:fake"
            conn.sendall(b"KILN-RPC" + struct.pack("<HHI", 3, 0, len(message)) + message)
            # The request: u64 length (code included), u32 code, body.
            length, code = struct.unpack("<QI", recvall(conn, 12))
            recvall(conn, length - 4)
            assert code == 13, code  # Download
            conn.sendall(struct.pack("<QI", 4 + ANNOUNCED, 102) + b"x" * 100)  # Data

    def peak_kib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmHWM in /proc/self/status")

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    server = threading.Thread(target=serve, args=(listener,), daemon=True)
    server.start()
    session = kiln.rpc.connect("127.0.0.1", listener.getsockname()[1], session_timeout=30)
    before = peak_kib()
    error = ""
    try:
        session.download("big.bin")
    except Exception as e:  # noqa: BLE001 (what it is is the test's business)
        error = f"{type(e).__name__}: {e}"
    after = peak_kib()
    server.join(10)
    print(json.dumps({"before_kib": before, "after_kib": after, "error": error}))
""")


def test_a_download_header_announcing_gigabytes_allocates_nothing_up_front():
    announced = 4 << 30
    out = subprocess.run([sys.executable, "-c", CHILD, str(announced)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "RPCError" in result["error"] and "closed the connection" in result["error"], result
    grown_mib = (result["after_kib"] - result["before_kib"]) / 1024
    # The buffer grows with the bytes that arrive (1 MiB steps): 100 bytes cost one step, not
    # the 4096 MiB the header claimed.
    assert grown_mib < 64, f"peak resident memory grew by {grown_mib:.0f} MiB: {result}"


@pytest.fixture
def token_tracker(tmp_path):
    """A `kiln tracker` that requires a tracker token: yields (host, port, token)."""
    token = "tracker-token-0123456789"
    token_file = tmp_path / "tracker-token"
    token_file.write_text(token + "\n")
    port = free_port()
    p = Process("tracker", "--host", HOST, "--port", str(port), "--port-end", str(port + 1),
                "--token-file", str(token_file))
    try:
        wait_for_port(port, p.process)
        yield HOST, port, token
    finally:
        p.stop()


def test_connect_tracker_reads_the_tracker_token_from_the_environment(token_tracker,
                                                                      monkeypatch):
    host, port, token = token_tracker
    monkeypatch.setenv("KILN_TRACKER_TOKEN", token)
    with kiln.rpc.connect_tracker(host, port) as t:
        assert t.ping()
    # Given explicitly, the argument wins over the variable.
    monkeypatch.setenv("KILN_TRACKER_TOKEN", "another-token-0123456789")
    with kiln.rpc.connect_tracker(host, port, tracker_token=token) as t:
        assert t.ping()
    # An empty variable is no token, as in C++: the tracker's refusal says what to set.
    monkeypatch.setenv("KILN_TRACKER_TOKEN", "")
    with pytest.raises(RuntimeError, match="requires a tracker token"):
        kiln.rpc.connect_tracker(host, port, connect_timeout=2).ping()
    monkeypatch.delenv("KILN_TRACKER_TOKEN")
    with pytest.raises(RuntimeError, match=r"\$KILN_TRACKER_TOKEN"):
        kiln.rpc.connect_tracker(host, port, connect_timeout=2).ping()
