// SPDX-License-Identifier: Apache-2.0
// kiln.Function, kiln.Module, kiln.Object, load_module and the global function registry.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <set>

#include "bindings.h"
#include "kiln/module.h"

namespace kiln::python {
namespace {

// kiln.Function's tp_call: CPython calls it with the argument tuple directly (no bound method,
// no overload resolution), the cheapest way into C++ short of vectorcall.
PyObject* function_tp_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
      throw nb::type_error("kiln.Function takes positional arguments only");
    }
    const Function& f = *nb::inst_ptr<Function>(self);
    return call_from_python(f, &PyTuple_GET_ITEM(args, 0),
                            static_cast<size_t>(PyTuple_GET_SIZE(args)))
        .release()
        .ptr();
  } catch (...) {
    set_python_error(std::current_exception());
    return nullptr;
  }
}

PyType_Slot kFunctionSlots[] = {{Py_tp_call, reinterpret_cast<void*>(&function_tp_call)},
                                {0, nullptr}};

// The global functions registered from Python (removed again at interpreter exit).
std::set<std::string>& python_registered_names() {
  static std::set<std::string> names;
  return names;
}

// The exporter a file name implies when none is named: "tar" for .tar, else "so".
std::string default_exporter(const std::filesystem::path& path) {
  return path.extension() == ".tar" ? "tar" : "so";
}

}  // namespace

PyObject* shape_tuple_type = nullptr;

void bind_function(nb::module_& m) {
  nb::class_<Function>(m, "Function",
                       "A packed function: call it with Python values (docs/python.md lists the "
                       "conversions); the GIL is released during the call.",
                       nb::type_slots(kFunctionSlots))
      .def_prop_ro("name", &Function::name)
      .def("__repr__", [](const Function& f) { return "<kiln.Function '" + f.name() + "'>"; });

  nb::class_<AnyObject>(m, "Object",
                        "A Kiln value with no Python class of its own (a VM closure or "
                        "storage); it can be passed back to Kiln.")
      .def_prop_ro("type_key",
                   [](const AnyObject& o) {
                     Object* obj = o.value.object();
                     return std::string(obj != nullptr ? obj->type_key() : o.value.type_name());
                   })
      .def("__repr__", [](const AnyObject& o) { return "<kiln.Object " + o.value.str() + ">"; });

  auto module = nb::class_<Module>(
      m, "Module", "A set of functions loaded from a file (kiln.load_module) or made by the VM.");
  def_time_evaluator(
      module, "func_name",
      [](const Module& mod, const std::string& name, Device dev, TimeEvaluatorOptions options) {
        return make_time_evaluator(mod.get_function(name), dev, std::move(options));
      },
      "A kiln.TimeEvaluator that times `func_name` on `dev` as TVM's time_evaluator does: "
      "calling it with the function's arguments makes one warm-up call, then `repeat` batches "
      "of `number` calls (`number` growing while a batch is shorter than `min_repeat_ms`), and "
      "returns a BenchmarkResult in seconds per call.");
  module
      .def("get_function", &Module::get_function, nb::arg("name"),
           "The function `name` of this module or of its imports. kiln.NotFoundError names the "
           "module and lists its functions.")
      .def("__getitem__", &Module::get_function, nb::arg("name"))
      .def("__contains__", &Module::has_function)
      .def(
          "__call__",
          [](const Module& mod, const nb::args& args) {
            return call_from_python(mod.entry(), &PyTuple_GET_ITEM(args.ptr(), 0), args.size());
          },
          // Any, as kiln.Function's calls: what comes back depends on the function.
          nb::sig("def __call__(self, *args: typing.Any) -> typing.Any"),
          "Calls the entry function.")
      .def_prop_ro("entry_name", &Module::entry_name)
      .def_prop_ro("kind", &Module::kind)
      .def_prop_ro("imports", &Module::imports)
      .def("function_names", &Module::function_names)
      .def(
          "export_library",
          [](const Module& mod, const std::string& file_name, std::optional<std::string> exporter) {
            const std::string name = exporter ? *exporter : default_exporter(file_name);
            without_gil([&] { mod.export_library(file_name, name, runtime()); });
          },
          nb::arg("file_name"), nb::arg("exporter") = nb::none(),
          "Writes the module to `file_name` with a named exporter ('tar', 'so', 'ndk', or a "
          "plugin's); by default 'tar' for a .tar name, else 'so'.")
      .def("__repr__", [](const Module& mod) {
        return "<kiln.Module kind='" + mod.kind() + "' entry='" + mod.entry_name() + "'>";
      });

  m.def(
      "load_module",
      [](const std::string& path) {
        return without_gil([&] { return runtime().load_module(path); });
      },
      nb::arg("path"),
      "Loads a module file with the loader for its format: Kiln kernel libraries and packages, "
      "TVM export_library outputs (.so, .tar), VM executables, device code (.cl, .ptx, ...).");

  m.def(
      "register_func",
      [](const std::string& name, const nb::object& f, bool override) -> nb::object {
        auto do_register = [name, override](const nb::object& callable) {
          registry::set(name, function_from_callable(callable, name), override);
          python_registered_names().insert(name);
          return callable;
        };
        if (f.is_none()) return nb::cpp_function(do_register);  // used as a decorator
        return do_register(f);
      },
      nb::arg("name"), nb::arg("f") = nb::none(), nb::arg("override") = false,
      nb::sig("def register_func(name: str, f: collections.abc.Callable[..., typing.Any] | None "
              "= None, override: bool = False) -> collections.abc.Callable[..., typing.Any]"),
      "Registers a Python callable as the global function `name` (for f_preproc, VM "
      "PackedFunc calls, ...). Also a decorator: @kiln.register_func('my.fn').");

  m.def(
      "get_global_func",
      [](const std::string& name, bool allow_missing) -> std::optional<Function> {
        if (allow_missing) return registry::get(name);
        return registry::require(name);
      },
      nb::arg("name"), nb::arg("allow_missing") = false,
      "The global function `name`; None when missing and allow_missing, else NotFoundError.");

  m.def("list_global_func_names", &registry::names, "Every registered global function name.");

  m.def(
      "_unregister_python_functions",
      [] {
        for (const std::string& name : python_registered_names()) registry::remove(name);
        python_registered_names().clear();
        release_held_objects();
      },
      "Internal (atexit): drops the global functions registered from Python and releases every "
      "Python callable a Function holds, which would otherwise outlive the interpreter.");

  m.def(
      "_floor_noop", [] {},
      "Does nothing: the floor of bench/python/call_bench.py (a nanobind call, no conversions).");

  m.def(
      "_set_shape_tuple_type",
      [](nb::handle type) {
        // Borrowed: the kiln package keeps its class for the interpreter's life (a strong
        // reference here would keep the package alive past shutdown).
        shape_tuple_type = type.ptr();
      },
      "Internal: registers kiln.ShapeTuple.");
}

}  // namespace kiln::python
