# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python package's tests: where the build put the example kernels, the `kiln`
tool and the TVM fixtures. Run by ctest (test 'python', with PYTHONPATH=<build>/python) and by
tools/dev.sh test against the installed wheel (KILN_TEST_INSTALLED=1).

Environment: KILN_BUILD_DIR (default <repo>/build), KILN_TVM_FIXTURES (default
<build>/tvm_fixtures)."""

import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("KILN_BUILD_DIR", REPO / "build"))
KERNELS = BUILD / "examples" / "kernels"
VM_EXAMPLES = BUILD / "examples" / "vm"
TVM_FIXTURES = pathlib.Path(os.environ.get("KILN_TVM_FIXTURES", BUILD / "tvm_fixtures"))
KILN_TOOL = BUILD / "bin" / "kiln"

import kiln  # noqa: E402  (after the paths, for the messages below)

if os.environ.get("KILN_TEST_INSTALLED") == "1" and "site-packages" not in kiln.__file__:
    raise RuntimeError(f"KILN_TEST_INSTALLED=1 but kiln comes from {kiln.__file__}")


def example_kernel(name):
    """The path of build/examples/kernels/lib<name>.so (vector_add, calls, matmul, relu,
    bias_add)."""
    path = KERNELS / f"lib{name}.so"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the example kernels (ninja -C build)")
    return str(path)


def tvm_fixture(name):
    """A TVM-compiled fixture (tests/tvm/make_fixtures.py), or a skip naming why it is absent."""
    path = TVM_FIXTURES / name
    if not path.exists():
        pytest.skip(f"{path} is missing: the TVM fixtures are made by ctest's tvm_fixtures "
                    "(needs apache-tvm in build/.venv-tvm; KILN_SKIP_TVM=1 skips them)")
    return str(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


class Process:
    """A `kiln` subcommand running for a test; stopped (SIGTERM, then SIGKILL) afterwards."""

    def __init__(self, *args):
        if not KILN_TOOL.exists():
            pytest.fail(f"{KILN_TOOL} is missing: build the kiln tool (ninja -C build kiln_tool)")
        self.process = subprocess.Popen([str(KILN_TOOL), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def tracker():
    """A `kiln tracker` on a free loopback port: yields (host, port)."""
    port = free_port()
    p = Process("tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1))
    try:
        wait_for_port(port, p.process)
        yield "127.0.0.1", port
    finally:
        p.stop()


@pytest.fixture
def rpc_server(tmp_path):
    """A factory: rpc_server(key=..., tracker=(host, port) or None, extra args...) starts a
    `kiln rpc-server` with the test functions on a free loopback port and returns its port."""
    started = []

    def start(*extra, key="py-test", tracker=None):
        port = free_port()
        args = ["rpc-server", "--host", "127.0.0.1", "--port", str(port), "--port-end",
                str(port + 1), "--key", key,
                "--enable-test-functions", "--work-dir", str(tmp_path / f"server{len(started)}")]
        if tracker is not None:
            args += ["--tracker", f"{tracker[0]}:{tracker[1]}"]
        p = Process(*args, *extra)
        started.append(p)
        wait_for_port(port, p.process)
        return port

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def vector_add():
    """The example vector_add kernel library: vector_add(a, b, out, scale) -> out = a + scale*b."""
    return kiln.load_module(example_kernel("vector_add"))


def have_tvm():
    try:
        import tvm  # noqa: F401
    except ImportError:
        return False
    return True


PYTHON = sys.executable
HAVE_CXX = shutil.which(os.environ.get("CXX", "c++")) is not None


LLM_TESTS = REPO / "tests" / "llm"


def _run_llm_fixture_script(args, what, timeout):
    """Run a script of tests/llm/ with this interpreter; skip the tests with its output's tail
    if it fails (the model does not compile with this TVM)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(
        kiln.__file__)), env.get("PYTHONPATH", "")] if p)
    try:
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{what} took over {timeout} s")
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        pytest.skip(f"{what} failed (exit {done.returncode}):\n" + "\n".join(tail))


@pytest.fixture(scope="session")
def llm_fixture_dir(tmp_path_factory):
    """The tiny Llama of tests/llm/tiny_llama.py compiled by TVM (llvm/lib.so, opencl/lib.so or
    opencl/SKIPPED, params/) with TVM's reference.json (tests/llm/tvm_reference.py), built once
    per session (about 15 s), or the folder KILN_LLM_FIXTURES names. Skips without apache-tvm."""
    import importlib.util

    if importlib.util.find_spec("tvm") is None:
        pytest.skip(f"apache-tvm is not installed in {sys.executable}: the model is compiled "
                    "and the reference is run by TVM 0.27 (build/.venv-tvm has it)")
    prebuilt = os.environ.get("KILN_LLM_FIXTURES")
    if prebuilt:
        out = pathlib.Path(prebuilt)
        if not (out / "llvm" / "lib.so").is_file():
            pytest.fail(f"KILN_LLM_FIXTURES={prebuilt} holds no llvm/lib.so "
                        f"(write it with: python {LLM_TESTS / 'tiny_llama.py'} {prebuilt})")
    else:
        out = tmp_path_factory.mktemp("tiny_llama")
        _run_llm_fixture_script([str(LLM_TESTS / "tiny_llama.py"), str(out)],
                                "compiling the tiny Llama", 900)
    if not (out / "reference.json").is_file():
        _run_llm_fixture_script([str(LLM_TESTS / "tvm_reference.py"), str(out)],
                                "TVM's reference runs", 600)
    return out
