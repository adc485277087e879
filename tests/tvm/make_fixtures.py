# SPDX-License-Identifier: Apache-2.0
"""Compiles the TVM interop fixtures with apache-tvm (tests/tvm/README.md).

usage: python make_fixtures.py OUT_DIR

Writes into OUT_DIR, for each case, the library TVM's export_library produced plus, where it
helps the tests, inputs and TVM's own CPU results as .npy files and a manifest.json that
names them. Every number the tests compare against comes from TVM or numpy here, never from
Kiln.
"""
import json
import os
import sys

import numpy as np
import tvm
from tvm import te
from tvm.script import tirx as T

OUT = sys.argv[1] if len(sys.argv) > 1 else "tvm_fixtures"
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(17)
manifest = {"tvm_version": tvm.__version__, "cases": {}}


def save(name, arr):
    path = os.path.join(OUT, name)
    np.save(path, arr)
    return os.path.basename(path)


def record(case, lib, func, inputs, outputs, **extra):
    """Saves `inputs` / `outputs` (name -> array) for `case` and notes them in the manifest."""
    manifest["cases"][case] = {
        "library": lib,
        "function": func,
        "inputs": [save(f"{case}.in{i}.npy", a) for i, a in enumerate(inputs)],
        "outputs": [save(f"{case}.out{i}.npy", a) for i, a in enumerate(outputs)],
        **extra,
    }


def run_tvm_cpu(mod, func, arrays):
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    mod[func](*args)
    return [a.numpy() for a in args]


# 1. Vector add (dynamic length), llvm.
n = te.var("n")
A = te.placeholder((n,), name="A")
B = te.placeholder((n,), name="B")
C = te.compute((n,), lambda i: A[i] + B[i], name="C")
vadd = tvm.compile(te.create_prim_func([A, B, C]).with_attr("global_symbol", "vadd"), target="llvm")
vadd.export_library(os.path.join(OUT, "vadd.so"))
a = rng.standard_normal(1000).astype("float32")
b = rng.standard_normal(1000).astype("float32")
out = run_tvm_cpu(vadd, "vadd", [a, b, np.zeros_like(a)])[2]
assert np.allclose(out, a + b)
record("vadd", "vadd.so", "vadd", [a, b, np.zeros_like(a)], [out])
# The same as TVM's ".tar" export (object files, linked by the loader: SPEC.md §5.5).
vadd.export_library(os.path.join(OUT, "vadd.tar"))
manifest["cases"]["vadd_tar"] = dict(manifest["cases"]["vadd"], library="vadd.tar")


# 1b. A function that checks its one argument and does nothing: the call overhead of
# bench/tvm_interop_bench.cc.
@T.prim_func
def noop(a: T.Buffer((1,), "float32")):
    T.func_attr({"global_symbol": "noop", "tir.noalias": True})
    T.evaluate(0)


tvm.compile(noop, target="llvm").export_library(os.path.join(OUT, "noop.so"))


# 1c. An empty parallel loop of two iterations, and the same loop serial: the parallel-launch
# overhead of bench/tvm_interop_bench.cc (the serial one is its floor).
@T.prim_func
def parallel2(a: T.Buffer((2,), "float32")):
    T.func_attr({"global_symbol": "parallel2", "tir.noalias": True})
    for i in T.parallel(2):
        a[i] = T.float32(0)


@T.prim_func
def serial2(a: T.Buffer((2,), "float32")):
    T.func_attr({"global_symbol": "serial2", "tir.noalias": True})
    for i in range(2):
        a[i] = T.float32(0)


tvm.compile(parallel2, target="llvm").export_library(os.path.join(OUT, "parallel2.so"))
tvm.compile(serial2, target="llvm").export_library(os.path.join(OUT, "serial2.so"))


# 2. Parallel row reduction (TVMBackendParallelLaunch).
@T.prim_func
def row_sum(x: T.Buffer((256, 512), "float32"), y: T.Buffer((256,), "float32")):
    T.func_attr({"global_symbol": "row_sum", "tir.noalias": True})
    for i in T.parallel(256):
        y[i] = T.float32(0)
        for j in range(512):
            y[i] = y[i] + x[i, j]


row = tvm.compile(row_sum, target="llvm")
row.export_library(os.path.join(OUT, "row_sum.so"))
x = rng.standard_normal((256, 512)).astype("float32")
y = run_tvm_cpu(row, "row_sum", [x, np.zeros(256, "float32")])[1]
assert np.allclose(y, x.sum(axis=1), rtol=1e-4, atol=1e-3)
record("row_sum", "row_sum.so", "row_sum", [x, np.zeros(256, "float32")], [y])


