// SPDX-License-Identifier: Apache-2.0
// The extension module kiln._kiln: each concept's bindings, in dependency order.
#include "bindings.h"
#include "kiln/version.h"

NB_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's core, for the kiln package (import kiln, not this module).";
  // libkiln's version: the wheel's metadata takes the same number from CMakeLists.txt.
  m.attr("__version__") = kiln::version();
  m.attr("__abi_version__") = kiln::abi_version();
  register_errors(m);
  bind_device(m);
  bind_tensor(m);
  bind_function(m);
  bind_evaluator(m);
  bind_testing(m);
  bind_vm(m);
  bind_profiling(m);
  bind_rpc(m);
  bind_llm(m);
  bind_signatures(m);
}
