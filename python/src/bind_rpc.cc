// Placeholder while the bindings are written (not committed in this form).
#include "bindings.h"

namespace kiln::python {
void bind_rpc(nb::module_&) {}
}  // namespace kiln::python
