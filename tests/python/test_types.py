# SPDX-License-Identifier: Apache-2.0
"""Types and introspection: mypy accepts the package (its modules against the generated stubs
kiln/_kiln.pyi) and every ```python example of docs/python.md and examples/python/, and rejects
wrong calls; inspect.signature works on every public function and class constructor, with the
parameter names docs/python.md gives.

mypy comes from PyPI (pip install mypy): without it the type checks are skipped, except with
CI=true, where they fail. Runs against the build tree or the installed wheel
(KILN_TEST_INSTALLED=1) alike: mypy reads the package the tests import."""

import ast
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import kiln
from kiln import _signatures

from conftest import REPO

DOC = REPO / "docs" / "python.md"
EXAMPLES = sorted((REPO / "examples" / "python").glob("*.py"))
PACKAGE = pathlib.Path(kiln.__file__).parent

# Modules the package or the examples import that ship no types: mypy treats them as Any.
UNTYPED_IMPORTS = ("tvm", "tvm.*", "tvm_ffi", "tvm_ffi.*", "ml_dtypes", "torch", "torch.*")

# Mistakes mypy must find, one per line marked "# error", and nothing else: proof that the
# stubs and the package's annotations are read (an unresolved kiln would be Any).
WRONG_CALLS = """\
import kiln
t = kiln.empty((2,), "float32")
t.numpyy()  # error
kiln.empty((2,), "float32", "cpu", 3)  # error
kiln.load_module(3)  # error
kiln.testing.local_run(kiln.load_module("x.so"), "cpu")  # error
mod = kiln.load_module("x.so")
mod.time_evaluator("f", kiln.cpu(0))().meann  # error
kiln.rpc.connect("host", 9090, keyy="k")  # error
kiln.profiling.Count(1) == kiln.profiling.Duration(2.0)
raise kiln.WorkerError("x").kindd  # error
"""


def python_snippets(path):
    """(first line number, code) of each ```python block of the Markdown file `path`."""
    lines = path.read_text().splitlines()
    snippets, start = [], None
    for number, line in enumerate(lines, 1):
        if start is None and line.strip() == "```python":
            start = number + 1
        elif start is not None and line.strip() == "```":
            snippets.append((start, "\n".join(lines[start - 1:number - 1]) + "\n"))
            start = None
    assert start is None, f"{path}: the ```python block at line {start - 1} is not closed"
    return snippets


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory):
    """One mypy run over the package, the examples, the doc's snippets and WRONG_CALLS: returns
    (errors by file, snippet file -> doc), errors being mypy's `file:line: error: ...` lines
    with the file as given to it."""
    if importlib.util.find_spec("mypy") is None:
        message = f"mypy is not installed in {sys.executable} (pip install mypy)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + ": CI=true requires the type checks")
        pytest.skip(message)
    assert (PACKAGE / "_kiln.pyi").is_file(), (
        f"{PACKAGE / '_kiln.pyi'} is missing: build the stubs (ninja -C build _kiln_stub)")
    assert (PACKAGE / "py.typed").is_file(), f"{PACKAGE / 'py.typed'} is missing"

    work = tmp_path_factory.mktemp("mypy")
    # Each snippet in a file of its own, at its line in the doc (blank lines before it), so
    # mypy's line numbers are the doc's.
    snippet_files = {}
    for start, code in python_snippets(DOC):
        path = work / f"python_md_line_{start}.py"
        path.write_text("\n" * (start - 1) + code)
        snippet_files[path.name] = DOC
    assert len(snippet_files) >= 3, f"found only {len(snippet_files)} python snippets in {DOC}"
    (work / "wrong_calls.py").write_text(WRONG_CALLS)
    config = work / "mypy.ini"
    config.write_text("[mypy]\ncheck_untyped_defs = True\nwarn_unused_ignores = True\n"
                      "warn_redundant_casts = True\n"
                      f"[mypy-{','.join(UNTYPED_IMPORTS)}]\nignore_missing_imports = True\n")
    errors = {}
    # The package, then the files (mypy takes one or the other), sharing a cache. The
    # interpreter's sys.path (PYTHONPATH included) is where mypy finds kiln: the package these
    # tests import. Run in the work folder, where no other kiln is.
    for targets in (["-p", "kiln"],
                    [*snippet_files, "wrong_calls.py", *(str(p) for p in EXAMPLES)]):
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(config), "--python-executable",
             sys.executable, "--cache-dir", str(work / "cache"), "--no-error-summary",
             "--show-error-codes", "--hide-error-context", *targets],
            cwd=work, capture_output=True, text=True, timeout=300)
        for line in result.stdout.splitlines():
            match = re.match(r"(.+?):(\d+): error: (.*)", line)
            if match:
                errors.setdefault(match.group(1), []).append(
                    (int(match.group(2)), match.group(3)))
            elif ": note: " not in line:
                pytest.fail(f"unexpected mypy output (exit {result.returncode}):\n"
                            f"{result.stdout}{result.stderr}")
        if result.returncode not in (0, 1) or (result.returncode == 1 and not errors):
            pytest.fail(f"mypy failed (exit {result.returncode}):\n{result.stdout}"
                        f"{result.stderr}")
    return errors, snippet_files


