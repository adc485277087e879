// SPDX-License-Identifier: Apache-2.0
// kiln's LLM runtime (docs/llm.md): the VM builtins a model library compiled the MLC way calls
// are registered when the package is imported, bound to the package's runtime.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "kiln/llm/builtins.h"
#include "kiln/runtime.h"

namespace kiln::python {

void bind_llm(nb::module_& m) {
  llm::register_builtins(Runtime::global());
  m.def("_llm_builtin_names", &llm::builtin_names,
        "The names of the LLM runtime's VM builtins, sorted.");
  // A model's weights are one tuple passed to every call: made into the VM's array once and kept
  // as an opaque kiln.Object, so that no call converts the tuple again.
  m.def(
      "_as_vm_array",
      [](const nb::tuple& items) {
        Any array = to_any(items, "_as_vm_array");
        return AnyObject{array};
      },
      nb::arg("items"), "The VM array of `items`, as an opaque kiln.Object.");
}

}  // namespace kiln::python
