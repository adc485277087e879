#include "opencl_backend.h"

#include <type_traits>
#include <variant>

#include "kiln/sdk/plugin.hpp"
#include "plugin_state.h"

namespace kiln::opencl {
namespace {

// Prefix of this component's error messages.
constexpr const char* kContext = "opencl";

PluginState& state_of(void* self) { return *static_cast<PluginState*>(self); }

void require_out(const void* out, const char* what) {
  if (out == nullptr) throw sdk::Error(KILN_ERROR_VALUE, std::string(what) + " is NULL");
}

// ---- enumeration ----

KilnError* device_count(void* self, int32_t* count, const char** why_none) {
  return sdk::guard(kContext, [&] {
    require_out(count, "device_count: count");
    const Enumeration& e = state_of(self).enumeration();
    *count = static_cast<int32_t>(e.devices.size());
    if (e.devices.empty() && why_none != nullptr) *why_none = e.why_none.c_str();
  });
}

KilnError* device_attributes(void* self, int32_t device_id, KilnAttributeVisitor visit, void* ctx) {
  return sdk::guard(kContext, [&] {
    DeviceRecord& d = state_of(self).device(device_id);
    if (visit == nullptr) throw sdk::Error(KILN_ERROR_VALUE, "device_attributes: visit is NULL");
    for (const DeviceAttribute& a : d.attributes) {
      KilnAny value{};
      std::visit(
          [&](const auto& v) {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, int64_t>) {
              value.type_code = KILN_TYPE_INT;
              value.value.v_int64 = v;
            } else {
              value.type_code = KILN_TYPE_STRING;
              value.value.v_str = v.c_str();
            }
          },
          a.value);
      visit(ctx, a.key.c_str(), &value);
    }
  });
}

// ---- memory ----

KilnError* alloc(void* self, int32_t device_id, size_t nbytes, size_t alignment, void** out) {
  return sdk::guard(kContext, [&] {
    require_out(out, "alloc: out");
    *out = state_of(self).alloc(device_id, nbytes, alignment);
  });
}

KilnError* free_memory(void* self, int32_t device_id, void* ptr) {
  return sdk::guard(kContext, [&] { state_of(self).free(device_id, ptr); });
}

KilnError* copy_to_device(void* self, int32_t device_id, const void* host_src, void* dst,
                          size_t dst_offset, size_t nbytes, void* stream) {
  return sdk::guard(kContext, [&] {
    state_of(self).copy_to_device(device_id, host_src, dst, dst_offset, nbytes, stream);
  });
}

KilnError* copy_to_host(void* self, int32_t device_id, const void* src, size_t src_offset,
                        void* host_dst, size_t nbytes, void* stream) {
  return sdk::guard(kContext, [&] {
    state_of(self).copy_to_host(device_id, src, src_offset, host_dst, nbytes, stream);
  });
}

KilnError* copy_on_device(void* self, int32_t device_id, const void* src, size_t src_offset,
                          void* dst, size_t dst_offset, size_t nbytes, void* stream) {
  return sdk::guard(kContext, [&] {
    state_of(self).copy_on_device(device_id, src, src_offset, dst, dst_offset, nbytes, stream);
  });
}

// ---- streams ----

KilnError* synchronize(void* self, int32_t device_id, void* stream) {
  return sdk::guard(kContext, [&] { state_of(self).synchronize(device_id, stream); });
}

KilnError* stream_create(void* self, int32_t device_id, void** stream) {
  return sdk::guard(kContext, [&] {
    require_out(stream, "stream_create: stream");
    *stream = state_of(self).stream_create(device_id);
  });
}

KilnError* stream_destroy(void* self, int32_t device_id, void* stream) {
  return sdk::guard(kContext, [&] { state_of(self).stream_destroy(device_id, stream); });
}

// ---- timers ----

KilnError* timer_create(void* self, int32_t device_id, void** timer) {
  return sdk::guard(kContext, [&] {
    require_out(timer, "timer_create: timer");
    *timer = state_of(self).timer_create(device_id);
  });
}

KilnError* timer_start(void* self, void* timer, void* stream) {
  return sdk::guard(kContext, [&] { state_of(self).timer_mark(timer, stream, true); });
}

KilnError* timer_stop(void* self, void* timer, void* stream) {
  return sdk::guard(kContext, [&] { state_of(self).timer_mark(timer, stream, false); });
}

KilnError* timer_elapsed_ns(void* self, void* timer, int64_t* ns) {
  return sdk::guard(kContext, [&] {
    require_out(ns, "timer_elapsed_ns: ns");
    *ns = state_of(self).timer_elapsed_ns(timer);
  });
}

void timer_destroy(void* self, void* timer) { state_of(self).timer_destroy(timer); }

// ---- device code ----

KilnError* module_load(void* self, int32_t device_id, const void* data, size_t size,
                       const char* format, const char* metadata_json, void** module) {
  return sdk::guard(kContext, [&] {
    require_out(module, "module_load: module");
    *module = state_of(self).module_load(device_id, data, size, format, metadata_json);
  });
}

KilnError* module_get_kernel(void* self, void* module, const char* name, void** kernel) {
  return sdk::guard(kContext, [&] {
    require_out(kernel, "module_get_kernel: kernel");
    *kernel = state_of(self).module_get_kernel(module, name);
  });
}

void module_unload(void* self, void* module) { state_of(self).module_unload(module); }

KilnError* launch(void* self, void* kernel, const KilnAny* args, int32_t num_args,
                  const uint32_t grid[3], const uint32_t block[3], uint32_t dynamic_shared_bytes,
                  void* stream) {
  return sdk::guard(kContext, [&] {
    state_of(self).launch(kernel, args, num_args, grid, block, dynamic_shared_bytes, stream);
  });
}

}  // namespace

KilnDeviceBackend make_device_backend(PluginState* state) {
  KilnDeviceBackend b = sdk::make_table<KilnDeviceBackend>();
  b.self = state;
  b.dl_device_type = kDLOpenCL;
  b.device_count = &device_count;
  b.device_attributes = &device_attributes;
  b.alloc = &alloc;
  b.free = &free_memory;
  b.copy_to_device = &copy_to_device;
  b.copy_to_host = &copy_to_host;
  b.copy_on_device = &copy_on_device;
  b.synchronize = &synchronize;
  b.stream_create = &stream_create;
  b.stream_destroy = &stream_destroy;
  b.timer_create = &timer_create;
  b.timer_start = &timer_start;
  b.timer_stop = &timer_stop;
  b.timer_elapsed_ns = &timer_elapsed_ns;
  b.timer_destroy = &timer_destroy;
  b.module_load = &module_load;
  b.module_get_kernel = &module_get_kernel;
  b.module_unload = &module_unload;
  b.launch = &launch;
  return b;
}

}  // namespace kiln::opencl
