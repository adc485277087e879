// SPDX-License-Identifier: Apache-2.0
// The "rocm" device backend component (dl_device_type kDLROCM = 10).
#ifndef KILN_PLUGINS_ROCM_ROCM_DEVICE_H_
#define KILN_PLUGINS_ROCM_ROCM_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include "kiln/c/device.h"
#include "kiln/sdk/device_backend.hpp"

namespace kiln::rocm {

class PluginState;

// The "rocm" device backend; kiln::sdk::make_device_backend builds its table. The HIP
// runtime is loaded on the first call of any slot (device_count normally), never during
// negotiation. With no runtime or no device, device_count reports 0 and the reason, and every
// other slot fails with KILN_ERROR_UNAVAILABLE and that reason. Memory comes from hipMalloc;
// copies are hipMemcpyAsync on the given stream (NULL: the device's null stream), so they are
// ordered with kernels on it (HIP performs copies from or to pageable host memory synchronously
// with the host, so a host source can be reused as soon as the call returns); streams are HIP
// streams; timers are pairs of HIP events (start and stop only record, elapsed waits for stop);
// modules are "hsaco" code objects or bundles and "hip_source" (docs/backends/rocm.md).
// Members throw kiln::sdk::Error (VALUE for bad arguments, UNAVAILABLE / INDEX for devices, the
// HIP error naming the call otherwise).
class RocmDevice {
 public:
  static constexpr const char* kErrorContext = "rocm";

  // `state` (borrowed) owns this object and outlives it.
  explicit RocmDevice(PluginState& state) : state_(state) {}

  int32_t device_count(const char** why_none);
  void device_attributes(int32_t device_id, const sdk::AttributeVisitor& visit);
  void* alloc(int32_t device_id, size_t nbytes, size_t alignment);
  void free(int32_t device_id, void* ptr);
  void copy_to_device(int32_t device_id, const void* host_src, void* dst, size_t dst_offset,
                      size_t nbytes, void* stream);
  void copy_to_host(int32_t device_id, const void* src, size_t src_offset, void* host_dst,
                    size_t nbytes, void* stream);
  void copy_on_device(int32_t device_id, const void* src, size_t src_offset, void* dst,
                      size_t dst_offset, size_t nbytes, void* stream);
  void synchronize(int32_t device_id, void* stream);
  void* stream_create(int32_t device_id);
  void stream_destroy(int32_t device_id, void* stream);
  void* timer_create(int32_t device_id);
  void timer_start(void* timer, void* stream);
  void timer_stop(void* timer, void* stream);
  int64_t timer_elapsed_ns(void* timer);
  void timer_destroy(void* timer) noexcept;
  void* module_load(int32_t device_id, const void* data, size_t size, const char* format,
                    const char* metadata_json);
  void* module_get_kernel(void* module, const char* name);
  void module_unload(void* module) noexcept;
  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream);

 private:
  PluginState& state_;
};

}  // namespace kiln::rocm

#endif  // KILN_PLUGINS_ROCM_ROCM_DEVICE_H_
