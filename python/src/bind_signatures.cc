// SPDX-License-Identifier: Apache-2.0
// inspect.signature for the methods of the extension's classes (kiln/_signatures.py). nanobind's
// function objects (types nanobind.nb_func, nb_method, nb_bound_method) describe their
// parameters only in __nb_signature__ and take no attributes, and their types are immutable to
// Python (type.__setattr__ refuses), so the package's `__signature__` property is put into
// those types' dictionaries from here. A call costs nothing more: only a lookup of
// `__signature__` finds the property.
#include <string>
#include <string_view>

#include "bindings.h"

namespace kiln::python {

void bind_signatures(nb::module_& m) {
  m.def(
      "_set_signature_property",
      [](nb::handle function, nb::handle property) {
        PyTypeObject* type = Py_TYPE(function.ptr());
        const std::string_view name = type->tp_name;
        if (name != "nanobind.nb_func" && name != "nanobind.nb_method" &&
            name != "nanobind.nb_bound_method") {
          throw nb::type_error(("expected a nanobind function, method or bound method, got a '" +
                                std::string(name) + "'")
                                   .c_str());
        }
        if (PyDict_SetItemString(type->tp_dict, "__signature__", property.ptr()) != 0) {
          throw nb::python_error();
        }
        PyType_Modified(type);  // attribute caches forget the type's old dictionary
      },
      nb::arg("function"), nb::arg("property"),
      "Internal: makes `property` the __signature__ of every object of the type of `function` "
      "(a nanobind function, method or bound method); kiln/_signatures.py.");
}

}  // namespace kiln::python
