# SPDX-License-Identifier: Apache-2.0
"""Many libraries alive at once, each running its own code (issue 35 item 2; docs/architecture.md,
"Caches and names").

Every library here exports the same names (`addc`, or a Relax program's `main` and its kernel)
and differs from the others in one constant: `addc(a, c)` writes c = a + k. A loader that hands
one library's code to another (the dynamic loader returning an object it already has, a cache
keyed by a file name) makes some call return another library's k, which every call checks.

- TVM libraries compiled here: llvm `.so`, `.tar` exports, OpenCL builds (on PoCL), Relax
  executables; and SDK kernel libraries (tests/python/addc_kernel.cc, built with four addends,
  all named libaddc.so).
- Loaded together in a random order from 4 threads, called interleaved from 4 threads, released
  in a random order and loaded again, while TVM itself holds some of the same files.
- A file rewritten under the same path while its first version is loaded.
- The same through a measurement worker, a farm fan-out (run_many) and RPC sessions that upload
  different files under one name.

The random order is seeded from KILN_TEST_SEED (default: a fresh seed, printed on failure).
"""
import concurrent.futures
import gc
import os
import random
import shutil

import numpy as np
import pytest

import kiln
import kiln.rpc
import kiln.testing
import kiln.vm
from conftest import BUILD

tvm = pytest.importorskip("tvm", reason="apache-tvm is not installed (KILN_SKIP_TVM=1?)")

N = 1024
THREADS = 4
LLVM = list(range(1, 15))  # addends of the llvm libraries (14)
TAR = list(range(101, 107))  # of the .tar exports (6)
OPENCL = list(range(201, 209))  # of the OpenCL builds (8)
RELAX = list(range(301, 309))  # of the Relax executables (8)
SDK = [401, 402, 403, 404]  # of the SDK kernel libraries (tests/CMakeLists.txt)
SEED = int(os.environ.get("KILN_TEST_SEED", random.SystemRandom().randrange(1 << 30)))


def have_opencl():
    return any(b["type_name"] == "opencl" and b["devices"] for b in kiln.backends())


class Library:
    """One library file: its kind, its constant and where it is."""

    def __init__(self, kind, k, path):
        self.kind, self.k, self.path = kind, k, str(path)

    def __repr__(self):
        return f"{self.kind} +{self.k} ({self.path})"


