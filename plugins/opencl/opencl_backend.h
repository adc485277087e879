// The opencl device backend table: C slots that turn PluginState's exceptions into KilnErrors.
#ifndef KILN_PLUGINS_OPENCL_OPENCL_BACKEND_H_
#define KILN_PLUGINS_OPENCL_OPENCL_BACKEND_H_

#include "kiln/c/kiln.h"

namespace kiln::opencl {

class PluginState;

// The backend table for `state` (its `self`), with every slot set; dl_device_type kDLOpenCL.
KilnDeviceBackend make_device_backend(PluginState* state);

}  // namespace kiln::opencl

#endif  // KILN_PLUGINS_OPENCL_OPENCL_BACKEND_H_
