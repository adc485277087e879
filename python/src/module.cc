// The extension module kiln._kiln: each concept's bindings, in dependency order.
#include "bindings.h"

NB_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's core, for the kiln package (import kiln, not this module).";
  register_errors(m);
  bind_device(m);
  bind_tensor(m);
  bind_function(m);
  bind_evaluator(m);
  bind_testing(m);
  bind_vm(m);
  bind_profiling(m);
  bind_rpc(m);
}