def addc_prim(k, gpu):
    from tvm.script import tirx as T

    if gpu:
        @T.prim_func
        def addc(a: T.Buffer((N,), "float32"), c: T.Buffer((N,), "float32")):
            T.func_attr({"global_symbol": "addc", "tir.noalias": True})
            for bx in T.thread_binding(N // 64, thread="blockIdx.x"):
                for tx in T.thread_binding(64, thread="threadIdx.x"):
                    c[bx * 64 + tx] = a[bx * 64 + tx] + T.float32(k)
    else:
        @T.prim_func
        def addc(a: T.Buffer((N,), "float32"), c: T.Buffer((N,), "float32")):
            T.func_attr({"global_symbol": "addc", "tir.noalias": True})
            for i in range(N):
                c[i] = a[i] + T.float32(k)
    return addc


def relax_addc(k):
    from tvm.script import relax as R

    @tvm.script.ir_module
    class AddC:
        @R.function
        def main(x: R.Tensor((N,), "float32")):
            with R.dataflow():
                y = R.add(x, R.const(k, "float32"))
                R.output(y)
            return y

    return AddC


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """Every library, each file named as all the others of its kind (one folder per library)."""
    out = tmp_path_factory.mktemp("many_libraries")
    libs = []

    def place(kind, k):
        folder = out / f"{kind}{k}"
        folder.mkdir()
        return folder

    for k in LLVM:
        path = place("llvm", k) / "addc.so"
        tvm.compile(addc_prim(k, gpu=False), target="llvm").export_library(str(path))
        libs.append(Library("llvm", k, path))
    for k in TAR:
        path = place("tar", k) / "addc.tar"
        tvm.compile(addc_prim(k, gpu=False), target="llvm").export_library(str(path))
        libs.append(Library("tar", k, path))
    if have_opencl():
        target = tvm.target.Target("opencl", host="llvm")
        for k in OPENCL:
            path = place("opencl", k) / "addc.so"
            tvm.compile(addc_prim(k, gpu=True), target=target).export_library(str(path))
            libs.append(Library("opencl", k, path))
    for k in RELAX:
        path = place("relax", k) / "addc.so"
        tvm.compile(relax_addc(k), target="llvm").export_library(str(path))
        libs.append(Library("relax", k, path))
    for i, k in enumerate(SDK, start=1):
        built = BUILD / "tests" / "many_libraries" / f"sdk{i}" / "libaddc.so"
        if not built.exists():
            pytest.fail(f"{built} is missing: build the test kernels (ninja -C build)")
        path = place("sdk", k) / "libaddc.so"
        shutil.copyfile(built, path)
        libs.append(Library("sdk", k, path))
    assert len(libs) >= 32, libs
    return libs


def device_of(lib):
    return kiln.opencl(0) if lib.kind == "opencl" else kiln.cpu(0)


def check_call(lib, module, rng):
    """Calls `module` (loaded from `lib`) on fresh numbers; fails naming the library and the
    constant it got when the answer is not a + lib.k."""
    a = rng.standard_normal(N).astype("float32")
    if lib.kind == "relax":
        got = kiln.vm.VirtualMachine(module, kiln.cpu())["main"](a).numpy()
    else:
        dev = device_of(lib)
        c = kiln.empty((N,), "float32", dev)
        module["addc"](kiln.tensor(a, dev), c)
        got = c.numpy()
    if not np.allclose(got, a + np.float32(lib.k)):
        seen = np.round(np.median(got - a), 3)
        raise AssertionError(f"{lib}: got a + {seen}, not a + {lib.k} (KILN_TEST_SEED={SEED})")


def load_all(libs, order, pool):
    """Loads libs[i] for i in `order`, spread over the pool's threads; returns {i: module}."""
    futures = {i: pool.submit(kiln.load_module, libs[i].path) for i in order}
    return {i: f.result() for i, f in futures.items()}


def call_interleaved(libs, modules, pool, rounds=3):
    """Each thread calls every loaded library `rounds` times in an order of its own."""

    def worker(t):
        rng = np.random.default_rng(SEED + t)
        order = [i for _ in range(rounds) for i in modules]
        random.Random(SEED + t).shuffle(order)
        for i in order:
            check_call(libs[i], modules[i], rng)
        return len(order)

    return sum(f.result() for f in [pool.submit(worker, t) for t in range(THREADS)])


def test_many_libraries_each_run_their_own_code(libraries):
    libs = libraries
    rng = random.Random(SEED)
    # TVM holds some of the same files in this process, and calls them too.
    held = [lib for lib in libs if lib.kind == "llvm"][:4]
    tvm_modules = [(lib, tvm.runtime.load_module(lib.path)) for lib in held]
    relax_lib = next(lib for lib in libs if lib.kind == "relax")
    tvm_vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(relax_lib.path), tvm.cpu())

    def check_tvm():
        a = np.random.default_rng(SEED).standard_normal(N).astype("float32")
        for lib, m in tvm_modules:
            c = tvm.runtime.tensor(np.zeros(N, "float32"))
            m["addc"](tvm.runtime.tensor(a), c)
            np.testing.assert_allclose(c.numpy(), a + np.float32(lib.k), err_msg=f"TVM's {lib}")
        got = tvm_vm["main"](tvm.runtime.tensor(a)).numpy()
        np.testing.assert_allclose(got, a + np.float32(relax_lib.k), err_msg=f"TVM's {relax_lib}")

    check_tvm()
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        order = list(range(len(libs)))
        rng.shuffle(order)
        modules = load_all(libs, order, pool)
        assert call_interleaved(libs, modules, pool) == THREADS * 3 * len(libs)
        check_tvm()

        # Released one by one in a random order, the rest still called in between.
        release = list(modules)
        rng.shuffle(release)
        for n, i in enumerate(release):
            del modules[i]
            if n % 4 == 3:
                gc.collect()
                call_interleaved(libs, modules, pool, rounds=1)
        gc.collect()

        # Loaded again (the same files, a new order), and the first half once more beside them:
        # two live modules of one file are two objects too.
        again = list(range(len(libs)))
        rng.shuffle(again)
        modules = load_all(libs, again, pool)
        doubles = load_all(libs, again[: len(libs) // 2], pool)
        call_interleaved(libs, modules, pool)
        call_interleaved(libs, doubles, pool)
    check_tvm()


@pytest.mark.parametrize("kind", ["llvm", "sdk"])
def test_a_file_rewritten_under_its_path_loads_its_new_code(libraries, tmp_path, kind):
    """A library rebuilt at the path of one still loaded: the new load runs the new bytes."""
    first, second = [lib for lib in libraries if lib.kind == kind][:2]
    path = tmp_path / os.path.basename(first.path)
    shutil.copyfile(first.path, path)
    tvm_first = tvm.runtime.load_module(str(path)) if kind == "llvm" else None
    old = kiln.load_module(str(path))
    # As a build does: a new file moved over the old name.
    shutil.copyfile(second.path, str(path) + ".new")
    os.replace(str(path) + ".new", path)
    new = kiln.load_module(str(path))
    rng = np.random.default_rng(SEED)
    for _ in range(3):
        check_call(Library(kind, first.k, path), old, rng)
        check_call(Library(kind, second.k, path), new, rng)
    # Rewritten in place (the same inode) as well.
    with open(path, "r+b") as f:
        f.write(open(first.path, "rb").read())
        f.truncate()
    newest = kiln.load_module(str(path))
    check_call(Library(kind, first.k, path), newest, rng)
    check_call(Library(kind, second.k, path), new, rng)
    del tvm_first


def cpu_libraries(libraries, kinds=("llvm", "sdk", "tar")):
    return [lib for lib in libraries if lib.kind in kinds]


QUICK = kiln.testing.EvaluatorConfig(number=1, repeat=1)


def test_a_worker_runs_each_librarys_own_code(libraries):
    """Files with one name and modules exported under one name, through one worker, interleaved."""
    libs = cpu_libraries(libraries)
    rng = random.Random(SEED)
    order = libs * 2
    rng.shuffle(order)
    a = np.random.default_rng(SEED).standard_normal(N).astype("float32")
    with kiln.testing.Worker() as worker:
        for lib in order[: len(order) // 2]:
            outputs, _ = worker.run_file(lib.path, "cpu", [a, np.zeros(N, "float32")], QUICK,
                                         function="addc")
            np.testing.assert_allclose(outputs[1], a + np.float32(lib.k), err_msg=repr(lib))
        modules = {lib.path: kiln.load_module(lib.path) for lib in libs}
        for lib in order[len(order) // 2:]:
            outputs, _ = worker.run(modules[lib.path], "cpu", [a, np.zeros(N, "float32")], QUICK)
            np.testing.assert_allclose(outputs[1], a + np.float32(lib.k), err_msg=repr(lib))


def test_a_farm_fan_out_runs_each_librarys_own_code(libraries, tmp_path):
    from test_meta_schedule import Farm

    libs = cpu_libraries(libraries)
    rng = random.Random(SEED)
    rng.shuffle(libs)
    a = np.random.default_rng(SEED).standard_normal(N).astype("float32")
    farm = Farm(tmp_path, "many")
    try:
        farm.add_server()
        farm.add_server()
        tasks = [kiln.testing.RunTask(kiln.load_module(lib.path), "cpu",
                                      [a, np.zeros(N, "float32")], QUICK) for lib in libs]
        outcomes = kiln.testing.run_many(tasks, rpc_config=farm.config(), jobs=2)
    finally:
        farm.stop()
    for lib, outcome in zip(libs, outcomes):
        assert outcome.ok, (lib, outcome.error)
        np.testing.assert_allclose(outcome.outputs[1], a + np.float32(lib.k), err_msg=repr(lib))


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_rpc_uploads_under_one_name_run_their_own_code(libraries, rpc_server, isolation):
    """Two sessions at once (in processes of their own, or both in the server's), each uploading
    different files under one name, and loading each version while the previous one is still
    loaded."""
    port = rpc_server("--max-sessions", "2", "--session-isolation", isolation)
    libs = cpu_libraries(libraries, kinds=("llvm",))[:4]
    sessions = [kiln.rpc.connect("127.0.0.1", port, key="py-test") for _ in range(2)]
    a = np.random.default_rng(SEED).standard_normal(N).astype("float32")
    loaded = []  # (session, lib, remote module), all kept alive
    for round_ in range(2):
        for s, session in enumerate(sessions):
            lib = libs[(2 * round_ + s) % len(libs)]
            session.upload(lib.path, "addc.so")
            loaded.append((session, lib, session.load_module("addc.so")))
    for session, lib, module in loaded * 2:
        dev = session.cpu(0)
        c = kiln.empty((N,), "float32", dev)
        module["addc"](kiln.tensor(a, dev), c)
        np.testing.assert_allclose(c.numpy(), a + np.float32(lib.k), err_msg=repr(lib))
