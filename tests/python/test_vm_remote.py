# SPDX-License-Identifier: Apache-2.0
"""Issue 19's VM and RPC fidelity items from Python: the VM module as a live view of the VM,
device indices refused at construction, check_tensor_info's empty dtype, a VM made on an RPC
server (a `kiln rpc-server` process, and kiln.rpc.LocalSession) with the stateful API,
save_function, time_evaluator and profile run there, and the match-key helpers."""

import numpy as np
import pytest

import kiln
from conftest import VM_EXAMPLES, example_kernel, tvm_fixture
from kiln.vm import VirtualMachine

SHAPES = [(64, 256), (256, 128), (128,), (128, 64), (64,)]


def mlp_inputs():
    rng = np.random.default_rng(19)
    return [rng.standard_normal(s, dtype=np.float32) for s in SHAPES]


def reference(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def close(tensor, expected):
    np.testing.assert_allclose(tensor.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.fixture(scope="module")
def exe():
    return kiln.load_module(str(VM_EXAMPLES / "mlp.kvmt"))


# ---- item 1: the module is a live view (SPEC §2.6) --------------------------------------------


def test_functions_saved_through_the_module_are_found_in_it(exe):
    args = mlp_inputs()
    vm = VirtualMachine(exe, kiln.cpu())
    module = vm.module
    assert "saved_main" not in module
    module["save_function"]("main", "saved_main", True, *[kiln.tensor(a) for a in args])
    assert "saved_main" in module and "saved_main" in module.function_names()
    close(module["saved_main"](), reference(*args))
    # What TVM's Python wrapper does: time it through the module.
    result = module.time_evaluator("saved_main", kiln.cpu(), number=2, repeat=2)()
    assert len(result.results) == 2 and result.min > 0
    # Saved through the VM after the module was taken: found too.
    vm.save_function("main", "later", *args)
    close(module["later"](), reference(*args))


# ---- item 2: device indices (SPEC §2.8) ------------------------------------------------------


def test_a_cpu_index_the_backend_lacks_is_refused_at_construction(exe):
    with pytest.raises(ValueError, match=r"device cpu:1 does not exist: there is one \(cpu:0\)"):
        VirtualMachine(exe, [kiln.cpu(0), kiln.cpu(1)])


# ---- item 3: check_tensor_info with "" (SPEC §2.7) -------------------------------------------


def test_check_tensor_info_empty_dtype_checks_no_dtype():
    check = kiln.get_global_func("vm.builtin.check_tensor_info")
    t = kiln.tensor(np.zeros((2, 3), dtype=np.float32))
    check(t, 2, "", "ctx")  # no error: "" means any dtype
    check(t, -1, "float32", "ctx")
    with pytest.raises(ValueError, match="ctx expect Tensor with ndim 3"):
        check(t, 3, "", "ctx")
    with pytest.raises(ValueError, match="ctx expect Tensor with dtype int8"):
        check(t, 2, "int8", "ctx")


# ---- item 4: the VM over RPC (SPEC §2.8, §2.13, §2.14 over a session) ------------------------


def upload_mlp(session):
    """Lays the session's work directory out as the build tree, so the program's imports
    (../kernels/lib*.so) resolve inside it; returns the remote executable."""
    for name in ("matmul", "bias_add", "relu"):
        session.upload(example_kernel(name), f"kernels/lib{name}.so")
    session.upload(str(VM_EXAMPLES / "mlp.kvmt"), "vm/mlp.kvmt")
    return session.load_module("vm/mlp.kvmt")


def exercise_remote_vm(session):
    args = mlp_inputs()
    expected = reference(*args)
    remote_exec = upload_mlp(session)
    dev = session.cpu(0)
    vm = VirtualMachine(remote_exec, dev, memory_cfg="naive", profile=True)
    assert vm.devices == [dev]
    # numpy arguments are uploaded; the result is a remote tensor.
    y = vm["main"](*[kiln.tensor(a, dev) for a in args])
    assert str(y.device).startswith("remote")
    close(y, expected)
    # The stateful API, with keyword arguments mapped by the remote parameter names.
    vm.set_input("main", args[0], w1=args[1], b1=args[2], w2=args[3], b2=args[4])
    vm.invoke_stateful("main")
    assert vm.get_output_arity("main") == -1
    close(vm.get_outputs("main"), expected)
    # save_function, then time it and the stateful route on the server.
    vm.save_function("main", "saved_main", *args)
    close(vm["saved_main"](), expected)
    assert "saved_main" in vm
    timed = vm.time_evaluator("saved_main", dev, number=2, repeat=3)()
    assert isinstance(timed, kiln.BenchmarkResult) and len(timed.results) == 3 and timed.min > 0
    assert vm.time_evaluator("invoke_stateful", dev, number=2)("main").mean > 0
    # profile: the kernels' rows.
    report = vm.profile("main")
    assert any("matmul" in call["Name"] for call in report.calls)
    with pytest.raises(TypeError, match="RPC server"):
        vm.set_instrument(lambda *a: 0)
    with pytest.raises(kiln.RPCError, match="Unknown function"):
        vm.set_input("nope", 1)


def test_vm_on_a_server_process(rpc_server):
    port = rpc_server(key="vm")
    with kiln.rpc.connect("127.0.0.1", port, key="vm") as session:
        exercise_remote_vm(session)


def test_vm_on_a_local_session():
    with kiln.rpc.LocalSession() as session:
        exercise_remote_vm(session)


def test_remote_vm_errors(rpc_server):
    port = rpc_server(key="vm")
    with kiln.rpc.connect("127.0.0.1", port, key="vm") as session:
        remote_exec = upload_mlp(session)
        with pytest.raises(ValueError, match="not a device of the executable's RPC session"):
            VirtualMachine(remote_exec, kiln.cpu(0))
        with pytest.raises(kiln.RPCError, match="device cpu:2 does not exist"):
            VirtualMachine(remote_exec, session.cpu(2))
        plain = VirtualMachine(remote_exec, session.cpu(0))
        with pytest.raises(kiln.RPCError, match="profile"):
            plain.profile("main", *mlp_inputs())


def test_tvm_relax_library_on_a_remote_vm():
    path = tvm_fixture("mlp.so")
    import pathlib

    folder = pathlib.Path(path).parent
    ins = [np.load(folder / f"mlp.in{i}.npy") for i in range(4)]
    expected = np.load(folder / "mlp.out0.npy")
    with kiln.rpc.LocalSession() as session:
        session.upload(path, "mlp.so")
        vm = VirtualMachine(session.load_module("mlp.so"), session.cpu(0))
        vm.set_input("main", *ins)
        vm.invoke_stateful("main")
        np.testing.assert_allclose(vm.get_outputs("main").numpy(), expected, rtol=1e-4,
                                   atol=1e-4)


# ---- item 5: LocalSession and match keys (SPEC §4.4, §4.5) ------------------------------------


def test_local_session_has_the_session_api(vector_add):
    with kiln.rpc.LocalSession() as session:
        assert isinstance(session, kiln.rpc.RPCSession)
        session.upload(b"abc", "data/x.bin")
        assert session.download("data/x.bin") == b"abc"
        assert session.listdir() == ["data/"]
        session.upload(example_kernel("vector_add"), "libvector_add.so")
        mod = session.load_module("libvector_add.so")
        dev = session.cpu(0)
        a = kiln.tensor(np.arange(8, dtype=np.float32), dev)
        out = kiln.empty((8,), "float32", dev)
        mod["vector_add"](a, a, out, 0.5)
        np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 1.5)
        assert mod.time_evaluator("vector_add", dev, number=2)(a, a, out, 0.5).mean > 0
    assert session.closed


def test_random_key_and_split_random_key():
    key = kiln.rpc.random_key("jetson")
    assert key.startswith("jetson:0.")
    used = {kiln.rpc.random_key("k") for _ in range(50)}
    fresh = kiln.rpc.random_key("k", cmap=used)
    assert fresh not in used
    assert kiln.rpc.split_random_key("jetson:0.25") == ["jetson", "0.25"]
    assert kiln.rpc.split_random_key("127.0.0.1:5555:0.5") == ["127.0.0.1:5555", "0.5"]
    assert kiln.rpc.split_random_key("plain") == ["plain"]
