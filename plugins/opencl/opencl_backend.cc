// SPDX-License-Identifier: Apache-2.0
// The "opencl" device table: its slots are members of PluginState that forward to the concept
// owning each (plugin_state.h lists them). The table is built here, beside the slots, so the
// forwarders inline into kiln::sdk::make_device_backend's trampolines
// (kiln/sdk/device_backend.hpp).
#include "kiln/sdk/device_backend.hpp"
#include "plugin_state.h"

namespace kiln::opencl {

KilnDeviceBackend PluginState::make_device_table() {
  return sdk::make_device_backend(this, kDLOpenCL);
}

// ---- devices ----

int32_t PluginState::device_count(const char** why_none) { return devices_->count(why_none); }

void PluginState::device_attributes(int32_t id, const sdk::AttributeVisitor& visit) {
  devices_->visit_attributes(id, visit);
}

// ---- memory and copies ----

void* PluginState::alloc(int32_t id, size_t nbytes, size_t alignment) {
  return memory_->alloc(id, nbytes, alignment);
}

void PluginState::free(int32_t id, void* ptr) { memory_->free(id, ptr); }

void PluginState::copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset,
                                 size_t nbytes, void* stream) {
  memory_->copy_to_device(id, host_src, dst, dst_offset, nbytes, stream);
}

void PluginState::copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst,
                               size_t nbytes, void* stream) {
  memory_->copy_to_host(id, src, src_offset, host_dst, nbytes, stream);
}

void PluginState::copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst,
                                 size_t dst_offset, size_t nbytes, void* stream) {
  memory_->copy_on_device(id, src, src_offset, dst, dst_offset, nbytes, stream);
}

// ---- streams ----

void PluginState::synchronize(int32_t id, void* stream) { queues_->synchronize(id, stream); }

void* PluginState::stream_create(int32_t id) { return queues_->stream_create(id); }

void PluginState::stream_destroy(int32_t id, void* stream) { queues_->stream_destroy(id, stream); }

// ---- timers ----

void* PluginState::timer_create(int32_t id) { return timers_->create(id); }

void PluginState::timer_start(void* timer, void* stream) { timers_->start(timer, stream); }

void PluginState::timer_stop(void* timer, void* stream) { timers_->stop(timer, stream); }

int64_t PluginState::timer_elapsed_ns(void* timer) { return timers_->elapsed_ns(timer); }

void PluginState::timer_destroy(void* timer) noexcept { timers_->destroy(timer); }

// ---- device code ----

void* PluginState::module_load(int32_t id, const void* data, size_t size, const char* format,
                               const char* metadata_json) {
  return modules_->load(id, data, size, format, metadata_json);
}

void* PluginState::module_get_kernel(void* module, const char* name) {
  return modules_->get_kernel(module, name);
}

void PluginState::module_unload(void* module) noexcept { modules_->unload(module); }

void PluginState::launch(void* kernel, const KilnAny* args, int32_t num_args,
                         const uint32_t grid[3], const uint32_t block[3],
                         uint32_t dynamic_shared_bytes, void* stream) {
  launcher_->launch(kernel, args, num_args, grid, block, dynamic_shared_bytes, stream);
}

}  // namespace kiln::opencl
