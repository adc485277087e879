// The "cpu" device backend component: host memory, timers and SDK-built kernel libraries.
#ifndef KILN_PLUGINS_CPU_CPU_DEVICE_H_
#define KILN_PLUGINS_CPU_CPU_DEVICE_H_

#include "kiln/c/device.h"

namespace kiln::cpu {

class PluginState;

// The smallest alignment alloc() hands out: a cache line, which also satisfies every SIMD
// load the example kernels use.
inline constexpr size_t kMinAlignment = 64;

// The KilnDeviceBackend table of the "cpu" component (dl_device_type kDLCPU), with `state`
// (borrowed; it owns the table) as `self`. One device, id 0; any other id is a
// KILN_ERROR_INDEX error naming the id and the count. Work is synchronous, so synchronize is
// a no-op and there are no streams (stream_create/destroy are NULL; any stream argument is
// ignored). Memory is posix_memalign()ed at max(alignment, kMinAlignment); timers read
// std::chrono::steady_clock. module_load accepts format "so" only (the bytes of a kernel
// library, loaded through a memory file); a module's kernels are its KilnKernelFunctions and
// launch calls them directly, ignoring grid and block (see launch in cpu_device.cc).
KilnDeviceBackend make_device_backend(PluginState* state);

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_CPU_DEVICE_H_
