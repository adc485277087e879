# SPDX-License-Identifier: Apache-2.0
"""kiln.vm.VirtualMachine against the real core (SPEC §2.6-§2.14, checklist §2.17): the example
MLP (build/examples/vm/mlp.kvmt and mlp.kvm over the example kernel libraries), small programs
in the text form calling Python functions registered as globals, and TVM's Relax MLP fixture
where it was built."""

import json
import pathlib

import numpy as np
import pytest

import kiln
from conftest import VM_EXAMPLES, example_kernel, tvm_fixture
from kiln.vm import VirtualMachine, VMInstrumentReturnKind

# ---- the example MLP: y = relu(x @ w1 + b1) @ w2 + b2 ----------------------------------------

SHAPES = {"x": (64, 256), "w1": (256, 128), "b1": (128,), "w2": (128, 64), "b2": (64,)}


def mlp_path(suffix):
    path = VM_EXAMPLES / f"mlp.{suffix}"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the VM examples (ninja -C build)")
    return str(path)


@pytest.fixture(scope="module")
def exe():
    return kiln.load_module(mlp_path("kvmt"))


@pytest.fixture
def inputs():
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s, dtype=np.float32) for s in SHAPES.values()]


def reference(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def assert_mlp(y, args):
    assert isinstance(y, kiln.Tensor)
    assert tuple(y.shape) == (64, 64) and str(y.dtype) == "float32"
    np.testing.assert_allclose(y.numpy(), reference(*args), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("suffix", ["kvmt", "kvm"])
def test_main_matches_numpy(suffix, inputs):
    exe = kiln.load_module(mlp_path(suffix))
    assert exe.kind == "vm.executable"
    vm = VirtualMachine(exe, kiln.cpu())
    assert_mlp(vm["main"](*inputs), inputs)
    assert_mlp(vm.get_function("main")(*inputs), inputs)
    # The hidden layer alone, a VM function of its own.
    hidden = vm["dense_relu"](*inputs[:3]).numpy()
    np.testing.assert_allclose(hidden, np.maximum(inputs[0] @ inputs[1] + inputs[2], 0),
                               rtol=1e-4, atol=1e-3)


def test_binary_and_text_forms_are_the_same_program(exe):
    binary = kiln.load_module(mlp_path("kvm"))
    assert binary["as_text"]() == exe["as_text"]()
    stats = exe["stats"]()
    assert "Globals" in stats and "main" in stats and "dense_relu" in stats
    assert exe["has_function"]("main") and not exe["has_function"]("nope")


@pytest.mark.parametrize("memory_cfg", [None, "naive", "pooled", {kiln.cpu(0): "naive"},
                                        {kiln.cpu(0): 1}, {kiln.cpu(0): 2}])
def test_memory_configs_all_compute_the_same(exe, inputs, memory_cfg):  # checklist 10
    vm = VirtualMachine(exe, kiln.cpu(), memory_cfg=memory_cfg)
    for _ in range(3):  # reused pooled blocks give the same answer
        assert_mlp(vm["main"](*inputs), inputs)


def test_device_lists(exe, inputs):  # checklist 11 (one CPU here: cpu:0 twice)
    vm = VirtualMachine(exe, [kiln.cpu(0), kiln.cpu(0)])
    assert vm.devices == [kiln.cpu(0), kiln.cpu(0)]
    assert_mlp(vm["main"](*inputs), inputs)
    devices = [kiln.cpu(0)]
    vm = VirtualMachine(exe, devices)
    assert devices == [kiln.cpu(0)], "the caller's list is not modified"
    assert vm.devices == [kiln.cpu(0)], "a CPU last already is the host"
    assert VirtualMachine(exe, (kiln.cpu(0),)).devices == [kiln.cpu(0)]


def test_constructor_errors(exe):
    with pytest.raises(TypeError, match="dev is expected to be Device or List"):
        VirtualMachine(exe, "cpu")
    with pytest.raises(TypeError, match="dev is expected to be Device or List"):
        VirtualMachine(exe, [kiln.cpu(0), 3])
    with pytest.raises(ValueError, match="Expect the rt_mod to be an runtime.Module"):
        VirtualMachine("mlp.kvm", kiln.cpu())
    with pytest.raises(TypeError, match="memory_cfg is expected be string or dictionary"):
        VirtualMachine(exe, kiln.cpu(), memory_cfg=3)
    with pytest.raises(ValueError, match="naive"):
        VirtualMachine(exe, kiln.cpu(), memory_cfg="arena")
    with pytest.raises(ValueError, match="naive"):
        VirtualMachine(exe, kiln.cpu(), memory_cfg={kiln.cpu(0): 7})
    with pytest.raises(TypeError, match="kiln.Device"):
        VirtualMachine(exe, kiln.cpu(), memory_cfg={"cpu": "naive"})
    with pytest.raises(TypeError, match="vm.executable"):  # a kernel library is no program
        VirtualMachine(kiln.load_module(example_kernel("relu")), kiln.cpu())


def test_function_lookup(exe):
    vm = VirtualMachine(exe, kiln.cpu())
    assert "main" in vm and vm.has_function("dense_relu")
    assert "set_input" in vm  # a fixed VM module function (§2.6)
    assert "matmul" not in vm, "kernels are not VM functions"
    with pytest.raises(kiln.NotFoundError, match="Unknown function: nope"):
        vm["nope"]
    with pytest.raises(LookupError):
        vm.get_function("matmul")
    mod = vm.module
    assert isinstance(mod, kiln.Module)
    assert mod["get_function_arity"]("main") == 5
    assert mod["get_function_param_name"]("main", 1) == "w1"
    with pytest.raises(ValueError, match=r"Invalid index for main \(5 out of 5\)"):
        mod["get_function_param_name"]("main", 5)
    assert repr(vm) == "<kiln.vm.VirtualMachine on [cpu:0]>"


# ---- the stateful API (§2.11, checklists 8 and 9) ----------------------------------------------


def test_stateful_round_trip(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())
    vm.set_input("main", *inputs)
    vm.invoke_stateful("main")
    out = vm.get_outputs("main")
    assert_mlp(out, inputs)
    assert vm.get_output_arity("main") == -1
    np.testing.assert_array_equal(vm.get_output("main").numpy(), out.numpy())
    # Inputs persist; numpy inputs were copied, so changing the array afterwards changes nothing.
    expected = out.numpy().copy()
    inputs[0][:] = 0
    vm.invoke_stateful("main")
    np.testing.assert_array_equal(vm.get_outputs("main").numpy(), expected)
    # set_input again replaces them.
    vm.set_input("main", *inputs)
    vm.invoke_stateful("main")
    assert_mlp(vm.get_outputs("main"), inputs)
    # The fixed names work through vm[...] too.
    vm["invoke_stateful"]("main")
    assert_mlp(vm["get_output"]("main"), inputs)


def test_stateful_keyword_arguments(exe, inputs):
    x, w1, b1, w2, b2 = inputs
    vm = VirtualMachine(exe, kiln.cpu())
    vm.set_input("main", x, w1, b2=b2, w2=w2, b1=b1)
    vm.invoke_stateful("main")
    assert_mlp(vm.get_outputs("main"), inputs)
    vm.set_input("main", b2=b2, x=x, w1=w1, b1=b1, w2=w2)
    vm.invoke_stateful("main")
    assert_mlp(vm.get_outputs("main"), inputs)
    with pytest.raises(TypeError, match="no parameter named 'bias'"):
        vm.set_input("main", x, w1, b1, w2, bias=b2)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        vm.set_input("main", x, w1=w1)
    with pytest.raises(ValueError, match="Unknown function: nope"):
        vm.set_input("nope", x=x)


def test_stateful_errors_are_the_cores(exe, inputs):  # checklist 9
    vm = VirtualMachine(exe, kiln.cpu())
    with pytest.raises(ValueError, match="No inputs set for stateful call of main; use `set_inp"):
        vm.invoke_stateful("main")
    with pytest.raises(ValueError, match='No output saved for call of "main"; use `invoke_state'):
        vm.get_outputs("main")
    with pytest.raises(ValueError, match="No output saved"):
        vm.get_output_arity("main")
    with pytest.raises(ValueError, match="Unknown function: nope"):
        vm.set_input("nope", *inputs)
    with pytest.raises(ValueError, match="Unknown function: nope"):
        vm.invoke_stateful("nope")
    with pytest.raises(TypeError, match="doesn't match the number of arguments for main"):
        vm.set_input("main", *inputs[:4])
    vm.set_input("main", *inputs)
    with pytest.raises(RuntimeError, match=r"expects 5 arguments \(x, w1, b1, w2, b2\), but 0"):
        vm["main"]()  # the documented rule is not enforced: this is the arity error
    vm.invoke_stateful("main")
    with pytest.raises(ValueError, match="not an Array"):
        vm.get_output("main", 0)
    assert_mlp(vm.get_outputs("main"), inputs)


NESTED = """kiln_vm 1
packed_func @vm.builtin.make_tuple
func @main(x) regs=4 {
  call  vm.builtin.make_tuple in: %0      dst: %1
  call  vm.builtin.make_tuple in: %0, %1  dst: %2
  call  vm.builtin.make_tuple in: %2, %0  dst: %3
  ret   %3
}
"""


def program(tmp_path, text, name="prog.kvmt"):
    path = tmp_path / name
    path.write_text(text)
    return kiln.load_module(str(path))


def test_nested_tuple_outputs(tmp_path):  # checklist 8: ((x, (x,)), x)
    vm = VirtualMachine(program(tmp_path, NESTED), kiln.cpu())
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    vm.set_input("main", x)
    vm.invoke_stateful("main")
    out = vm.get_outputs("main")
    assert isinstance(out, tuple) and len(out) == 2
    assert isinstance(out[0], tuple) and len(out[0]) == 2
    assert isinstance(out[0][1], tuple) and len(out[0][1]) == 1
    for leaf in (out[0][0], out[0][1][0], out[1]):
        np.testing.assert_array_equal(leaf.numpy(), x)
    assert vm.get_output_arity("main") == 2
    assert vm.get_output_arity("main", 0) == 2
    assert vm.get_output_arity("main", 0, 1) == 1
    assert vm.get_output_arity("main", 1) == -1
    np.testing.assert_array_equal(vm.get_output("main", 0, 1, 0).numpy(), x)
    with pytest.raises(ValueError, match="cannot return a tuple for RPC compatibility"):
        vm.get_output("main", 0)
    with pytest.raises(IndexError, match=r"Invalid index \(5 >= 2\)"):
        vm.get_output("main", 5)
    # A direct call gives the same nesting as Python tuples.
    direct = vm["main"](x)
    assert isinstance(direct, tuple) and isinstance(direct[0][1], tuple)


# ---- programs calling Python functions (checklists 1, 2, 5, 6, 7) -----------------------------

ADD = "test.py.vm.add"
FAIL = "test.py.vm.fail"


class Deliberate(Exception):
    """Raised by the test functions."""


@pytest.fixture(scope="module", autouse=True)
def python_globals():
    def add(*xs):
        # set_input and save_function pass numbers as 0-d tensors (the reference's conversion).
        return sum(x.numpy().item() if isinstance(x, kiln.Tensor) else x for x in xs)

    kiln.register_func(ADD, add, override=True)

    def fail(*_):
        raise Deliberate("deliberate failure")

    kiln.register_func(FAIL, fail, override=True)


PROGRAMS = f"""kiln_vm 1
packed_func @{ADD}
packed_func @{FAIL}
packed_func @vm.builtin.copy
packed_func @vm.builtin.make_closure

func @func0(x, y) regs=3 {{
  call  {ADD} in: %0, %1 dst: %2
  ret   %2
}}

func @neg(x) regs=2 {{
  call  {ADD} in: %0, i-3 dst: %1
  ret   %1
}}

func @choose(c, a, b) regs=4 {{
  if    %0, 3
  call  vm.builtin.copy in: %1 dst: %3
  goto  2
  call  vm.builtin.copy in: %2 dst: %3
  ret   %3
}}

func @lifted(y, z, w, x) regs=5 {{
  call  {ADD} in: %0, %1, %2, %3 dst: %4
  ret   %4
}}

func @closure(w, x) regs=3 {{
  call  vm.builtin.make_closure in: f[lifted], %0, %1 dst: %2
  ret   %2
}}

func @ident(x) regs=2 {{
  call  vm.builtin.copy in: %0 dst: %1
  ret   %1
}}

func @failing(x) regs=2 {{
  call  {FAIL} in: %0 dst: %1
  ret   %1
}}

func @outer(x) regs=2 {{
  call  failing in: %0 dst: %1
  ret   %1
}}
"""


@pytest.fixture
def programs(tmp_path):
    return VirtualMachine(program(tmp_path, PROGRAMS), kiln.cpu())


def test_python_kernels_and_saved_closures(programs):  # checklist 1
    vm = programs
    assert vm["func0"](2, 40) == 42
    vm.save_function("func0", "saved", 2, 40)
    assert vm["saved"]() == 42
    vm.save_function("func0", "partial", 40)  # bound after the call's own arguments
    assert vm["partial"](2) == 42
    vm.save_function("func0", "quiet", 2, 40, include_return=False)
    assert vm["quiet"]() is None


def test_negative_immediates(programs):  # checklist 2
    assert programs["neg"](1) == -2


def test_goto_and_if(programs):  # checklist 5
    assert programs["choose"](1, "then", "else") == "then"
    assert programs["choose"](0, "then", "else") == "else"


def test_closures(programs):  # checklist 6
    clo = programs["closure"](1000, 200)
    assert isinstance(clo, kiln.Object)
    assert programs.invoke_closure(clo, 30, 4) == 1234
    # Any callable (a Python one too) can be invoked the same way.
    assert programs.invoke_closure(lambda a, b: a * b, 6, 7) == 42
    assert programs.invoke_closure(programs["func0"], 6, 7) == 13


def test_python_exceptions_cross_the_vm_and_it_stays_usable(programs):  # checklist 7
    for name in ("failing", "outer"):  # nested frames unwound too
        with pytest.raises(Deliberate, match="deliberate failure"):
            programs[name](1)
        assert programs["func0"](1, 2) == 3


def test_set_input_converts_numbers_to_0d_tensors(programs):  # §2.9's Python conversion
    for value, dtype in ((7, "int32"), (True, "int32"), (2.5, "float32"),
                         (np.float16(1.5), "float16"), (np.int64(-4), "int32")):
        programs.set_input("ident", value)
        programs.invoke_stateful("ident")
        out = programs.get_outputs("ident")
        assert isinstance(out, kiln.Tensor)
        assert str(out.dtype) == dtype and tuple(out.shape) == ()
        assert out.numpy() == value
    # Direct calls pass values as they are.
    assert programs["ident"](7) == 7
    with pytest.raises(TypeError, match="Unsupported type"):
        programs.set_input("func0", 1, object())


# ---- save_function + time_evaluator (§2.10, §2.13) --------------------------------------------


def test_save_function_then_time_evaluator(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())
    vm.save_function("main", "main_saved", *inputs)
    assert_mlp(vm["main_saved"](), inputs)
    evaluator = vm.time_evaluator("main_saved", kiln.cpu(), number=3, repeat=4)
    assert isinstance(evaluator, kiln.TimeEvaluator)
    result = evaluator()
    assert isinstance(result, kiln.BenchmarkResult)
    assert len(result.results) == 4
    assert all(t > 0 for t in result.results)
    assert result.numbers == [3, 3, 3, 3] and result.name == "main_saved"
    # Plain calls and the stateful route time the same program.
    plain = vm.time_evaluator("main", kiln.cpu(), number=2, repeat=2)(*inputs)
    assert len(plain.results) == 2 and plain.min > 0
    vm.set_input("main", *inputs)
    stateful = vm.time_evaluator("invoke_stateful", kiln.cpu(), number=2)("main")
    assert stateful.mean > 0
    assert_mlp(vm.get_outputs("main"), inputs)
    with pytest.raises(kiln.NotFoundError, match="Unknown function: nope"):
        vm.time_evaluator("nope", kiln.cpu())
    with pytest.raises(ValueError, match="number"):
        vm.time_evaluator("main_saved", kiln.cpu(), number=0)


# ---- set_instrument (§2.12) -------------------------------------------------------------------


def test_instrument_sees_every_call(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())
    before, after = {}, {}
    seen = []

    def instrument(func, symbol, before_run, ret_value, *args):
        counts = before if before_run else after
        counts[symbol] = counts.get(symbol, 0) + 1
        if before_run:
            assert ret_value is None
        seen.append((symbol, callable(func) or isinstance(func, kiln.Object), args))
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    assert_mlp(vm["main"](*inputs), inputs)
    assert before == after
    assert before["matmul"] == 2 and before["bias_add"] == 2 and before["relu"] == 1
    assert before["dense_relu"] == 1 and before["vm.builtin.check_tensor_info"] == 1
    assert before["vm.builtin.alloc_storage"] == 2
    assert all(ok for _, ok, _ in seen)
    # check_tensor_info(x, 2, float32, "x"): the dtype reaches the instrument as a string.
    check = next(args for symbol, _, args in seen if symbol == "vm.builtin.check_tensor_info")
    assert check[1:] == (2, "float32", "x")
    vm.set_instrument(None)
    before.clear()
    vm["main"](*inputs)
    assert before == {}


def test_instrument_skip_run(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())
    before, after = {}, {}

    def instrument(func, symbol, before_run, ret_value, *args):
        counts = before if before_run else after
        counts[symbol] = counts.get(symbol, 0) + 1
        if before_run and symbol == "relu":
            return VMInstrumentReturnKind.SKIP_RUN
        return None

    vm.set_instrument(instrument)
    y = vm["main"](*inputs).numpy()
    assert before["relu"] == 1 and "relu" not in after
    assert before["matmul"] == after["matmul"] == 2
    # Without the relu the result is the unrectified network's.
    x, w1, b1, w2, b2 = inputs
    np.testing.assert_allclose(y, (x @ w1 + b1) @ w2 + b2, rtol=1e-4, atol=1e-3)
    assert not np.allclose(y, reference(*inputs), rtol=1e-4, atol=1e-3)


def test_instrument_from_a_global_factory(programs):
    seen = []
    kiln.register_func("test.py.vm.instrument_factory",
                       lambda: (lambda f, symbol, before, *rest: seen.append((symbol, before))),
                       override=True)
    programs.set_instrument("test.py.vm.instrument_factory")
    assert programs["func0"](1, 2) == 3
    assert seen == [(ADD, True), (ADD, False)]
    with pytest.raises(LookupError, match="Cannot find factory test.py.vm.none"):
        programs.set_instrument("test.py.vm.none")


def test_instrument_exceptions_propagate_unchanged(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())

    def instrument(func, symbol, before_run, *rest):
        if symbol == "matmul":
            raise Deliberate(f"stop at {symbol}")

    vm.set_instrument(instrument)
    with pytest.raises(Deliberate, match="stop at matmul"):
        vm["main"](*inputs)
    vm.set_instrument(lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        vm["main"](*inputs)
    vm.set_instrument(None)
    assert_mlp(vm["main"](*inputs), inputs)  # still usable


# ---- bad input never crashes -------------------------------------------------------------------


def test_bad_arguments_are_errors(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu())
    x, w1, b1, w2, b2 = inputs
    with pytest.raises(ValueError, match="x expect Tensor with ndim 2 but get 1"):
        vm["main"](b1, w1, b1, w2, b2)
    with pytest.raises(ValueError, match="x expect Tensor with dtype float32 but get int32"):
        vm["main"](x.astype(np.int32), w1, b1, w2, b2)
    with pytest.raises(TypeError, match="x expect a Tensor but get"):
        vm["main"]("x", w1, b1, w2, b2)
    with pytest.raises(ValueError, match="matmul: shapes do not match"):
        vm["main"](x, w2, b1, w2, b2)
    with pytest.raises(ValueError, match="bias_add"):
        vm["main"](x, w1, b2, w2, b2)
    with pytest.raises(RuntimeError, match="expects 5 arguments"):
        vm["main"](x)
    with pytest.raises(TypeError):
        vm["main"](x, w1, b1, w2, object())
    with pytest.raises(ValueError, match="non-contiguous"):
        vm["main"](np.asfortranarray(x), w1, b1, w2, b2)
    assert_mlp(vm["main"](*inputs), inputs)


# ---- profile (§2.14) ---------------------------------------------------------------------------


def test_profile_reports_the_kernel_calls(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu(), profile=True)
    report = vm.profile("main", *inputs)
    assert isinstance(report, kiln.profiling.Report)
    names = [c["Name"] for c in report.calls]
    assert names.count("matmul") == 2 and names.count("bias_add") == 2
    assert "relu" in names and "dense_relu" in names and "vm.builtin.check_tensor_info" in names
    assert "vm.builtin.alloc_storage" not in names, "calls without tensor arguments are not rows"
    by_shape = {c["Argument Shapes"]: c for c in report.calls if c["Name"] == "matmul"}
    first = by_shape["float32[64, 256], float32[256, 128], float32[64, 128]"]
    assert "float32[64, 128], float32[128, 64], float32[64, 64]" in by_shape
    total = report.device_metrics["cpu0"]["Duration (us)"].microseconds
    for call in report.calls:
        assert call["Count"] == kiln.profiling.Count(1) and call["Device"] == "cpu0"
        d = call["Duration (us)"].microseconds
        assert 0 < d <= total
        assert call["Percent"].percent == pytest.approx(d / total * 100)
    dense = next(c for c in report.calls if c["Name"] == "dense_relu")
    assert dense["Duration (us)"].microseconds >= first["Duration (us)"].microseconds, "nested"
    assert report.configuration["Executor"] == "VM"
    assert report.configuration["Number of threads"].value >= 1
    table = report.table()
    assert str(report) == table
    for text in ("matmul", "Duration (us)", "Total", "Configuration", "Executor: VM"):
        assert text in table
    assert report.csv().splitlines()[0].startswith("Argument Shapes,Count,Device,Duration (us)")
    parsed = json.loads(report.json())
    assert len(parsed["calls"]) == len(report.calls)
    back = kiln.profiling.Report.from_json(report.json())
    assert back.table(aggregate=False, col_sums=False) == report.table(aggregate=False,
                                                                       col_sums=False)


def test_profile_with_set_input_and_errors(exe, inputs):
    vm = VirtualMachine(exe, kiln.cpu(), profile=True)
    vm.set_input("main", *inputs)
    report = vm.profile("main")
    assert "bias_add" in report.table()
    with pytest.raises(ValueError, match="Inputs are already provided by set_input"):
        vm.profile("main", inputs[0])
    with pytest.raises(ValueError, match="Unknown function: nope"):
        vm.profile("nope", *inputs)
    # The stateful inputs are as before.
    vm.invoke_stateful("main")
    assert_mlp(vm.get_outputs("main"), inputs)
    plain = VirtualMachine(exe, kiln.cpu())
    with pytest.raises(RuntimeError, match="profile = true"):
        plain.profile("main", *inputs)


# ---- TVM's Relax MLP (tests/tvm/make_fixtures.py) ----------------------------------------------


def tvm_mlp():
    path = pathlib.Path(tvm_fixture("mlp.so"))
    ins = [np.load(path.parent / f"mlp.in{i}.npy") for i in range(4)]
    out = np.load(path.parent / "mlp.out0.npy")
    return str(path), ins, out


def test_tvm_relax_library_runs():
    path, ins, expected = tvm_mlp()
    vm = VirtualMachine(kiln.load_module(path), kiln.cpu())
    np.testing.assert_allclose(vm["main"](*ins).numpy(), expected, rtol=1e-4, atol=1e-4)
    vm.set_input("main", *ins)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_outputs("main").numpy(), expected, rtol=1e-4, atol=1e-4)
    vm.save_function("main", "saved", *ins)
    assert vm.time_evaluator("saved", kiln.cpu(), number=2, repeat=2)().min > 0
    # A different batch size (the fixture's batch dimension is dynamic).
    x = ins[0][:2].copy()
    np.testing.assert_allclose(vm["main"](x, *ins[1:]).numpy(), expected[:2], rtol=1e-4,
                               atol=1e-4)


def test_tvm_relax_library_profiles():
    path, ins, _ = tvm_mlp()
    vm = VirtualMachine(kiln.load_module(path), kiln.cpu(), profile=True)
    report = vm.profile("main", *ins)
    assert report.calls and report.configuration["Executor"] == "VM"
    assert "cpu0" in report.device_metrics
    assert any("matmul" in c["Name"] for c in report.calls)
