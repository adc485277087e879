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
}

}  // namespace kiln::python
