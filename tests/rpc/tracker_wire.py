#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Drives a running tracker over its wire protocol byte by byte, as SPEC.md section 4.5 writes
it and as TVM's Python peers send it: int32 magic, then "<i" lengths and json.dumps text.
Checks every reply. Standard library only; starts nothing itself.

    tracker_wire.py [--reference] PORT [STOP_KEY]

--reference skips the checks of Kiln's extensions (the REQUEST wait bound), so the script
also runs against TVM's own tracker (python -m tvm.exec.rpc_tracker). Exits 0 when every check holds (and, given STOP_KEY, after stopping the tracker with it),
1 with a message naming the failed check otherwise.
"""
import json
import socket
import struct
import sys

RPC_TRACKER_MAGIC = 0x2F271
FAIL, SUCCESS, PING, STOP, PUT, REQUEST, UPDATE_INFO, SUMMARY, GET_PENDING_MATCHKEYS = range(-1, 8)
TIMEOUT = 5.0


def fail(message):
    print("tracker_wire.py: FAILED: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def recvall(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the tracker closed the connection")
        data += chunk
    return data


def connect(port, magic=RPC_TRACKER_MAGIC):
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.sendall(struct.pack("<i", magic))
    return sock


def handshake(port):
    sock = connect(port)
    reply = recvall(sock, 4)
    check(reply == struct.pack("<i", RPC_TRACKER_MAGIC),
          "magic reply: expected %r, got %r" % (struct.pack("<i", RPC_TRACKER_MAGIC), reply))
    return sock


def send_text(sock, text):
    data = text.encode("utf-8")
    sock.sendall(struct.pack("<i", len(data)) + data)


def recv_text(sock):
    (size,) = struct.unpack("<i", recvall(sock, 4))
    check(0 < size <= 1 << 20, "reply length %d" % size)
    return recvall(sock, size).decode("utf-8")


def call(sock, value, expected=None):
    """Sends json.dumps(value) and returns the reply text and its value. With `expected`,
    the reply text must be exactly json.dumps(expected), as TVM's tracker writes it."""
    send_text(sock, json.dumps(value))
    text = recv_text(sock)
    check(text == json.dumps(json.loads(text)),
          "reply to %s is not written as json.dumps writes it: %s" % (json.dumps(value), text))
    if expected is not None:
        check(text == json.dumps(expected),
              "reply to %s: expected %s, got %s" % (json.dumps(value), json.dumps(expected), text))
    return text, json.loads(text)


