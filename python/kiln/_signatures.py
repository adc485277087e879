# SPDX-License-Identifier: Apache-2.0
"""inspect.signature for what the extension (kiln._kiln) defines.

nanobind's functions describe their parameters only in ``__nb_signature__`` (the text the type
stubs are generated from), which inspect does not read, and they take no attributes. So:

* the package's public module-level functions (kiln.empty, kiln.load_module, ...) are small
  Python functions with the extension function's parameters and defaults that call it
  (python_function: one Python call more, about 50 ns);
* its classes get a ``__signature__`` read from their constructor's ``__nb_signature__``
  (add_constructor_signatures);
* the methods of its classes (``kiln.Tensor.copyfrom``, ``mod.time_evaluator``, ...) stay
  nanobind's own objects: nothing is added to the calls that are timed. nanobind's method and
  bound-method types get a ``__signature__`` property instead (add_method_signatures), which
  only a lookup of that name runs.
"""

import ast
import inspect
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def _default_value(node: ast.expr, defaults: tuple, where: str) -> Any:
    """The default that `node` (in a nanobind signature) stands for: a literal, or a value of
    the function's defaults tuple (``\\N`` in the text, renamed _nb_default_N for the parser)."""
    if isinstance(node, ast.Name) and node.id.startswith("_nb_default_"):
        return defaults[int(node.id[len("_nb_default_"):])]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{where}: the default {ast.unparse(node)} is not a literal") from None


def nb_signature(function: Any) -> inspect.Signature:
    """The inspect.Signature of a nanobind function or method (self included), from its
    ``__nb_signature__``; annotations are the stubs' type names as strings. ValueError for an
    overloaded function (a Signature describes one) or a text that does not parse."""
    where = getattr(function, "__qualname__", repr(function))
    overloads = function.__nb_signature__
    if len(overloads) != 1:
        raise ValueError(f"{where} has {len(overloads)} overloads: no single signature")
    text, _doc, defaults = overloads[0]
    defaults = defaults or ()
    # nanobind names a numpy array of any dtype and shape "numpy.ndarray[]", which is not Python.
    text = text.replace("ndarray[]", "ndarray")
    for index in reversed(range(len(defaults))):  # \10 before \1
        text = text.replace(f"\\{index}", f"_nb_default_{index}")
    try:
        tree = ast.parse(text + ": ...")
    except SyntaxError as error:
        raise ValueError(f"{where}: cannot parse its signature {text!r}: {error}") from None
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef)
    arguments = definition.args

    def annotation(node: "ast.expr | None") -> Any:
        return inspect.Parameter.empty if node is None else ast.unparse(node)

    def default(node: "ast.expr | None") -> Any:
        return inspect.Parameter.empty if node is None else _default_value(node, defaults, where)

    parameters = []
    positional = arguments.posonlyargs + arguments.args
    positional_defaults: "list[ast.expr | None]" = [None] * (len(positional)
                                                             - len(arguments.defaults))
    positional_defaults += arguments.defaults
    for i, (arg, value) in enumerate(zip(positional, positional_defaults)):
        kind = (inspect.Parameter.POSITIONAL_ONLY if i < len(arguments.posonlyargs)
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters.append(inspect.Parameter(arg.arg, kind, default=default(value),
                                            annotation=annotation(arg.annotation)))
    if arguments.vararg is not None:
        parameters.append(inspect.Parameter(arguments.vararg.arg,
                                            inspect.Parameter.VAR_POSITIONAL,
                                            annotation=annotation(arguments.vararg.annotation)))
    for arg, value in zip(arguments.kwonlyargs, arguments.kw_defaults):
        parameters.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                            default=default(value),
                                            annotation=annotation(arg.annotation)))
    if arguments.kwarg is not None:
        parameters.append(inspect.Parameter(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD,
                                            annotation=annotation(arguments.kwarg.annotation)))
    return inspect.Signature(parameters,
                             return_annotation=annotation(definition.returns))