# 3. A kernel with a workspace (a local buffer too big for the stack: TVMBackendAllocWorkspace).
@T.prim_func
def scan_scale(x: T.Buffer((65536,), "float32"), y: T.Buffer((65536,), "float32")):
    T.func_attr({"global_symbol": "scan_scale", "tir.noalias": True})
    tmp = T.alloc_buffer((65536,), "float32")
    for i in range(65536):
        tmp[i] = x[i] * T.float32(2)
    for i in range(65536):
        y[i] = tmp[65535 - i] + T.float32(1)


ws = tvm.compile(scan_scale, target="llvm")
ws.export_library(os.path.join(OUT, "workspace.so"))
xw = rng.standard_normal(65536).astype("float32")
yw = run_tvm_cpu(ws, "scan_scale", [xw, np.zeros_like(xw)])[1]
assert np.allclose(yw, xw[::-1] * 2 + 1)
record("workspace", "workspace.so", "scan_scale", [xw, np.zeros_like(xw)], [yw])

# 4. Softmax and conv2d from topi (llvm).
from tvm import topi  # noqa: E402

X = te.placeholder((64, 128), name="X")
S = topi.nn.softmax(X, axis=1)
smx = tvm.compile(te.create_prim_func([X, S]).with_attr("global_symbol", "softmax"), target="llvm")
smx.export_library(os.path.join(OUT, "softmax.so"))
xs = rng.standard_normal((64, 128)).astype("float32")
ys = run_tvm_cpu(smx, "softmax", [xs, np.zeros_like(xs)])[1]
e = np.exp(xs - xs.max(axis=1, keepdims=True))
assert np.allclose(ys, e / e.sum(axis=1, keepdims=True), atol=1e-6)
record("softmax", "softmax.so", "softmax", [xs, np.zeros_like(xs)], [ys])

D = te.placeholder((1, 8, 16, 16), name="D")
W = te.placeholder((16, 8, 3, 3), name="W")
O = topi.nn.conv2d_nchw(D, W, 1, 1, 1)
conv = tvm.compile(te.create_prim_func([D, W, O]).with_attr("global_symbol", "conv2d"), target="llvm")
conv.export_library(os.path.join(OUT, "conv2d.so"))
xd = rng.standard_normal((1, 8, 16, 16)).astype("float32")
xwt = rng.standard_normal((16, 8, 3, 3)).astype("float32")
yc = run_tvm_cpu(conv, "conv2d", [xd, xwt, np.zeros((1, 16, 16, 16), "float32")])[2]
record("conv2d", "conv2d.so", "conv2d", [xd, xwt, np.zeros((1, 16, 16, 16), "float32")], [yc])


