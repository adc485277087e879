// SPDX-License-Identifier: Apache-2.0
// DeviceBackend: a typed C++ view of a plugin's KilnDeviceBackend table. Slots come back as
// kiln errors; a missing optional slot is reported by the has_*() queries, and calling it
// throws UnimplementedError. Holds its plugin loaded for as long as it lives.
#ifndef KILN_DEVICE_BACKEND_H_
#define KILN_DEVICE_BACKEND_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/any.h"
#include "kiln/c/device.h"
#include "kiln/device.h"
#include "kiln/object.h"

namespace kiln {

class DeviceBackend : public Object {
 public:
  // `table` is owned by the plugin that `plugin` keeps loaded; `name` is the device type name.
  DeviceBackend(const KilnDeviceBackend* table, std::string name, std::string plugin_name,
                Ref<Object> plugin);

  const std::string& name() const { return name_; }
  const std::string& plugin_name() const { return plugin_name_; }
  int32_t dl_device_type() const { return table_->dl_device_type; }
  const KilnDeviceBackend& table() const { return *table_; }

  // Number of devices; `why_none` receives the plugin's reason when it is 0.
  int32_t device_count(std::string* why_none = nullptr) const;
  // The attributes of device `id` in the order the plugin reports them.
  std::vector<std::pair<std::string, Any>> attributes(int32_t id) const;

  void* alloc(int32_t id, size_t nbytes, size_t alignment) const;
  void free(int32_t id, void* ptr) const noexcept;  // logs instead of throwing
  void copy_to_device(int32_t id, const void* host_src, void* dst, size_t dst_offset, size_t nbytes,
                      void* stream = nullptr) const;
  void copy_to_host(int32_t id, const void* src, size_t src_offset, void* host_dst, size_t nbytes,
                    void* stream = nullptr) const;
  void copy_on_device(int32_t id, const void* src, size_t src_offset, void* dst, size_t dst_offset,
                      size_t nbytes, void* stream = nullptr) const;
  void synchronize(int32_t id, void* stream = nullptr) const;

  bool has_timer() const;
  bool has_streams() const;
  bool has_modules() const;

  // Optional slots; each throws UnimplementedError when the plugin lacks it.
  void* stream_create(int32_t id) const;
  void stream_destroy(int32_t id, void* stream) const;
  void* timer_create(int32_t id) const;
  void timer_start(void* timer, void* stream = nullptr) const;
  void timer_stop(void* timer, void* stream = nullptr) const;
  int64_t timer_elapsed_ns(void* timer) const;
  void timer_destroy(void* timer) const noexcept;
  // Loads device code (`data` borrowed); the handle belongs to the plugin until unloaded.
  void* module_load(int32_t id, const void* data, size_t size, const std::string& format,
                    const std::string& metadata_json) const;
  void* module_get_kernel(void* module, const std::string& name) const;
  void module_unload(void* module) const noexcept;
  void launch(void* kernel, const KilnAny* args, int32_t num_args, const uint32_t grid[3],
              const uint32_t block[3], uint32_t dynamic_shared_bytes, void* stream = nullptr) const;

 private:
  void check(KilnError* err, const char* slot) const;
  const KilnDeviceBackend* table_;
  std::string name_;
  std::string plugin_name_;
  Ref<Object> plugin_;
};

}  // namespace kiln

#endif  // KILN_DEVICE_BACKEND_H_