class _Source:
    """A value that prints as the Python source `text` (for str(inspect.Signature))."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def python_function(function: _F, module: str) -> _F:
    """A Python function of module `module` with the parameters and defaults of the nanobind
    function `function`, calling it with its arguments (positionally where it can, so no dict
    is made). Its name, doc and ``__signature__`` are `function`'s; ``__wrapped__`` is
    `function`."""
    nb_function: Any = function
    try:
        signature = nb_signature(nb_function)
    except ValueError:
        return function  # as it is, not introspectable (tests/python/test_types.py says which)
    namespace: "dict[str, Any]" = {"_function": nb_function}
    # How the call passes each kind of parameter on.
    forms: "dict[Any, str]" = {inspect.Parameter.VAR_POSITIONAL: "*{0}",
                               inspect.Parameter.KEYWORD_ONLY: "{0}={0}",
                               inspect.Parameter.VAR_KEYWORD: "**{0}"}
    parameters, arguments = [], []
    for parameter in signature.parameters.values():
        default = parameter.default
        if default is not inspect.Parameter.empty:
            name = f"_default_{len(namespace)}"
            namespace[name] = default
            default = _Source(name)
        parameters.append(parameter.replace(default=default,
                                            annotation=inspect.Parameter.empty))
        arguments.append(forms.get(parameter.kind, "{0}").format(parameter.name))
    name = nb_function.__name__
    header = str(signature.replace(parameters=parameters,
                                   return_annotation=inspect.Signature.empty))
    source = f"def {name}{header}:\n    return _function({', '.join(arguments)})\n"
    exec(compile(source, f"<kiln: {module}.{name}>", "exec"), namespace)
    wrapper = namespace[name]
    wrapper.__module__ = module
    wrapper.__qualname__ = name
    wrapper.__doc__ = nb_function.__nb_signature__[0][1]  # without nanobind's signature line
    wrapper.__signature__ = signature
    wrapper.__wrapped__ = nb_function
    return wrapper


class _ConstructorSignature:
    """A nanobind class's ``__signature__``: its ``__init__``'s, without self. Instances and
    Python subclasses with an ``__init__`` of their own see none (AttributeError), so inspect
    goes its usual way for them."""

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        init = getattr(owner, "__init__", None)
        if instance is not None or not hasattr(init, "__nb_signature__"):
            raise AttributeError("__signature__")
        signature = nb_signature(init)
        return signature.replace(parameters=list(signature.parameters.values())[1:],
                                 return_annotation=inspect.Signature.empty)


def _constructor(cls: type) -> tuple:
    """What makes an instance of `cls`: its __init__ and __new__ as found on the class."""
    return getattr(cls, "__init__"), getattr(cls, "__new__")


class _ExceptionSignature:
    """An exception class's ``__signature__``: ``(*args)``, as BaseException takes (inspect
    has none for exception classes made in C). Subclasses with an ``__init__`` or ``__new__``
    of their own see none."""

    def __init__(self, cls: type) -> None:
        self.constructor = _constructor(cls)

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        if instance is not None or _constructor(owner) != self.constructor:
            raise AttributeError("__signature__")
        return inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])


def add_constructor_signatures(module: Any) -> None:
    """Gives every class of the extension module `module` that has a constructor a
    ``__signature__``: the nanobind classes with one (those Python code cannot construct keep
    none) and the exception classes."""
    for value in vars(module).values():
        if not isinstance(value, type):
            continue
        if issubclass(value, BaseException):
            value.__signature__ = _ExceptionSignature(value)  # type: ignore[attr-defined]
        elif hasattr(vars(value).get("__init__"), "__nb_signature__"):
            value.__signature__ = _ConstructorSignature()  # type: ignore[attr-defined]


def _is_kiln_function(function: Any) -> bool:
    """Whether the nanobind function `function` is the extension's (its module is kiln._kiln,
    or kiln for the classes it names so) and not another nanobind extension's in this
    process."""
    module = getattr(function, "__module__", None)
    return isinstance(module, str) and (module == "kiln" or module.startswith("kiln."))


def _function_signature(function: Any) -> inspect.Signature:
    """The ``__signature__`` of a nanobind function, method or bound method of Kiln's (the
    property that add_method_signatures gives their types): its ``__nb_signature__``'s, without
    self when bound, as inspect shows a Python method. AttributeError, so that inspect goes its
    usual way, for another extension's functions and for one with no single signature
    (overloads)."""
    bound = type(function).__name__ == "nb_bound_method"
    target = function.__func__ if bound else function
    if not _is_kiln_function(target):
        raise AttributeError("__signature__")
    try:
        signature = nb_signature(target)
    except ValueError:
        raise AttributeError("__signature__") from None
    if bound:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return signature


def add_method_signatures(module: Any, *examples: Any) -> None:
    """Gives the methods of the extension module `module`'s classes (and its static methods and
    functions) an inspect.signature: `examples` are one object of each of nanobind's function
    types (a function, a method as found on its class, a method bound to an object), and each of
    these types gets the ``__signature__`` property _function_signature. The extension sets it
    (_set_signature_property): Python cannot change nanobind's types."""
    signature = property(_function_signature)
    for example in examples:
        module._set_signature_property(example, signature)
