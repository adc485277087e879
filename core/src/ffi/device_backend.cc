// SPDX-License-Identifier: Apache-2.0
#include "kiln/device_backend.h"

#include <fmt/format.h>

#include "ffi/error_object.h"
#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/logging.h"

namespace kiln {

DeviceBackend::DeviceBackend(const KilnDeviceBackend* table, std::string name,
                             std::string plugin_name, Ref<Object> plugin)
    : table_(table),
      name_(std::move(name)),
      plugin_name_(std::move(plugin_name)),
      plugin_(std::move(plugin)) {}

void DeviceBackend::check(KilnError* err, const char* slot) const {
  if (err == nullptr) [[likely]]
    return;
  ffi::raise_plugin_error(err,
                          fmt::format("{} backend ({}, plugin '{}')", name_, slot, plugin_name_));
}

#define KILN_REQUIRE_SLOT(slot)                                       \
  if (table_->slot == nullptr) {                                      \
    throw UnimplementedError(                                         \
        fmt::format("{} backend from plugin '{}' does not implement " \
                    "'" #slot "'",                                    \
                    name_, plugin_name_));                            \
  }

int32_t DeviceBackend::device_count(std::string* why_none) const {
  KILN_REQUIRE_SLOT(device_count);
  int32_t count = 0;
  const char* why = nullptr;
  check(table_->device_count(table_->self, &count, &why), "device_count");
  if (why_none != nullptr) {
    *why_none = count == 0 ? (why != nullptr ? why : "the plugin reported no devices") : "";
  }
  return count;
}

std::vector<std::pair<std::string, Any>> DeviceBackend::attributes(int32_t id) const {
  std::vector<std::pair<std::string, Any>> out;
  if (table_->device_attributes == nullptr) return out;
  auto visit = [](void* ctx, const char* key, const KilnAny* value) {
    auto* list = static_cast<std::vector<std::pair<std::string, Any>>*>(ctx);
    list->emplace_back(key != nullptr ? key : "", Any::from_abi(*value));
  };
  check(table_->device_attributes(table_->self, id, visit, &out), "device_attributes");
  return out;
}

void* DeviceBackend::alloc(int32_t id, size_t nbytes, size_t alignment) const {
  KILN_REQUIRE_SLOT(alloc);
  void* ptr = nullptr;
  check(table_->alloc(table_->self, id, nbytes, alignment, &ptr), "alloc");
  return ptr;
}

void DeviceBackend::free(int32_t id, void* ptr) const noexcept {
  if (table_->free == nullptr) return;
  if (KilnError* err = table_->free(table_->self, id, ptr)) {
    log(LogLevel::kError, name_, fmt::format("free failed: {}", ffi::release_error(err)));
  }
}

void DeviceBackend::copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset,
                                   size_t nbytes, void* stream) const {
  KILN_REQUIRE_SLOT(copy_to_device);
  check(table_->copy_to_device(table_->self, id, host_src, dst, dst_offset, nbytes, stream),
        "copy_to_device");
}

void DeviceBackend::copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst,
                                 size_t nbytes, void* stream) const {
  KILN_REQUIRE_SLOT(copy_to_host);
  check(table_->copy_to_host(table_->self, id, src, src_offset, host_dst, nbytes, stream),
        "copy_to_host");
}

void DeviceBackend::copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst,
                                   size_t dst_offset, size_t nbytes, void* stream) const {
  KILN_REQUIRE_SLOT(copy_on_device);
  check(table_->copy_on_device(table_->self, id, src, src_offset, dst, dst_offset, nbytes, stream),
        "copy_on_device");
}

void DeviceBackend::synchronize(int32_t id, void* stream) const {
  KILN_REQUIRE_SLOT(synchronize);
  check(table_->synchronize(table_->self, id, stream), "synchronize");
}

bool DeviceBackend::has_timer() const {
  return table_->timer_create && table_->timer_start && table_->timer_stop &&
         table_->timer_elapsed_ns && table_->timer_destroy;
}
bool DeviceBackend::has_streams() const { return table_->stream_create && table_->stream_destroy; }
bool DeviceBackend::has_modules() const {
  return table_->module_load && table_->module_get_kernel && table_->module_unload &&
         table_->launch;
}

void* DeviceBackend::stream_create(int32_t id) const {
  KILN_REQUIRE_SLOT(stream_create);
  void* stream = nullptr;
  check(table_->stream_create(table_->self, id, &stream), "stream_create");
  return stream;
}

void DeviceBackend::stream_destroy(int32_t id, void* stream) const {
  KILN_REQUIRE_SLOT(stream_destroy);
  check(table_->stream_destroy(table_->self, id, stream), "stream_destroy");
}

void* DeviceBackend::timer_create(int32_t id) const {
  KILN_REQUIRE_SLOT(timer_create);
  void* timer = nullptr;
  check(table_->timer_create(table_->self, id, &timer), "timer_create");
  return timer;
}

void DeviceBackend::timer_start(void* timer, void* stream) const {
  KILN_REQUIRE_SLOT(timer_start);
  check(table_->timer_start(table_->self, timer, stream), "timer_start");
}

void DeviceBackend::timer_stop(void* timer, void* stream) const {
  KILN_REQUIRE_SLOT(timer_stop);
  check(table_->timer_stop(table_->self, timer, stream), "timer_stop");
}

int64_t DeviceBackend::timer_elapsed_ns(void* timer) const {
  KILN_REQUIRE_SLOT(timer_elapsed_ns);
  int64_t ns = 0;
  check(table_->timer_elapsed_ns(table_->self, timer, &ns), "timer_elapsed_ns");
  return ns;
}

void DeviceBackend::timer_destroy(void* timer) const noexcept {
  if (table_->timer_destroy != nullptr) table_->timer_destroy(table_->self, timer);
}

void* DeviceBackend::module_load(int32_t id, const void* data, size_t size,
                                 const std::string& format,
                                 const std::string& metadata_json) const {
  KILN_REQUIRE_SLOT(module_load);
  void* module = nullptr;
  check(table_->module_load(table_->self, id, data, size, format.c_str(), metadata_json.c_str(),
                            &module),
        "module_load");
  return module;
}

void* DeviceBackend::module_get_kernel(void* module, const std::string& name) const {
  KILN_REQUIRE_SLOT(module_get_kernel);
  void* kernel = nullptr;
  check(table_->module_get_kernel(table_->self, module, name.c_str(), &kernel),
        "module_get_kernel");
  return kernel;
}

void DeviceBackend::module_unload(void* module) const noexcept {
  if (table_->module_unload != nullptr) table_->module_unload(table_->self, module);
}

void DeviceBackend::launch(void* kernel, const KilnAny* args, int32_t num_args,
                           const uint32_t grid[3], const uint32_t block[3],
                           uint32_t dynamic_shared_bytes, void* stream) const {
  KILN_REQUIRE_SLOT(launch);
  check(table_->launch(table_->self, kernel, args, num_args, grid, block, dynamic_shared_bytes,
                       stream),
        "launch");
}

#undef KILN_REQUIRE_SLOT

}  // namespace kiln
