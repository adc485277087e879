// SPDX-License-Identifier: Apache-2.0
// DeviceContext: what library code needs to reach devices — the backend serving each device
// type and the names of the types. A Runtime is one; code below the Runtime (tensors, the
// evaluator, device code, the VM) takes a DeviceContext so that it never depends on plugin
// loading, and never on a process-wide default.
#ifndef KILN_DEVICE_CONTEXT_H_
#define KILN_DEVICE_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/device.h"
#include "kiln/device_backend.h"
#include "kiln/object.h"

namespace kiln {

class DeviceContext {
 public:
  virtual ~DeviceContext() = default;

  // The backend serving `device_type` (a DLPack code, or a remote type of one of this
  // context's RPC sessions), or null when none does.
  virtual Ref<DeviceBackend> find_backend(int32_t device_type) const = 0;
  // As find_backend, but throws NotFoundError naming the type, the loaded backends and, when
  // a plugin would provide it, why that plugin is not loaded.
  virtual Ref<DeviceBackend> backend(int32_t device_type) const = 0;
  // The device-type names this context knows: the built-in ones and its plugins'.
  virtual const DeviceTypeNames& device_types() const = 0;
  // A shared reference that keeps this context, and everything it serves, alive for as long as
  // it is held: what an object made through the context keeps instead of a reference, so that
  // no destruction order is unsafe (a Runtime returns its shared state, which outlives the
  // user's Runtime handle).
  virtual std::shared_ptr<const DeviceContext> retain() const = 0;

  // Parses "opencl:1" or any name of device_types() (ValueError as DeviceTypeNames::parse).
  Device parse_device(std::string_view text) const { return device_types().parse(text); }
  // "cuda:0", with plugins' type names.
  std::string device_str(Device device) const { return device_types().str(device); }
};

}  // namespace kiln

#endif  // KILN_DEVICE_CONTEXT_H_
