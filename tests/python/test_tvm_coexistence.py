# SPDX-License-Identifier: Apache-2.0
"""Kiln beside TVM in one process (issue 26, docs/tvm-interop.md "Beside TVM").

The same TVM-compiled files are loaded by TVM and by Kiln in one process, in either order, and
`import tvm` comes before or after Kiln has loaded TVM libraries. Each case runs in a child
process (a segfault is a failed case, not a lost run) and reports, per call, the results and
which threads ran the parallel tasks; Kiln's debug log says how many workspace allocations and
parallel launches Kiln's services served. The checks: every call of either runtime gives
numpy's numbers; Kiln's parallel tasks run on Kiln's team ("kiln-cpu-<i>" threads), TVM's never
do; Kiln's services served exactly Kiln's calls (a TVM call that reached Kiln's services, or a
Kiln call that reached TVM's, changes the counts).
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln

tvm = pytest.importorskip("tvm", reason="apache-tvm is not installed (KILN_SKIP_TVM=1?)")

PARALLEL_TASKS = 64
N = 65536


def compile_libraries(out):
    """par.so (a parallel loop recording its threads), ws.so (a workspace), both.so (both)."""
    from tvm.script import tirx as T

    @T.prim_func
    def par(tids: T.Buffer((PARALLEL_TASKS,), "int32")):
        T.func_attr({"global_symbol": "par", "tir.noalias": True})
        for i in T.parallel(PARALLEL_TASKS):
            tids[i] = T.call_extern("int32", "gettid")

    @T.prim_func
    def ws(x: T.Buffer((N,), "float32"), y: T.Buffer((N,), "float32")):
        T.func_attr({"global_symbol": "ws", "tir.noalias": True})
        tmp = T.alloc_buffer((N,), "float32")
        for i in range(N):
            tmp[i] = x[i] * T.float32(2)
        for i in range(N):
            y[i] = tmp[N - 1 - i] + T.float32(1)

    @T.prim_func
    def both(x: T.Buffer((N,), "float32"), y: T.Buffer((N,), "float32"),
             tids: T.Buffer((PARALLEL_TASKS,), "int32")):
        T.func_attr({"global_symbol": "both", "tir.noalias": True})
        tmp = T.alloc_buffer((N,), "float32")
        for i in T.parallel(N):
            tmp[i] = x[i] * T.float32(2)
        for i in range(N):
            y[i] = tmp[N - 1 - i] + T.float32(1)
        for i in T.parallel(PARALLEL_TASKS):
            tids[i] = T.call_extern("int32", "gettid")

    for name, func in (("par", par), ("ws", ws), ("both", both)):
        tvm.compile(func, target="llvm").export_library(os.path.join(out, f"{name}.so"))


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    out = tmp_path_factory.mktemp("coexistence")
    compile_libraries(str(out))
    return out


# The child's helpers: call a library's function with either runtime and report the numbers'
# correctness and the names of the threads that ran its parallel tasks.
PRELUDE = textwrap.dedent("""
    import gc, json, os, sys, threading
    import numpy as np
    LIBS = sys.argv[1]
    N = %d
    TASKS = %d
    report = {"calls": []}

    def thread_names(tids):
        main = threading.get_native_id()
        names = set()
        for tid in set(int(t) for t in tids):
            if tid == main:
                names.add("<main>")
            else:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names.add(f.read().strip())
        return sorted(names)

    def call(runtime, mod, name):
        x = np.arange(N, dtype="float32")
        expected = x[::-1] * 2 + 1
        if runtime == "tvm":
            import tvm
            dev = tvm.cpu()
            wrap = lambda a: tvm.runtime.tensor(a, dev)
            unwrap = lambda t: t.numpy()
        else:
            wrap = lambda a: a
            unwrap = lambda a: a
        entry = {"runtime": runtime, "lib": name}
        if name in ("ws", "both"):
            y = wrap(np.zeros(N, "float32"))
            tids = wrap(np.zeros(TASKS, "int32"))
            mod[name](wrap(x), y, tids) if name == "both" else mod[name](wrap(x), y)
            entry["ok"] = bool(np.array_equal(unwrap(y), expected))
            if name == "both":
                entry["threads"] = thread_names(unwrap(tids))
        else:
            tids = wrap(np.zeros(TASKS, "int32"))
            mod[name](tids)
            entry["ok"] = bool((unwrap(tids) > 0).all())
            entry["threads"] = thread_names(unwrap(tids))
        report["calls"].append(entry)

    def load(runtime, name):
        path = os.path.join(LIBS, name + ".so")
        if runtime == "tvm":
            import tvm
            return tvm.runtime.load_module(path)
        import kiln
        return kiln.load_module(path)

    def finish():
        # Unload Kiln's copies now: their debug line says what Kiln's services served.
        gc.collect()
        print(json.dumps(report))
""" % (N, PARALLEL_TASKS))


def run_child(libraries, body, env_extra=None, cpus=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), env.get("PYTHONPATH", "")])
    env["KILN_LOG"] = "debug"
    env["TVM_NUM_THREADS"] = "2"  # TVM's own pool, even where it counts one physical core
    env.update(env_extra or {})
    command = [sys.executable, "-c", PRELUDE + textwrap.dedent(body) + "\nfinish()\n",
               str(libraries)]
    if cpus is not None:
        command = ["taskset", "-c", cpus] + command
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, (
        f"the child exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["stderr"] = proc.stderr
    return report


def served(report, lib):
    """(workspace allocations, parallel launches) Kiln's services served for `lib`, from the log."""
    m = re.search(rf"{lib}\.so: served (\d+) workspace allocations \(\d+ bytes\) from Kiln's "
                  rf"backends and (\d+) parallel launches", report["stderr"])
    assert m, f"no service summary for {lib}.so in Kiln's debug log:\n{report['stderr']}"
    return int(m.group(1)), int(m.group(2))


