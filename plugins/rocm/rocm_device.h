// The "rocm" device backend component (dl_device_type kDLROCM = 10).
#ifndef KILN_PLUGINS_ROCM_ROCM_DEVICE_H_
#define KILN_PLUGINS_ROCM_ROCM_DEVICE_H_

#include "kiln/c/device.h"

namespace kiln::rocm {

class PluginState;

// The KilnDeviceBackend table with `state` (borrowed; it owns the table) as `self`. The HIP
// runtime is loaded on the first call of any slot (device_count normally), never during
// negotiation. With no runtime or no device, device_count reports 0 and the reason, and every
// other slot fails with KILN_ERROR_UNAVAILABLE and that reason. Memory comes from hipMalloc;
// copies are hipMemcpyAsync on the given stream (NULL: the device's null stream), so they are
// ordered with kernels on it (HIP performs copies from or to pageable host memory synchronously
// with the host, so a host source can be reused as soon as the call returns); streams are HIP
// streams; timers are pairs of HIP events (start and stop only record, elapsed waits for stop);
// modules are "hsaco" code objects or bundles and "hip_source" (docs/backends/rocm.md).
KilnDeviceBackend make_device_backend(PluginState* state);

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_ROCM_DEVICE_H_
