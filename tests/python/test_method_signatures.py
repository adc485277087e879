# SPDX-License-Identifier: Apache-2.0
"""inspect.signature on the methods of the package's classes (issue 35, item 8): help(kiln)
promises signatures, and kiln.Tensor.copyfrom or mod.time_evaluator used to raise ValueError
("no signature found for builtin"). The methods stay nanobind's own objects (no Python layer on
a call); nanobind's function types get a __signature__ property (kiln/_signatures.py,
python/src/bind_signatures.cc)."""

import inspect
import pydoc

import pytest

import kiln
import kiln.profiling
import kiln.rpc
import kiln.testing
import kiln.vm
from kiln import _signatures
from conftest import example_kernel

PUBLIC_MODULES = [kiln, kiln.testing, kiln.rpc, kiln.profiling, kiln.vm]


def nanobind_methods():
    """(class, name) of every method nanobind defines on a public class of the package."""
    found, seen = [], set()
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            cls = getattr(module, name)
            if not isinstance(cls, type) or cls in seen:
                continue
            seen.add(cls)
            for attribute, value in vars(cls).items():
                if type(value).__name__ == "nb_method":
                    found.append((cls, attribute))
    return found


METHODS = nanobind_methods()


def test_there_are_methods_to_check():
    names = {f"{cls.__name__}.{name}" for cls, name in METHODS}
    assert {"Tensor.copyfrom", "Tensor.numpy", "Module.time_evaluator"} <= names


@pytest.mark.parametrize("cls, name", METHODS,
                         ids=[f"{cls.__name__}.{name}" for cls, name in METHODS])
def test_every_method_has_its_nanobind_signature(cls, name):
    method = getattr(cls, name)
    if len(method.__nb_signature__) != 1:
        # Overloads (Device.__eq__, RPCSession.device): one Signature cannot describe them, and
        # inspect says so as it does for any builtin without one.
        with pytest.raises(ValueError, match="no signature found"):
            inspect.signature(method)
        return
    signature = inspect.signature(method)
    assert signature == _signatures.nb_signature(method)
    assert next(iter(signature.parameters)) == "self"


def test_tensor_methods():
    t = kiln.empty((4,), "float32")
    assert str(inspect.signature(kiln.Tensor.copyfrom)).startswith("(self, source")
    # Bound to a tensor: without self, as inspect shows a Python method.
    assert list(inspect.signature(t.copyfrom).parameters) == ["source"]
    assert list(inspect.signature(t.numpy).parameters) == []
    assert list(inspect.signature(t.copyto).parameters) == ["target"]


def test_module_methods():
    mod = kiln.load_module(example_kernel("vector_add"))
    signature = inspect.signature(mod.time_evaluator)
    assert list(signature.parameters)[:2] == ["func_name", "dev"]
    assert signature.parameters["number"].default == 10
    assert signature.parameters["repeat"].default == 1
    # The signature binds the arguments a call takes.
    signature.bind("vadd", kiln.cpu(0), number=3)
    with pytest.raises(TypeError):
        signature.bind("vadd", kiln.cpu(0), numbr=3)


def test_static_methods():
    signature = inspect.signature(kiln.BenchmarkResult.from_json)
    assert list(signature.parameters) == ["text"]


def test_help_shows_method_parameters():
    text = pydoc.render_doc(kiln.Tensor, renderer=pydoc.plaintext)
    assert "copyfrom(self, source" in text


def test_methods_stay_nanobind_objects():
    """No Python layer on a method call: the class holds nanobind's method, and its type (not
    the method) carries the property."""
    assert type(vars(kiln.Tensor)["copyfrom"]).__name__ == "nb_method"
    assert type(kiln.empty((1,), "float32").copyfrom).__name__ == "nb_bound_method"
    assert isinstance(vars(type(vars(kiln.Tensor)["copyfrom"]))["__signature__"], property)


def test_other_functions_keep_what_they_had():
    """The property answers AttributeError (inspect's usual way) for a function that is not
    Kiln's: nanobind's types are shared with other nanobind extensions in the process."""

    class Foreign:
        __module__ = "other_extension"

    with pytest.raises(AttributeError):
        _signatures._function_signature(Foreign())


def test_the_setter_refuses_other_types():
    with pytest.raises(TypeError, match="nanobind function"):
        kiln._kiln._set_signature_property(len, property(lambda self: None))
