# SPDX-License-Identifier: Apache-2.0
"""Python callables owned by Kiln Functions: dropped without waiting for the GIL, released at
interpreter exit (python/src/held_objects.cc). Each case runs in a child interpreter, since what
is checked happens as that interpreter ends or must not be disturbed by this one's state."""
import os
import subprocess
import sys
import time

import kiln

# A LocalSession's server holds the only copy of a Python function (the registry's was
# replaced); dropping the session ends its server thread, which drops the callable.
DROP_SESSION_CHILD = r"""
import time, kiln, kiln.rpc as rpc
kiln.register_func("app.add", lambda x: x + 1)
s = rpc.LocalSession()
f = s.get_function("app.add")
assert f(41) == 42
kiln.register_func("app.add", lambda x: x + 2, override=True)
del f
start = time.monotonic()
del s
print("dropped in %.3f s" % (time.monotonic() - start))
"""

# Module globals that hold Functions of a callable whose globals are these very globals: a
# cycle through C++ that only the release at exit breaks. Left open on purpose.
EXIT_CHILD = r"""
import os, threading, kiln, kiln.rpc as rpc

class Witness:
    def __del__(self):
        os.write(1, b"globals freed\n")

witness = Witness()
kiln.register_func("app.add", lambda x: x + 1)
local = kiln.get_global_func("app.add")
worker = threading.Thread(target=lambda: local(1))
worker.start(); worker.join()
session = rpc.LocalSession()
remote = session.get_function("app.add")
assert remote(41) == 42
print("done", flush=True)
"""

# A Function called by an atexit handler that runs after kiln's (registered before kiln was
# imported): the call says why it cannot run instead of crashing.
CALL_AFTER_RELEASE_CHILD = r"""
import atexit
functions = []
def late():
    try:
        functions[0](1)
        print("called")
    except RuntimeError as e:
        print("RuntimeError:", e)
atexit.register(late)
import kiln
kiln.register_func("app.identity", lambda x: x)
functions.append(kiln.get_global_func("app.identity"))
assert functions[0](7) == 7
"""


def run_child(code, timeout=60):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), env.get("PYTHONPATH", "")])
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=timeout)
    return proc, time.monotonic() - start


def test_dropping_a_local_session_does_not_wait_for_the_gil():
    """Its server thread drops the last copy of a Python function while the thread that closes
    the session holds the GIL: that used to wait out the server's 5 s stop grace and 10 s in
    all, with a warning that a call did not return."""
    proc, _ = run_child(DROP_SESSION_CHILD)
    assert proc.returncode == 0, proc.stderr
    seconds = float(proc.stdout.split()[2])
    assert seconds < 4.0, proc.stdout + proc.stderr  # a liveness bound: the stall was 10 s
    assert "did not return" not in proc.stderr, proc.stderr


def test_functions_of_python_callables_left_at_exit_are_released():
    """Globals that hold Functions of their own callables (locally, on a thread, through a
    LocalSession) are freed at exit, and nanobind reports no leak."""
    proc, _ = run_child(EXIT_CHILD)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert "globals freed" in proc.stdout, proc.stdout + proc.stderr
    assert "leaked" not in proc.stderr, proc.stderr


def test_a_call_after_the_release_at_exit_is_an_error_naming_the_function():
    proc, _ = run_child(CALL_AFTER_RELEASE_CHILD)
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeError: the Python function 'app.identity' was released at interpreter exit" \
        in proc.stdout, proc.stdout + proc.stderr