def closed(sock):
    """True when the tracker closes the connection (whatever it sent before is skipped)."""
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def main():
    args = sys.argv[1:]
    reference = "--reference" in args
    args = [a for a in args if a != "--reference"]
    if len(args) not in (1, 2):
        fail("usage: tracker_wire.py [--reference] PORT [STOP_KEY]")
    port = int(args[0])
    stop_key = args[1] if len(args) == 2 else None

    # Handshake and PING: the exact bytes.
    sock = handshake(port)
    sock.sendall(struct.pack("<i", 3) + b"[1]")
    check(recvall(sock, 5) == b"\x01\x00\x00\x000", "PING: expected the 5 bytes 01 00 00 00 '0'")
    call(sock, [PING], SUCCESS)

    # A server, as TVM's Python server registers: UPDATE_INFO then PUT (tuples become lists).
    server = handshake(port)
    call(server, [UPDATE_INFO, {"key": "server:wire", "addr": [None, 9091]}], SUCCESS)
    call(server, [PUT, "wire", (9091, "wire:0.25"), None], SUCCESS)
    call(server, [GET_PENDING_MATCHKEYS], ["wire:0.25"])
    # A second one with a custom address and a key containing ':'.
    server2 = handshake(port)
    call(server2, [UPDATE_INFO, {"key": "server:10.0.0.1:5555", "addr": ["10.9.8.7", 9092]}],
         SUCCESS)
    call(server2, [PUT, "10.0.0.1:5555", [9092, "10.0.0.1:5555:0.5"], "10.9.8.7"], SUCCESS)

    # SUMMARY: byte for byte what TVM's tracker writes for this state.
    client = handshake(port)
    _, summary = call(client, [SUMMARY])
    check(summary[0] == SUCCESS, "SUMMARY code %r" % summary[0])
    queue_info = summary[1]["queue_info"]
    check(queue_info.get("wire") == {"free": 1, "pending": 0}, "queue wire: %r" % queue_info)
    check(queue_info.get("10.0.0.1:5555") == {"free": 1, "pending": 0},
          "queue 10.0.0.1:5555: %r" % queue_info)
    servers = summary[1]["server_info"]
    check({"key": "server:wire", "addr": ["127.0.0.1", 9091]} in servers,
          "server_info lacks wire (null host becomes the peer IP): %r" % servers)
    check({"key": "server:10.0.0.1:5555", "addr": ["10.9.8.7", 9092]} in servers,
          "server_info lacks 10.0.0.1:5555: %r" % servers)
    check(len(servers) == 2, "server_info lists clients: %r" % servers)

    # REQUEST: granted at once, [0, [host, port, matchkey]].
    call(client, [REQUEST, "wire", "", 1], [SUCCESS, ["127.0.0.1", 9091, "wire:0.25"]])
    call(server, [GET_PENDING_MATCHKEYS], [])
    call(client, [REQUEST, "10.0.0.1:5555", "", 1],
         [SUCCESS, ["10.9.8.7", 9092, "10.0.0.1:5555:0.5"]])

    # A waiting REQUEST is answered when a value is PUT; higher priority first.
    low = handshake(port)
    high = handshake(port)
    send_text(low, json.dumps([REQUEST, "wire", "", 1]))
    call(low, [PING], SUCCESS)  # the tracker has read the request (it answers in order)
    send_text(high, json.dumps([REQUEST, "wire", "", 10]))
    call(high, [PING], SUCCESS)
    _, summary = call(client, [SUMMARY])
    check(summary[1]["queue_info"]["wire"] == {"free": 0, "pending": 2},
          "two waiting requests: %r" % summary[1]["queue_info"]["wire"])
    call(server, [PUT, "wire", [9091, "wire:0.75"], None], SUCCESS)
    check(recv_text(high) == json.dumps([SUCCESS, ["127.0.0.1", 9091, "wire:0.75"]]),
          "the priority-10 request gets the first value")
    call(server, [PUT, "wire", [9091, "wire:0.875"], None], SUCCESS)
    check(recv_text(low) == json.dumps([SUCCESS, ["127.0.0.1", 9091, "wire:0.875"]]),
          "the priority-1 request gets the second value")

    # Kiln's extension: a fifth element bounds the wait; the answer is [-1, message].
    if not reference:
        _, reply = call(client, [REQUEST, "absent", "", 1, 0.1])
        check(reply[0] == FAIL and "'absent'" in reply[1], "bounded REQUEST: %r" % (reply,))
        call(client, [PING], SUCCESS)

    # A server that goes away takes its free values along.
    call(server2, [PUT, "10.0.0.1:5555", [9092, "10.0.0.1:5555:0.125"], "10.9.8.7"], SUCCESS)
    server2.close()
    for _ in range(250):
        _, summary = call(client, [SUMMARY])
        if summary[1]["queue_info"]["10.0.0.1:5555"]["free"] == 0:
            break
    check(summary[1]["queue_info"]["10.0.0.1:5555"] == {"free": 0, "pending": 0},
          "a closed server's values are removed: %r" % summary[1]["queue_info"])
    check(len(summary[1]["server_info"]) == 1, "a closed server leaves server_info")

    # Hostile input closes only that connection.
    for header in (struct.pack("<i", 0x7FFFFFFF), struct.pack("<i", (1 << 20) + 1),
                   struct.pack("<i", 0), struct.pack("<i", -1)):
        bad = handshake(port)
        bad.sendall(header)
        check(closed(bad), "length header %r closes the connection" % header)
    bad = connect(port, magic=0xFF271)
    check(closed(bad), "a wrong magic closes the connection")
    for text in ("[1", "{}", "[99]", '[3, "k"]'):
        bad = handshake(port)
        send_text(bad, text)
        check(closed(bad), "%r closes the connection" % text)
    call(client, [PING], SUCCESS)
    call(server, [GET_PENDING_MATCHKEYS], [])

    # STOP: a wrong key is refused; the right one stops the tracker.
    call(client, [STOP, "not-the-key"], FAIL)
    if stop_key is not None:
        call(client, [STOP, stop_key], SUCCESS)
        check(closed(client), "the tracker closes connections when it stops")
    print("tracker_wire.py: all checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        fail("%s: %s" % (type(err).__name__, err))