def test_package_type_checks(mypy_run):
    """The package's modules and stubs have no type errors of their own (nor has anything
    else mypy was given but the examples and WRONG_CALLS)."""
    errors, snippet_files = mypy_run
    examples = {p.resolve() for p in EXAMPLES}
    own = [f"{f}:{line}: {text}" for f, e in errors.items() for line, text in e
           if f not in snippet_files and f != "wrong_calls.py"
           and pathlib.Path(f).resolve() not in examples]
    assert not own, "mypy -p kiln:\n" + "\n".join(own)


def test_documented_examples_type_check(mypy_run):
    """Every ```python block of docs/python.md and every examples/python/*.py type-checks."""
    errors, snippet_files = mypy_run
    found = []
    for f, e in errors.items():
        name = pathlib.Path(f).name
        if name in snippet_files:
            found += [f"{snippet_files[name]}:{line}: {text}" for line, text in e]
        elif pathlib.Path(f).resolve() in [p.resolve() for p in EXAMPLES]:
            found += [f"{f}:{line}: {text}" for line, text in e]
    assert not found, "mypy rejects documented examples:\n" + "\n".join(found)


def test_wrong_calls_are_rejected(mypy_run):
    """mypy finds each mistake of WRONG_CALLS, and only those: the check has teeth."""
    errors, _ = mypy_run
    found = {line for line, _ in errors.get("wrong_calls.py", [])}
    expected = {number for number, line in enumerate(WRONG_CALLS.splitlines(), 1)
                if line.endswith("# error")}
    assert found == expected, (f"mypy's errors on lines {sorted(found)} of\n{WRONG_CALLS}"
                               f"expected on {sorted(expected)}: {errors.get('wrong_calls.py')}")


# ---- inspect.signature -------------------------------------------------------------------------

PUBLIC_MODULES = [kiln, kiln.testing, kiln.rpc, kiln.profiling, kiln.vm]


def public_callables():
    """(qualified name, object) of every public function and class of the package."""
    seen = []
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.ismodule(value):
                continue
            assert callable(value), f"{module.__name__}.{name} is neither a function nor a class"
            seen.append((f"{module.__name__}.{name}", value))
    return seen


@pytest.mark.parametrize("name, value", public_callables(), ids=lambda v: v if isinstance(
    v, str) else "")
def test_signature_of_public_callable(name, value):
    """inspect.signature works on every public function and on every class Python code can
    construct; a class without a constructor cannot be called."""
    if (isinstance(value, type) and type(value).__module__ == "nanobind"
            and not hasattr(value.__init__, "__nb_signature__")):
        with pytest.raises(TypeError, match="no constructor"):
            value()
        return
    signature = inspect.signature(value)
    for parameter in signature.parameters.values():
        assert parameter.name.isidentifier(), f"{name}{signature}"


def test_signature_of_meta_schedule():
    """kiln.meta_schedule (which imports tvm) too."""
    pytest.importorskip("tvm", reason="kiln.meta_schedule needs apache-tvm")
    import kiln.meta_schedule

    for name in kiln.meta_schedule.__all__:
        inspect.signature(getattr(kiln.meta_schedule, name))


def test_nanobind_functions_are_not_wrapped_on_hot_paths():
    """kiln.Function calls and Tensor methods stay nanobind's own (no Python layer)."""
    assert type(kiln.Function.__call__).__name__ == "wrapper_descriptor"
    assert type(kiln.Tensor.numpy).__module__ == "nanobind"
    assert kiln.empty.__wrapped__ is kiln._kiln.empty