def check_calls(report):
    cpus = len(os.sched_getaffinity(0))
    for c in report["calls"]:
        assert c["ok"], f"wrong numbers: {c}"
        if "threads" not in c:
            continue
        others = [t for t in c["threads"] if t != "<main>"]
        if c["runtime"] == "kiln":
            assert all(t.startswith("kiln-cpu-") for t in others), (
                f"a Kiln call ran tasks on threads that are not Kiln's team: {c}")
            if cpus > 1:
                assert others, f"a Kiln call on {cpus} CPUs ran no task on the team: {c}"
        else:
            assert not any(t.startswith("kiln-cpu-") for t in others), (
                f"a TVM call ran tasks on Kiln's team: {c}")


def expected_service_counts(report, lib):
    kiln_calls = sum(1 for c in report["calls"] if c["runtime"] == "kiln" and c["lib"] == lib)
    workspaces = kiln_calls if lib in ("ws", "both") else 0
    launches = kiln_calls * (2 if lib == "both" else 1) if lib in ("par", "both") else 0
    return workspaces, launches


def check_report(report, lib):
    """Every call right, on its own runtime's threads; Kiln's services served Kiln's calls only."""
    check_calls(report)
    assert served(report, lib) == expected_service_counts(report, lib)


@pytest.mark.parametrize("lib", ["par", "ws", "both"])
@pytest.mark.parametrize("first", ["tvm", "kiln"])
def test_the_same_file_in_both_runtimes(libraries, lib, first):
    second = "kiln" if first == "tvm" else "tvm"
    report = run_child(libraries, f"""
        a = load("{first}", "{lib}")
        call("{first}", a, "{lib}")
        b = load("{second}", "{lib}")
        call("{second}", b, "{lib}")
        call("{first}", a, "{lib}")
        call("{second}", b, "{lib}")
        del a, b
    """)
    check_report(report, lib)


def test_import_tvm_after_kiln_loaded_tvm_libraries(libraries):
    report = run_child(libraries, """
        k = load("kiln", "both")
        call("kiln", k, "both")
        import tvm, tvm_ffi  # after Kiln loaded a TVM library: both must keep working
        t = load("tvm", "both")
        call("tvm", t, "both")
        call("kiln", k, "both")
        # TVM's own runtime works as before: tensors, and an error raised by compiled code.
        assert tvm.runtime.tensor(np.ones(3, "float32")).numpy().sum() == 3
        try:
            t["both"](tvm.runtime.tensor(np.zeros(3, "float32")))
        except Exception as e:  # TVM's own error type, raised through TVM's error state
            assert "both" in str(e), str(e)
        else:
            raise AssertionError("TVM accepted a wrong argument count")
        del k, t
    """)
    check_report(report, "both")


def test_import_tvm_first_then_kiln(libraries):
    report = run_child(libraries, """
        import tvm_ffi, tvm
        t = load("tvm", "par")
        call("tvm", t, "par")
        import kiln
        k = load("kiln", "par")
        call("kiln", k, "par")
        call("tvm", t, "par")
        # The compiled code's error reaches Kiln through Kiln's own error state, not TVM's.
        try:
            k["par"](np.zeros(3, "int32"))
        except ValueError as e:
            assert "par.so: par: ValueError: Invalid tids.shape[0]" in str(e), str(e)
        else:
            raise AssertionError("Kiln accepted a wrong shape")
        del k, t
    """)
    check_report(report, "par")


def test_kilns_tvm_ffi_functions_have_private_names(libraries):
    """libkiln_tvm_ffi_abi defines no tvm-ffi name a TVM in the process could bind to."""
    kiln.load_module(str(libraries / "par.so"))  # loads the ABI library
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "libkiln_tvm_ffi_abi" in line}
    assert len(paths) == 1, paths
    out = subprocess.run(["nm", "-D", "--defined-only", paths.pop()], capture_output=True,
                         text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert not [n for n in names if n.startswith("TVMFFI")], names
    assert "KilnTFErrorSetRaisedFromCStrParts" in names, names



LEAK_CHILD = """
import numpy as np, kiln, tvm
x = kiln.empty((4,), "float32")
y = tvm.get_global_func("testing.echo")(x)   # a Kiln tensor through a TVM function
t = tvm.runtime.from_dlpack(x)               # and through DLPack both ways
z = kiln.from_dlpack(tvm.runtime.tensor(np.ones(4, "float32")))
print("done")
"""


def test_no_nanobind_leak_warnings_beside_tvm():
    """Issue 30 item 6: tvm-ffi keeps what it reads of an argument (its dtype and device objects)
    in caches that outlive kiln._kiln at exit; nanobind then printed 25 lines of "leaked
    instance" for them. Tensor.dtype is a str now, as TVM's is, and the report stays empty."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", LEAK_CHILD], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert "leaked" not in proc.stderr, proc.stderr
