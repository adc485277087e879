// The device backends behind remote devices (kiln/device.h kRemoteDeviceMask): each RPC
// session serves the devices whose type carries its index.
#ifndef KILN_SRC_RPC_REMOTE_BACKEND_H_
#define KILN_SRC_RPC_REMOTE_BACKEND_H_

#include <cstdint>

#include "kiln/device_backend.h"
#include "kiln/object.h"

namespace kiln::rpc::detail {

// The backend of remote device type `device_type` (>= kRemoteDeviceMask). Throws
// NotFoundError when its session was never opened in this process or is closed.
Ref<DeviceBackend> remote_backend(int32_t device_type);

}  // namespace kiln::rpc::detail

#endif  // KILN_SRC_RPC_REMOTE_BACKEND_H_