# Signatures as docs/python.md writes them (code spans, whitespace joined), and what they
# document. A documented default must be the actual one; "..." stands for other parameters.
DOCUMENTED_SIGNATURES = [
    ('kiln.empty(shape, dtype="float32", device=None)', kiln.empty),
    ("kiln.tensor(array, device=None)", kiln.tensor),
    ("kiln.from_dlpack(array)", kiln.from_dlpack),
    ("kiln.load_module(path)", kiln.load_module),
    ("kiln.cuda(index)", kiln.cuda),
    ("kiln.opencl(index)", kiln.opencl),
    ("kiln.rocm(index)", kiln.rocm),
    ("kiln.time_evaluator(func, dev, ...)", kiln.time_evaluator),
    ("kiln.register_func(name, f)", kiln.register_func),
    ("export_library(file_name, exporter=None)", kiln.Module.export_library),
    ("t.__array__(dtype=None, copy=None)", kiln.Tensor.__array__),
    ("kiln.testing.Worker(timeout=None)", kiln.testing.Worker),
    ("run_file(path, device_type, args, evaluator_config=None, function=None)",
     kiln.testing.Worker.run_file),
    ("kiln.testing.run_many(tasks, rpc_config=None, jobs=None, max_retries=2)",
     kiln.testing.run_many),
    ("random_key(prefix, cmap=None)", kiln.rpc.random_key),
    ("split_random_key(key)", kiln.rpc.split_random_key),
    ('local_run(mod, device_type, args, evaluator_config=None, export_func="tar", '
     'output_format=None)', kiln.testing.local_run),
    ("rpc_run(..., rpc_config=None, ...)", kiln.testing.rpc_run),
    ("(number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False)",
     kiln.testing.EvaluatorConfig),
    ('RPCConfig(tracker_host, tracker_port, tracker_key, session_priority=1, '
     'session_timeout_sec=10, token="", request_wait_sec=None)', kiln.testing.RPCConfig),
    ("count_num_servers(allow_missing=True)", kiln.testing.RPCConfig.count_num_servers),
    ("ab_run(mod_a, mod_b, device_type, args, args_b=None, evaluator_config=None, rounds=20, "
     "threshold=0.05, confidence=0.95, seed=None, function=None, function_b=None, "
     "max_rounds=160)", kiln.testing.ab_run),
    ('mod.time_evaluator(func_name, dev, number=10, repeat=1, min_repeat_ms=0, '
     'limit_zero_time_iterations=100, cooldown_interval_ms=0, repeats_to_cooldown=1, '
     'cache_flush_bytes=0, f_preproc="")', kiln.Module.time_evaluator),
]


def signature_parameters(value):
    """The parameters of `value` as a caller sees them (no self): inspect's, or for a method
    of the extension, read from its nanobind signature."""
    if hasattr(value, "__nb_signature__") and not hasattr(value, "__signature__"):
        parameters = list(_signatures.nb_signature(value).parameters.values())
        return parameters[1:] if parameters and parameters[0].name == "self" else parameters
    parameters = list(inspect.signature(value).parameters.values())
    return parameters[1:] if parameters and parameters[0].name == "self" else parameters


@pytest.mark.parametrize("documented, value", DOCUMENTED_SIGNATURES,
                         ids=[d.split("(")[0] or "EvaluatorConfig" for d, _ in
                              DOCUMENTED_SIGNATURES])
def test_documented_signature_matches(documented, value):
    prose = re.sub(r"^```.*?^```$", "", DOC.read_text(), flags=re.M | re.S)
    spans = {" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)}
    assert documented in spans, f"docs/python.md no longer shows `{documented}`"
    # "(a=1, b=2)" is a signature shown without its name; "..." other parameters.
    text = ("f" if documented.startswith("(") else "") + documented
    call = ast.parse(re.sub(r"\.\.\.(, )?|, \.\.\.", "", text), mode="eval").body
    assert isinstance(call, ast.Call)
    actual = {p.name: p for p in signature_parameters(value)}
    names = [a.id for a in call.args if isinstance(a, ast.Name)]
    names += [k.arg for k in call.keywords if k.arg is not None]
    if "..." in documented:
        assert set(names) <= set(actual), f"{documented}: the API has {list(actual)}"
    else:
        positional = [p for p in actual if actual[p].kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        assert names == positional[:len(names)], f"{documented}: the API has {list(actual)}"
        required = [p for p in positional if actual[p].default is inspect.Parameter.empty]
        assert set(required) <= set(names), f"{documented} leaves out required {required}"
    for keyword in call.keywords:
        assert actual[keyword.arg].default == ast.literal_eval(keyword.value), (
            f"{documented}: {keyword.arg} defaults to {actual[keyword.arg].default!r}")