# 5. OpenCL-target vector add and matmul (host code llvm, device code OpenCL C). TVM's PyPI build
# compiles these but cannot run them; the expected numbers are the llvm build's and numpy's.
@T.prim_func
def vadd_gpu(a: T.Buffer((4096,), "float32"), b: T.Buffer((4096,), "float32"),
             c: T.Buffer((4096,), "float32")):
    T.func_attr({"global_symbol": "vadd", "tir.noalias": True})
    for bx in T.thread_binding(64, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            c[bx * 64 + tx] = a[bx * 64 + tx] + b[bx * 64 + tx]


@T.prim_func
def matmul_gpu(a: T.Buffer((64, 32), "float32"), b: T.Buffer((32, 48), "float32"),
               c: T.Buffer((64, 48), "float32")):
    T.func_attr({"global_symbol": "matmul", "tir.noalias": True})
    for i in T.thread_binding(64, thread="blockIdx.x"):
        for j in T.thread_binding(48, thread="threadIdx.x"):
            c[i, j] = T.float32(0)
            for k in range(32):
                c[i, j] = c[i, j] + a[i, k] * b[k, j]


ga = rng.standard_normal(4096).astype("float32")
gb = rng.standard_normal(4096).astype("float32")
ma = rng.standard_normal((64, 32)).astype("float32")
mb = rng.standard_normal((32, 48)).astype("float32")
for target in ("opencl", "cuda"):
    try:
        lib = tvm.compile(vadd_gpu, target=tvm.target.Target(target, host="llvm"))
        lib.export_library(os.path.join(OUT, f"vadd_{target}.so"))
        record(f"vadd_{target}", f"vadd_{target}.so", "vadd",
               [ga, gb, np.zeros_like(ga)], [ga + gb], device=target)
        mm = tvm.compile(matmul_gpu, target=tvm.target.Target(target, host="llvm"))
        mm.export_library(os.path.join(OUT, f"matmul_{target}.so"))
        record(f"matmul_{target}", f"matmul_{target}.so", "matmul",
               [ma, mb, np.zeros((64, 48), "float32")], [ma @ mb], device=target, rtol=1e-4)
    except Exception as err:  # noqa: BLE001 - a target this TVM build cannot compile
        manifest.setdefault("skipped", {})[target] = str(err).splitlines()[0]

# 6. A Relax MLP with a dynamic batch dimension.
from tvm import relax  # noqa: E402
from tvm.script import relax as R  # noqa: E402


@tvm.script.ir_module
class MLP:
    @R.function
    def main(x: R.Tensor(("n", 16), "float32"), w1: R.Tensor((16, 32), "float32"),
             b1: R.Tensor((32,), "float32"), w2: R.Tensor((32, 8), "float32")):
        with R.dataflow():
            h = R.nn.relu(R.add(R.matmul(x, w1), b1))
            y = R.matmul(h, w2)
            R.output(y)
        return y


ex = tvm.compile(MLP, target="llvm")
ex.export_library(os.path.join(OUT, "mlp.so"))
vm = relax.VirtualMachine(ex, tvm.cpu())
mlp_in = [rng.standard_normal((5, 16)).astype("float32"),
          rng.standard_normal((16, 32)).astype("float32"),
          rng.standard_normal(32).astype("float32"),
          rng.standard_normal((32, 8)).astype("float32")]
mlp_out = vm["main"](*[tvm.runtime.tensor(v) for v in mlp_in]).numpy()
ref = np.maximum(mlp_in[0] @ mlp_in[1] + mlp_in[2], 0) @ mlp_in[3]
assert np.allclose(mlp_out, ref, rtol=1e-4, atol=1e-4)
record("mlp", "mlp.so", "main", mlp_in, [mlp_out], vm=True)
# The executable as the file TVM writes (VMExecutable bytes, §2.15) besides the library.
# Without the kernels: Kiln pairs it with a kernel library given separately (docs/tvm-interop.md).
ex.mod.write_to_file(os.path.join(OUT, "mlp.vmexec"))
with open(os.path.join(OUT, "mlp.as_text.txt"), "w") as f:
    f.write(ex.mod["as_text"]())

# 7. A Relax program with a tuple result, softmax, a reduction and a reshape on a dynamic shape:
# more of the VM builtins real programs call.
@tvm.script.ir_module
class Tuples:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")):
        n = T.int64()
        with R.dataflow():
            s = R.nn.softmax(x, axis=1)
            m = R.sum(x, axis=1)
            flat = R.reshape(s, R.shape([n * 4]))
            R.output(s, m, flat)
        return (s, (m, flat))


tex = tvm.compile(Tuples, target="llvm")
tex.export_library(os.path.join(OUT, "tuples.so"))
tvm_out = relax.VirtualMachine(tex, tvm.cpu())["main"](tvm.runtime.tensor(mlp_in[0][:3, :4].copy()))
tx = mlp_in[0][:3, :4].copy()
ts = tvm_out[0].numpy()
tm = tvm_out[1][0].numpy()
tf = tvm_out[1][1].numpy()
assert np.allclose(tm, tx.sum(axis=1), atol=1e-5)
record("tuples", "tuples.so", "main", [tx], [ts, tm, tf], vm=True)

# Run configs naming the libraries, as a TVM user writes them for `kiln run` (docs/run-config.md):
# inputs from the .npy files TVM ran on, the output checked against TVM's result.
def run_config(case, device="cpu", export="tar"):
    c = manifest["cases"][case]
    lines = [f"# {case}: compiled by apache-tvm {tvm.__version__} (tests/tvm/make_fixtures.py)",
             f"module: {c['library']}", f"function: {c['function']}", f"device: {device}",
             f"export: {export}", "evaluator: {number: 2, repeat: 2, min_repeat_ms: 0}", "inputs:"]
    names = [f"arg{i}" for i in range(len(c["inputs"]))]
    for name, f in zip(names, c["inputs"]):
        lines.append(f"  - {{name: {name}, npy: {f}}}")
    lines += ["outputs:",
              f"  - {{name: {names[-1]}, expected: {c['outputs'][0]}, rtol: 1e-4, atol: 1e-4}}"]
    with open(os.path.join(OUT, f"{case}_run.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")


for case in ("vadd", "vadd_tar", "row_sum", "softmax", "conv2d", "workspace"):
    run_config(case)
for case in ("vadd_opencl", "matmul_opencl"):
    if case in manifest["cases"]:
        run_config(case, device="opencl")

with open(os.path.join(OUT, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=1)
print(json.dumps({k: v["library"] for k, v in manifest["cases"].items()}))
print("skipped:", manifest.get("skipped"))
