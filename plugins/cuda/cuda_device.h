// SPDX-License-Identifier: Apache-2.0
// The cuda device backend component (docs/plugin-abi.md §10.1, docs/backends/cuda.md).
#ifndef KILN_PLUGINS_CUDA_CUDA_DEVICE_H_
#define KILN_PLUGINS_CUDA_CUDA_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include "kiln/c/kiln.h"
#include "kiln/sdk/device_backend.hpp"

namespace kiln::cuda {

class PluginState;

// The "cuda" device backend (kDLCUDA), every slot filled: kiln::sdk::make_device_backend
// builds its table. Members throw kiln::sdk::Error (VALUE for bad arguments, INDEX /
// UNAVAILABLE for devices, OUT_OF_MEMORY, and the driver's errors naming the call).
class CudaDevice {
 public:
  static constexpr const char* kErrorContext = "cuda";

  // `state` (borrowed) owns this object and outlives it.
  explicit CudaDevice(PluginState& state) : state_(state) {}

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

}  // namespace kiln::cuda

#endif  // KILN_PLUGINS_CUDA_CUDA_DEVICE_H_
