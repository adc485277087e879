// SPDX-License-Identifier: Apache-2.0
// The "cpu" device backend component: host memory, timers and SDK-built kernel libraries.
#ifndef KILN_PLUGINS_CPU_CPU_DEVICE_H_
#define KILN_PLUGINS_CPU_CPU_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include "kiln/c/device.h"
#include "kiln/sdk/device_backend.hpp"

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
// The members throw kiln::sdk::Error; kiln::sdk::make_device_backend turns them into the slots.
class CpuDevice {
 public:
  static constexpr const char* kErrorContext = "cpu";

  // `state` (borrowed) owns this object and outlives it.
  explicit CpuDevice(PluginState& state) : state_(state) {}

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
  void* timer_create(int32_t device_id);
  void timer_start(void* timer, void* stream);
  void timer_stop(void* timer, void* stream);
  int64_t timer_elapsed_ns(void* timer);
  void timer_destroy(void* timer) noexcept;
  void* module_load(int32_t device_id, const void* data, size_t size, const char* format,
                    const char* metadata_json);
  void* module_get_kernel(void* module, const char* name);
  void module_unload(void* module) noexcept;
  KilnError* launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
                    const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream);

 private:
  PluginState& state_;
};

}  // namespace kiln::cpu

#endif  // KILN_PLUGINS_CPU_CPU_DEVICE_H_
